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
