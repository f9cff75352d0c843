"""Import TensorFlow GraphDefs (JSON or text form) and step stats as jitsched DAG jobs, without TensorFlow."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jitsched.errors import ValidationError
from jitsched.model import Compute, Job, Transfer

# Bytes per element of the TensorFlow dtypes whose size is fixed; DT_STRING,
# DT_RESOURCE and DT_VARIANT have no size a shape can give.
DTYPE_BYTES = {
    "DT_FLOAT": 4, "DT_DOUBLE": 8, "DT_INT32": 4, "DT_UINT8": 1, "DT_INT16": 2, "DT_INT8": 1,
    "DT_COMPLEX64": 8, "DT_INT64": 8, "DT_BOOL": 1, "DT_QINT8": 1, "DT_QUINT8": 1,
    "DT_QINT32": 4, "DT_BFLOAT16": 2, "DT_QINT16": 2, "DT_QUINT16": 2, "DT_UINT16": 2,
    "DT_COMPLEX128": 16, "DT_HALF": 2, "DT_UINT32": 4, "DT_UINT64": 8,
}
# The DataType enum numbers of types.proto, for graphs that store dtypes as numbers.
_DTYPE_NUMBERS = {
    1: "DT_FLOAT", 2: "DT_DOUBLE", 3: "DT_INT32", 4: "DT_UINT8", 5: "DT_INT16", 6: "DT_INT8",
    7: "DT_STRING", 8: "DT_COMPLEX64", 9: "DT_INT64", 10: "DT_BOOL", 11: "DT_QINT8",
    12: "DT_QUINT8", 13: "DT_QINT32", 14: "DT_BFLOAT16", 15: "DT_QINT16", 16: "DT_QUINT16",
    17: "DT_UINT16", 18: "DT_COMPLEX128", 19: "DT_HALF", 20: "DT_RESOURCE", 21: "DT_VARIANT",
    22: "DT_UINT32", 23: "DT_UINT64",
}

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

# Cost model for compute ops without a measurement, a GPU-like device:
# a fixed launch cost plus FLOPs at sustained fp32 throughput plus bytes
# moved at memory bandwidth. The three constants are assumptions of the
# order of a P100-class GPU (9.3 TFLOP/s fp32 peak, 732 GB/s HBM2).
COST_LAUNCH_S = 5e-6
COST_FLOPS = 8.0e12
COST_MEM_BPS = 500e9


# --------------------------------------------------------------------------- reading files


def _read_text(source: str | Path) -> str:
    p = Path(source)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ValidationError(f"{p}: no such file") from None
    except OSError as exc:
        raise ValidationError(f"{p}: cannot read ({exc})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValidationError(f"{p}: corrupt gzip data ({exc})") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{p}: not UTF-8 text ({exc})") from None


# --------------------------------------------------------------------------- text format

_TOKEN_RE = re.compile(r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<num>[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[fF]?(?![\w.]))
  | (?P<ident>[-+]?[A-Za-z_][\w.]*)
  | (?P<punct>[{}<>:\[\],;])
""", re.VERBOSE)


def _unescape(body: str) -> str:
    # Text-format strings use C escapes (octal bytes for non-ASCII UTF-8).
    raw = body.encode("latin-1", "backslashreplace").decode("unicode_escape")
    try:
        return raw.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return raw


class _TextParser:
    """Recursive-descent parser of protobuf text format into (field, value) pairs."""

    def __init__(self, text: str, where: str):
        self.where = where
        self.toks: list[tuple[str, Any, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                raise ValidationError(f"{where}:{line}: unexpected character {text[pos]!r}")
            kind = m.lastgroup
            val = m.group()
            if kind == "str":
                self.toks.append(("str", _unescape(val[1:-1]), line))
            elif kind == "num":
                v = val.rstrip("fF")
                self.toks.append(("num", int(v) if re.fullmatch(r"[-+]?\d+", v) else float(v), line))
            elif kind in ("ident", "punct"):
                self.toks.append((kind, val, line))
            line += val.count("\n")
            pos = m.end()
        self.i = 0

    def _peek(self) -> tuple[str, Any, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _fail(self, msg: str) -> ValidationError:
        tok = self._peek()
        line = tok[2] if tok else (self.toks[-1][2] if self.toks else 1)
        return ValidationError(f"{self.where}:{line}: {msg}")

    def _take(self, kind: str, value: str | None = None) -> Any:
        tok = self._peek()
        if tok is None or tok[0] != kind or (value is not None and tok[1] != value):
            got = "end of input" if tok is None else repr(tok[1])
            raise self._fail(f"expected {value or kind}, got {got}")
        self.i += 1
        return tok[1]

    def _at(self, kind: str, value: str | None = None) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == kind and (value is None or tok[1] == value)

    def parse(self) -> list[tuple[str, Any]]:
        pairs = self._message(None)
        if self._peek() is not None:
            raise self._fail(f"unexpected {self._peek()[1]!r}")
        return pairs

    def _message(self, close: str | None) -> list[tuple[str, Any]]:
        pairs: list[tuple[str, Any]] = []
        while True:
            if close is not None and self._at("punct", close):
                self.i += 1
                return pairs
            if self._peek() is None:
                if close is None:
                    return pairs
                raise self._fail(f"missing {close!r}")
            name = self._take("ident")
            colon = self._at("punct", ":")
            if colon:
                self.i += 1
            if self._at("punct", "["):
                self.i += 1
                while not self._at("punct", "]"):
                    pairs.append((name, self._value(colon=True)))
                    if self._at("punct", ","):
                        self.i += 1
                    elif not self._at("punct", "]"):
                        raise self._fail("expected ',' or ']' in a list")
                self.i += 1
            else:
                pairs.append((name, self._value(colon)))
            if self._at("punct", ",") or self._at("punct", ";"):
                self.i += 1

    def _value(self, colon: bool) -> Any:
        if self._at("punct", "{"):
            self.i += 1
            return self._message("}")
        if self._at("punct", "<"):
            self.i += 1
            return self._message(">")
        if not colon:
            raise self._fail("expected ':' or '{' after a field name")
        tok = self._peek()
        if tok is None or tok[0] not in ("str", "num", "ident"):
            raise self._fail("expected a value")
        self.i += 1
        if tok[0] == "str":
            parts = [tok[1]]
            while self._at("str"):  # adjacent literals concatenate
                parts.append(self._take("str"))
            return "".join(parts)
        return tok[1]


# --------------------------------------------------------------------------- schema

# Just the fields of graph.proto / node_def.proto / attr_value.proto /
# tensor_shape.proto / step_stats.proto the importer reads:
# field -> (kind, repeated); kind is a message name, "map:<Msg>" or a scalar.
_SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "GraphDef": {"node": ("NodeDef", True)},
    "NodeDef": {"name": ("str", False), "op": ("str", False), "input": ("str", True),
                "device": ("str", False), "attr": ("map:AttrValue", False)},
    "AttrValue": {"s": ("str", False), "i": ("int", False), "f": ("float", False),
                  "b": ("bool", False), "type": ("enum", False), "shape": ("Shape", False),
                  "list": ("ListValue", False)},
    "ListValue": {"s": ("str", True), "i": ("int", True), "f": ("float", True),
                  "b": ("bool", True), "type": ("enum", True), "shape": ("Shape", True)},
    "Shape": {"dim": ("Dim", True), "unknown_rank": ("bool", False)},
    "Dim": {"size": ("int", False), "name": ("str", False)},
    "RunMetadata": {"step_stats": ("StepStats", False)},
    "StepStats": {"dev_stats": ("DeviceStepStats", True)},
    "DeviceStepStats": {"device": ("str", False), "node_stats": ("NodeExecStats", True)},
    "NodeExecStats": {
        "node_name": ("str", False), "all_start_micros": ("int", False),
        "op_start_rel_micros": ("int", False), "op_end_rel_micros": ("int", False),
        "all_end_rel_micros": ("int", False), "all_start_nanos": ("int", False),
        "op_start_rel_nanos": ("int", False), "op_end_rel_nanos": ("int", False),
        "all_end_rel_nanos": ("int", False)},
}


def _snake(key: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def _pairs_of(obj: Any, where: str) -> list[tuple[str, Any]]:
    """A JSON object or text-format message as (snake_case field, value) pairs."""
    if isinstance(obj, list):
        return obj
    if not isinstance(obj, Mapping):
        raise ValidationError(f"{where}: expected a message, got {type(obj).__name__}")
    out: list[tuple[str, Any]] = []
    for k, v in obj.items():
        key = _snake(k)
        if isinstance(v, list) and not (v and isinstance(v[0], tuple)):
            out.extend((key, x) for x in v)
        else:
            out.append((key, v))
    return out


def _scalar(kind: str, v: Any, where: str) -> Any:
    try:
        if kind == "str":
            if not isinstance(v, str):
                raise TypeError
            return v
        if kind == "int":
            if isinstance(v, bool) or isinstance(v, float):
                raise TypeError
            return int(v)  # JSON writes int64 as strings
        if kind == "float":
            return float(v)
        if kind == "bool":
            if isinstance(v, bool):
                return v
            if v in ("true", "True", "t", 1):
                return True
            if v in ("false", "False", "f", 0):
                return False
            raise TypeError
        if kind == "enum":
            if isinstance(v, int) and not isinstance(v, bool):
                return _DTYPE_NUMBERS.get(v, f"<{v}>")
            if not isinstance(v, str):
                raise TypeError
            return v
    except (TypeError, ValueError):
        pass
    raise ValidationError(f"{where}: expected a {kind} value, got {v!r}")


def _convert(msg: str, obj: Any, where: str) -> dict[str, Any]:
    """Convert a parsed message (JSON map or text pairs) into a plain dict by ``_SCHEMA``."""
    schema = _SCHEMA[msg]
    out: dict[str, Any] = {}
    for key, val in _pairs_of(obj, where):
        spec = schema.get(key)
        if spec is None:
            continue  # fields the importer does not need (versions, library, tensors...)
        kind, repeated = spec
        here = f"{where}.{key}"
        if kind.startswith("map:"):
            sub = kind[4:]
            m = out.setdefault(key, {})
            if isinstance(val, Mapping):  # JSON form: {"T": {...}}
                for k2, v2 in val.items():
                    m[k2] = _convert(sub, v2, f"{here}[{k2!r}]")
            else:  # text form: one {key: .. value {..}} entry per occurrence
                entry = dict((k, v) for k, v in _pairs_of(val, here))
                if "key" not in entry:
                    raise ValidationError(f"{here}: map entry without a key")
                m[str(entry["key"])] = _convert(sub, entry.get("value", []), f"{here}[{entry['key']!r}]")
            continue
        conv = (_convert(kind, val, here) if kind in _SCHEMA else _scalar(kind, val, here))
        if repeated:
            out.setdefault(key, []).append(conv)
        else:
            out[key] = conv
    return out


def _parse_message(source: str | Path | Mapping[str, Any], msg: str) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return _convert(msg, source, msg)
    text = _read_text(source)
    where = str(source)
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{where}: not valid JSON ({exc})") from None
        return _convert(msg, obj, where)
    return _convert(msg, _TextParser(text, where).parse(), where)


def read_graphdef(source: str | Path | Mapping[str, Any]) -> list[dict[str, Any]]:
    """Read a GraphDef's nodes from JSON (protobuf json_format) or text format (.pbtxt).

    Parameters
    ----------
    source
        A path (gzip-compressed or plain; JSON is recognised by its leading ``{``,
        anything else is read as text format) or an already-decoded JSON map.

    Returns
    -------
    list of dict
        One dict per node with ``name``, ``op``, ``input``, ``device`` and ``attr``
        (attribute values as dicts with snake_case fields, dtypes as ``"DT_*"`` names).
    """
    graph = _parse_message(source, "GraphDef")
    return graph.get("node", [])


def read_step_stats(source: str | Path | Mapping[str, Any]) -> dict[str, float]:
    """Measured op durations from RunMetadata (or bare StepStats) in JSON or text form.

    A node's duration is its ``all_end_rel`` time (start of the op to the end of
    its outputs), in nanoseconds when the file has them, else microseconds.
    A node listed more than once (e.g. per device stream) keeps its longest
    entry, so streams are not double counted. Runtime entries (``RecvTensor``,
    ``_SOURCE``, ``_SINK``) are skipped.

    Returns
    -------
    dict
        Node name -> duration in seconds.
    """
    md = _parse_message(source, "RunMetadata")
    stats = md.get("step_stats")
    if stats is None:  # a bare StepStats message
        stats = _parse_message(source, "StepStats")
    out: dict[str, float] = {}
    for dev in stats.get("dev_stats", []):
        for ns in dev.get("node_stats", []):
            name = ns.get("node_name")
            if not name or name in ("RecvTensor", "_SOURCE", "_SINK"):
                continue
            if "all_end_rel_nanos" in ns:
                dur = ns["all_end_rel_nanos"] * 1e-9
            else:
                dur = ns.get("all_end_rel_micros", 0) * 1e-6
            out[name] = max(out.get(name, 0.0), float(dur))
    return out


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
        if not job or (idx and not idx.isdigit()):
            raise ValidationError(f"bad TensorFlow task {spec!r} (expected e.g. 'ps', 'ps:0' or '/job:ps/task:0')")
        return Task(job, int(idx or 0))
    job, task = "localhost", 0
    for part in s.split("/")[1:]:
        key, _, val = part.partition(":")
        if key == "job":
            job = val
        elif key == "task":
            if not val.isdigit():
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
    if sep and idx.isdigit():
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


def _flops(g: _Graph, n: _Node) -> float:
    def dims(i: int) -> list[int] | None:
        if i >= len(n.inputs) or n.inputs[i][2]:
            return None
        return g.shape(n.inputs[i][0], n.inputs[i][1])

    out = g.shape(n.name, 0)
    if n.op in ("MatMul", "BatchMatMul", "BatchMatMulV2") and out and len(out) >= 2:
        a = dims(0)
        if a and out[-2] > 0:
            return 2.0 * math.prod(out) * (math.prod(a) / math.prod(out[:-1]))
    if n.op in ("Conv2D", "Conv2DBackpropInput") and out:
        f = dims(1)
        grad = out if n.op == "Conv2D" else dims(2)
        if f and grad and f[-1] > 0:
            return 2.0 * math.prod(grad) * math.prod(f) / f[-1]
    if n.op == "Conv2DBackpropFilter" and out and out[-1] > 0:
        grad = dims(2)
        if grad:
            return 2.0 * math.prod(grad) * math.prod(out) / out[-1]
    return 0.0


def estimate_duration(g: _Graph, n: _Node) -> float:
    """Cost-model duration of op ``n`` in seconds (see the module constants COST_*).

    ``COST_LAUNCH_S + flops / COST_FLOPS + bytes / COST_MEM_BPS``, where FLOPs
    are counted for MatMul and the Conv2D family (2 per multiply-add) and bytes
    are the op's known input and output tensor sizes (4 bytes per element when
    the dtype is unknown). Unknown shapes count as nothing.
    """
    moved = 0
    tensors = [(s, i) for s, i, c in n.inputs if not c]
    shapes = n.attr.get("_output_shapes", {}).get("list", {}).get("shape", [])
    tensors += [(n.name, i) for i in range(max(len(shapes), 1))]
    for s, i in tensors:
        dims = g.shape(s, i)
        if dims is not None:
            moved += math.prod(dims) * DTYPE_BYTES.get(g.dtype(s, i) or "", 4)
    return COST_LAUNCH_S + _flops(g, n) / COST_FLOPS + moved / COST_MEM_BPS


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
