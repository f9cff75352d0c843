"""Tests of the job runner: a small DAG job runs for real through daemon, pacing agents and sinks."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.client import Client
from jitsched.client.runner import JobRunner
from jitsched.client.transfer import TransferSink
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Compute, Job, Transfer
from jitsched.plan.learn import learned_job
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job
from tests.test_daemon import system


def _job() -> Job:
    return Job("small", (Compute("c0", "h1", 0.05), Compute("c1", "h1", 0.05)),
               (Transfer("t0", "h0", "h1", 200_000.0), Transfer("t1", "h0", "h1", 400_000.0),
                Transfer("push", "h1", "h0", 100_000.0)),
               (("t0", "c0"), ("c0", "c1"), ("t1", "c1"), ("c1", "push")))


@pytest.mark.parametrize("async_reports", [False, True])
def test_runner_executes_and_reports_everything(async_reports, monkeypatch):
    events = []
    sent: dict[str, int] = {}
    real = Client.request

    def counted(self, type_, body=None):
        sent[type_] = sent.get(type_, 0) + 1
        return real(self, type_, body)

    monkeypatch.setattr(Client, "request", counted)
    with system(hosts=("h0", "h1"), backend="pacing") as (d, agents):
        sinks = {h: TransferSink() for h in ("h0", "h1")}
        try:
            r = JobRunner(_job(), d.job_endpoint, {h: s.address for h, s in sinks.items()},
                          agents={h: a.local_name for h, a in agents.items()},
                          on_event=lambda *e: events.append(e),
                          async_reports=async_reports).run(timeout_s=30)
        finally:
            for s in sinks.values():
                s.close()
        assert r.error == ""
        assert sinks["h1"].received == {"small/t0": 200_000, "small/t1": 400_000}
        assert sinks["h0"].received == {"small/push": 100_000}
        # order respects the DAG: c0 after t0, c1 after c0 and t1, push last
        order = [e[2] for e in events]
        assert order.index("c0") > order.index("t0")
        assert order.index("c1") > max(order.index("c0"), order.index("t1"))
        assert order[-1] == "push"
        assert r.jct_s >= 0.1  # two 50 ms computes in sequence
        # the timeline: push starts after both computes, every transfer ends within the job
        assert set(r.transfer_start_s) == set(r.transfer_s) == {"t0", "t1", "push"}
        assert r.transfer_start_s["push"] >= 0.1
        assert all(r.transfer_start_s[t] + r.transfer_s[t] <= r.jct_s for t in r.transfer_s)
        # the ideal JCT by hand: t0 -> c0 -> c1 (after t1 too) -> push, with their measured times
        ts = r.transfer_s
        c1_end = max(ts["t0"] + 0.05, ts["t1"]) + 0.05
        assert r.ideal_jct_s == pytest.approx(c1_end + ts["push"], abs=1e-9)
        assert r.ideal_jct_s <= r.jct_s
        js = d.state.jobs["small"]
        assert js.state == "finished" and js.jct_s == r.jct_s
        # one event per node (started and finished per transfer): in one message each
        # synchronously, in report messages of several asynchronously
        events = 2 * 3 + 2
        if async_reports:
            assert "transfer_finished" not in sent and 1 <= sent["report"] < events, sent
        else:
            assert (sent["transfer_started"], sent["transfer_finished"], sent["compute_finished"]) == (3, 3, 2)
        assert set(js.done) == {"t0", "t1", "push", "c0", "c1"}
        assert js.measured_s["c0"] >= 0.05
        # t0 and t1 start at submission and may finish (~8 ms) before the first plan lands,
        # when no LAT exists yet; push follows 100 ms of compute, when the job is planned
        assert 1 <= r.lat_known <= 3 and js.lat_hits + js.lat_misses == r.lat_known
        assert wait_until(lambda: d.state.plan_summary.get("reasons") is not None, 5.0)


@pytest.mark.alone
def test_computes_end_at_their_emulated_time_whatever_their_thread_costs():
    # c0 (60 ms) -> c1 (30 ms) and c2 (20 ms) -> c3 (40 ms): a chain of 90 ms beside one of
    # 60 ms; ideal JCT 0.09 s by hand, the computes report their own durations, and no
    # node ends before its emulated time, so the JCT is at least that
    job = Job("comp", (Compute("c0", "h0", 0.06), Compute("c1", "h0", 0.03),
                       Compute("c2", "h0", 0.02), Compute("c3", "h0", 0.04)),
              (), (("c0", "c1"), ("c2", "c3")))
    with system(hosts=("h0",)) as (d, _):
        r = JobRunner(job, d.job_endpoint, {}).run(timeout_s=30)
        assert r.error == ""
        assert r.ideal_jct_s == pytest.approx(0.09, abs=1e-9)
        assert r.ideal_jct_s <= r.jct_s < 1.0
        js = d.state.jobs["comp"]
        assert {c: round(js.measured_s[c], 9) for c in ("c0", "c1", "c2", "c3")} == {
            "c0": 0.06, "c1": 0.03, "c2": 0.02, "c3": 0.04}


def test_runner_reports_failure_and_cancels():
    with system(hosts=("h0", "h1")) as (d, _):
        # no sink listens on this address: the first transfer fails
        r = JobRunner(_job(), d.job_endpoint, {"h0": ("127.0.0.1", 1), "h1": ("127.0.0.1", 1)}
                      ).run(timeout_s=10)
        assert r.error and "t" in r.error
        assert r.ideal_jct_s != r.ideal_jct_s  # NaN: a failed run has no ideal JCT
        assert d.state.jobs["small"].state == "cancelled"


@pytest.mark.parametrize("async_reports", [False, True])
def test_an_asynchronous_run_starts_before_the_daemon_answers_its_submission(async_reports, monkeypatch):
    import time

    real = Client.submit

    def slow_submit(self, job):
        time.sleep(0.4)  # a daemon busy with a plan, or checking a 2000-transfer DAG
        return real(self, job)

    monkeypatch.setattr(Client, "submit", slow_submit)
    with system(hosts=("h0", "h1")) as (d, _):
        sinks = {h: TransferSink() for h in ("h0", "h1")}
        try:
            r = JobRunner(_job(), d.job_endpoint, {h: s.address for h, s in sinks.items()},
                          async_reports=async_reports).run(timeout_s=30)
        finally:
            for s in sinks.values():
                s.close()
        assert r.error == ""
        # the first reads go out at once (asynchronous) or after the reply (synchronous)
        first = min(r.transfer_start_s.values())
        assert (first < 0.2) if async_reports else (first >= 0.4), r.transfer_start_s
        # the daemon got the submission before the reports either way: the job is whole
        js = d.state.jobs["small"]
        assert js.state == "finished" and set(js.done) == {"t0", "t1", "push", "c0", "c1"}


@pytest.mark.parametrize("async_reports", [False, True])
def test_a_refused_submission_raises_whether_or_not_the_run_went_ahead(async_reports):
    from jitsched.protocol import ErrorCode, RemoteError

    with system(hosts=("h0", "h1")) as (d, _):
        sinks = {h: TransferSink() for h in ("h0", "h1")}
        try:
            with Client(d.job_endpoint) as c:
                c.submit_job(_job())  # the id is taken: the runner's submission is refused
            with pytest.raises(RemoteError) as exc:
                JobRunner(_job(), d.job_endpoint, {h: s.address for h, s in sinks.items()},
                          async_reports=async_reports).run(timeout_s=30)
        finally:
            for s in sinks.values():
                s.close()
        assert exc.value.code == ErrorCode.DUPLICATE_JOB
        # the job the daemon has is the first one, with nothing reported by the refused run
        assert d.state.jobs["small"].done == {}


@pytest.mark.parametrize("async_reports", [False, True])
def test_no_daemon_to_submit_to_is_the_runs_error(async_reports):
    # computes only (nothing to send): the run's error names the submission, no exception
    job = Job("lonely", (Compute("c0", "h0", 0.01),), (), ())
    r = JobRunner(job, "tcp://127.0.0.1:9", {}, async_reports=async_reports,
                  request_timeout_s=0.2).run(timeout_s=1.0)
    assert r.error.startswith("submit: ") and "before the run's timeout" in r.error


def test_transfers_up_to_register_min_bytes_do_not_register_with_their_agent():
    # the demo leaves its small transfers out of its agents (a round trip per transfer
    # costs more than the transfer); the larger ones still register
    from jitsched.client.runner import JobRunner
    from jitsched.client.transfer import TransferSink
    from jitsched.dag.model import Compute, Job, Transfer
    from tests.test_daemon import system

    job = Job("mix", (Compute("c", "h1", 0.0),),
              (Transfer("small", "h0", "h1", 1000), Transfer("big", "h0", "h1", 200_000)),
              (("small", "c"), ("big", "c")), 0.0)
    with system(hosts=("h0", "h1"), backend="record") as (d, agents):
        sinks = {h: TransferSink("127.0.0.1") for h in ("h0", "h1")}
        try:
            r = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()},
                          agents={h: a.local_name for h, a in agents.items()},
                          register_min_bytes=1000).run(timeout_s=30.0)
        finally:
            for s in sinks.values():
                s.close()
        assert r.error == "" and set(r.transfer_s) == {"small", "big"}
        assert agents["h0"].registrations == {"out": 1, "in": 0}
    with pytest.raises(ValueError, match="register_min_bytes"):
        JobRunner(job, "tcp://127.0.0.1:1", {}, register_min_bytes=-1)


def test_a_runner_marks_its_transfers_connections_with_its_tos(monkeypatch):
    # the agents' --dl-dscp class takes a transfer's packets before its flow is registered
    # at the receiver only if they carry the mark
    from jitsched.client import runner as runner_mod
    from jitsched.client.runner import JobRunner
    from jitsched.client.transfer import TransferSink
    from jitsched.dag.model import Job, Transfer
    from tests.test_daemon import system

    marks = []
    real = runner_mod.send_bytes

    def send_bytes(*a, **kw):
        marks.append(kw.get("tos"))
        return real(*a, **kw)

    monkeypatch.setattr(runner_mod, "send_bytes", send_bytes)
    job = Job("marked", (), (Transfer("t", "h0", "h1", 10_000),), (), 0.0)
    with system(hosts=("h0", "h1"), backend="record") as (d, _):
        sinks = {h: TransferSink("127.0.0.1") for h in ("h0", "h1")}
        try:
            r = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()}, tos=0x88).run(timeout_s=30.0)
        finally:
            for s in sinks.values():
                s.close()
    assert r.error == "" and marks == [0x88]
    for bad in (256, -1, True, 1.5):
        with pytest.raises(ValueError, match="tos: must be a TOS byte"):
            JobRunner(job, "tcp://127.0.0.1:1", {}, tos=bad)


def test_a_runner_runs_a_template_as_iterations_and_the_daemon_learns_its_timings():
    """run_iterations registers the template once, reports one iteration message each."""
    job = layer_chain_job("rec", "h0", "h1", VGG16_LAYERS[:3], min_compute_s=0.01)
    truth = np.array([c.duration_s for c in job.computes])
    declared = learned_job(job, 2.0 * truth, np.zeros_like(truth))
    with system(hosts=("h0", "h1"), policy="jit") as (d, _agents):
        sinks = {h: TransferSink() for h in ("h0", "h1")}
        try:
            runner = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()})
            got = runner.run_iterations(4, 30.0, template=declared, compute_noise=0.1, seed=3)
        finally:
            for s in sinks.values():
                s.close()
        assert len(got) == 4 and not any(r.error for r in got)
        t = d.state.templates.get("rec")
        assert t.iterations == 4 and d.state.jobs["rec"].state == "finished"
        mean, _ = t.model.estimates()
        # learned from the runs, not the declared 2x
        assert np.allclose(mean, truth, rtol=0.35) and not np.allclose(mean, 2.0 * truth, rtol=0.35)
        assert got[1].compute_s != got[2].compute_s  # noise drawn anew each iteration
        # no per-node reports: the daemon saw no node done
        assert not d.state.jobs["rec"].done


@pytest.mark.parametrize("async_reports", [False, True])
def test_a_submission_that_reached_a_replica_before_it_died_counts_as_made(async_reports):
    from jitsched.protocol import MsgType
    from tests.test_client import dead_then_duplicate

    with dead_then_duplicate() as (endpoint, seen):
        job = Job("lonely", (Compute("c0", "h0", 0.01),), (), ())
        r = JobRunner(job, endpoint, {}, async_reports=async_reports, request_timeout_s=5.0).run(timeout_s=20.0)
    assert r.error == ""
    assert seen[0] == MsgType.SUBMIT_JOB and MsgType.JOB_FINISHED in seen


@pytest.mark.parametrize("async_reports", [False, True])
def test_a_report_the_daemon_could_not_record_goes_again_until_it_is(async_reports):
    # a daemon whose store does not take the first two progress messages answers them
    # "unavailable"; the runner sends them again and the job finishes
    import threading

    import zmq

    from jitsched.protocol import ErrorCode, MsgType, decode_request, encode_error, encode_ok

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    endpoint = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    seen: list[tuple[str, bool]] = []
    stop = threading.Event()

    def serve() -> None:
        refused = 0
        while not stop.is_set():
            if not sock.poll(50):
                continue
            peer, data = sock.recv_multipart()
            req = decode_request(data)
            progress = req.type in (MsgType.REPORT, MsgType.COMPUTE_FINISHED)
            if progress and refused < 2:
                refused += 1
                rep = encode_error(req.id, ErrorCode.UNAVAILABLE, "its events are not recorded yet; send them again")
            elif req.type == MsgType.SUBMIT_JOB:
                rep = encode_ok(req.id, {"job_id": req.body["job"]["id"], "class": "normal"})
            else:
                rep = encode_ok(req.id, {"results": [{}] * len(req.body.get("events", []))})
            seen.append((req.type, progress))
            sock.send_multipart([peer, rep])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        job = Job("j", (Compute("c0", "h0", 0.01),), (), ())
        r = JobRunner(job, endpoint, {}, async_reports=async_reports, request_timeout_s=5.0).run(timeout_s=20.0)
    finally:
        stop.set()
        t.join(5)
        sock.close(0)
        ctx.term()
    assert r.error == ""
    progress = [ty for ty, p in seen if p]
    assert len(progress) == 3  # refused twice, then taken
    assert seen[-1][0] == MsgType.JOB_FINISHED


def test_a_job_lost_again_after_each_resubmission_ends_the_run_after_max_resubmits():
    # the daemon takes every submission and answers every report "unknown_job": after
    # MAX_RESUBMITS resubmissions in a row the run fails, well before its deadline
    import threading
    import time

    import zmq

    from jitsched.client.runner import _Session
    from jitsched.protocol import ErrorCode, MsgType, decode_request, encode_error, encode_ok

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    endpoint = f"tcp://127.0.0.1:{sock.bind_to_random_port('tcp://127.0.0.1')}"
    submits = [0]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if not sock.poll(50):
                continue
            peer, data = sock.recv_multipart()
            req = decode_request(data)
            if req.type == MsgType.SUBMIT_JOB:
                submits[0] += 1
                rep = encode_ok(req.id, {"job_id": req.body["job"]["id"], "class": "normal"})
            elif req.type == MsgType.CANCEL_JOB:
                rep = encode_ok(req.id, {"state": "cancelled"})
            else:
                rep = encode_error(req.id, ErrorCode.UNKNOWN_JOB, f"no job {req.body.get('job_id')!r}")
            sock.send_multipart([peer, rep])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        job = Job("j", (Compute("c0", "h0", 0.01),), (), ())
        t0 = time.monotonic()
        r = JobRunner(job, endpoint, {}, request_timeout_s=2.0).run(timeout_s=8.0)
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(5)
        sock.close(0)
        ctx.term()
    assert "lost" in r.error
    assert submits[0] <= 1 + _Session.MAX_RESUBMITS
    assert took < 6.0
