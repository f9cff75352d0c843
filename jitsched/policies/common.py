"""Helpers shared by policies: sub-DAGs of selected jobs, option checks and order-only schedules."""

from __future__ import annotations

import numpy as np

from jitsched.dag.model import TRANSFER, DagArrays
from jitsched.errors import ValidationError
from jitsched.plan import MIN_SLOT_S, SLOT_S_RULE
from jitsched.plan.alloc import fixed_then_maxmin
from jitsched.policies.base import DONE, SchedulerView, SlotSchedule
from jitsched.protocol import BACKGROUND_JOB


def _gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows ``rows`` of (ptr, idx) as a new CSR (values not remapped)."""
    starts = ptr[rows]
    lens = ptr[rows + 1] - starts
    new_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=new_ptr[1:])
    total = int(new_ptr[-1])
    if total == 0:
        return new_ptr, np.zeros(0, dtype=np.int32)
    pos = np.arange(total) - np.repeat(new_ptr[:-1], lens) + np.repeat(starts, lens)
    return new_ptr, idx[pos]


def sub_dag(dag: DagArrays, jobs: np.ndarray) -> tuple[DagArrays, np.ndarray]:
    """The jobs ``jobs`` of ``dag`` as their own DagArrays, without recompiling.

    Parameters
    ----------
    dag : DagArrays
    jobs : array of int
        Job indices, strictly increasing.

    Returns
    -------
    sub : DagArrays
        Job ``k`` of ``sub`` is job ``jobs[k]`` of ``dag``.
    nodes : ndarray of int64
        ``nodes[i]`` is the node of ``dag`` that node ``i`` of ``sub`` is.
    """
    jobs = np.asarray(jobs, dtype=np.int64)
    lo, hi = dag.job_ptr[jobs], dag.job_ptr[jobs + 1]
    lens = hi - lo
    job_ptr = np.zeros(len(jobs) + 1, dtype=np.int64)
    np.cumsum(lens, out=job_ptr[1:])
    n = int(job_ptr[-1])
    nodes = np.arange(n) - np.repeat(job_ptr[:-1], lens) + np.repeat(lo, lens)
    remap = np.full(dag.n_nodes, -1, dtype=np.int64)
    remap[nodes] = np.arange(n)
    pred_ptr, pred_idx = _gather_csr(dag.pred_ptr, dag.pred_idx, nodes)
    succ_ptr, succ_idx = _gather_csr(dag.succ_ptr, dag.succ_idx, nodes)
    # compile_jobs orders topo job by job, so the topo positions of the chosen
    # jobs' node ranges hold exactly their nodes: gather those instead of
    # remapping the whole order (O(all nodes) per re-plan, seconds per run).
    seg = dag.topo[nodes]
    if np.array_equal(dag.job_of[seg], dag.job_of[nodes]):
        topo = remap[seg]
    else:  # some other order: filter the whole one
        topo = remap[dag.topo]
        topo = topo[topo >= 0]
    job_map = np.full(dag.n_jobs, -1, dtype=np.int32)
    job_map[jobs] = np.arange(len(jobs), dtype=np.int32)
    sub = DagArrays(
        # map over Python ints: a generator over numpy ints cost seconds per
        # paper-scale run (every re-plan copies ~10^4 ids)
        job_ids=tuple(map(dag.job_ids.__getitem__, jobs.tolist())),
        node_ids=tuple(map(dag.node_ids.__getitem__, nodes.tolist())) if len(dag.node_ids) else (),
        job_ptr=job_ptr,
        kind=dag.kind[nodes],
        host=dag.host[nodes],
        src=dag.src[nodes],
        dst=dag.dst[nodes],
        size=dag.size[nodes],
        duration=dag.duration[nodes],
        std=dag.std[nodes],
        job_of=job_map[dag.job_of[nodes]],
        arrival=dag.arrival[jobs],
        priority=dag.priority[jobs],
        job_class=dag.job_class[jobs],
        pred_ptr=pred_ptr,
        pred_idx=remap[pred_idx].astype(np.int32),
        succ_ptr=succ_ptr,
        succ_idx=remap[succ_idx].astype(np.int32),
        topo=topo.astype(np.int32),
    )
    return sub, nodes


def check_slot_s(slot_s) -> float:
    """``slot_s`` as a float, or a :class:`ValidationError` unless it is a finite number of seconds of at
    least :data:`jitsched.plan.MIN_SLOT_S`."""
    if isinstance(slot_s, bool) or not (isinstance(slot_s, (int, float)) and MIN_SLOT_S <= slot_s < float("inf")):
        raise ValidationError(f"slot_s: {SLOT_S_RULE}, got {slot_s!r}")
    return float(slot_s)


def unfinished_transfers(view: SchedulerView) -> np.ndarray:
    """Global node indices of the active jobs' transfers with bytes still to send."""
    dag = view.dag
    live = view.job_arrived & ~view.job_done
    return np.flatnonzero((dag.kind == TRANSFER) & live[dag.job_of] & (view.node_state != DONE)
                          & (view.remaining > 0))


def background_entries(view: SchedulerView, bg_rank: np.ndarray) -> tuple[list, dict]:
    """Schedule entries and ranks of the first ``len(bg_rank)`` background flows of ``view``.

    A daemon's announced background flows (``view.bg_ids``) as
    ``(BACKGROUND_JOB, name, src, dst, 0, no rates)``, each at its rank.
    """
    flows, prio = [], {}
    for b, r in enumerate(bg_rank.tolist()):
        key = (BACKGROUND_JOB, view.bg_ids[b])
        flows.append((*key, int(view.bg_src[b]), int(view.bg_dst[b]), 0, np.zeros(0)))
        prio[key] = int(r)
    return flows, prio


def ranked_schedule(view: SchedulerView, nodes: np.ndarray, rank: np.ndarray, slot_s: float,
                    bg_rank: np.ndarray | None = None) -> SlotSchedule:
    """A rates-free schedule listing transfers ``nodes`` with strict-priority ranks ``rank`` (0 first).

    What an order-only policy hands the daemon for its host agents: every
    flow is work-conserving at its rank, background after all of them but
    the announced background flows ranked in ``bg_rank`` (shape (B,), in
    ``view.bg_*`` order; see :func:`background_entries`).

    Parameters
    ----------
    view : SchedulerView
    nodes : ndarray of int, shape (F,)
        Global transfer node indices.
    rank : ndarray of int, shape (F,)
        Their ranks; equal ranks share a priority.
    slot_s : float
        The schedule's slot length, seconds.
    """
    dag = view.dag
    flows, prio = [], {}
    for n, r in zip(nodes.tolist(), rank.tolist(), strict=True):
        key = (dag.job_ids[dag.job_of[n]], dag.node_ids[n])
        flows.append((*key, int(dag.src[n]), int(dag.dst[n]), 0, np.zeros(0)))
        prio[key] = int(r)
    if bg_rank is not None and len(bg_rank):
        more, more_prio = background_entries(view, bg_rank)
        flows += more
        prio |= more_prio
    h = len(view.cluster)
    return SlotSchedule(epoch_s=view.now, slot_s=slot_s, flows=flows, leftover_egress=np.zeros((h, 0)),
                        leftover_ingress=np.zeros((h, 0)), prio=prio)


def background_shares(rates: np.ndarray, flows, cap_e: np.ndarray, cap_i: np.ndarray) -> np.ndarray:
    """``rates`` with the background flows' replaced by max-min fair shares of what the DL flows leave.

    How host agents treat traffic the daemon does not rank: one background
    class with one FIFO, where TCP shares it about evenly, after every
    ranked flow.

    Parameters
    ----------
    rates : ndarray, shape (F,)
        Rates of ``flows``, bytes/s; the DL flows' are kept.
    flows : FlowSet
    cap_e, cap_i : ndarray, shape (H,)
        Capacities, bytes/s.
    """
    bg = flows.job < 0
    if not len(rates) or not bg.any():
        return rates
    return fixed_then_maxmin(np.where(bg, np.nan, rates), flows.src, flows.dst, cap_e, cap_i)


def floored_background_shares(dl_rates, flows, cap_e: np.ndarray, cap_i: np.ndarray, floor: float) -> np.ndarray:
    """:func:`background_shares` with the background guaranteed ``floor`` of every port it uses.

    The host agents' background floor (``jitsched agent --background-floor``):
    their background class is guaranteed that share of each port (egress,
    and the shaped ingress) while it is backlogged, and the ranked flows
    borrow back whatever it leaves idle. Here the DL flows first get their
    rates on ports shrunk by ``floor`` wherever a background flow sends or
    receives, the background flows share what they leave max-min fair, and
    the DL flows then get their rates again on what the background flows
    took (the floor they left unused, HTB lending a class's idle rate).

    Parameters
    ----------
    dl_rates : callable
        ``dl_rates(cap_e, cap_i)``: every flow's rate on those capacities
        (the policy's order); the background flows' entries are ignored.
    flows : FlowSet
    cap_e, cap_i : ndarray, shape (H,)
        Capacities, bytes/s.
    floor : float
        Share of a port, in [0, 1); 0: :func:`background_shares` of ``dl_rates(cap_e, cap_i)``.
    """
    bg = flows.job < 0
    if floor <= 0.0 or not len(bg) or not bg.any():
        return background_shares(dl_rates(cap_e, cap_i), flows, cap_e, cap_i)
    h = len(cap_e)
    keep = 1.0 - floor
    dl_e = np.where(np.bincount(flows.src[bg], minlength=h) > 0, cap_e * keep, cap_e)
    dl_i = np.where(np.bincount(flows.dst[bg], minlength=h) > 0, cap_i * keep, cap_i)
    first = background_shares(dl_rates(dl_e, dl_i), flows, cap_e, cap_i)
    free_e = np.maximum(cap_e - np.bincount(flows.src[bg], first[bg], h), 0.0)
    free_i = np.maximum(cap_i - np.bincount(flows.dst[bg], first[bg], h), 0.0)
    return np.where(bg, first, dl_rates(free_e, free_i))


def check_bg_floor(floor: float) -> float:
    """``floor`` as a float; ValidationError unless it is a share of a port in [0, 1)."""
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 0.0 <= floor < 1.0:
        raise ValidationError(f"bg_floor: must be within [0, 1), got {floor!r}")
    return float(floor)


def coflow_loads(view: SchedulerView, background: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The coflows of ``view`` and their loads: each arrived, unfinished job's unfinished
    transfers, and (with ``background``) each sending background flow alone.

    Returns
    -------
    jobs : ndarray of int, shape (J,)
        The jobs' indices, coflows ``0..J-1``.
    bgs : ndarray of int, shape (B,)
        The background flows' indices, coflows ``J..J+B-1``.
    load : ndarray, shape (J + B, 2 * n_hosts)
        Each coflow's bytes left on each port over its rate (egress ports, then ingress), seconds.
    """
    dag, cl = view.dag, view.cluster
    h = len(cl)
    jobs = np.flatnonzero(view.job_arrived & ~view.job_done)
    tr = np.flatnonzero((dag.kind == TRANSFER) & view.job_arrived[dag.job_of]
                        & ~view.job_done[dag.job_of] & (view.node_state != DONE))
    pos = np.full(dag.n_jobs, -1, dtype=np.int64)
    pos[jobs] = np.arange(len(jobs))
    f = view.flows
    bgs = np.unique(f.bg[f.bg >= 0]) if background else np.zeros(0, dtype=np.int64)
    load = np.zeros((len(jobs) + len(bgs), 2 * h))
    rem = view.remaining[tr]
    np.add.at(load, (pos[dag.job_of[tr]], dag.src[tr]), rem / cl.egress_Bps[dag.src[tr]])
    np.add.at(load, (pos[dag.job_of[tr]], h + dag.dst[tr]), rem / cl.ingress_Bps[dag.dst[tr]])
    if len(bgs):
        sel = f.bg >= 0
        bpos = np.searchsorted(bgs, f.bg[sel]) + len(jobs)
        np.add.at(load, (bpos, f.src[sel]), f.remaining[sel] / cl.egress_Bps[f.src[sel]])
        np.add.at(load, (bpos, h + f.dst[sel]), f.remaining[sel] / cl.ingress_Bps[f.dst[sel]])
    return jobs, bgs, load


def coflow_ranks(order: np.ndarray, view: SchedulerView, jobs: np.ndarray,
                 bgs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-job and per-background-flow ranks from a coflow ``order`` (first served first) of
    :func:`coflow_loads`' coflows; jobs and flows outside it rank after all of them."""
    nc = len(jobs) + len(bgs)
    rank = np.empty(nc, dtype=np.int64)
    rank[order] = np.arange(nc)
    job_rank = np.full(view.dag.n_jobs, nc, dtype=np.int64)
    job_rank[jobs] = rank[:len(jobs)]
    bg_rank = np.full(len(view.bg_src), nc, dtype=np.int64)
    bg_rank[bgs] = rank[len(jobs):]
    return job_rank, bg_rank

