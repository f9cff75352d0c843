"""The paper's five model DAGs (imported from real TensorFlow graphs) and its §4.1 job-stream generator."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload, load_workload
from jitsched.errors import ValidationError
from jitsched.workloads.shapes import ShapeOptions, draw_shape, expand_job, shaped_bytes
from jitsched.workloads.tfgraph import COST_FLOPS, COST_LAUNCH_S, import_tf_graph

MODELS = ("lenet", "alexnet", "vgg16", "inception_v3", "resnet152")
# Other names the models go by.
MODEL_ALIASES = {"inception": "inception_v3", "inceptionv3": "inception_v3", "resnet-152": "resnet152",
                 "vgg-16": "vgg16", "lenet5": "lenet"}
# File-transfer background job sizes of the paper's §4.1, in bits.
FILE_SIZES_BITS = (5e9, 10e9, 20e9, 30e9, 40e9)
# Host names of the model templates; load_model_job renames them.
TEMPLATE_PS = "ps"
TEMPLATE_WORKER = "worker"


def time_scale_for(cpu_matmul_flops: float) -> float:
    """Factor that turns CPU-measured op times into GPU-like ones.

    The exporter measures the CPU's fp32 matrix-multiply throughput next to the
    traced step; scaling every measured op time by ``cpu_matmul_flops /
    COST_FLOPS`` makes compute-bound ops run as fast as on the cost model's
    GPU (sustained 8 TFLOP/s, P100-class, the paper's era), which keeps the
    compute-to-network ratio of a GPU cluster. Unscaled, a CPU step of VGG16
    takes tens of seconds and the network would hardly matter.

    Parameters
    ----------
    cpu_matmul_flops
        Measured CPU fp32 matmul throughput, FLOP/s.

    Returns
    -------
    float
        Dimensionless factor for :func:`jitsched.workloads.tfgraph.import_tf_graph`'s ``time_scale``.
    """
    if not cpu_matmul_flops > 0:
        raise ValidationError(f"cpu_matmul_flops must be positive, got {cpu_matmul_flops!r}")
    return cpu_matmul_flops / COST_FLOPS


def import_exported_model(name: str, directory: str | Path) -> Job:
    """Import a model exported by ``bench/tools/export_tf_graph.py`` with the standard scaling.

    Reads ``<name>.graph.json.gz``, ``<name>.stepstats.json.gz`` and
    ``<name>.meta.json`` from ``directory``; measured CPU op times are scaled
    by :func:`time_scale_for` and floored at the launch cost
    :data:`jitsched.workloads.tfgraph.COST_LAUNCH_S` (5 µs). Hosts are ``ps`` and ``worker``.

    Returns
    -------
    Job
        Job id and model both ``name``, arrival 0 s.
    """
    d = Path(directory)
    try:
        meta = json.loads((d / f"{name}.meta.json").read_text())
    except FileNotFoundError:
        raise ValidationError(f"{d / (name + '.meta.json')}: no such file") from None
    scale = time_scale_for(float(meta["cpu_matmul_gflops"]) * 1e9)
    return import_tf_graph(d / f"{name}.graph.json.gz", d / f"{name}.stepstats.json.gz",
                           hosts={"ps": TEMPLATE_PS, "worker": TEMPLATE_WORKER}, job_id=name,
                           model=name, time_scale=scale, min_op_s=COST_LAUNCH_S)


def model_template_path(name: str) -> Path:
    """Path of the packaged native-format template of model ``name`` (``jitsched/data/models``)."""
    name = MODEL_ALIASES.get(name, name)
    if name not in MODELS:
        raise ValidationError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    return Path(str(resources.files("jitsched") / "data" / "models" / f"{name}.json.gz"))


@functools.cache
def model_template(name: str) -> Job:
    """The packaged DAG of one training iteration of ``name``, hosts ``ps`` and ``worker`` (cached).

    ``name`` is one of :data:`MODELS` or an alias of :data:`MODEL_ALIASES`.
    """
    w = load_workload(model_template_path(name))
    if len(w.jobs) != 1:
        raise ValidationError(f"{model_template_path(name)}: expected one job, found {len(w.jobs)}")
    return w.jobs[0]


def load_model_job(name: str, ps_host: str, worker_host: str, job_id: str | None = None,
                   arrival_s: float = 0.0) -> Job:
    """One training iteration of a real model DAG, parameter server and worker placed on hosts.

    Parameters
    ----------
    name
        One of :data:`MODELS` (or an alias of :data:`MODEL_ALIASES`, e.g. ``inception``).
    ps_host, worker_host
        Cluster host names (distinct) of the parameter server and the worker.
    job_id
        Id of the job (default ``name``).
    arrival_s
        Arrival time, seconds.

    Returns
    -------
    Job
        Computes on ``worker_host``; transfers between the two hosts (parameter
        reads, gradient pushes, batch-norm statistics); ``model`` set to ``name``.
        The parsed template is cached, so this costs one pass over the nodes.
    """
    if ps_host == worker_host:
        raise ValidationError(f"parameter server and worker must be distinct hosts, both {ps_host!r}")
    name = MODEL_ALIASES.get(name, name)
    t = model_template(name)
    rename = {TEMPLATE_PS: ps_host, TEMPLATE_WORKER: worker_host}
    computes = tuple(Compute(c.id, rename[c.host], c.duration_s, c.std_s) for c in t.computes)
    transfers = tuple(Transfer(x.id, rename[x.src], rename[x.dst], x.bytes) for x in t.transfers)
    return Job(job_id or name, computes, transfers, t.edges, float(arrival_s), t.priority, name)


def model_bytes(name: str) -> float:
    """Total bytes all transfers of one iteration of ``name`` move (both directions)."""
    return float(sum(t.bytes for t in model_template(name).transfers))


def model_shaped_bytes(name: str, shape: str, workers: int) -> float:
    """Total bytes one iteration of ``name`` moves as a job of ``shape`` with ``workers`` workers."""
    t = model_template(MODEL_ALIASES.get(name, name))
    pull = float(sum(x.bytes for x in t.transfers if x.src == TEMPLATE_PS))
    push = float(sum(x.bytes for x in t.transfers if x.src == TEMPLATE_WORKER))
    return shaped_bytes(pull, push, shape, workers)


def load_shaped_job(name: str, shape: str, servers: Sequence[str], workers: Sequence[str],
                    job_id: str | None = None, arrival_s: float = 0.0,
                    options: ShapeOptions | None = None) -> Job:
    """One training iteration of a real model as a job of ``shape`` (:func:`jitsched.workloads.shapes.expand_job`).

    Parameters
    ----------
    name
        One of :data:`MODELS` (or an alias).
    shape
        One of :data:`jitsched.workloads.shapes.SHAPES`.
    servers, workers
        Distinct cluster hosts: the parameter servers (none for ``allreduce``) and the workers.
    job_id, arrival_s
        Id (default ``name``) and arrival time, seconds.
    options
        Bucket and slice sizes.
    """
    name = MODEL_ALIASES.get(name, name)
    t = model_template(name)
    job = Job(job_id or name, t.computes, t.transfers, t.edges, float(arrival_s), t.priority, name)
    return expand_job(job, shape, servers, workers, options=options)


# --------------------------------------------------------------------------- generator


@dataclass(frozen=True)
class Arrival:
    """One job of a generated stream: ``kind`` is a model name or ``"file"``.

    A job of many workers also has its ``shape`` and its ``servers`` and
    ``workers`` hosts; ``src`` and ``dst`` are then its first two hosts.
    """

    index: int
    arrival_s: float
    kind: str
    src: str
    dst: str
    bytes: float
    shape: str = "ps"
    servers: tuple[str, ...] = ()
    workers: tuple[str, ...] = ()


def arrival_rate(load: float, *, n_hosts: int = 100, bps: float = 1e9,
                 background_share: float = 0.5, models: Sequence[str] = MODELS,
                 file_sizes_bits: Sequence[float] = FILE_SIZES_BITS,
                 shapes: ShapeOptions | None = None) -> float:
    """Poisson arrival rate, jobs/s, that offers ``load``.

    Offered load = (arrival rate × mean bytes per job) / total egress capacity
    (``n_hosts × bps / 8`` bytes/s). A job is a file transfer with probability
    ``background_share`` (uniform over ``file_sizes_bits``) and else one
    training iteration of a model drawn uniformly from ``models`` (its bytes:
    all transfers, both directions), of a shape drawn uniformly from
    ``shapes.shapes()`` with ``shapes.workers`` workers
    (:func:`jitsched.workloads.shapes.shaped_bytes`; default one parameter server and
    one worker).

    Returns
    -------
    float
        Jobs per second.
    """
    if not load > 0:
        raise ValidationError(f"load must be positive, got {load!r}")
    if not math.isfinite(load):
        raise ValidationError(f"load must be finite, got {load!r}")
    if not 0 <= background_share <= 1:
        raise ValidationError(f"background_share must be in [0, 1], got {background_share!r}")
    if background_share < 1 and not models:
        raise ValidationError("no models to draw DL jobs from")
    if background_share == 1:
        mean_dl = 0.0
    elif shapes is None or shapes.trivial:
        mean_dl = float(np.mean([model_bytes(m) for m in models]))
    else:
        mean_dl = float(np.mean([model_shaped_bytes(m, sh, shapes.workers)
                                 for m in models for sh in shapes.shapes()]))
    mean_file = float(np.mean(file_sizes_bits)) / 8.0 if background_share > 0 else 0.0
    mean_bytes = (1 - background_share) * mean_dl + background_share * mean_file
    rate = load * n_hosts * bps / 8.0 / mean_bytes
    if not math.isfinite(rate):  # every job would arrive at 0
        raise ValidationError(f"load {load!r} on {n_hosts} hosts of {bps:g} bit/s is more jobs a second "
                              "than a float holds")
    return rate


# The most jobs a generated stream holds (a million DL jobs of the paper's models are tens of
# gigabytes of DAGs); the paper's workload has 1000.
MAX_JOBS = 1_000_000

def generate_arrivals(load: float, *, n_jobs: int | None = None, duration_s: float | None = None,
                      n_hosts: int = 100, bps: float = 1e9, background_share: float = 0.5,
                      models: Sequence[str] = MODELS,
                      file_sizes_bits: Sequence[float] = FILE_SIZES_BITS,
                      seed: int = 0, shapes: ShapeOptions | None = None) -> list[Arrival]:
    """The job stream of the paper's §4.1, without building the DAGs.

    Poisson arrivals at :func:`arrival_rate` (the first after one exponential
    gap from 0 s); each job a file transfer with probability
    ``background_share`` (size uniform over ``file_sizes_bits``, bits) or a
    model drawn uniformly from ``models``; its two hosts (file: source and
    destination; model: parameter server and worker) are distinct and
    uniformly random among ``h0..h{n_hosts-1}``. With ``shapes`` (not one
    server and one worker), a model job also draws its shape uniformly from
    ``shapes.shapes()`` and then its servers and workers, all distinct.
    Exactly one of ``n_jobs`` and ``duration_s`` (seconds; arrivals before
    it) bounds the stream. The same arguments and ``seed`` always give the
    same stream; without ``shapes`` it is the stream of one-worker jobs.

    Returns
    -------
    list of Arrival
        In arrival order; ``bytes`` is the file size or the model's transfer total.
    """
    if (n_jobs is None) == (duration_s is None):
        raise ValidationError("give exactly one of n_jobs and duration_s")
    if n_jobs is not None and n_jobs < 0:
        raise ValidationError(f"n_jobs must be >= 0, got {n_jobs!r}")
    if duration_s is not None and not (duration_s >= 0 and math.isfinite(duration_s)):
        # an infinite window never closes: the stream would grow until memory runs out
        raise ValidationError(f"duration_s must be a finite number >= 0, got {duration_s!r}")
    if n_hosts < 2:
        raise ValidationError(f"need at least 2 hosts, got {n_hosts!r}")
    for m in models:
        model_template_path(m)
    shaped = shapes is not None and not shapes.trivial
    if shaped and background_share < 1:
        need = max(shapes.n_hosts(sh) for sh in shapes.shapes())
        if n_hosts < need:
            per_job = ", ".join(f"{sh} {shapes.n_hosts(sh)}" for sh in shapes.shapes())
            workers = f"{shapes.workers} worker" + ("s" if shapes.workers != 1 else "")
            raise ValidationError(f"need at least {need} hosts for {shapes.shape} jobs of {workers} "
                                  f"(hosts per job: {per_job}), got {n_hosts}")
    rate = arrival_rate(load, n_hosts=n_hosts, bps=bps, background_share=background_share,
                        models=models, file_sizes_bits=file_sizes_bits, shapes=shapes)
    expected = n_jobs if n_jobs is not None else rate * duration_s
    if expected > MAX_JOBS:
        # each job is a DAG of thousands of nodes: a stream this long would fill the memory
        # before it is written (a typo in the window or the count, most likely)
        raise ValidationError(f"{'n_jobs' if n_jobs is not None else 'duration_s'}: the stream would hold "
                              f"{expected:.3g} jobs, more than {MAX_JOBS:,}")
    rng = np.random.default_rng(seed)
    out: list[Arrival] = []
    t = 0.0
    while n_jobs is None or len(out) < n_jobs:
        t += float(rng.exponential(1.0 / rate))
        if duration_s is not None and t >= duration_s:
            break
        if shaped:
            out.append(_shaped_arrival(rng, len(out), t, n_hosts, background_share, models,
                                       file_sizes_bits, shapes))
            continue
        a, b = (int(x) for x in rng.choice(n_hosts, size=2, replace=False))
        if rng.random() < background_share:
            kind, size = "file", float(file_sizes_bits[int(rng.integers(len(file_sizes_bits)))]) / 8.0
        else:
            kind = models[int(rng.integers(len(models)))]
            size = model_bytes(kind)
        out.append(Arrival(len(out), t, kind, f"h{a}", f"h{b}", size))
    return out


def _shaped_arrival(rng: np.random.Generator, index: int, t: float, n_hosts: int,
                    background_share: float, models: Sequence[str], file_sizes_bits: Sequence[float],
                    shapes: ShapeOptions) -> Arrival:
    """One arrival of a stream of many-worker jobs: file or model, then shape, then hosts."""
    if rng.random() < background_share:
        a, b = (f"h{int(x)}" for x in rng.choice(n_hosts, size=2, replace=False))
        return Arrival(index, t, "file", a, b, float(file_sizes_bits[int(rng.integers(len(file_sizes_bits)))]) / 8.0)
    kind = models[int(rng.integers(len(models)))]
    shape, servers, workers = draw_shape(rng, shapes, [f"h{i}" for i in range(n_hosts)])
    hosts = servers + workers
    return Arrival(index, t, kind, hosts[0], hosts[1], model_shaped_bytes(kind, shape, shapes.workers),
                   shape, servers, workers)


def generate_workload(load: float, *, n_jobs: int | None = None, duration_s: float | None = None,
                      n_hosts: int = 100, bps: float = 1e9, background_share: float = 0.5,
                      models: Sequence[str] = MODELS,
                      file_sizes_bits: Sequence[float] = FILE_SIZES_BITS,
                      seed: int = 0, shapes: ShapeOptions | None = None) -> Workload:
    """The paper's §4.1 workload: 100 hosts at 1 Gbit/s, DL jobs and file transfers.

    Parameters
    ----------
    load
        Offered load: mean offered bytes per second over the total egress
        capacity of all hosts (see :func:`arrival_rate`); 0.5 offers half of it.
    n_jobs, duration_s
        Exactly one: the number of jobs, or the arrival window in seconds.
    n_hosts, bps
        Cluster size and per-host capacity each way, bits/s.
    background_share
        Probability that a job is a file transfer (share by count).
    models
        DL models drawn in equal shares (default the paper's five).
    file_sizes_bits
        File-transfer sizes, bits (default 5, 10, 20, 30, 40 Gbit).
    seed
        Seed of the random stream; same seed, same workload.
    shapes
        Jobs of many workers (:class:`jitsched.workloads.shapes.ShapeOptions`; default
        one parameter server and one worker).

    Returns
    -------
    Workload
        Jobs ``<model>-<k>`` (parameter server = ``src``, worker = ``dst`` of
        the arrival) and background flows ``file-<k>``, ``k`` the arrival
        index; with ``shapes``, jobs ``<model>-<shape>-<k>``.
    """
    arrivals = generate_arrivals(load, n_jobs=n_jobs, duration_s=duration_s, n_hosts=n_hosts,
                                 bps=bps, background_share=background_share, models=models,
                                 file_sizes_bits=file_sizes_bits, seed=seed, shapes=shapes)
    jobs, bgs = [], []
    for a in arrivals:
        if a.kind == "file":
            bgs.append(Background(f"file-{a.index}", a.src, a.dst, a.bytes, a.arrival_s))
        elif a.workers:
            jobs.append(load_shaped_job(a.kind, a.shape, a.servers, a.workers,
                                        f"{a.kind}-{a.shape}-{a.index}", a.arrival_s, shapes))
        else:
            jobs.append(load_model_job(a.kind, a.src, a.dst, f"{a.kind}-{a.index}", a.arrival_s))
    return Workload(Cluster.uniform(n_hosts, bps), tuple(jobs), tuple(bgs))
