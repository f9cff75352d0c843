"""TicTac's per-job order (TAC): seconds to order one job of each model and shape, the size of the largest jobs the mixed-shape point places.

Why this bench: TicTac orders a job's transfers once, at its arrival, in the
simulator and in the daemon alike, so the time it takes is a pause of the
whole simulation or of the daemon's loop. Jobs of many workers multiply a
model's transfers (a ResNet-152 parameter server with four workers and two
shards has 9112), and TAC takes one transfer per step.

Usage: ``python bench/bench_tictac.py [--models resnet152,inception_v3] [--workers 4] [--repeat 3] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jitsched.bench.common import median_time
from jitsched.dag.model import TRANSFER, Cluster, compile_jobs
from jitsched.workloads.paper import MODELS, load_shaped_job
from jitsched.workloads.shapes import SHAPES

BPS = 1e10  # the mixed-shape point's link rate


def shaped(model: str, shape: str, workers: int, servers: int):
    """One ``model`` job of ``shape`` on its own hosts: its compiled DAG and transfers' times (s)."""
    from jitsched.policies.tictac import transfer_times

    n_servers = {"ps": 1, "ps-sharded": servers}.get(shape, 0)
    names = [f"h{i}" for i in range(n_servers + workers)]
    job = load_shaped_job(model, shape, names[:n_servers], names[n_servers:])
    cl = Cluster.uniform(len(names), BPS)
    dag = compile_jobs([job], cl)
    t = np.flatnonzero(dag.kind == TRANSFER)
    return dag, transfer_times(dag, cl, t), len(t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated models (default all five)")
    ap.add_argument("--workers", type=int, default=4, help="workers per job (default 4, the mixed point's)")
    ap.add_argument("--servers", type=int, default=2, help="servers of a sharded job (default 2)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per job (median; default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = ap.parse_args(argv)
    if args.workers < 2 or args.servers < 2 or args.repeat < 1:
        ap.error("--workers and --servers: at least 2; --repeat: at least 1")
    from jitsched.policies.tictac import tictac_order

    rows = []
    for model in args.models.split(","):
        for shape in SHAPES:
            dag, comm, n = shaped(model, shape, args.workers, args.servers)
            s = median_time(lambda dag=dag, comm=comm: tictac_order(dag, 0, comm, "tac"), args.repeat, warmup=0)
            rows.append({"model": model, "shape": shape, "transfers": n, "order_s": s})
            print(f"{model:>13} {shape:>10}: {n:6d} transfers, ordered in {s:8.3f} s", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"workers": args.workers, "servers": args.servers, "repeat": args.repeat, "jobs": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
