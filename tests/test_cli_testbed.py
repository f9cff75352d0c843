"""The ``testbed`` command's wiring: ``run`` passes its options to the scenario runner."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import jitsched.testbed.e2e as e2e
import jitsched.testbed.scenario as scenario
from jitsched.agents.backends.base import BACKGROUND_FLOOR
from jitsched.cli import main
from jitsched.errors import ValidationError
from jitsched.testbed.options import DAEMON_DEFAULTS, TestbedOptions
from jitsched.testbed.scenario import SCENARIOS


@pytest.mark.parametrize("extra,more,daemon", [
    ([], {}, {}),
    (["--ingress"], {"ingress": True}, {}),
    (["--no-ingress"], {"ingress": False}, {}),
    (["--alpha", "0.7", "--job-order", "smallest", "--drift-s", "0.5", "--early-s", "0.25"],
     {"alpha": 0.7, "job_order": "smallest", "drift_s": 0.5, "early_s": 0.25},
     {"policy_options": {"job_order": "smallest"}, "drift_s": 0.5, "early_s": 0.25}),
    (["--dl-share", "0.6"], {"dl_share": 0.6}, {"policy_options": {"dl_share": 0.6}}),
    (["--spare", "shared"], {"spare": "shared"}, {}),
    (["--planning", "incremental", "--max-planner-duty", "0.33"],
     {"planning": "incremental", "max_planner_duty": 0.33}, {"planning": "incremental", "max_planner_duty": 0.33}),
    # the link rate reaches the run and the prediction (it was accepted and ignored)
    (["--link-mbit", "50"], {"link_mbit": 50.0}, {}),
    # announced files: the run's workload and the prediction's (jit ranks the files)
    (["--announce-files"], {"announce_files": True}, {}),
    # the agents' background floor: the run's agents and the prediction's
    (["--background-floor", "0.2"], {"background_floor": 0.2}, {}),
])
def test_run_passes_scenario_policy_seed_and_options(monkeypatch, capsys, extra, more, daemon):
    calls = []

    def fake_run(name, options):
        calls.append((name, options))
        return {"policy": options.policy, "jobs": 2, "completed": 2, "agents_failed": {}, "details": {}}

    predicted = []

    def fake_predict(name, seed, **kw):
        predicted.append((name, seed, kw))
        return {pol: {"mean_jct_s": t, "background_mbit_mean": m, "jct_s": {}}
                for pol, t, m in (("jit", 2.0, 40.0), ("tensorflow", 3.0, 30.0))}

    monkeypatch.setattr(e2e, "run_scenario", fake_run)
    monkeypatch.setattr(scenario, "predict", fake_predict)
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--scenario", "paper-mini", "--seed", "3", "--prefix", "tq", "--json",
                 *extra]) == 0
    [(name, options)] = calls
    assert name == "paper-mini"
    assert options == TestbedOptions(policy="jit", seed=3, prefix="tq", **more)
    # what the jit daemon is configured with, over the testbed's defaults
    assert options.daemon_settings() == {"policy": "jit", "slot_s": 0.1, "alpha": more.get("alpha"),
                                         **DAEMON_DEFAULTS, **daemon}
    out = json.loads(capsys.readouterr().out)
    assert out["completed"] == 2
    # the simulator's prediction of the same workload with the same policy options
    assert predicted == [("paper-mini", 3, {"link_mbit": more.get("link_mbit"), "slot_s": 0.1,
                                            "alpha": more.get("alpha"), "job_order": more.get("job_order"),
                                            "dl_share": more.get("dl_share"),
                                            "ingress_share": 1.0 if more.get("ingress") is False else 0.98,
                                            "announce_files": more.get("announce_files", False),
                                            "background_floor": more.get("background_floor", BACKGROUND_FLOOR),
                                            "baselines": ()})]
    assert out["sim"] == {"jit": {"mean_jct_s": 2.0, "background_mbit_mean": 40.0},
                          "tensorflow": {"mean_jct_s": 3.0, "background_mbit_mean": 30.0}}


def test_a_baselines_run_is_predicted_beside_jit_and_tensorflow(monkeypatch, capsys):
    asked = []

    def fake_predict(name, seed, baselines=(), **kw):
        asked.append(baselines)
        return {pol: {"mean_jct_s": t, "background_mbit_mean": 40.0, "jct_s": {}}
                for pol, t in (("jit", 2.0), ("tensorflow", 3.0), ("tictac", 2.5))}

    monkeypatch.setattr(e2e, "run_scenario", lambda name, options: {
        "policy": options.policy, "jobs": 2, "completed": 2, "agents_failed": {}, "details": {}})
    monkeypatch.setattr(scenario, "predict", fake_predict)
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--scenario", "quick", "--policy", "tictac", "--json"]) == 0
    assert asked == [("tictac",)]
    assert json.loads(capsys.readouterr().out)["sim"]["tictac"] == {"mean_jct_s": 2.5, "background_mbit_mean": 40.0}


@pytest.mark.parametrize("extra, message", [
    (["--dl-share", "0"], "--dl-share: must be within (0, 1]"),
    (["--seed", "-1"], "seed: must be within [0, inf)"),
    (["--drift-s", "0", "--policy", "none"], "--drift-s: must be positive"),
    (["--prefix", "Bad"], "prefix: bad prefix 'Bad'"),
])
def test_bad_run_options_exit_2_naming_the_field_before_anything_runs(monkeypatch, capsys, extra, message):
    ran = []
    monkeypatch.setattr(e2e, "run_scenario", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", *extra]) == 2
    assert message in capsys.readouterr().err
    assert ran == []


@pytest.mark.parametrize("policy,ingress,enforced", [
    ("jit", None, True), ("jit", False, False), ("none", None, False), ("none", True, False),
])
def test_ingress_ordering_is_on_by_default_under_jit_only(monkeypatch, policy, ingress, enforced):
    seen = []
    monkeypatch.setattr(e2e, "run_workload", lambda sc, name, options: seen.append(options.enforce_ingress) or {})
    e2e.run_scenario("quick", policy=policy, ingress=ingress)
    assert seen == [enforced]


def test_run_scenario_takes_options_and_keyword_overrides(monkeypatch):
    seen = []
    monkeypatch.setattr(e2e, "run_workload", lambda sc, name, options: seen.append((sc, name, options)) or {})
    base = TestbedOptions(policy="none", link_mbit=50.0, alpha=0.4)
    e2e.run_scenario("paper-mini", base)
    e2e.run_scenario("paper-mini", base, policy="jit", seed=2)
    e2e.run_scenario("quick", link_mbit=20.0)
    assert [(name, opts) for _, name, opts in seen] == [
        ("paper-mini", base), ("paper-mini", replace(base, policy="jit", seed=2)),
        ("quick", TestbedOptions(link_mbit=20.0))]
    assert seen[0][0] == SCENARIOS["paper-mini"]
    # a scenario with a critical job runs twice on one testbed (jitsched.testbed.classes)
    from jitsched.testbed import classes

    monkeypatch.setattr(classes, "run_classes", lambda sc, name, options: seen.append(("classes", name)) or {})
    e2e.run_scenario("classes", base)
    assert seen[-1] == ("classes", "classes") and len(seen) == 4
    # the policy second, as before the options object: a clear error, not a silent mix-up
    with pytest.raises(TypeError, match="policy='none'"):
        e2e.run_scenario("quick", "none")
    with pytest.raises(TypeError, match="no_such_field"):
        e2e.run_scenario("quick", no_such_field=1)
    with pytest.raises(ValidationError, match="link_mbit"):
        e2e.run_scenario("quick", base, link_mbit=0.0)
    assert len(seen) == 4


@pytest.mark.parametrize("completed, failed, rc", [(2, {}, 0), (1, {}, 1), (2, {"h3": "OSError: gone"}, 1)])
def test_run_exits_1_when_a_job_or_an_agent_failed(monkeypatch, capsys, completed, failed, rc):
    # every job done is not enough: a host whose agent stopped ran unordered
    monkeypatch.setattr(e2e, "run_scenario", lambda name, options: {
        "policy": "jit", "jobs": 2, "completed": completed, "agents_failed": failed, "details": {}})
    monkeypatch.setattr(scenario, "predict", lambda name, seed, **kw: {
        pol: {"mean_jct_s": 1.0, "background_mbit_mean": 1.0} for pol in ("jit", "tensorflow")})
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--scenario", "quick", "--json"]) == rc
    err = capsys.readouterr().err
    assert ("agents stopped with an error: {'h3': 'OSError: gone'}" in err) == bool(failed)


def test_run_says_on_stderr_why_each_job_did_not_complete(monkeypatch, capsys):
    refusal = "the daemon refused job 'job-1': invalid_job: 62 nodes, over the limit of 10 nodes"
    monkeypatch.setattr(e2e, "run_scenario", lambda name, options: {
        "policy": "jit", "jobs": 2, "completed": 1, "agents_failed": {},
        "details": {"errors": {"job-1": refusal}}})
    monkeypatch.setattr(scenario, "predict", lambda name, seed, **kw: {
        pol: {"mean_jct_s": 1.0, "background_mbit_mean": 1.0} for pol in ("jit", "tensorflow")})
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--scenario", "quick", "--json"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["details"]["errors"] == {"job-1": refusal}
    assert err.splitlines() == ["testbed run: 1 of 2 jobs did not complete", f"testbed run: job-1: {refusal}"]


def test_the_errors_of_a_run_include_the_classes_scenarios_own_runs():
    from jitsched.cli.testbed import run_errors

    out = {"details": {"errors": {"job-2": "timed out"}, "isolated": {"errors": {"crit": "refused"}},
                       "with_files": {"errors": {}}}}
    assert run_errors(out) == {"job-2": "timed out", "isolated: crit": "refused"}
    assert run_errors({"details": {}}) == {}


def _file_workload(tmp_path, bps=1e9):
    from jitsched.dag.model import Background, Cluster, Workload, save_workload
    from jitsched.workloads.paper import load_model_job

    cluster = Cluster.uniform(3, bps, prefix="node")
    wl = Workload(cluster, (load_model_job("lenet", "node2", "node0", "mine", 0.5),),
                  (Background("copy", "node1", "node2", 4e6, 0.0),))
    path = tmp_path / "mine.json"
    save_workload(wl, path)
    return path


def test_run_workload_file_runs_it_and_predicts_the_same_jobs(monkeypatch, capsys, tmp_path):
    path = _file_workload(tmp_path)
    ran, predicted, given = [], [], []

    def fake_run(p, options, loaded):
        ran.append((p, options))
        given.append(loaded)
        return {"policy": options.policy, "jobs": 1, "completed": 1, "agents_failed": {}, "details": {}}

    monkeypatch.setattr(e2e, "run_workload_file", fake_run)

    def fake_predict(name, seed=0, *, workload=None, **kw):
        predicted.append((workload, kw["link_mbit"]))
        return {pol: {"mean_jct_s": 1.0, "background_mbit_mean": 2.0} for pol in ("jit", "tensorflow")}

    monkeypatch.setattr(scenario, "predict", fake_predict)
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--workload", str(path), "--link-mbit", "50", "--json"]) == 0
    assert ran == [(str(path), TestbedOptions(link_mbit=50.0))]
    # the file is read once: the run gets the workload the command read
    assert [[j.id for j in w.jobs] for w in given] == [["mine"]]
    [((wl, bg), link)] = predicted
    # the file's hosts as h0.. in order, its bytes scaled by 50 Mbit/s over its 1 Gbit/s
    assert link == 50.0 and wl.cluster.names == ["h0", "h1", "h2"]
    assert {(t.src, t.dst) for t in wl.jobs[0].transfers} == {("h2", "h0"), ("h0", "h2")}
    assert [(b.id, b.src, b.dst, b.bytes) for b in bg] == [("copy", "h1", "h2", 2e5)]
    assert json.loads(capsys.readouterr().out)["sim"]["jit"]["mean_jct_s"] == 1.0


@pytest.mark.parametrize("argv_extra, message", [
    (["--scenario", "quick"], "--scenario and --workload name two workloads"),
    ([], "no such file"),
])
def test_run_workload_file_errors_exit_2_before_anything_runs(monkeypatch, capsys, tmp_path, argv_extra, message):
    ran = []
    monkeypatch.setattr(e2e, "run_workload_file", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(e2e, "run_scenario", lambda *a, **k: ran.append(a))
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    path = _file_workload(tmp_path) if argv_extra else tmp_path / "missing.json"
    assert main(["testbed", "run", "--workload", str(path), *argv_extra]) == 2
    assert message in capsys.readouterr().err
    assert ran == []


def test_run_of_a_scenario_and_a_workload_is_one_error_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    path = _file_workload(tmp_path)
    assert main(["testbed", "run", "--workload", str(path), "--scenario", "quick"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "jitsched testbed: error: --scenario and --workload name two workloads; give one"]


def test_run_without_a_scenario_or_a_workload_runs_quick(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(e2e, "run_scenario", lambda name, options: ran.append(name) or {
        "policy": options.policy, "jobs": 1, "completed": 1, "agents_failed": {}, "details": {}})
    monkeypatch.setattr(scenario, "predict", lambda name, seed, **kw: {
        pol: {"mean_jct_s": 1.0, "background_mbit_mean": 1.0} for pol in ("jit", "tensorflow")})
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--json"]) == 0
    assert ran == ["quick"]


def test_measure_ended_by_sigterm_tears_its_testbed_down(netns_available):
    import os
    import signal
    import subprocess
    import sys
    import time
    import uuid

    from jitsched import netns as netns_mod
    from jitsched import testbed

    prefix = "rv" + uuid.uuid4().hex[:6]
    proc = subprocess.Popen([sys.executable, "-m", "jitsched", "testbed", "measure", "--prefix", prefix,
                             "--slots", "600"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60.0
        while not (testbed.STATE_DIR / f"{prefix}.json").exists() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        assert len(netns_mod.list_netns(prefix)) == 3  # up: the measurement is under way
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        proc.wait(30.0)
        assert proc.returncode != 0
        assert netns_mod.list_netns(prefix) == []
        assert not (testbed.STATE_DIR / f"{prefix}.json").exists()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10.0)
        proc.stderr.close()
        testbed.down(prefix)
