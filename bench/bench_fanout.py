"""Schedule fan-out to N agents and joint re-solve time at 1000 jobs on 1000 hosts, medians over repeats."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from jitsched.bench.bench_daemon import fanout, joint_resolve
from jitsched.dag.model import Cluster
from jitsched.workloads.synth import layer_chain_job

GOALS = {"fanout_s": 0.5, "resolve_s": 0.5}
PARTS = ("fanout", "resolve", "lp")
RECEIVERS_PER_PROCESS = 2500  # bare agent sockets per receiving process (bench_daemon.fanout)


def lp_same_plan(n_jobs: int, n_hosts: int, workers: int, seed: int = 0) -> dict:
    """One joint plan of ``n_jobs`` VGG16 jobs (jit-paper's LP options) with one LP worker
    and with ``workers``: whether the plans are the same bit for bit, and each one's wall time."""
    from jitsched.plan.planner import PlanOptions, plan_jobs

    rng = np.random.default_rng(seed)
    cluster = Cluster.uniform(n_hosts)
    names = cluster.names
    jobs = [layer_chain_job(f"j{j}", *(names[int(h)] for h in rng.choice(n_hosts, 2, replace=False)))
            for j in range(n_jobs)]
    # no time limit: a plan cut short by the wall clock depends on the machine's load
    opts = PlanOptions(alpha=0.4, trans_estimate="ordered", time_limit_s=None, iteration_limit=100_000)
    if workers > 1:  # the pool's processes start (a second or two) outside the timed plan
        plan_jobs(jobs, cluster, PlanOptions(**{**opts.__dict__, "lp_workers": workers}))
    plans, walls = [], []
    for w in (1, workers):
        t0 = time.perf_counter()
        plans.append(plan_jobs(jobs, cluster, PlanOptions(**{**opts.__dict__, "lp_workers": w})))
        walls.append(time.perf_counter() - t0)
    a, b = plans[0], plans[1]
    same = all(np.array_equal(getattr(a.lp, k), getattr(b.lp, k))
               for k in ("start_slot", "rate_ptr", "rate_values", "leftover_egress", "leftover_ingress"))
    return {"same": bool(same and np.array_equal(a.scheduled, b.scheduled)), "serial_s": walls[0],
            "parallel_s": walls[1], "components": int(a.lp.n_components), "proven": int(a.lp.n_proven)}


def main(argv: list[str] | None = None) -> int:
    from jitsched.plan import lppool

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--agents", type=int, default=10_000, help="fan-out: agents (bare DEALER sockets)")
    ap.add_argument("--jobs", type=int, default=1000, help="re-solve: VGG16 jobs")
    ap.add_argument("--hosts", type=int, default=1000, help="re-solve: hosts")
    ap.add_argument("--repeats", type=int, default=5, help="rounds per figure (medians)")
    ap.add_argument("--lp-workers", type=int, default=2,
                    help="processes solving LP components at once in the parallel re-solve (default 2)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="comma-separated: fanout (every agent sent a body of its own), resolve (the "
                         "default jit's and jit-paper's joint re-solves in a daemon), lp (serial and "
                         "parallel LP give the same plan)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = ap.parse_args(argv)
    parts = set(args.parts.split(","))
    if not parts <= set(PARTS) or args.agents < 2 or args.jobs < 2 or args.hosts < 2 or args.repeats < 1 \
            or args.lp_workers < 1:
        print(f"bench_fanout: --parts takes {','.join(PARTS)}; --agents, --jobs, --hosts need 2 or more, "
              f"--repeats and --lp-workers 1 or more", file=sys.stderr)
        return 2
    out: dict = {"agents": args.agents, "jobs": args.jobs, "hosts": args.hosts, "repeats": args.repeats,
                 "lp_workers": args.lp_workers}
    try:
        if "fanout" in parts:
            f = fanout(args.agents, args.repeats, receivers=max(1, args.agents // RECEIVERS_PER_PROCESS))
            for key, value in f["all"].items():
                out[f"fanout_{key}_s" if key not in ("hosts", "n_slots") else f"fanout_{key}"] = value
            out["fanout_s"] = out.pop("fanout_from_plan_s")
            out["fanout_changed_s"] = f["changed"]["from_plan"]
        if "resolve" in parts:
            for key, policy, opts in (("resolve_s", None, {}), ("resolve_lp_s", "jit-paper", {}),
                                      ("resolve_lp_parallel_s", "jit-paper", {"lp_workers": args.lp_workers})):
                times, _ = joint_resolve(args.jobs, args.hosts, args.repeats, policy=policy, policy_options=opts)
                out[key] = statistics.median(times)
                out[key.replace("_s", "_runs_s", 1)] = times
        if "lp" in parts:
            out |= {f"lp_{k}": v for k, v in lp_same_plan(args.jobs, args.hosts, args.lp_workers).items()}
    finally:
        lppool.shutdown()
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            goal = GOALS.get(k)
            print(f"{k:<28} {v}" + (f"   goal <= {goal}" if goal else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
