"""The testbed's options: flags built from the dataclass fields, the CLI and the bench agreeing, checks naming the field."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import subprocess
import sys

import pytest

from jitsched.agents.backends.base import BACKGROUND_FLOOR, FLOW_FLOOR
from jitsched.bench.bench_testbed import MEASURE_DEFAULTS, RUN_DEFAULTS, RUN_EXCLUDE, SWEEP
from jitsched.bench.bench_testbed import build_parser as bench_parser
from jitsched.cli import build_parser
from jitsched.cli.testbed import CLI_EXCLUDE
from jitsched.errors import ValidationError
from jitsched.testbed.options import (
    DAEMON_DEFAULTS,
    SPARE_MODES,
    MeasureOptions,
    TestbedOptions,
    add_options,
    argument_specs,
    flag_fields,
    options_from_args,
)

OPTION_CLASSES = (TestbedOptions, MeasureOptions)


def option_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's actions for option-class fields, by dest."""
    names = {f.name for cls in OPTION_CLASSES for f in flag_fields(cls)}
    return {a.dest: a for a in parser._actions if a.dest in names}


def cli_testbed_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["testbed"]


@pytest.mark.parametrize("cls", OPTION_CLASSES)
def test_every_flag_field_is_a_flag_with_the_dataclass_default(cls):
    p = add_options(argparse.ArgumentParser(), cls)
    args = p.parse_args([])
    flags = flag_fields(cls)
    assert flags and {f.name for f in flags} == set(option_actions(p))
    for f in flags:
        assert getattr(args, f.name) == f.default, f.name
        [action] = [a for a in p._actions if a.dest == f.name]
        assert action.option_strings[0] == "--" + f.name.replace("_", "-")
        assert action.help == f.metadata["help"] and action.choices == f.metadata.get("choices")
    # parsing nothing gives the default options
    assert options_from_args(args, cls) == cls()


def test_every_field_has_help_and_python_only_fields_are_no_flags():
    for cls in OPTION_CLASSES:
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help"
    assert {f.name for f in dataclasses.fields(TestbedOptions)} - {f.name for f in flag_fields(TestbedOptions)} \
        == {"timeout_s", "slot_s", "measure_slots", "daemon_options"}


def test_flags_parse_to_the_fields_types():
    p = add_options(argparse.ArgumentParser(), TestbedOptions)
    args = p.parse_args(["--link-mbit", "50", "--seed", "3", "--no-ingress", "--alpha", "0.4",
                         "--job-order", "fifo", "--spare", "shared", "--planning", "incremental",
                         "--drift-s", "0.5", "--switch-priority", "--policy", "none"])
    o = options_from_args(args, TestbedOptions)
    assert o == TestbedOptions(link_mbit=50.0, seed=3, ingress=False, alpha=0.4, job_order="fifo",
                               spare="shared", planning="incremental", drift_s=0.5, switch_priority=True,
                               policy="none")
    assert type(o.link_mbit) is float and type(o.seed) is int
    assert p.parse_args(["--ingress"]).ingress is True
    with pytest.raises(SystemExit):
        p.parse_args(["--job-order", "random"])  # choices from the estimate's JOB_ORDERS


def test_exclude_defaults_and_many():
    p = add_options(argparse.ArgumentParser(), TestbedOptions, exclude=("policy",), defaults={"prefix": "jsb"},
                    many=("dl_share",))
    args = p.parse_args(["--dl-share", "0.5", "1"])
    assert not hasattr(args, "policy") and args.prefix == "jsb" and args.dl_share == [0.5, 1.0]
    assert p.parse_args([]).dl_share == [None]
    # a sweep's field needs its one value; an excluded field keeps its default
    o = options_from_args(args, TestbedOptions, dl_share=args.dl_share[1])
    assert (o.policy, o.prefix, o.dl_share) == ("jit", "jsb", 1.0)
    # the help's %(default)s follows the default given
    assert "default jsb: jsb-h0.., jsb-br0" in " ".join(p.format_help().split())
    with pytest.raises(ValueError, match="no flag field daemon_options, nope"):
        argument_specs(TestbedOptions, exclude=("nope",), defaults={"daemon_options": {}})


def test_cli_and_bench_build_the_same_option_flags():
    cli, bench = option_actions(cli_testbed_parser()), option_actions(bench_parser())
    every = {f.name for cls in OPTION_CLASSES for f in flag_fields(cls)}
    # a new field is a flag of both unless one of them names it as left out
    assert set(cli) == every - set(CLI_EXCLUDE)
    assert set(bench) == every - set(RUN_EXCLUDE)
    overridden = {**MEASURE_DEFAULTS, **RUN_DEFAULTS}
    for dest in set(cli) & set(bench):
        c, b = cli[dest], bench[dest]
        assert c.option_strings == b.option_strings and c.choices == b.choices and c.type == b.type, dest
        if dest in SWEEP:
            assert b.nargs == "+" and b.default == [c.default], dest
        elif dest in overridden:
            assert b.default == overridden[dest] != c.default, dest
        else:
            assert b.default == c.default, dest
            assert b.help == c.help, dest


def test_cli_flags_and_defaults_are_the_ones_before_the_options_classes():
    # jitsched testbed's flags and argparse defaults as they were declared by hand
    before = {"link_mbit": None, "prefix": "js", "policy": "jit", "seed": 0, "ingress": None, "alpha": None,
              "job_order": None, "dl_share": None, "planning": None, "max_planner_duty": None, "drift_s": None,
              "early_s": None, "slots": 30, "slot_s": 0.1,
              # was None, which run_scenario took as its default, "background"
              "spare": "background"}
    args = cli_testbed_parser().parse_args(["run"])
    assert {k: getattr(args, k) for k in before} == before
    # no --scenario: None, so that one given beside --workload is an error; run takes it as quick
    assert (args.hosts, args.cluster_file, args.scenario, args.workload, args.json) == (4, None, None, None, False)
    text = cli_testbed_parser().format_help()
    for flag in ("--link-mbit", "--no-ingress", "--alpha", "--dl-share", "--max-planner-duty", "--slot-s"):
        assert flag in text
    assert "--switch-priority" not in text


@pytest.mark.parametrize("kw, message", [
    ({"policy": "tensorflow"}, "policy: expected one of jit, jit-paper, sincronia, tictac, varys, none"),
    ({"seed": -1}, "seed: must be within [0, inf)"),
    ({"seed": 1.5}, "seed: expected an int"),
    ({"seed": True}, "seed: expected an int"),
    ({"prefix": "Bad"}, "prefix: bad prefix"),
    ({"prefix": None}, "prefix: expected a str"),
    ({"link_mbit": 0.0}, "link_mbit: must be within [0.1, 10000]"),
    ({"link_mbit": math.nan}, "link_mbit: must be within"),
    ({"link_mbit": "fast"}, "link_mbit: expected a float or None"),
    ({"ingress": 1}, "ingress: expected a bool or None"),
    ({"spare": "greedy"}, "spare: expected one of background, shared"),
    ({"timeout_s": 0.0}, "timeout_s: must be within (0, inf)"),
    ({"slot_s": -0.1}, "slot_s: must be within [0.001, inf)"),
    ({"measure_slots": -1}, "measure_slots: must be within [0, inf)"),
    # the jit settings: the daemon's and the policy's own checks, under either testbed policy
    ({"alpha": 1.5}, "alpha"),
    ({"dl_share": 0.0}, "dl_share: must be within (0, 1]"),
    ({"dl_share": 2.0, "policy": "none"}, "dl_share: must be within (0, 1]"),
    ({"job_order": "random"}, "job_order"),
    ({"planning": "sometimes"}, "planning: expected incremental or full"),
    ({"max_planner_duty": 0.0}, "max_planner_duty: must be within (0, 1]"),
    ({"drift_s": 0.0}, "drift_s: must be positive"),
    ({"early_s": -1.0, "policy": "none"}, "early_s: must be positive"),
    ({"daemon_options": [1]}, "daemon_options: expected a mapping"),
    ({"background_floor": 1.0}, "background_floor: must be within [0, 1), got 1.0"),
    ({"background_floor": -0.01, "policy": "none"}, "background_floor: must be within [0, 1)"),
    ({"flow_floor": 1.0}, "flow_floor: must be within [0, 1), got 1.0"),
    ({"flow_floors_sum": -0.1}, "flow_floors_sum: must be within [0, 1)"),
])
def test_bad_testbed_options_name_the_field(kw, message):
    with pytest.raises(ValidationError, match=re.escape(message)):
        TestbedOptions(**kw)


def test_unknown_daemon_options_are_named():
    with pytest.raises(ValidationError) as exc:
        TestbedOptions(daemon_options={"no_such_option": 1})
    assert str(exc.value).startswith("daemon_options: ") and "'no_such_option'" in str(exc.value)


@pytest.mark.parametrize("kw, message", [
    ({"slots": 0}, r"slots: must be within \[1, inf\)"),
    ({"slot_s": 0}, r"slot_s: must be within \[0.001, inf\)"),
    ({"slot_s": 1e-9}, r"slot_s: must be within \[0.001, inf\)"),
    ({"slots": 2.0}, "slots: expected an int"),
])
def test_bad_measure_options_name_the_field(kw, message):
    with pytest.raises(ValidationError, match=message):
        MeasureOptions(**kw)


def test_options_are_frozen_and_own_their_daemon_options():
    extra = {"drift_s": 0.5}
    o = TestbedOptions(daemon_options=extra)
    extra["drift_s"] = -1.0
    assert o.daemon_options == {"drift_s": 0.5}
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 2
    # replace checks again
    with pytest.raises(ValidationError, match="seed"):
        dataclasses.replace(o, seed=-1)


def test_daemon_settings_give_the_jit_settings_to_the_jit_daemon_only():
    o = TestbedOptions(alpha=0.4, job_order="fifo", dl_share=0.5, drift_s=0.5, planning="incremental",
                       daemon_options={"policy_options": {"bg_weight": 2.0}, "joint_replan_s": 1.0})
    jit = o.daemon_settings()
    assert jit == {"policy": "jit", "slot_s": 0.1, "alpha": 0.4, "planning": "incremental", "drift_s": 0.5,
                   "policy_options": {"job_order": "fifo", "dl_share": 0.5, "bg_weight": 2.0},
                   "joint_replan_s": 1.0}
    none = dataclasses.replace(o, policy="none", daemon_options={})
    assert none.daemon_settings() == {"policy": "tensorflow", "slot_s": 0.1, "alpha": 0.4, **DAEMON_DEFAULTS}
    # the simulator's prediction gets them under either policy
    assert none.prediction_options() == {"link_mbit": None, "slot_s": 0.1, "alpha": 0.4, "job_order": "fifo",
                                         "dl_share": 0.5, "ingress_share": 0.98, "announce_files": False,
                                         "background_floor": BACKGROUND_FLOOR}


@pytest.mark.parametrize("policy, ingress, share", [
    ("jit", None, 0.98), ("jit", False, 1.0), ("none", None, 0.98), ("none", False, 1.0)])
def test_prediction_shapes_ingress_as_a_jit_run_would(policy, ingress, share):
    # the simulator's jit runs on the capacity a jit run's agents shape ingress to,
    # also when the run itself is plain TCP's (its prediction is the comparison)
    assert TestbedOptions(policy=policy, ingress=ingress).prediction_options()["ingress_share"] == share


@pytest.mark.parametrize("policy, ingress, enforced", [
    ("jit", None, True), ("jit", True, True), ("jit", False, False), ("none", None, False), ("none", True, False),
    ("sincronia", None, True), ("sincronia", False, False), ("tictac", None, True)])
def test_ingress_is_enforced_by_default_where_agents_run(policy, ingress, enforced):
    assert TestbedOptions(policy=policy, ingress=ingress).enforce_ingress is enforced
    assert TestbedOptions(policy=policy).enforced is (policy != "none")


def test_spare_modes_are_the_tc_backends():
    from jitsched.agents.backends.tc import SPARE_MODES as TC_SPARE_MODES

    assert SPARE_MODES == TC_SPARE_MODES


def test_the_cli_builds_its_parser_without_loading_pyroute2():
    # why the options repeat the tc backend's spare modes: ~0.4 s on every jitsched command
    code = ("import sys; from jitsched.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith(('pyroute2', 'jitsched.agents.backends.tc'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_background_floor_is_the_agents_and_the_predictions():
    o = TestbedOptions(background_floor=0.3)
    assert o.prediction_options()["background_floor"] == 0.3
    # the agent command's default, also where the run has no agents (its prediction's jit has them)
    assert TestbedOptions(policy="none").prediction_options()["background_floor"] == BACKGROUND_FLOOR
    args = cli_testbed_parser().parse_args(["run", "--background-floor", "0.05"])
    assert args.background_floor == 0.05


def test_the_agents_options_are_the_runs():
    o = TestbedOptions(background_floor=0.1, flow_floor=0.004, flow_floors_sum=0.0, ingress=False)
    a = o.agent_options("js-h0-e")
    assert (a.backend, a.dev, a.enforce_ingress, a.background_floor, a.flow_floor, a.flow_floors_sum) == (
        "tc", "js-h0-e", False, 0.1, 0.004, 0.0)
    assert TestbedOptions().agent_options("d").flow_floor == FLOW_FLOOR
    assert TestbedOptions().agent_options("d").enforce_ingress
    assert cli_testbed_parser().parse_args(["run", "--flow-floor", "0.002"]).flow_floor == 0.002
    assert cli_testbed_parser().parse_args(["run", "--flow-floors-sum", "0"]).flow_floors_sum == 0.0


def test_the_critical_floor_reaches_the_daemon_under_every_policy_when_set():
    assert "critical_floor" not in TestbedOptions().daemon_settings()
    for policy in ("jit", "none", "sincronia"):
        assert TestbedOptions(policy=policy, critical_floor=0.01).daemon_settings()["critical_floor"] == 0.01
    with pytest.raises(ValidationError, match="critical_floor"):
        TestbedOptions(critical_floor=1.0)


def test_critical_caps_reach_the_daemon_under_every_policy_when_set():
    assert "critical_caps" not in TestbedOptions().daemon_settings()
    for policy in ("jit", "sincronia", "none"):
        assert TestbedOptions(policy=policy, critical_caps=False).daemon_settings()["critical_caps"] is False
