"""Bandwidth reservations for critical jobs: per-slot rates from a time-slotted HiGHS LP on the capacity other reservations leave, holding each job within (1 + eps) of its isolated JCT."""

# One module although past 500 lines: a critical job's windows, its reservation LP
# and the book of reservations held are one admission rule; the book re-solves with
# the same LP on what the held reservations leave.

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.sparse import csc_matrix

from jitsched.dag.model import Cluster, Job
from jitsched.errors import ValidationError
from jitsched.plan.lp import _new_highs
from jitsched.plan.planner import DEFAULT_SLOT_S, scale_cluster

# A reservation is feasible when the LP leaves at most this fraction of any
# transfer's bytes unmet (HiGHS's feasibility tolerance is 1e-7 on rows of unit scale).
UNMET_TOL = 1e-6
# Each transfer is reserved this fraction more than its bytes: the LP's tolerances and
# the enforcement's rounding never leave a few bytes to send after its window.
MARGIN = 1e-7
# Each reserved byte costs this much per slot of delay, against 1 per unit of unmet
# demand: a reservation fills its windows early, never at the price of a byte.
EARLY_COST = 1e-6
# The share of the reserved rates out of a host that their ACKs take on its ingress
# (ReservationBook.ingress_held): ~1.7 % for delayed ACKs, with room for SACK blocks, as
# the agents' ACK class has of the line (jitsched.agents.backends.htb.ACK_RESERVE).
ACK_SHARE = 0.03
# A reservation more than this share of a port's line rate above what its agent can give
# is overbooked; less is within the rounding of the agent's own payload share, and the
# reservation's (1 + eps) margin takes it.
OVERBOOKED = 1e-3


@dataclass(frozen=True)
class ReserveOptions:
    """How critical jobs are reserved for.

    Attributes
    ----------
    eps : float
        A critical job's JCT target is ``(1 + eps)`` times its isolated JCT.
    slot_s : float
        The reservations' slot, seconds. A transfer window is rounded inwards to it,
        so it should be short against the transfers' isolated durations.
    max_starts : int
        Start offsets tried when a job cannot start now (evenly spaced up to the
        end of the reservations held, which is always feasible).
    max_delays : int
        Delays of a job's windows tried before refusing it, evenly spaced up to
        ``eps`` times its isolated JCT (:func:`delayed`: less stretch, the same target).
    """

    eps: float = 0.05
    slot_s: float = DEFAULT_SLOT_S
    max_starts: int = 32
    max_delays: int = 8

    def __post_init__(self) -> None:
        if not (isinstance(self.eps, (int, float)) and 0 <= self.eps < math.inf):
            raise ValidationError(f"eps: must be a finite number >= 0, got {self.eps!r}")
        if not (isinstance(self.slot_s, (int, float)) and 0 < self.slot_s < math.inf):
            raise ValidationError(f"slot_s: must be a positive number of seconds, got {self.slot_s!r}")
        if isinstance(self.max_starts, bool) or not isinstance(self.max_starts, int) or self.max_starts < 1:
            raise ValidationError(f"max_starts: must be a positive integer, got {self.max_starts!r}")
        if isinstance(self.max_delays, bool) or not isinstance(self.max_delays, int) or self.max_delays < 0:
            raise ValidationError(f"max_delays: must be an integer >= 0, got {self.max_delays!r}")


@dataclass(frozen=True)
class Windows:
    """A job's transfers and the slots (from its start) each must send in.

    Attributes
    ----------
    ids : tuple of str
        Transfer ids.
    src, dst : ndarray of int64
        Host indices.
    size : ndarray of float64
        Bytes.
    first, last : ndarray of int64
        First and last slot of each window, counted from the job's start slot.
    isolated_s : float
        The job's JCT alone in the cluster, seconds.
    target_s : float
        ``(1 + eps) * isolated_s`` rounded up to the slot: the JCT the windows hold.
    finish_s, start_s : ndarray of float64
        Each transfer's finish and start in the isolated schedule (the finish orders
        transfers of one window).
    delay_s : float
        The windows start this long after the job (:func:`delayed`).
    """

    ids: tuple[str, ...]
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    first: np.ndarray
    last: np.ndarray
    isolated_s: float
    target_s: float
    finish_s: np.ndarray
    start_s: np.ndarray
    delay_s: float = 0.0

    @property
    def n_slots(self) -> int:
        """Slots from the job's start to the end of its last window."""
        return int(self.last.max()) + 1 if len(self.last) else 0


@dataclass(frozen=True)
class Isolated:
    """A job's schedule alone in its cluster: what its reservation windows stretch.

    Attributes
    ----------
    start_s, finish_s : ndarray of float64
        Each transfer's start and finish (seconds from the job's start), in the
        order of ``job.transfers``.
    jct_s : float
        The job's isolated JCT, seconds.
    """

    start_s: np.ndarray
    finish_s: np.ndarray
    jct_s: float


def job_windows(job: Job, cluster: Cluster, isolated: Isolated, options: ReserveOptions) -> Windows:
    """The windows of ``job``'s transfers: its isolated schedule stretched by ``1 + eps``.

    Each transfer's interval ``[start, finish]`` in ``isolated`` (from the
    job's start) becomes ``[(1 + eps) start, (1 + eps) finish]``, rounded
    outwards to the slot. A transfer's predecessors then end by its window's
    start, and its successors start after its window's end, so a job that
    sends every transfer's bytes within its window finishes by ``(1 + eps)``
    times its isolated JCT, up to the rounding (a slot at each end of a
    window); the stretched isolated rates fit the windows, so a job is never
    infeasible on idle ports. Each window's end is its transfer's latest
    arrival for the stretched JCT target.

    Parameters
    ----------
    job : Job
    cluster : Cluster
    isolated : Isolated
        ``job`` run alone in ``cluster`` (:func:`jitsched.sim.isolated.isolated_run`
        runs it in the simulator under the default jit).
    options : ReserveOptions

    Returns
    -------
    Windows

    Raises
    ------
    ValidationError
        If ``isolated`` does not give one interval per transfer of ``job``.
    """
    start = np.asarray(isolated.start_s, dtype=np.float64)
    finish = np.asarray(isolated.finish_s, dtype=np.float64)
    n = len(job.transfers)
    if start.shape != (n,) or finish.shape != (n,):
        raise ValidationError(f"isolated: {n} transfers need {n} starts and finishes, "
                              f"got {start.shape} and {finish.shape}")
    index = cluster.index
    win = Windows(tuple(t.id for t in job.transfers),
                  np.array([index(t.src) for t in job.transfers], dtype=np.int64),
                  np.array([index(t.dst) for t in job.transfers], dtype=np.int64),
                  np.array([t.bytes for t in job.transfers], dtype=np.float64),
                  np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), float(isolated.jct_s), 0.0,
                  finish, start)
    return delayed(win, 0.0, options)


def delayed(win: Windows, delay_s: float, options: ReserveOptions) -> Windows:
    """``win`` for the isolated schedule delayed by ``delay_s`` and stretched by what is left
    of the target: ``(1 + eps) * isolated - delay_s`` over the isolated JCT (at least 1).

    A job whose transfers' bursts meet another critical job's can start them a little
    later, still within its target, instead of being refused.
    """
    slot = options.slot_s
    iso = win.isolated_s
    k = max(1.0, 1.0 + options.eps - delay_s / iso) if iso > 0 else 1.0 + options.eps
    first = np.floor((delay_s + win.start_s * k) / slot + 1e-9).astype(np.int64)
    last = np.maximum(np.ceil((delay_s + win.finish_s * k) / slot - 1e-9).astype(np.int64) - 1, first)
    target = math.ceil((1.0 + options.eps) * iso / slot - 1e-9) * slot
    return replace(win, first=first, last=last, target_s=target, delay_s=delay_s)


@dataclass
class Reservation:
    """One LP's answer for a job's windows at one start slot.

    Attributes
    ----------
    feasible : bool
        Every transfer's bytes fit its window.
    rates : ndarray, shape (m, n_slots)
        Reserved bytes/s per transfer and slot from the start slot.
    unmet : ndarray, shape (m,)
        Fraction of each transfer's bytes left out.
    bottleneck : str
        The port whose capacity rows bind hardest (largest sum of duals, weighted by
        capacity) when infeasible: ``"<host> egress"`` or ``"<host> ingress"``; "" when feasible.
    """

    feasible: bool
    rates: np.ndarray
    unmet: np.ndarray
    bottleneck: str = ""


def solve_reservation(win: Windows, free_egress: np.ndarray, free_ingress: np.ndarray,
                      cluster: Cluster, slot_s: float) -> Reservation:
    """The reservation LP of one job on the capacity left free, built as arrays and solved in one call.

    Columns: the rate of each transfer in each slot of its window (bytes/s), and
    each transfer's unmet fraction. Rows: each transfer's bytes over its window
    plus its unmet fraction equal to one (and :data:`MARGIN`); each port's reserved rates in each
    slot at most what is free there. The objective is the unmet fractions
    (each byte left out costs 1), plus :data:`EARLY_COST` per byte and slot of
    delay; a job is feasible when nothing is left out.

    Parameters
    ----------
    win : Windows
    free_egress, free_ingress : ndarray, shape (n_hosts, >= win.n_slots)
        Bytes/s free per port and slot from the job's start slot.
    cluster : Cluster
        Names the bottleneck port.
    slot_s : float

    Returns
    -------
    Reservation
    """
    nh, ns = len(cluster), win.n_slots
    if not len(win.ids):  # a job of computes alone reserves nothing and always fits
        return Reservation(True, np.zeros((0, ns)), np.zeros(0))
    # transfers of one host pair with one window are one column per slot (the same
    # optimum, fewer columns), split back in their isolated finishing order
    key = np.stack([win.src, win.dst, win.first, win.last], axis=1)
    uniq, grp = np.unique(key, axis=0, return_inverse=True)
    grp = grp.ravel()
    g_src, g_dst, g_first, g_last = (np.ascontiguousarray(c) for c in uniq.T)
    # a group of a few bytes is reserved as one byte: its demand row's coefficient stays finite
    g_size = np.maximum(np.bincount(grp, weights=win.size, minlength=len(uniq)), 1.0)
    m = len(uniq)
    lens = g_last - g_first + 1
    ptr = np.concatenate([[0], np.cumsum(lens)])
    nx = int(ptr[-1])
    flow = np.repeat(np.arange(m), lens)
    slot = np.arange(nx) - np.repeat(ptr[:-1], lens) + np.repeat(g_first, lens)
    # rows: m demand rows, then egress (h, t) at m + h*ns + t, ingress at m + nh*ns + h*ns + t
    n_rows = m + 2 * nh * ns
    # rates in units of the fastest port: rows of unit scale, bytes/s only in and out
    unit = float(max(cluster.egress_Bps.max(), cluster.ingress_Bps.max()))
    dem_coef = unit * slot_s / g_size[flow]
    rows = np.concatenate([flow, m + g_src[flow] * ns + slot, m + nh * ns + g_dst[flow] * ns + slot,
                           np.arange(m)])
    vals = np.concatenate([dem_coef, np.ones(nx), np.ones(nx), np.ones(m)])
    cols = np.concatenate([np.arange(nx), np.arange(nx), np.arange(nx), nx + np.arange(m)])
    a = csc_matrix((vals, (rows, cols)), shape=(n_rows, nx + m))
    free = np.concatenate([np.asarray(free_egress, dtype=np.float64)[:, :ns].ravel(),
                           np.asarray(free_ingress, dtype=np.float64)[:, :ns].ravel()])
    free = np.maximum(free, 0.0) / unit
    row_lo = np.concatenate([np.full(m, 1.0 + MARGIN), np.full(2 * nh * ns, -np.inf)])
    row_hi = np.concatenate([np.full(m, 1.0 + MARGIN), free])
    cost = np.concatenate([EARLY_COST * dem_coef * (slot + 1), np.ones(m)])
    col_lo = np.zeros(nx + m)
    col_hi = np.concatenate([np.full(nx, np.inf), np.ones(m)])
    highs = _new_highs()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("threads", 1)
    highs.passModel(_lp(a, cost, col_lo, col_hi, row_lo, row_hi))
    highs.run()
    status = highs.modelStatusToString(highs.getModelStatus())
    if status != "Optimal":
        raise RuntimeError(f"the reservation LP ended {status}")
    sol = highs.getSolution()
    x = np.asarray(sol.col_value, dtype=np.float64)
    unmet = np.clip(x[nx:], 0.0, 1.0)
    g_rates = np.zeros((m, ns))
    g_rates[flow, slot] = np.maximum(x[:nx], 0.0) * unit
    rates = _split(g_rates, grp, win, slot_s)
    feasible = bool(unmet.max(initial=0.0) <= UNMET_TOL)
    bottleneck = ""
    if not feasible:
        dual = np.abs(np.asarray(sol.row_dual, dtype=np.float64)[m:]).reshape(2, nh, ns) / unit
        cap = np.stack([cluster.egress_Bps, cluster.ingress_Bps])[:, :, None]
        weight = (dual * cap).sum(axis=2)  # unmet demand each port's full capacity would meet
        way, host = np.unravel_index(int(np.argmax(weight)), weight.shape)
        bottleneck = f"{cluster.hosts[host].name} {('egress', 'ingress')[way]}"
    return Reservation(feasible, rates, unmet[grp], bottleneck)


def _split(g_rates: np.ndarray, grp: np.ndarray, win: Windows, slot_s: float) -> np.ndarray:
    """Each transfer's rates out of its group's: the group's bytes go to its transfers
    one after another, in their isolated finishing order."""
    rates = np.zeros((len(grp), g_rates.shape[1]))
    order = np.lexsort((np.arange(len(grp)), win.finish_s, grp))
    bounds = np.searchsorted(grp[order], np.arange(g_rates.shape[0] + 1))
    for g in range(g_rates.shape[0]):
        members = order[bounds[g]:bounds[g + 1]]
        sent = np.concatenate([[0.0], np.cumsum(g_rates[g] * slot_s)])  # bytes by each slot's end
        upto = np.concatenate([[0.0], np.cumsum(win.size[members] * (1.0 + MARGIN))])
        got = np.clip(sent[None, :], upto[:-1, None], upto[1:, None])  # each member's share by then
        rates[members] = np.diff(got, axis=1) / slot_s
    return rates


def _lp(a: csc_matrix, cost, col_lo, col_hi, row_lo, row_hi):
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = a.shape[1], a.shape[0]
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lo, col_hi
    lp.row_lower_, lp.row_upper_ = row_lo, row_hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = a.indptr
    lp.a_matrix_.index_ = a.indices
    lp.a_matrix_.value_ = a.data
    return lp


@dataclass
class Held:
    """A critical job's reservation in the book: its transfers' rates from ``start_slot``."""

    windows: Windows
    start_slot: int
    rates: np.ndarray  # (m, n_slots) bytes/s

    @property
    def end_slot(self) -> int:
        return self.start_slot + self.rates.shape[1]


@dataclass
class Decision:
    """What :meth:`ReservationBook.admit` decided for one critical job.

    Attributes
    ----------
    admitted : bool
    start_s : float
        Where its reservation starts (the request's instant rounded up to the slot).
    bottleneck : str
        When refused: the port whose capacity binds at the requested start.
    earliest_start_s : float
        When refused: the earliest start (book clock) found at which it could be guaranteed.
    isolated_s, target_s : float
        Its isolated JCT and the JCT its reservation holds.
    """

    admitted: bool
    start_s: float
    bottleneck: str = ""
    earliest_start_s: float = math.nan
    isolated_s: float = math.nan
    target_s: float = math.nan


@dataclass
class ReservationBook:
    """The critical jobs' reservations on one cluster, on one slot grid (slot 0 at time 0).

    Parameters
    ----------
    cluster : Cluster
    options : ReserveOptions
    shares : dict of str to float
        Per host, the share of each of its ports' line rate reservations may take, in
        (0, 1] (1 for a host not named): what its agent can give a reserved flow's
        payload while traffic it does not rank is backlogged
        (:meth:`jitsched.daemon.agents.AgentState.reservable`). Isolated JCTs and
        reserved rates are planned on it.
    default_share : float
        The share for a host ``shares`` does not name, in (0, 1].
    payloads : dict of str to float
        Per host, the share of the line a flow's payload takes, in (0, 1] (1 for a host
        not named; :attr:`jitsched.daemon.agents.AgentState.payload_share`):
        :meth:`ingress_held` counts the reserved rates on the wire with it.
    """

    cluster: Cluster
    options: ReserveOptions = field(default_factory=ReserveOptions)
    held: dict[str, Held] = field(default_factory=dict)
    shares: dict[str, float] = field(default_factory=dict)
    default_share: float = 1.0
    payloads: dict[str, float] = field(default_factory=dict)
    # ingress_held's part the reservations held decide, and the reservations it was made of
    _hosts_of: list = field(default_factory=list, init=False, repr=False, compare=False)
    _hosts: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    _payloads_of: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def share(self, host: str) -> float:
        """The share of host ``host``'s ports reservations may take (``shares``, else ``default_share``)."""
        return self.shares.get(host, self.default_share)

    def _kept(self) -> np.ndarray:
        """Each host's share of its ports reservations may take, shape (n_hosts,)."""
        return np.array([self.share(n) for n in self.cluster.names], dtype=np.float64)

    def planning_cluster(self) -> Cluster:
        """The cluster with each port's rate the share reservations may take: where critical
        jobs run alone for their isolated JCTs (the cluster itself when every share is 1)."""
        kept = self._kept()
        if np.all(kept == 1.0):
            return self.cluster
        return scale_cluster(self.cluster, kept, kept)

    def free(self, first_slot: int, n_slots: int) -> tuple[np.ndarray, np.ndarray]:
        """Bytes/s free per port, slots ``first_slot`` .. ``first_slot + n_slots - 1``:
        the line rate times its host's share less every reservation held there."""
        return self._free(first_slot, n_slots, self._kept())

    def _free(self, first_slot: int, n_slots: int, kept: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        e = np.repeat((self.cluster.egress_Bps * kept)[:, None], n_slots, axis=1)
        i = np.repeat((self.cluster.ingress_Bps * kept)[:, None], n_slots, axis=1)
        for h in self.held.values():
            lo, hi = max(h.start_slot, first_slot), min(h.end_slot, first_slot + n_slots)
            if lo >= hi:
                continue
            part = h.rates[:, lo - h.start_slot:hi - h.start_slot]
            for k in range(part.shape[0]):
                e[h.windows.src[k], lo - first_slot:hi - first_slot] -= part[k]
                i[h.windows.dst[k], lo - first_slot:hi - first_slot] -= part[k]
        return e, i

    def ingress_held(self, done: dict[str, Iterable[str]]) -> tuple[tuple[int, float, float], ...]:
        """The hosts whose reserved transfers are not all done, and what their ingress leaves.

        Parameters
        ----------
        done : dict of job id to transfer ids
            Each held job's transfers that have arrived.

        Returns
        -------
        tuple of (host index, start_s, left_Bps)
            One entry per host that an unfinished reserved transfer goes into or
            out of: ``start_s`` is the first slot's start (book clock, seconds) of
            the reserved rates into or out of it, and ``left_Bps`` the payload rate
            its ingress leaves unreserved in the slot that leaves least: the line rate
            less the reserved rates into it and :data:`ACK_SHARE` of those out of it
            (their ACKs come in), on the wire (over its payload share, ``payloads``),
            at least 0. Both count the transfers that arrived too, so an
            entry changes only when a host starts or stops being held: a job
            running behind its reservation keeps its hosts held until its
            transfers there arrive (hashable, so that a change shows as one).
        """
        # the reservations the cache was made of, held by reference: a trimmed one
        # (release) has new rates, a new one is another object
        now_held = [(jid, h, h.rates) for jid, h in self.held.items()]
        if len(now_held) != len(self._hosts_of) or self.payloads != self._payloads_of or any(
                a[0] != b[0] or a[1] is not b[1] or a[2] is not b[2] for a, b in zip(now_held, self._hosts_of, strict=True)):
            self._hosts_of, self._payloads_of, self._hosts = now_held, dict(self.payloads), self._held_hosts()
        out = []
        for host, (start_s, left, tids) in self._hosts.items():
            if any(tid not in done.get(jid, ()) for jid, tid in tids):
                out.append((host, start_s, left))
        return tuple(out)

    def _held_hosts(self) -> dict[int, tuple[float, float, list[tuple[str, str]]]]:
        """:meth:`ingress_held`'s part that only the reservations held decide: per host any
        reserved transfer goes into or out of, its ``start_s``, ``left_Bps`` and the
        (job id, transfer id) of those transfers, the latest window first (the first
        that an unfinished job has not done). Made once per set of reservations, not on
        every arrival: made each time, it took 7.8 ms an arrival for one held job of
        ResNet152's size (2020 transfers over 200 slots, this machine), 16 s of the
        daemon's loop over the job; from the cache, 0.02 s over the job."""
        first: dict[int, int] = {}
        tids: dict[int, list[tuple[int, str, str]]] = {}
        for jid, h in self.held.items():
            for k, tid in enumerate(h.windows.ids):
                nz = np.flatnonzero(h.rates[k] > 0)
                if not len(nz):
                    continue
                src, dst, a = int(h.windows.src[k]), int(h.windows.dst[k]), h.start_slot + int(nz[0])
                for x in (src, dst):
                    first[x] = min(first.get(x, a), a)
                    tids.setdefault(x, []).append((a, jid, tid))
        if not first:
            return {}
        lo = min(first.values())
        # the reserved rates out of and into each port per slot (negated): what the
        # reservations leave of the whole line is unranked traffic's
        out_e, in_i = self._free(lo, self.horizon_slot() - lo, 0.0)
        out = {}
        for host in sorted(first):
            line = float(self.cluster.ingress_Bps[host])
            p = self.payloads.get(self.cluster.hosts[host].name, 1.0)
            wire = line + (in_i[host] + ACK_SHARE * out_e[host]) / p
            left = max(float(wire.min()), 0.0) * p
            out[host] = (first[host] * self.options.slot_s, left,
                         [(jid, tid) for _, jid, tid in sorted(tids[host], reverse=True)])
        return out

    def overbooked(self, host: str, now: float) -> list[str]:
        """The jobs whose reservations through ``host`` take more than its ports' share
        (``shares``) by more than :data:`OVERBOOKED` of its line rate in some slot from
        ``now`` on (book clock, seconds), sorted: those held on a larger share than its
        agent can give now."""
        if host not in self.cluster:
            return []
        k = self.cluster.index(host)
        first = math.floor(now / self.options.slot_s + 1e-9)
        n = self.horizon_slot() - first
        if n <= 0:
            return []
        free_e, free_i = self.free(first, n)
        line = max(float(self.cluster.egress_Bps[k]), float(self.cluster.ingress_Bps[k]))
        over = np.flatnonzero((free_e[k] < -OVERBOOKED * line) | (free_i[k] < -OVERBOOKED * line)) + first
        if not len(over):
            return []
        out = []
        for jid, h in self.held.items():
            s = over[(over >= h.start_slot) & (over < h.end_slot)] - h.start_slot
            through = (h.windows.src == k) | (h.windows.dst == k)
            if len(s) and np.any(h.rates[np.ix_(through, s)] > 0):
                out.append(jid)
        return sorted(out)

    def refit(self, job_id: str, now: float, done: Iterable[str] = ()) -> bool:
        """Reserve job ``job_id`` again from ``now`` (book clock, seconds) on what is free now:
        after its hosts' shares fell, the rest of each unfinished transfer's bytes in the
        rest of its window. Its rates before ``now`` stay. Returns whether it fits (else the
        reservation stays as it was).

        Parameters
        ----------
        done : iterable of str
            Its transfers that have arrived: they need nothing more.
        """
        h = self.held.get(job_id)
        if h is None:
            return False
        slot, win = self.options.slot_s, h.windows
        off = max(math.ceil(now / slot - 1e-9) - h.start_slot, 0)
        if off >= h.rates.shape[1]:
            return True  # nothing of it is left to reserve
        gone = set(done)
        sent = h.rates[:, :off].sum(axis=1) * slot  # what its reservation carried before now
        keep = np.array([tid not in gone for tid in win.ids], dtype=bool) & (win.last >= off) & (
            win.size - sent > MARGIN * win.size)
        rest = Windows(tuple(t for t, k in zip(win.ids, keep, strict=True) if k), win.src[keep], win.dst[keep],
                       (win.size - sent)[keep], np.maximum(win.first - off, 0)[keep], win.last[keep] - off,
                       win.isolated_s, win.target_s, win.finish_s[keep], win.start_s[keep], win.delay_s)
        del self.held[job_id]
        try:
            res = self._try(rest, h.start_slot + off) if len(rest.ids) else None
        finally:
            self.held[job_id] = h
        if res is not None and not res.feasible:
            return False
        rates = np.zeros((len(win.ids), off + (res.rates.shape[1] if res is not None else 0)))
        rates[:, :off] = h.rates[:, :off]
        if res is not None:
            rates[np.flatnonzero(keep), off:] = res.rates
        h.rates = rates
        return True

    def horizon_slot(self) -> int:
        """The first slot no reservation holds."""
        return max((h.end_slot for h in self.held.values()), default=0)

    def admit(self, job_id: str, windows: Windows, now: float, hold: bool = True) -> Decision:
        """Reserve for critical job ``job_id``, whose transfers must send in ``windows``
        (:func:`job_windows`), starting ``now`` (book clock, seconds), if it can be
        guaranteed there; else say which port binds and the earliest start found.

        With ``hold`` False the decision is made and nothing is reserved.
        """
        slot = self.options.slot_s
        win = windows
        s0 = math.ceil(now / slot - 1e-9)
        first = res = self._try(win, s0)
        # what is left of the target after the slot rounding may delay the windows instead
        budget = (1.0 + self.options.eps) * win.isolated_s - win.isolated_s - (s0 * slot - now)
        n = min(self.options.max_delays, max(0, math.floor(budget / slot)))
        for j in range(1, n + 1):
            if res.feasible:
                break
            win = delayed(win, budget * j / n, self.options)
            res = self._try(win, s0)
        if res.feasible:
            if hold:
                self.held[job_id] = Held(win, s0, res.rates)
            return Decision(True, s0 * slot, isolated_s=win.isolated_s, target_s=win.target_s)
        win = delayed(win, 0.0, self.options)
        return Decision(False, s0 * slot, first.bottleneck, self._earliest(win, s0) * slot,
                        win.isolated_s, win.target_s)

    def _try(self, win: Windows, s0: int) -> Reservation:
        free_e, free_i = self.free(s0, max(win.n_slots, 1))
        return solve_reservation(win, free_e, free_i, self.cluster, self.options.slot_s)

    def _earliest(self, win: Windows, s0: int) -> int:
        end = max(self.horizon_slot(), s0 + 1)  # past every reservation: the ports are idle
        span = end - s0
        n = min(self.options.max_starts, span)
        for k in range(1, n):
            s = s0 + (span * k) // n
            if self._try(win, s).feasible:
                return s
        return end

    def release(self, job_id: str, now: float | None = None) -> None:
        """Give back job ``job_id``'s reservation (from ``now`` on; None: all of it)."""
        h = self.held.get(job_id)
        if h is None:
            return
        if now is None:
            del self.held[job_id]
            return
        keep = math.ceil(now / self.options.slot_s - 1e-9) - h.start_slot
        if keep <= 0:
            del self.held[job_id]
        elif keep < h.rates.shape[1]:
            h.rates = h.rates[:, :keep]

    def prune(self, now: float, keep=()) -> None:
        """Forget reservations that ended before ``now``, but those of the jobs in ``keep``."""
        cur = math.floor(now / self.options.slot_s)
        for jid in [j for j, h in self.held.items() if h.end_slot <= cur and j not in keep]:
            del self.held[jid]

    def flows(self, job_ids) -> dict[tuple[str, str], tuple[float, float, np.ndarray]]:
        """The reserved transfers of ``job_ids``: (job id, transfer id) to (start_s, slot_s, rates)."""
        slot, out = self.options.slot_s, {}
        for jid in job_ids:
            h = self.held.get(jid)
            if h is not None:
                for k, tid in enumerate(h.windows.ids):
                    out[(jid, tid)] = (h.start_slot * slot, slot, h.rates[k])
        return out

    def rate(self, job_id: str, k: int, t: float) -> float:
        """Transfer ``k``'s reserved rate at time ``t`` (bytes/s; 0 outside its reservation)."""
        h = self.held.get(job_id)
        if h is None:
            return 0.0
        s = math.floor(t / self.options.slot_s + 1e-9) - h.start_slot
        return float(h.rates[k, s]) if 0 <= s < h.rates.shape[1] else 0.0


__all__ = ["ACK_SHARE", "OVERBOOKED", "Decision", "Held", "Isolated", "ReservationBook", "ReserveOptions", "Reservation", "Windows", "delayed",
           "job_windows", "solve_reservation"]
