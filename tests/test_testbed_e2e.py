"""End to end on the namespace testbed: real daemon (jit, HiGHS), tc agents, runners moving TCP bytes, background flows.

Needs root and network namespaces (CI has both): fails with the reason
instead of skipping, unless JITSCHED_NO_NETNS=1 asks to skip. The run tears
its testbed down in a ``finally`` (checked below) even when it fails.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import subprocess
import sys
import time
import uuid

import pytest

from jitsched import netns as netns_mod
from jitsched import testbed
from jitsched.errors import ValidationError
from jitsched.testbed import e2e
from jitsched.testbed.e2e import run_scenario
from jitsched.testbed.scenario import SCENARIOS, Scenario, build_workload


@pytest.fixture
def tiny(monkeypatch, netns_available):
    # 3 hosts, LeNet and AlexNet, one 5 Gbit file (62.5 MB at 100 Mbit/s): ~10 s per policy
    monkeypatch.setitem(SCENARIOS, "tiny", Scenario(hosts=3, jobs=2, rate_per_s=2.0,
                                                    models=("lenet", "alexnet"), files=1,
                                                    file_gbit=(5.0,), file_lead_s=1.0))
    prefix = "e" + uuid.uuid4().hex[:6]
    try:
        yield prefix
    finally:
        testbed.down(prefix)


# each ranking policy once, and none (sincronia runs the jobs of many workers below)
@pytest.mark.parametrize("policy,ingress,spare,procs,channels,announce", [
    ("jit", False, "background", 1, False, False), ("jit", True, "shared", 2, True, True),
    ("none", False, "background", 2, True, False), ("tictac", False, "background", 1, False, True),
    ("varys", True, "background", 2, False, False)])
def test_scenario_runs_jobs_and_background_then_tears_down(tiny, policy, ingress, spare, procs, channels,
                                                           announce, capfd):
    # procs 2: each of the two jobs in a runner process of its own; 1: both in one;
    # channels: the small transfers on kept connections; announce: the file tells the daemon
    out = run_scenario("tiny", policy=policy, seed=1, prefix=tiny, timeout_s=60.0, measure_slots=0,
                       ingress=ingress, spare=spare, runner_procs=procs, channels=channels,
                       announce_files=announce)
    assert out["policy"] == policy and out["jobs"] == 2
    assert out["completed"] == 2, out["details"]["errors"]
    assert out["lat_hit_rate"] is not None and 0.0 <= out["lat_hit_rate"] <= 1.0
    # real bytes over shaped links: no job beats its busier direction at 100 Mbit/s
    wl, _ = build_workload(3, 100.0, "tiny", seed=1)
    for job in wl.jobs:
        per_dir: dict = {}
        for t in job.transfers:
            per_dir[t.src] = per_dir.get(t.src, 0.0) + t.bytes
        floor = max(per_dir.values()) * 8 / 100e6
        assert floor <= out["details"]["jct_s"][job.id] < 60.0, (job.id, floor, out["details"]["jct_s"])
        # every transfer's [start, duration] lies within its job
        spans = out["details"]["transfers"][job.id]
        assert set(spans) == {t.id for t in job.transfers}
        assert all(0.0 <= a and a + d <= out["details"]["jct_s"][job.id] for a, d in spans.values())
    # the file was moving while the jobs ran, at no more than the line rate
    bg = out["details"]["background"]
    assert set(bg) == {"file-0"} and bg["file-0"]["bytes"] > 0, bg
    assert 0.0 < out["background_mbit_mean"] <= 100.0
    # the longest time the file's receiver read nothing: within its life, the run's figure its file's
    stall = bg["file-0"]["max_stall_s"]
    assert out["background_max_stall_s"] == stall and 0.0 < stall <= bg["file-0"]["end_s"] - bg["file-0"]["start_s"]
    # what the file shared its ports with: some DL bytes, never more than its ports carried
    [(fid, c)] = out["details"]["background_contention"].items()
    assert fid == "file-0" and c["life_s"] > 0
    assert 0.0 <= c["egress_dl_mb"] <= 12.5 * c["life_s"] and 0.0 <= c["ingress_dl_mb"] <= 12.5 * c["life_s"]
    # jit, sincronia, tictac: the daemon planned; none: it only kept the books, nothing was enforced
    assert (out["details"]["daemon"]["plans"] >= 1) if policy != "none" else out["rate_accuracy_p50"] is None
    if policy != "none":
        # senders register every large transfer; receivers too when they enforce their ingress
        agents = out["details"]["agents"].values()
        n_out, n_in = (sum(a["registered_" + d] for a in agents) for d in ("out", "in"))
        # (a receiver's registrar skips a flow that ended before it got to it)
        # an announced file registers with its receiver's agent whether or not it orders its ingress
        assert n_out > 0 and ((0 < n_in <= n_out) if ingress else (n_in >= 1) if announce else n_in == 0), \
            (n_out, n_in)
    if announce:
        # the file announces itself, registers with both agents and keeps its socket until
        # the receiver has every byte (closed with its tail in flight, an announced file was
        # reset); a policy that does not rank background (tictac) gets the announcement all
        # the same
        assert out["background_completed"] == "1/1", out["details"]["errors"]
        assert bg["file-0"]["bytes"] == 62_500_000
        assert out["details"]["daemon"]["background"] == {"announced": 1, "restored": 0, "finished": 1,
                                                          "expired": 0, "dropped": 0}
    assert out["details"]["options"]["announce_files"] is announce
    # where the CPU went while the jobs ran, per process role, and how busy the machine was
    cpu = out["details"]["cpu_s"]
    assert set(cpu) == {"daemon", "sinks", "runners", "main"} | ({"agent"} if policy != "none" else set())
    assert cpu["runners"] > 0 and 0.0 < out["details"]["cpu_busy_during_jobs"] <= 1.0
    assert out["details"]["reconnects"] == {}  # a daemon on this machine answers in time
    # the runner's lag: every job's, never negative (no node ends before its emulated time)
    lag = out["details"]["runner_lag_s"]
    assert set(lag) == set(out["details"]["jct_s"]) and all(0.0 <= v < 5.0 for v in lag.values()), lag
    assert not netns_mod.list_netns(tiny)
    assert not multiprocessing.active_children()  # the daemon and agent processes are gone
    # the teardown stops the daemon with its agents: none of them reported down
    assert "agent_down" not in capfd.readouterr().err


@pytest.mark.parametrize("policy", ["jit", "sincronia"])
def test_jobs_of_many_workers_run_on_the_testbed(monkeypatch, tiny, policy):
    # a server with two workers, two sharded servers with one worker, a ring over the three
    # hosts: every transfer of every shape moves its bytes over the links and the jobs end
    monkeypatch.setitem(SCENARIOS, "shapes", Scenario(hosts=3, jobs=3, rate_per_s=4.0, models=("lenet",),
                                                      files=0, shape="mixed", servers=2))
    out = run_scenario("shapes", policy=policy, seed=0, prefix=tiny, timeout_s=60.0, measure_slots=0)
    assert out["jobs"] == out["completed"] == 3, out["details"]["errors"]
    wl, _ = build_workload(3, 100.0, "shapes", seed=0)
    for job in wl.jobs:
        spans = out["details"]["transfers"][job.id]
        assert set(spans) == {t.id for t in job.transfers}
        # no faster than its busiest port at 100 Mbit/s
        ports: dict = {}
        for t in job.transfers:
            for p in (("out", t.src), ("in", t.dst)):
                ports[p] = ports.get(p, 0.0) + t.bytes
        assert max(ports.values()) * 8 / 100e6 <= out["details"]["jct_s"][job.id] < 60.0
    assert out["details"]["daemon"]["plans"] >= 1
    assert not netns_mod.list_netns(tiny)


def test_a_workload_file_runs_on_the_testbed_with_its_hosts_in_order(tiny, tmp_path):
    from jitsched.dag.model import Background, Cluster, Workload, save_workload
    from jitsched.workloads.paper import load_model_job

    # a file of one's own at 1 Gbit/s: a LeNet job and a copy, on hosts of other names
    wl = Workload(Cluster.uniform(3, 1e9, prefix="gpu"), (load_model_job("lenet", "gpu2", "gpu0", "mine", 0.5),),
                  (Background("copy", "gpu1", "gpu0", 25e6, 0.0),))
    path = tmp_path / "mine.json"
    save_workload(wl, path)
    out = e2e.run_workload_file(str(path), policy="jit", prefix=tiny, timeout_s=60.0, measure_slots=0)
    assert out["details"]["scenario"] == str(path) and out["details"]["byte_scale"] == 0.1
    assert out["jobs"] == out["completed"] == 1, out["details"]["errors"]
    # its bytes at a tenth: no faster than its busier direction at 100 Mbit/s
    job = wl.jobs[0]
    floor = max(sum(t.bytes for t in job.transfers if t.src == h) for h in ("gpu0", "gpu2")) * 0.1 * 8 / 100e6
    assert floor <= out["details"]["jct_s"]["mine"] < 60.0
    assert out["background_completed"] == "1/1"
    assert out["details"]["background"]["copy"]["bytes"] == 2_500_000
    assert not netns_mod.list_netns(tiny)


def test_failed_run_still_tears_down(tiny, monkeypatch):
    import jitsched.testbed.scenario as scenario

    seen = []

    def boom(tb, *a, **k):
        seen.append(netns_mod.list_netns(tiny))  # the testbed was up when the run failed
        raise RuntimeError("workload failed")

    monkeypatch.setattr(scenario, "build_workload", boom)
    with pytest.raises(RuntimeError, match="workload failed"):
        run_scenario("tiny", policy="jit", prefix=tiny)
    assert len(seen[0]) == 4  # 3 hosts + switch
    assert not netns_mod.list_netns(tiny)
    assert not multiprocessing.active_children()
    with pytest.raises(ValidationError, match="policy: expected one of jit, jit-paper, sincronia, tictac, varys, none"):
        run_scenario("tiny", policy="nonsense", prefix=tiny)


@pytest.mark.parametrize("kw, message", [
    ({"alpha": 1.5}, "alpha"),
    ({"daemon_options": {"drift_s": -1.0}}, "drift_s"),
    ({"daemon_options": {"policy_options": {"job_order": "random"}}}, "job_order"),
    ({"daemon_options": {"no_such_option": 1}}, "no_such_option"),
    ({"daemon_options": {"policy_options": {"dl_share": 0.0}}}, "dl_share"),
    ({"daemon_options": {"max_planner_duty": 2.0}}, "max_planner_duty"),
    ({"spare": "greedy"}, "spare"),
    ({"runner_procs": 0}, "runner_procs"),
])
def test_bad_options_fail_before_the_testbed_is_built(monkeypatch, kw, message):
    built = []
    monkeypatch.setattr(testbed, "up", lambda *a, **k: built.append(a))
    with pytest.raises(ValidationError, match=message):
        run_scenario("quick", policy="jit", prefix="jsbad", **kw)
    assert built == []


def test_transfers_under_ten_milliseconds_at_the_link_rate_go_unregistered():
    from jitsched.testbed.e2e import unregistered_max_bytes

    # 10 ms at 100 Mbit/s is 125,000 bytes; at 1 Gbit/s 1.25 MB
    assert unregistered_max_bytes(100) == 125_000
    assert unregistered_max_bytes(1000) == 1_250_000
    # never below what fits in a flow class's first burst: two 1514-byte frames
    # (2 * 1448 payload) less 512 bytes of header
    assert unregistered_max_bytes(1) == 2 * 1448 - 512


def test_each_critical_job_runs_in_a_runner_process_of_its_own():
    from types import SimpleNamespace as Job

    jobs = [Job(id=i, job_class=c) for i, c in enumerate(["normal", "critical", "best-effort", "normal",
                                                           "normal", "critical"])]
    groups = [[j.id for j in g] for g in e2e.runner_groups(jobs, 2)]
    assert groups == [[1], [5], [0, 3], [2, 4]]
    assert [[j.id for j in g] for g in e2e.runner_groups(jobs[:3], 4)] == [[1], [0], [2]]
    # only critical jobs, or none at all: no empty process
    assert [[j.id for j in g] for g in e2e.runner_groups([jobs[1]], 2)] == [[1]]
    assert e2e.runner_groups([], 2) == []


def test_cpu_busy_is_the_busy_share_of_the_ticks_between_two_readings():
    assert e2e.cpu_busy((10, 100), (60, 200)) == 0.5
    assert e2e.cpu_busy((10, 100), (10, 100)) is None  # no tick between them
    busy, total = e2e.machine_cpu_ticks()
    assert 0 <= busy <= total


def test_process_cpu_counts_this_process_working_and_nan_when_gone():
    before = e2e.process_cpu_s(os.getpid())
    t_end = time.process_time() + 0.3
    while time.process_time() < t_end:
        pass
    spent = e2e.process_cpu_s(os.getpid()) - before
    assert 0.2 <= spent <= 1.0, spent  # /proc's clock ticks are 10 ms
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert math.isnan(e2e.process_cpu_s(p.pid))


@pytest.mark.parametrize("tty", [True, False])
def test_a_run_says_where_it_is_only_on_a_terminal(monkeypatch, capsys, tty):
    monkeypatch.setattr(e2e.sys.stderr, "isatty", lambda: tty)
    e2e._progress("quick: jobs done in 5.9 s")
    assert capsys.readouterr().err == ("testbed: quick: jobs done in 5.9 s\n" if tty else "")


def test_an_agent_process_that_dies_during_the_run_is_a_failed_agent(tiny, monkeypatch):
    # the agent process of h1 is killed once it is up: the run must not report jit's figures
    # as though every host had been ordered
    import signal

    class DyingAgent(e2e.Child):
        def ready(self, *args):
            got = super().ready(*args)
            if self.name == "agent-h1":
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.join(10.0)
            return got

    monkeypatch.setattr(e2e, "Child", DyingAgent)
    out = run_scenario("tiny", policy="jit", seed=1, prefix=tiny, timeout_s=60.0, measure_slots=0)
    assert "h1" in out["agents_failed"], (out["agents_failed"], out["completed"])
    assert "h0" not in out["agents_failed"] and "h2" not in out["agents_failed"]
    assert not netns_mod.list_netns(tiny)
    assert not multiprocessing.active_children()


def test_a_job_arriving_after_the_per_job_limit_still_runs(tiny, tmp_path):
    # timeout_s bounds each job from its arrival: a job arriving 11 s into the run, past a
    # 5 s limit and its 5 s grace counted from the start, runs and completes like the one at 0 s
    from jitsched.dag.model import Cluster, Workload, save_workload
    from jitsched.workloads.paper import load_model_job

    wl = Workload(Cluster.uniform(2, 1e9), (load_model_job("lenet", "h0", "h1", "early", 0.0),
                                            load_model_job("lenet", "h1", "h0", "late", 11.0)))
    path = tmp_path / "late.json"
    save_workload(wl, path)
    out = e2e.run_workload_file(str(path), policy="none", prefix=tiny, timeout_s=5.0, measure_slots=0,
                                runner_procs=1)
    assert out["jobs"] == out["completed"] == 2, out["details"]["errors"]
    assert out["details"]["jct_s"]["late"] < 5.0
    assert not netns_mod.list_netns(tiny)
    assert not multiprocessing.active_children()


def test_a_job_the_daemon_refuses_is_in_the_runs_errors_with_the_daemons_reason(tiny, tmp_path):
    # the daemon holds jobs to 10 nodes: LeNet's 62 are refused, the 3-node job runs
    from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload, save_workload
    from jitsched.workloads.paper import load_model_job

    small = Job("small", (Compute("c0", "h0", 0.01), Compute("c1", "h1", 0.01)),
                (Transfer("t0", "h0", "h1", 1e6),), (("c0", "t0"), ("t0", "c1")))
    wl = Workload(Cluster.uniform(2, 1e9), (small, load_model_job("lenet", "h0", "h1", "big", 0.0)))
    path = tmp_path / "refused.json"
    save_workload(wl, path)
    out = e2e.run_workload_file(str(path), policy="none", prefix=tiny, timeout_s=30.0, measure_slots=0,
                                runner_procs=1, daemon_options={"max_job_nodes": 10})
    assert (out["jobs"], out["completed"]) == (2, 1), out["details"]["errors"]
    why = out["details"]["errors"]["big"]
    assert why.startswith("the daemon refused job 'big': invalid_job: ") and "max_job_nodes" in why, why
    assert "small" not in out["details"]["errors"]
    assert not netns_mod.list_netns(tiny)
    assert not multiprocessing.active_children()
