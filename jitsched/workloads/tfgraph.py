"""Import TensorFlow GraphDefs (JSON or text form) and step stats as jitsched DAG jobs, without TensorFlow."""

# Reading the files is jitsched.workloads._tfparse, the durations of unmeasured ops
# jitsched.workloads.tfcost; their public names are re-exported here, where callers
# have always found them.

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitsched.dag.model import Compute, Job, Transfer
from jitsched.errors import ValidationError
from jitsched.workloads._tfparse import DTYPE_BYTES, read_graphdef, read_step_stats
from jitsched.workloads.tfcost import COST_FLOPS, COST_LAUNCH_S, COST_MEM_BPS, estimate_duration

__all__ = [
    "BOOKKEEPING_OPS", "COST_FLOPS", "COST_LAUNCH_S", "COST_MEM_BPS", "DTYPE_BYTES", "Task",
    "estimate_duration", "import_tf_graph", "job_summary", "parse_task", "read_graphdef",
    "read_step_stats",
]

# Ops that do no work worth scheduling: constants, identities, control-only
# ops, shape arithmetic and variable handles. They are contracted away; every
# dependency that runs through them is kept.
BOOKKEEPING_OPS = frozenset({
    "Const", "HostConst", "Identity", "IdentityN", "Snapshot", "StopGradient",
    "PreventGradient", "NoOp", "ControlTrigger", "Placeholder", "PlaceholderWithDefault",
    "Shape", "ShapeN", "Size", "Rank", "Reshape", "Squeeze", "ExpandDims",
    "BroadcastGradientArgs", "VariableV2", "Variable", "VarHandleOp", "ReadVariableOp",
    "VarIsInitializedOp", "IsVariableInitialized", "Assert",
})
# Ops whose output 0 is the same tensor as input 0, so a missing shape can be
# looked up on the input.
_FORWARDING_OPS = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient",
                             "ReadVariableOp"})
# Ops that output a resource handle rather than data.
_HANDLE_OPS = frozenset({"VarHandleOp", "HashTableV2", "MutableHashTableV2"})


# --------------------------------------------------------------------------- devices


@dataclass(frozen=True, order=True)
class Task:
    """A TensorFlow task (``/job:NAME/task:N``): the unit that lives on one host."""

    job: str
    task: int

    def __str__(self) -> str:
        return f"/job:{self.job}/task:{self.task}"

    @property
    def default_host(self) -> str:
        """Host name used when no mapping is given: the job name, plus the task index if > 0."""
        return self.job if self.task == 0 else f"{self.job}{self.task}"


def parse_task(spec: str) -> Task:
    """Parse a task from a device string or a short form.

    Accepts full or partial device strings (``/job:ps/replica:0/task:1/device:CPU:0``,
    ``/job:ps``), ``ps:1`` and ``ps``. A missing task index is 0; a device string
    without a job (``/device:CPU:0``) is the in-process job ``localhost``.
    """
    s = spec.strip()
    if not s.startswith("/"):
        job, _, idx = s.partition(":")
        if not job or (idx and not (idx.isascii() and idx.isdigit())):
            raise ValidationError(f"bad TensorFlow task {spec!r} (expected e.g. 'ps', 'ps:0' or '/job:ps/task:0')")
        return Task(job, int(idx or 0))
    job, task = "localhost", 0
    for part in s.split("/")[1:]:
        key, _, val = part.partition(":")
        if key == "job":
            job = val
        elif key == "task":
            if not (val.isascii() and val.isdigit()):
                raise ValidationError(f"bad task index in device {spec!r}")
            task = int(val)
    if not job:
        raise ValidationError(f"empty job name in device {spec!r}")
    return Task(job, task)


# --------------------------------------------------------------------------- the import


@dataclass
class _Node:
    name: str
    op: str
    inputs: list[tuple[str, int, bool]]  # (producer, output index, is control input)
    task: Task
    attr: dict[str, Any]


def _split_input(ref: str, node: str) -> tuple[str, int, bool]:
    if not ref:
        raise ValidationError(f"node {node!r}: empty input name")
    if ref.startswith("^"):
        return ref[1:], 0, True
    name, sep, idx = ref.rpartition(":")
    if sep and idx.isascii() and idx.isdigit():
        return name, int(idx), False
    return ref, 0, False


def _shape_dims(shape: Mapping[str, Any]) -> list[int] | None:
    if shape.get("unknown_rank"):
        return None
    dims = [int(d.get("size", 0)) for d in shape.get("dim", [])]
    return None if any(d < 0 for d in dims) else dims


class _Graph:
    def __init__(self, nodes: list[dict[str, Any]], default_device: str):
        self.nodes: dict[str, _Node] = {}
        default = parse_task(default_device)
        for i, nd in enumerate(nodes):
            name = nd.get("name")
            if not name:
                raise ValidationError(f"node #{i}: no name")
            if name in self.nodes:
                raise ValidationError(f"node {name!r}: duplicate node name")
            if not nd.get("op"):
                raise ValidationError(f"node {name!r}: no op")
            dev = nd.get("device", "")
            self.nodes[name] = _Node(
                name, nd["op"], [_split_input(r, name) for r in nd.get("input", [])],
                parse_task(dev) if dev else default, nd.get("attr", {}))
        for n in self.nodes.values():
            for src, _, _ in n.inputs:
                if src not in self.nodes:
                    raise ValidationError(f"node {n.name!r}: input {src!r} is not a node of the graph")

    def topo(self) -> list[_Node]:
        indeg = {name: len(n.inputs) for name, n in self.nodes.items()}
        users: dict[str, list[str]] = {name: [] for name in self.nodes}
        for n in self.nodes.values():
            for src, _, _ in n.inputs:
                users[src].append(n.name)
        ready = [name for name, d in indeg.items() if d == 0]
        order = []
        while ready:
            name = ready.pop()
            order.append(self.nodes[name])
            for u in users[name]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if len(order) < len(self.nodes):
            stuck = sorted(name for name, d in indeg.items() if d > 0)
            raise ValidationError(f"node {stuck[0]!r}: the graph has a cycle through it")
        # Graph order is the natural reading order; keep it among ready nodes
        # by a stable sort on topological depth.
        depth: dict[str, int] = {}
        for n in order:
            depth[n.name] = 1 + max((depth[s] for s, _, _ in n.inputs), default=-1)
        pos = {name: i for i, name in enumerate(self.nodes)}
        return sorted(order, key=lambda n: (depth[n.name], pos[n.name]))

    def dtype(self, name: str, idx: int) -> str | None:
        n = self.nodes[name]
        if n.op in _HANDLE_OPS:
            return "DT_RESOURCE"
        keys = ("U", "T", "dtype") if n.op.startswith("FusedBatchNorm") and idx > 0 else \
            ("T", "dtype", "DstT", "out_type", "Tout")
        for key in keys:
            a = n.attr.get(key)
            if a is None:
                continue
            if "type" in a:
                t = a["type"]
            elif "list" in a and len(a["list"].get("type", [])) > idx:
                t = a["list"]["type"][idx]
            else:
                continue
            return t[:-4] if t.endswith("_REF") else t
        return None

    def shape(self, name: str, idx: int, seen: int = 0) -> list[int] | None:
        n = self.nodes[name]
        shapes = n.attr.get("_output_shapes", {}).get("list", {}).get("shape", [])
        if idx < len(shapes):
            dims = _shape_dims(shapes[idx])
            if dims is not None:
                return dims
        if idx == 0 and "shape" in n.attr and "shape" in n.attr["shape"]:
            dims = _shape_dims(n.attr["shape"]["shape"])
            if dims is not None:
                return dims
        if idx == 0 and n.op in _FORWARDING_OPS and n.inputs and seen < 64:
            src, sidx, ctrl = n.inputs[0]
            if not ctrl:
                return self.shape(src, sidx, seen + 1)
        return None

    def tensor_bytes(self, name: str, idx: int, consumer: str, where: Task) -> int:
        dtype = self.dtype(name, idx)
        what = f"node {name!r}: output {idx} (consumed by {consumer!r} on {where})"
        if dtype == "DT_RESOURCE":
            raise ValidationError(
                f"{what} is a resource handle: place the ops that read a variable with the "
                "variable (export the devices TensorFlow's placer assigned)")
        if dtype is None:
            raise ValidationError(f"{what}: unknown dtype (no T/dtype attribute)")
        if dtype not in DTYPE_BYTES:
            raise ValidationError(f"{what}: dtype {dtype} has no fixed size per element")
        dims = self.shape(name, idx)
        if dims is None:
            raise ValidationError(f"{what}: unknown shape (no fully defined _output_shapes or shape attribute)")
        return math.prod(dims) * DTYPE_BYTES[dtype]



def _host_map(hosts: Mapping[str, str] | None) -> dict[Task, str]:
    out: dict[Task, str] = {}
    for k, v in (hosts or {}).items():
        if not isinstance(v, str) or not v:
            raise ValidationError(f"host for TensorFlow task {k!r} must be a non-empty name, got {v!r}")
        out[parse_task(k)] = v
    return out


def import_tf_graph(graph: str | Path | Mapping[str, Any] | list[dict[str, Any]],
                    step_stats: str | Path | Mapping[str, Any] | Mapping[str, float] | None = None,
                    *, hosts: Mapping[str, str] | None = None, job_id: str = "tf",
                    model: str | None = None, arrival_s: float = 0.0, time_scale: float = 1.0,
                    min_op_s: float = 0.0, passive_jobs: Iterable[str] = ("ps",),
                    default_device: str = "/job:worker/task:0") -> Job:
    """Turn one training step of a TensorFlow graph into a jitsched DAG job.

    Every tensor consumed on another task (``/job:X/task:N``) than the one that
    produced it becomes one transfer per (tensor, destination task), as
    TensorFlow's runtime sends it once per step and receiving device: parameter
    reads, gradient pushes and batch-norm statistics alike. Its size is the
    tensor's element count (from ``_output_shapes``, else the producer's
    ``shape`` attribute, else through Identity/ReadVariableOp to the variable)
    times the dtype's size. Devices within one task do not cross the network.
    A control input across tasks is a dependency but moves no data.

    Ops on tasks of ``passive_jobs`` (the parameter servers: variables, reads,
    optimizer updates) and bookkeeping ops (:data:`BOOKKEEPING_OPS`) are
    contracted: removed, with every dependency through them kept. Every other
    op is a compute node on its task's host.

    Parameters
    ----------
    graph
        GraphDef path (JSON or text, optionally gzipped), decoded JSON map, or
        the node list of :func:`read_graphdef`.
    step_stats
        Optional RunMetadata/StepStats (path or map), or a ready map of node
        name -> measured seconds. Measured ops get ``measured * time_scale``;
        ops without a measurement get :func:`estimate_duration`.
    hosts
        TensorFlow task -> cluster host name. Keys: ``"ps"``, ``"ps:0"`` or a
        device string. Unmapped tasks use :attr:`Task.default_host` (``ps``,
        ``worker``, ``worker1``...).
    job_id, model, arrival_s
        Fields of the returned job; ``arrival_s`` in seconds.
    time_scale
        Factor applied to measured durations (e.g. CPU to GPU-like speed).
    min_op_s
        Lower bound, in seconds, on every compute duration (a device's launch cost).
    passive_jobs
        TensorFlow job names whose ops are not compute nodes.
    default_device
        Device of nodes whose ``device`` is empty.

    Returns
    -------
    Job
        Computes named by their TF op, transfers ``"<tensor>><job>:<task>"``,
        and the contracted dependency edges.

    Raises
    ------
    ValidationError
        Naming the node: missing input node, cycle, unknown dtype or shape of
        a cross-task tensor, a resource handle crossing tasks, two tasks that
        exchange data mapped to one host, or a graph with no cross-task edge.
    """
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise ValidationError(f"time_scale must be a positive number, got {time_scale!r}")
    nodes = graph if isinstance(graph, list) else read_graphdef(graph)
    if not nodes:
        raise ValidationError("the graph has no nodes")
    g = _Graph(nodes, default_device)
    if step_stats is None:
        measured: Mapping[str, float] = {}
    elif isinstance(step_stats, Mapping) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in step_stats.values()):
        measured = step_stats
    else:
        measured = read_step_stats(step_stats)
    if measured and not any(name in measured for name in g.nodes):
        # stats of another graph would leave every op on the cost model unnoticed
        raise ValidationError(f"the step stats time none of the graph's ops (they time "
                              f"{next(iter(measured))!r}, ...): are they of another graph?")
    host_of = _host_map(hosts)
    passive = frozenset(passive_jobs)

    def host(task: Task) -> str:
        return host_of.get(task, task.default_host)

    computes: list[Compute] = []
    transfers: list[Transfer] = []
    edges: list[tuple[str, str]] = []
    xfer_ids: dict[tuple[str, int, Task], str] = {}
    # The kept nodes (computes and transfers) that stand for a node's completion.
    frontier: dict[str, frozenset[str]] = {}
    for n in g.topo():
        deps: set[str] = set()
        for src, idx, ctrl in n.inputs:
            producer = g.nodes[src]
            if ctrl or producer.task == n.task:
                deps |= frontier[src]
                continue
            key = (src, idx, n.task)
            tid = xfer_ids.get(key)
            if tid is None:
                size = g.tensor_bytes(src, idx, n.name, n.task)
                a, b = host(producer.task), host(n.task)
                if a == b:
                    raise ValidationError(
                        f"node {n.name!r}: tasks {producer.task} and {n.task} exchange "
                        f"tensor {src}:{idx} but are both mapped to host {a!r}")
                if size == 0:
                    deps |= frontier[src]  # an empty tensor: ordering only, no data
                    continue
                tid = f"{src}:{idx}>{n.task.job}:{n.task.task}"
                xfer_ids[key] = tid
                transfers.append(Transfer(tid, a, b, float(size)))
                edges.extend((p, tid) for p in sorted(frontier[src]))
            deps.add(tid)
        if n.op in BOOKKEEPING_OPS or n.task.job in passive:
            frontier[n.name] = frozenset(deps)
            continue
        if n.name in measured:
            dur = float(measured[n.name]) * time_scale
        else:
            dur = estimate_duration(g, n)
        computes.append(Compute(n.name, host(n.task), max(dur, min_op_s)))
        edges.extend((p, n.name) for p in sorted(deps))
        frontier[n.name] = frozenset((n.name,))
    if not transfers:
        tasks = sorted({str(n.task) for n in g.nodes.values()})
        first = next(iter(g.nodes))
        raise ValidationError(
            f"the graph has no cross-task edge (nodes from {first!r} on are all on "
            f"{', '.join(tasks)}): nothing crosses the network")
    return Job(job_id, tuple(computes), tuple(transfers), tuple(edges), float(arrival_s), 0.0, model)


def job_summary(job: Job) -> dict[str, int]:
    """Counts of a job: ``transfers``, ``transfer_bytes`` (bytes), ``computes``, ``edges``."""
    return {"transfers": len(job.transfers),
            "transfer_bytes": int(sum(t.bytes for t in job.transfers)),
            "computes": len(job.computes), "edges": len(job.edges)}
