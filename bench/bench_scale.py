"""Planning time (LAT pass + LP) against jobs (10..5000) and hosts (100..10,000), with fitted log-log exponents."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from dataclasses import replace

import numpy as np

from jitsched.bench.bench_lp import VARIANTS
from jitsched.bench.common import pyplot, require_matplotlib
from jitsched.dag.model import Cluster, compile_jobs
from jitsched.workloads.synth import random_vgg16_jobs

GOAL_EXPONENT = 1.2  # the goal: planning time grows at most as jobs^1.2
WORKLOADS = ("vgg16", "burst")


def instance(workload: str, n_jobs: int, n_hosts: int, seed: int):
    """(compiled DAG, cluster, base options) of one planning instance.

    ``vgg16``: bench_lp's VGG16 jobs, all arriving at once, Eq. 1 LATs (light
    load: lowest-peak plans). ``burst``: the paper workload's jobs made to
    arrive at once, planned as jit-paper plans (``ordered`` LATs; ports loaded,
    the LP solved).
    """
    if workload == "vgg16":
        cluster = Cluster.uniform(n_hosts, 1e9)
        return compile_jobs(random_vgg16_jobs(n_jobs, cluster.names, seed=seed), cluster), cluster, {}
    from jitsched.bench.paper.workload import paper_workload

    wl = paper_workload(n_jobs, n_hosts=n_hosts, seed=seed)
    jobs = [replace(j, arrival_s=0.0) for j in wl.jobs]
    return compile_jobs(jobs, wl.cluster), wl.cluster, {"trans_estimate": "ordered"}


def measure(workload: str, n_jobs: int, n_hosts: int, variant: str, repeat: int, seed: int,
            alpha: float, slot_s: float) -> dict:
    """Median wall time of :func:`plan_jobs` (seconds) over ``repeat`` runs, and the last plan's figures."""
    from jitsched.plan.planner import PlanOptions, plan_jobs

    dag, cluster, extra = instance(workload, n_jobs, n_hosts, seed)
    opts = PlanOptions(alpha=alpha, slot_s=slot_s, time_limit_s=None, **extra, **VARIANTS[variant])
    if repeat > 1:  # warm-up: first-call costs (HiGHS, numpy) are not the size's; large sizes swamp them
        plan_jobs(dag, cluster, opts)
    walls = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plan = plan_jobs(dag, cluster, opts)
        walls.append(time.perf_counter() - t0)
    lp = plan.lp
    return {"jobs": n_jobs, "hosts": n_hosts, "plan_s": statistics.median(walls), "runs_s": walls,
            "lat_s": plan.lat_s, "lp_build_s": lp.build_s, "lp_solve_s": lp.solve_s,
            "transfers": int(len(plan.scheduled)), "flows": lp.n_flows, "components": lp.n_components,
            "proven": lp.n_proven, "variables": lp.n_variables, "status": lp.status,
            "late": int(lp.late.size), "peak_utilization": lp.peak_utilization}


def fit_exponent(x, y) -> float:
    """Slope of log(y) against log(x), least squares (nan with fewer than two points)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def sweep(axis: str, sizes: list[int], fixed: int, workload: str, variant: str, repeat: int,
          max_s: float, seed: int, alpha: float, slot_s: float) -> dict:
    """One series: ``axis`` ("jobs" or "hosts") over ``sizes``, the other fixed; stops past ``max_s``."""
    points, skipped = [], []
    for k, size in enumerate(sizes):
        n_jobs, n_hosts = (size, fixed) if axis == "jobs" else (fixed, size)
        if points and points[-1]["plan_s"] > max_s:
            skipped = sizes[k:]
            print(f"  {variant}: {points[-1]['plan_s']:.1f} s > --max-s {max_s:g}: skipping {skipped}",
                  file=sys.stderr, flush=True)
            break
        t0 = time.perf_counter()
        p = measure(workload, n_jobs, n_hosts, variant, repeat if size <= 1000 else 1, seed, alpha, slot_s)
        points.append(p)
        print(f"  {variant}: {n_jobs} jobs, {n_hosts} hosts: {p['plan_s']:.4f} s "
              f"({time.perf_counter() - t0:.1f} s with setup)", file=sys.stderr, flush=True)
    xs = [p[axis] for p in points]
    ys = [p["plan_s"] for p in points]
    top = [k for k, x in enumerate(xs) if x * 10 >= max(xs)] if xs else []
    return {"axis": axis, "fixed": fixed, "variant": variant, "points": points, "skipped": skipped,
            "exponent": fit_exponent(xs, ys),
            "exponent_top_decade": fit_exponent([xs[k] for k in top], [ys[k] for k in top])}


def figure(series: list[dict], path: str, workload: str) -> None:
    """Two log-log panels, planning time against jobs and against hosts, fitted exponents in the legends."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, axis in zip(axes, ("jobs", "hosts"), strict=True):
        for s in (s for s in series if s["axis"] == axis):
            xs = [p[axis] for p in s["points"]]
            ys = [p["plan_s"] for p in s["points"]]
            ax.loglog(xs, ys, "o-", label=f"{s['variant']}: exponent {s['exponent']:.2f} "
                                          f"(top decade {s['exponent_top_decade']:.2f})")
        other = "hosts" if axis == "jobs" else "jobs"
        fixed = next((s["fixed"] for s in series if s["axis"] == axis), None)
        ax.set_xlabel(f"{axis} ({fixed} {other})")
        ax.set_ylabel("planning time, s (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"plan_jobs (LAT pass + LP), {workload} workload; goal: exponent <= {GOAL_EXPONENT} in jobs")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, nargs="*", default=[10, 20, 50, 100, 200, 500, 1000, 2000, 5000])
    ap.add_argument("--jobs-hosts", type=int, default=1000, help="hosts while jobs vary")
    ap.add_argument("--hosts", type=int, nargs="*", default=[100, 200, 500, 1000, 2000, 5000, 10000])
    ap.add_argument("--hosts-jobs", type=int, default=1000, help="jobs while hosts vary")
    ap.add_argument("--variants", nargs="*", default=["new", "lp"], choices=[v for v in VARIANTS if v != "old"],
                    help="option sets of bench_lp (new: defaults; lp: lowest_peak off, the LP always solved)")
    ap.add_argument("--workload", default="vgg16", choices=WORKLOADS)
    ap.add_argument("--repeat", type=int, default=3, help="runs per point up to 1000 jobs/hosts (median); 1 above")
    ap.add_argument("--max-s", type=float, default=60.0, help="stop a series after a point slower than this")
    ap.add_argument("--alpha", type=float, default=0.4)
    ap.add_argument("--slot-s", type=float, default=None,
                    help="slot length, seconds (default: the planner's, jitsched.plan.planner.DEFAULT_SLOT_S)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--figure", nargs="?", const="bench_scale.png", metavar="PATH",
                    help="draw the figure (default path bench_scale.png)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.slot_s is None:
        from jitsched.plan.planner import DEFAULT_SLOT_S

        args.slot_s = DEFAULT_SLOT_S
    if args.figure:
        require_matplotlib()  # before the long run, not after it
    series = []
    for axis, sizes, fixed in (("jobs", args.jobs, args.jobs_hosts), ("hosts", args.hosts, args.hosts_jobs)):
        for variant in args.variants:
            print(f"{axis} sweep ({fixed} {'hosts' if axis == 'jobs' else 'jobs'}), {variant}:",
                  file=sys.stderr, flush=True)
            s = sweep(axis, sizes, fixed, args.workload, variant, args.repeat, args.max_s, args.seed,
                      args.alpha, args.slot_s)
            series.append(s)
            if not args.json:
                print(f"{axis:>5} sweep, {variant:>12}: exponent {s['exponent']:.2f} (top decade "
                      f"{s['exponent_top_decade']:.2f}); " + ", ".join(
                          f"{p[axis]}: {p['plan_s']:.4f} s" for p in s["points"])
                      + (f"; skipped {s['skipped']}" if s["skipped"] else ""), flush=True)
    if args.figure:
        figure(series, args.figure, args.workload)
        print(f"figure: {args.figure}", file=sys.stderr)
    if args.json:
        print(json.dumps({"workload": args.workload, "goal_exponent": GOAL_EXPONENT, "series": series,
                          "figure": args.figure}))
    else:
        print(f"goal: exponent <= {GOAL_EXPONENT} in jobs ({args.workload} workload, plan_jobs wall time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
