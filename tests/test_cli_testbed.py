"""The ``testbed`` command's wiring: ``run`` passes its options to the scenario runner."""

from __future__ import annotations

import json

import pytest

import jitsched.testbed.e2e as e2e
import jitsched.testbed.scenario as scenario
from jitsched.cli import main


@pytest.mark.parametrize("extra,more", [
    ([], {"ingress": None}),
    (["--ingress"], {"ingress": True}),
    (["--no-ingress"], {"ingress": False}),
    (["--alpha", "0.7", "--job-order", "smallest", "--drift-s", "0.5", "--early-s", "0.25"],
     {"ingress": None, "alpha": 0.7,
      "daemon_options": {"policy_options": {"job_order": "smallest"}, "drift_s": 0.5, "early_s": 0.25}}),
    (["--dl-share", "0.6"], {"ingress": None, "daemon_options": {"policy_options": {"dl_share": 0.6}}}),
    (["--spare", "shared"], {"ingress": None, "spare": "shared"}),
    (["--planning", "incremental", "--max-planner-duty", "0.33"],
     {"ingress": None, "daemon_options": {"planning": "incremental", "max_planner_duty": 0.33}}),
    # the link rate reaches the run and the prediction (it was accepted and ignored)
    (["--link-mbit", "50"], {"ingress": None, "link_mbit": 50.0}),
])
def test_run_passes_scenario_policy_seed_and_options(monkeypatch, capsys, extra, more):
    calls = []

    def fake_run(name, policy, **kw):
        calls.append((name, policy, kw))
        return {"policy": policy, "jobs": 2, "completed": 2, "details": {}}

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
    assert calls == [("paper-mini", "jit", {"seed": 3, "prefix": "tq", "link_mbit": None, **more})]
    out = json.loads(capsys.readouterr().out)
    assert out["completed"] == 2
    # the simulator's prediction of the same workload with the same policy options
    opts = more.get("daemon_options", {}).get("policy_options", {})
    assert predicted == [("paper-mini", 3, {"link_mbit": more.get("link_mbit"), "alpha": more.get("alpha"),
                                            "job_order": opts.get("job_order"),
                                            "dl_share": opts.get("dl_share")})]
    assert out["sim"] == {"jit": {"mean_jct_s": 2.0, "background_mbit_mean": 40.0},
                          "tensorflow": {"mean_jct_s": 3.0, "background_mbit_mean": 30.0}}


@pytest.mark.parametrize("policy,ingress,enforced", [
    ("jit", None, True), ("jit", False, False), ("none", None, False), ("none", True, False),
])
def test_ingress_ordering_is_on_by_default_under_jit_only(monkeypatch, policy, ingress, enforced):
    import jitsched.testbed.e2e as e2e

    seen = []
    monkeypatch.setattr(e2e, "_run", lambda *a: seen.append(a[12]) or {})
    e2e.run_scenario("quick", policy, ingress=ingress)
    assert seen == [enforced]
