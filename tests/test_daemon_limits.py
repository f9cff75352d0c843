"""Tests of the daemon's bounded inputs and quarantined plans: limits, failed jobs, backoff, log lines."""

from __future__ import annotations

import contextlib
import logging
import time

import msgpack
import pytest
import tomli_w
import zmq

from jitsched.client import Client
from jitsched.config import KEYS, DaemonConfig, load_config
from jitsched.daemon import Daemon
from jitsched.daemon.logs import LogLimiter, escape, kv
from jitsched.daemon.plans import BLAME_AFTER
from jitsched.daemon.reject import Reject
from jitsched.daemon.server import create_policy, wait_until
from jitsched.daemon.state import SchedulerState
from jitsched.errors import ValidationError
from jitsched.policies.jit import JitPaperPolicy, JitPolicy
from jitsched.protocol import ErrorCode, MsgType, RemoteError, decode_reply, encode_request
from jitsched.workloads.synth import layer_chain_job
from tests.test_daemon import config


def tiny_job(job_id: str = "j", bytes_: float = 1e6, duration_s: float = 0.1, src: str = "h0",
             dst: str = "h1") -> dict:
    return {"id": job_id,
            "computes": [{"id": "c0", "host": src, "duration_s": duration_s},
                         {"id": "c1", "host": dst, "duration_s": 0.1}],
            "transfers": [{"id": "t", "src": src, "dst": dst, "bytes": bytes_}],
            "edges": [["c0", "t"], ["t", "c1"]]}


def submit(st: SchedulerState, job: dict):
    return st.submit_job({"job": job}, 0.0)


# ---------------------------------------------------------------------- limits


@pytest.mark.parametrize("job, field, limit", [
    (tiny_job(bytes_=1e18), "body.job.transfers[0].bytes", "max_transfer_bytes"),
    (tiny_job(duration_s=1e9), "body.job.computes[0].duration_s", "max_compute_s"),
    (tiny_job("x" * 5_000_000), "body.job.id", "max_id_chars"),
    (tiny_job() | {"transfers": [{"id": "t" * 300, "src": "h0", "dst": "h1", "bytes": 1.0}],
                   "edges": []}, "body.job.transfers[0].id", "max_id_chars"),
    (tiny_job() | {"computes": [{"id": f"c{i}", "host": "h0", "duration_s": 0.0} for i in range(50_001)],
                   "transfers": [], "edges": []}, "body.job.computes+transfers", "max_job_nodes"),
    # 1e12 bytes on a 1 Gbit/s port: 8000 s, 80k slots of 0.1 s
    (tiny_job(bytes_=1e12), "body.job:", "max_plan_slots"),
    # a long compute before the transfer: the critical path sets the horizon
    (tiny_job(duration_s=2000.0), "body.job:", "max_plan_slots"),
])
def test_each_limit_is_refused_naming_the_field_and_the_limit(job, field, limit):
    st = SchedulerState(config())
    got = submit(st, job)
    assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_JOB, got
    assert field in got.message and f"[limits] {limit}" in got.message
    assert f"limit of {getattr(st.config, limit):g} " in got.message  # the limit's value
    assert not st.jobs and not st.plan_book.reasons and not st.plan_book.pending


def test_jobs_just_inside_the_limits_are_accepted():
    cfg = config()
    st = SchedulerState(cfg)
    # 9,000 slots of 0.1 s: 900 s of one 1 Gbit/s port
    assert submit(st, tiny_job("a" * cfg.max_id_chars, bytes_=900 * 1e9 / 8 - 2e7)) == {
        "job_id": "a" * cfg.max_id_chars}
    assert submit(st, tiny_job("b", duration_s=100.0)) == {"job_id": "b"}


def test_horizon_limit_follows_the_slot_length():
    # the same 100 s job is 1000 slots of 0.1 s but 10,000 of 0.01 s
    job = tiny_job(bytes_=100 * 1e9 / 8)
    assert submit(SchedulerState(config(max_plan_slots=5000)), job) == {"job_id": "j"}
    got = submit(SchedulerState(config(max_plan_slots=5000, slot_s=0.01)), job)
    assert isinstance(got, Reject) and "slots of 0.01 s" in got.message


def test_a_job_through_a_port_of_no_usable_rate_is_refused_not_failed():
    # a cluster made in code can hold a port of 0 bytes/s (configurations and joins cannot):
    # the job's plan would never end, and it is refused as over the horizon
    from jitsched.daemon.limits import check_job
    from jitsched.dag.model import Cluster, Host, parse_job

    cl = Cluster((Host("h0", 5e-324, 1e9), Host("h1", 1e9, 1e9)))
    got = check_job(parse_job(tiny_job(), cl), config(cluster=cl))
    assert isinstance(got, Reject) and "max_plan_slots" in got.message and "inf" in got.message


def test_unknown_ids_are_quoted_only_in_part():
    st = SchedulerState(config())
    got = st.transfer_finished({"job_id": "z" * 100_000, "transfer": "t"}, 0.0)
    assert isinstance(got, Reject) and got.code == ErrorCode.UNKNOWN_JOB
    assert len(got.message) < 400 and "(100000 characters)" in got.message


def test_limits_table_in_the_config(tmp_path):
    hosts = [{"name": "h0", "egress_bps": 1e9, "ingress_bps": 1e9}]
    p = tmp_path / "c.toml"
    p.write_text(tomli_w.dumps({"hosts": hosts, "limits": {"max_transfer_bytes": 1e9, "max_plan_slots": 500,
                                                           "max_message_bytes": 4096}}))
    cfg = load_config(p)
    assert (cfg.max_transfer_bytes, cfg.max_plan_slots, cfg.max_message_bytes) == (1e9, 500, 4096)
    assert set(KEYS["limits"]) >= {"max_transfer_bytes", "max_compute_s", "max_job_nodes",
                                   "max_id_chars", "max_plan_slots", "max_message_bytes", "max_jobs"}
    # where max_jobs and max_message_bytes were before [limits]: still read, but once only
    p.write_text(tomli_w.dumps({"hosts": hosts, "daemon": {"max_jobs": 7}}))
    assert load_config(p).max_jobs == 7
    p.write_text(tomli_w.dumps({"hosts": hosts, "daemon": {"max_jobs": 7}, "limits": {"max_jobs": 8}}))
    with pytest.raises(ValidationError, match=r"\[limits\].max_jobs: also set in \[daemon\]"):
        load_config(p)
    for bad in ({"limits": {"max_plan_slots": 0}}, {"limits": {"max_id_chars": -1}},
                {"scheduler": {"plan_retry_s": 0.0}}):
        p.write_text(tomli_w.dumps({"hosts": hosts} | bad))
        with pytest.raises(ValidationError, match=next(iter(next(iter(bad.values()))))):
            load_config(p)


def test_message_size_limit_on_the_socket_and_in_replies():
    cfg = config(max_message_bytes=4096)
    d = Daemon(cfg)
    ctx = zmq.Context.instance()
    try:
        d.start()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(d.job_endpoint)
        pad = {"v": 1, "id": 5, "type": "submit_job", "body": {"job": {"id": "x"}}}
        # over the limit but under the socket's cap: a reply says so
        s.send(msgpack.packb(pad | {"body": {"job": {"id": "x", "pad": "y" * 8000}}}))
        assert s.poll(5000)
        rep = decode_reply(s.recv())
        assert rep.code == ErrorCode.TOO_LARGE and "4096" in rep.message
        # far over it: zmq drops the message (and the connection) before it is read
        s.send(msgpack.packb(pad | {"body": {"job": {"id": "x", "pad": "y" * 100_000}}}))
        assert not s.poll(500)
        s.close(0)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            st = c.status()
            assert st["limits"]["max_message_bytes"] == 4096 and st["limits"]["max_plan_slots"] > 0
            # a reply that would exceed the limit is refused as such, not sent
            for k in range(40):
                c.submit_job(tiny_job(f"job-{k:03d}-" + "n" * 200))
            with pytest.raises(RemoteError) as ei:
                c.status()
            assert ei.value.code == ErrorCode.TOO_LARGE and "reply of" in ei.value.message
    finally:
        d.stop()


def test_status_pages_jobs_in_submission_order():
    st = SchedulerState(config(status_page_jobs=3))
    for k in range(6):
        submit(st, tiny_job(f"e{k}"))
        st.cancel_job({"job_id": f"e{k}"}, 0.0)
    submit(st, tiny_job("run"))  # seqs 1..7
    pages = [st.status({}, 0.0), st.status({"after": 3}, 0.0), st.status({"after": 6}, 0.0)]
    assert [list(p["jobs"]) for p in pages] == [["e0", "e1", "e2"], ["e3", "e4", "e5"], ["run"]]
    assert [p["next_after"] for p in pages] == [3, 6, None]
    assert [p["jobs"][j]["seq"] for p in pages for j in p["jobs"]] == [1, 2, 3, 4, 5, 6, 7]
    assert pages[0]["jobs_total"] == 7 and pages[0]["jobs_running"] == 1 and pages[0]["jobs_omitted"] == 4
    got = st.status({"limit": 2}, 0.0)
    assert list(got["jobs"]) == ["e0", "e1"] and got["next_after"] == 2
    assert list(st.status({"limit": 100}, 0.0)["jobs"]) == ["e0", "e1", "e2"]  # at most the page size
    assert st.status({"after": 7}, 0.0)["jobs"] == {}
    assert isinstance(st.status({"limit": 0}, 0.0), Reject)


def test_status_page_stops_at_its_byte_budget(monkeypatch):
    import jitsched.daemon.bodies as bodies

    monkeypatch.setattr(bodies, "STATUS_PAGE_BYTES", 1000)
    st = SchedulerState(config())
    for k in range(10):
        submit(st, tiny_job(f"{k}-" + "x" * 198))
    # 100 bytes besides each 200-character id: four fit in 1000 bytes, not five
    got = st.status({}, 0.0)
    assert len(got["jobs"]) == 3 and got["next_after"] == 3
    assert len(st.status({"after": 9}, 0.0)["jobs"]) == 1  # one always fits


def test_ended_jobs_are_pruned_after_retention_and_beyond_the_count():
    st = SchedulerState(config(ended_retention_s=10.0, max_ended_jobs=3))
    for j in "abcde":
        submit(st, tiny_job(j))
    for t, j in ((1.0, "a"), (2.0, "b"), (3.0, "c")):
        st.cancel_job({"job_id": j}, t)
    assert st.prune(5.0) == 0  # three ended, none 10 s old
    st.cancel_job({"job_id": "d"}, 4.0)
    assert st.prune(5.0) == 1 and "a" not in st.jobs  # a fourth ended: the oldest goes
    assert st.prune(12.5) == 1 and set(st.jobs) == {"c", "d", "e"}  # b ended 10.5 s ago
    got = st.cancel_job({"job_id": "a"}, 13.0)
    assert isinstance(got, Reject) and got.code == ErrorCode.UNKNOWN_JOB
    # an ended job's id submitted again: the new job is listed last and outlives the old entry
    assert st.submit_job({"job": tiny_job("c")}, 13.0) == {"job_id": "c"}
    assert list(st.status({}, 13.0)["jobs"]) == ["d", "e", "c"]
    assert st.prune(20.0) == 2 and list(st.jobs) == ["e", "c"] and st.jobs["c"].active
    page = st.status({}, 20.0)
    assert page["jobs_pruned"] == 4 and page["jobs_total"] == 2  # a, b, the first c, d


def test_pruned_jobs_leave_the_journal(tmp_path):
    from jitsched.daemon.journal import Journal

    j = Journal(tmp_path / "j.db")
    try:
        st = SchedulerState(config(ended_retention_s=1.0), journal=j)
        submit(st, tiny_job("a"))
        submit(st, tiny_job("b"))
        st.cancel_job({"job_id": "a"}, 0.5)
        assert j.db.execute("SELECT count(*) FROM jobs").fetchone()[0] == 2
        assert st.prune(2.0) == 1
        assert [r[0] for r in j.db.execute("SELECT job_id FROM jobs")] == ["b"]
    finally:
        j.close()


# ---------------------------------------------------------------------- quarantine


class FailingPlans:
    """Mixed into a JIT policy: planning raises for some views.

    ``mode`` says when: a job whose id starts with ``poison`` is in the view
    (a poison job), two jobs are (only a joint plan fails), or always (a
    broken planner).
    """

    mode = "poison"

    def _check(self, view) -> None:
        ids = view.dag.job_ids
        if (self.mode == "always" or (self.mode == "poison" and any(j.startswith("poison") for j in ids))
                or (self.mode == "pairs" and len(ids) >= 2)):
            raise RuntimeError(f"cannot plan {sorted(ids)}")

    def schedule(self, view):
        self._check(view)
        return super().schedule(view)

    def schedule_increment(self, view, base, busy_egress, busy_ingress):
        self._check(view)
        return super().schedule_increment(view, base, busy_egress, busy_ingress)


class FailingJit(FailingPlans, JitPolicy):
    pass


class FailingJitPaper(FailingPlans, JitPaperPolicy):
    pass


def failing_policy(cfg: DaemonConfig, mode: str):
    """The policy the daemon would make of ``cfg``, failing as ``mode`` says."""
    base = create_policy(cfg)
    cls = FailingJitPaper if isinstance(base, JitPaperPolicy) else FailingJit
    pol = cls.__new__(cls)
    pol.__dict__.update(base.__dict__)
    pol.mode = mode
    return pol


@contextlib.contextmanager
def daemon_with(mode: str, **kw):
    cfg = config(planner_process=False, plan_retry_s=0.05, plan_retry_max_s=0.4, **kw)
    d = Daemon(cfg, policy=failing_policy(cfg, mode))
    try:
        d.start()
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            yield d, c
    finally:
        d.stop()


def planned(d: Daemon, *jobs: str) -> bool:
    st = d.state
    return st.planning_seq == 0 and set(jobs) <= st.covered and st.plan_summary.get("jobs") == len(jobs)


@pytest.mark.parametrize("policy, planning", [("jit", "incremental"), ("jit-paper", "incremental"),
                                              ("jit-paper", "full")])
def test_poison_job_is_failed_and_the_others_are_planned_together(policy, planning):
    with daemon_with("poison", policy=policy, planning=planning) as (d, c):
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: planned(d, "a"), 10.0)
        c.submit_job(layer_chain_job("poison", "h0", "h2"))
        c.submit_job(layer_chain_job("b", "h2", "h3"))
        assert wait_until(lambda: d.state.jobs["poison"].state == "failed" and planned(d, "a", "b"), 10.0)
        st = c.status()
        assert st["jobs"]["poison"]["state"] == "failed"
        assert "cannot plan" in st["jobs"]["poison"]["error"]
        assert st["jobs"]["a"]["state"] == st["jobs"]["b"]["state"] == "running"
        assert "poison" not in d.state.covered
        # later jobs are planned as usual, with the failed one out of the way
        c.submit_job(layer_chain_job("c", "h1", "h3"))
        assert wait_until(lambda: planned(d, "a", "b", "c"), 10.0)


@pytest.mark.alone
def test_broken_planner_backs_off_and_blames_no_job():
    with daemon_with("always", policy="jit") as (d, c):
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        t0 = time.monotonic()
        time.sleep(1.5)
        st = c.status()
        # retries 0.05, 0.1, 0.2, 0.4, 0.4... s apart: a handful, never a hot loop
        assert 3 <= st["plans_failed"] <= 8, st["plans_failed"]
        # the arrival's increment fails once and hands the job to full re-solves, which retry
        book = d.state.plan_book
        assert (book.failures["incremental"], book.failures["full"]) == (1, st["plans_failed"] - 1)
        assert st["jobs"]["a"]["state"] == "running"  # the planner is broken, not the job
        assert "cannot plan" in st["last_plan_error"]
        assert time.monotonic() - t0 < 5.0


def test_joint_plan_that_never_works_costs_its_newest_job():
    # each job plans alone, any two together fail: after BLAME_AFTER failed joint
    # re-solves the newest job leaves and the first is planned again
    with daemon_with("pairs", policy="jit") as (d, c):
        c.submit_job(layer_chain_job("first", "h0", "h1"))
        assert wait_until(lambda: planned(d, "first"), 10.0)
        c.submit_job(layer_chain_job("second", "h2", "h3"))
        assert wait_until(lambda: d.state.jobs["second"].state == "failed", 10.0)
        assert wait_until(lambda: planned(d, "first"), 10.0)
        assert d.state.jobs["first"].state == "running"
        assert f"in {BLAME_AFTER} attempts" in d.state.jobs["second"].error
        assert sum(d.state.plans_failed.values()) == BLAME_AFTER


@pytest.mark.alone
def test_failed_plans_of_a_dirty_schedule_do_not_spin():
    # two jobs planned one on top of the other (the schedule is no
    # joint plan, so joint re-solves are due), then a poison one; it spun at ~400
    # failed re-solves a second
    with daemon_with("poison", policy="jit-paper") as (d, c):
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: planned(d, "a"), 10.0)
        c.submit_job(layer_chain_job("b", "h2", "h3"))
        assert wait_until(lambda: planned(d, "a", "b"), 10.0)
        c.submit_job(layer_chain_job("poison", "h0", "h3"))
        time.sleep(1.5)
        assert d.state.jobs["poison"].state == "failed"
        assert sum(d.state.plans_failed.values()) <= 3 and d.state.n_plans < 15


def test_failed_plans_are_logged_sparingly(caplog):
    with caplog.at_level(logging.INFO, logger="jitsched.daemon"), daemon_with("always", policy="jit") as (d, c):
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: sum(d.state.plans_failed.values()) >= 7, 10.0)
    lines = [r.getMessage() for r in caplog.records if "event=plan_failed" in r.getMessage()]
    assert len(lines) == d.logs.burst  # the rest are counted, summed up once the interval ends


# ---------------------------------------------------------------------- log lines


def test_log_values_are_escaped_so_ids_cannot_forge_lines():
    line = kv("job_submitted", job='evil\nts=0 level=ERROR event=forged', note='say "hi"', tab="a\tb",
              esc="\x1b[31m", plain="ok")
    assert "\n" not in line and "\t" not in line and "\x1b" not in line
    assert r'job="evil\nts=0 level=ERROR event=forged"' in line
    assert r'note="say \"hi\""' in line and r'tab="a\tb"' in line and r'esc="\x1b[31m"' in line
    assert line.endswith("plain=ok")
    assert escape("plain id/0") == "plain id/0" and escape("a\\b") == "a\\\\b"


def test_daemon_log_of_a_newline_job_id_stays_one_line(caplog):
    d = Daemon(config())
    try:
        with caplog.at_level(logging.INFO, logger="jitsched.daemon"):
            rep = decode_reply(d.handle(b"peer", encode_request(MsgType.SUBMIT_JOB, {
                "job": tiny_job("evil\nevent=forged")}), frozenset({MsgType.SUBMIT_JOB})))
        assert rep.ok
        msgs = [r.getMessage() for r in caplog.records]
        assert any(r'job="evil\nevent=forged"' in m for m in msgs)
        assert not any("\n" in m for m in msgs)
    finally:
        d.ctx.term()


def test_log_limiter_logs_a_burst_then_a_count():
    now = [0.0]
    log = logging.getLogger("jitsched.test.limiter")
    seen: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log.addHandler(Grab())
    log.setLevel(logging.INFO)
    lim = LogLimiter(log, burst=3, interval_s=10.0, clock=lambda: now[0])
    logged = [lim.log(logging.ERROR, "plan_failed", seq=k) for k in range(10)]
    assert logged == [True] * 3 + [False] * 7 and len(seen) == 3
    lim.log(logging.ERROR, "other", x=1)  # each event has its own budget
    assert len(seen) == 4
    lim.flush()
    assert len(seen) == 4  # the interval is not over
    now[0] = 10.5
    lim.flush()
    assert seen[-1] == "event=log_suppressed of=plan_failed count=7 interval_s=10"
    assert lim.log(logging.ERROR, "plan_failed", seq=11) and seen[-1] == "event=plan_failed seq=11"
    now[0] = 30.0
    for k in range(5):
        lim.log(logging.ERROR, "plan_failed", seq=k)
    now[0] = 41.0
    lim.log(logging.ERROR, "plan_failed", seq=99)  # the next window starts with the count
    assert seen[-2:] == ["event=log_suppressed of=plan_failed count=2 interval_s=10",
                         "event=plan_failed seq=99"]


def test_log_limiter_counts_lines_at_their_own_level():
    # a daemon at WARNING hides INFO lines (a job's workers polling attach_job before the
    # job registers): the count of the ones held back is hidden with them
    now = [0.0]
    log = logging.getLogger("jitsched.test.limiter_level")
    seen: list[tuple[int, str]] = []

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append((record.levelno, record.getMessage()))

    log.addHandler(Grab())
    log.setLevel(logging.WARNING)
    lim = LogLimiter(log, burst=2, interval_s=10.0, clock=lambda: now[0])
    for k in range(6):
        lim.log(logging.INFO, "rejected", id=k)
    now[0] = 11.0
    lim.flush()
    assert seen == []
    log.setLevel(logging.INFO)
    for k in range(4):
        lim.log(logging.INFO, "rejected", id=k)
    lim.log(logging.WARNING, "rejected", id=9)  # held back with a louder one: the count at its level
    now[0] = 22.0
    lim.flush()
    assert seen[-1] == (logging.WARNING, "event=log_suppressed of=rejected count=3 interval_s=10")
