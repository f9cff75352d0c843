"""Read TensorFlow GraphDef and RunMetadata files (protobuf JSON or text format, maybe gzipped) into plain dicts."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jitsched.dag.model import read_input_bytes
from jitsched.errors import ValidationError

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


# --------------------------------------------------------------------------- reading files


def _read_text(source: str | Path) -> str:
    p = Path(source)
    raw = read_input_bytes(p)
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
                try:
                    self.toks.append(("str", _unescape(val[1:-1]), line))
                except UnicodeDecodeError as exc:  # a malformed escape: \x without hex digits, ...
                    raise ValidationError(f"{where}:{line}: bad escape in the string {val} "
                                          f"({exc.reason})") from None
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
        try:
            pairs = self._message(None)
        except RecursionError:
            raise ValidationError(f"{self.where}: messages nested too deeply") from None
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
    if isinstance(obj, list) and all(type(x) is tuple for x in obj):
        return obj  # the text form's pairs (JSON has no tuples)
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
        except ValueError as exc:  # JSONDecodeError, or an integer past the interpreter's digit limit
            raise ValidationError(f"{where}: not valid JSON ({exc})") from None
        except RecursionError:
            raise ValidationError(f"{where}: not valid JSON (nested too deeply)") from None
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

    Raises
    ------
    ValidationError
        The file cannot be read or parsed, is neither RunMetadata nor StepStats
        (it has no ``step_stats`` or ``dev_stats`` field), or times no op.
    """
    md = _parse_message(source, "RunMetadata")
    stats = md.get("step_stats")
    if stats is None:  # a bare StepStats message
        stats = _parse_message(source, "StepStats")
    where = "step stats" if isinstance(source, Mapping) else str(source)
    if "dev_stats" not in stats:
        # the schema skips unknown fields, so any other message (a workload, a
        # GraphDef) would read as stats of no op and silently measure nothing
        if "step_stats" in md:
            raise ValidationError(f"{where}: step_stats has no dev_stats: it times no op")
        raise ValidationError(f"{where}: not RunMetadata or StepStats (no step_stats or "
                              "dev_stats field)")
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
    if not out:
        raise ValidationError(f"{where}: the step stats time no op (no node_stats with a node_name)")
    return out

