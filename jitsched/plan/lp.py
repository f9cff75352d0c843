"""The time-slotted bandwidth LP (docs/architecture.md §5), built as CSC arrays and solved by HiGHS."""

# One module although past 500 lines: what remains after the flows moved to
# jitsched.plan.lpflows is one LP -- validating its arrays, the phi cost and
# tardiness columns, the rows built per component, HiGHS's options and
# statuses, and reading the rates back -- whose parts share the cost constants
# and the column layout; split, each half would import the other's privates.
from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from jitsched.errors import ValidationError
from jitsched.plan import MIN_SLOT_S, SLOT_S_RULE
from jitsched.plan.lpflows import (
    Flows,
    base_utilisation,
    edf_fill,
    lowest_peak_plan,
    port_slot_loads,
    ranges,
    span,
    util_at,
)

try:
    import highspy
except ImportError:  # pragma: no cover - highspy is a hard dependency
    highspy = None

OBJECTIVES = ("balanced", "minmax")
SOLVERS = ("auto", "simplex", "ipm")
# Dual simplex wins on the small, sparse LPs of tens of jobs (docs/architecture.md §5)
# and on large loaded ones: 300 paper-workload jobs arriving at once (157k
# columns, port-slot rows at 0.16 average utilisation) took 5.2 s against 10.2 s
# with interior point. On a large light LP it degenerates (many equal-cost plans):
# 400 VGG16 jobs (63k columns, 0.05) took 4.9 s against 1.3 s. So "auto" takes
# interior point above AUTO_IPM_COLUMNS columns when the demand spread over all
# port-slot rows fills them less than AUTO_IPM_UTILISATION on average, or when
# it has more than AUTO_IPM_ROWS rows: the same workload at 1000 jobs (820k
# columns, 115k rows) took 203 s with interior point and over 17 minutes with
# dual simplex (stopped). (HiGHS's PDLP took 82 s on the 157k-column LP and is
# not used.)
AUTO_IPM_COLUMNS = 60_000
AUTO_IPM_UTILISATION = 0.1
AUTO_IPM_ROWS = 60_000

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


@dataclass(frozen=True)
class LPOptions:
    """How :func:`solve_bandwidth_lp` plans, checked here (:meth:`PlanOptions.lp_options
    <jitsched.plan.planner.PlanOptions.lp_options>` builds it from a plan's options).

    Attributes
    ----------
    slot_s : float
        Slot length in seconds.
    objective : {"balanced", "minmax"}
        ``balanced`` minimises a convex piecewise-linear cost of every port's
        utilisation in every slot; ``minmax`` the largest utilisation.
    time_limit_s : float or None
        Total wall-clock solver budget, seconds; a component that runs out is
        planned by earliest-deadline-first filling instead. ``None``: no time limit.
        A time limit makes the plan depend on the machine's speed and load.
    iteration_limit : int or None
        Solver iterations (simplex or interior point) per solve; a component
        whose solve runs out is planned by earliest-deadline-first filling. Unlike
        the time limit it is machine-independent: the same input gives the same
        plan anywhere (single-threaded HiGHS is deterministic).
    split_components : bool
        Solve transfers that share no port as separate LPs.
    threads : int
        HiGHS threads per solve.
    solver : {"auto", "simplex", "ipm"}
        ``auto``: dual simplex, except interior point (without crossover in
        the on-time phase) for an LP above ``AUTO_IPM_COLUMNS`` columns that
        is lightly loaded (``AUTO_IPM_UTILISATION``) or has more than
        ``AUTO_IPM_ROWS`` rows. ``ipm``: interior point with crossover.
    aggregate : bool
        Plan the transfers of one group between the same two hosts with the
        same release slot and weight as one flow, split back earliest deadline
        first (the same optimum when every slot is its own cell, fewer columns
        when host pairs carry many transfers; over coarse cells, see
        ``fine_slots``, a flow's rate is constant where its transfers' rates
        each were, and the optima differ). ``False``: one flow per transfer.
    fine_slots : int or None
        Slots of ``slot_s`` from the planning instant (and over the residuals'
        window); past them the LP keeps each flow's rate constant over cells that
        double in length every ``fine_slots`` slots. ``None``: every slot its own
        cell. Coarse cells trade plan detail far ahead for fewer columns.
    lowest_peak : bool
        First give every flow its lowest-peak on-time profile; a component
        whose ports these keep within phi's first segment (``balanced``) or at
        the largest single flow's peak (``minmax``), with no frozen load on
        them, takes those profiles without a solve: no plan costs less.
    workers : int
        Processes solving components at once (this one among them): more than one
        hands the components (largest first) to :mod:`jitsched.plan.lppool`'s pool. The
        same plan as one worker's: a component's solve does not depend on another's.
        ``build_s`` and ``solve_s`` then sum the components' times over the workers.
    """

    slot_s: float
    objective: str = "balanced"
    time_limit_s: float | None = 5.0
    iteration_limit: int | None = None
    split_components: bool = True
    threads: int = 1
    solver: str = "auto"
    aggregate: bool = True
    fine_slots: int | None = None
    lowest_peak: bool = True
    workers: int = 1

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValidationError(f"objective: expected one of {OBJECTIVES}, got {self.objective!r}")
        slot_s = self.slot_s
        if isinstance(slot_s, bool) or not (isinstance(slot_s, (int, float)) and slot_s >= MIN_SLOT_S
                                            and math.isfinite(slot_s)):
            raise ValidationError(f"slot_s: {SLOT_S_RULE}, got {slot_s!r}")
        if self.solver not in SOLVERS:
            raise ValidationError(f"solver: expected one of {SOLVERS}, got {self.solver!r}")
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ValidationError(f"time_limit_s: must be a number > 0, got {self.time_limit_s!r}")
        for name in ("iteration_limit", "fine_slots", "threads", "workers"):
            v = getattr(self, name)
            if (v is not None or name in ("threads", "workers")) and (
                    isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0):
                raise ValidationError(f"{name}: must be a positive integer, got {v!r}")
        for name in ("split_components", "aggregate", "lowest_peak"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValidationError(f"{name}: must be True or False, got {getattr(self, name)!r}")


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
    n_flows : int
        Flows the LP planned (transfers aggregated per group, host pair, release slot and weight).
    n_proven : int
        Components planned by their flows' lowest-peak profiles, proven optimal without a solve.
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
    n_flows: int = 0
    n_proven: int = 0

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


_highs_made = False  # this process has built a Highs object (its banner is past)
_highs_lock = threading.Lock()  # the daemon's planner threads may build their first at once


def _new_highs() -> highspy.Highs:
    """A Highs object; the banner the first in a process prints is dropped.

    HiGHS writes its version banner to the process's standard output when the
    first Highs object is built, before any option can turn logging off; it
    would corrupt what this process prints there (``jitsched plan --json``,
    bench ``--json`` outputs), and on stderr it would be noise in every
    daemon's and CLI's error stream. Later objects print nothing.
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
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, 1)
            try:
                return highspy.Highs()
            finally:
                ctypes.CDLL(None).fflush(None)  # the banner may sit in C stdio's buffer
                os.dup2(saved, 1)
                _highs_made = True
        finally:
            os.close(saved)
            os.close(null)


def slot_windows(release_s: np.ndarray, lat_s: np.ndarray, slot_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Each transfer's first and deadline slot on the LP's grid (slots of ``slot_s`` from the origin).

    Parameters
    ----------
    release_s, lat_s : ndarray, shape (m,)
        Seconds from the plan's origin (finite).
    slot_s : float

    Returns
    -------
    first, last : ndarray of float, shape (m,)
        The slot holding the release (at least 0), and the last slot ending by
        the LAT (at least ``first``); floats, as a far LAT's slot may not fit an int.
    """
    first = np.maximum(np.floor(release_s / slot_s + 1e-9), 0.0)
    return first, np.maximum(np.ceil(lat_s / slot_s - 1e-9) - 1.0, first)


def solve_bandwidth_lp(src, dst, size_bytes, release_s, lat_s, egress_Bps, ingress_Bps, options: LPOptions,
                       *, weight=None, residual_egress_Bps=None, residual_ingress_Bps=None,
                       group=None) -> LPSolution:
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
    options : LPOptions
        The slot length, objective, budgets, solver and model choices.
    weight : array, shape (m,), optional
        Tardiness weight per transfer (e.g. from job priority), default 1.
    residual_egress_Bps, residual_ingress_Bps : array, shape (n_hosts, n_res), optional
        Capacity still free per port and slot (bytes/s), slot 0 being the planning
        instant's: what allocations planned elsewhere (and frozen) leave. Slots from
        ``n_res`` on have the full capacity; one of the two may be omitted (full
        capacity). The plan never exceeds them, and ``balanced``/``minmax`` weigh
        each port's total utilisation, the frozen part included, so new transfers
        avoid busy ports and slots.
    group : array of int, shape (m,), optional
        Transfers of different groups (:func:`jitsched.plan.planner.plan_jobs`
        passes the job) never share a flow (``options.aggregate``): the LP, not
        the split's tie-break, then decides between them. Default: one group.

    Returns
    -------
    LPSolution
        With residuals, ``leftover_*`` are the residuals minus the planned rates
        over ``max(n_slots, n_res)`` slots and ``peak_utilization`` counts the
        frozen allocations too. ``objective_value`` is the objective of the
        returned plan on the slot grid, whichever way it was made.
    """
    t0 = time.perf_counter()
    if highspy is None:  # pragma: no cover
        raise ImportError("highspy is required for the bandwidth LP: pip install highspy")
    if not isinstance(options, LPOptions):
        raise TypeError(f"options: expected an LPOptions, got {type(options).__name__}")
    slot_s, objective, solver = options.slot_s, options.objective, options.solver
    time_limit_s, iteration_limit, threads = options.time_limit_s, options.iteration_limit, options.threads
    fine_slots = options.fine_slots
    workers = options.workers
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
    grp = np.zeros(m, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    if grp.shape != (m,):
        raise ValidationError(f"group: expected shape ({m},), got {grp.shape}")
    util = base_utilisation(residual_egress_Bps, residual_ingress_Bps, cap_e, cap_i)

    unit = float(max(cap_e.max(), cap_i.max())) if nh else 1.0
    cap = np.concatenate([cap_e, cap_i])  # ports: egress 0..nh-1, ingress nh..2nh-1
    coef = unit / cap
    demand = size / (unit * slot_s)  # in unit-capacity slots
    a, dl = (x.astype(np.int64) for x in slot_windows(rel, lat, slot_s))
    pe, pi = src, nh + dst
    flows = Flows.make(a, dl, demand, w, pe, pi, options.aggregate, grp)
    nf = flows.n

    if options.split_components and nf:
        # Flows interact only through ports: components of the port graph
        # whose edges are flows are independent LPs.
        ports = coo_matrix((np.ones(nf), (flows.pe, flows.pi)), shape=(2 * nh, 2 * nh))
        _, port_label = connected_components(ports, directed=False)
        _, labels = np.unique(port_label[flows.pe], return_inverse=True)
        n_comp = int(labels.max()) + 1
    else:
        n_comp, labels = (1 if nf else 0), np.zeros(nf, dtype=np.int64)

    build_s = solve_s = 0.0
    n_var = n_con = 0
    statuses: list[str] = []
    iterations = 0
    deadline = t0 + (math.inf if time_limit_s is None else time_limit_s)
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n_comp + 1))
    comp_of_flow = np.empty(nf, dtype=np.int64)
    comp_of_flow[order] = np.repeat(np.arange(n_comp), np.diff(bounds))
    if options.lowest_peak and nf:
        t1 = time.perf_counter()
        lp_x, lp_ptr, proven = lowest_peak_plan(flows, coef, comp_of_flow, n_comp, objective, util,
                                                     linear_until=float(SEGMENT_WIDTHS[0]))
        build_s += time.perf_counter() - t1
    else:
        proven = np.zeros(n_comp, dtype=bool)
    parts = []  # per component: (its flows, fine rates from each flow's release slot, lengths)
    todo = [c for c in range(n_comp) if not proven[c]]
    comp_flows = [order[bounds[c]:bounds[c + 1]] for c in range(n_comp)]
    args = (flows, coef, objective, threads, solver, util, iteration_limit, fine_slots)
    if workers > 1 and len(todo) > 1:
        from jitsched.plan.lppool import solve_components

        solved = solve_components([comp_flows[c] for c in todo], args, deadline, workers)
    else:
        # one Highs object for every solve of the call: the same plans (checked bit
        # for bit), 7 % less time on the simulator's plans (12 of jit-paper's at
        # 1000 jobs, ~24 components each); made only if some component needs a solve
        highs = _new_highs() if todo else None
        solved = [plan_component(comp_flows[c], args, deadline, highs) for c in todo]
    results = dict(zip(todo, solved, strict=True))
    for c in range(n_comp):
        fidx = comp_flows[c]
        if proven[c]:
            statuses.append("optimal")
            parts.append((fidx, lp_x[ranges(lp_ptr[fidx], lp_ptr[fidx + 1])], np.diff(lp_ptr)[fidx]))
            continue
        res = results[c]
        build_s += res["build_s"]
        solve_s += res["solve_s"]
        iterations += res["iterations"]
        n_var += res["n_var"]
        n_con += res["n_con"]
        statuses.append(res["status"])
        parts.append((fidx, res["x"], res["lengths"]))

    t1 = time.perf_counter()
    fo = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    x = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0)
    lengths = np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    start, ptr, vals = flows.split(fo, x, lengths)
    sol = _assemble(start, ptr, vals, dl, lat, pe, pi, cap_e, cap_i, unit, slot_s, nh, util)
    sol.objective_value = _plan_objective(sol, dl, w, pe, pi, coef, unit, comp_of_flow[flows.of],
                                          n_comp, objective, util)
    sol.status = "optimal" if all(s == "optimal" for s in statuses) else "fallback"
    sol.build_s = build_s + (time.perf_counter() - t1)
    sol.solve_s = solve_s
    sol.n_variables, sol.n_constraints, sol.n_components = n_var, n_con, n_comp
    sol.n_flows = nf
    sol.n_proven = int(proven.sum())
    sol.component_status = statuses
    sol.iterations = iterations
    return sol


def plan_component(fidx: np.ndarray, args: tuple, deadline: float, highs=None) -> dict:
    """Plan one component of :func:`solve_bandwidth_lp` (its flows ``fidx``): on-time LP,
    the tardiness LP if demand is unmet, earliest-deadline-first filling if a solve fails.

    ``args``: (flows, coef, objective, threads, solver, util, iteration_limit,
    fine_slots); ``deadline``: the call's budget on :func:`time.perf_counter`'s clock
    (system-wide monotonic, so a worker process may read it too). Returns ``x`` and
    ``lengths`` (the flows' rates from their release slots), ``status`` ("optimal" or
    "fallback(<solver status>)") and the solve's sizes and times, summed over its phases.
    """
    flows, coef, objective, threads, solver, util, iteration_limit, fine_slots = args
    budget = max(deadline - time.perf_counter(), 1e-3)
    # Phase 1: on-time windows only, unmet demand as a priced slack. Most
    # plans fit, and the late tails are most of the columns; only when some
    # demand cannot be met on time is the full tardiness LP solved.
    res = _solve_component(flows, fidx, coef, objective, budget, threads, late_tails=False,
                           solver=solver, util=util, iteration_limit=iteration_limit,
                           fine_slots=fine_slots, highs=highs)
    spent = {"build_s": 0.0, "solve_s": 0.0, "iterations": 0}
    # unmet demand beyond the solver's tolerance (1e-9 of the largest demand), or a
    # share of a flow's own demand that a flow far smaller than the largest would miss
    demand = flows.demand[fidx]
    tol = np.minimum(1e-9 * float(demand.max()), 1e-6 * demand)
    if res["status"] == "optimal" and np.any(res["slack"] > tol):
        spent = {k: res[k] for k in spent}
        budget = max(deadline - time.perf_counter(), 1e-3)
        res = _solve_component(flows, fidx, coef, objective, budget, threads, late_tails=True,
                               solver=solver, util=util, iteration_limit=iteration_limit,
                               fine_slots=fine_slots, highs=highs)
    out = {k: spent[k] + res[k] for k in spent} | {"n_var": res["n_var"], "n_con": res["n_con"]}
    if res["status"] != "optimal":
        x, lengths = edf_fill(flows, fidx, coef, util)
        return out | {"status": f"fallback({res['status']})", "x": x, "lengths": lengths}
    return out | {"status": "optimal", "x": res["x"], "lengths": res["lengths"]}


def _tardiness_unit(coef_max: float, objective: str) -> float:
    steepest = SEGMENT_SLOPES[-1] if objective == "balanced" else 1.0
    return TARDINESS_DOMINANCE * 2.0 * steepest * coef_max


def _cell_edges(t_first: int, horizon: int, fine_slots: int | None, util) -> np.ndarray:
    """Cell boundaries over slots ``t_first .. horizon``: one slot each, then coarser.

    Cells are single slots up to ``fine_slots`` (and over the residuals'
    window, whose frozen load varies per slot); past that, each span of
    ``fine_slots`` cells doubles the cell length.
    """
    if fine_slots is None:
        return np.arange(t_first, horizon + 1, dtype=np.int64)
    fine_end = max(fine_slots, 0 if util is None else util.shape[1], t_first)
    if fine_end >= horizon:
        return np.arange(t_first, horizon + 1, dtype=np.int64)
    edges = list(range(t_first, fine_end))
    t, width = fine_end, 2
    while t < horizon:
        for _ in range(max(fine_slots // 2, 1)):
            if t >= horizon:
                break
            edges.append(t)
            t += width
        width *= 2
    edges.append(horizon)
    return np.asarray(edges, dtype=np.int64)


def _solve_component(flows: Flows, fidx, coef, objective, budget, threads, late_tails=True,
                     solver="auto", util=None, iteration_limit=None, fine_slots=None, highs=None):
    """Build one component's LP over its flows as CSC arrays, solve it, return each flow's rates.

    Columns: ``x`` (a flow's rate in a cell); ``r`` (a flow's demand still to
    send after a checkpoint slot, bounded by its demand due later), and in the
    tardiness phase ``o`` (the part of it already overdue, charged per slot);
    segment columns (``balanced``) or ``z`` (``minmax``); in the on-time phase
    one slack per flow for demand that cannot be met. Rows: per flow and
    checkpoint, bytes sent since the previous checkpoint plus what is left
    after it equal what was left before it; per (port, cell), the load.
    A lone transfer has a single checkpoint, so its rows are its demand row.
    """
    tb = time.perf_counter()
    n = len(fidx)
    fa = flows.a[fidx]
    fpe, fpi, fw, ftot = flows.pe[fidx], flows.pi[fidx], flows.w[fidx], flows.demand[fidx]
    l_lo, l_hi = flows.lvl_ptr[fidx], flows.lvl_ptr[fidx + 1]
    d_first, d_last = flows.lvl_dl[l_lo], flows.lvl_dl[l_hi - 1]
    if late_tails:
        t_first, horizon = span(fa, d_last, ftot, coef, fpe, fpi, util)
        fend = np.full(n, horizon - 1, dtype=np.int64)
    else:
        t_first, horizon = int(fa.min()), int(d_last.max()) + 1
        fend = d_last
    coef_max = float(max(coef[fpe].max(), coef[fpi].max()))
    tard = _tardiness_unit(coef_max, objective)

    # x columns: the cells each flow's window [a, end] touches
    edges = _cell_edges(t_first, horizon, fine_slots, util)
    ncell = len(edges) - 1
    c_lo = np.searchsorted(edges, fa, side="right") - 1
    c_hi = np.searchsorted(edges, fend, side="right") - 1
    ncols = c_hi - c_lo + 1
    x_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(ncols, out=x_ptr[1:])
    nx = int(x_ptr[-1])
    xo = np.repeat(np.arange(n), ncols)
    cell = c_lo[xo] + (np.arange(nx) - x_ptr[xo])
    lo = np.maximum(edges[cell], fa[xo])
    hi = np.minimum(edges[cell + 1] - 1, fend[xo])
    n_in = hi - lo + 1  # slots of the cell inside the flow's window

    # checkpoints: on time, each deadline level; with tardiness, every slot from
    # the first deadline to the slot before the last, then the horizon's end
    if late_tails:
        n_ck = d_last - d_first + 1
        ck_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(n_ck, out=ck_ptr[1:])
        ko = np.repeat(np.arange(n), n_ck)
        ck = d_first[ko] + (np.arange(int(ck_ptr[-1])) - ck_ptr[ko])
        final = ck_ptr[1:] - 1
        ck[final] = horizon - 1
        # demand due by each checkpoint: the last level at or before it
        big = horizon + 2
        lvl_key = np.repeat(np.arange(n), l_hi - l_lo) * big + flows.lvl_dl[ranges(l_lo, l_hi)]
        lev = np.searchsorted(lvl_key, ko * big + ck, side="right") - 1
        due = flows.lvl_cum[ranges(l_lo, l_hi)][lev]
    else:
        n_ck = l_hi - l_lo
        ck_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(n_ck, out=ck_ptr[1:])
        ko = np.repeat(np.arange(n), n_ck)
        lv = ranges(l_lo, l_hi)
        ck = flows.lvl_dl[lv]
        due = flows.lvl_cum[lv]
        final = ck_ptr[1:] - 1
    nck = int(ck_ptr[-1])
    later = ftot[ko] - due  # demand due after each checkpoint
    # x entries in checkpoint rows: slots of the column in each segment (prev ck, ck]
    big = horizon + 2
    ckey = ko * big + ck
    s_lo = np.searchsorted(ckey, xo * big + lo, side="left")
    s_hi = np.searchsorted(ckey, xo * big + hi, side="left")
    n_seg = s_hi - s_lo + 1
    seg_ptr = np.zeros(nx + 1, dtype=np.int64)
    np.cumsum(n_seg, out=seg_ptr[1:])
    so = np.repeat(np.arange(nx), n_seg)
    srow = s_lo[so] + (np.arange(int(seg_ptr[-1])) - seg_ptr[so])
    first_ck = srow == ck_ptr[ko[srow]]
    seg_start = np.where(first_ck, fa[ko[srow]], ck[np.maximum(srow - 1, 0)] + 1)
    scount = (np.minimum(ck[srow], hi[so]) - np.maximum(seg_start, lo[so]) + 1).astype(np.float64)

    # x costs: lateness past a flow's last deadline (tardiness phase)
    cost_x = np.zeros(nx)
    if late_tails:
        dlx = d_last[xo]
        s = np.maximum(lo, dlx + 1)
        k1, k0 = hi - dlx, s - 1 - dlx
        late_sum = np.where(s <= hi, (k1 * (k1 + 1) - k0 * (k0 + 1)) // 2, 0)
        cost_x += fw[xo] * tard * late_sum

    # port-cell rows that some x can load
    ce, ci = coef[fpe][xo], coef[fpi][xo]
    keys, inv = np.unique(np.concatenate([fpe[xo] * ncell + cell, fpi[xo] * ncell + cell]),
                          return_inverse=True)
    nr = len(keys)
    load_sum = float(np.sum(ftot * (coef[fpe] + coef[fpi])))  # utilisation x slots, all rows
    coefs = np.concatenate([ce, ci])
    row_cell = keys % ncell
    base_u = util_at(util, keys // ncell, edges[row_cell])
    row_wid = (edges[row_cell + 1] - edges[row_cell]).astype(np.float64)
    slots_in_rows = float(row_wid.sum())  # port-slots the rows cover (a coarse cell counts its slots)
    if objective == "balanced":
        # The most a row can carry: each flow at most its demand spread over the
        # cell's slots in its window, or the port's capacity. phi is linear within
        # a segment, so a row whose load (on top of the frozen part) cannot leave
        # the segment it starts in folds into the x costs and vanishes; others get
        # only reachable segments, each as wide as the frozen part leaves it.
        d_own = np.concatenate([ftot[xo] / n_in] * 2)
        raw = np.bincount(inv, weights=np.minimum(coefs * d_own, 1.0), minlength=nr)
        seg_hi = np.cumsum(SEGMENT_WIDTHS)
        seg_lo = np.maximum((seg_hi - SEGMENT_WIDTHS)[None, :], base_u[:, None])
        avail = np.maximum(seg_hi[None, :] - seg_lo, 0.0)
        top = np.minimum(base_u + raw, 1.0)
        reach_seg = (avail > 1e-12) & (seg_lo < top[:, None] - 1e-12)
        first_seg = np.minimum(np.searchsorted(seg_hi, base_u + 1e-12, side="right"), len(seg_hi) - 1)
        kept = ~((reach_seg.sum(axis=1) <= 1) & (base_u + raw <= seg_hi[first_seg] + 1e-12))
        folded = ~kept[inv]
        np.add.at(cost_x, np.concatenate([np.arange(nx)] * 2)[folded],
                  SEGMENT_SLOPES[first_seg[inv[folded]]] * coefs[folded] * row_wid[inv[folded]])
    else:
        kept = np.ones(nr, dtype=bool)
    new_row = np.cumsum(kept) - 1 + nck
    nr = int(kept.sum())
    kx = np.concatenate([np.arange(nx)] * 2)[kept[inv]]

    # COO entries, column blocks: x, r, o, segments or z, slack
    rows = [srow, new_row[inv[kept[inv]]]]
    cols = [so, kx]
    vals = [scount, coefs[kept[inv]]]
    costs, lowers, uppers = [cost_x], [np.zeros(nx)], [np.full(nx, np.inf)]
    ncol = nx
    inner = np.flatnonzero(~np.isin(np.arange(nck), final))  # checkpoints with something after
    for overdue in ((False, True) if late_tails else (False,)):
        k = len(inner)
        c = ncol + np.arange(k)
        rows += [inner, inner + 1]
        cols += [c, c]
        vals += [np.ones(k), -np.ones(k)]
        if overdue:
            costs.append(fw[ko[inner]] * tard)
            uppers.append(np.full(k, np.inf))
        else:
            costs.append(np.zeros(k))
            uppers.append(later[inner])
        lowers.append(np.zeros(k))
        ncol += k
    if objective == "balanced":
        row_of, seg_of = np.nonzero(reach_seg[kept])
        nu = len(seg_of)
        rows.append(nck + row_of)
        cols.append(ncol + np.arange(nu))
        vals.append(-np.ones(nu))
        costs.append(SEGMENT_SLOPES[seg_of] * row_wid[kept][row_of])
        lowers.append(np.zeros(nu))
        uppers.append(avail[kept][row_of, seg_of])
        ncol += nu
        row_lower = np.zeros(nck + nr)
        row_upper = np.zeros(nck + nr)
    else:
        # z >= frozen + new load, on the port-cells with capacity left: a frozen
        # row already full would pin z at 1 and leave the new load unbalanced, so
        # it only keeps its capacity (no new load there).
        open_ = base_u[kept] < 1.0 - 1e-9
        nz_rows = nck + np.flatnonzero(open_)
        rows.append(nz_rows)
        cols.append(np.full(len(nz_rows), ncol))
        vals.append(-np.ones(len(nz_rows)))
        costs.append(np.ones(1))
        lowers.append(np.zeros(1))
        uppers.append(np.ones(1))
        ncol += 1
        row_lower = np.concatenate([np.zeros(nck), np.full(nr, -np.inf)])
        row_upper = np.concatenate([np.zeros(nck), np.where(open_, -base_u[kept], 0.0)])
    head = ck_ptr[:-1]  # each flow's first checkpoint row: its whole demand
    row_lower[head] = ftot
    row_upper[head] = ftot
    if not late_tails:
        # unmet demand of flow f (its earliest deadlines'): costs more than any lateness would
        rows.append(head)
        cols.append(ncol + np.arange(n))
        vals.append(np.ones(n))
        costs.append(tard * float(horizon + 1) * fw)
        lowers.append(np.zeros(n))
        uppers.append(np.full(n, np.inf))
        ncol += n
    nrow = nck + nr
    # A flow's checkpoint rows count its demand, in unit-capacity slots: a flow far
    # smaller than one (1e-7 is 125 bytes at 100 Gbit/s and 0.1 s slots) would meet
    # them within HiGHS's absolute feasibility tolerance with nothing sent, so they
    # are scaled to count in shares of its demand instead.
    row_scale = np.ones(nrow)
    row_scale[:nck] = np.maximum(1.0, 1.0 / ftot[ko])
    all_rows = np.concatenate(rows)
    row_lower = row_lower * row_scale
    row_upper = row_upper * row_scale
    A = coo_matrix((np.concatenate(vals) * row_scale[all_rows], (all_rows, np.concatenate(cols))),
                   shape=(nrow, ncol)).tocsc()
    col_cost, col_lower, col_upper = np.concatenate(costs), np.concatenate(lowers), np.concatenate(uppers)

    if highs is None:
        h = _new_highs()
    else:
        h = highs
        h.clearModel()
    h.setOptionValue("output_flag", False)
    light = load_sum < AUTO_IPM_UTILISATION * slots_in_rows
    auto_ipm = solver == "auto" and ncol > AUTO_IPM_COLUMNS and (light or nrow > AUTO_IPM_ROWS)
    if solver == "ipm" or auto_ipm:
        h.setOptionValue("solver", "ipm")
    else:
        h.setOptionValue("solver", "simplex")
        h.setOptionValue("simplex_strategy", 1)  # dual simplex
    # an interior optimum spreads a light plan's ties and skips crossover's
    # pivots (1000 VGG16 jobs: 5.4 s instead of 10 s); with late columns it
    # would leave crumbs there, so the tardiness phase still crosses over
    h.setOptionValue("run_crossover", "off" if auto_ipm and not late_tails else "on")
    # presolve costs more than it saves here: off, the simulator's plans above
    # took 27 % less time (dual simplex), the 1000-job bench the same (IPM)
    h.setOptionValue("presolve", "off")
    h.setOptionValue("time_limit", float(budget) if math.isfinite(budget) else math.inf)
    big = 2 ** 31 - 1  # HiGHS's own default: no limit
    h.setOptionValue("simplex_iteration_limit", big if iteration_limit is None else int(iteration_limit))
    h.setOptionValue("ipm_iteration_limit", big if iteration_limit is None else int(iteration_limit))
    h.setOptionValue("threads", int(threads))
    h.passModel(int(ncol), int(nrow), int(A.nnz), 1, 1, 0.0,
                col_cost, col_lower, col_upper, row_lower, row_upper,
                A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data,
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
    sol = np.asarray(h.getSolution().col_value)
    out["slack"] = np.zeros(n) if late_tails else sol[ncol - n:]  # per flow of fidx
    out["x"] = np.repeat(np.maximum(sol[:nx], 0.0), n_in)  # each slot of the flow's window
    out["lengths"] = fend - fa + 1
    return out


_PHI_EDGES = np.concatenate([[0.0], np.cumsum(SEGMENT_WIDTHS)])
_PHI_VALUES = np.concatenate([[0.0], np.cumsum(SEGMENT_WIDTHS * SEGMENT_SLOPES)])


def _phi(u: np.ndarray) -> np.ndarray:
    """The balanced objective's convex cost of utilisations ``u`` (constant outside [0, 1])."""
    return np.interp(u, _PHI_EDGES, _PHI_VALUES)


def _plan_objective(sol: LPSolution, dl, w, pe, pi, coef, unit, comp, n_comp, objective,
                    util=None) -> float:
    """The LP objective of a plan on the slot grid, summed over components.

    Tardiness (per unit of demand and slot past the deadline slot, the
    component's tardiness unit times the weight) plus, per port and slot,
    ``phi(frozen + load) - phi(frozen)`` (``balanced``) or, per component, the
    largest frozen-plus-load utilisation (``minmax``).
    """
    m = len(dl)
    if m == 0:
        return 0.0
    lengths = np.diff(sol.rate_ptr)
    owner = np.repeat(np.arange(m), lengths)
    slot = sol.start_slot[owner] + (np.arange(len(sol.rate_values)) - sol.rate_ptr[owner])
    y = sol.rate_values / unit
    cmax = np.zeros(n_comp)
    np.maximum.at(cmax, comp, np.maximum(coef[pe], coef[pi]))
    t_unit = np.array([_tardiness_unit(c, objective) for c in cmax])[comp]
    total = float(np.sum((w * t_unit)[owner] * np.maximum(slot - dl[owner], 0) * y))
    port, at, load = port_slot_loads(pe[owner], pi[owner], slot, y, coef)
    b = util_at(util, port, at)
    if objective == "minmax":
        port_comp = np.empty(len(coef), dtype=np.int64)
        port_comp[pe] = comp
        port_comp[pi] = comp
        peak = np.zeros(n_comp)
        np.maximum.at(peak, port_comp[port], b + load)
        return total + float(peak.sum())
    if util is None:
        return total + float(np.sum(_phi(load)))
    return total + float(np.sum(_phi(b + load) - _phi(b)))


# Largest ports x slots array summed densely (bincount); past it, sorting keys
# is cheaper than the memory. Sorting took half of a 5000-job plan (0.1 of 0.2 s).
def _assemble(start, ptr, vals, dl, lat, pe, pi, cap_e, cap_i, unit, slot_s, nh, util=None):
    """The LPSolution of per-transfer rates (unit capacities) from slot ``start[f]`` on.

    Leading and trailing zero slots (at most 1e-9) are trimmed off each transfer.
    """
    m = len(start)
    big = np.iinfo(np.int64).max
    if m:
        lengths = np.diff(ptr)
        owner = np.repeat(np.arange(m), lengths)
        pos = np.arange(len(vals))
        # a crumb is small next to the transfer's own peak rate, not just in absolute
        # terms: a small transfer spread thin has every rate below 1e-9 of a port
        peak = np.maximum.reduceat(vals, ptr[:-1]) if len(vals) else np.zeros(m)
        nz = vals > np.minimum(1e-9, 1e-6 * peak)[owner]
        first = np.minimum.reduceat(np.where(nz, pos, big), ptr[:-1])
        last = np.maximum.reduceat(np.where(nz, pos, -1), ptr[:-1])
        none = last < 0
        first[none] = ptr[:-1][none]
        last[none] = ptr[:-1][none]
        keep = (pos >= first[owner]) & (pos <= last[owner])
        values = vals[keep] * unit
        new_len = last - first + 1
        s0 = start + (first - ptr[:-1])
        finish = s0 + new_len - 1
    else:
        values, new_len = np.zeros(0), np.zeros(0, dtype=np.int64)
        s0 = finish = np.zeros(0, dtype=np.int64)
    rptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(new_len, out=rptr[1:])
    n_slots = int(finish.max()) + 1 if m else 0
    width = n_slots if util is None else max(n_slots, util.shape[1])
    left_e = np.tile(cap_e[:, None], (1, width))
    left_i = np.tile(cap_i[:, None], (1, width))
    if util is not None:
        t = util.shape[1]
        left_e[:, :t] *= 1.0 - util[:nh]
        left_i[:, :t] *= 1.0 - util[nh:]
    if m:
        owner = np.repeat(np.arange(m), new_len)
        slot = s0[owner] + (np.arange(len(values)) - rptr[owner])
        left_e -= np.bincount(pe[owner] * width + slot, weights=values,
                              minlength=nh * width).reshape(nh, width)
        left_i -= np.bincount((pi[owner] - nh) * width + slot, weights=values,
                              minlength=nh * width).reshape(nh, width)
    left_e = np.maximum(left_e, 0.0)
    left_i = np.maximum(left_i, 0.0)
    used = np.concatenate([1.0 - left_e / cap_e[:, None], 1.0 - left_i / cap_i[:, None]])
    peak = float(used.max(initial=0.0))
    lateness = np.where(finish > dl, (finish + 1) * slot_s - lat, 0.0)
    lateness = np.maximum(lateness, 0.0)
    # A transfer past its deadline slot is late even if the grid rounding hides it.
    lateness[(finish > dl) & (lateness == 0)] = 1e-12
    return LPSolution(slot_s=slot_s, n_slots=n_slots, start_slot=s0.astype(np.int64), rate_ptr=rptr,
                      rate_values=values, finish_slot=finish.astype(np.int64), deadline_slot=dl,
                      lateness_s=lateness, leftover_egress=left_e, leftover_ingress=left_i,
                      status="", objective_value=0.0, peak_utilization=peak, build_s=0.0,
                      solve_s=0.0, n_variables=0, n_constraints=0, n_components=0)
