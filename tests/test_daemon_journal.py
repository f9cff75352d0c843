"""Tests of the daemon's journal: jobs and progress in sqlite, resumed by a restarted daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jitsched.agents.agent import Agent
from jitsched.client import Client, TransferSink
from jitsched.config import load_config
from jitsched.daemon import Daemon
from jitsched.daemon.journal import DONE, Journal, JournalError, JournalFlow
from jitsched.daemon.server import wait_until
from jitsched.model import Compute, Job, Transfer
from jitsched.runner import JobRunner
from jitsched.synth import layer_chain_job
from tests.test_daemon import config


def test_journal_resumes_unfinished_jobs_with_their_progress(tmp_path):
    path = tmp_path / "journal.db"
    cfg = config(journal=str(path), planner_process=False)
    d = Daemon(cfg).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("a", "h1", "h2"))
            c.submit_job(layer_chain_job("b", "h0", "h2"))
            job = d.state.jobs["a"].job
            t0, t1 = job.transfers[0].id, job.transfers[1].id
            c.transfer_started("a", t0)
            c.transfer_finished("a", t0, 1.0)
            c.transfer_started("a", t1)
            c.compute_finished("a", job.computes[0].id, 0.25)
            c.job_finished("b")
        first = d.state.incarnation
        done_before = dict(d.state.jobs["a"].done)
    finally:
        d.stop()
    # another process reading the file sees WAL mode
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    d = Daemon(cfg).start()
    try:
        st = d.state
        assert st.restored == ["a"] and "b" not in st.jobs  # ended jobs are not resumed
        assert st.incarnation != first
        js = st.jobs["a"]
        assert js.done == done_before and set(js.started) == {t0, t1}
        assert js.measured_s[job.computes[0].id] == 0.25
        # re-planned at once, every body carrying the new incarnation
        assert wait_until(lambda: st.schedule_seq >= 1, 5.0)
        assert st.plan_summary["reasons"] == ["restart"]
        assert all(st.host_body(h)["incarnation"] == st.incarnation for h in ("h0", "h1", "h2"))
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            s = c.status()
            assert s["jobs"]["a"]["state"] == "running" and s["jobs"]["a"]["transfers_done"] == 1
            assert s["incarnation"] == st.incarnation
            assert c.job_finished("a")["jct_s"] > 0
    finally:
        d.stop()
    assert Journal(path).unfinished() == []


def test_journal_survives_a_bad_job_and_config_path(tmp_path):
    # a journalled job the daemon's cluster no longer holds is ended, said why, not fatal
    path = tmp_path / "j.db"
    j = Journal(path)
    bad = layer_chain_job("gone", "h1", "h9").to_dict()
    row = j.submitted("gone", bad, None, 0.0)
    j.event(row, "x", DONE, 0.1)
    j.close()
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        assert d.state.restored == [] and d.state.not_restored[0][0] == "gone"
    finally:
        d.stop()
    assert Journal(path).unfinished() == []
    # [daemon] journal in a TOML file is relative to the file
    toml = tmp_path / "c.toml"
    toml.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n'
                    '[daemon]\njournal = "state/j.db"\n')
    assert load_config(toml).journal == str(tmp_path / "state" / "j.db")
    assert load_config(toml, journal=None).journal is None


def test_a_journal_that_cannot_be_used_is_one_error_naming_the_file(tmp_path):
    not_db = tmp_path / "notes.txt"
    not_db.write_text("not a database\n" * 100)
    for path, why in ((tmp_path / "gone" / "j.db", f"no such directory {tmp_path / 'gone'}"),
                      (tmp_path, "a directory, not a file"),
                      (not_db, "cannot use (file is not a database)")):
        with pytest.raises(JournalError) as ei:
            Journal(path)
        assert str(ei.value) == f"journal {path}: {why}"
    assert not (tmp_path / "gone").exists()
    assert not_db.read_text().startswith("not a database")  # left as it was


def test_journal_resumes_announced_background_flows(tmp_path):
    # announced flows are held again after a restart with the bytes they last reported;
    # one that finished is not, one the cluster no longer allows is dropped, said why
    path = tmp_path / "journal.db"
    cfg = config(journal=str(path), planner_process=False, policy="jit")
    d = Daemon(cfg).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.background_started("f", "h0", "h1", 100e6)
            c.background_started("g", "h1", "h2", 5e6)
            c.background_started("f", "h0", "h1", 100e6, left=40e6)
            c.background_finished("g")
        before = d.state.background.flows["f"]
    finally:
        d.stop()
    j = Journal(path)
    j.background_held(JournalFlow("y", "h0", "h9", 1e6, 1e6, None, 0.5, 0.5))  # h9: no such host
    j.close()
    d = Daemon(cfg).start()
    try:
        st = d.state
        assert list(st.background.flows) == ["f"]
        f = st.background.flows["f"]
        assert (f.src, f.dst, f.bytes, f.left, f.started_s, f.seen_s, f.owner) == \
            (0, 1, 100e6, 40e6, before.started_s, before.seen_s, None)
        assert st.background.counts == {"announced": 0, "restored": 1, "finished": 0, "expired": 0}
        # re-planned at once, the file ranked in it
        assert wait_until(lambda: st.schedule_seq >= 1, 5.0)
        assert st.plan_summary["reasons"] == ["restart"] and ("", "f") in st.schedule.prio
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            assert c.status()["background"] == {"held": 1, "announced": 0, "restored": 1, "finished": 0,
                                                "expired": 0}
            assert c.background_finished("f") == {"held": True}
    finally:
        d.stop()
    assert Journal(path).background() == []


def test_resubmission_carries_progress(tmp_path):
    d = Daemon(config(journal=str(tmp_path / "j.db"), planner_process=False)).start()
    try:
        job = layer_chain_job("r", "h1", "h2")
        done = [job.transfers[0].id, job.computes[0].id]
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.request("submit_job", {"job": job.to_dict(),
                                     "progress": {"done": done, "started": [job.transfers[1].id]}})
            js = d.state.jobs["r"]
            assert set(js.done) == set(done) and set(js.started) == {job.transfers[1].id}
            from jitsched.protocol import RemoteError
            with pytest.raises(RemoteError, match="unknown_node"):
                c.request("submit_job", {"job": layer_chain_job("q", "h1", "h2").to_dict(),
                                         "progress": {"done": ["nope"]}})
        assert {n for n in Journal(tmp_path / "j.db").unfinished()[0].done} == set(done)
    finally:
        d.stop()


# ---------------------------------------------------------------------- kill -9 of a daemon process

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonProcess:
    """``jitsched daemon`` as a child process on fixed loopback ports; every child it started is
    killed by :meth:`close`, whatever happened."""

    def __init__(self, tmp_path: Path, journal: Path | None) -> None:
        self.jobs = f"tcp://127.0.0.1:{_free_port()}"
        self.agents = f"tcp://127.0.0.1:{_free_port()}"
        self.config = tmp_path / "daemon.toml"
        self.config.write_text(
            "".join(f'[[hosts]]\nname = "{h}"\negress_bps = 1e9\ningress_bps = 1e9\n' for h in ("h0", "h1"))
            + f'[daemon]\njob_endpoint = "{self.jobs}"\nagent_endpoint = "{self.agents}"\n'
            "heartbeat_s = 0.1\nheartbeat_timeout_s = 0.6\nresend_s = 0.1\nplanner_process = false\n")
        self.journal = journal
        self.procs: list[subprocess.Popen] = []

    def start(self) -> dict:
        cmd = [sys.executable, "-m", "jitsched", "daemon", "--config", str(self.config), "--quiet"]
        if self.journal is not None:
            cmd += ["--journal", str(self.journal)]
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        end = time.monotonic() + 60.0
        while time.monotonic() < end:
            assert self.procs[-1].poll() is None, "the daemon exited"
            try:
                with Client(self.jobs, timeout_s=0.5) as c:
                    return c.status()
            except TimeoutError:
                continue
        raise AssertionError("the daemon did not answer")

    def kill(self) -> None:
        p = self.procs[-1]
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10.0)

    def status(self) -> dict:
        with Client(self.jobs, timeout_s=5.0) as c:
            return c.status()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10.0)


def _slow_job() -> Job:
    # t0, then 0.8 s of compute during which the daemon dies and comes back, then the rest
    return Job("rj", (Compute("c0", "h1", 0.8), Compute("c1", "h1", 0.2)),
               (Transfer("t0", "h0", "h1", 100_000.0), Transfer("t1", "h0", "h1", 100_000.0),
                Transfer("push", "h1", "h0", 100_000.0)),
               (("t0", "c0"), ("c0", "t1"), ("t1", "c1"), ("c1", "push")))


@contextlib.contextmanager
def _restart_run(tmp_path: Path, journal: bool, async_reports: bool):
    """Agents and a job runner against a daemon process killed with SIGKILL mid-job and started
    again; yields (daemon, agents, runner, result, status before the kill, seconds for the
    agents to re-register after the new daemon answered, its first status)."""
    dp = DaemonProcess(tmp_path, tmp_path / "journal.db" if journal else None)
    agents: dict[str, Agent] = {}
    sinks = {h: TransferSink() for h in ("h0", "h1")}
    out: dict = {}
    try:
        dp.start()
        for h in ("h0", "h1"):
            agents[h] = Agent(h, dp.agents, backend="record", local_namespace=f"j{id(dp)}").start()
        assert wait_until(lambda: all(a.registered.is_set() for a in agents.values()), 10.0)
        runner = JobRunner(_slow_job(), dp.jobs, {h: s.address for h, s in sinks.items()},
                           agents={h: a.local_name for h, a in agents.items()},
                           async_reports=async_reports, request_timeout_s=1.0)
        th = threading.Thread(target=lambda: out.setdefault("result", runner.run(timeout_s=90.0)))
        th.start()
        try:
            assert wait_until(lambda: dp.status()["jobs"].get("rj", {}).get("transfers_done") == 1, 20.0)
            assert wait_until(lambda: all(a.seq >= 1 for a in agents.values()), 5.0)
            before = dp.status()
            dp.kill()
            out["after"] = dp.start()
            t_up = time.monotonic()
            assert wait_until(lambda: all(a.incarnation != before["incarnation"] and a.registered.is_set()
                                          for a in agents.values()), 10.0)
            back_s = time.monotonic() - t_up
        finally:
            th.join(120.0)
        yield dp, agents, runner, out["result"], before, back_s, out["after"]
    finally:
        for a in agents.values():
            a.stop()
        for s in sinks.values():
            s.close()
        dp.close()


def test_kill_9_with_a_journal_resumes_the_job(tmp_path):
    with _restart_run(tmp_path, journal=True, async_reports=False) as (
            dp, agents, runner, res, before, back_s, after):
        # the restarted daemon lists the job, running, with the transfer done before the kill
        assert after["jobs"]["rj"]["state"] in ("running", "finished")
        assert after["jobs"]["rj"]["transfers_done"] >= 1
        assert res.error == ""
        assert runner.session.resubmits == 0  # the journal had it
        assert res.resubmits == 0 and res.reconnects == runner.session.reconnects  # the result says so
        assert back_s < 1.0
        st = dp.status()
        assert st["incarnation"] != before["incarnation"]
        js = st["jobs"]["rj"]
        assert js["state"] == "finished" and js["transfers_done"] == 3 and js["computes_done"] == 2
        assert js["submitted_s"] == before["jobs"]["rj"]["submitted_s"]  # one daemon clock
        for h, a in agents.items():
            # the agent holds (and acked) the new daemon's schedule, never the old one's seq
            assert a.incarnation == st["incarnation"] and a.daemons == 2
            assert a.schedule is None or a.schedule["incarnation"] == st["incarnation"]
            ag = st["agents"][h]
            assert ag["up"] and ag["acked_seq"] <= ag["seq"]
            assert wait_until(lambda h=h, a=a: dp.status()["agents"][h]["acked_seq"] == a.seq, 5.0)
    with sqlite3.connect(tmp_path / "journal.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT state FROM jobs WHERE job_id = 'rj'").fetchone() == ("finished",)


def test_kill_9_without_a_journal_resubmits_the_job(tmp_path):
    with _restart_run(tmp_path, journal=False, async_reports=True) as (
            dp, _agents, runner, res, _before, back_s, _after):
        assert res.error == ""
        assert runner.session.resubmits == 1
        assert res.resubmits == 1 and res.reconnects == runner.session.reconnects
        assert back_s < 1.0
        st = dp.status()
        js = st["jobs"]["rj"]
        assert js["state"] == "finished" and js["transfers_done"] == 3 and js["computes_done"] == 2
