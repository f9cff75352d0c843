"""A lower bound on the sum of JCTs from a time-indexed LP relaxation solved by HiGHS: jobs' bands of bytes share each port slot by slot, and a job ends no sooner than each set of its bands' mean busy time plus half their time on the port plus the least time it needs after them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import sparse
from scipy.optimize import linprog
from scipy.sparse.csgraph import connected_components

# linprog's statuses other than 0 (optimal); the LP is always feasible and bounded
# (bytes may wait past the window, a job may end late), so any of these is a solver fault
LP_STATUS = {1: "iteration or time limit", 2: "infeasible", 3: "unbounded", 4: "numerical difficulties"}
# Dual simplex solves the regime sweep's LPs in 0.7-2.1 s where the interior point method takes
# 6.7-18.8 s, but on some LPs of the mixed-shape point it stalls: seed 1 took 956 s, the
# interior point method 66 s (seeds 0-3: simplex 23.6, 956, 84.7, 5.9 s; IPM 26.2, 66.1,
# 32.8, 56.5 s). So simplex gets this long, then the IPM (with crossover: an optimal basis).
SIMPLEX_S = 30.0


def lp_sum_bound(arrival: np.ndarray, alone: np.ndarray, bands: Sequence[Sequence[tuple]], cap_Bps: np.ndarray,
                 slots_per_job: int = 100, window: float = 4.0, simplex_s: float = SIMPLEX_S,
                 jcts: np.ndarray | None = None) -> float:
    """A lower bound (seconds) on the sum over jobs of JCT under any schedule.

    Time is cut into slots of ``mean(alone) / slots_per_job`` seconds. Each band
    of a job carries its bytes in the slots from its earliest start on: on
    every port and in every slot, the bands there carry at most the port's
    rate times the slot. For each port and each set of a job's bands on it with
    the largest least tails, the job ends no sooner than the set's mean busy
    time (each slot's bytes counted at the slot's start), plus half the time
    the port takes to carry its bytes, plus its least tail: bytes carried at
    most at the port's rate have their last byte at least that long after their
    mean. A job ends no sooner than its arrival plus ``alone`` either. Bytes a
    band has not carried ``window`` times its job's time alone after its
    earliest start count at that instant and take no capacity, so every
    schedule, however late, is a solution of the LP. Jobs whose bands share no
    port in any slot are separate LPs (:func:`_components`), each solved with
    times from its own first slot.

    Parameters
    ----------
    arrival, alone : ndarray, shape (n_jobs,)
        Each job's arrival and least JCT alone, seconds.
    bands : sequence of sequences of (egress port, ingress port, bytes, head_s, tail_s)
        Each job's bands (:attr:`jitsched.plan.bound.JobBounds.bands`); ports
        index ``cap_Bps``.
    cap_Bps : ndarray, shape (n_ports,)
        Each port's rate, bytes/s.
    slots_per_job : int
        Slots in the mean time alone (the bound loses at most a slot per job to them).
    window : float
        Each band's slots, in times its job's time alone.
    simplex_s : float
        Seconds dual simplex gets before the interior point method solves the
        LP instead (both to optimality: the bound does not depend on which).
    jcts : ndarray, shape (n_jobs,), optional
        Filled with each job's JCT in the LP's solution, seconds (``alone``
        for a job in no LP); they add up to the sum returned where that is
        above ``alone.sum()``.

    Returns
    -------
    float
        Seconds: at least ``alone.sum()``.

    Raises
    ------
    RuntimeError
        If HiGHS does not solve the LP.
    """
    arrival, alone = np.asarray(arrival, dtype=float), np.asarray(alone, dtype=float)
    cap = np.asarray(cap_Bps, dtype=float)
    n = len(alone)
    if jcts is not None:
        jcts[:] = alone
    if n == 0 or not any(bands):
        return float(alone.sum())
    unit = float(cap.max())  # bytes in the LP are seconds at this rate
    dt = float(alone.mean()) / slots_per_job
    if dt <= 0:  # no job takes any time alone: nothing to share
        return float(alone.sum())
    width = [max(1, math.ceil(window * alone[j] / dt)) for j in range(n)]
    first = [[math.floor((arrival[j] + head) / dt + 1e-9) for _, _, _, head, _ in job_bands]
             for j, job_bands in enumerate(bands)]
    total = float(sum(alone[j] for j in range(n) if not bands[j]))  # a job of no bands: its time alone
    for jobs in _components(bands, first, width, n):
        k0 = min(f for j in jobs for f in first[j])
        total += _component_sum(jobs, k0, arrival, alone, bands, first, width, cap, unit, dt, simplex_s, jcts)
    return max(float(alone.sum()), total)


def _components(bands: Sequence[Sequence[tuple]], first: list[list[int]], width: list[int],
                n: int) -> list[list[int]]:
    """The jobs with bands, in groups that share no (port, slot): independent LPs, in job order.

    A band holds its two ports over slots ``[first, first + width)`` of its job;
    two jobs whose bands overlap on a port are in one group. A sparse stream of
    jobs is then many small LPs instead of one large one.
    """
    rows = sorted((p, f, f + width[j], j) for j in range(n) for band, f in zip(bands[j], first[j], strict=True)
                  for p in band[:2])
    a, b = [], []
    port, reach, last = -1, -math.inf, -1
    for p, lo, hi, j in rows:
        if p == port and lo < reach:
            a.append(last)
            b.append(j)
            reach = max(reach, hi)
        else:
            port, reach = p, hi
        last = j
    graph = sparse.csr_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    _, label = connected_components(graph, directed=False)
    groups: dict[int, list[int]] = {}
    for j in range(n):
        if bands[j]:
            groups.setdefault(int(label[j]), []).append(j)
    return list(groups.values())


def _component_sum(jobs: list[int], k0: int, arrival: np.ndarray, alone: np.ndarray,
                   bands: Sequence[Sequence[tuple]], first: list[list[int]], width: list[int],
                   cap: np.ndarray, unit: float, dt: float, simplex_s: float,
                   jcts: np.ndarray | None = None) -> float:
    """The LP's least sum of JCTs of ``jobs`` (a group of :func:`_components`), seconds;
    each job's into ``jcts`` if given.

    Times count from the group's first slot ``k0``: the LP is the same up to
    that shift (each set's bytes sum to its ``total``), and its coefficients
    stay as small as the group's span, not the workload's, however late the
    group comes.
    """
    origin = k0 * dt
    since = arrival[jobs] - origin  # arrivals from the group's first slot
    n = len(jobs)
    # each job's end C_j first, then per band its slots, its overflow and its moment (the sum
    # over its columns of bytes times their time): the sets' rows read the moments, so a row
    # holds one column per band in the set instead of every slot of it (at the mixed-shape
    # point's seed 1, 378k columns, the rows held 6.4M nonzeros)
    nvar = n
    ub: list[np.ndarray] = [np.full(n, np.inf)]
    eq: list[tuple[np.ndarray, float]] = []  # per band: its columns, its bytes
    cap_p, cap_t, cap_c = [], [], []  # capacity triplets: port, slot, column
    set_r, set_c, set_v, set_rhs = [], [], [], []
    mom_c, mom_v = [], []  # per band: its slots' and overflow's columns and times, then -1 on its moment
    for q, j in enumerate(jobs):
        job_bands = bands[j]
        w = width[j]
        moment_of = []
        for (e, i, nbytes, head, _), f in zip(job_bands, first[j], strict=True):
            start = since[q] + head
            slots = np.arange(f - k0, f - k0 + w)
            rate = min(cap[e], cap[i]) / unit
            ub.append(np.append(rate * np.maximum((slots + 1) * dt - np.maximum(slots * dt, start), 0.0), np.inf))
            cols = np.arange(nvar, nvar + w + 2)
            nvar += w + 2
            ub.append(np.array([np.inf]))
            moment_of.append(cols[-1])
            mom_c.append(cols)
            mom_v.append(np.concatenate([slots * dt, [(f - k0 + w) * dt, -1.0]]))
            cols = cols[:-1]
            eq.append((cols, nbytes / unit))
            for p in (e, i):
                cap_p.append(np.full(w, p))
                cap_t.append(slots)
                cap_c.append(cols[:-1])
        for p in sorted({x for band in job_bands for x in band[:2]}):
            on = sorted((k for k, band in enumerate(job_bands) if p in band[:2]), key=lambda k: -job_bands[k][4])
            total = 0.0
            for m, k in enumerate(on):
                total += job_bands[k][2] / unit
                # total * C_j - sum(t * x) >= total**2 * unit / (2 cap_p) + tau * total, as <=
                r = len(set_rhs)
                set_r.append(np.full(m + 2, r))
                set_c.append(np.append([moment_of[x] for x in on[:m + 1]], q))
                set_v.append(np.append(np.ones(m + 1), -total))
                set_rhs.append(-(total * total * unit / (2.0 * cap[p]) + job_bands[k][4] * total))
    pt = np.stack([np.concatenate(cap_p), np.concatenate(cap_t)])
    keys, row = np.unique(pt, axis=1, return_inverse=True)
    ncap = keys.shape[1]
    a_ub = sparse.vstack([
        sparse.csr_matrix((np.ones(len(row)), (row.ravel(), np.concatenate(cap_c))), shape=(ncap, nvar)),
        sparse.csr_matrix((np.concatenate(set_v), (np.concatenate(set_r), np.concatenate(set_c))),
                          shape=(len(set_rhs), nvar)),
    ]).tocsr()
    b_ub = np.concatenate([cap[keys[0]] / unit * dt, set_rhs])
    a_eq = sparse.vstack([
        sparse.csr_matrix((np.ones(sum(len(c) for c, _ in eq)),
                           (np.repeat(np.arange(len(eq)), [len(c) for c, _ in eq]),
                            np.concatenate([c for c, _ in eq]))), shape=(len(eq), nvar)),
        sparse.csr_matrix((np.concatenate(mom_v), (np.repeat(np.arange(len(mom_c)), [len(c) for c in mom_c]),
                                                   np.concatenate(mom_c))), shape=(len(mom_c), nvar)),
    ]).tocsr()
    c = np.zeros(nvar)
    c[:n] = 1.0
    lb = np.zeros(nvar)  # a moment too: every slot's time is >= 0
    lb[:n] = since + alone[jobs]
    lp = dict(A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.concatenate([[b for _, b in eq], np.zeros(len(mom_c))]),
              bounds=np.column_stack([lb, np.concatenate(ub)]))
    res = linprog(c, **lp, method="highs-ds", options={"time_limit": simplex_s})
    if res.status == 1:  # out of time
        res = linprog(c, **lp, method="highs-ipm")
    if res.status != 0:
        raise RuntimeError(f"the lower bound's LP: {LP_STATUS.get(res.status, res.status)}: {res.message}")
    if jcts is not None:
        jcts[jobs] = res.x[:n] - since
    return float(res.fun - since.sum())


__all__ = ["lp_sum_bound"]
