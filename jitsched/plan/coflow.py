"""Read coflow-benchmark traces (Varys/Sincronia format) into coflows and jitsched workloads."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from jitsched.dag.model import Cluster, Job, Transfer, Workload
from jitsched.errors import ValidationError

# The trace's "MB" is a mebibyte, as the public simulators of this line of
# work read it.
MB_BYTES = 1048576
# The most ports a trace may declare: the public traces have 150, and a workload
# of the trace holds one host per declared port.
MAX_PORTS = 100_000


@dataclass(frozen=True)
class Flow:
    """One mapper-to-reducer flow of a coflow: ports and size in bytes."""

    src: int
    dst: int
    bytes: float


@dataclass(frozen=True)
class Coflow:
    """One coflow: trace id, arrival in seconds, and its network flows (reducer-major)."""

    id: str
    arrival_s: float
    mappers: tuple[int, ...]
    reducers: tuple[tuple[int, float], ...]  # (port, shuffle bytes)
    flows: tuple[Flow, ...]

    @property
    def bytes(self) -> float:
        """Bytes the coflow moves across the network."""
        return float(sum(f.bytes for f in self.flows))


@dataclass(frozen=True)
class CoflowTrace:
    """A parsed trace: port count, coflows in file order, and what was dropped as local."""

    n_ports: int
    coflows: tuple[Coflow, ...]
    local_flows: int = 0
    local_bytes: float = 0.0


def _whole(s: str) -> bool:
    """Whether ``s`` is a whole number >= 0 in ASCII digits (``str.isdigit`` also takes "²")."""
    return s.isascii() and s.isdigit()


def read_coflow_trace(path: str | Path, *, mb_bytes: float = MB_BYTES) -> CoflowTrace:
    """Read a coflow-benchmark trace.

    Format: a first line ``<ports> <coflows>``; then one line per coflow:
    ``<id> <arrival ms> <M> <mapper port>×M <R> <reducer port>:<shuffle MB>×R``.
    Ports are numbered from 0. Every reducer's shuffle is split evenly over
    the mappers, one flow per (mapper, reducer), listed reducer by reducer.
    A flow whose mapper and reducer share a port never crosses the network
    and is dropped (counted in ``local_flows``/``local_bytes``); a coflow may
    so end up with no flows.

    Parameters
    ----------
    path
        The trace file.
    mb_bytes
        Bytes per trace "MB" (default 1,048,576).

    Returns
    -------
    CoflowTrace
        Arrival times in seconds, flow sizes in bytes.

    Raises
    ------
    ValidationError
        Naming the line: wrong counts, a port out of range, a bad number, a
        negative size or arrival, duplicate coflow ids.
    """
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise ValidationError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{p}: cannot read ({exc})") from None
    body = [(i + 1, ln.split()) for i, ln in enumerate(lines) if ln.strip()]
    if not body:
        raise ValidationError(f"{p}: empty trace")
    head_no, head = body[0]
    if len(head) != 2 or not all(_whole(x) for x in head):
        raise ValidationError(f"{p}:{head_no}: expected '<ports> <coflows>', got {' '.join(head)!r}")
    n_ports, n_coflows = int(head[0]), int(head[1])
    if n_ports < 1:
        raise ValidationError(f"{p}:{head_no}: the trace has no ports")
    if n_ports > MAX_PORTS:
        raise ValidationError(f"{p}:{head_no}: the header declares {n_ports} ports, more than "
                              f"{MAX_PORTS} (a workload has one host per port)")
    if len(body) - 1 != n_coflows:
        raise ValidationError(f"{p}: header says {n_coflows} coflows, found {len(body) - 1} lines")
    coflows = []
    seen: set[str] = set()
    local_flows, local_bytes = 0, 0.0
    for line_no, tok in body[1:]:
        where = f"{p}:{line_no}"

        def count(i: int, what: str, where: str = where, tok: list[str] = tok) -> int:
            if i >= len(tok):
                raise ValidationError(f"{where}: line ends before the {what}")
            if not _whole(tok[i]):
                raise ValidationError(f"{where}: {what} {tok[i]!r} is not a whole number >= 0")
            return int(tok[i])

        def port(s: str, what: str, where: str = where) -> int:
            if not _whole(s) or int(s) >= n_ports:
                raise ValidationError(f"{where}: {what} port {s!r} is not in 0..{n_ports - 1}")
            return int(s)

        def number(i: int, what: str, where: str = where, tok: list[str] = tok) -> float:
            if i >= len(tok):
                raise ValidationError(f"{where}: line ends before the {what}")
            try:
                v = float(tok[i])
            except ValueError:
                raise ValidationError(f"{where}: {what} {tok[i]!r} is not a number") from None
            if not v >= 0 or v == float("inf"):
                raise ValidationError(f"{where}: {what} must be >= 0, got {tok[i]!r}")
            return v

        if len(tok) < 4:
            raise ValidationError(f"{where}: too few fields for a coflow")
        cid = tok[0]
        if cid in seen:
            raise ValidationError(f"{where}: duplicate coflow id {cid!r}")
        seen.add(cid)
        arrival_s = number(1, "arrival time (ms)") / 1e3
        m = count(2, "mapper count")
        if m < 1:
            raise ValidationError(f"{where}: coflow {cid!r} has no mappers")
        r_at = 3 + m
        if len(tok) <= r_at:
            raise ValidationError(f"{where}: coflow {cid!r} declares {m} mappers but the line ends before the reducers")
        mappers = tuple(port(tok[3 + k], "mapper") for k in range(m))
        r = count(r_at, "reducer count")
        if len(tok) != r_at + 1 + r:
            raise ValidationError(f"{where}: coflow {cid!r} declares {r} reducers but lists {len(tok) - r_at - 1}")
        reducers = []
        for entry in tok[r_at + 1:]:
            loc, sep, mb = entry.partition(":")
            if not sep:
                raise ValidationError(f"{where}: reducer entry {entry!r} is not 'port:MB'")
            try:
                size = float(mb) * mb_bytes
            except ValueError:
                raise ValidationError(f"{where}: reducer entry {entry!r}: {mb!r} is not a number") from None
            if not size >= 0 or size == float("inf"):
                raise ValidationError(f"{where}: reducer entry {entry!r}: size must be >= 0")
            reducers.append((port(loc, "reducer"), size))
        flows = []
        for dst, size in reducers:
            share = size / m
            for src in mappers:
                if share <= 0:
                    continue
                if src == dst:
                    local_flows += 1
                    local_bytes += share
                    continue
                flows.append(Flow(src, dst, share))
        coflows.append(Coflow(cid, arrival_s, mappers, tuple(reducers), tuple(flows)))
    return CoflowTrace(n_ports, tuple(coflows), local_flows, local_bytes)


def synthetic_trace_path() -> Path:
    """The small synthetic trace shipped with jitsched (coflow-benchmark format, 8 ports)."""
    return Path(str(resources.files("jitsched") / "data" / "coflow-synthetic.txt"))


def coflow_workload(trace: CoflowTrace | str | Path, *, bps: float = 1e9,
                    host_prefix: str = "p", cluster: Cluster | None = None) -> Workload:
    """Turn a coflow trace into a workload: one job per coflow, transfers only, no edges.

    Port ``i`` is host ``f"{host_prefix}{i}"`` (``bps`` bits/s each way) unless
    ``cluster`` is given, whose ``hosts[i]`` is then port ``i``. Job ids are
    ``coflow-<trace id>``, transfer ids ``f<k>:<src port>-<dst port>`` in
    reducer-major order; a coflow with no network flow (all local) is left out.

    Returns
    -------
    Workload
        The coflows as jobs, arrival times in seconds, sizes in bytes.
    """
    tr = trace if isinstance(trace, CoflowTrace) else read_coflow_trace(trace)
    if cluster is None:
        cluster = Cluster.uniform(tr.n_ports, bps, prefix=host_prefix)
    elif len(cluster) < tr.n_ports:
        raise ValidationError(f"the cluster has {len(cluster)} hosts, the trace {tr.n_ports} ports")
    names = cluster.names
    jobs = []
    for c in tr.coflows:
        if not c.flows:
            continue
        transfers = tuple(Transfer(f"f{k}:{f.src}-{f.dst}", names[f.src], names[f.dst], f.bytes)
                          for k, f in enumerate(c.flows))
        jobs.append(Job(f"coflow-{c.id}", (), transfers, (), c.arrival_s, 0.0, "coflow"))
    return Workload(cluster, tuple(jobs), ())
