"""The limits on submitted jobs ([limits] in the configuration): each accepted job has a bounded plan."""

from __future__ import annotations

import math

from jitsched.config import DaemonConfig
from jitsched.daemon.reject import Reject
from jitsched.model import Cluster, Job, critical_path_s
from jitsched.protocol import ErrorCode


def _over(where: str, what: str, limit: str, name: str) -> Reject:
    return Reject(ErrorCode.INVALID_JOB, f"{where}: {what}, over the limit of {limit} ([limits] {name})")


def check_job_map(obj: dict, config: DaemonConfig, path: str = "body.job") -> Reject | None:
    """The limits a job map can be held to before it is parsed: its number of nodes.

    Returns a :class:`Reject` (``invalid_job``) naming the field and the limit, or None.
    """
    n = sum(len(v) for k in ("computes", "transfers") if isinstance(v := obj.get(k), list))
    if n > config.max_job_nodes:
        return _over(f"{path}.computes+transfers", f"{n} nodes", f"{config.max_job_nodes} nodes",
                     "max_job_nodes")
    return None


def check_job(job: Job, config: DaemonConfig, path: str = "body.job") -> Reject | None:
    """Hold a parsed job to the id, size, duration and planning-horizon limits.

    Returns a :class:`Reject` (``invalid_job``) naming the first field over its
    limit and the limit, or None.
    """
    chars = config.max_id_chars
    for where, text in ((f"{path}.id", job.id), (f"{path}.model", job.model or "")):
        if len(text) > chars:
            return _over(where, f"{len(text)} characters", f"{chars} characters", "max_id_chars")
    for i, c in enumerate(job.computes):
        where = f"{path}.computes[{i}]"
        if len(c.id) > chars:
            return _over(f"{where}.id", f"{len(c.id)} characters", f"{chars} characters", "max_id_chars")
        for key in ("duration_s", "std_s"):
            v = getattr(c, key)
            if v > config.max_compute_s:
                return _over(f"{where}.{key}", f"{v:g} s", f"{config.max_compute_s:g} s", "max_compute_s")
    for i, t in enumerate(job.transfers):
        where = f"{path}.transfers[{i}]"
        if len(t.id) > chars:
            return _over(f"{where}.id", f"{len(t.id)} characters", f"{chars} characters", "max_id_chars")
        if t.bytes > config.max_transfer_bytes:
            return _over(f"{where}.bytes", f"{t.bytes:g} bytes", f"{config.max_transfer_bytes:g} bytes",
                         "max_transfer_bytes")
    span_s, why = plan_span_s(job, config.cluster)
    slots = math.ceil(span_s / config.slot_s)
    if slots > config.max_plan_slots:
        return _over(path, f"a plan of this job alone spans at least {span_s:.6g} s ({why}), "
                     f"{slots} slots of {config.slot_s:g} s", f"{config.max_plan_slots} slots",
                     "max_plan_slots")
    return None


def plan_span_s(job: Job, cluster: Cluster) -> tuple[float, str]:
    """A lower bound on how long (seconds) a plan of ``job`` alone runs, and what sets it.

    The longer of the job's critical path, with each transfer at the line
    rate of the slower of its two ports (bytes/s), and the time its busiest
    port needs for all of its bytes at that port's line rate. A planner's
    horizon covers at least this much, and so do its arrays.
    """
    index = cluster.index
    egress, ingress = cluster.egress_Bps, cluster.ingress_Bps
    out = [0.0] * len(cluster)
    into = [0.0] * len(cluster)
    took = {c.id: c.duration_s for c in job.computes}
    for t in job.transfers:
        s, d = index(t.src), index(t.dst)
        out[s] += t.bytes
        into[d] += t.bytes
        took[t.id] = t.bytes / min(egress[s], ingress[d])
    port_s, port = 0.0, ""
    for h, name in enumerate(cluster.names):
        for side, load, rate in (("egress", out[h], egress[h]), ("ingress", into[h], ingress[h])):
            if load / rate > port_s:
                port_s, port = load / rate, f"{name} {side}: {load:g} bytes at {rate:g} bytes/s"
    path_s = critical_path_s(took, job.edges)
    if path_s >= port_s:
        return path_s, "its critical path"
    return port_s, port


__all__ = ["check_job", "check_job_map", "plan_span_s"]
