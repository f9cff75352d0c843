"""Tests of the planner child process: it imports the daemon's own jitsched wherever it starts,
passes a self-test before it plans, and when it cannot the daemon plans in a thread and says so."""

import sys
import time
import urllib.request

import numpy as np
import pytest

import jitsched
import jitsched.daemon.solver as solver
from jitsched.client import Client
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.daemon.solver import PlannerProcess, PlannerStartError
from jitsched.dag.model import Cluster
from jitsched.policies import POLICIES, make_policy
from jitsched.policies.jit import JitPolicy
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job
from tests.test_daemon import _free_port, config
from tests.test_daemon_limits import failing_policy


def wait_ready(proc: PlannerProcess, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not proc.ready():  # raises PlannerStartError if the child cannot plan
        assert time.monotonic() < deadline, "planner child never became ready"
        time.sleep(0.05)


def decoy(root, init: str = "", solver_py: str | None = None):
    """A ``jitsched`` package under ``root`` that is not the daemon's."""
    pkg = root / "jitsched"
    (pkg / "daemon").mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    (pkg / "daemon" / "__init__.py").write_text("")
    if solver_py is not None:
        (pkg / "daemon" / "solver.py").write_text(solver_py)
    return root


def test_planner_child_ignores_a_jitsched_in_the_working_directory(tmp_path, monkeypatch):
    # A daemon of an installed jitsched started from a source checkout: the
    # checkout's package (here one that cannot even import) must not shadow
    # the daemon's own in the child, or every full re-solve fails.
    decoy(tmp_path, init="raise ImportError('the shadow package was imported')\n")
    monkeypatch.chdir(tmp_path)
    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    try:
        wait_ready(proc)
        assert proc.started and proc.jitsched_file == jitsched.__file__
    finally:
        proc.close()



def test_a_child_closed_before_it_is_ready_is_killed_and_one_that_is_ready_exits():
    import signal

    early = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    popen = early._proc
    early.close()  # still importing: nothing to wait for
    assert popen.returncode == -signal.SIGKILL and early.pid is None
    ready = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    popen = ready._proc
    wait_ready(ready)
    ready.close()  # asked to exit, and it does
    assert popen.returncode == 0

# A decoy that would pass for the planner: it answers "ready" with its own file.
PASSING_DECOY = """\
import jitsched


def main(conn):
    conn.recv()
    conn.send(("ready", jitsched.__file__, ""))
    return 0
"""


def test_planner_child_imports_the_daemons_jitsched_despite_a_working_decoy(tmp_path, monkeypatch):
    # the decoy is importable, in the working directory and on PYTHONPATH: the child
    # still reports the very file the daemon imported
    decoy(tmp_path, solver_py=PASSING_DECOY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    try:
        wait_ready(proc)
        assert proc.jitsched_file == jitsched.__file__
        assert not proc.jitsched_file.startswith(str(tmp_path))
    finally:
        proc.close()


def test_child_of_another_jitsched_is_refused(tmp_path, monkeypatch):
    # should the child still end up with another jitsched, it does not plan
    decoy(tmp_path, solver_py=PASSING_DECOY)
    monkeypatch.setattr(solver, "child_path", lambda: [str(tmp_path)] + sys.path)
    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    try:
        with pytest.raises(PlannerStartError, match="the planner process imported .*, the daemon "):
            wait_ready(proc)
    finally:
        proc.close()


def test_child_that_cannot_import_says_why(tmp_path, monkeypatch):
    decoy(tmp_path, init="raise ImportError('decoy jitsched')\n")
    monkeypatch.setattr(solver, "child_path", lambda: [str(tmp_path)] + sys.path)
    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0)
    try:
        with pytest.raises(PlannerStartError, match="cannot import the planner: ImportError: decoy jitsched"):
            proc.start()
            wait_ready(proc)
    finally:
        proc.close()


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def test_daemon_falls_back_to_a_thread_when_the_child_cannot_import(tmp_path, monkeypatch):
    decoy(tmp_path, init="raise ImportError('decoy jitsched')\n")
    monkeypatch.setattr(solver, "child_path", lambda: [str(tmp_path)] + sys.path)
    port = _free_port()
    d = Daemon(config(policy="jit", metrics_port=port))
    try:
        d.start()
        assert wait_until(lambda: d.state.planner.startswith("thread ("), 30.0), d.state.planner
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            st = c.status()
            assert st["planner"].startswith("thread (child failed: ")
            assert "decoy jitsched" in st["planner"]
            c.submit_job(layer_chain_job("a", "h0", "h1"))  # the thread plans it
            assert wait_until(lambda: d.state.plan_summary.get("jobs") == 1, 10.0)
            assert c.status()["plans_failed"] == 0
        assert d.planner is None
        assert wait_until(lambda: "jitsched_planner_fallback 1.0" in _metrics(port), 3.0)
    finally:
        d.stop()


def test_daemon_falls_back_when_the_child_fails_its_self_test():
    # the policy cannot plan anything: the child's self-test says so before it plans
    cfg = config(policy="jit", plan_retry_s=0.05, plan_retry_max_s=0.2, metrics_port=_free_port())
    d = Daemon(cfg, policy=failing_policy(cfg, "always"))
    try:
        d.start()
        assert wait_until(lambda: d.state.planner.startswith("thread ("), 60.0), d.state.planner
        assert "self-test: RuntimeError: cannot plan ['jitsched-self-test']" in d.state.planner
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            # the thread's plans fail too: counted, in status and metrics
            assert wait_until(lambda: c.status()["plans_failed"] >= 2, 10.0)
        assert wait_until(lambda: 'jitsched_plans_failed_total{mode="full"}' in _metrics(cfg.metrics_port), 3.0)
        assert d.state.solve_times == []  # solve times are of successful plans only
    finally:
        d.stop()


def test_a_planner_child_that_stops_answering_is_dropped_and_the_thread_plans():
    # a child alive but stuck (stopped here) answers no re-solve: after planner_timeout_s it is
    # killed, status says why, and the job waiting on it is planned in the daemon's thread
    import os
    import signal

    d = Daemon(config(policy="jit", planning="full", planner_timeout_s=1.0))  # every arrival a joint re-solve
    try:
        d.start()
        assert wait_until(lambda: d.planner is not None and d.planner.started, 60.0)
        child = d.planner._proc
        os.kill(child.pid, signal.SIGSTOP)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            assert wait_until(lambda: d.state.planner.startswith("thread ("), 10.0), d.state.planner
            st = c.status()
            assert "TimeoutError: the planner process answered no re-solve within 1 s" in st["planner"]
            assert wait_until(lambda: d.state.plan_summary.get("jobs") == 1, 10.0)
        assert d.planner is None
        assert wait_until(lambda: child.poll() is not None, 5.0)  # killed and reaped
    finally:
        d.stop()


def test_healthy_child_is_reported_as_the_planner():
    d = Daemon(config(policy="jit"))
    try:
        d.start()
        assert wait_until(lambda: d.planner is not None and d.planner.started, 60.0)
        assert wait_until(lambda: d.state.planner == "process", 5.0)
        assert d.planner.jitsched_file == jitsched.__file__
    finally:
        d.stop()


def test_planner_child_is_sent_each_job_once_and_a_resubmitted_one_again():
    # jobs it holds travel as ids; a new Job object under a known id (a resubmission
    # with another DAG) travels whole and is what the child plans
    from jitsched.daemon.plans import PlanRequest

    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(4), 0.0).start()
    sent = []
    try:
        wait_ready(proc)
        send = proc._conn.send
        proc._conn.send = lambda obj: (sent.append(obj), send(obj))[1]
        a, b = layer_chain_job("a", "h0", "h1"), layer_chain_job("b", "h2", "h3")
        first = proc.solve(PlanRequest(1, 0.0, ((a, {}, {}), (b, {}, {})), (), ("x",)))
        assert [j for j, _, _ in sent[-1].jobs] == [a, b] and first.jobs == {"a", "b"}
        a2 = layer_chain_job("a", "h1", "h3", layers=VGG16_LAYERS[:3])
        second = proc.solve(PlanRequest(2, 0.0, ((a2, {}, {}), (b, {}, {})), (), ("x",)))
        assert [j for j, _, _ in sent[-1].jobs] == [a2, "b"]
        # the child planned a2 (from h1), and b from the copy it kept
        srcs = {(f[0], f[2]) for f in second.schedule.flows}
        assert ("a", 1) in srcs and ("a", 0) not in srcs and ("b", 2) in srcs
        third = proc.solve(PlanRequest(3, 0.0, ((b, {}, {}),), (), ("x",)))
        assert [j for j, _, _ in sent[-1].jobs] == ["b"] and third.jobs == {"b"}
    finally:
        proc.close()


def test_gc_paused_holds_the_collector_off_and_restores_it():
    import gc

    from jitsched.daemon.solver import gc_paused

    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():  # nested: the inner one leaves it off
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a failed build")
    assert gc.isenabled()  # back on after an exception too


def test_a_rebase_carries_every_busy_hosts_body_not_only_those_its_jobs_touch():
    # A rebase installs a held full result whose bodies never went out: with no job to add
    # (here: the full result ranked an announced file the schedule in force lacks) it
    # used to build no body at all, and the agents kept the older ranks
    from jitsched.config import INCREMENTAL
    from jitsched.daemon.background import BackgroundTable
    from jitsched.daemon.plans import PlanRequest
    from jitsched.daemon.solver import run_increment, run_plan
    from tests.test_daemon import config
    from tests.test_daemon_incremental import one_transfer

    cluster = Cluster.uniform(4)
    table = BackgroundTable(config(cluster=cluster))
    announced = table.start({"flow": "f", "src": "h2", "dst": "h3", "bytes": 5e8}, 0.0)
    job = one_transfer("a", 1e8, src="h0", dst="h1")
    full = run_plan(make_policy("jit"), PlanRequest(1, 0.0, ((job, {}, {}),), (("arrival", "a", ""),), ("x",),
                                                     background=(announced,)), cluster)
    assert {(f[0], f[1]) for f in full.schedule.flows} == {("a", "t"), ("", "f")}
    req = PlanRequest(2, 0.1, (), (), ("rebase",), mode=INCREMENTAL, base=full.schedule,
                      live=np.ones(len(full.schedule.flows), dtype=bool), covered=frozenset({"a"}),
                      rebase=True)
    res = run_increment(make_policy("jit"), req, cluster)
    assert res.error == "" and res.schedule is full.schedule
    # every host's body: the file's sender and receiver included (the agents' table then
    # sends only those that differ from what each agent holds)
    assert set(res.frames) == {"h0", "h1", "h2", "h3"}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_ranks_background_says_whether_the_schedule_ranks_announced_flows(name):
    # scenario.predict asks ranks_background() which baselines rank announced files;
    # each registered policy's daemon schedule must agree with what it says
    from jitsched.daemon.background import BackgroundTable
    from jitsched.daemon.plans import PlanRequest
    from jitsched.daemon.solver import run_plan
    from tests.test_daemon import config
    from tests.test_daemon_incremental import one_transfer

    cluster = Cluster.uniform(2)
    announced = BackgroundTable(config(cluster=cluster)).start(
        {"flow": "f", "src": "h0", "dst": "h1", "bytes": 1e6}, 0.0)
    policy = make_policy(name)
    res = run_plan(policy, PlanRequest(1, 0.0, ((one_transfer("a", 1e8), {}, {}),), (("arrival", "a", ""),),
                                       ("x",), background=(announced,)), cluster)
    prio = {} if res.schedule is None else res.schedule.prio
    assert (("", "f") in prio) == policy.ranks_background()


class RecordingJit(JitPolicy):
    """The daemon's JIT policy, noting which object made each full and incremental plan
    (in a list its copies share)."""

    calls: list = []

    def schedule(self, view):
        RecordingJit.calls.append(("full", id(self)))
        return super().schedule(view)

    def schedule_increment(self, view, base, busy_egress, busy_ingress):
        RecordingJit.calls.append(("increment", id(self)))
        return super().schedule_increment(view, base, busy_egress, busy_ingress)


def test_full_re_solves_in_a_thread_plan_on_a_policy_of_their_own():
    # without a planner child the full re-solves and the incremental plans run on two
    # threads at once: never on one policy object
    from jitsched.daemon.server import create_policy

    cfg = config(planner_process=False, joint_replan_s=0.5)  # arrivals plan increments
    pol = RecordingJit(create_policy(cfg).options)
    pol.reset(cfg.cluster)
    RecordingJit.calls.clear()
    d = Daemon(cfg, policy=pol).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            c.submit_job(layer_chain_job("b", "h1", "h2"))
            # (a request wakes the daemon's loop, which looks at the joint re-solve's timer)
            assert wait_until(lambda: c.status(limit=1) and {k for k, _ in RecordingJit.calls}
                              == {"full", "increment"}, 20.0), RecordingJit.calls
    finally:
        d.stop()
    full = {i for k, i in RecordingJit.calls if k == "full"}
    assert {i for k, i in RecordingJit.calls if k == "increment"} == {id(pol)}
    assert full and id(pol) not in full
