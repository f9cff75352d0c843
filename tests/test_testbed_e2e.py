"""End to end on the namespace testbed: real daemon (jit, HiGHS), tc agents, runners moving TCP bytes, background flows.

Needs root and network namespaces (CI has both): fails with the reason
instead of skipping, unless JITSCHED_NO_NETNS=1 asks to skip. The run tears
its testbed down in a ``finally`` (checked below) even when it fails.
"""

from __future__ import annotations

import os
import uuid

import pytest

from jitsched import testbed
from jitsched.testbed import netns as netns_mod
from jitsched.testbed.e2e import run_scenario
from jitsched.testbed.scenario import SCENARIOS


@pytest.fixture
def tiny(monkeypatch):
    if os.environ.get("JITSCHED_NO_NETNS") == "1":
        pytest.skip("JITSCHED_NO_NETNS=1: network-namespace tests disabled by the user")
    try:
        netns_mod.require_netns()
    except netns_mod.TestbedError as exc:
        pytest.fail(f"network namespaces unavailable: {exc} (set JITSCHED_NO_NETNS=1 to skip)")
    # 3 hosts, 2 jobs, 1 background file: a few seconds per policy
    monkeypatch.setitem(SCENARIOS, "tiny", dict(hosts=3, jobs=2, rate_per_s=2.0, background=1,
                                                bg_mb=25.0, link_mbit=100.0))
    prefix = "e" + uuid.uuid4().hex[:6]
    try:
        yield prefix
    finally:
        testbed.down(prefix)


@pytest.mark.parametrize("policy", ["jit", "none"])
def test_scenario_runs_jobs_and_background_then_tears_down(tiny, policy):
    out = run_scenario("tiny", policy, seed=1, prefix=tiny, timeout_s=30.0)
    assert out["policy"] == policy and out["jobs"] == 2
    assert out["completed"] == 2, out["details"]["errors"]
    assert 0.0 < out["mean_jct_s"] < 30.0
    assert out["lat_hit_rate"] is not None and 0.0 <= out["lat_hit_rate"] <= 1.0
    bg = out["details"]["background"]
    assert bg and all(r.get("complete") for r in bg.values()), bg
    # background really crossed a 100 Mbit/s link: some throughput, never above the line rate
    assert 0.0 < out["background_mbit_mean"] <= 100.0
    assert not [n for n in netns_mod.list_netns(tiny)]


def test_failed_run_still_tears_down(tiny, monkeypatch):
    import jitsched.testbed.scenario as scenario

    seen = []

    def boom(tb, *a, **k):
        seen.append(netns_mod.list_netns(tiny))  # the testbed was up when the run failed
        raise RuntimeError("workload failed")

    monkeypatch.setattr(scenario, "build_workload", boom)
    with pytest.raises(RuntimeError, match="workload failed"):
        run_scenario("tiny", "jit", prefix=tiny)
    assert len(seen[0]) == 4  # 3 hosts + switch
    assert not netns_mod.list_netns(tiny)
    with pytest.raises(testbed.TestbedError, match="unknown policy"):
        run_scenario("tiny", "nonsense", prefix=tiny)
