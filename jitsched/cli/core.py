"""Core commands: ``lat`` and ``plan``."""

from __future__ import annotations

import argparse

from jitsched.cli.registry import arg, emit_json, register
from jitsched.dag.lat import ESTIMATORS, latest_arrival_times
from jitsched.dag.model import compile_jobs, load_workload
from jitsched.plan.lp import OBJECTIVES
from jitsched.plan.planner import (
    DEFAULT_ALPHA,
    DEFAULT_SLOT_S,
    MAX_PORT_SLOTS,
    PlanOptions,
    plan_jobs,
)


@register(
    "lat",
    arg("file", metavar="FILE.json", help="native-format workload (.json or .json.gz)"),
    arg("--estimator", choices=ESTIMATORS, default="exact",
        help="exact one-pass estimate (default) or the paper's Algorithm 1"),
    arg("--json", action="store_true", help="print {job_id: {transfer_id: lat_seconds}}"),
)
def cmd_lat(args: argparse.Namespace) -> int:
    w = load_workload(args.file)
    dag = compile_jobs(w.jobs, w.cluster)
    res = latest_arrival_times(dag, w.cluster, estimator=args.estimator)
    by_job = res.by_job(dag)
    if args.json:
        emit_json(by_job)
        return 0
    for job, lats in by_job.items():
        print(f"job {job}: {len(lats)} transfers")
        for tid, v in lats.items():
            print(f"  {tid:<40} LAT {v:10.4f} s")
    return 0


@register(
    "plan",
    arg("file", metavar="FILE.json", help="native-format workload (.json or .json.gz)"),
    arg("--slot-s", type=float, default=DEFAULT_SLOT_S, help="slot length in seconds (default %(default)s)"),
    arg("--alpha", type=float, default=DEFAULT_ALPHA,
        help="fraction of each job's transfers, in topological order, the LP plans (default 0.4)"),
    arg("--objective", choices=OBJECTIVES, default="balanced", help="LP objective (default balanced)"),
    arg("--estimator", choices=ESTIMATORS, default="exact", help="LAT estimator"),
    arg("--time-limit-s", type=float, default=5.0,
        help="solver budget in seconds; past it an earliest-deadline-first plan is used"),
    arg("--iteration-limit", type=int, default=None,
        help="solver iterations per solve, the same fallback past it; unlike the time "
             "limit the plan then does not depend on the machine (default: none)"),
    arg("--no-lowest-peak", dest="lowest_peak", action="store_false",
        help="always solve the LP, even where every flow's lowest-peak profile is provably optimal"),
    arg("--json", action="store_true",
        help="print the plan as JSON; its slot grid starts at origin_s, the earliest job arrival "
             "(seconds): slot k covers origin_s + [k, k+1) * slot_s"),
)
def cmd_plan(args: argparse.Namespace) -> int:
    """Plan FILE's jobs together and print the plan (``--json``: :meth:`Plan.to_json`).

    The slot grid starts at the earliest job arrival, not at 0: ``origin_s`` in
    the JSON (and "from t=..." in the text) is the plan time of slot 0. A grid
    of more than :data:`jitsched.plan.planner.MAX_PORT_SLOTS` port-slots is
    refused before the LP is built (longer slots or fewer jobs make it smaller).
    """
    w = load_workload(args.file)
    opts = PlanOptions(slot_s=args.slot_s, alpha=args.alpha, objective=args.objective,
                       estimator=args.estimator, time_limit_s=args.time_limit_s,
                       iteration_limit=args.iteration_limit, lowest_peak=args.lowest_peak)
    plan = plan_jobs(w.jobs, w.cluster, opts, max_port_slots=MAX_PORT_SLOTS)
    out = plan.to_json()
    if args.json:
        emit_json(out)
        return 0
    print(f"status {out['status']}  objective {out['objective_value']:.4g}  "
          f"peak utilization {out['peak_utilization']:.3f}  slots {out['n_slots']} x {out['slot_s']} s "
          f"from t={out['origin_s']:g} s")
    print(f"{out['scheduled_transfers']} transfers scheduled (alpha {out['alpha']}), "
          f"{len(out['late'])} late; LAT {out['lat_s'] * 1e3:.2f} ms, "
          f"LP build {out['build_s'] * 1e3:.1f} ms, solve {out['solve_s'] * 1e3:.1f} ms")
    for job, rates in out["rates"].items():
        for tid, r in rates.items():
            mean = sum(r["bytes_per_s"]) / max(len(r["bytes_per_s"]), 1)
            print(f"  {job}/{tid:<32} slots {r['start_slot']:>4}..{r['start_slot'] + len(r['bytes_per_s']) - 1:<4}"
                  f" mean {mean * 8 / 1e6:9.1f} Mbit/s")
    for late in out["late"]:
        print(f"  LATE {late['job']}/{late['transfer']} by {late['lateness_s']:.3f} s")
    return 0
