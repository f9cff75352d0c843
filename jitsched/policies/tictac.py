"""TicTac (Hashemi et al., SysML 2019): FIFO across jobs, TAC (or TIC) transfer order inside a job, strict priority."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from jitsched.dag.model import COMPUTE, TRANSFER, DagArrays
from jitsched.errors import ValidationError
from jitsched.optspec import check_choice, option
from jitsched.plan.alloc import priority_greedy
from jitsched.plan.planner import DEFAULT_SLOT_S
from jitsched.policies.base import Allocation, Policy, SchedulerView, SlotSchedule, register_policy
from jitsched.policies.common import (
    check_bg_floor,
    check_slot_s,
    floored_background_shares,
    ranked_schedule,
    unfinished_transfers,
)
from jitsched.policies.tensorflow import pair_maxmin

MODES = ("auto", "tac", "tic")
# TAC's tie-break (M+) compares summed communication times to this many seconds
TIE_QUANTUM_S = 1e-12
NONE = np.iinfo(np.int64).max  # M+ of a transfer no op waits on
BACKGROUNDS = ("fair", "fifo", "last")


def _dependencies(dag: DagArrays, job: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each compute op's set of transfer ancestors in job ``job``.

    Returns
    -------
    transfers : ndarray of int64, shape (T,)
        The job's transfer nodes (global indices, node order).
    dep : ndarray of bool, shape (C, T)
        ``dep[i, j]``: compute ``computes[i]`` depends (transitively) on ``transfers[j]``.
    computes : ndarray of int64, shape (C,)
    """
    lo, hi = int(dag.job_ptr[job]), int(dag.job_ptr[job + 1])
    local = np.arange(lo, hi)
    transfers = local[dag.kind[lo:hi] == TRANSFER]
    computes = local[dag.kind[lo:hi] == COMPUTE]
    col = np.full(hi - lo, -1, dtype=np.int64)
    col[transfers - lo] = np.arange(len(transfers))
    anc = np.zeros((hi - lo, len(transfers)), dtype=bool)
    topo = dag.topo[(dag.topo >= lo) & (dag.topo < hi)]
    pred_ptr, pred_idx = dag.pred_ptr, dag.pred_idx
    for v in topo.tolist():
        row = anc[v - lo]
        for e in range(pred_ptr[v], pred_ptr[v + 1]):
            row |= anc[pred_idx[e] - lo]
        if col[v - lo] >= 0:
            row[col[v - lo]] = True
    return transfers, anc[computes - lo], computes


def transfer_times(dag: DagArrays, cluster, nodes: np.ndarray) -> np.ndarray:
    """TicTac's communication time ``M`` of the transfer nodes ``nodes``: bytes over the
    slower of their source's egress and destination's ingress, seconds; zero elsewhere.

    Returns
    -------
    ndarray, shape (n_nodes,)
    """
    comm = np.zeros(dag.n_nodes)
    comm[nodes] = dag.size[nodes] / np.minimum(cluster.egress_Bps[dag.src[nodes]],
                                               cluster.ingress_Bps[dag.dst[nodes]])
    return comm


def tictac_order(dag: DagArrays, job: int, comm_s: np.ndarray, mode: str = "auto",
                 k_std: float = 0.0) -> np.ndarray:
    """Priority rank of each transfer of ``job`` (0 = first), TAC or TIC.

    For the outstanding transfers, ``M(r)`` is r's communication time,
    ``P(r)`` the summed compute time of ops whose only outstanding dependency
    is r, and ``M+(r)`` the smallest, over ops waiting on r and on other
    outstanding transfers, of the summed ``M`` of their outstanding
    dependencies. An r that no op waits on together with others gets
    ``M+ = M(r)`` if some op waits on r alone, else infinity.

    - TIC (graph only: every ``M`` = 1, compute time 0): ranks by ``M+``
      ascending; equal ``M+`` share a rank.
    - TAC: repeatedly recompute the properties over the outstanding set, take
      the first transfer under "a before b when
      min(P(b), M(a)) < min(P(a), M(b))" (Johnson's rule, taken in its
      standard form: transfers with ``M <= P`` first by ``M`` ascending, then
      the rest by ``P`` descending), ties by ``M+`` ascending then node order,
      and remove it.

    Parameters
    ----------
    dag : DagArrays
    job : int
    comm_s : ndarray, shape (n_nodes,)
        Communication time of each transfer, seconds.
    mode : {"auto", "tac", "tic"}
        ``auto``: TAC when the job has any compute timing, else TIC.

    Returns
    -------
    ranks : ndarray of int64, shape (T,)
        Rank of each of the job's transfers, in node order.
    """
    if mode not in MODES:
        raise ValidationError(f"mode: expected one of {MODES}, got {mode!r}")
    transfers, dep, computes = _dependencies(dag, job)
    nt = len(transfers)
    if nt == 0:
        return np.zeros(0, dtype=np.int64)
    dur = dag.duration[computes] + k_std * dag.std[computes] if k_std else dag.duration[computes]
    if mode == "auto":
        mode = "tac" if np.any(dur > 0) else "tic"
    keep = dep.any(axis=1)
    dep, dur = dep[keep], dur[keep]
    # ops with the same dependency set behave as one op with their summed time
    if len(dep):
        # rows compared as packed bytes: a sort of C bytes strings of T / 8 bytes, not of T bools
        packed = np.ascontiguousarray(np.packbits(dep, axis=1))
        _, at, inv = np.unique(packed.view(np.dtype((np.void, packed.shape[1]))).ravel(),
                               return_index=True, return_inverse=True)
        dep = dep[at]
        dur = np.bincount(inv.ravel(), weights=dur, minlength=len(at))
    if mode == "tic":
        m = np.ones(nt)
        mplus = _props(dep, np.zeros(len(dep)), m, np.ones(nt, dtype=bool))[1]
        _, ranks = np.unique(mplus, return_inverse=True)
        return ranks.ravel().astype(np.int64)
    return _tac(dep, dur, np.asarray(comm_s, dtype=np.float64)[transfers])


def _tac(dep: np.ndarray, dur: np.ndarray, m: np.ndarray) -> np.ndarray:
    """TAC's ranks for transfers of times ``m`` (shape (T,)) and ops of times ``dur`` (shape
    (C,)) waiting on the transfers ``dep`` (bool, shape (C, T)).

    Each step changes only the ops that wait on the transfer it takes, so the
    ops' outstanding counts and summed ``M``, and every transfer's ``P``, are
    kept up to date as it goes, and ``M+``, only a tie-break, is looked up for
    the tied transfers alone (:class:`_Waits`): a ResNet-152 job of four
    workers and two servers (9112 transfers, 1884 distinct sets of them
    waited on) is ordered in 0.68 s (``python bench/bench_tictac.py``);
    recomputing every op's properties at every step, transfers^2 x ops, takes
    163 s on it.
    """
    nt = len(m)
    w = _Waits(dep, dur, m)
    ranks = np.empty(nt, dtype=np.int64)
    for step in range(nt):
        cand = np.flatnonzero(w.outstanding)
        mc, pc = m[cand], w.p[cand]
        first = mc <= pc
        key = np.where(first, mc, np.inf) if first.any() else -pc
        tied = cand[key == key.min()]
        pick = int(tied[0]) if len(tied) == 1 else w.least_mplus(tied)
        ranks[pick] = step
        w.take(pick)
    return ranks


class _Waits:
    """The ops' waits on outstanding transfers, kept as transfers are taken: each transfer's
    ``P`` (``p``), and ``M+`` from them."""

    # a tie among transfers whose ops number more than this is settled by walking the ops in
    # order of summed M instead of reading every tied transfer's ops
    GATHER_OPS = 20000

    def __init__(self, dep: np.ndarray, dur: np.ndarray, m: np.ndarray) -> None:
        rows = sparse.csr_matrix(dep)
        cols = rows.tocsc()
        self.r_ptr, self.r_idx = rows.indptr, rows.indices
        self.c_ptr, self.c_idx = cols.indptr, cols.indices
        # M in whole picoseconds (TIE_QUANTUM_S): sums kept as transfers are taken stay exact, so
        # transfers whose ops' summed M are equal tie whatever order the sums were formed in
        self.m = np.rint(m / TIE_QUANTUM_S).astype(np.int64)
        self.cnt = np.diff(self.r_ptr).astype(np.int64)  # each op's outstanding transfers
        # ... their summed M (an op waiting on none would read a neighbour's first: zeroed)
        self.total = np.add.reduceat(np.append(self.m[self.r_idx], 0), np.minimum(self.r_ptr[:-1], len(self.r_idx)))
        self.total[self.cnt == 0] = 0
        # each transfer's ops waiting on others too
        self.multi = np.bincount(self.r_idx[np.repeat(self.cnt > 1, self.cnt)], minlength=len(m))
        self.dur = dur
        single = self.cnt == 1
        # P: summed time of the ops waiting on the transfer alone
        self.p = np.bincount(self.r_idx[self.r_ptr[:-1][single]], dur[single], minlength=len(m))
        self.alone = np.zeros(len(m), dtype=bool)  # some op waits on the transfer alone
        self.alone[self.r_idx[self.r_ptr[:-1][single]]] = True
        self.outstanding = np.ones(len(m), dtype=bool)

    def take(self, pick: int) -> None:
        """Mark transfer ``pick`` taken: an op it leaves waiting on one transfer adds to that one's ``P``."""
        self.outstanding[pick] = False
        ops = self.c_idx[self.c_ptr[pick]:self.c_ptr[pick + 1]]
        self.cnt[ops] -= 1
        self.total[ops] -= self.m[pick]
        for i in ops[self.cnt[ops] == 1].tolist():
            row = self.r_idx[self.r_ptr[i]:self.r_ptr[i + 1]]
            self.multi[row] -= 1
            r = int(row[self.outstanding[row]][0])
            self.p[r] += self.dur[i]
            self.alone[r] = True

    def least_mplus(self, tied: np.ndarray) -> int:
        """The transfer of ``tied`` (ascending) with the least ``M+``, the lowest index among equals.

        ``M+`` of a transfer: the least summed ``M`` of an op waiting on it and on
        others, else its own ``M`` if an op waits on it alone, else infinity.
        """
        lens = self.c_ptr[tied + 1] - self.c_ptr[tied]
        if lens.sum() <= self.GATHER_OPS:
            ends = np.cumsum(lens)
            # each tied transfer's ops, one after another, then each one's least over its own run
            ops = self.c_idx[np.arange(ends[-1]) + np.repeat(self.c_ptr[tied] - ends + lens, lens)]
            vals = np.append(np.where(self.cnt[ops] > 1, self.total[ops], NONE), NONE)
            least = np.where(lens > 0, np.minimum.reduceat(vals, np.minimum(ends - lens, len(vals) - 1)), NONE)
            mplus = np.where((least == NONE) & self.alone[tied], self.m[tied], least)
            return int(tied[np.lexsort((tied, mplus))[0]])
        # the ops waiting on two transfers or more, least summed M first: the first holding a
        # tied transfer gives the least M+ any of them has through an op
        in_tied = np.zeros(len(self.m), dtype=bool)
        in_tied[tied] = True
        multi = np.flatnonzero(self.cnt > 1)
        best, hits = NONE, []
        for i in multi[np.argsort(self.total[multi], kind="stable")].tolist():
            if self.total[i] > best:
                break
            row = self.r_idx[self.r_ptr[i]:self.r_ptr[i + 1]]
            hit = row[in_tied[row]]
            if len(hit):
                best = self.total[i]
                hits.append(hit)
        own = tied[(self.multi[tied] == 0) & self.alone[tied]]  # M+ is their own M
        if len(own) and self.m[own].min() <= best:
            low = self.m[own].min()
            hits = ([] if low < best else hits) + [own[self.m[own] == low]]
        return int(min(int(h.min()) for h in hits)) if hits else int(tied[0])


def _props(dep: np.ndarray, dur: np.ndarray, m: np.ndarray,
           outstanding: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``P`` and ``M+`` of every transfer (inf / 0 for those not outstanding)."""
    nt = len(m)
    d = dep & outstanding[None, :]
    cnt = d.sum(axis=1)
    p = np.zeros(nt)
    single = cnt == 1
    if single.any():
        p += np.bincount(np.argmax(d[single], axis=1), weights=dur[single], minlength=nt)
    multi = cnt > 1
    mplus = np.full(nt, np.inf)
    if multi.any():
        dm = d[multi]
        total = dm @ m
        mplus = np.where(dm, total[:, None], np.inf).min(axis=0)
    alone = np.zeros(nt, dtype=bool)
    if single.any():
        alone[np.argmax(d[single], axis=1)] = True
    mplus = np.where(np.isinf(mplus) & alone, m, mplus)
    return p, mplus


def _arrivals(view: SchedulerView, is_job: np.ndarray) -> np.ndarray:
    """Arrival time of each flow's job (or of the background flow itself), seconds."""
    f = view.flows
    job_arr = view.dag.arrival[np.maximum(f.job, 0)] if view.dag.n_jobs else 0.0
    bg_arr = view.bg_arrival_s[np.maximum(f.bg, 0)] if len(view.bg_arrival_s) else 0.0
    return np.where(is_job, job_arr, bg_arr)


def _job_key(dag: DagArrays, job: int, comm_s: np.ndarray) -> bytes:
    lo, hi = int(dag.job_ptr[job]), int(dag.job_ptr[job + 1])
    h = hashlib.blake2b(digest_size=16)
    for arr in (dag.kind[lo:hi], dag.duration[lo:hi], dag.std[lo:hi], comm_s[lo:hi],
                dag.pred_ptr[lo:hi + 1] - dag.pred_ptr[lo], dag.pred_idx[dag.pred_ptr[lo]:dag.pred_ptr[hi]] - lo):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.digest()


@dataclass(frozen=True)
class TicTacOptions:
    """:class:`TicTacPolicy`'s options, checked here."""

    mode: str = option("auto", "auto: TAC for jobs with op timings, TIC otherwise", choices=MODES)
    background: str = option("fair", "where background flows go (see TicTacPolicy)", choices=BACKGROUNDS)
    slot_s: float = option(DEFAULT_SLOT_S, "slot length of the (rates-free) schedules, seconds")
    k_std: float = option(0.0, "compute times are duration + k_std * std (>= 0)")
    bg_floor: float = option(0.0, "with background last: share of each port, in [0, 1), background "
                                  "flows are guaranteed while jobs' flows are backlogged on it")

    def __post_init__(self) -> None:
        check_choice(self, "mode")
        check_choice(self, "background")
        object.__setattr__(self, "slot_s", check_slot_s(self.slot_s))
        k_std = self.k_std
        if isinstance(k_std, bool) or not isinstance(k_std, (int, float)) or not k_std >= 0 \
                or not math.isfinite(k_std):
            raise ValidationError(f"k_std: must be >= 0, got {k_std!r}")
        object.__setattr__(self, "k_std", float(k_std))
        object.__setattr__(self, "bg_floor", check_bg_floor(self.bg_floor))


@register_policy
class TicTacPolicy(Policy):
    """FIFO across jobs (and background flows, each its own job) + TicTac order inside a job.

    Strict priority, work-conserving: flows in priority order each take what
    their ports have left. Orders are computed once per job at its arrival
    (TicTac's order is a property of the graph and its timings) and cached by
    job structure, so identical models are ordered once.

    TicTac orders only DL transfers; background flows are ordinary TCP
    traffic. With ``background="fair"`` (default) each port's DL transfers
    together get the share TCP would give them against the background flows
    (per-flow max-min fair, as under ``tensorflow``), that share goes to the
    DL transfers in TicTac priority order, and whatever is still free is
    shared max-min fair by everyone (work-conserving). ``"fifo"`` instead
    puts each background flow in the FIFO as a job of its own, and
    ``"last"`` after every job, sharing what they leave max-min fair (the
    testbed's agents, where the daemon ranks DL flows only).

    Parameters
    ----------
    options : TicTacOptions, optional
        ``mode`` {"auto", "tac", "tic"}: ``auto``, TAC for jobs with op
        timings, TIC otherwise; ``background`` {"fair", "fifo", "last"};
        ``slot_s``, the slot length of :meth:`schedule`'s (rates-free)
        schedules, seconds; ``k_std``: compute times are ``duration + k_std *
        std`` (>= 0), as in the LAT pass; ``bg_floor``: with ``last``, the
        share of each port, in [0, 1), the background flows are guaranteed
        while jobs' flows are backlogged on it (the agents' background floor,
        :func:`jitsched.policies.common.floored_background_shares`; default
        0). None: the defaults.
    """

    name = "tictac"
    role = "baseline"
    Options = TicTacOptions

    def __init__(self, options: TicTacOptions | None = None) -> None:
        super().__init__(options)
        self.slot_s = self.options.slot_s
        self.k_std = self.options.k_std
        self.mode = self.options.mode
        self.background = self.options.background
        self.bg_floor = self.options.bg_floor
        self._cache: dict[bytes, np.ndarray] = {}
        self._rank = np.zeros(0, dtype=np.int64)

    def reset(self, cluster) -> None:
        self.cluster = cluster
        self._rank = np.zeros(0, dtype=np.int64)

    def _job_ranks(self, view: SchedulerView, job: int) -> tuple[np.ndarray, np.ndarray]:
        """``job``'s transfer nodes and their TicTac ranks (cached by the job's structure and timings)."""
        dag, cl = view.dag, view.cluster
        lo, hi = int(dag.job_ptr[job]), int(dag.job_ptr[job + 1])
        t = np.arange(lo, hi)[dag.kind[lo:hi] == TRANSFER]
        comm = transfer_times(dag, cl, t)
        key = _job_key(dag, job, comm)
        ranks = self._cache.get(key)
        if ranks is None:
            ranks = tictac_order(dag, job, comm, self.mode, self.k_std)
            self._cache[key] = ranks
        return t, ranks

    def on_job_arrival(self, view: SchedulerView, job: int) -> None:
        dag = view.dag
        if len(self._rank) < dag.n_nodes:
            self._rank = np.concatenate([self._rank, np.zeros(dag.n_nodes - len(self._rank), dtype=np.int64)])
        t, ranks = self._job_ranks(view, job)
        self._rank[t] = ranks

    def schedule(self, view: SchedulerView) -> SlotSchedule | None:
        """Every unfinished transfer of the active jobs ranked as :meth:`allocate` orders them, for host agents.

        One global order of dense ranks: jobs first come first served (arrival,
        then index), a job's transfers by their TicTac rank, then node. Computed
        from ``view`` alone (the daemon compiles a new DAG for every plan, so
        node indices do not carry over), the per-job orders from the cache.
        Background flows are not the daemon's to know: the agents put them
        after every ranked flow, as for ``jit`` and ``sincronia``.
        """
        dag = view.dag
        nodes = unfinished_transfers(view)
        if not len(nodes):
            return None
        rank = np.zeros(dag.n_nodes, dtype=np.int64)
        for j in np.unique(dag.job_of[nodes]).tolist():
            t, ranks = self._job_ranks(view, j)
            rank[t] = ranks
        job = dag.job_of[nodes]
        order = np.lexsort((nodes, rank[nodes], job, dag.arrival[job]))
        dense = np.empty(len(nodes), dtype=np.int64)
        dense[order] = np.arange(len(nodes))
        return ranked_schedule(view, nodes, dense, self.slot_s)

    def allocate(self, view: SchedulerView) -> Allocation:
        """Strict-priority greedy rates: earlier arrival first, TicTac rank inside a job (bytes/s)."""
        f = view.flows
        if len(f) == 0:
            return Allocation(np.zeros(0))
        is_job = f.job >= 0
        arrival = _arrivals(view, is_job)
        ident = np.where(is_job, f.job, f.bg)
        if len(self._rank) < view.dag.n_nodes:
            self._rank = np.concatenate(
                [self._rank, np.zeros(view.dag.n_nodes - len(self._rank), dtype=np.int64)])
        rank = np.where(is_job, self._rank[np.maximum(f.node, 0)] if len(self._rank) else 0, 0)
        cap_e, cap_i = view.cluster.egress_Bps, view.cluster.ingress_Bps
        if self.background == "last":
            order = np.lexsort((f.node, rank, ident, arrival, ~is_job))
            return Allocation(floored_background_shares(lambda e, i: priority_greedy(order, f.src, f.dst, e, i),
                                                        f, cap_e, cap_i, self.bg_floor))
        order = np.lexsort((f.node, rank, ident, ~is_job, arrival))
        if self.background == "fifo" or is_job.all():
            return Allocation(priority_greedy(order, f.src, f.dst, cap_e, cap_i))
        h = len(cap_e)
        fair = pair_maxmin(f.src, f.dst, cap_e, cap_i)
        rate = fair.copy()
        dl = np.flatnonzero(is_job)
        if len(dl):
            pos = np.full(len(f), -1, dtype=np.int64)
            pos[dl] = np.arange(len(dl))
            dl_order = pos[order[is_job[order]]]
            rate[dl] = priority_greedy(dl_order, f.src[dl], f.dst[dl],
                                       np.bincount(f.src[dl], fair[dl], h),
                                       np.bincount(f.dst[dl], fair[dl], h))
        left_e = np.maximum(cap_e - np.bincount(f.src, rate, h), 0.0)
        left_i = np.maximum(cap_i - np.bincount(f.dst, rate, h), 0.0)
        rate += pair_maxmin(f.src, f.dst, left_e, left_i)
        return Allocation(rate)


@register_policy
class FifoPolicy(Policy):
    """FIFO across jobs and background flows, node order inside a job; strict priority, work-conserving."""

    name = "fifo"
    needs_dag = False  # orders flows and coflows only

    def allocate(self, view: SchedulerView) -> Allocation:
        """Greedy rates: earliest-arriving job or flow first (bytes/s)."""
        f = view.flows
        if len(f) == 0:
            return Allocation(np.zeros(0))
        is_job = f.job >= 0
        arrival = _arrivals(view, is_job)
        ident = np.where(is_job, f.job, f.bg)
        order = np.lexsort((f.node, ident, ~is_job, arrival))
        return Allocation(priority_greedy(order, f.src, f.dst, view.cluster.egress_Bps,
                                          view.cluster.ingress_Bps))
