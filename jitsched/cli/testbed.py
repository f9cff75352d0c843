"""The ``testbed`` command: build, tear down and run the emulated cluster."""

from __future__ import annotations

import argparse

from jitsched.cli.core import emit_json
from jitsched.cli.registry import arg, register


@register(
    "testbed", "Emulated cluster on this machine (network namespaces, HTB-shaped links; needs root).",
    arg("action", choices=("up", "down", "run", "measure"),
        help="up: build; down: remove (idempotent); run: scenario end to end; measure: tc enforcement"),
    arg("--hosts", type=int, default=4, help="number of hosts for up (default 4)"),
    arg("--link-mbit", type=float, default=None,
        help="link rate in Mbit/s each way (default 100; run: the scenario's, which scales its byte sizes)"),
    arg("--prefix", default="js", help="names of namespaces/interfaces (default js: js-h0.., js-br0)"),
    arg("--cluster-file", default=None, help="where up writes the TOML cluster file"),
    arg("--scenario", choices=("quick", "paper-mini"), default="quick", help="workload for run"),
    arg("--policy", choices=("jit", "none"), default="jit",
        help="run: jit scheduling, or none (plain TCP sharing, the TensorFlow baseline)"),
    arg("--seed", type=int, default=0, help="workload seed for run"),
    arg("--ingress", action=argparse.BooleanOptionalAction, default=None,
        help="run, jit: agents also order their hosts' ingress (tc-ingress; default on under jit)"),
    arg("--alpha", type=float, default=None,
        help="run, jit: fraction of each job's transfers the LP plans (default 0: strict priority "
             "only; the paper's is 0.4)"),
    arg("--job-order", choices=("fair", "fifo", "smallest"), default=None,
        help="run, jit: how jobs share a port in the LAT estimate (default fair, the paper's)"),
    arg("--dl-share", type=float, default=None,
        help="run, jit: fraction of each port plans may give DL transfers; the rest is the "
             "background's floor (default 1)"),
    arg("--spare", choices=("background", "shared"), default=None,
        help="run, jit: who borrows capacity no plan holds: background first (default) or "
             "flows and background in turn"),
    arg("--planning", choices=("full", "incremental"), default=None,
        help="run, jit: the daemon's planning mode (default full, as the simulator plans)"),
    arg("--max-planner-duty", type=float, default=None,
        help="run, jit: bound on the share of time full re-solves keep the planner busy (default none)"),
    arg("--drift-s", type=float, default=None,
        help="run, jit: re-solve when a transfer is this many seconds behind its plan "
             "(default: never, like the simulator)"),
    arg("--early-s", type=float, default=None,
        help="run, jit: re-solve when a transfer arrives while its job has another paced to "
             "finish more than this many seconds later (default: never)"),
    arg("--slots", type=int, default=30, help="measure: slots of random rates (default 30)"),
    arg("--slot-s", type=float, default=0.1, help="measure: slot length in seconds (default 0.1)"),
    arg("--json", action="store_true", help="print the result as JSON"),
)
def cmd_testbed(args: argparse.Namespace) -> int:
    from jitsched import testbed

    if args.action == "down":
        removed = testbed.down(args.prefix)
        if args.json:
            emit_json({"removed": removed})
        else:
            print(f"removed {len(removed)} namespaces" + (f": {' '.join(removed)}" if removed else ""))
        return 0
    if args.action == "up":
        tb = testbed.up(args.hosts, args.link_mbit or 100.0, prefix=args.prefix, cluster_file=args.cluster_file)
        if args.json:
            emit_json(tb.to_json())
        else:
            print(f"testbed {tb.prefix!r}: {len(tb.hosts)} hosts at {tb.link_mbit:g} Mbit/s, "
                  f"switch namespace {tb.switch_netns}, cluster file {tb.cluster_file}")
            for h in tb.hosts:
                print(f"  {h.name:<4} {h.netns:<12} {h.address}")
        return 0
    if args.action == "measure":
        from jitsched.testbed.measure import measure_enforcement, summarize

        tb = testbed.up(2, args.link_mbit or 100.0, prefix=args.prefix)
        try:
            out = summarize(measure_enforcement(tb, slot_s=args.slot_s, n_slots=args.slots, seed=args.seed))
        finally:
            testbed.down(args.prefix)
        if args.json:
            emit_json(out)
        else:
            for k, v in out.items():
                print(f"{k:<30} {v:.4f}")
        return 0
    from jitsched.testbed.e2e import run_scenario
    from jitsched.testbed.scenario import require_daemon_side

    require_daemon_side()
    kw: dict = {"seed": args.seed, "prefix": args.prefix, "ingress": args.ingress, "link_mbit": args.link_mbit}
    if args.spare is not None:
        kw["spare"] = args.spare
    if args.alpha is not None:
        kw["alpha"] = args.alpha
    daemon: dict = {}
    policy_options = {k: v for k, v in (("job_order", args.job_order), ("dl_share", args.dl_share))
                      if v is not None}
    if policy_options:
        daemon["policy_options"] = policy_options
    for name in ("drift_s", "early_s", "planning", "max_planner_duty"):
        if getattr(args, name) is not None:
            daemon[name] = getattr(args, name)
    if daemon:
        kw["daemon_options"] = daemon
    out = run_scenario(args.scenario, args.policy, **kw)
    # what the fluid simulator expects of the same workload under the same settings
    from jitsched.testbed.scenario import predict

    pred = predict(args.scenario, args.seed, link_mbit=args.link_mbit, alpha=args.alpha, job_order=args.job_order,
                   dl_share=args.dl_share)
    out["sim"] = {pol: {k: pred[pol][k] for k in ("mean_jct_s", "background_mbit_mean")}
                  for pol in ("jit", "tensorflow")}
    if args.json:
        emit_json(out)
    else:
        for k, v in out.items():
            if k != "details":
                print(f"{k:<24} {v}")
    return 0 if out["completed"] == out["jobs"] else 1
