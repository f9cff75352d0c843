"""The ``sim`` command: simulate a native workload or replay a coflow trace under one policy."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from jitsched.cli.registry import arg, emit_json, positive, register, seed
from jitsched.dag.model import load_workload
from jitsched.errors import ValidationError
from jitsched.policies import reference_policy


def _policy_options(pairs: list[str] | None) -> dict:
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise ValidationError(f"--option: expected KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def drawn_workload(wl, res, compute_noise: float = 0.0):
    """``wl`` with each compute's duration the one run ``res`` drew (``--compute-noise``, or a
    std declared per compute), no std: the durations the run's lower bound is on; ``wl``
    itself when no compute is noisy. A compute runs as soon as it is ready (hosts run any
    number at once), so its finish less its start is its drawn duration."""
    from dataclasses import replace

    if not (compute_noise > 0 or any(c.std_s > 0 for j in wl.jobs for c in j.computes)):
        return wl
    dur = np.asarray(res.node_finish_s) - np.asarray(res.node_start_s)
    jobs, at = [], 0
    for j in wl.jobs:
        jobs.append(replace(j, computes=tuple(replace(c, duration_s=float(dur[at + i]), std_s=0.0)
                                              for i, c in enumerate(j.computes))))
        at += len(j.computes) + len(j.transfers)
    return replace(wl, jobs=tuple(jobs))


@register(
    "sim",
    arg("file", metavar="FILE.json", nargs="?", help="native-format workload (.json or .json.gz)"),
    arg("--coflow-trace", metavar="TRACE", help="replay a coflow benchmark trace instead of FILE"),
    arg("--port-bps", type=positive, default=1e9,
        help="coflow mode: capacity of every port, bits/s (default 1e9)"),
    arg("--policy", default=reference_policy(),
        help="a registered policy's name (default %(default)s, the reference policy; an unknown name "
             "is refused with the list)"),
    arg("--option", action="append", metavar="KEY=VALUE",
        help="policy option, e.g. alpha=0.4 or slot_s=0.05 (repeatable)"),
    arg("--seed", type=seed, default=0, help="seed of the compute-time noise"),
    arg("--compute-noise", type=float, default=0.0,
        help="relative std of compute durations (default 0: exact)"),
    arg("--no-bound", dest="bound", action="store_false",
        help="skip the lower bound on mean JCT (its LP takes as long as the simulation on a few "
             "hundred jobs); lower_bound_mean_jct_s is then null"),
    arg("--json", action="store_true", help="print the result as JSON"),
)
def cmd_sim(args: argparse.Namespace) -> int:
    from jitsched.plan.bound import lower_bound_mean_jct
    from jitsched.plan.coflow import coflow_workload
    from jitsched.sim import simulate
    from jitsched.sim.coflow import cct_summary

    options = _policy_options(args.option)
    if args.coflow_trace:
        if args.file:
            raise ValidationError("give either FILE.json or --coflow-trace, not both")
        from jitsched.policies import POLICIES

        flow_only = sorted(n for n, cls in POLICIES.items() if not cls.needs_dag)
        if args.policy not in flow_only:
            raise ValidationError(
                f"--policy: coflow mode supports {', '.join(flow_only)}; got {args.policy!r}")
        wl = coflow_workload(args.coflow_trace, bps=args.port_bps)
        res = simulate(wl, args.policy, seed=args.seed, policy_options=options)
        out = cct_summary(res)
        if args.json:
            emit_json(out)
        elif not out["coflows"]:
            print(f"0 coflows under {args.policy}: no flow of the trace crosses the network, no CCT to report")
        else:
            print(f"{out['coflows']} coflows under {args.policy}: average CCT "
                  f"{out['avg_cct_s']:.3f} s, p95 {out['p95_cct_s']:.3f} s")
        return 0
    if not args.file:
        raise ValidationError("missing FILE.json (or --coflow-trace TRACE)")
    wl = load_workload(args.file)
    # on a terminal, a bar over finished jobs and a line before the bound's LP; never in a pipe or a log
    shown = sys.stderr.isatty()
    res = simulate(wl, args.policy, seed=args.seed, compute_noise=args.compute_noise,
                   policy_options=options, progress=shown)
    out = res.to_json(per_job=True)
    out["lower_bound_mean_jct_s"] = None
    if args.bound and wl.jobs:  # no jobs, no mean JCT to bound
        if shown:
            print(f"jitsched sim: the lower bound on mean JCT ({len(wl.jobs)} jobs; --no-bound skips it)",
                  file=sys.stderr)
        out["lower_bound_mean_jct_s"] = lower_bound_mean_jct(drawn_workload(wl, res, args.compute_noise))
    if args.json:
        emit_json(out)
        return 0
    bound = "" if out["lower_bound_mean_jct_s"] is None else f" (lower bound {out['lower_bound_mean_jct_s']:.3f} s)"
    mean = "n/a (no DL jobs)" if out["mean_jct_s"] is None else f"{out['mean_jct_s']:.3f} s"
    print(f"{out['jobs']} jobs, {out['background_flows']} background flows under {args.policy}: "
          f"mean JCT {mean}{bound}, makespan {out['makespan_s']:.3f} s")
    for job, jct in out["job_jct_s"].items():
        print(f"  {job:<32} JCT {jct:10.4f} s")
    bw = out["remaining_bw"]
    if bw["min"] is not None:
        print(f"remaining egress bandwidth ratio: min {bw['min']:.3f}, median {bw['median']:.3f}")
    if out["background_slowdown"]["mean"] is not None:
        print(f"background slowdown: mean {out['background_slowdown']['mean']:.3f}")
    if out["lp_solves"]:
        print(f"LP: {out['lp_solves']} solves, {out['lp_time_s_total']:.3f} s; "
              f"LAT misses {out['lat_misses']}")
    return 0
