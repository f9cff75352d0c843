"""The limits on submitted jobs ([limits] in the configuration): each accepted job has a bounded plan
and an estimated size in memory, and the daemon's memory a ceiling."""

from __future__ import annotations

import math
import os
from pathlib import Path

from jitsched.config import DaemonConfig
from jitsched.daemon.reject import Reject
from jitsched.dag.model import Cluster, Job, critical_path_s
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
    slots = math.ceil(span_s / config.slot_s) if math.isfinite(span_s) else math.inf
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
    egress, ingress = cluster.egress_Bps.tolist(), cluster.ingress_Bps.tolist()

    def secs(nbytes: float, rate: float) -> float:  # a port of no rate never carries them
        return nbytes / rate if rate > 0 else (math.inf if nbytes > 0 else 0.0)

    out = [0.0] * len(cluster)
    into = [0.0] * len(cluster)
    took = {c.id: c.duration_s for c in job.computes}
    for t in job.transfers:
        s, d = index(t.src), index(t.dst)
        out[s] += t.bytes
        into[d] += t.bytes
        took[t.id] = secs(t.bytes, min(egress[s], ingress[d]))
    port_s, port = 0.0, ""
    for h, name in enumerate(cluster.names):
        for side, load, rate in (("egress", out[h], egress[h]), ("ingress", into[h], ingress[h])):
            if secs(load, rate) > port_s:
                port_s, port = secs(load, rate), f"{name} {side}: {load:g} bytes at {rate:g} bytes/s"
    path_s = critical_path_s(took, job.edges)
    if path_s >= port_s:
        return path_s, "its critical path"
    return port_s, port


# What the daemon holds for one job, in bytes, from its shape: the job as decoded from
# its message, parsed, indexed and with its progress. tracemalloc around the decoding,
# submission and cancellation of jobs of 10k nodes (bench_faults.big_job chains,
# decoded from msgpack inside the trace): 525 bytes a node with one edge each, 868 with
# three edges, 764 with 80 more characters an id (340 a node, 171 an edge, 3 a
# character fit all three within 1 %). The daemon's RSS grows by 1.2x that (allocator
# overhead): 620 bytes a node over 20 submit+cancel of 5000 nodes with nothing pruned
# (`python bench/bench_faults.py --fuzz 0 --kill-cycles 0 --ended-memory 20
# --ended-memory-nodes 5000 --ended-memory-budget 1000000000000`), hence these.
JOB_BYTES_PER_NODE = 400
JOB_BYTES_PER_EDGE = 200
JOB_BYTES_PER_ID_CHAR = 3
JOB_BYTES_BASE = 2048  # the job's own objects and dicts, besides its nodes


def job_bytes(job: Job) -> int:
    """The estimated bytes the daemon holds for ``job`` (see ``JOB_BYTES_PER_NODE``)."""
    nodes = len(job.computes) + len(job.transfers)
    chars = sum(len(c.id) for c in job.computes) + sum(len(t.id) for t in job.transfers)
    return (JOB_BYTES_BASE + JOB_BYTES_PER_NODE * nodes + JOB_BYTES_PER_EDGE * len(job.edges)
            + JOB_BYTES_PER_ID_CHAR * chars)


# The share of the machine's (or cgroup's) memory the daemon's RSS may reach by default:
# the planner child, the agents and the jobs' own processes share the machine.
MEMORY_SHARE = 0.5
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def machine_memory_bytes() -> int:
    """The memory this process may use: physical RAM, or its cgroup's limit if lower
    (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``); 0 if unknown."""
    total = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(f).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) > 0:
            total = min(total, int(text)) if total else int(text)
    return total


def memory_ceiling(config: DaemonConfig) -> int:
    """The RSS (bytes) above which the daemon refuses growth: ``max_memory_bytes``, or
    ``MEMORY_SHARE`` of :func:`machine_memory_bytes` when 0 (8 GiB if that is unknown)."""
    if config.max_memory_bytes:
        return config.max_memory_bytes
    machine = machine_memory_bytes()
    return int(machine * MEMORY_SHARE) if machine else 8 * 1024 ** 3


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/statm``; 0 where unknown)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


__all__ = ["JOB_BYTES_PER_EDGE", "JOB_BYTES_PER_ID_CHAR", "JOB_BYTES_PER_NODE", "MEMORY_SHARE", "check_job",
           "check_job_map", "job_bytes", "machine_memory_bytes", "memory_ceiling", "plan_span_s", "rss_bytes"]
