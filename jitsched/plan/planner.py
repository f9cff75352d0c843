"""JIT planning, the one pipeline: options, LAT pass, alpha selection and the bandwidth LP, keyed back to job and transfer ids."""

# One module although past 500 lines: it is the one planning pipeline (options,
# LAT, alpha selection, the LP call, and the incremental window that places a
# new job's LP into the plan in force), which the simulator's policies and the
# daemon both call; the window code is the pipeline's second entry point.
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from jitsched.dag.lat import ESTIMATORS, LatResult, latest_arrival_times
from jitsched.dag.model import TRANSFER, Cluster, DagArrays, Job, compile_jobs
from jitsched.errors import ValidationError
from jitsched.plan import DEFAULT_SLOT_S, MIN_SLOT_S, SLOT_S_RULE
from jitsched.plan.estimate import (
    JOB_ORDERS,
    TRANS_ESTIMATES,
    fair_share_trans,
    job_ranks,
    ordered_trans,
)
from jitsched.plan.lp import (
    OBJECTIVES,
    SOLVERS,
    LPOptions,
    LPSolution,
    slot_windows,
    solve_bandwidth_lp,
)

DEFAULT_ALPHA = 0.4
# The most port-slots (ports x slots from the plan's origin) a capped plan's grid may span
# (plan_jobs' max_port_slots; the CLI's plan caps it so): each of its dense per-port,
# per-slot arrays then takes at most 128 MiB.
MAX_PORT_SLOTS = 1 << 24


def select_alpha(dag: DagArrays, alpha: float, eligible: np.ndarray | None = None) -> np.ndarray:
    """Mark the first ``ceil(alpha * n)`` transfers of each job in topological order.

    Parameters
    ----------
    dag : DagArrays
    alpha : float in [0, 1]
    eligible : ndarray of bool, shape (n_nodes,), optional
        Transfers that may be chosen (e.g. unfinished ones); ``n`` counts them.

    Returns
    -------
    ndarray of bool, shape (n_nodes,)
    """
    if not (0.0 <= alpha <= 1.0):
        raise ValidationError(f"alpha: must be within [0, 1], got {alpha!r}")
    ok = dag.kind == TRANSFER
    if eligible is not None:
        ok = ok & np.asarray(eligible, dtype=bool)
    topo_t = dag.topo[ok[dag.topo]]  # eligible transfers in topological (job-contiguous) order
    jobs = dag.job_of[topo_t]
    counts = np.bincount(jobs, minlength=dag.n_jobs)
    quota = np.ceil(alpha * counts - 1e-9).astype(np.int64)
    first = np.zeros(dag.n_jobs + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    rank = np.arange(len(topo_t)) - first[jobs]
    chosen = np.zeros(dag.n_nodes, dtype=bool)
    chosen[topo_t[rank < quota[jobs]]] = True
    return chosen


@dataclass
class Plan:
    """A JIT plan: which transfers were scheduled, their LATs and per-slot rates.

    ``scheduled`` holds node indices into ``dag`` of the LP's transfers, in the
    order of ``lp``'s arrays. Times are seconds from ``origin_s``.
    """

    dag: DagArrays
    cluster: Cluster
    lat: LatResult
    scheduled: np.ndarray
    lp: LPSolution
    origin_s: float
    alpha: float
    objective: str
    lat_s: float

    def rates_by_job(self) -> dict[str, dict[str, dict]]:
        """``{job_id: {transfer_id: {"start_slot", "bytes_per_s"}}}``."""
        out: dict[str, dict[str, dict]] = {j: {} for j in self.dag.job_ids}
        for k, node in enumerate(self.scheduled):
            job = self.dag.job_ids[self.dag.job_of[node]]
            out[job][self.dag.node_ids[node]] = {
                "start_slot": int(self.lp.start_slot[k]),
                "bytes_per_s": [float(v) for v in self.lp.rates(k)],
            }
        return out

    def late(self) -> list[dict]:
        """Scheduled transfers planned to miss their LAT, with lateness in seconds."""
        out = []
        for k in self.lp.late:
            node = self.scheduled[k]
            out.append({
                "job": self.dag.job_ids[self.dag.job_of[node]],
                "transfer": self.dag.node_ids[node],
                "lat_s": float(self.lat.lat[node] - self.origin_s),
                "lateness_s": float(self.lp.lateness_s[k]),
            })
        return out

    def to_json(self) -> dict:
        """The plan in the CLI's JSON shape.

        ``origin_s`` is the plan time (seconds, the workload's clock) at which
        slot 0 starts: slot ``k`` covers ``origin_s + [k, k + 1) * slot_s``, and
        the ``late`` entries' ``lat_s`` count from it too.
        """
        names = self.cluster.names
        return {
            "status": self.lp.status,
            "objective_value": self.lp.objective_value,
            "peak_utilization": self.lp.peak_utilization,
            "origin_s": float(self.origin_s),
            "slot_s": self.lp.slot_s,
            "n_slots": self.lp.n_slots,
            "alpha": self.alpha,
            "objective": self.objective,
            "scheduled_transfers": int(len(self.scheduled)),
            "rates": self.rates_by_job(),
            "leftover_bytes_per_s": {
                names[h]: [float(v) for v in self.lp.leftover_egress[h]] for h in range(len(names))
            },
            "late": self.late(),
            "lat_s": self.lat_s,
            "build_s": self.lp.build_s,
            "solve_s": self.lp.solve_s,
            "variables": self.lp.n_variables,
            "components": self.lp.n_components,
            "flows": self.lp.n_flows,
            "proven_components": self.lp.n_proven,
            "iterations": self.lp.iterations,
        }


# LAT passes of the "ordered" estimate after the fair-share seed pass: the
# first orders each job's transfers by the seed's LATs, the second by its own
# (a need order that no longer depends on fair sharing) and settles the release
# times of transfers behind computes; more passes change nothing measurable.
ORDERED_PASSES = 2


@dataclass(frozen=True)
class PlanOptions:
    """How a plan is made; validated once, here, for the CLI, the policies and the benches.

    Attributes
    ----------
    alpha : float in [0, 1]
        Fraction of each job's (unfinished) transfers, in topological order, the LP plans.
    slot_s : float
        Slot length, seconds (> 0).
    objective : {"balanced", "minmax"}
    estimator : {"exact", "paper"}
        LAT estimator (:func:`jitsched.dag.lat.latest_arrival_times`).
    trans_estimate : {"eq1", "fair", "ordered"}
        Transfer-time estimate of the LAT pass (:mod:`jitsched.plan.estimate`).
    job_order : {"fair", "fifo", "smallest"}
        How jobs share a port in the ``ordered`` estimate (:func:`jitsched.plan.estimate.job_ranks`).
    k_std : float
        LAT uses ``duration + k_std * std`` (>= 0).
    time_limit_s : float or None
        LP wall-clock budget, seconds; past it an earliest-deadline-first plan is used.
    iteration_limit : int or None
        LP iteration budget per solve: the same fallback, machine-independent.
    solver : {"auto", "simplex", "ipm"}
    aggregate : bool
        Plan a job's transfers between two hosts released in the same slot as
        one flow, split earliest deadline first: the same optimum with fewer
        columns (:func:`jitsched.plan.lp.solve_bandwidth_lp`).
    lowest_peak : bool
        Take every flow's lowest-peak on-time profile, without a solve, where
        that provably is an optimal plan (light load).
    fine_slots : int or None
        Past this many slots (and the residuals' window) the LP keeps rates
        constant over cells doubling in length every ``fine_slots`` slots; a
        coarser plan far ahead for a smaller LP. ``None`` (default): every slot.
    lp_workers : int
        Processes solving the LP's independent components at once (1: this one
        alone); the same plan with any number (:func:`jitsched.plan.lp.solve_bandwidth_lp`).
    """

    alpha: float = DEFAULT_ALPHA
    slot_s: float = DEFAULT_SLOT_S
    objective: str = "balanced"
    estimator: str = "exact"
    trans_estimate: str = "eq1"
    job_order: str = "fair"
    k_std: float = 0.0
    time_limit_s: float | None = 5.0
    iteration_limit: int | None = None
    solver: str = "auto"
    aggregate: bool = True
    lowest_peak: bool = True
    fine_slots: int | None = None
    lp_workers: int = 1

    def __post_init__(self) -> None:
        def number(name, lo_ok):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not math.isfinite(v) or not lo_ok(v):
                return None
            return float(v)

        checks = (
            ("alpha", lambda v: 0.0 <= v <= 1.0, "must be within [0, 1]"),
            ("slot_s", lambda v: v >= MIN_SLOT_S, SLOT_S_RULE),
            ("k_std", lambda v: v >= 0, "must be >= 0"),
        )
        for name, ok, why in checks:
            v = number(name, ok)
            if v is None:
                raise ValidationError(f"{name}: {why}, got {getattr(self, name)!r}")
            object.__setattr__(self, name, v)
        for name, allowed in (("objective", OBJECTIVES), ("estimator", ESTIMATORS),
                              ("trans_estimate", TRANS_ESTIMATES), ("job_order", JOB_ORDERS),
                              ("solver", SOLVERS)):
            if getattr(self, name) not in allowed:
                raise ValidationError(f"{name}: expected one of {allowed}, got {getattr(self, name)!r}")
        if self.time_limit_s is not None:
            v = number("time_limit_s", lambda v: v > 0)
            if v is None:
                raise ValidationError(f"time_limit_s: must be a number > 0, got {self.time_limit_s!r}")
            object.__setattr__(self, "time_limit_s", v)
        for name in ("iteration_limit", "fine_slots"):
            it = getattr(self, name)
            if it is not None:
                if isinstance(it, bool) or not isinstance(it, (int, np.integer)) or it <= 0:
                    raise ValidationError(f"{name}: must be a positive integer, got {it!r}")
                object.__setattr__(self, name, int(it))
        w = self.lp_workers
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) or w < 1:
            raise ValidationError(f"lp_workers: must be a positive integer, got {w!r}")
        object.__setattr__(self, "lp_workers", int(w))
        for name in ("aggregate", "lowest_peak"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValidationError(f"{name}: must be True or False, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))

    def lp_options(self) -> LPOptions:
        """The LP's options these plans use (:func:`jitsched.plan.lp.solve_bandwidth_lp`)."""
        return LPOptions(slot_s=self.slot_s, objective=self.objective, time_limit_s=self.time_limit_s,
                         iteration_limit=self.iteration_limit, solver=self.solver, aggregate=self.aggregate,
                         fine_slots=self.fine_slots, lowest_peak=self.lowest_peak, workers=self.lp_workers)


def estimated_lats(sub, cluster, share, remaining: np.ndarray, unfinished: np.ndarray, *, now: float,
                   ordered: bool, job_rank: np.ndarray | None = None, estimator: str = "exact",
                   known_done: np.ndarray | None = None, k_std: float = 0.0) -> LatResult:
    """The LAT pass with the ``fair`` estimate, then ``ORDERED_PASSES`` with ``ordered`` if asked.

    Parameters
    ----------
    sub : DagArrays
    cluster : Cluster
        Capacities of the LAT pass itself.
    share : Cluster
        Capacities the transfer-time estimates assume (e.g. a shared cluster).
    remaining : ndarray, shape (n_nodes,)
        Bytes left per transfer.
    unfinished : ndarray of bool, shape (n_nodes,)
    now : float
        Seconds; nothing unfinished starts before it.
    ordered : bool
        Follow the seed pass with :func:`jitsched.plan.estimate.ordered_trans` passes.
    job_rank, estimator, known_done, k_std
        As for :func:`jitsched.plan.estimate.ordered_trans` and :func:`jitsched.dag.lat.latest_arrival_times`.

    Returns
    -------
    LatResult
    """
    trans = fair_share_trans(sub, share, remaining, unfinished)
    lat = latest_arrival_times(sub, cluster, estimator=estimator, now=now, known_done=known_done,
                               k_std=k_std, trans_s=trans)
    if ordered:
        for _ in range(ORDERED_PASSES):
            trans = ordered_trans(sub, share, remaining, unfinished, lat.release, lat.lat, job_rank)
            lat = latest_arrival_times(sub, cluster, estimator=estimator, now=now,
                                       known_done=known_done, k_std=k_std, trans_s=trans)
    return lat


def plan_jobs(jobs: Sequence[Job] | DagArrays, cluster: Cluster, options: PlanOptions | None = None, *,
              now: float | None = None, known_done: np.ndarray | None = None,
              remaining: np.ndarray | None = None, unfinished: np.ndarray | None = None,
              lat_cluster: Cluster | None = None, residual_egress_Bps: np.ndarray | None = None,
              residual_ingress_Bps: np.ndarray | None = None, min_lat_s: float | None = None,
              max_port_slots: int | None = None) -> Plan:
    """Plan the DAG transfers of ``jobs`` together: LAT pass, alpha cut, LP.

    The one planning pipeline: the CLI's ``plan``, the JIT policies (full and
    incremental plans) and the benches all come through here.

    Parameters
    ----------
    jobs : sequence of Job, or DagArrays already compiled
    cluster : Cluster
    options : PlanOptions, optional
        How to plan (default ``PlanOptions()``: the paper's alpha 0.4 and Eq. 1).
    now : float, optional
        Planning instant in seconds (slot 0 starts here); default: earliest arrival.
    known_done : ndarray, shape (n_nodes,), optional
        Finish times of nodes already done (NaN elsewhere), for re-planning.
    remaining : ndarray, shape (n_nodes,), optional
        Bytes left per transfer (default: full sizes).
    unfinished : ndarray of bool, shape (n_nodes,), optional
        Transfers still to plan (default: all).
    lat_cluster : Cluster, optional
        Capacities the LAT pass's transfer-time estimate assumes (default
        ``cluster``), e.g. :func:`shared_cluster` when other jobs, planned
        elsewhere, share the ports.
    residual_egress_Bps, residual_ingress_Bps : ndarray, shape (n_hosts, n_res), optional
        Capacity left per port and slot by frozen allocations, slot 0 starting
        at the planning instant (see :func:`jitsched.plan.lp.solve_bandwidth_lp`).
    min_lat_s : float, optional
        The LP's deadlines are at least this (seconds, absolute); see :class:`Window`.
    max_port_slots : int, optional
        Refuse to plan when the slot grid would span more port-slots than this
        (:func:`grid_slots`), before the LP allocates it; default: no cap.

    Returns
    -------
    Plan

    Raises
    ------
    ValidationError
        If the grid would span more than ``max_port_slots`` port-slots.
    """
    o = PlanOptions() if options is None else options
    dag = jobs if isinstance(jobs, DagArrays) else compile_jobs(list(jobs), cluster)
    origin = float(dag.arrival.min()) if now is None and dag.n_jobs else float(now or 0.0)
    size = dag.size if remaining is None else np.asarray(remaining, dtype=np.float64)
    share = cluster if lat_cluster is None else lat_cluster
    t0 = time.perf_counter()
    if o.trans_estimate == "eq1":
        lat = latest_arrival_times(dag, share, estimator=o.estimator, now=now, known_done=known_done,
                                   remaining=remaining, active=unfinished, k_std=o.k_std)
    else:
        active = (dag.kind == TRANSFER) if unfinished is None else np.asarray(unfinished, dtype=bool)
        rank = job_ranks(dag, share, size, active, o.job_order) if o.trans_estimate == "ordered" else None
        lat = estimated_lats(dag, cluster, share, size, active, now=origin,
                             ordered=o.trans_estimate == "ordered", job_rank=rank,
                             estimator=o.estimator, known_done=known_done, k_std=o.k_std)
    lat_s = time.perf_counter() - t0
    chosen = np.flatnonzero(select_alpha(dag, o.alpha, unfinished))
    weight = 1.0 + np.maximum(dag.priority[dag.job_of[chosen]], 0.0)
    release_s = np.maximum(lat.release[chosen] - origin, 0.0)
    deadline_s = lp_deadlines(lat.lat[chosen], min_lat_s) - origin
    if max_port_slots is not None:
        n_slots = grid_slots(dag.src[chosen], dag.dst[chosen], size[chosen], release_s, deadline_s,
                             cluster.egress_Bps, cluster.ingress_Bps, o.slot_s)
        n_ports = 2 * len(cluster.hosts)
        if n_slots * n_ports > max_port_slots:
            raise ValidationError(
                f"the plan's slot grid would span {n_slots:,.0f} slots of {o.slot_s:g} s on {n_ports} ports "
                f"({n_slots * n_ports:,.0f} port-slots), more than {max_port_slots:,}: plan with longer "
                "slots (--slot-s) or fewer jobs")
    lp = solve_bandwidth_lp(
        dag.src[chosen], dag.dst[chosen], size[chosen], release_s, deadline_s,
        cluster.egress_Bps, cluster.ingress_Bps, o.lp_options(), weight=weight,
        residual_egress_Bps=residual_egress_Bps, residual_ingress_Bps=residual_ingress_Bps,
        group=dag.job_of[chosen],
    )
    return Plan(dag, cluster, lat, chosen, lp, origin, o.alpha, o.objective, lat_s)


def grid_slots(src: np.ndarray, dst: np.ndarray, size: np.ndarray, release_s: np.ndarray,
               deadline_s: np.ndarray, egress_Bps: np.ndarray, ingress_Bps: np.ndarray,
               slot_s: float) -> float:
    """The least number of slots the LP's grid spans for these transfers (a float: it may be huge).

    The grid reaches every transfer's deadline slot, and the slot by which it
    can have sent its bytes at its full rate from its release slot, as
    :func:`jitsched.plan.lp.solve_bandwidth_lp` counts slots from the plan's
    origin. Non-finite times give 0: the LP refuses them itself.

    Parameters
    ----------
    src, dst : ndarray of int, shape (m,)
        Host indices.
    size : ndarray, shape (m,)
        Bytes.
    release_s, deadline_s : ndarray, shape (m,)
        Seconds from the plan's origin.
    egress_Bps, ingress_Bps : ndarray, shape (n_hosts,)
        Port capacities, bytes/s.
    slot_s : float
        Slot length, seconds.

    Returns
    -------
    float
        Slots; 0 for no transfers.
    """
    if not len(src) or not (np.all(np.isfinite(release_s)) and np.all(np.isfinite(deadline_s))):
        return 0.0
    rate = np.minimum(egress_Bps[src], ingress_Bps[dst])
    first, last = slot_windows(release_s, deadline_s, slot_s)
    last = np.maximum(last, first + np.ceil(size / (rate * slot_s) - 1e-9) - 1.0)
    return float(np.max(last)) + 1.0


def lp_deadlines(lat_s: np.ndarray, min_lat_s: float | None) -> np.ndarray:
    """LATs as the LP's deadlines: at least ``min_lat_s`` when given (seconds)."""
    return lat_s if min_lat_s is None else np.maximum(lat_s, min_lat_s)


def shared_cluster(cluster: Cluster, busy_egress, busy_ingress) -> Cluster:
    """``cluster`` with each port's capacity divided among itself and the jobs already on it.

    A job planned on top of others sees, on a port ``busy`` other jobs use, the
    per-job fair share ``capacity / (1 + busy)``: what the ``ordered`` and
    ``fair`` transfer-time estimates would give it in a joint plan.

    Parameters
    ----------
    cluster : Cluster
    busy_egress, busy_ingress : array of int, shape (n_hosts,)
        Other jobs with unfinished transfers leaving / entering each host.

    Returns
    -------
    Cluster
    """
    return scale_cluster(cluster, 1.0 / (1.0 + np.asarray(busy_egress, dtype=np.float64)),
                         1.0 / (1.0 + np.asarray(busy_ingress, dtype=np.float64)))


def scale_cluster(cluster: Cluster, egress_factor, ingress_factor) -> Cluster:
    """``cluster`` with every host's egress and ingress capacity multiplied by a factor.

    Parameters
    ----------
    cluster : Cluster
    egress_factor, ingress_factor : float or array of float, shape (n_hosts,)
        One factor for all hosts, or one per host (> 0).

    Returns
    -------
    Cluster
    """
    n = len(cluster.hosts)
    fe = np.broadcast_to(np.asarray(egress_factor, dtype=np.float64), (n,))
    fi = np.broadcast_to(np.asarray(ingress_factor, dtype=np.float64), (n,))
    return Cluster(tuple(replace(h, egress_bps=h.egress_bps * float(fe[k]), ingress_bps=h.ingress_bps * float(fi[k]))
                         for k, h in enumerate(cluster.hosts)))


# An incremental plan starts in the slot holding the planning instant only if
# at least this fraction of it is left; otherwise at the next boundary, as if
# the jobs arrived there (< 10 ms later at 100 ms slots). A sliver would end
# before the schedule reached the agents, and transfers due in it would be late.
MIN_SLOT_FRACTION = 0.1


@dataclass(frozen=True)
class Window:
    """Where a plan on top of a base plan goes on the base's slot grid.

    Slot ``first_slot`` of the base (the one containing the planning instant, or
    the next one if less than :data:`MIN_SLOT_FRACTION` of it is left) is slot 0
    of the new LP, whose origin is ``origin_s``. Only ``fraction`` of that slot
    is still ahead, so the LP sees that fraction of its residual capacity (bytes
    per slot are what count) and :func:`place_increment` divides its rates there
    by the fraction again. Plan with ``max(now, origin_s)`` as the jobs' earliest start.

    A plan made at ``now`` alone gives every transfer at least its first slot,
    ``[now, now + slot_s)``, as deadlines round up to a grid starting at ``now``.
    On the base grid a deadline in a partly gone first slot would round up to
    its early end, with only ``fraction`` of the capacity left before it, so
    ``min_lat_s`` moves such deadlines to the end of the next slot: never
    stricter than a plan of its own.

    Attributes
    ----------
    epoch_s, slot_s : float
        The base grid (seconds).
    first_slot : int
    origin_s : float
        ``epoch_s + first_slot * slot_s``.
    fraction : float
        Share of ``first_slot`` still ahead (1 when it starts after the planning instant).
    free_egress_Bps, free_ingress_Bps : ndarray, shape (n_hosts, n_free)
        Capacity the base leaves from ``first_slot`` on (full capacity past it).
    residual_egress_Bps, residual_ingress_Bps : ndarray, shape (n_hosts, n_free)
        The same with slot 0 scaled by ``fraction``: the LP's residual input.
    base_egress_Bps, base_ingress_Bps : ndarray, shape (n_hosts, first_slot)
        The base's leftover before ``first_slot`` (kept as is).
    egress_Bps, ingress_Bps : ndarray, shape (n_hosts,)
        Port capacities.
    min_lat_s : float or None
        Earliest LP deadline (``origin_s + 2 * slot_s`` if the first slot is partly gone).
    """

    epoch_s: float
    slot_s: float
    first_slot: int
    origin_s: float
    fraction: float
    free_egress_Bps: np.ndarray
    free_ingress_Bps: np.ndarray
    residual_egress_Bps: np.ndarray
    residual_ingress_Bps: np.ndarray
    base_egress_Bps: np.ndarray
    base_ingress_Bps: np.ndarray
    egress_Bps: np.ndarray
    ingress_Bps: np.ndarray
    min_lat_s: float | None = None


def increment_window(now: float, slot_s: float, cluster: Cluster, epoch_s: float | None = None,
                     leftover_egress_Bps: np.ndarray | None = None,
                     leftover_ingress_Bps: np.ndarray | None = None) -> Window:
    """The window of a plan made at ``now`` on top of a base plan's leftover.

    Parameters
    ----------
    now : float
        Planning instant, seconds.
    slot_s : float
        Slot length of the base grid, seconds.
    cluster : Cluster
    epoch_s : float, optional
        Start of the base's slot 0 (default: no base, the grid starts at ``now``).
    leftover_egress_Bps, leftover_ingress_Bps : ndarray, shape (n_hosts, n_base), optional
        What the base leaves free per host and slot from its slot 0, bytes/s.

    Returns
    -------
    Window
    """
    cap_e, cap_i = cluster.egress_Bps, cluster.ingress_Bps
    nh = len(cap_e)
    if epoch_s is None:
        epoch_s = float(now)
    k0 = max(int(math.floor((now - epoch_s) / slot_s + 1e-9)), 0)
    frac = 1.0 - ((now - epoch_s) / slot_s - k0)
    frac = min(max(frac, 0.0), 1.0)
    if frac < MIN_SLOT_FRACTION:
        k0, frac = k0 + 1, 1.0
    out = []
    for left, cap in ((leftover_egress_Bps, cap_e), (leftover_ingress_Bps, cap_i)):
        left = np.zeros((nh, 0)) if left is None else np.asarray(left, dtype=np.float64)
        past = left[:, :k0]
        if past.shape[1] < k0:  # the base ended before now: its tail is all free
            past = np.concatenate([past, np.tile(cap[:, None], (1, k0 - past.shape[1]))], axis=1)
        free = left[:, k0:]
        if free.shape[1] == 0:
            free = cap[:, None].copy()  # at least the slot the plan starts in
        res = free.copy()
        res[:, 0] *= frac
        out.append((past, free, res))
    (pe, fe, re), (pi, fi, ri) = out
    origin = float(epoch_s + k0 * slot_s)
    return Window(float(epoch_s), float(slot_s), k0, origin, frac, fe, fi, re, ri, pe, pi,
                  cap_e, cap_i, origin + 2 * slot_s if frac < 1.0 else None)


def place_increment(lp: LPSolution | None, win: Window, src: np.ndarray,
                    dst: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """Put an LP solved over ``win`` back on the base grid.

    Parameters
    ----------
    lp : LPSolution or None
        Solved with ``win.residual_*`` as residual capacity and ``win.origin_s``
        as planning instant; None: nothing was planned.
    win : Window
    src, dst : ndarray of int, shape (m,)
        Host indices of the LP's transfers.

    Returns
    -------
    start_slot : ndarray of int64, shape (m,)
        First planned slot on the base grid.
    rates : list of ndarray
        Bytes/s per slot from ``start_slot`` on (first-slot rates raised so that
        the slot's planned bytes go out in the part of it still ahead).
    leftover_egress, leftover_ingress : ndarray, shape (n_hosts, n)
        Base leftover minus the new rates, from the base's slot 0.
    """
    m = 0 if lp is None else len(lp.start_slot)
    rates = [lp.rates(f).copy() for f in range(m)]
    for f in range(m):
        if lp.start_slot[f] == 0 and len(rates[f]):
            rates[f][0] /= win.fraction
    end = max([int(lp.start_slot[f]) + len(rates[f]) for f in range(m)], default=0)
    width = max(end, win.free_egress_Bps.shape[1], win.free_ingress_Bps.shape[1])
    lefts = []
    for free, base, cap, hosts in ((win.free_egress_Bps, win.base_egress_Bps, win.egress_Bps, src),
                                   (win.free_ingress_Bps, win.base_ingress_Bps, win.ingress_Bps,
                                    dst)):
        full = np.tile(cap[:, None], (1, width))  # past the base's end every port is free
        full[:, :free.shape[1]] = free
        for f in range(m):
            s0 = int(lp.start_slot[f])
            full[hosts[f], s0:s0 + len(rates[f])] -= rates[f]
        lefts.append(np.concatenate([base, np.maximum(full, 0.0)], axis=1))
    start = np.zeros(0, dtype=np.int64) if lp is None else lp.start_slot + win.first_slot
    return start, rates, lefts[0], lefts[1]
