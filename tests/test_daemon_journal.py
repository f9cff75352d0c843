"""Tests of the daemon's journal: jobs and progress in sqlite, resumed by a restarted daemon."""

from __future__ import annotations

import sqlite3

import pytest

from jitsched.client import Client
from jitsched.config import load_config
from jitsched.daemon import Daemon
from jitsched.daemon.journal import DONE, Journal
from jitsched.daemon.server import wait_until
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
