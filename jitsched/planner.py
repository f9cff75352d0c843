"""JIT planning: LAT pass, alpha selection and the bandwidth LP, keyed back to job and transfer ids."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jitsched.errors import ValidationError
from jitsched.lat import LatResult, latest_arrival_times
from jitsched.lp import LPSolution, solve_bandwidth_lp
from jitsched.model import TRANSFER, Cluster, DagArrays, Job, compile_jobs

DEFAULT_ALPHA = 0.4
DEFAULT_SLOT_S = 0.1


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
        """The plan in the CLI's JSON shape."""
        names = self.cluster.names
        return {
            "status": self.lp.status,
            "objective_value": self.lp.objective_value,
            "peak_utilization": self.lp.peak_utilization,
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
        }


def plan_jobs(jobs: Sequence[Job] | DagArrays, cluster: Cluster, *, slot_s: float = DEFAULT_SLOT_S,
              alpha: float = DEFAULT_ALPHA, objective: str = "balanced", estimator: str = "exact",
              now: float | None = None, known_done: np.ndarray | None = None,
              remaining: np.ndarray | None = None, unfinished: np.ndarray | None = None,
              k_std: float = 0.0, time_limit_s: float = 5.0, solver: str = "auto") -> Plan:
    """Plan the DAG transfers of ``jobs`` together: LAT pass, alpha cut, LP.

    Parameters
    ----------
    jobs : sequence of Job, or DagArrays already compiled
    cluster : Cluster
    slot_s : float
        Slot length, seconds.
    alpha : float
        Fraction of each job's (unfinished) transfers, in topological order, the LP plans.
    objective : {"balanced", "minmax"}
    estimator : {"exact", "paper"}
    now : float, optional
        Planning instant in seconds (slot 0 starts here); default: earliest arrival.
    known_done : ndarray, shape (n_nodes,), optional
        Finish times of nodes already done (NaN elsewhere), for re-planning.
    remaining : ndarray, shape (n_nodes,), optional
        Bytes left per transfer (default: full sizes).
    unfinished : ndarray of bool, shape (n_nodes,), optional
        Transfers still to plan (default: all).
    k_std : float
        LAT uses ``duration + k_std * std``.
    time_limit_s : float
        LP budget; past it, an earliest-deadline-first plan is used.
    solver : {"auto", "simplex", "ipm"}
        HiGHS algorithm (see :func:`jitsched.lp.solve_bandwidth_lp`).

    Returns
    -------
    Plan
    """
    dag = jobs if isinstance(jobs, DagArrays) else compile_jobs(list(jobs), cluster)
    if not (isinstance(slot_s, (int, float)) and math.isfinite(slot_s) and slot_s > 0):
        raise ValidationError(f"slot_s: must be a positive number of seconds, got {slot_s!r}")
    origin = float(dag.arrival.min()) if now is None and dag.n_jobs else float(now or 0.0)
    t0 = time.perf_counter()
    lat = latest_arrival_times(dag, cluster, estimator=estimator, now=now, known_done=known_done,
                               remaining=remaining, active=unfinished, k_std=k_std)
    lat_s = time.perf_counter() - t0
    chosen = np.flatnonzero(select_alpha(dag, alpha, unfinished))
    size = dag.size if remaining is None else np.asarray(remaining, dtype=np.float64)
    weight = 1.0 + np.maximum(dag.priority[dag.job_of[chosen]], 0.0)
    lp = solve_bandwidth_lp(
        dag.src[chosen], dag.dst[chosen], size[chosen],
        np.maximum(lat.release[chosen] - origin, 0.0), lat.lat[chosen] - origin,
        cluster.egress_Bps, cluster.ingress_Bps, slot_s=float(slot_s), objective=objective,
        weight=weight, time_limit_s=time_limit_s, solver=solver,
    )
    return Plan(dag, cluster, lat, chosen, lp, origin, alpha, objective, lat_s)
