"""Tests of the daemon's journal: jobs and progress in sqlite, resumed by a restarted daemon."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.bench.bench_faults import free_ports
from jitsched.client import Client
from jitsched.client.runner import JobRunner
from jitsched.client.transfer import TransferSink
from jitsched.config import load_config
from jitsched.daemon import Daemon
from jitsched.daemon.journal import DONE, Journal, JournalError, JournalFlow, recover_journal
from jitsched.daemon.reject import Reject
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster, Compute, Job, Transfer
from jitsched.protocol import ErrorCode
from jitsched.workloads.synth import layer_chain_job
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


def test_journal_resumes_each_clients_job_of_one_id(tmp_path):
    # job ids are scoped by the submitting key: two clients' "a" are two jobs, in the
    # journal and after a restart, each still named "a" by its own client only
    from jitsched.daemon.state import SchedulerState

    cfg = config(journal=str(tmp_path / "journal.db"))
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    for who in ("alice", "bob"):
        assert st.submit_job({"job": layer_chain_job("a", "h0", "h1").to_dict()}, 0.0, peer=who)["flow_job"] \
            == f"{who}:a"
    t0 = st.jobs["alice:a"].job.transfers[0].id
    st.transfer_finished({"job_id": "a", "transfer": t0}, 1.0, peer="alice")
    st.cancel_job({"job_id": "a"}, 2.0, peer="bob")
    st.journal.close()
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    assert st.restored == ["alice:a"] and set(st.jobs) == {"alice:a"}
    js = st.jobs["alice:a"]
    assert js.owner == "alice" and js.name == "a" and t0 in js.done
    assert st.job_registry.usage["alice"].running == 1
    got = st.cancel_job({"job_id": "a"}, 3.0, peer="bob")
    assert isinstance(got, Reject) and got.code == ErrorCode.UNKNOWN_JOB and js.active
    assert st.cancel_job({"job_id": "a"}, 3.0, peer="alice") == {"state": "cancelled"}
    st.journal.close()


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


def test_a_directory_given_as_the_journal_is_refused_and_left_as_it_was(tmp_path):
    folder = tmp_path / "state"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    with pytest.raises(JournalError) as ei:
        Journal(folder)
    assert str(ei.value) == f"journal {folder}: a directory, not a file"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755 and list(folder.iterdir()) == []
    assert list(tmp_path.iterdir()) == [folder]  # no lock file beside it


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path):
    # a mistyped --journal naming some other sqlite file: neither opened as a journal (its
    # mode, tables and permissions kept), nor checked or salvaged as a damaged one
    from jitsched.daemon.journal import check_journal, recover_journal

    other = tmp_path / "app.db"
    db = sqlite3.connect(other)
    db.executescript("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users (name) VALUES ('x');")
    db.close()
    os.chmod(other, 0o644)
    before = other.read_bytes()
    want = f"journal {other}: an sqlite database but not a jitsched journal"
    for open_it in (lambda: Journal(other), lambda: check_journal(other),
                    lambda: recover_journal(other, tmp_path / "new.db")):
        with pytest.raises(JournalError, match=want):
            open_it()
    assert other.read_bytes() == before and stat.S_IMODE(other.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]
    with pytest.raises(JournalError, match="journal /dev/null: not a regular file"):
        check_journal("/dev/null")


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
        assert st.background.counts == {"announced": 0, "restored": 1, "finished": 0, "expired": 0, "dropped": 0}
        # re-planned at once, the file ranked in it
        assert wait_until(lambda: st.schedule_seq >= 1, 5.0)
        assert st.plan_summary["reasons"] == ["restart"] and ("", "f") in st.schedule.prio
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            assert c.status()["background"] == {"held": 1, "announced": 0, "restored": 1, "finished": 0,
                                                "expired": 0, "dropped": 0}
            assert c.background_finished("f") == {"held": True}
    finally:
        d.stop()
    assert Journal(path).background() == []


def test_bare_named_background_rows_of_an_older_journal_move_to_their_scoped_names(tmp_path):
    # a journal from before background flows were held by client-scoped names holds a
    # client's flow by the bare name it announced: the restart moves the row to the scoped
    # name, so the owner's background_finished finds it, and marks the journal as scoped
    from jitsched.daemon.state import BACKGROUND_NAMES, SchedulerState

    cfg = config(journal=str(tmp_path / "journal.db"))
    j = Journal(cfg.journal)
    j.background_held(JournalFlow("f", "h0", "h1", 1e6, 1e6, "alice", 0.5, 0.5))  # bare
    j.background_held(JournalFlow("bob:g", "h1", "h2", 2e6, 2e6, "bob", 0.5, 0.5))  # scoped
    j.background_held(JournalFlow("h", "h2", "h0", 3e6, 3e6, None, 0.5, 0.5))  # no keys
    j.close()
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    assert set(st.background.flows) == {"alice:f", "bob:g", "h"}
    assert st.background.flows["alice:f"].owner == "alice"
    assert st.journal.get(BACKGROUND_NAMES) == "scoped"
    assert sorted(f.name for f in st.journal.background()) == ["alice:f", "bob:g", "h"]
    assert st.background_finished({"flow": "f"}, 1.0, peer="alice") == {"held": True}
    st.journal.close()
    # a marked journal is read as it is: a scoped row is not scoped again
    j = Journal(cfg.journal)
    j.background_held(JournalFlow("carol:x", "h0", "h1", 1e6, 1e6, "carol", 0.5, 0.5))
    j.background_held(JournalFlow("y", "h0", "h1", 1e6, 1e6, "carol", 0.5, 0.5))
    j.close()
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    assert set(st.background.flows) == {"bob:g", "h", "carol:x", "y"}
    st.journal.close()


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
        # read beside the daemon that holds it
        assert {n for n in Journal(tmp_path / "j.db", read_only=True).unfinished()[0].done} == set(done)
    finally:
        d.stop()


# ---------------------------------------------------------------------- a journal never lost or shared


def _journal_with_jobs(path: Path, n: int) -> None:
    j = Journal(path)
    for i in range(n):
        j.submitted(f"j{i}", layer_chain_job(f"j{i}", "h1", "h2").to_dict(), None, 0.0)
    j.close()


def test_a_second_daemon_on_one_journal_refuses_and_leaves_the_first_ones_jobs(tmp_path):
    path = tmp_path / "j.db"
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("mine", "h2", "h3"))
        # a daemon with a smaller cluster would have failed the h2/h3 job in the file
        small = config(journal=str(path), planner_process=False, cluster=Cluster.uniform(2, bps=1e9))
        with pytest.raises(JournalError, match=f"in use by another daemon \\(pid {os.getpid()}\\)"):
            Daemon(small)
        assert d.state.jobs["mine"].state == "running"
    finally:
        d.stop()
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        assert d.state.restored == ["mine"]
    finally:
        d.stop()


def test_the_journal_and_its_lock_are_the_daemon_users_only(tmp_path):
    path = tmp_path / "j.db"
    _journal_with_jobs(path, 1)
    os.chmod(path, 0o644)  # as an older file may be
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("x", "h0", "h1"))
        for f in tmp_path.iterdir():
            assert f.stat().st_mode & 0o077 == 0, f"{f.name} is {oct(f.stat().st_mode)}"
    finally:
        d.stop()


def test_a_damaged_or_truncated_journal_refuses_to_start(tmp_path):
    path = tmp_path / "j.db"
    _journal_with_jobs(path, 110)
    size = path.stat().st_size
    with open(path, "r+b") as f:  # 4 kB of garbage in the middle of the file
        f.seek(size // 2 // 4096 * 4096)
        f.write(os.urandom(4096))
    with pytest.raises(JournalError, match="damaged|cannot be read"):
        Daemon(config(journal=str(path), planner_process=False))
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(JournalError, match="empty"):
        Daemon(config(journal=str(empty), planner_process=False))
    with pytest.raises(JournalError, match="does not exist"):
        Daemon(config(journal=str(tmp_path / "no" / "j.db"), planner_process=False))


def test_the_daemon_command_names_an_unusable_journal_in_one_line(tmp_path):
    path = tmp_path / "j.db"
    path.write_bytes(b"")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n[daemon]\n'
                   'job_endpoint = "tcp://127.0.0.1:*"\nagent_endpoint = "tcp://127.0.0.1:*"\n')
    res = subprocess.run([sys.executable, "-m", "jitsched", "daemon", "--config", str(cfg), "--journal",
                          str(path), "--quiet"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"jitsched daemon: error: journal {path} exists but is empty (0 bytes): a truncated journal? "
        "remove it to start with an empty one"]


def test_unreadable_rows_end_their_own_jobs_and_the_rest_resume(tmp_path):
    path = tmp_path / "j.db"
    _journal_with_jobs(path, 4)
    db = sqlite3.connect(path)
    db.execute("UPDATE jobs SET job = ? WHERE job_id = 'j0'", (b"\xc1\xc1 not msgpack",))
    db.execute("UPDATE jobs SET job = ? WHERE job_id = 'j1'", (b"\x93\x01\x02\x03",))  # a list
    db.execute("UPDATE jobs SET job = NULL WHERE job_id = 'j2'")
    db.commit()
    db.close()
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        assert d.state.restored == ["j3"]
        assert {jid for jid, _ in d.state.not_restored} == {"j0", "j1", "j2"}
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            st = c.status()
        assert "not a map" in st["jobs_not_resumed"]["j1"]
        assert "cannot be unpacked" in st["jobs_not_resumed"]["j0"]
    finally:
        d.stop()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted at the end (the suite runs as root)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def test_a_submission_the_full_disk_cannot_record_is_refused_not_acknowledged(small_disk):
    path = small_disk / "j.db"
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("before", "h0", "h1"))
            filler = small_disk / "filler"
            with open(filler, "wb") as f, contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            from jitsched.protocol import RemoteError
            refused = 0
            for i in range(20):
                with contextlib.suppress(RemoteError):
                    c.submit_job(layer_chain_job(f"full{i}", "h0", "h1"))
                    continue
                refused += 1
            st = c.status()
        acked = [j for j in st["jobs"] if j.startswith("full")]
        assert refused + len(acked) == 20 and refused >= 15
        assert st["journal_errors"] >= refused and "full" in st["journal_last_error"]
    finally:
        d.stop()
    filler.unlink()
    d = Daemon(config(journal=str(path), planner_process=False)).start()
    try:
        # every acknowledged job is back; none of the refused ones
        assert set(d.state.restored) == {"before", *acked}
    finally:
        d.stop()


# ---------------------------------------------------------------------- kill -9 of a daemon process

def _free_port() -> int:
    return free_ports(1)[0]


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
            agents[h] = Agent(h, dp.agents, AgentOptions(backend="record"),
                              local_namespace=f"j{id(dp)}").start()
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


@pytest.mark.alone
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


@pytest.mark.alone
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


# ---------------------------------------------------------------------- journal check and recover


def test_journal_check_and_recover_salvage_every_readable_job(tmp_path, capsys):
    from jitsched.cli import main
    from jitsched.daemon.journal import check_journal

    sound = tmp_path / "sound.db"
    _journal_with_jobs(sound, 5)
    assert main(["journal", "check", str(sound)]) == 0
    assert "sound: 5 jobs (5 running, resumable)" in capsys.readouterr().out
    path = tmp_path / "j.db"
    _journal_with_jobs(path, 300)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(os.urandom(4096))
    rep = check_journal(path)
    assert not rep.sound and 0 < rep.running < 300
    assert main(["journal", "check", str(path)]) == 1
    assert "DAMAGED" in capsys.readouterr().out
    new = tmp_path / "new.db"
    assert main(["journal", "recover", str(path), str(new)]) == 0
    assert check_journal(new).running == rep.running
    d = Daemon(config(journal=str(new), planner_process=False)).start()
    try:
        assert len(d.state.restored) == rep.running
    finally:
        d.stop()
    assert main(["journal", "recover", str(path), str(new)]) == 2  # never over a file
    assert "exists" in capsys.readouterr().err


def test_submissions_and_ends_are_fsynced_progress_is_not(tmp_path):
    j = Journal(tmp_path / "j.db")
    seen = []

    class Recording:
        def __init__(self, db):
            self._db = db

        def execute(self, sql, *args):
            seen.append(sql.split("(")[0].strip())
            return self._db.execute(sql, *args)

    j.db = Recording(j.db)
    row = j.submitted("a", {"id": "a"}, None, 0.0)
    j.event(row, "x", DONE, 0.1)
    j.ended(row, "finished", 0.2, 0.2)
    assert seen[:3] == ["PRAGMA synchronous=FULL", "INSERT INTO jobs", "PRAGMA synchronous=NORMAL"]
    assert seen[3] == "INSERT INTO events"  # no sync of its own
    assert seen[4] == "PRAGMA synchronous=FULL" and seen[-1] == "PRAGMA synchronous=NORMAL"
    j.db = j.db._db
    j.close()


def test_a_restarted_daemon_reserves_its_critical_jobs_on_the_shares_its_agents_registered(tmp_path):
    # its agents have not registered again when it takes the job back: it reserves on what
    # they last said they could give (h0 keeps a fifth of its ports), not on the whole line
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon_jobs import _register, critical

    # the agents' own floors ([daemon] critical_floor off)
    cfg = config(journal=str(tmp_path / "journal.db"), policy="jit", critical_floor=None)
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    assert "seq" in _register(st, "h0", 0.2, payload=0.95)
    assert "job_id" in st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)
    caps = st.job_registry.reservations.ingress_held({})
    before = st.job_registry.reservations.held["a"].windows.isolated_s
    assert before == pytest.approx(1.51, abs=0.01)  # 1 s at 0.8 x 0.95 of the line, plus 0.2 s of compute
    st.journal.close()
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    try:
        assert st.restored == ["a"] and st.job_registry.reservations.shares == {"h0": pytest.approx(0.76)}
        assert st.job_registry.reservations.held["a"].windows.isolated_s == pytest.approx(before)
        # and the payload share the caps count the reserved rates on the wire with
        assert st.job_registry.reservations.payloads == {"h0": 0.95}
        again = st.job_registry.reservations.ingress_held({})
        assert [h for h, *_ in again] == [h for h, *_ in caps] == [0, 1]
        assert [x[2] for x in again] == pytest.approx([x[2] for x in caps])
    finally:
        st.journal.close()


def test_recover_keeps_recurring_jobs_counts_and_learned_state(tmp_path):
    # recover copies every readable row, recurring jobs' iteration counts and learned
    # state too: a recurring job resumed from the new journal goes on where it was
    src = tmp_path / "j.db"
    j = Journal(src)
    row = j.submitted("r1", {"id": "r1", "computes": [], "transfers": [{"id": "t", "src": "h1", "dst": "h2", "bytes": 1e9}]}, None, 1.0)
    j.template(row, 40, b"learned-state")
    assert j.templates() == {row: (40, b"learned-state")}
    j.close()
    recover_journal(src, tmp_path / "new.db")
    j2 = Journal(tmp_path / "new.db")
    try:
        assert [jj.row for jj in j2.unfinished()] == [row]
        assert j2.templates() == {row: (40, b"learned-state")}
    finally:
        j2.close()


def test_a_failed_commit_of_a_jobs_end_leaves_no_transaction_open(tmp_path):
    # a commit that fails (a full disk, say) is rolled back: the journal's later writes,
    # autocommitted one by one, are durable, not held inside a transaction never committed
    j = Journal(tmp_path / "j.db")
    row = j.submitted("a", {"id": "a"}, None, 0.0)
    real = j.db

    class CommitFails:
        def execute(self, sql, *args):
            if sql == "COMMIT":
                raise sqlite3.OperationalError("database or disk is full")
            return real.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(real, name)

    j.db = CommitFails()
    try:
        with pytest.raises(sqlite3.OperationalError):
            j.ended(row, DONE, 1.0, 1.0)
        assert not real.in_transaction
    finally:
        j.db = real
    row_b = j.submitted("b", {"id": "b"}, None, 2.0)
    other = sqlite3.connect(tmp_path / "j.db")
    try:
        assert {r for (r,) in other.execute("SELECT row FROM jobs WHERE state = 'running'")} == {row, row_b}
    finally:
        other.close()
        j.close()
