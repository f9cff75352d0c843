"""Bandwidth-LP build and solve time for 10..80 and 1000 concurrent VGG16 jobs on 100 hosts."""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from jitsched.model import Cluster, compile_jobs
from jitsched.planner import PlanOptions, plan_jobs
from jitsched.synth import random_vgg16_jobs

PAPER = "paper (Gurobi): under 1 s up to 70 jobs"


def run(n_jobs: int, repeat: int, objective: str, slot_s: float, alpha: float, seed: int) -> dict:
    cluster = Cluster.uniform(100, 1e9)
    jobs = random_vgg16_jobs(n_jobs, cluster.names, seed=seed)
    dag = compile_jobs(jobs, cluster)
    builds, solves, lats = [], [], []
    for _ in range(repeat):
        plan = plan_jobs(dag, cluster, PlanOptions(slot_s=slot_s, alpha=alpha, objective=objective,
                                                   time_limit_s=600.0))
        builds.append(plan.lp.build_s)
        solves.append(plan.lp.solve_s)
        lats.append(plan.lat_s)
    return {
        "jobs": n_jobs,
        "transfers": int(len(plan.scheduled)),
        "variables": int(plan.lp.n_variables),
        "constraints": int(plan.lp.n_constraints),
        "components": int(plan.lp.n_components),
        "lat_s": statistics.median(lats),
        "build_s": statistics.median(builds),
        "solve_s": statistics.median(solves),
        "status": plan.lp.status,
        "late": int(plan.lp.late.size),
        "peak_utilization": plan.lp.peak_utilization,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, nargs="*", default=[10, 20, 30, 40, 50, 60, 70, 80, 1000])
    ap.add_argument("--repeat", type=int, default=5, help="runs per size (median); 1 for >= 500 jobs")
    ap.add_argument("--objective", default="balanced", choices=["balanced", "minmax"])
    ap.add_argument("--slot-s", type=float, default=0.1)
    ap.add_argument("--alpha", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs = []
    for n in args.jobs:
        r = run(n, 1 if n >= 500 else args.repeat, args.objective, args.slot_s, args.alpha, args.seed)
        runs.append(r)
        if not args.json:
            print(f"{n:5d} jobs  {r['transfers']:6d} transfers  {r['variables']:8d} vars  "
                  f"{r['components']:3d} comps  build {r['build_s']:.4f} s  solve {r['solve_s']:.4f} s  "
                  f"total {r['build_s'] + r['solve_s']:.4f} s  {r['status']}  late {r['late']}",
                  flush=True)
        else:
            print(f"{n} jobs done", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"runs": runs, "objective": args.objective, "slot_s": args.slot_s,
                          "alpha": args.alpha}))
    else:
        print(f"goal: build+solve <= 0.1 s at 70 jobs; {PAPER}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
