"""The testbed run's helper processes: their handle, what their mains report, the marks they set, and how little a child imports."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest

from jitsched import testbed
from jitsched.testbed.children import Child, agent_stats, dl_marks, failed_agents, transfer_tos
from jitsched.testbed.e2e import CRITICAL_TOS, SCHEDULED_TOS


def test_a_child_imports_neither_the_planner_nor_scipy():
    # a spawned agent, runner or sink child imports this module before its main
    code = ("import sys, jitsched.testbed.children; "
            "print([m for m in ('scipy', 'jitsched.plan.planner', 'jitsched.testbed.e2e') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["[]"], proc.stderr


def _exits_at_once(conn) -> None:
    conn.send(("ready",))  # then ends without results, as a runner process that crashed


def test_a_runner_process_that_dies_is_an_error_not_a_hang():
    child = Child("runners-0", _exits_at_once, ())
    try:
        assert child.ready() == ()
        with pytest.raises(testbed.TestbedError, match="runners-0 exited before its jobs finished"):
            child.results(30.0)
    finally:
        child.stop(5.0)
    assert not multiprocessing.active_children()


def test_agent_stats_name_the_agents_that_failed_by_host():
    from types import SimpleNamespace

    def agent(host, failure=None, out=3, inn=2):
        return SimpleNamespace(host=host, failure=failure, registrations={"out": out, "in": inn},
                               rto_capped=out, rto_cap_failed=0, backend=SimpleNamespace(relevels=out),
                               in_backend=None)

    ok, broken = agent("h0"), agent("h1", OSError("tc: No such device"), out=1, inn=0)
    st = agent_stats([ok, broken], [1.0, 3.0, 2.0])
    assert st["failed"] == {"h1": "OSError: tc: No such device"}
    assert (st["registered_out"], st["registered_in"], st["rto_capped"], st["relevels"]) == (4, 2, 4, 4)
    assert (st["slot_changes"], st["apply_late_ms_p50"], st["apply_late_ms_max"]) == (3, 2.0, 3.0)
    assert "slot_changes" not in agent_stats([ok], []) and agent_stats([ok], [])["failed"] == {}
    # the run's top level: every agent process's failures, by host
    assert failed_agents({"agent-h0": agent_stats([ok], []), "agent-h1": st}) == {"h1": "OSError: tc: No such device"}
    assert failed_agents({"agent-h0": {}}) == {}


def test_a_critical_jobs_own_connections_carry_the_critical_mark():
    assert transfer_tos("critical", False, SCHEDULED_TOS, CRITICAL_TOS) == CRITICAL_TOS
    # its small transfers ride the channels every job shares; other classes keep the common mark
    assert transfer_tos("critical", True, SCHEDULED_TOS, CRITICAL_TOS) == SCHEDULED_TOS
    assert transfer_tos("normal", False, SCHEDULED_TOS, CRITICAL_TOS) == SCHEDULED_TOS
    assert transfer_tos("best-effort", False, None, None) is None


def test_the_agents_take_every_mark_the_runners_set_as_dl():
    assert dl_marks(SCHEDULED_TOS, CRITICAL_TOS) == (SCHEDULED_TOS, CRITICAL_TOS)
    assert dl_marks(SCHEDULED_TOS, SCHEDULED_TOS) == (SCHEDULED_TOS,)  # no band: one mark
    assert dl_marks(None, None) == ()


def test_an_agent_process_that_sends_no_figures_is_a_failed_agent():
    from jitsched.testbed.children import silent_agents, stop_children

    dead = Child("agent-h3", _exits_at_once, ())
    assert dead.ready() == ()
    got = stop_children([dead])
    assert got == {"agent-h3": {}}
    assert set(failed_agents(silent_agents([dead], got))) == {"h3"}
    assert silent_agents([dead], {"agent-h3": {"failed": {}}}) == {}
    assert not multiprocessing.active_children()


def test_the_agents_wait_to_register_as_long_as_the_daemon_may_take_to_start(monkeypatch):
    # the agents start beside the daemon: a daemon that takes its whole start allowance
    # must still find them waiting, and a failure names the hosts, the daemon and the wait
    import contextlib
    import threading

    import jitsched.agents.agent as agent_mod
    from jitsched.testbed import children

    waits: list[float] = []

    class NeverRegisters(threading.Event):
        def wait(self, timeout=None):
            waits.append(timeout)
            return False

    class FakeAgent:
        def __init__(self, host, endpoint, opts, **kwargs):
            self.host, self.failure, self.backend, self.in_backend = host, None, None, None
            self.registered = NeverRegisters()
            self.registrations = {"out": 0, "in": 0}
            self.rto_capped = self.rto_cap_failed = 0

        def start(self):
            return self

        def stop(self):
            pass

    class Conn:
        def __init__(self):
            self.sent: list = []

        def send(self, msg):
            self.sent.append(msg)

    monkeypatch.setattr(agent_mod, "Agent", FakeAgent)
    monkeypatch.setattr(children, "in_netns", lambda ns: contextlib.nullcontext())
    conn = Conn()
    children.agents_main([("h0", "x-h0", None), ("h1", "x-h1", None)], "ipc:///tmp/x/agents", "tag",
                         "background", (), (), conn)
    assert waits and waits[0] >= children.START_TIMEOUT_S, waits
    assert children.REGISTER_TIMEOUT_S > children.START_TIMEOUT_S
    # the parent waits for the agents' ready at least their own start and their registration wait
    assert children.AGENT_READY_TIMEOUT_S >= children.START_TIMEOUT_S + children.REGISTER_TIMEOUT_S
    kind, message = conn.sent[0]
    assert kind == "error", conn.sent
    assert "h0, h1" in message and "ipc:///tmp/x/agents" in message, message
    assert f"within {children.REGISTER_TIMEOUT_S:g} s" in message, message
    assert conn.sent[-1][0] == "stats"


def test_a_job_the_daemon_refuses_is_a_failed_result_naming_the_refusal():
    from jitsched.client.runner import JobResult
    from jitsched.errors import RemoteError
    from jitsched.testbed.children import job_result
    from jitsched.workloads.paper import load_model_job

    job = load_model_job("lenet", "h0", "h1", "big", 0.0)

    def refused():
        raise RemoteError("invalid_job", "body.job.computes+transfers: 62 nodes, over the limit of 10 nodes")

    r = job_result(job, refused)
    assert r.job_id == "big" and r.transfers == len(job.transfers)
    assert r.error == ("the daemon refused job 'big': invalid_job: "
                       "body.job.computes+transfers: 62 nodes, over the limit of 10 nodes")

    def broken():
        raise OSError("no route")

    assert job_result(job, broken).error == "the runner of job 'big' failed: OSError: no route"
    done = JobResult("big", 1.0, 3, 10.0)
    assert job_result(job, lambda: done) is done
