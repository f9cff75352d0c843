"""The native job model: cluster, DAG jobs and background flows, validated, plus CSR arrays."""

# One module although past 500 lines: its three parts (the frozen dataclasses,
# their validating parsers and loaders, their packing into the kernels' CSR
# arrays) are one vocabulary, and nearly sixty modules of the package, benches
# and tests import any mix of them from here. Split out, the parsers and the
# packer would import the dataclasses, and this module would have to import
# them back to keep those imports working: a cycle. It sits below the LAT pass
# (tests/test_layers.py): topological_order is here, not in jitsched.dag.lat.

from __future__ import annotations

import gzip
import io
import json
import math
import os
import secrets
import stat
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jitsched.errors import ValidationError, load_kernel

COMPUTE = 0
TRANSFER = 1

# A job's class, most significant in the default jit's order: critical jobs'
# transfers before normal ones, normal before best-effort. Its index here is the
# int DagArrays.job_class carries (CLASSES.index(name)).
CLASSES = ("critical", "normal", "best-effort")
CRITICAL, NORMAL, BEST_EFFORT = 0, 1, 2


@dataclass(frozen=True)
class Host:
    """One end host: capacities in bits per second, as the network counts them."""

    name: str
    egress_bps: float
    ingress_bps: float
    address: str | None = None

    @property
    def egress_Bps(self) -> float:
        """Egress capacity in bytes/s."""
        return self.egress_bps / 8.0

    @property
    def ingress_Bps(self) -> float:
        """Ingress capacity in bytes/s."""
        return self.ingress_bps / 8.0


@dataclass(frozen=True)
class Cluster:
    """Hosts joined by one non-blocking switch."""

    hosts: tuple[Host, ...]
    _index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._index.update({h.name: i for i, h in enumerate(self.hosts)})
        # Hosts are frozen, so the capacity vectors never change: build them
        # once. Policies read them on every allocation, and a list comprehension
        # over the hosts there was a tenth of a simulation's wall time.
        object.__setattr__(self, "_egress", np.array([h.egress_Bps for h in self.hosts], dtype=np.float64))
        object.__setattr__(self, "_ingress", np.array([h.ingress_Bps for h in self.hosts], dtype=np.float64))

    def __len__(self) -> int:
        return len(self.hosts)

    def index(self, name: str) -> int:
        """Return the position of host ``name``; raise ValidationError if unknown."""
        try:
            return self._index[name]
        except KeyError:
            raise ValidationError(f"unknown host {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._index

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def egress_Bps(self) -> np.ndarray:
        """Egress capacities, shape (n_hosts,), bytes/s (a fresh copy the caller may modify)."""
        return self._egress.copy()

    @property
    def ingress_Bps(self) -> np.ndarray:
        """Ingress capacities, shape (n_hosts,), bytes/s (a fresh copy the caller may modify)."""
        return self._ingress.copy()

    @classmethod
    def uniform(cls, n_hosts: int, bps: float = 1e9, prefix: str = "h") -> Cluster:
        """Return ``n_hosts`` hosts named ``h0..`` with ``bps`` bits/s each way."""
        return cls(tuple(Host(f"{prefix}{i}", float(bps), float(bps)) for i in range(n_hosts)))

    def with_host(self, host: Host) -> Cluster:
        """A cluster with ``host`` in place of the one of its name, or appended: every other
        host keeps its index (plans, jobs and flows name hosts by index)."""
        hosts = list(self.hosts)
        if host.name in self._index:
            hosts[self._index[host.name]] = host
        else:
            hosts.append(host)
        return Cluster(tuple(hosts))

    def to_dict(self) -> dict[str, Any]:
        hosts = []
        for h in self.hosts:
            d: dict[str, Any] = {"name": h.name, "egress_bps": h.egress_bps, "ingress_bps": h.ingress_bps}
            if h.address is not None:
                d["address"] = h.address
            hosts.append(d)
        return {"hosts": hosts}


@dataclass(frozen=True)
class Compute:
    """A compute node: runs ``duration_s`` seconds on ``host`` (optionally mean + std)."""

    id: str
    host: str
    duration_s: float
    std_s: float = 0.0


@dataclass(frozen=True)
class Transfer:
    """A network transfer of ``bytes`` from ``src`` to ``dst``."""

    id: str
    src: str
    dst: str
    bytes: float


@dataclass(frozen=True)
class Job:
    """A DAG job: compute and transfer nodes, edges ``(before, after)`` by node id."""

    id: str
    computes: tuple[Compute, ...]
    transfers: tuple[Transfer, ...]
    edges: tuple[tuple[str, str], ...]
    arrival_s: float = 0.0
    priority: float = 0.0
    model: str | None = None
    job_class: str = "normal"

    @property
    def n_nodes(self) -> int:
        return len(self.computes) + len(self.transfers)

    def node_ids(self) -> list[str]:
        """Node ids in array order: computes first, then transfers."""
        return [c.id for c in self.computes] + [t.id for t in self.transfers]

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "arrival_s": self.arrival_s, "priority": self.priority}
        if self.model is not None:
            d["model"] = self.model
        if self.job_class != "normal":  # absent means normal: files without classes stay as they were
            d["class"] = self.job_class
        d["computes"] = [
            {"id": c.id, "host": c.host, "duration_s": c.duration_s}
            | ({"std_s": c.std_s} if c.std_s else {})
            for c in self.computes
        ]
        d["transfers"] = [
            {"id": t.id, "src": t.src, "dst": t.dst, "bytes": t.bytes} for t in self.transfers
        ]
        d["edges"] = [[a, b] for a, b in self.edges]
        return d


@dataclass(frozen=True)
class Background:
    """A flow without a DAG: uses whatever bandwidth the DAG transfers leave."""

    id: str
    src: str
    dst: str
    bytes: float
    arrival_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "src": self.src, "dst": self.dst, "bytes": self.bytes,
                "arrival_s": self.arrival_s}


@dataclass(frozen=True)
class Workload:
    """A cluster with the DAG jobs and background flows that run on it."""

    cluster: Cluster
    jobs: tuple[Job, ...] = ()
    background: tuple[Background, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster.to_dict(),
            "jobs": [j.to_dict() for j in self.jobs],
            "background": [b.to_dict() for b in self.background],
        }

    def job(self, job_id: str) -> Job:
        for j in self.jobs:
            if j.id == job_id:
                return j
        raise KeyError(job_id)


# --------------------------------------------------------------------------- parsing

# The least capacity a host's port may have, bits/s: a smaller positive one (5e-324, say)
# is 0 bytes/s once divided by 8, and every transfer through it would take forever.
MIN_HOST_BPS = 1.0
_HOST_FIELDS = {"name": str, "egress_bps": "num", "ingress_bps": "num", "address": str}
_HOST_REQUIRED = ("name", "egress_bps", "ingress_bps")
_JOB_FIELDS = {"id": str, "arrival_s": "num", "priority": "num", "model": str, "class": str,
               "computes": list, "transfers": list, "edges": list}
_COMPUTE_FIELDS = {"id": str, "host": str, "duration_s": "num", "std_s": "num"}
_COMPUTE_REQUIRED = ("id", "host", "duration_s")
_TRANSFER_FIELDS = {"id": str, "src": str, "dst": str, "bytes": "num"}
_TRANSFER_REQUIRED = ("id", "src", "dst", "bytes")
_BACKGROUND_FIELDS = {"id": str, "src": str, "dst": str, "bytes": "num", "arrival_s": "num"}
_TOP_FIELDS = {"cluster": dict, "jobs": list, "background": list}


def _at(path: str, key: str) -> str:
    """The field path of ``key`` in the map at ``path`` ("" for a file's top level)."""
    return f"{path}.{key}" if path else key


def _plain(obj: Any, spec: dict[str, Any], required: Iterable[str]) -> bool:
    """Whether ``obj`` is a dict that :func:`_check_map` passes, of builtin types only; builds
    no message (False for a subclass it would pass too: the caller then runs it)."""
    if type(obj) is not dict or not obj.keys() <= spec.keys():
        return False
    for key in required:
        if key not in obj:
            return False
    try:
        for key, val in obj.items():
            kind = spec[key]
            if kind == "num":
                t = type(val)
                if (t is not float and t is not int) or not math.isfinite(val):
                    return False
            elif kind is str:
                if type(val) is not str or not val:
                    return False
            elif type(val) is not kind:
                return False
    except OverflowError:  # an integer beyond any float: the full check names it
        return False
    return True


def _finite(val: int | float) -> bool:
    """Whether the number ``val`` is finite as a float (an integer beyond 1.8e308 is not)."""
    try:
        return math.isfinite(val)
    except OverflowError:
        return False


def _check_map(obj: Any, path: str, spec: Mapping[str, Any], required: Iterable[str]) -> None:
    if not isinstance(obj, Mapping):
        raise ValidationError(f"{path or 'the file'}: expected an object, got {type(obj).__name__}")
    for key in obj:
        if key not in spec:
            raise ValidationError(f"{_at(path, key)}: unknown field")
    for key in required:
        if key not in obj:
            raise ValidationError(f"{_at(path, key)}: missing required field")
    for key, kind in spec.items():
        if key not in obj:
            continue
        val = obj[key]
        where = _at(path, key)
        if kind == "num":
            # bool is an int subclass; a JSON true is never a size or a time
            if isinstance(val, bool) or not isinstance(val, (int, float)):
                raise ValidationError(f"{where}: expected a number, got {type(val).__name__}")
            if not _finite(val):
                shown = (repr(val) if isinstance(val, float)
                         else f"an integer of {len(str(abs(val)))} digits")
                raise ValidationError(f"{where}: must be finite, got {shown}")
        elif not isinstance(val, kind):
            raise ValidationError(
                f"{where}: expected {kind.__name__}, got {type(val).__name__}"
            )
        if kind is str and not val:
            raise ValidationError(f"{where}: must not be empty")


def parse_cluster(obj: Any, path: str = "cluster", *, empty_ok: bool = False) -> Cluster:
    """Validate a native cluster map and return a :class:`Cluster` (of no hosts only if
    ``empty_ok``: a daemon whose hosts all join as their agents register); ``path`` names
    the map in errors ("": a file's top level, whose ``hosts`` it reads)."""
    _check_map(obj, path, {"hosts": list}, ("hosts",))
    if not obj["hosts"] and not empty_ok:
        raise ValidationError(f"{_at(path, 'hosts')}: the cluster has no hosts")
    hosts = []
    seen: set[str] = set()
    for i, h in enumerate(obj["hosts"]):
        where = f"{_at(path, 'hosts')}[{i}]"
        _check_map(h, where, _HOST_FIELDS, _HOST_REQUIRED)
        if h["name"] in seen:
            raise ValidationError(f"{where}.name: duplicate host name {h['name']!r}")
        seen.add(h["name"])
        for key in ("egress_bps", "ingress_bps"):
            if h[key] < MIN_HOST_BPS:
                raise ValidationError(f"{where}.{key}: capacity must be at least {MIN_HOST_BPS:g} bit/s, "
                                      f"got {h[key]!r}")
        hosts.append(Host(h["name"], float(h["egress_bps"]), float(h["ingress_bps"]), h.get("address")))
    return Cluster(tuple(hosts))


def _check_edge(e: Any, ids: set[str], where: str) -> None:
    """Raise ValidationError naming what is wrong with edge ``e`` (at ``where``): not a pair
    of node ids, an unknown node, a self-loop; nothing for a pair of known ids."""
    if not isinstance(e, (list, tuple)) or len(e) != 2 or not isinstance(e[0], str) or not isinstance(e[1], str):
        raise ValidationError(f"{where}: expected a pair of node ids [before, after], got {e!r}")
    for x in e:
        if x not in ids:
            raise ValidationError(f"{where}: edge to unknown node {x!r}")
    if e[0] == e[1]:
        raise ValidationError(f"{where}: self-loop on node {e[0]!r} (a cycle)")


def parse_job(obj: Any, cluster: Cluster, path: str = "job") -> Job:
    """Validate a native job map against ``cluster`` and return a :class:`Job`.

    Raises
    ------
    ValidationError
        Naming the field path or node id at fault: unknown fields, wrong types,
        duplicate ids, unknown hosts, dangling edges, non-positive sizes,
        negative durations, cycles.
    """
    _check_map(obj, path, _JOB_FIELDS, ("id",))
    path = f"{path}[{obj['id']!r}]" if path == "job" else path
    arrival = float(obj.get("arrival_s", 0.0))
    if arrival < 0:
        raise ValidationError(f"{path}.arrival_s: must be >= 0, got {arrival!r}")
    job_class = obj.get("class", "normal")
    if job_class not in CLASSES:
        raise ValidationError(f"{path}.class: expected one of {', '.join(CLASSES)}, got {job_class!r}")
    ids: set[str] = set()

    # A node's field path is written out only for an error: a ResNet-152 job has thousands
    # of nodes, and formatting every path was most of its parse
    def new_id(node: str, field: str, i: int) -> None:
        if node in ids:
            raise ValidationError(f"{path}.{field}[{i}].id: duplicate node id {node!r}")
        ids.add(node)

    computes = []
    for i, c in enumerate(obj.get("computes", [])):
        if not _plain(c, _COMPUTE_FIELDS, _COMPUTE_REQUIRED):
            _check_map(c, f"{path}.computes[{i}]", _COMPUTE_FIELDS, _COMPUTE_REQUIRED)
        node = c["id"]
        new_id(node, "computes", i)
        if c["host"] not in cluster:
            raise ValidationError(f"{path}.computes[{i}].host: unknown host {c['host']!r} (node {node!r})")
        if c["duration_s"] < 0:
            raise ValidationError(f"{path}.computes[{i}].duration_s: negative duration {c['duration_s']!r} "
                                  f"(node {node!r})")
        std = float(c.get("std_s", 0.0))
        if std < 0:
            raise ValidationError(f"{path}.computes[{i}].std_s: negative std {std!r} (node {node!r})")
        computes.append(Compute(node, c["host"], float(c["duration_s"]), std))
    transfers = []
    for i, t in enumerate(obj.get("transfers", [])):
        if not _plain(t, _TRANSFER_FIELDS, _TRANSFER_REQUIRED):
            _check_map(t, f"{path}.transfers[{i}]", _TRANSFER_FIELDS, _TRANSFER_REQUIRED)
        node, src, dst = t["id"], t["src"], t["dst"]
        new_id(node, "transfers", i)
        if src not in cluster or dst not in cluster:
            key = "src" if src not in cluster else "dst"
            raise ValidationError(f"{path}.transfers[{i}].{key}: unknown host {t[key]!r} (node {node!r})")
        if src == dst:
            raise ValidationError(f"{path}.transfers[{i}]: src and dst are the same host {src!r} (node {node!r})")
        if t["bytes"] <= 0:
            raise ValidationError(f"{path}.transfers[{i}].bytes: size must be positive, got {t['bytes']!r} "
                                  f"(node {node!r})")
        transfers.append(Transfer(node, src, dst, float(t["bytes"])))
    edges = []
    seen_edges: set[tuple[str, str]] = set()
    for i, e in enumerate(obj.get("edges", [])):
        # a plain pair of distinct known ids takes no check that builds a message
        if not (type(e) is list and len(e) == 2 and type(e[0]) is str and type(e[1]) is str
                and e[0] != e[1] and e[0] in ids and e[1] in ids):
            _check_edge(e, ids, f"{path}.edges[{i}]")
        pair = (e[0], e[1])
        if pair not in seen_edges:  # a repeated dependency changes nothing
            seen_edges.add(pair)
            edges.append(pair)
    if not computes and not transfers:
        raise ValidationError(f"{path}: the job has no nodes")
    job = Job(str(obj["id"]), tuple(computes), tuple(transfers), tuple(edges), arrival,
              float(obj.get("priority", 0.0)), obj.get("model"), job_class)
    cyc = find_cycle_node(job)
    if cyc is not None:
        raise ValidationError(f"{path}: the DAG has a cycle through node {cyc!r}")
    return job


def parse_background(obj: Any, cluster: Cluster, path: str) -> Background:
    """Validate a background flow map."""
    _check_map(obj, path, _BACKGROUND_FIELDS, ("id", "src", "dst", "bytes"))
    for key in ("src", "dst"):
        if obj[key] not in cluster:
            raise ValidationError(f"{path}.{key}: unknown host {obj[key]!r}")
    if obj["src"] == obj["dst"]:
        raise ValidationError(f"{path}: src and dst are the same host {obj['src']!r}")
    if obj["bytes"] <= 0:
        raise ValidationError(f"{path}.bytes: size must be positive, got {obj['bytes']!r}")
    arrival = float(obj.get("arrival_s", 0.0))
    if arrival < 0:
        raise ValidationError(f"{path}.arrival_s: must be >= 0, got {arrival!r}")
    return Background(obj["id"], obj["src"], obj["dst"], float(obj["bytes"]), arrival)


def parse_workload(obj: Any) -> Workload:
    """Validate a whole native-format map (cluster, jobs, background)."""
    _check_map(obj, "$", _TOP_FIELDS, ("cluster",))
    cluster = parse_cluster(obj["cluster"], "cluster")
    jobs = []
    seen: set[str] = set()
    for i, j in enumerate(obj.get("jobs", [])):
        job = parse_job(j, cluster, f"jobs[{i}]")
        if job.id in seen:
            raise ValidationError(f"jobs[{i}].id: duplicate job id {job.id!r}")
        seen.add(job.id)
        jobs.append(job)
    bgs = []
    for i, b in enumerate(obj.get("background", [])):
        bg = parse_background(b, cluster, f"background[{i}]")
        if bg.id in seen:
            raise ValidationError(f"background[{i}].id: duplicate id {bg.id!r}")
        seen.add(bg.id)
        bgs.append(bg)
    return Workload(cluster, tuple(jobs), tuple(bgs))


# The first two bytes of every gzip file (RFC 1952).
GZIP_MAGIC = b"\x1f\x8b"


def read_input_bytes(path: str | Path) -> bytes:
    """The bytes of the file ``path``, gunzipped when it is gzip data.

    A file is gzip data when it starts with the gzip magic bytes or its name
    ends in ``.gz``. The workload loader and the TensorFlow graph and step
    stats readers read their files through here, so each refuses a bad file
    in the same words.

    Raises
    ------
    ValidationError
        ``FILE: no such file``; ``FILE: cannot read (REASON)`` (a directory, no
        permission, ...); ``FILE: not a valid gzip file (REASON)`` (truncated,
        corrupt, or named ``.gz`` but not gzip data).
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ValidationError(f"{p}: no such file") from None
    except OSError as exc:
        raise ValidationError(f"{p}: cannot read ({exc.strerror or exc})") from None
    if raw[:2] == GZIP_MAGIC or p.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            # OSError: BadGzipFile (no gzip header, CRC or length mismatch);
            # EOFError: truncated; zlib.error: corrupt deflate data
            raise ValidationError(f"{p}: not a valid gzip file ({exc})") from None
    return raw


def read_json(path: str | Path) -> Any:
    """The JSON value in the file ``path`` (``.json``, or gzipped as ``.json.gz``).

    Raises
    ------
    ValidationError
        As :func:`read_input_bytes`, or ``FILE: not valid JSON (REASON)``.
    """
    raw = read_input_bytes(path)
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        # JSONDecodeError, UnicodeDecodeError, and an integer literal past the interpreter's
        # limit on digits (sys.get_int_max_str_digits)
        raise ValidationError(f"{Path(path)}: not valid JSON ({exc})") from None
    except RecursionError:
        raise ValidationError(f"{Path(path)}: not valid JSON (nested too deeply)") from None


def load_workload(source: str | Path | Mapping[str, Any]) -> Workload:
    """Load a native-format workload from a path (``.json`` or ``.json.gz``) or a map.

    Raises
    ------
    ValidationError
        The file cannot be read (:func:`read_json`) or is not a valid workload
        (:func:`parse_workload`).
    """
    if isinstance(source, Mapping):
        return parse_workload(source)
    return parse_workload(read_json(source))


def save_workload(workload: Workload, path: str | Path) -> None:
    """Write ``workload`` in the native JSON format (gzipped when the name ends in .gz).

    A regular file (or a new one) is written beside itself and renamed into place: a write
    that fails or is interrupted leaves the file as it was, never half of it. A gzip file's
    header holds no time, so the same workload always gives the same bytes.

    Raises
    ------
    ValidationError
        ``path`` cannot be written (its directory is missing, it is a directory, ...).
    """
    p = Path(path)
    target = Path(os.path.realpath(p))
    try:
        st: os.stat_result | None = target.stat()
    except OSError:
        st = None
    # a device, a pipe or a directory is written as it is (a directory then refuses)
    in_place = st is not None and not stat.S_ISREG(st.st_mode)
    tmp = None if in_place else target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        raw = None
        if tmp is not None:
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except PermissionError:
                if st is None:
                    raise
                tmp = None  # a file one may write in a directory one may not: in place
            else:
                raw = open(fd, "wb")
                if st is not None:  # the file keeps its permissions
                    os.chmod(raw.fileno(), stat.S_IMODE(st.st_mode))
        if raw is None:
            raw = open(p, "wb")
        with raw:
            out = gzip.GzipFile(filename=p.name, mode="wb", fileobj=raw, mtime=0) if p.suffix == ".gz" else raw
            with io.TextIOWrapper(out, encoding="utf-8") as fh:
                json.dump(workload.to_dict(), fh)
        if tmp is not None:
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        raise ValidationError(f"{p}: cannot write ({exc.strerror or exc})") from None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def find_cycle_node(job: Job) -> str | None:
    """Return the id of a node on a cycle of ``job``'s graph, or None if it is a DAG."""
    ids = job.node_ids()
    pos = {n: i for i, n in enumerate(ids)}
    n = len(ids)
    indeg = [0] * n
    succ: list[list[int]] = [[] for _ in range(n)]
    for a, b in job.edges:
        ib = pos[b]
        succ[pos[a]].append(ib)
        indeg[ib] += 1
    stack = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while stack:
        v = stack.pop()
        seen += 1
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    if seen == n:
        return None
    # Every node left has a predecessor that is also left: walking predecessors must
    # revisit a node, and the first revisited node lies on a cycle.
    pred: list[list[int]] = [[] for _ in range(n)]
    for a, b in job.edges:
        pred[pos[b]].append(pos[a])
    v = next(i for i in range(n) if indeg[i] > 0)
    visited: set[int] = set()
    while v not in visited:
        visited.add(v)
        v = next(p for p in pred[v] if indeg[p] > 0)
    return ids[v]


# --------------------------------------------------------------------------- CSR arrays


@dataclass(frozen=True)
class DagArrays:
    """Several jobs' DAGs as flat arrays for the kernels.

    Nodes of job ``k`` occupy ``job_ptr[k]:job_ptr[k+1]``, computes first. Every
    array is indexed by node and has shape (n_nodes,) unless stated.

    Attributes
    ----------
    kind : int8, ``COMPUTE`` or ``TRANSFER``.
    host : int32, compute host index, -1 for transfers.
    src, dst : int32, transfer endpoints, -1 for computes.
    size : float64, transfer bytes (0 for computes).
    duration : float64, compute seconds (0 for transfers).
    std : float64, compute duration std in seconds.
    job_of : int32, job index of the node.
    arrival : float64, shape (n_jobs,), job arrival times in seconds.
    priority : float64, shape (n_jobs,), each job's lateness weight in the LP.
    job_class : int8, shape (n_jobs,), each job's class: CRITICAL, NORMAL or BEST_EFFORT.
    pred_ptr, pred_idx : int64 / int32 CSR of predecessors.
    succ_ptr, succ_idx : int64 / int32 CSR of successors.
    topo : int32, a topological order of all nodes (job by job).
    """

    job_ids: tuple[str, ...]
    node_ids: tuple[str, ...]
    job_ptr: np.ndarray
    kind: np.ndarray
    host: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    size: np.ndarray
    duration: np.ndarray
    std: np.ndarray
    job_of: np.ndarray
    arrival: np.ndarray
    priority: np.ndarray
    job_class: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray
    topo: np.ndarray

    @property
    def n_nodes(self) -> int:
        return len(self.kind)

    @property
    def n_jobs(self) -> int:
        return len(self.job_ids)

    def transfer_index(self) -> np.ndarray:
        """Node indices of all transfers, in node order."""
        return np.flatnonzero(self.kind == TRANSFER)

    def node(self, job_id: str, node_id: str) -> int:
        k = self.job_ids.index(job_id)
        lo, hi = int(self.job_ptr[k]), int(self.job_ptr[k + 1])
        for i in range(lo, hi):
            if self.node_ids[i] == node_id:
                return i
        raise KeyError((job_id, node_id))


def _csr(n: int, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(rows, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return ptr, cols[order].astype(np.int32)


def compile_jobs(jobs: Sequence[Job], cluster: Cluster) -> DagArrays:
    """Pack validated jobs into :class:`DagArrays` (one array set for all jobs)."""
    kinds, hosts, srcs, dsts, sizes, durs, stds, job_of, node_ids = [], [], [], [], [], [], [], [], []
    erow: list[int] = []
    ecol: list[int] = []
    job_ptr = [0]
    for k, job in enumerate(jobs):
        pos = {}
        for c in job.computes:
            pos[c.id] = len(node_ids)
            node_ids.append(c.id)
            kinds.append(COMPUTE)
            hosts.append(cluster.index(c.host))
            srcs.append(-1)
            dsts.append(-1)
            sizes.append(0.0)
            durs.append(c.duration_s)
            stds.append(c.std_s)
            job_of.append(k)
        for t in job.transfers:
            pos[t.id] = len(node_ids)
            node_ids.append(t.id)
            kinds.append(TRANSFER)
            hosts.append(-1)
            srcs.append(cluster.index(t.src))
            dsts.append(cluster.index(t.dst))
            sizes.append(t.bytes)
            durs.append(0.0)
            stds.append(0.0)
            job_of.append(k)
        for a, b in job.edges:
            erow.append(pos[a])
            ecol.append(pos[b])
        job_ptr.append(len(node_ids))
    n = len(node_ids)
    rows = np.asarray(erow, dtype=np.int64)
    cols = np.asarray(ecol, dtype=np.int64)
    pred_ptr, pred_idx = _csr(n, cols, rows)
    succ_ptr, succ_idx = _csr(n, rows, cols)
    job_of_arr = np.asarray(job_of, dtype=np.int32)
    topo = topological_order(n, pred_ptr, succ_ptr, succ_idx)
    if len(topo) < n:
        left = sorted(set(range(n)) - set(topo.tolist()))
        raise ValidationError(f"the DAG of job {jobs[job_of[left[0]]].id!r} has a cycle "
                              f"(node {node_ids[left[0]]!r} is on or behind it)")
    # Jobs are disjoint, so a stable sort by job keeps the order topological
    # while making every job's nodes contiguous (the paper kernel relies on it).
    topo = topo[np.argsort(job_of_arr[topo], kind="stable")].astype(np.int32)
    return DagArrays(
        job_ids=tuple(j.id for j in jobs),
        node_ids=tuple(node_ids),
        job_ptr=np.asarray(job_ptr, dtype=np.int64),
        kind=np.asarray(kinds, dtype=np.int8),
        host=np.asarray(hosts, dtype=np.int32),
        src=np.asarray(srcs, dtype=np.int32),
        dst=np.asarray(dsts, dtype=np.int32),
        size=np.asarray(sizes, dtype=np.float64),
        duration=np.asarray(durs, dtype=np.float64),
        std=np.asarray(stds, dtype=np.float64),
        job_of=job_of_arr,
        arrival=np.asarray([j.arrival_s for j in jobs], dtype=np.float64),
        priority=np.asarray([j.priority for j in jobs], dtype=np.float64),
        job_class=np.asarray([CLASSES.index(j.job_class) for j in jobs], dtype=np.int8),
        pred_ptr=pred_ptr,
        pred_idx=pred_idx,
        succ_ptr=succ_ptr,
        succ_idx=succ_idx,
        topo=topo,
    )


def topological_order(n: int, pred_ptr: np.ndarray, succ_ptr: np.ndarray,
                      succ_idx: np.ndarray) -> np.ndarray:
    """Return a topological order of ``n`` nodes given CSR adjacency (the ``_lat`` kernel).

    Returns
    -------
    order : ndarray of int32, shape (m,)
        ``m < n`` exactly when the graph has a cycle; the missing nodes lie on
        or behind one.
    """
    order = np.empty(n, dtype=np.int32)
    indeg = np.empty(n, dtype=np.int32)
    m = load_kernel("_lat").topological_order(
        n,
        np.ascontiguousarray(pred_ptr, dtype=np.int64),
        np.ascontiguousarray(succ_ptr, dtype=np.int64),
        np.ascontiguousarray(succ_idx, dtype=np.int32),
        order,
        indeg,
    )
    return order[:m]


def critical_path_s(took: Mapping[str, float], edges: Iterable[tuple[str, str]]) -> float:
    """Length of a DAG's longest path, seconds: each node starts when its last input ended.

    Parameters
    ----------
    took : mapping
        Node id -> its duration, seconds (every node of the DAG).
    edges : iterable of (str, str)
        ``(before, after)`` pairs between those ids; no cycle (the parsers check).
    """
    # Kahn's order
    succ: dict[str, list[str]] = {n: [] for n in took}
    waits = dict.fromkeys(took, 0)
    for a, b in edges:
        succ[a].append(b)
        waits[b] += 1
    ready = deque(n for n, k in waits.items() if k == 0)
    start = dict.fromkeys(took, 0.0)
    longest = 0.0
    while ready:
        n = ready.popleft()
        end = start[n] + took[n]
        longest = max(longest, end)
        for m in succ[n]:
            start[m] = max(start[m], end)
            waits[m] -= 1
            if waits[m] == 0:
                ready.append(m)
    return longest
