"""Job shapes with many workers: a one-worker parameter-server iteration expanded to N workers, M server shards or a ring all-reduce."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jitsched.dag.model import Compute, Job, Transfer
from jitsched.errors import ValidationError

# ``ps``: one parameter server, N workers each reading every parameter from it
# and pushing every gradient to it. ``ps-sharded``: M servers, each holding a
# share of every large tensor. ``allreduce``: no server; N workers reduce their
# gradients over a ring.
SHAPES = ("ps", "ps-sharded", "allreduce")
MIXED = "mixed"
# Gradients are all-reduced in buckets of about this many bytes, in the order
# they become ready (25 MiB is PyTorch DistributedDataParallel's default bucket).
DEFAULT_BUCKET_BYTES = 25.0 * 2**20
# A sharded tensor is split into at most M slices of at least this many bytes
# (TensorFlow's min_max_variable_partitioner default, 256 KiB); smaller
# tensors live whole on the least-loaded server.
DEFAULT_MIN_SLICE_BYTES = 256.0 * 2**10


@dataclass(frozen=True)
class ShapeOptions:
    """How a one-worker job is expanded.

    Attributes
    ----------
    shape
        One of :data:`SHAPES`, or ``"mixed"`` (a generator draws one of them per job).
    workers
        Workers per job (at least 2 for ``allreduce`` and ``mixed``).
    servers
        Parameter servers of a ``ps-sharded`` job, at least 2 (1 for ``ps`` and ``allreduce``).
    bucket_bytes
        All-reduce bucket size, bytes.
    min_slice_bytes
        Smallest slice a sharded tensor is split into, bytes.
    """

    shape: str = "ps"
    workers: int = 1
    servers: int = 1
    bucket_bytes: float = DEFAULT_BUCKET_BYTES
    min_slice_bytes: float = DEFAULT_MIN_SLICE_BYTES

    def __post_init__(self) -> None:
        if self.shape not in SHAPES + (MIXED,):
            raise ValidationError(f"shape: expected one of {', '.join(SHAPES + (MIXED,))}, got {self.shape!r}")
        for name in ("workers", "servers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValidationError(f"{name}: expected an integer >= 1, got {v!r}")
        if self.shape in ("allreduce", MIXED) and self.workers < 2:
            raise ValidationError(f"shape {self.shape}: a ring needs at least 2 workers, got {self.workers}")
        if self.servers > 1 and self.shape not in ("ps-sharded", MIXED):
            raise ValidationError(f"servers: only ps-sharded jobs have more than one server (shape {self.shape})")
        if self.servers < 2 and self.shape in ("ps-sharded", MIXED):
            raise ValidationError(f"shape {self.shape}: a sharded job needs at least 2 servers, got {self.servers}")
        for name in ("bucket_bytes", "min_slice_bytes"):
            if not getattr(self, name) > 0:
                raise ValidationError(f"{name}: must be positive, got {getattr(self, name)!r}")

    @property
    def trivial(self) -> bool:
        """True for one parameter server and one worker: the job as it is."""
        return self.shape == "ps" and self.workers == 1

    def shapes(self) -> tuple[str, ...]:
        """The shapes jobs take: all of :data:`SHAPES` for ``mixed``, else the one."""
        return SHAPES if self.shape == MIXED else (self.shape,)

    def n_servers(self, shape: str) -> int:
        """Server hosts a job of ``shape`` uses."""
        return {"ps": 1, "ps-sharded": self.servers, "allreduce": 0}[shape]

    def n_hosts(self, shape: str) -> int:
        """Distinct hosts a job of ``shape`` uses (its servers and its workers)."""
        return self.n_servers(shape) + self.workers


def ps_roles(job: Job) -> tuple[str, str]:
    """The server and worker hosts of a one-worker parameter-server job.

    The worker runs every compute; every transfer goes between it and one
    other host, the server.

    Raises
    ------
    ValidationError
        Naming the node that does not fit: computes on two hosts, or a
        transfer that does not join the worker and the server.
    """
    hosts = {c.host for c in job.computes}
    if len(hosts) != 1:
        raise ValidationError(f"job {job.id!r}: expected every compute on one worker host, "
                              f"found {len(hosts)} hosts ({', '.join(sorted(hosts)) or 'no computes'})")
    (worker,) = hosts
    server = None
    for t in job.transfers:
        other = t.src if t.dst == worker else t.dst if t.src == worker else None
        if other is None or (server is not None and other != server):
            raise ValidationError(f"job {job.id!r}: transfer {t.id!r} ({t.src} -> {t.dst}) does not join "
                                  f"the worker {worker!r} and one server")
        server = other
    if server is None:
        raise ValidationError(f"job {job.id!r}: no transfers to expand")
    return server, worker


def shaped_bytes(pull_bytes: float, push_bytes: float, shape: str, workers: int) -> float:
    """Bytes a job of ``shape`` moves in all, given one worker's pulls and pushes.

    Parameter-server shapes move every pull and push once per worker; a ring
    all-reduce moves ``2 (N - 1) / N`` of the gradient bytes per worker and no
    pulls (each worker keeps its own copy of the parameters).
    """
    if shape in ("ps", "ps-sharded"):
        return workers * (pull_bytes + push_bytes)
    if shape == "allreduce":
        return 2.0 * (workers - 1) * push_bytes
    raise ValidationError(f"shape: expected one of {', '.join(SHAPES)}, got {shape!r}")


def expand_job(job: Job, shape: str, servers: Sequence[str], workers: Sequence[str], *,
               options: ShapeOptions | None = None, job_id: str | None = None) -> Job:
    """Expand a one-worker parameter-server iteration to a job of ``shape``.

    Every worker runs the whole compute DAG on its own host, its node ids
    prefixed ``w<k>/``; every worker's first nodes are ready at the job's
    arrival, so the workers start together.

    - ``ps``: each worker reads every parameter from ``servers[0]`` and pushes
      every gradient to it.
    - ``ps-sharded``: each transfer of the template is split into at most M
      equal slices of at least ``min_slice_bytes`` (``<id>#<s>``), largest
      first, onto the least-loaded servers (pulls and pushes placed
      separately), so every server holds about 1/M of the bytes.
    - ``allreduce``: pulls are dropped; gradients, in the order they become
      ready, are packed into buckets of ``bucket_bytes``; a bucket of S bytes
      is reduce-scattered and all-gathered over the ring ``workers[0] ->
      workers[1] -> ... -> workers[0]``: 2(N-1) steps ``ar<b>/s<step>/w<k>``
      of S/N bytes from worker k to worker k+1, each after the worker's own
      previous step and the chunk it received; step 0 after the bucket's
      gradients are computed on that worker.

    Parameters
    ----------
    job
        One worker, one server (:func:`ps_roles`).
    shape
        One of :data:`SHAPES`.
    servers, workers
        Host names, distinct: 1 server for ``ps``, M for ``ps-sharded``, none
        for ``allreduce``; N workers (at least 2 for ``allreduce``).
    options
        Bucket and slice sizes (default :class:`ShapeOptions`' defaults).
    job_id
        Id of the expanded job (default the template's).

    Returns
    -------
    Job
        Same arrival, priority, model and class as ``job``.
    """
    opts = options or ShapeOptions()
    server, worker = ps_roles(job)
    n = len(workers)
    want = {"ps": (1, 1), "ps-sharded": (1, None), "allreduce": (0, 0)}
    if shape not in want:
        raise ValidationError(f"shape: expected one of {', '.join(SHAPES)}, got {shape!r}")
    lo, hi = want[shape]
    if len(servers) < lo or (hi is not None and len(servers) > hi):
        raise ValidationError(f"shape {shape}: {len(servers)} servers given")
    if n < (2 if shape == "allreduce" else 1):
        raise ValidationError(f"shape {shape}: {n} workers given")
    hosts = list(servers) + list(workers)
    if len(set(hosts)) != len(hosts):
        raise ValidationError(f"shape {shape}: servers and workers must be distinct hosts, got {hosts}")
    pulls = [t for t in job.transfers if t.src == server]
    pushes = [t for t in job.transfers if t.src == worker]
    if shape == "allreduce":
        if not pushes:
            raise ValidationError(f"job {job.id!r}: no gradient pushes (worker -> server) to all-reduce")
        computes, transfers, edges = _ring(job, pulls, pushes, list(workers), opts.bucket_bytes)
    else:
        place = _shards(pulls, len(servers), opts.min_slice_bytes) | _shards(pushes, len(servers),
                                                                              opts.min_slice_bytes)
        computes, transfers, edges = _ps(job, place, list(servers), list(workers), worker)
    # a dependency reached two ways is one dependency (as the parser keeps it)
    return Job(job_id or job.id, tuple(computes), tuple(transfers), tuple(dict.fromkeys(edges)), job.arrival_s,
               job.priority, job.model, job.job_class)


def _shards(transfers: Sequence[Transfer], m: int, min_slice: float) -> dict[str, list[tuple[int, float]]]:
    """Per transfer id, its slices as ``(server index, bytes)``: largest first onto the least-loaded servers."""
    load = [(0.0, s) for s in range(m)]  # a heap of (bytes held, server)
    out: dict[str, list[tuple[int, float]]] = {}
    for t in sorted(transfers, key=lambda t: (-t.bytes, t.id)):
        k = max(1, min(m, int(t.bytes // min_slice)))
        chosen = [heapq.heappop(load) for _ in range(k)]
        part = t.bytes / k
        out[t.id] = [(s, part) for _, s in sorted(chosen, key=lambda x: x[1])]
        for held, s in chosen:
            heapq.heappush(load, (held + part, s))
    return out


def _ps(job: Job, place: dict[str, list[tuple[int, float]]], servers: list[str], workers: list[str],
        worker: str) -> tuple[list[Compute], list[Transfer], list[tuple[str, str]]]:
    slices = {tid: [f"{tid}#{s}" for s, _ in sl] if len(place[tid]) > 1 or len(servers) > 1 else [tid]
              for tid, sl in place.items()}
    computes, transfers, edges = [], [], []
    for k, host in enumerate(workers):
        pre = f"w{k}/"
        computes += [Compute(pre + c.id, host, c.duration_s, c.std_s) for c in job.computes]
        for t in job.transfers:
            for name, (s, part) in zip(slices[t.id], place[t.id], strict=True):
                src, dst = (servers[s], host) if t.dst == worker else (host, servers[s])
                transfers.append(Transfer(pre + name, src, dst, part))
        for a, b in job.edges:
            for x in slices.get(a, [a]):
                for y in slices.get(b, [b]):
                    edges.append((pre + x, pre + y))
    return computes, transfers, edges


def _ready_order(job: Job, pushes: Sequence[Transfer]) -> list[Transfer]:
    """``pushes`` in the order their inputs are computed, network time left out (ties: template order)."""
    dur = {c.id: c.duration_s for c in job.computes}
    pred: dict[str, list[str]] = {}
    succ: dict[str, list[str]] = {}
    for a, b in job.edges:
        pred.setdefault(b, []).append(a)
        succ.setdefault(a, []).append(b)
    nodes = [c.id for c in job.computes] + [t.id for t in job.transfers]
    waits = {v: len(pred.get(v, ())) for v in nodes}
    ready = [v for v in nodes if waits[v] == 0]
    end: dict[str, float] = {}
    while ready:
        v = ready.pop()
        end[v] = max((end[p] for p in pred.get(v, ())), default=0.0) + dur.get(v, 0.0)
        for w in succ.get(v, ()):
            waits[w] -= 1
            if waits[w] == 0:
                ready.append(w)
    pos = {t.id: i for i, t in enumerate(pushes)}
    return sorted(pushes, key=lambda t: (end[t.id], pos[t.id]))


def _ring(job: Job, pulls: Sequence[Transfer], pushes: Sequence[Transfer], workers: list[str],
          bucket_bytes: float) -> tuple[list[Compute], list[Transfer], list[tuple[str, str]]]:
    n = len(workers)
    dropped = {t.id for t in pulls} | {t.id for t in pushes}
    pred: dict[str, list[str]] = {}
    succ: dict[str, list[str]] = {}
    for a, b in job.edges:
        pred.setdefault(b, []).append(a)
        succ.setdefault(a, []).append(b)
    # The parameters are local: a pull's inputs go straight to its consumers.
    kept = [(a, b) for a, b in job.edges if a not in dropped and b not in dropped]
    for t in pulls:
        kept += [(a, b) for a in pred.get(t.id, ()) if a not in dropped
                 for b in succ.get(t.id, ()) if b not in dropped]
    buckets: list[list[Transfer]] = []
    size = 0.0
    for t in _ready_order(job, pushes):
        if not buckets or size + t.bytes > bucket_bytes:
            buckets.append([])
            size = 0.0
        buckets[-1].append(t)
        size += t.bytes
    computes, transfers, edges = [], [], []
    for k, host in enumerate(workers):
        pre = f"w{k}/"
        computes += [Compute(pre + c.id, host, c.duration_s, c.std_s) for c in job.computes]
        edges += [(pre + a, pre + b) for a, b in kept]
    for b, bucket in enumerate(buckets):
        chunk = sum(t.bytes for t in bucket) / n
        inputs = sorted({a for t in bucket for a in pred.get(t.id, ()) if a not in dropped})
        for s in range(2 * (n - 1)):
            for k in range(n):
                tid = f"ar{b}/s{s}/w{k}"
                transfers.append(Transfer(tid, workers[k], workers[(k + 1) % n], chunk))
                if s == 0:
                    edges += [(f"w{k}/{a}", tid) for a in inputs]
                else:
                    edges += [(f"ar{b}/s{s - 1}/w{k}", tid), (f"ar{b}/s{s - 1}/w{(k - 1) % n}", tid)]
    return computes, transfers, edges


def draw_shape(rng: np.random.Generator, options: ShapeOptions,
               host_names: Sequence[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """A random job's shape (uniform over ``options.shapes()``), then its servers and workers, all distinct.

    Returns
    -------
    shape, servers, workers
    """
    shapes = options.shapes()
    shape = shapes[int(rng.integers(len(shapes)))]
    hosts = tuple(host_names[int(i)] for i in rng.choice(len(host_names), size=options.n_hosts(shape),
                                                         replace=False))
    k = options.n_servers(shape)
    return shape, hosts[:k], hosts[k:]


def shape_of(job_id: str) -> str:
    """A generated job's shape, read off its id ``<model>-<shape>-<k>`` (``ps`` without one)."""
    return next((sh for sh in sorted(SHAPES, key=len, reverse=True) if f"-{sh}-" in job_id), "ps")


def shape_hosts(shape: str, options: ShapeOptions, server: str = "ps",
                worker: str = "worker") -> tuple[list[str], list[str]]:
    """Host names of a job of ``shape`` named as TensorFlow names its tasks' hosts.

    Task 0 takes the base name, task ``i`` the base name and ``i``:
    ``ps, ps1, ...`` and ``worker, worker1, ...``.
    """
    def names(base: str, count: int) -> list[str]:
        return [base if i == 0 else f"{base}{i}" for i in range(count)]

    return names(server, options.n_servers(shape)), names(worker, options.workers)


__all__ = ["DEFAULT_BUCKET_BYTES", "DEFAULT_MIN_SLICE_BYTES", "MIXED", "SHAPES", "ShapeOptions",
           "draw_shape", "expand_job", "ps_roles", "shape_hosts", "shape_of", "shaped_bytes"]
