"""Latest arrival times (LAT) over compiled DAG arrays (transfer-time estimates: :mod:`jitsched.plan.estimate`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jitsched.dag.model import COMPUTE, TRANSFER, Cluster, DagArrays
from jitsched.errors import ValidationError, load_kernel
from jitsched.plan.estimate import trans_times

ESTIMATORS = ("exact", "paper")


def _kernels():
    return load_kernel("_lat")


@dataclass(frozen=True)
class LatResult:
    """Per-node timing estimates of one LAT pass (all arrays shape (n_nodes,), seconds).

    ``release`` is a transfer's release time (a compute's start), ``done`` a
    transfer's earliest arrival (a compute's finish), ``lat`` a transfer's
    latest arrival time (NaN for computes), ``trans`` the Eq. 1 transfer time;
    ``job_finish`` has shape (n_jobs,).
    """

    estimator: str
    release: np.ndarray
    done: np.ndarray
    lat: np.ndarray
    trans: np.ndarray
    job_finish: np.ndarray

    def by_job(self, dag: DagArrays) -> dict[str, dict[str, float]]:
        """Return ``{job_id: {transfer_id: lat_seconds}}``."""
        out: dict[str, dict[str, float]] = {j: {} for j in dag.job_ids}
        for i in dag.transfer_index():
            out[dag.job_ids[dag.job_of[i]]][dag.node_ids[i]] = float(self.lat[i])
        return out


def latest_arrival_times(dag: DagArrays, cluster: Cluster, *, estimator: str = "exact",
                         now: float | None = None, known_done: np.ndarray | None = None,
                         remaining: np.ndarray | None = None, active: np.ndarray | None = None,
                         k_std: float = 0.0, trans_s: np.ndarray | None = None) -> LatResult:
    """Estimate every transfer's latest arrival time, all jobs of ``dag`` together.

    Parameters
    ----------
    dag : DagArrays
        Jobs planned together (``num`` in Eq. 1 counts all of them).
    cluster : Cluster
    estimator : {"exact", "paper"}
        ``exact``: the one-pass O(V+E) estimate of docs/architecture.md §4; ``paper``: the
        paper's Algorithm 1.
    now : float, optional
        Seconds; nothing unfinished starts before it (default: each job's arrival).
    known_done : ndarray, shape (n_nodes,), optional
        Finish times already known (NaN where unknown), for re-planning mid-run.
    remaining, active : see :func:`jitsched.plan.estimate.trans_times`.
    k_std : float
        Compute durations used are ``duration + k_std * std``.
    trans_s : ndarray, shape (n_nodes,), optional
        Transfer-time estimates in seconds to use instead of Eq. 1 (a caller's
        own estimator); ``remaining`` and ``active`` are then unused.

    Returns
    -------
    LatResult
    """
    if estimator not in ESTIMATORS:
        raise ValidationError(f"estimator: expected one of {ESTIMATORS}, got {estimator!r}")
    if k_std < 0:
        raise ValidationError(f"k_std: must be >= 0, got {k_std!r}")
    n = dag.n_nodes
    kern = _kernels()
    if trans_s is None:
        trans = trans_times(dag, cluster, remaining=remaining, active=active)
    else:
        trans = np.ascontiguousarray(trans_s, dtype=np.float64)
        if trans.shape != (n,) or not np.all(np.isfinite(trans)) or np.any(trans < 0):
            raise ValidationError(f"trans_s: expected {n} finite seconds >= 0")
    duration = dag.duration + k_std * dag.std if k_std else dag.duration
    floor = dag.arrival if now is None else np.maximum(dag.arrival, float(now))
    floor = np.ascontiguousarray(floor, dtype=np.float64)
    if known_done is None:
        known = np.full(n, np.nan)
    else:
        known = np.ascontiguousarray(known_done, dtype=np.float64)
        if known.shape != (n,):
            raise ValidationError(f"known_done: expected shape ({n},), got {known.shape}")
    release = np.empty(n)
    done = np.empty(n)
    lat = np.empty(n)
    job_finish = np.empty(dag.n_jobs)
    kern.lat_pass(dag.topo, dag.kind, dag.job_of, floor, duration, trans, known,
                  dag.pred_ptr, dag.pred_idx, release, done, lat, job_finish)
    if estimator == "paper":
        lat = _paper(dag, kern, floor, duration, trans)
    return LatResult(estimator, release, done, lat, trans, job_finish)


def first_consumers(dag: DagArrays) -> np.ndarray:
    """Each transfer's first compute consumer in topological order (-1: none)."""
    pos = np.empty(dag.n_nodes, dtype=np.int64)
    pos[dag.topo] = np.arange(dag.n_nodes)
    consumer = np.full(dag.n_nodes, -1, dtype=np.int32)
    rows = np.repeat(np.arange(dag.n_nodes), np.diff(dag.succ_ptr))
    cols = dag.succ_idx
    keep = (dag.kind[rows] == TRANSFER) & (dag.kind[cols] == COMPUTE)
    rows, cols = rows[keep], cols[keep]
    # Visit candidate consumers latest-first so the earliest one is written last.
    order = np.argsort(-pos[cols], kind="stable")
    consumer[rows[order]] = cols[order]
    return consumer


def _paper(dag: DagArrays, kern, floor: np.ndarray, duration: np.ndarray,
           trans: np.ndarray) -> np.ndarray:
    n = dag.n_nodes
    pos = np.empty(n, dtype=np.int32)
    pos[dag.topo] = np.arange(n, dtype=np.int32)
    consumer = first_consumers(dag)
    tidx = dag.transfer_index()
    # Group by job, then by consumer position; consumer-less transfers close their job.
    cpos = np.where(consumer[tidx] >= 0, pos[np.maximum(consumer[tidx], 0)], n)
    ttopo = tidx[np.lexsort((cpos, dag.job_of[tidx]))].astype(np.int32)
    lat = np.full(n, np.nan)
    dist = np.empty(n)
    kern.paper_lat(ttopo, consumer, pos, dag.topo, dag.kind, dag.job_of, floor,
                   duration, trans, dag.succ_ptr, dag.succ_idx, dist, lat)
    return lat
