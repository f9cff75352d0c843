"""Workload commands: ``import-tf``, ``gen-workload`` and ``import-coflow``."""

from __future__ import annotations

import argparse
from collections import Counter

from jitsched.cli.registry import arg, emit_json, non_negative, positive, register, seed
from jitsched.dag.model import MIN_HOST_BPS, Cluster, Host, Workload, save_workload
from jitsched.errors import ValidationError
from jitsched.plan.coflow import coflow_workload, read_coflow_trace
from jitsched.workloads.paper import MODELS, arrival_rate, generate_workload
from jitsched.workloads.shapes import MIXED, SHAPES, ShapeOptions, expand_job, shape_hosts, shape_of
from jitsched.workloads.tfgraph import import_tf_graph, job_summary


def capacity(text: str) -> float:
    """A host's capacity in bits/s from the command line: a finite number of at least
    :data:`MIN_HOST_BPS`, as a workload file's hosts must have (argparse ``type``)."""
    value = positive(text)
    if value < MIN_HOST_BPS:
        raise argparse.ArgumentTypeError(f"a host's capacity is at least {MIN_HOST_BPS:g} bit/s, got {text}")
    return value


def shape_args(shapes: tuple[str, ...]) -> tuple:
    """The ``--shape``, ``--workers`` and ``--servers`` arguments of a command making jobs of ``shapes``."""
    return (
        arg("--shape", choices=shapes, default="ps",
            help="job shape: ps (one parameter server, N workers), ps-sharded (M servers), allreduce "
                 "(a ring of N workers)" + (", mixed (each job one of them)" if MIXED in shapes else "")
                 + " (default ps)"),
        arg("--workers", type=int, default=1,
            help="workers per job (default 1; at least 2 for allreduce"
                 + (" and mixed" if MIXED in shapes else "") + ")"),
        arg("--servers", type=int, default=None,
            help="parameter servers of a sharded job (default 2 for ps-sharded and mixed, else 1)"),
    )


def shape_options(args: argparse.Namespace) -> ShapeOptions:
    """The :class:`ShapeOptions` of ``--shape``, ``--workers`` and ``--servers``.

    Raises
    ------
    ValidationError
        Naming the flag at fault: fewer than 1 worker or server, a ring
        (``allreduce``, ``mixed``) of fewer than 2 workers, the default
        ``--workers 1`` included.
    """
    for flag, value in (("--workers", args.workers), ("--servers", args.servers)):
        if value is not None and value < 1:
            raise ValidationError(f"{flag}: expected an integer >= 1, got {value}")
    if args.shape in ("allreduce", MIXED) and args.workers < 2:
        raise ValidationError(f"--workers: shape {args.shape}: a ring needs at least 2 workers, "
                              f"got {args.workers}; give --workers N with N >= 2")
    sharded = args.shape in ("ps-sharded", MIXED)
    if args.servers is not None and args.servers > 1 and not sharded:
        raise ValidationError(f"--servers: only ps-sharded jobs have more than one server "
                              f"(shape {args.shape})")
    if args.servers is not None and args.servers < 2 and sharded:
        raise ValidationError(f"--servers: shape {args.shape}: a sharded job needs at least 2 "
                              f"servers, got {args.servers}")
    servers = args.servers if args.servers is not None else (2 if sharded else 1)
    return ShapeOptions(args.shape, args.workers, servers)


@register(
    "import-tf",
    arg("graph", metavar="GRAPH", help="GraphDef as protobuf JSON or text (.pbtxt), optionally gzipped"),
    arg("--step-stats", metavar="FILE", help="RunMetadata/StepStats JSON or text with measured op times"),
    arg("--ps-host", default="ps", help="host of /job:ps/task:0 (default ps)"),
    arg("--worker-host", default="worker", help="host of /job:worker/task:0 (default worker)"),
    arg("--job-id", default=None, help="job id (default: the graph file's name)"),
    arg("--time-scale", type=positive, default=1.0,
        help="factor on measured op times, e.g. CPU to GPU-like speed (default 1)"),
    arg("--min-op-s", type=non_negative, default=0.0, help="lower bound on every compute time, seconds"),
    arg("--bps", type=capacity, default=1e9, help="host capacity each way, bits/s (default 1e9)"),
    *shape_args(SHAPES),
    arg("-o", "--output", metavar="JOB.json", required=True, help="output file (.json or .json.gz)"),
    arg("--json", action="store_true",
        help='print {"transfers", "transfer_bytes", "computes", "edges"}'),
)
def cmd_import_tf(args: argparse.Namespace) -> int:
    job_id = args.job_id or args.graph.rsplit("/", 1)[-1].split(".")[0] or "tf"
    shapes = shape_options(args)
    job = import_tf_graph(args.graph, args.step_stats,
                          hosts={"ps": args.ps_host, "worker": args.worker_host},
                          job_id=job_id, time_scale=args.time_scale, min_op_s=args.min_op_s)
    if not shapes.trivial:  # the one-worker step, expanded; hosts named ps, ps1, ... worker, worker1, ...
        servers, workers = shape_hosts(shapes.shape, shapes, args.ps_host, args.worker_host)
        job = expand_job(job, shapes.shape, servers, workers, options=shapes)
    names = sorted({c.host for c in job.computes} | {t.src for t in job.transfers}
                   | {t.dst for t in job.transfers})
    cluster = Cluster(tuple(Host(n, args.bps, args.bps) for n in names))
    save_workload(Workload(cluster, (job,)), args.output)
    summary = job_summary(job)
    if args.json:
        emit_json(summary)
    else:
        print(f"{args.output}: job {job.id!r}: {summary['transfers']} transfers "
              f"({summary['transfer_bytes'] / 2**20:.1f} MiB), {summary['computes']} computes, "
              f"{summary['edges']} edges")
    return 0


@register(
    "gen-workload",
    arg("--load", type=float, required=True,
        help="offered load: mean offered bytes/s over the total egress capacity (e.g. 0.5)"),
    arg("--n-jobs", type=int, default=None, help="number of jobs (or give --duration-s)"),
    arg("--duration-s", type=float, default=None, help="arrival window, seconds"),
    arg("--hosts", type=int, default=100, help="number of hosts (default 100)"),
    arg("--bps", type=capacity, default=1e9, help="host capacity each way, bits/s (default 1e9)"),
    arg("--background-share", type=float, default=0.5,
        help="fraction of jobs that are file transfers (default 0.5)"),
    arg("--models", default=",".join(MODELS),
        help=f"comma-separated models in equal shares (default {','.join(MODELS)})"),
    arg("--seed", type=seed, default=0, help="random seed (default 0)"),
    *shape_args(SHAPES + (MIXED,)),
    arg("-o", "--output", metavar="FILE.json", required=True, help="output file (.json or .json.gz)"),
    arg("--json", action="store_true", help="print a summary as JSON"),
)
def cmd_gen_workload(args: argparse.Namespace) -> int:
    models = tuple(m for m in args.models.split(",") if m)
    shapes = shape_options(args)
    w = generate_workload(args.load, n_jobs=args.n_jobs, duration_s=args.duration_s,
                          n_hosts=args.hosts, bps=args.bps,
                          background_share=args.background_share, models=models, seed=args.seed,
                          shapes=shapes)
    save_workload(w, args.output)
    rate = arrival_rate(args.load, n_hosts=args.hosts, bps=args.bps,
                        background_share=args.background_share, models=models, shapes=shapes)
    summary = {"jobs": len(w.jobs), "background": len(w.background),
               "arrival_rate_per_s": rate,
               "models": dict(Counter(j.model for j in w.jobs)),
               "shapes": dict(Counter(shape_of(j.id) for j in w.jobs)),
               "last_arrival_s": max([j.arrival_s for j in w.jobs]
                                     + [b.arrival_s for b in w.background], default=0.0)}
    if args.json:
        emit_json(summary)
        return 0
    detail = ""
    if summary["jobs"]:
        detail = f" ({_counts(summary['models'], models)}"
        if shapes.shape != "ps":
            detail += f"; shapes {_counts(summary['shapes'], SHAPES)}"
        detail += ")"
    print(f"{args.output}: {summary['jobs']} DL jobs{detail}, "
          f"{summary['background']} file transfers; {rate:.3f} jobs/s, "
          f"last arrival {summary['last_arrival_s']:.1f} s")
    return 0


def _counts(counts: dict[str, int], order: tuple[str, ...]) -> str:
    """``counts`` as "name n, name n", in ``order`` (names outside it last, sorted)."""
    rank = {name: i for i, name in enumerate(order)}
    names = sorted(counts, key=lambda n: (rank.get(n, len(order)), n))
    return ", ".join(f"{n} {counts[n]}" for n in names)


@register(
    "import-coflow",
    arg("trace", metavar="TRACE", help="trace file: '<ports> <coflows>' then one coflow per line"),
    arg("--bps", type=capacity, default=1e9, help="port capacity each way, bits/s (default 1e9)"),
    arg("-o", "--output", metavar="FILE.json", required=True, help="output file (.json or .json.gz)"),
    arg("--json", action="store_true", help="print a summary as JSON"),
)
def cmd_import_coflow(args: argparse.Namespace) -> int:
    trace = read_coflow_trace(args.trace)
    w = coflow_workload(trace, bps=args.bps)
    save_workload(w, args.output)
    # a coflow with no flow across the network (all port-local or empty) is no job
    no_job = [c.id for c in trace.coflows if not c.flows]
    summary = {"ports": trace.n_ports, "coflows": len(trace.coflows), "jobs": len(w.jobs),
               "flows": sum(len(j.transfers) for j in w.jobs),
               "bytes": sum(t.bytes for j in w.jobs for t in j.transfers),
               "local_flows_dropped": trace.local_flows,
               "coflows_dropped": no_job}
    if args.json:
        emit_json(summary)
        return 0
    dropped = f"{trace.local_flows} port-local flows dropped"
    if no_job:
        dropped += (f"; coflow{'s' if len(no_job) > 1 else ''} {', '.join(no_job)} left out: "
                    "no flow crosses the network")
    print(f"{args.output}: {summary['jobs']} of {summary['coflows']} coflows as jobs on "
          f"{trace.n_ports} ports, {summary['flows']} flows, {summary['bytes'] / 2**20:.1f} MiB "
          f"({dropped})")
    return 0
