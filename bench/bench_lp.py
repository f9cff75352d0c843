"""Bandwidth-LP planning time and plan quality for 10..80, 1000 and 5000 concurrent VGG16 jobs, the default options beside variants."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

from jitsched.dag.model import Cluster, compile_jobs
from jitsched.workloads.synth import random_vgg16_jobs

PAPER = "paper (Gurobi): under 1 s up to 70 jobs"
GOALS = {70: 0.05, 1000: 1.0}  # the goal: LP seconds at 70 and 1000 jobs (100 hosts)
# Option sets, each a column of the output: "new" is the default pipeline, the
# rest switch one of its parts off (or a solver on) to show its effect.
VARIANTS = {
    "new": {},
    "lp": {"lowest_peak": False},
    "lp-each": {"lowest_peak": False, "aggregate": False},
    "lp-coarse16": {"lowest_peak": False, "fine_slots": 16},
    "lp-coarse32": {"lowest_peak": False, "fine_slots": 32},
    "lp-simplex": {"lowest_peak": False, "solver": "simplex"},
    "lp-ipm": {"lowest_peak": False, "solver": "ipm"},
}


def lp_inputs(plan, size: np.ndarray) -> tuple[tuple, dict]:
    """The arguments :func:`plan_jobs` gave the LP (no residuals, no ``min_lat_s``)."""
    from jitsched.plan.planner import lp_deadlines

    dag, chosen, origin = plan.dag, plan.scheduled, plan.origin_s
    args = (dag.src[chosen], dag.dst[chosen], size[chosen],
            np.maximum(plan.lat.release[chosen] - origin, 0.0),
            lp_deadlines(plan.lat.lat[chosen], None) - origin,
            plan.cluster.egress_Bps, plan.cluster.ingress_Bps)
    return args, {"weight": 1.0 + np.maximum(dag.priority[dag.job_of[chosen]], 0.0),
                  "group": dag.job_of[chosen]}


def quality(sol) -> dict:
    """What the policy cares about in a plan: its objective, peak port utilisation, LAT misses."""
    return {"objective_value": float(sol.objective_value), "peak_utilization": float(sol.peak_utilization),
            "late": int(sol.late.size), "lateness_s": float(sol.lateness_s.sum()), "status": sol.status}


def run(n_jobs: int, n_hosts: int, repeat: int, variants: list[str], objective: str, slot_s: float,
        alpha: float, seed: int, time_limit_s: float = 600.0) -> dict:
    """Medians over ``repeat`` rounds; each round runs every variant once on the same inputs (interleaved)."""
    from jitsched.plan import lp as lp_module
    from jitsched.plan.lp import LPOptions
    from jitsched.plan.planner import PlanOptions, plan_jobs

    cluster = Cluster.uniform(n_hosts, 1e9)
    dag = compile_jobs(random_vgg16_jobs(n_jobs, cluster.names, seed=seed), cluster)
    base = PlanOptions(slot_s=slot_s, alpha=alpha, objective=objective, time_limit_s=time_limit_s)
    walls = {v: [] for v in variants}
    plan_walls, lats, sols = [], [], {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = plan_jobs(dag, cluster, base)
        plan_walls.append(time.perf_counter() - t0)
        lats.append(plan.lat_s)
        args, kw = lp_inputs(plan, dag.size)
        opts = LPOptions(slot_s=slot_s, objective=objective, time_limit_s=time_limit_s)
        for v in variants:
            t0 = time.perf_counter()
            sols[v] = lp_module.solve_bandwidth_lp(*args, replace(opts, **VARIANTS[v]), **kw)
            walls[v].append(time.perf_counter() - t0)
            if walls[v][-1] > 1.0:
                print(f"  {n_jobs} jobs, {v}: {walls[v][-1]:.1f} s", file=sys.stderr, flush=True)
    out = {"jobs": n_jobs, "hosts": n_hosts, "transfers": int(len(plan.scheduled)), "repeat": repeat,
           "lat_s": statistics.median(lats), "plan_s": statistics.median(plan_walls), "variants": {}}
    for v in variants:
        s = sols[v]
        out["variants"][v] = {
            "lp_s": statistics.median(walls[v]), "runs_s": walls[v],
            "build_s": float(s.build_s), "solve_s": float(s.solve_s),
            "variables": int(s.n_variables), "constraints": int(s.n_constraints),
            "components": int(s.n_components), "flows": int(getattr(s, "n_flows", len(s.start_slot))),
            "proven": int(getattr(s, "n_proven", 0)), **quality(s)}
    return out


def parse_size(spec: str, hosts: int) -> tuple[int, int]:
    """``"JOBS"`` or ``"JOBS:HOSTS"``."""
    jobs, _, h = spec.partition(":")
    return int(jobs), int(h) if h else hosts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", nargs="*", default=["10", "20", "30", "40", "50", "60", "70", "80", "1000",
                                                  "5000:1000"],
                    help="sizes, JOBS or JOBS:HOSTS (default hosts: --hosts)")
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5, help="rounds per size (medians); 3 from 500 jobs on")
    ap.add_argument("--variants", nargs="*", default=["new", "lp"], choices=list(VARIANTS),
                    help="new: default options; lp*: lowest_peak off (the LP always solved), with one "
                         "more change")
    ap.add_argument("--each-max-jobs", type=int, default=1000,
                    help="run the lp-each variant (one LP per job) only up to this many jobs")
    ap.add_argument("--objective", default="balanced", choices=["balanced", "minmax"])
    ap.add_argument("--slot-s", type=float, default=None,
                    help="slot length, seconds (default: the planner's, jitsched.plan.planner.DEFAULT_SLOT_S)")
    ap.add_argument("--alpha", type=float, default=0.4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.slot_s is None:
        from jitsched.plan.planner import DEFAULT_SLOT_S

        args.slot_s = DEFAULT_SLOT_S
    runs = []
    for spec in args.jobs:
        n, hosts = parse_size(spec, args.hosts)
        variants = [v for v in args.variants
                    if not (v == "lp-each" and n > args.each_max_jobs)]
        print(f"{n} jobs on {hosts} hosts: {', '.join(variants)} ...", file=sys.stderr, flush=True)
        r = run(n, hosts, args.repeat if n < 500 else min(args.repeat, 3), variants, args.objective,
                args.slot_s, args.alpha, args.seed)
        runs.append(r)
        if not args.json:
            print(f"{n:5d} jobs {hosts:5d} hosts {r['transfers']:6d} transfers  LAT {r['lat_s']:.4f} s  "
                  f"plan_jobs {r['plan_s']:.4f} s", flush=True)
            for v, q in r["variants"].items():
                ratio = ""
                if v != "new" and "new" in r["variants"]:
                    ratio = f"  x{q['lp_s'] / r['variants']['new']['lp_s']:.1f} of new"
                print(f"   {v:>12}: LP {q['lp_s']:8.4f} s (build {q['build_s']:.4f} solve {q['solve_s']:.4f})  "
                      f"{q['variables']:7d} vars {q['flows']:6d} flows {q['components']:4d} comps "
                      f"{q['proven']:4d} proven  objective {q['objective_value']:.4f}  peak "
                      f"{q['peak_utilization']:.3f}  late {q['late']} ({q['lateness_s']:.3f} s)  "
                      f"{q['status']}{ratio}", flush=True)
    if args.json:
        print(json.dumps({"runs": runs, "objective": args.objective, "slot_s": args.slot_s,
                          "alpha": args.alpha, "goals_s": GOALS}))
    else:
        print("LP: wall time of solve_bandwidth_lp, medians; goals: "
              + ", ".join(f"<= {g} s at {n} jobs" for n, g in GOALS.items()) + f"; {PAPER}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
