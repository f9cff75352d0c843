"""The time-slotted bandwidth LP (docs/architecture.md §5), built as CSC arrays and solved by HiGHS."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from jitsched.errors import ValidationError

try:
    import highspy
except ImportError:  # pragma: no cover - highspy is a hard dependency
    highspy = None

OBJECTIVES = ("balanced", "minmax")
SOLVERS = ("auto", "simplex", "ipm")
# Dual simplex wins on the small, sparse LPs of tens of jobs (docs/architecture.md §5); on
# one component of hundreds of jobs it degenerates (many equal-cost plans) and
# interior point was measured ~1.5x faster at 300 VGG16 jobs (90k columns).
AUTO_IPM_COLUMNS = 60_000

# phi(u) for a port's utilisation u in [0, 1]: convex piecewise-linear, one
# bounded column per segment. Increasing slopes make the segments fill in order
# without ordering constraints; the steep top keeps headroom for background traffic.
SEGMENT_WIDTHS = np.array([0.25, 0.25, 0.2, 0.15, 0.1, 0.05])
SEGMENT_SLOPES = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])

# Tardiness cost per unit of demand (capacity x slot) per slot of lateness,
# as a multiple of the largest marginal phi cost a unit of demand can cause
# (two ports at the steepest slope): lateness is always worth removing first.
TARDINESS_DOMINANCE = 16.0

# HiGHS model statuses mapped to ours; anything absent is "error".
_STATUS_TABLE = {
    "kOptimal": "optimal",
    "kTimeLimit": "time_limit",
    "kIterationLimit": "iteration_limit",
    "kInfeasible": "infeasible",
    "kUnboundedOrInfeasible": "infeasible",
    "kUnbounded": "unbounded",
    "kModelEmpty": "optimal",
    "kInterrupt": "interrupted",
    "kMemoryLimit": "memory_limit",
}
_STATUS_RANK = {"optimal": 0, "fallback": 1}


@dataclass
class LPSolution:
    """A bandwidth plan for ``m`` transfers over ``n_slots`` slots of ``slot_s`` seconds.

    Slot ``t`` covers ``[t*slot_s, (t+1)*slot_s)`` from the planning instant.

    Attributes
    ----------
    start_slot : ndarray of int64, shape (m,)
        First slot with a non-zero rate.
    rate_ptr : ndarray of int64, shape (m+1,)
        ``rate_values[rate_ptr[f]:rate_ptr[f+1]]`` are ``f``'s rates in bytes/s
        for slots ``start_slot[f]`` onwards.
    rate_values : ndarray of float64
    finish_slot : ndarray of int64, shape (m,)
        Last slot with a non-zero rate.
    deadline_slot : ndarray of int64, shape (m,)
        Last slot that ends no later than the LAT (rounded up to the grid).
    lateness_s : ndarray of float64, shape (m,)
        ``(finish_slot+1)*slot_s - lat_s`` where the transfer finishes after its
        deadline slot, else 0.
    leftover_egress, leftover_ingress : ndarray, shape (n_hosts, n_slots)
        Capacity minus planned rates, bytes/s (with residual capacities: the
        residuals minus planned rates, over at least the residuals' slots).
    status : str
        "optimal", or "fallback" when some component hit the time or iteration
        limit or the solver failed and earliest-deadline-first filling planned it.
    component_status : list of str
        Per component: "optimal" or "fallback(<solver status>)".
    iterations : int
        Solver iterations over all solves (simplex, interior point, crossover).
    """

    slot_s: float
    n_slots: int
    start_slot: np.ndarray
    rate_ptr: np.ndarray
    rate_values: np.ndarray
    finish_slot: np.ndarray
    deadline_slot: np.ndarray
    lateness_s: np.ndarray
    leftover_egress: np.ndarray
    leftover_ingress: np.ndarray
    status: str
    objective_value: float
    peak_utilization: float
    build_s: float
    solve_s: float
    n_variables: int
    n_constraints: int
    n_components: int
    component_status: list[str] = field(default_factory=list)
    iterations: int = 0

    def rates(self, f: int) -> np.ndarray:
        """Rates of transfer ``f`` in bytes/s from ``start_slot[f]`` on."""
        return self.rate_values[self.rate_ptr[f]:self.rate_ptr[f + 1]]

    def dense_rates(self) -> np.ndarray:
        """All rates as a dense array, shape (m, n_slots), bytes/s."""
        m = len(self.start_slot)
        out = np.zeros((m, self.n_slots))
        for f in range(m):
            r = self.rates(f)
            out[f, self.start_slot[f]:self.start_slot[f] + len(r)] = r
        return out

    @property
    def late(self) -> np.ndarray:
        """Indices of the transfers that miss their LAT."""
        return np.flatnonzero(self.lateness_s > 0)


_highs_made = False  # this process has built a Highs object (its banner is printed)
_highs_lock = threading.Lock()  # the daemon's planner threads may build their first at once


def _new_highs() -> highspy.Highs:
    """A Highs object; the first in a process prints HiGHS's banner on stderr, not stdout.

    HiGHS writes its version banner to the process's standard output when the
    first Highs object is built, before any option can turn logging off; it
    would corrupt what this process prints there (``jitsched plan --json``,
    bench ``--json`` outputs). Later objects print nothing.
    """
    global _highs_made
    if _highs_made:
        return highspy.Highs()
    import ctypes
    import os
    import sys

    with _highs_lock:
        if _highs_made:
            return highspy.Highs()
        sys.stdout.flush()
        saved = os.dup(1)
        try:
            os.dup2(2, 1)
            try:
                return highspy.Highs()
            finally:
                ctypes.CDLL(None).fflush(None)  # the banner may sit in C stdio's buffer
                os.dup2(saved, 1)
                _highs_made = True
        finally:
            os.close(saved)


def solve_bandwidth_lp(src, dst, size_bytes, release_s, lat_s, egress_Bps, ingress_Bps, *,
                       slot_s: float, objective: str = "balanced", weight=None,
                       time_limit_s: float | None = 5.0, iteration_limit: int | None = None,
                       split_components: bool = True, threads: int = 1, solver: str = "auto",
                       residual_egress_Bps=None, residual_ingress_Bps=None) -> LPSolution:
    """Plan per-slot rates for transfers so they arrive by their LATs.

    Parameters
    ----------
    src, dst : array of int, shape (m,)
        Host indices of each transfer.
    size_bytes : array, shape (m,)
        Bytes each transfer still has to send (> 0).
    release_s, lat_s : array, shape (m,)
        Release time and latest arrival time, seconds from the planning instant.
    egress_Bps, ingress_Bps : array, shape (n_hosts,)
        Port capacities, bytes/s.
    slot_s : float
        Slot length in seconds.
    objective : {"balanced", "minmax"}
        ``balanced`` minimises a convex piecewise-linear cost of every port's
        utilisation in every slot; ``minmax`` the largest utilisation.
    weight : array, shape (m,), optional
        Tardiness weight per transfer (e.g. from job priority), default 1.
    time_limit_s : float or None
        Total wall-clock solver budget, seconds; a component that runs out is
        planned by earliest-deadline-first filling instead. ``None``: no time limit.
        A time limit makes the plan depend on the machine's speed and load.
    iteration_limit : int, optional
        Solver iterations (simplex or interior point) per solve; a component
        whose solve runs out is planned by earliest-deadline-first filling. Unlike
        the time limit it is machine-independent: the same input gives the same
        plan anywhere (single-threaded HiGHS is deterministic).
    split_components : bool
        Solve transfers that share no port as separate LPs.
    threads : int
        HiGHS threads per solve.
    solver : {"auto", "simplex", "ipm"}
        ``auto``: dual simplex below ``AUTO_IPM_COLUMNS`` columns, interior point above.
    residual_egress_Bps, residual_ingress_Bps : array, shape (n_hosts, n_res), optional
        Capacity still free per port and slot (bytes/s), slot 0 being the planning
        instant's: what allocations planned elsewhere (and frozen) leave. Slots from
        ``n_res`` on have the full capacity; one of the two may be omitted (full
        capacity). The plan never exceeds them, and ``balanced``/``minmax`` weigh
        each port's total utilisation, the frozen part included, so new transfers
        avoid busy ports and slots.

    Returns
    -------
    LPSolution
        With residuals, ``leftover_*`` are the residuals minus the planned rates
        over ``max(n_slots, n_res)`` slots and ``peak_utilization`` counts the
        frozen allocations too.
    """
    t0 = time.perf_counter()
    if highspy is None:  # pragma: no cover
        raise ImportError("highspy is required for the bandwidth LP: pip install highspy")
    if objective not in OBJECTIVES:
        raise ValidationError(f"objective: expected one of {OBJECTIVES}, got {objective!r}")
    if not (isinstance(slot_s, (int, float)) and slot_s > 0 and math.isfinite(slot_s)):
        raise ValidationError(f"slot_s: must be a positive number of seconds, got {slot_s!r}")
    if solver not in SOLVERS:
        raise ValidationError(f"solver: expected one of {SOLVERS}, got {solver!r}")
    if time_limit_s is not None and not time_limit_s > 0:
        raise ValidationError(f"time_limit_s: must be positive or None, got {time_limit_s!r}")
    if iteration_limit is not None and (isinstance(iteration_limit, bool)
                                        or not isinstance(iteration_limit, (int, np.integer))
                                        or iteration_limit <= 0):
        raise ValidationError(f"iteration_limit: must be a positive integer or None, got {iteration_limit!r}")
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    size = np.asarray(size_bytes, dtype=np.float64)
    rel = np.asarray(release_s, dtype=np.float64)
    lat = np.asarray(lat_s, dtype=np.float64)
    cap_e = np.asarray(egress_Bps, dtype=np.float64)
    cap_i = np.asarray(ingress_Bps, dtype=np.float64)
    m, nh = len(src), len(cap_e)
    w = np.ones(m) if weight is None else np.asarray(weight, dtype=np.float64)
    for name, arr in (("dst", dst), ("size_bytes", size), ("release_s", rel), ("lat_s", lat),
                      ("weight", w)):
        if arr.shape != (m,):
            raise ValidationError(f"{name}: expected shape ({m},), got {arr.shape}")
    if cap_i.shape != (nh,):
        raise ValidationError(f"ingress_Bps: expected shape ({nh},), got {cap_i.shape}")
    if m and (src.min() < 0 or src.max() >= nh or dst.min() < 0 or dst.max() >= nh):
        raise ValidationError("src/dst: host index out of range")
    if np.any(size <= 0) or not np.all(np.isfinite(size)):
        raise ValidationError(f"size_bytes: must be positive and finite (transfer {int(np.argmin(size))})")
    if np.any(cap_e <= 0) or np.any(cap_i <= 0):
        raise ValidationError("egress_Bps/ingress_Bps: capacities must be positive")
    if not (np.all(np.isfinite(rel)) and np.all(np.isfinite(lat))):
        raise ValidationError("release_s/lat_s: must be finite")
    if np.any(w <= 0):
        raise ValidationError("weight: must be positive")
    util = _base_utilisation(residual_egress_Bps, residual_ingress_Bps, cap_e, cap_i)

    unit = float(max(cap_e.max(), cap_i.max())) if nh else 1.0
    cap = np.concatenate([cap_e, cap_i])  # ports: egress 0..nh-1, ingress nh..2nh-1
    coef = unit / cap
    demand = size / (unit * slot_s)  # in unit-capacity slots
    a = np.maximum(np.floor(rel / slot_s + 1e-9), 0).astype(np.int64)
    dl = np.maximum(np.ceil(lat / slot_s - 1e-9).astype(np.int64) - 1, a)
    pe, pi = src, nh + dst

    if split_components and m:
        # Transfers interact only through ports: components of the port graph
        # whose edges are transfers are independent LPs.
        ports = coo_matrix((np.ones(m), (pe, pi)), shape=(2 * nh, 2 * nh))
        _, port_label = connected_components(ports, directed=False)
        _, labels = np.unique(port_label[pe], return_inverse=True)
        n_comp = int(labels.max()) + 1
    else:
        n_comp, labels = (1 if m else 0), np.zeros(m, dtype=np.int64)

    slots_of: list[np.ndarray] = [None] * m  # type: ignore[list-item]
    starts = np.zeros(m, dtype=np.int64)
    build_s = solve_s = 0.0
    objective_value = 0.0
    n_var = n_con = 0
    statuses: list[str] = []
    iterations = 0
    deadline = t0 + (math.inf if time_limit_s is None else time_limit_s)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n_comp + 1))
    for c in range(n_comp):
        idx = order[bounds[c]:bounds[c + 1]]
        budget = max(deadline - time.perf_counter(), 1e-3)
        # Phase 1: on-time windows only, unmet demand as a priced slack. Most
        # plans fit, and the late tails are most of the columns; only when some
        # demand cannot be met on time is the full tardiness LP solved.
        res = _solve_component(idx, a, dl, demand, coef, pe, pi, w, objective, budget, threads,
                               late_tails=False, solver=solver, util=util,
                               iteration_limit=iteration_limit)
        if res["status"] == "optimal" and res["slack"] > 1e-9 * float(demand[idx].max()):
            build_s += res["build_s"]
            solve_s += res["solve_s"]
            iterations += res["iterations"]
            budget = max(deadline - time.perf_counter(), 1e-3)
            res = _solve_component(idx, a, dl, demand, coef, pe, pi, w, objective, budget,
                                   threads, late_tails=True, solver=solver, util=util,
                                   iteration_limit=iteration_limit)
        build_s += res["build_s"]
        solve_s += res["solve_s"]
        iterations += res["iterations"]
        n_var += res["n_var"]
        n_con += res["n_con"]
        if res["status"] != "optimal":
            statuses.append(f"fallback({res['status']})")
            y, base = _edf_fill(idx, a, dl, demand, coef, pe, pi, util)
            objective_value += _objective_of(y, base, idx, pe, pi, coef, dl, w, objective, util)
        else:
            statuses.append("optimal")
            y, base = res["y"], res["base"]
            objective_value += res["objective"]
        for k, f in enumerate(idx):
            slots_of[f] = y[k]
            starts[f] = base[k]

    t1 = time.perf_counter()
    sol = _assemble(slots_of, starts, a, dl, lat, coef, pe, pi, cap_e, cap_i, unit, slot_s, nh, util)
    sol.status = "optimal" if all(s == "optimal" for s in statuses) else "fallback"
    sol.objective_value = float(objective_value)
    sol.build_s = build_s + (time.perf_counter() - t1)
    sol.solve_s = solve_s
    sol.n_variables, sol.n_constraints, sol.n_components = n_var, n_con, n_comp
    sol.component_status = statuses
    sol.iterations = iterations
    return sol


def _base_utilisation(res_e, res_i, cap_e, cap_i) -> np.ndarray | None:
    """Utilisation already taken per port and slot, shape (2 n_hosts, n_res), or None.

    Rows are egress ports then ingress ports, as in the LP; values in [0, 1].
    """
    if res_e is None and res_i is None:
        return None
    nh = len(cap_e)
    arrs = []
    for name, res in (("residual_egress_Bps", res_e), ("residual_ingress_Bps", res_i)):
        if res is None:
            arrs.append(None)
            continue
        r = np.asarray(res, dtype=np.float64)
        if r.ndim != 2 or r.shape[0] != nh:
            raise ValidationError(f"{name}: expected shape ({nh}, n_slots), got {r.shape}")
        if not np.all(np.isfinite(r)):
            raise ValidationError(f"{name}: must be finite")
        arrs.append(r)
    n_res = max(r.shape[1] for r in arrs if r is not None)
    util = np.zeros((2 * nh, n_res))
    for k, (r, cap) in enumerate(zip(arrs, (cap_e, cap_i), strict=True)):
        if r is not None:
            # float crumbs of the plans that left these residuals: clip into [0, cap]
            util[k * nh:(k + 1) * nh, :r.shape[1]] = 1.0 - np.clip(r, 0.0, cap[:, None]) / cap[:, None]
    return util


def _util_at(util: np.ndarray | None, port: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Frozen utilisation of (port, slot) pairs; 0 past the residual window."""
    if util is None:
        return np.zeros(len(port))
    inside = slot < util.shape[1]
    out = np.zeros(len(port))
    out[inside] = util[port[inside], slot[inside]]
    return out


def _horizon(idx, a, dl, demand, coef, pe, pi, util=None) -> tuple[int, int]:
    """First slot and horizon of a component, enough to finish every demand.

    Fluid preemptive transfers on a bipartite switch can finish all demand in
    as many slots as the busiest port needs, once every transfer is released
    and every port is free of frozen allocations.
    """
    t_first = int(a[idx].min())
    nports = int(max(pe[idx].max(), pi[idx].max())) + 1
    load = np.bincount(pe[idx], weights=demand[idx] * coef[pe[idx]], minlength=nports)
    load += np.bincount(pi[idx], weights=demand[idx] * coef[pi[idx]], minlength=nports)
    need = int(math.ceil(load.max() - 1e-9))
    busy_until = 0
    if util is not None:
        ports = np.unique(np.concatenate([pe[idx], pi[idx]]))
        busy = np.flatnonzero((util[ports] > 1e-12).any(axis=0))
        busy_until = int(busy[-1]) + 1 if busy.size else 0
    horizon = max(int(dl[idx].max()) + 1, max(int(a[idx].max()), busy_until) + need + 1)
    return t_first, horizon


def _tardiness_unit(coef_max: float, objective: str) -> float:
    steepest = SEGMENT_SLOPES[-1] if objective == "balanced" else 1.0
    return TARDINESS_DOMINANCE * 2.0 * steepest * coef_max


def _solve_component(idx, a, dl, demand, coef, pe, pi, w, objective, budget, threads,
                     late_tails=True, solver="auto", util=None, iteration_limit=None):
    tb = time.perf_counter()
    n = len(idx)
    af, lf = a[idx], dl[idx]
    if late_tails:
        t_first, horizon = _horizon(idx, a, dl, demand, coef, pe, pi, util)
        nslots = horizon - af  # slots a_f .. horizon-1
    else:
        t_first, horizon = int(af.min()), int(lf.max()) + 1
        nslots = lf - af + 1  # slots a_f .. l_f
    col_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(nslots, out=col_ptr[1:])
    ny = int(col_ptr[-1])
    owner = np.repeat(np.arange(n), nslots)
    slot = af[owner] + (np.arange(ny) - col_ptr[owner])
    late = np.maximum(slot - lf[owner], 0)
    coef_max = float(max(coef[pe[idx]].max(), coef[pi[idx]].max()))
    cost_y = w[idx][owner] * _tardiness_unit(coef_max, objective) * late

    # Port-slot rows: only those some transfer can use.
    width = horizon - t_first
    ce, ci = coef[pe[idx]][owner], coef[pi[idx]][owner]
    keys, inv = np.unique(np.concatenate([pe[idx][owner] * width + (slot - t_first),
                                          pi[idx][owner] * width + (slot - t_first)]),
                          return_inverse=True)
    nr = len(keys)
    coefs = np.concatenate([ce, ci])
    # frozen utilisation of each row's port and slot (0 without residual capacities)
    base_u = _util_at(util, keys // width, keys % width + t_first)
    if objective == "balanced":
        # The most a row can carry: each transfer at most its demand or the port's
        # capacity in one slot. phi is linear within a segment, so a row whose
        # load (on top of the frozen part) cannot leave the segment it starts in
        # folds into the y costs and vanishes; others get only reachable
        # segments, each as wide as the frozen part leaves it.
        d_own = np.concatenate([demand[idx][owner]] * 2)
        raw = np.bincount(inv, weights=np.minimum(coefs * d_own, 1.0), minlength=nr)
        hi = np.cumsum(SEGMENT_WIDTHS)
        lo = np.maximum((hi - SEGMENT_WIDTHS)[None, :], base_u[:, None])
        avail = np.maximum(hi[None, :] - lo, 0.0)
        top = np.minimum(base_u + raw, 1.0)
        reach_seg = (avail > 1e-12) & (lo < top[:, None] - 1e-12)
        first = np.minimum(np.searchsorted(hi, base_u + 1e-12, side="right"), len(hi) - 1)
        kept = ~((reach_seg.sum(axis=1) <= 1) & (base_u + raw <= hi[first] + 1e-12))
        folded = ~kept[inv]
        np.add.at(cost_y, np.concatenate([np.arange(ny)] * 2)[folded],
                  SEGMENT_SLOPES[first[inv[folded]]] * coefs[folded])
    else:
        kept = np.ones(nr, dtype=bool)
    new_row = np.cumsum(kept) - 1 + n
    nr = int(kept.sum())
    # y columns: demand row, egress row, ingress row; dropped rows sort last and go.
    big = np.iinfo(np.int64).max
    row_e = np.where(kept[inv[:ny]], new_row[inv[:ny]], big)
    row_i = np.where(kept[inv[ny:]], new_row[inv[ny:]], big)
    rows_y = np.stack([owner, row_e, row_i], axis=1)
    vals_y = np.stack([np.ones(ny), ce, ci], axis=1)
    perm = np.argsort(rows_y, axis=1)
    rows_y = np.take_along_axis(rows_y, perm, axis=1)
    vals_y = np.take_along_axis(vals_y, perm, axis=1)
    live = rows_y != big
    y_start = np.zeros(ny + 1, dtype=np.int64)
    np.cumsum(live.sum(axis=1), out=y_start[1:])
    rows_y, vals_y = rows_y[live], vals_y[live]
    ny_nz = int(y_start[-1])
    if objective == "balanced":
        # one u column per reachable segment of each kept row, bounded by its free width
        row_of, seg_of = np.nonzero(reach_seg[kept])
        nu = len(seg_of)
        rows_u = n + row_of
        a_index = np.concatenate([rows_y, rows_u]).astype(np.int32)
        a_value = np.concatenate([vals_y, -np.ones(nu)])
        a_start = np.concatenate([y_start[:-1], ny_nz + np.arange(nu + 1)])
        col_cost = np.concatenate([cost_y, SEGMENT_SLOPES[seg_of]])
        col_upper = np.concatenate([np.full(ny, np.inf), avail[kept][row_of, seg_of]])
        row_upper = np.concatenate([demand[idx], np.zeros(nr)])
        row_lower = row_upper.copy()
        ncol = ny + nu
    else:
        # z >= frozen + new load, on the port-slots with capacity left: a frozen
        # row already full would pin z at 1 and leave the new load unbalanced, so
        # it only keeps its capacity (no new load there).
        open_ = base_u < 1.0 - 1e-9
        nz_rows = n + np.flatnonzero(open_)
        a_index = np.concatenate([rows_y, nz_rows]).astype(np.int32)
        a_value = np.concatenate([vals_y, -np.ones(len(nz_rows))])
        a_start = np.concatenate([y_start, [ny_nz + len(nz_rows)]])
        col_cost = np.concatenate([cost_y, [1.0]])
        col_upper = np.concatenate([np.full(ny, np.inf), [1.0]])
        row_lower = np.concatenate([demand[idx], np.full(nr, -np.inf)])
        row_upper = np.concatenate([demand[idx], np.where(open_, -base_u, 0.0)])
        ncol = ny + 1
    nrow = n + nr
    if not late_tails:
        # unmet demand of transfer f: costs more than any lateness would
        slack_cost = _tardiness_unit(coef_max, objective) * float(horizon + 1) * w[idx]
        a_start = np.concatenate([a_start, a_start[-1] + np.arange(1, n + 1)])
        a_index = np.concatenate([a_index, np.arange(n, dtype=np.int32)])
        a_value = np.concatenate([a_value, np.ones(n)])
        col_cost = np.concatenate([col_cost, slack_cost])
        col_upper = np.concatenate([col_upper, np.full(n, np.inf)])
        ncol += n
    col_lower = np.zeros(ncol)

    h = _new_highs()
    h.setOptionValue("output_flag", False)
    if solver == "ipm" or (solver == "auto" and ncol > AUTO_IPM_COLUMNS):
        h.setOptionValue("solver", "ipm")
    else:
        h.setOptionValue("solver", "simplex")
        h.setOptionValue("simplex_strategy", 1)  # dual simplex
    if math.isfinite(budget):
        h.setOptionValue("time_limit", float(budget))
    if iteration_limit is not None:
        h.setOptionValue("simplex_iteration_limit", int(iteration_limit))
        h.setOptionValue("ipm_iteration_limit", int(iteration_limit))
    h.setOptionValue("threads", int(threads))
    h.passModel(int(ncol), int(nrow), int(len(a_value)), 1, 1, 0.0,
                col_cost, col_lower, col_upper, row_lower, row_upper,
                a_start.astype(np.int32), a_index, a_value,
                np.zeros(ncol, dtype=np.int32))  # integrality: all continuous
    ts = time.perf_counter()
    h.run()
    te = time.perf_counter()
    status_name = h.getModelStatus().name
    status = _STATUS_TABLE.get(status_name, "error")
    info = h.getInfo()
    out = {"build_s": ts - tb, "solve_s": te - ts, "n_var": ncol, "n_con": nrow, "status": status,
           "iterations": int(max(info.simplex_iteration_count, 0) + max(info.ipm_iteration_count, 0)
                             + max(info.crossover_iteration_count, 0))}
    if status != "optimal":
        return out
    x = np.asarray(h.getSolution().col_value)
    y = np.maximum(x[:ny], 0.0)
    out["slack"] = 0.0 if late_tails else float(np.max(x[ncol - n:], initial=0.0))
    out["objective"] = float(info.objective_function_value)
    out["y"] = [y[col_ptr[f]:col_ptr[f + 1]] for f in range(n)]
    out["base"] = af
    return out


def _edf_fill(idx, a, dl, demand, coef, pe, pi, util=None):
    """Earliest-deadline-first greedy fill: always valid, never optimal."""
    t_first, horizon = _horizon(idx, a, dl, demand, coef, pe, pi, util)
    nports = int(max(pe[idx].max(), pi[idx].max())) + 1
    free = np.ones((nports, horizon))
    if util is not None:
        w = min(horizon, util.shape[1])
        free[:, :w] -= util[:nports, :w]
    order = np.lexsort((a[idx], dl[idx]))
    result: dict[int, np.ndarray] = {}
    for k in order:
        f = idx[k]
        e, i = pe[f], pi[f]
        avail = np.minimum(free[e, a[f]:] / coef[e], free[i, a[f]:] / coef[i])
        cum = np.cumsum(avail)
        last = int(np.searchsorted(cum, demand[f] - 1e-12))
        if last >= len(avail):  # cannot happen within the horizon; be safe anyway
            raise RuntimeError("EDF fill ran past the horizon")
        y = avail[: last + 1].copy()
        y[last] -= cum[last] - demand[f]
        y = np.maximum(y, 0.0)
        free[e, a[f]:a[f] + last + 1] -= y * coef[e]
        free[i, a[f]:a[f] + last + 1] -= y * coef[i]
        result[k] = y
    return [result[k] for k in range(len(idx))], a[idx].copy()


def _objective_of(ys, base, idx, pe, pi, coef, dl, w, objective, util=None) -> float:
    """The LP objective of a plan (for fallback plans, to report comparable values)."""
    loads: dict[tuple[int, int], float] = {}
    tard = 0.0
    coef_max = float(max(coef[pe[idx]].max(), coef[pi[idx]].max()))
    unit = _tardiness_unit(coef_max, objective)
    for k, f in enumerate(idx):
        y = ys[k]
        slots = base[k] + np.arange(len(y))
        tard += float(np.sum(w[f] * unit * np.maximum(slots - dl[f], 0) * y))
        for port in (pe[f], pi[f]):
            for t, v in zip(slots.tolist(), (y * coef[port]).tolist(), strict=True):
                loads[(port, t)] = loads.get((port, t), 0.0) + v
    u = np.fromiter(loads.values(), dtype=np.float64)
    keys = np.array(list(loads), dtype=np.int64).reshape(-1, 2)
    b = _util_at(util, keys[:, 0], keys[:, 1])
    if objective == "minmax":
        return tard + float((b + u).max(initial=0.0))
    return tard + float(np.sum(_phi(b + u) - _phi(b)))


def _phi(u: np.ndarray) -> np.ndarray:
    """The balanced objective's convex cost of utilisations ``u``."""
    edges = np.concatenate([[0.0], np.cumsum(SEGMENT_WIDTHS)])
    fill = np.clip(u[:, None] - edges[None, :-1], 0.0, SEGMENT_WIDTHS[None, :])
    return fill @ SEGMENT_SLOPES


def _assemble(slots_of, starts, a, dl, lat, coef, pe, pi, cap_e, cap_i, unit, slot_s, nh,
              util=None):
    m = len(slots_of)
    start = np.zeros(m, dtype=np.int64)
    finish = np.zeros(m, dtype=np.int64)
    chunks = []
    lengths = np.zeros(m, dtype=np.int64)
    n_slots = 0
    for f in range(m):
        y = slots_of[f]
        nz = np.flatnonzero(y > 1e-9)
        lo, hi = (int(nz[0]), int(nz[-1])) if nz.size else (0, 0)
        seg = y[lo:hi + 1] * unit
        chunks.append(seg)
        lengths[f] = len(seg)
        start[f] = starts[f] + lo
        finish[f] = starts[f] + hi
        n_slots = max(n_slots, int(finish[f]) + 1)
    ptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    values = np.concatenate(chunks) if chunks else np.zeros(0)
    width = n_slots if util is None else max(n_slots, util.shape[1])
    left_e = np.tile(cap_e[:, None], (1, width))
    left_i = np.tile(cap_i[:, None], (1, width))
    if util is not None:
        t = util.shape[1]
        left_e[:, :t] *= 1.0 - util[:nh]
        left_i[:, :t] *= 1.0 - util[nh:]
    if m:
        owner = np.repeat(np.arange(m), lengths)
        slot = start[owner] + (np.arange(len(values)) - ptr[owner])
        np.subtract.at(left_e, (pe[owner], slot), values)
        np.subtract.at(left_i, (pi[owner] - nh, slot), values)
    left_e = np.maximum(left_e, 0.0)
    left_i = np.maximum(left_i, 0.0)
    used = np.concatenate([1.0 - left_e / cap_e[:, None], 1.0 - left_i / cap_i[:, None]])
    peak = float(used.max(initial=0.0))
    lateness = np.where(finish > dl, (finish + 1) * slot_s - lat, 0.0)
    lateness = np.maximum(lateness, 0.0)
    # A transfer past its deadline slot is late even if the grid rounding hides it.
    lateness[(finish > dl) & (lateness == 0)] = 1e-12
    return LPSolution(slot_s=slot_s, n_slots=n_slots, start_slot=start, rate_ptr=ptr,
                      rate_values=values, finish_slot=finish, deadline_slot=dl,
                      lateness_s=lateness, leftover_egress=left_e, leftover_ingress=left_i,
                      status="", objective_value=0.0, peak_utilization=peak, build_s=0.0,
                      solve_s=0.0, n_variables=0, n_constraints=0, n_components=0)
