"""The class scenarios: a critical job measured alone then among normal jobs and files on its ports, on the namespace testbed.

The run needs root and network namespaces (fails with the reason unless
JITSCHED_NO_NETNS=1 asks to skip); the rest reads built workloads and stats.
"""

from __future__ import annotations

import multiprocessing
import uuid

import pytest

from jitsched import netns as netns_mod
from jitsched import testbed
from jitsched.testbed.classes import admission, carried
from jitsched.testbed.e2e import run_scenario
from jitsched.testbed.scenario import SCENARIOS, Scenario, build_workload, critical_files


def test_the_classes_scenario_has_one_critical_job_and_a_file_on_each_of_its_ports():
    wl, bg = build_workload(4, 100.0, "classes", seed=0)
    [crit] = [j for j in wl.jobs if j.job_class == "critical"]
    assert crit.id == "vgg16-critical" and len(wl.jobs) == SCENARIOS["classes"].jobs + 1
    assert {j.job_class for j in wl.jobs if j is not crit} == {"normal"}
    ps, worker = "h0", "h1"
    assert {(t.src, t.dst) for t in crit.transfers} == {(ps, worker), (worker, ps)}
    # it arrives among the others: some before it, some after
    others = sorted(j.arrival_s for j in wl.jobs if j is not crit)
    assert others[0] <= crit.arrival_s <= others[-1]
    # every file from 0 s, one out of and one into each of its hosts, no other port shared
    assert [(f.src, f.dst, f.arrival_s) for f in bg] == [("h0", "h2", 0.0), ("h3", "h1", 0.0),
                                                         ("h1", "h3", 0.0), ("h2", "h0", 0.0)]
    # 20 Gbit at 1 Gbit/s scaled to 100 Mbit/s: 20 s of the link each
    assert all(f.bytes == 2.5e8 for f in bg)
    # the same seed, the same workload; the other scenarios have no critical job
    assert build_workload(4, 100.0, "classes", seed=0)[0] == wl
    assert all(j.job_class == "normal" for j in build_workload(4, 100.0, "quick", seed=0)[0].jobs)


def test_critical_files_need_a_third_host_and_take_turns_on_the_others():
    assert [(f.src, f.dst) for f in critical_files(["a", "b", "c"], [1.0] * 5)] == [
        ("a", "c"), ("c", "b"), ("b", "c"), ("c", "a"), ("a", "c")]
    with pytest.raises(testbed.TestbedError, match="third host"):
        critical_files(["a", "b"], [1.0])


STATS = {"epsilon": 0.05, "refused": 0, "admitted_as_normal": 0, "classes": {"c": "critical"},
         "reservations": {"c": {"start_s": 0.2, "isolated_jct_s": 4.0, "target_jct_s": 4.2,
                                "max_rate_Bps": {"t0": 1e7, "t1": 5e6, "t2": 0.0, "t3": 1e6}}}}


def test_admission_reads_the_daemons_decision():
    assert admission(STATS, "c") == {"decision": "admitted", "epsilon": 0.05, "guarantee": None,
                                     "isolated_jct_s": 4.0, "target_jct_s": 4.2, "start_s": 0.2}
    # the daemon's verdict on its finish
    assert admission(STATS | {"verdicts": {"c": "missed"}}, "c")["guarantee"] == "missed"
    assert admission(STATS | {"verdicts": {"c": "met", "d": "missed"}}, "c")["guarantee"] == "met"
    assert admission(STATS | {"verdicts": {"d": "missed"}}, "c")["guarantee"] is None  # another job's
    demoted = STATS | {"classes": {"c": "normal"}, "reservations": {}, "admitted_as_normal": 1}
    assert admission(demoted, "c") == {"decision": "admitted as normal", "epsilon": 0.05, "guarantee": None}
    refused = STATS | {"classes": {}, "reservations": {}, "refused": 1}
    assert admission(refused, "c")["decision"] == "refused"
    assert admission({}, "c") == {"decision": None}


def test_carried_counts_the_reserved_flows_the_agents_gave_their_rate():
    agents = {"agent-h0": {"watched_max_Bps": {"c/t0": 1e7, "c/t1": 4e6}},
              "agent-h1": {"watched_max_Bps": {"c/t1": 4.5e6, "c/t2": 3e6}}, "agent-h2": {}}
    # t2 has no reserved rate; t3 was never scheduled (unregistered); t1 got less than its reservation
    assert carried(STATS, agents, "c") == {"transfers": 3, "registered": 2, "carried": 1}
    assert carried({}, agents, "c") == {"transfers": 0, "registered": 0, "carried": 0}


@pytest.fixture
def tiny_classes(monkeypatch, netns_available):
    # 3 hosts: a critical AlexNet (h0 -> h1 and back), one LeNet, two 5-Gbit files (62.5 MB
    # at 100 Mbit/s) on the critical job's ports: ~10 s alone, ~15 s with the others
    monkeypatch.setitem(SCENARIOS, "tiny-classes", Scenario(
        hosts=3, jobs=1, rate_per_s=2.0, models=("lenet",), files=2, file_gbit=(5.0,), file_lead_s=1.0,
        critical_model="alexnet"))
    prefix = "c" + uuid.uuid4().hex[:6]
    bands = []
    real_up = testbed.up

    def up(*a, **kw):  # the switch ports' critical band of each testbed the run builds
        bands.append(kw.get("critical_tos"))
        return real_up(*a, **kw)

    monkeypatch.setattr(testbed, "up", up)
    try:
        yield prefix, bands
    finally:
        testbed.down(prefix)


def test_a_critical_job_is_admitted_and_its_flows_carry_their_reserved_rates(tiny_classes):
    from jitsched.testbed.e2e import CRITICAL_TOS

    prefix, bands = tiny_classes
    out = run_scenario("tiny-classes", policy="jit", seed=0, prefix=prefix, timeout_s=90.0, measure_slots=0)
    assert bands == [CRITICAL_TOS]  # one testbed for the three runs, its switch ports with the band
    # the critical job alone, alone beside the files, then with the LeNet
    assert out["jobs"] == 4 and out["completed"] == 4, out["details"]["errors"]
    assert out["agents_failed"] == {}
    assert out["critical_job"] == "alexnet-critical"
    iso, jct = out["critical_isolated_jct_s"], out["critical_jct_s"]
    assert 0.0 < iso < 60.0 and 0.0 < jct < 60.0
    assert out["critical_over_isolated"] == pytest.approx(jct / iso)
    # beside the files alone: their floor is a share of its ports, so it is slower than alone
    files = out["critical_with_files_jct_s"]
    assert iso < files < 60.0
    assert out["files_over_isolated"] == pytest.approx(files / iso)
    assert out["critical_over_with_files"] == pytest.approx(jct / files)
    lag = out["critical_runner_lag_s"]
    assert set(lag) == {"isolated", "with_files", "whole"} and all(-1e-3 <= x < 5.0 for x in lag.values()), lag
    assert out["critical_ideal_over_isolated"] == pytest.approx((jct - lag["whole"]) / (iso - lag["isolated"]))
    assert out["details"]["with_files"]["background_completed"] == "2/2"
    assert set(out["details"]["with_files"]["jct_s"]) == {"alexnet-critical"}
    assert out["normal_mean_jct_s"] == out["details"]["jct_s"]["lenet-0"]
    # admitted in both runs, each by a daemon of its own, for (1 + eps) of the simulated isolated JCT
    for adm in (out["admission"], out["details"]["isolated"]["admission"], out["details"]["with_files"]["admission"]):
        assert adm["decision"] == "admitted" and adm["epsilon"] == 0.05
        assert adm["target_jct_s"] >= 1.05 * adm["isolated_jct_s"] > 0
        assert adm["guarantee"] in ("met", "missed")  # the daemon judged its finish
    # the agents gave its scheduled transfers their reserved rates
    res = out["critical_reserved"]
    assert res["transfers"] > 0 and 0 < res["carried"] <= res["registered"] <= res["transfers"], res
    # and alone (11, 12 and 12 of the 12 registered in three runs, idle or with two busy cores)
    assert out["details"]["isolated"]["critical_reserved"]["carried"] > 0
    # the files were on its ports during the shared run, and none in the run alone
    assert out["background_completed"] == "2/2"
    assert set(out["details"]["isolated"]["jct_s"]) == {"alexnet-critical"}
    assert not netns_mod.list_netns(prefix)
    assert not multiprocessing.active_children()
