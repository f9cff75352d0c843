"""Real PyTorch jobs on the namespace testbed: two Gloo parameter-server jobs beside files, their connections attached and ranked by tc agents.

Needs root and network namespaces (CI has both) and torch (in the test lock).
"""

from __future__ import annotations

import json
import uuid

import pytest

import jitsched.testbed.scenario as scenario
import jitsched.testbed.torchjobs as torchjobs
from jitsched import testbed
from jitsched.cli import main
from jitsched.testbed.options import TestbedOptions
from jitsched.testbed.torchjobs import TORCH_SCENARIOS, TorchScenario, run_torch_scenario

# Two jobs whose servers share h0, 20 steps of a 0.31 MB model, a 3-second file each way of h0 -> h1
TINY = TorchScenario(hosts=3, jobs=((0, 1), (0, 2)), iterations=20, width=256, depth=2, batch=32,
                     files=((0, 1), (1, 0)), file_link_s=3.0, file_lead_s=0.5, train_s=60.0)


def test_param_bytes_are_the_example_models():
    torch = pytest.importorskip("torch")
    for sc in (TINY, TORCH_SCENARIOS["torch-ps"]):
        layers, width_in = [], 32
        for _ in range(sc.depth):
            layers += [torch.nn.Linear(width_in, sc.width), torch.nn.ReLU()]
            width_in = sc.width
        model = torch.nn.Sequential(*layers, torch.nn.Linear(width_in, 10))
        assert sc.param_bytes() == sum(p.numel() * p.element_size() for p in model.parameters())


def test_two_torch_jobs_train_beside_the_files_their_connections_classified_and_ranked(netns_available):
    pytest.importorskip("torch")
    prefix = "tt" + uuid.uuid4().hex[:6]
    try:
        out = run_torch_scenario("tiny", TestbedOptions(policy="jit", prefix=prefix, timeout_s=60.0), TINY)
    finally:
        testbed.down(prefix)
    d = out["details"]
    assert (out["jobs"], out["completed"]) == (2, 2), d["errors"]
    assert not out["agents_failed"] and out["background_completed"] == "2/2"
    # a step moves the parameters out and the gradients back over 100 Mbit/s links
    assert 2 * TINY.param_bytes() * 8 / 100e6 < out["iteration_s_mean"] < 10.0
    assert 0.0 < out["background_mbit_mean"] < 100.0
    assert 0.0 <= out["background_max_stall_s"] < 60.0
    layers = TINY.depth + 1
    for k, (ps, worker) in enumerate(TINY.jobs):
        job = d["jobs"][f"torch-{k}"]
        assert job["sdk"]["registrations"] == 1 and job["sdk"]["dropped"] == 0
        # the DAG the adapter captured: a pull, a forward, a backward and a push per layer
        daemon = job["daemon"]
        assert (daemon["computes"], daemon["transfers"]) == (2 * layers, 2 * layers)
        assert daemon["recurring"]["iterations"] == TINY.iterations
        # both ends' agents found the job's Gloo connections and ranked them: the
        # parameters leave the server's host, the gradients the worker's, all classified
        for h in (f"h{ps}", f"h{worker}"):
            a = job["attached"][h]
            assert a["pids"] == 1 and a["unmapped"] == 0 and a["rank"] is not None, (h, a)
            # the bytes of the steps before the SDK attached (it registers the DAG the first
            # step captured, then attaches) go unseen: on a cold machine up to half of these
            # 20 short steps; the rest must be seen
            assert a["bytes_sent"] >= TINY.iterations * TINY.param_bytes() * 0.25, (h, a)
            assert a["bytes_classified"] >= 0.9 * a["bytes_sent"], (h, a)
            assert job["classified_share"][h] == a["bytes_classified"] / (TINY.iterations * TINY.param_bytes())
    assert not testbed.list_netns(prefix)


def test_testbed_run_lists_and_runs_the_torch_scenario(monkeypatch, capsys):
    got = {}

    def fake(name, options):
        got.update(name=name, options=options)
        return {"policy": options.policy, "jobs": 2, "completed": 2, "iteration_s_mean": 0.5,
                "background_mbit_mean": 40.0, "agents_failed": {}, "details": {}}

    monkeypatch.setattr(torchjobs, "run_torch_scenario", fake)
    monkeypatch.setattr(scenario, "require_daemon_side", lambda: None)
    assert main(["testbed", "run", "--scenario", "torch-ps", "--policy", "sincronia", "--prefix", "torchq",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["iteration_s_mean"] == 0.5 and out["background_mbit_mean"] == 40.0
    assert got["name"] == "torch-ps" and got["options"].policy == "sincronia" and got["options"].prefix == "torchq"
    with pytest.raises(SystemExit):
        main(["testbed", "run", "--help"])
    assert "torch-ps" in capsys.readouterr().out


def test_a_rank_that_fails_is_reported_and_the_testbed_still_comes_down(netns_available):
    # --width 0: each rank refuses its arguments and exits 2 before training
    bad = TorchScenario(hosts=3, jobs=((0, 1),), iterations=2, width=0, depth=1, batch=1, files=((0, 1),),
                        file_link_s=1.0, train_s=30.0)
    prefix = "tt" + uuid.uuid4().hex[:6]
    try:
        out = run_torch_scenario("bad", TestbedOptions(policy="none", prefix=prefix, timeout_s=30.0), bad)
    finally:
        testbed.down(prefix)
    assert (out["jobs"], out["completed"], out["iteration_s_mean"]) == (1, 0, None)
    assert "exited with 2" in out["details"]["errors"]["torch-0/ps"]
    assert out["background_completed"] == "0/1"  # the files wait for the ranks, which never came up
    assert not testbed.list_netns(prefix)
