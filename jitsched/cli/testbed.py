"""The ``testbed`` command: build, tear down and run the emulated cluster."""

from __future__ import annotations

import argparse
import sys

from jitsched.cli.registry import arg, emit_json, register
from jitsched.errors import ValidationError
from jitsched.testbed import DEFAULT_LINK_MBIT
from jitsched.testbed.options import (
    BASELINES,
    DAEMON_POLICY,
    MeasureOptions,
    TestbedOptions,
    argument_specs,
    options_from_args,
)
from jitsched.testbed.scenario import SCENARIOS
from jitsched.testbed.torchjobs import TORCH_SCENARIOS

# TestbedOptions flags the CLI leaves out: the switch ports' priority band is the
# testbed bench's ablation (bench/bench_testbed.py --switch-priority)
CLI_EXCLUDE = ("switch_priority",)


def _args(cls: type, **kw) -> list:
    return [arg(*flags, **options) for flags, options in argument_specs(cls, **kw)]


@register(
    "testbed",
    arg("action", choices=("up", "down", "run", "measure"),
        help="up: build; down: remove (idempotent); run: a scenario or a workload file end to end; "
             "measure: tc enforcement"),
    arg("--hosts", type=int, default=4, help="number of hosts for up (default 4)"),
    arg("--cluster-file", default=None, help="where up writes the TOML cluster file"),
    arg("--scenario", choices=(*SCENARIOS, *TORCH_SCENARIOS), default=None,
        help="workload for run (default quick; classes: a critical job alone, alone beside files on its ports, "
             "then among normal jobs and those files; torch-ps: real PyTorch jobs over Gloo, needs torch)"),
    arg("--workload", default=None, metavar="FILE",
        help="run a workload file's jobs and background flows instead of a scenario (native format: "
             "jitsched gen-workload, import-tf): its i-th host runs as h<i>, its byte counts scaled by the "
             "testbed's link rate over its own"),
    *_args(TestbedOptions, exclude=CLI_EXCLUDE),
    *_args(MeasureOptions),
    arg("--json", action="store_true", help="print the result as JSON"),
)
def cmd_testbed(args: argparse.Namespace) -> int:
    from jitsched import testbed

    # every flag is checked whatever the action, before any namespace is touched
    options = options_from_args(args, TestbedOptions)
    m = options_from_args(args, MeasureOptions)
    if args.action == "down":
        removed = testbed.down(args.prefix)
        if args.json:
            emit_json({"removed": removed})
        else:
            print(f"removed {len(removed)} namespaces" + (f": {' '.join(removed)}" if removed else ""))
        return 0
    if args.action == "up":
        tb = testbed.up(args.hosts, DEFAULT_LINK_MBIT if args.link_mbit is None else args.link_mbit,
                        prefix=args.prefix,
                        cluster_file=args.cluster_file)
        if args.json:
            emit_json(tb.to_json())
        else:
            print(f"testbed {tb.prefix!r}: {len(tb.hosts)} hosts at {tb.link_mbit:g} Mbit/s, "
                  f"switch namespace {tb.switch_netns}, cluster file {tb.cluster_file}")
            for h in tb.hosts:
                print(f"  {h.name:<4} {h.netns:<12} {h.address}")
        return 0
    if args.action == "measure":
        from jitsched.testbed.e2e import _sigterm_as_exit
        from jitsched.testbed.measure import measure_enforcement, summarize

        # SIGTERM's default action would skip the ``finally``: the testbed would outlive the measurement
        with _sigterm_as_exit():
            tb = testbed.up(2, DEFAULT_LINK_MBIT if args.link_mbit is None else args.link_mbit,
                            prefix=args.prefix)
            try:
                out = summarize(measure_enforcement(tb, slot_s=m.slot_s, n_slots=m.slots, seed=args.seed))
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

    if args.workload is not None and args.scenario is not None:
        raise ValidationError("--scenario and --workload name two workloads; give one")
    require_daemon_side()
    if args.workload is not None:
        return _run_file(args, options)
    scenario = args.scenario or "quick"
    if scenario in TORCH_SCENARIOS:
        return _run_torch(args, options)
    return _report(_predicted(run_scenario(scenario, options), options, scenario, options.seed), args.json)


def _run_file(args: argparse.Namespace, options: TestbedOptions) -> int:
    """``testbed run --workload FILE``, with the simulator's prediction of the same jobs and files."""
    from jitsched.dag.model import load_workload
    from jitsched.testbed.e2e import run_workload_file
    from jitsched.testbed.scenario import on_testbed

    wl = load_workload(args.workload)
    out = run_workload_file(args.workload, options, loaded=wl)
    placed = on_testbed(wl, len(wl.cluster), options.link_mbit or DEFAULT_LINK_MBIT)
    return _report(_predicted(out, options, "", workload=placed), args.json)


def _predicted(out: dict, options: TestbedOptions, *args, **kwargs) -> dict:
    """``out`` with ``sim``: what the fluid simulator expects of the same workload under the same
    settings (:func:`jitsched.testbed.scenario.predict` of ``args`` and ``kwargs``), under jit,
    fair sharing and, for a baseline's run, that baseline: its order as the agents enforce it."""
    from jitsched.testbed.scenario import predict

    baseline = (options.policy,) if options.policy in BASELINES else ()
    pred = predict(*args, **options.prediction_options(), baselines=baseline, **kwargs)
    out["sim"] = {pol: {k: pred[pol][k] for k in ("mean_jct_s", "background_mbit_mean")}
                  for pol in (DAEMON_POLICY["jit"], DAEMON_POLICY["none"], *baseline)}
    return out


def _report(out: dict, as_json: bool) -> int:
    """Print a run's result; exit status 0 when every job completed and no agent failed."""
    if as_json:
        emit_json(out)
    else:
        for k, v in out.items():
            if k != "details":
                print(f"{k:<24} {v}")
    if out["completed"] != out["jobs"]:
        print(f"testbed run: {out['jobs'] - out['completed']} of {out['jobs']} jobs did not complete",
              file=sys.stderr)
    for name, why in run_errors(out).items():
        print(f"testbed run: {name}: {why}", file=sys.stderr)
    if out["agents_failed"]:
        # the jobs may all have finished, but not under the policy asked for
        print(f"testbed run: agents stopped with an error: {out['agents_failed']}", file=sys.stderr)
    return 0 if out["completed"] == out["jobs"] and not out["agents_failed"] else 1


def run_errors(out: dict) -> dict[str, str]:
    """Every error of a run's result: why each job, file or rank that failed did, by its id.

    Parameters
    ----------
    out : dict
        A ``testbed run`` result: its ``details.errors``, and those of the classes
        scenario's runs of the critical job alone (``details.isolated``,
        ``details.with_files``), named ``<run>: <id>``.

    Returns
    -------
    dict
        ``{id: error}``, in the order the runs and their errors came.
    """
    details = out.get("details") or {}
    errors = dict(details.get("errors") or {})
    for run in ("isolated", "with_files"):
        errors |= {f"{run}: {k}": v for k, v in ((details.get(run) or {}).get("errors") or {}).items()}
    return errors


def _run_torch(args: argparse.Namespace, options: TestbedOptions) -> int:
    """``testbed run`` of a real-framework scenario (no simulator prediction: its DAG is the framework's)."""
    import importlib.util

    from jitsched.testbed.torchjobs import run_torch_scenario

    if importlib.util.find_spec("torch") is None:
        print(f"testbed run: scenario {args.scenario} needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    return _report(run_torch_scenario(args.scenario, options), args.json)
