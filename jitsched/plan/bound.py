"""A lower bound on the mean JCT any policy can reach on a workload: each job's time alone (its chains and the port time before and after each node), per-port SRPT, and a time-indexed LP relaxation (jitsched.plan.lpbound)."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

import numpy as np

from jitsched.dag.model import Job, Workload
from jitsched.errors import ValidationError
from jitsched.plan.lpbound import lp_sum_bound

# A job's band (JobBounds.bands) closes once it holds a BANDS-th of its pair of hosts' bytes:
# on the 10 Gbit/s regime workloads 8 or 16 gave the same bound as 4 in 3-10 times the time.
BANDS = 4
# ... or when the next transfer's earliest start is this share of the job's time alone past
# the band's first
BAND_SPAN = 1 / 16
# The latest arrival time the bound and the simulator take, seconds (2**32 s, about 136
# years): float seconds below 2**33 are at most 2**-20 s (under a microsecond) apart, so a
# job arriving by then keeps that resolution for 136 years more; at 1e16 s they are 2 s
# apart and a JCT of a second rounds to 0.
MAX_ARRIVAL_S = 2.0 ** 32


def check_arrivals(workload: Workload) -> None:
    """Refuse a job or background flow arriving after :data:`MAX_ARRIVAL_S`.

    Raises
    ------
    ValidationError
        Naming the first such job or flow.
    """
    for kind, items in (("job", workload.jobs), ("background flow", workload.background)):
        for x in items:
            if not x.arrival_s <= MAX_ARRIVAL_S:
                raise ValidationError(
                    f"{kind} {x.id!r}: arrival_s {x.arrival_s:g} is after 2**32 s (about 136 years), "
                    "where float seconds are too coarse to time it to the microsecond")


@dataclass(frozen=True)
class JobBounds:
    """One job's bounds, seconds from its arrival.

    ``alone``: no schedule finishes the job sooner. For every node, the earliest
    it can start plus its duration plus the least time the job needs after it;
    both ends count the port time of the transfers before (after) the node that
    share a port, not only the longest path to it (:func:`job_bounds`).
    ``ports``: per port the job uses, ``(port, busy_s, head_s, tail_s)``: the
    seconds its bytes keep that port busy, the earliest any of them can start,
    and the least time the job needs after the last.
    ``bands``: the job's transfers between each pair of hosts in groups of
    close earliest starts (:func:`_bands`), ``(egress port, ingress port,
    bytes, head_s, tail_s)``: their bytes, the earliest any of them can start
    and the least time the job needs after the last of them
    (:func:`jitsched.plan.lpbound.lp_sum_bound`), sorted.
    """

    alone: float
    ports: tuple[tuple[int, float, float, float], ...]
    bands: tuple[tuple[int, int, float, float, float], ...] = ()


def _order(job: Job) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    for u, v in job.edges:
        succ.setdefault(u, []).append(v)
        pred.setdefault(v, []).append(u)
    nodes = [c.id for c in job.computes] + [t.id for t in job.transfers]
    indeg = {n: len(pred.get(n, ())) for n in nodes}
    ready = [n for n in nodes if indeg[n] == 0]
    out = []
    while ready:
        n = ready.pop()
        out.append(n)
        for v in succ.get(n, ()):
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    return out, succ, pred


def _release_makespan(release: np.ndarray, work: np.ndarray) -> float:
    """The least time by which one machine can finish jobs of ``work`` released at ``release``
    (preemption allowed): the largest, over each release, of it plus the work released then or later."""
    order = np.argsort(-release, kind="stable")
    return float(np.max(release[order] + np.cumsum(work[order])))


def _port_passes(order: list[str], near: dict[str, list[str]], dur: dict[str, float],
                 on_port: dict[str, list[tuple[int, float]]], ports: list[int]) -> dict[str, float]:
    """The least time before each node (from the job's start, taking ``near`` as each node's
    predecessors and ``order`` topological; or to its end, with successors and the reverse order).

    A node waits for the longest chain of ``near`` nodes to it, and for each port, for all
    the transfers before it that use that port: those cannot all have passed before the
    least time one machine takes to carry them from their own earliest times.
    """
    col = {p: k for k, p in enumerate(ports)}
    slot: dict[str, list[tuple[int, int]]] = {}  # transfer -> (port column, its index there)
    count = [0] * len(ports)
    for n in order:
        for p, _ in on_port.get(n, ()):
            k = col[p]
            slot.setdefault(n, []).append((k, count[k]))
            count[k] += 1
    work = [np.zeros(c) for c in count]
    for n, places in slot.items():
        for (k, i), (_, w) in zip(places, on_port[n], strict=True):
            work[k][i] = w
    times = [np.zeros(c) for c in count]  # each transfer's least time, as found
    # per node, per port column: (mask of the transfers before it there, how many, their makespan)
    held: dict[str, list[tuple[np.ndarray | None, int, float]]] = {}
    before: dict[str, float] = {}
    empty: tuple[np.ndarray | None, int, float] = (None, 0, 0.0)
    for n in order:
        preds = near.get(n, ())
        t = max((before[m] + dur[m] for m in preds), default=0.0)
        if len(preds) == 1 and preds[0] not in slot:
            mine = held[preds[0]]  # the same transfers before it as before its one predecessor
        else:
            mine = []
            for k in range(len(ports)):
                got = [held[m][k] for m in preds if held[m][k][0] is not None]
                own = [i for m in preds for kk, i in slot.get(m, ()) if kk == k]
                if len(got) <= 1 and not own:  # nothing before it there, or one predecessor's set
                    mine.append(got[0] if got else empty)
                    continue
                widest = max(got, key=lambda g: g[1]) if got else empty
                if len(got) > 1:
                    mask = np.logical_or.reduce([g[0] for g in got])
                else:
                    mask = np.zeros(count[k], dtype=bool) if widest[0] is None else widest[0].copy()
                mask[own] = True
                size = int(mask.sum())
                if size == widest[1]:  # a predecessor had them all before it already
                    mine.append(widest)
                    continue
                span = _release_makespan(times[k][mask], work[k][mask]) if size > 1 else 0.0
                mine.append((mask, size, span))
        t = max([t] + [span for _, _, span in mine])
        held[n] = mine
        before[n] = t
        for k, i in slot.get(n, ()):
            times[k][i] = t
    return before


def job_bounds(job: Job, egress_Bps: np.ndarray, ingress_Bps: np.ndarray, index) -> JobBounds:
    """The bounds of one job on a cluster of ``len(egress_Bps)`` hosts (bytes/s).

    Ports are numbered egress ``0..H-1`` then ingress ``H..2H-1``; ``index``
    maps a host name to its number. Each node's earliest start is at least the
    longest chain before it, and, for each port, the least time one machine
    takes to carry all the transfers before it on that port from their own
    earliest starts (the transfers before a parameter server's forward pass
    must all cross its egress before the backward pass can begin); the least
    time the job needs after a node, the same backwards.
    """
    h = len(egress_Bps)
    dur: dict[str, float] = {c.id: float(c.duration_s) for c in job.computes}
    on_port: dict[str, list[tuple[int, float]]] = {}  # transfer -> (port, seconds it keeps it busy)
    carried: dict[int, list[str]] = {}  # port -> the transfers on it
    load = np.zeros(2 * h)
    cap = np.concatenate([egress_Bps, ingress_Bps])
    for t in job.transfers:
        s, d = index(t.src), index(t.dst)
        rate = math.inf if s == d else min(egress_Bps[s], ingress_Bps[d])
        dur[t.id] = float(t.bytes) / rate
        if s != d:
            on_port[t.id] = [(s, float(t.bytes) / cap[s]), (h + d, float(t.bytes) / cap[h + d])]
            for p in (s, h + d):
                load[p] += t.bytes
                carried.setdefault(p, []).append(t.id)
    order, succ, pred = _order(job)
    used = [int(p) for p in np.flatnonzero(load > 0)]
    est = _port_passes(order, pred, dur, on_port, used)
    tail = _port_passes(order[::-1], succ, dur, on_port, used)
    alone = max((est[n] + dur[n] + tail[n] for n in order), default=0.0)
    busy = load / cap
    ports = []
    for p in used:
        on = carried[p]
        ports.append((p, float(busy[p]), min(est[tid] for tid in on), min(tail[tid] for tid in on)))
    # a port's bytes cannot start before its head, keep it busy for busy_s, and the job
    # needs its tail after the last of them, whichever transfer carries it
    alone = max([alone] + [head + b + t for _, b, head, t in ports])
    pairs: dict[tuple[int, int], list[tuple[float, float, float]]] = {}
    for t in job.transfers:
        if t.id in on_port:
            (s, _), (i, _) = on_port[t.id]
            pairs.setdefault((s, i), []).append((tail[t.id], est[t.id], float(t.bytes)))
    bands = tuple(sorted(b for (s, i), rows in pairs.items() for b in _bands(s, i, rows, BAND_SPAN * alone)))
    return JobBounds(alone, tuple(ports), bands)


def _bands(egress: int, ingress: int, rows: list[tuple[float, float, float]], span: float) -> list[tuple]:
    """``rows`` ``(tail_s, head_s, bytes)`` of one pair of hosts in groups of consecutive heads
    (then largest tails first), each closed once it holds a :data:`BANDS`-th of the bytes,
    and no group's heads more than ``span`` seconds apart: a transfer that can start early
    does not let a group of later ones start with it."""
    rows = sorted(rows, key=lambda r: (r[1], -r[0]))
    quota = sum(r[2] for r in rows) / BANDS
    groups: list[list[tuple[float, float, float]]] = []
    held = 0.0
    for r in rows:
        if not groups or held >= quota or r[1] > groups[-1][0][1] + span:
            groups.append([])
            held = 0.0
        groups[-1].append(r)
        held += r[2]
    return [(egress, ingress, sum(r[2] for r in g), g[0][1], min(r[0] for r in g)) for g in groups]


def _shared_job_bounds(job: Job, egress_Bps: np.ndarray, ingress_Bps: np.ndarray, index,
                       cache: dict[tuple, JobBounds]) -> JobBounds:
    """:func:`job_bounds`, shared between jobs that differ only in their hosts' names and
    numbers (the same model placed elsewhere on ports of the same rates): ``cache`` keeps
    each shape's bounds with its hosts numbered in order of first use."""
    ends = [(index(t.src), index(t.dst)) for t in job.transfers]
    local: dict[int, int] = {}
    for pair in ends:
        for x in pair:
            local.setdefault(x, len(local))
    hosts = list(local)
    key = (tuple((c.id, c.duration_s) for c in job.computes),
           tuple((t.id, t.bytes, local[s], local[d]) for t, (s, d) in zip(job.transfers, ends, strict=True)),
           tuple(job.edges), tuple(float(egress_Bps[x]) for x in hosts), tuple(float(ingress_Bps[x]) for x in hosts))
    got = cache.get(key)
    h, n = len(egress_Bps), len(hosts)
    if got is None:
        # the job on its own hosts only, named by their local numbers
        renamed = replace(job, transfers=tuple(replace(t, src=str(local[s]), dst=str(local[d]))
                                               for t, (s, d) in zip(job.transfers, ends, strict=True)))
        got = cache[key] = job_bounds(renamed, egress_Bps[hosts], ingress_Bps[hosts], int)
    # the shape's ports (egress 0..n-1, ingress n..2n-1 of its own hosts) back on the cluster's
    def port(p: int) -> int:
        return hosts[p] if p < n else h + hosts[p - n]

    ports = sorted((port(p), busy, head, tail) for p, busy, head, tail in got.ports)
    bands = tuple(sorted((port(e), port(i), b, head, tail) for e, i, b, head, tail in got.bands))
    return JobBounds(got.alone, tuple(ports), bands)


def srpt_total(release: np.ndarray, work: np.ndarray) -> np.ndarray:
    """Completion times of preemptive shortest-remaining-work-first on one machine.

    SRPT minimises the sum of completion times on one machine with release
    times and preemption, so no schedule of these jobs on this port does
    better. Ties go to the lower index.

    Parameters
    ----------
    release, work : ndarray, shape (n,)
        Seconds.

    Returns
    -------
    ndarray, shape (n,)
        Each job's completion time, seconds.
    """
    n = len(release)
    done = np.zeros(n)
    order = np.argsort(release, kind="stable")
    heap: list[tuple[float, int]] = []
    t = 0.0
    k = 0
    while k < n or heap:
        if not heap:
            t = max(t, float(release[order[k]]))
        while k < n and release[order[k]] <= t:
            i = int(order[k])
            heapq.heappush(heap, (float(work[i]), i))
            k += 1
        left, i = heapq.heappop(heap)
        nxt = float(release[order[k]]) if k < n else math.inf
        if t + left <= nxt:
            t += left
            done[i] = t
        else:
            heapq.heappush(heap, (left - (nxt - t), i))
            t = nxt
    return done


def lower_bound_mean_jct(workload: Workload, lp: bool = True) -> float:
    """A lower bound on the mean JCT (seconds) of ``workload``'s jobs under any schedule.

    The best of four valid bounds (three without ``lp``):
    - the mean of each job's JCT alone (:func:`job_bounds`);
    - for each port, the jobs that use it scheduled on it as one machine by
      SRPT (released when their first byte there can start, each followed by
      the least time its job needs after its last byte there), with every
      other job at its time alone;
    - every job given to one of its ports (the one its time alone comes from),
      and each port's jobs scheduled on it by SRPT as above: a job's JCT is at
      least its completion on its own port, and each port's sum is at least
      SRPT's for the jobs given to it, whatever the others do;
    - the time-indexed LP relaxation of :func:`jitsched.plan.lpbound.lp_sum_bound`
      on the jobs' bands, which sees jobs that need one port at the same time
      (a job's pull into a host while another pushes its gradients there)
      where the others see each port's bytes as free to move anywhere after
      their first can start.
    Compute never contends (hosts run any number of ops at once, as the
    simulator models), background flows are left out, and durations are the
    declared ones.

    Raises
    ------
    ValidationError
        If a job arrives after :data:`MAX_ARRIVAL_S` (:func:`check_arrivals`).
    """
    jobs = workload.jobs
    eg, ig, bounds, alone = _workload_bounds(workload)
    if not jobs:
        return 0.0
    best = float(alone.sum())
    by_port: dict[int, list[tuple[int, float, float, float]]] = {}
    given: dict[int, list[tuple[int, float, float, float]]] = {}  # each job on its heaviest port
    for k, (j, b) in enumerate(zip(jobs, bounds, strict=True)):
        rows = [(k, j.arrival_s + head, busy, tail) for _, busy, head, tail in b.ports]
        for (p, *_), row in zip(b.ports, rows, strict=True):
            by_port.setdefault(p, []).append(row)
        if rows:
            at = max(range(len(rows)), key=lambda i: rows[i][1] + rows[i][2] + rows[i][3])
            given.setdefault(b.ports[at][0], []).append(rows[at])
    for rows in by_port.values():
        ks = [r[0] for r in rows]
        total = float(alone.sum() - alone[ks].sum()) + max(float(alone[ks].sum()), _port_sum(rows, jobs))
        best = max(best, total)
    ks = [r[0] for rows in given.values() for r in rows]
    partitioned = float(alone.sum() - alone[ks].sum()) + sum(
        max(float(alone[[r[0] for r in rows]].sum()), _port_sum(rows, jobs)) for rows in given.values())
    if lp:
        cap = np.concatenate([eg, ig])
        best = max(best, lp_sum_bound(np.array([j.arrival_s for j in jobs]), alone, [b.bands for b in bounds], cap))
    return max(best, partitioned) / len(jobs)


def _workload_bounds(workload: Workload) -> tuple[np.ndarray, np.ndarray, list[JobBounds], np.ndarray]:
    """The ports' rates (egress, ingress; bytes/s), each job's :class:`JobBounds` and time alone
    (seconds) of ``workload``, its arrivals checked (:func:`check_arrivals`)."""
    check_arrivals(workload)
    cl = workload.cluster
    eg = np.array([x.egress_bps / 8.0 for x in cl.hosts])
    ig = np.array([x.ingress_bps / 8.0 for x in cl.hosts])
    cache: dict[tuple, JobBounds] = {}
    bounds = [_shared_job_bounds(j, eg, ig, cl.index, cache) for j in workload.jobs]
    return eg, ig, bounds, np.array([b.alone for b in bounds], dtype=float)


def lp_job_jcts(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """Each job's JCT in the solution of the bound's LP relaxation, and its least JCT alone.

    The LP (:func:`jitsched.plan.lpbound.lp_sum_bound`) sees the whole
    workload at once, arrivals to come included: its JCTs say how the
    relaxation spreads the jobs' delays, for comparisons with what schedules
    do, not what any online schedule can know.

    Returns
    -------
    lp_jct_s, alone_s : ndarray, shape (n_jobs,)
        Seconds.

    Raises
    ------
    ValidationError
        If a job arrives after :data:`MAX_ARRIVAL_S` (:func:`check_arrivals`).
    """
    eg, ig, bounds, alone = _workload_bounds(workload)
    jcts = np.zeros(len(alone))
    lp_sum_bound(np.array([j.arrival_s for j in workload.jobs]), alone, [b.bands for b in bounds],
                 np.concatenate([eg, ig]), jcts=jcts)
    return jcts, alone


def _port_sum(rows: list[tuple[int, float, float, float]], jobs) -> float:
    """The least sum of JCTs of the jobs in ``rows`` ``(job index, release, busy_s, tail_s)``
    on one port: their SRPT completions there, each followed by its tail, from its arrival."""
    rel = np.array([r[1] for r in rows])
    work = np.array([r[2] for r in rows])
    tails = np.array([r[3] for r in rows])
    arrivals = np.array([jobs[r[0]].arrival_s for r in rows])
    return float((srpt_total(rel, work) - arrivals).sum() + tails.sum())


__all__ = ["MAX_ARRIVAL_S", "JobBounds", "check_arrivals", "job_bounds", "lower_bound_mean_jct", "lp_job_jcts",
           "srpt_total"]
