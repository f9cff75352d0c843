"""Tests of the training-loop SDK against real daemons: one registration, a message per step, no cost to training when the daemon is away."""

from __future__ import annotations

import contextlib
import logging
import time

import pytest

from jitsched.bench.bench_faults import free_ports
from jitsched.client import Client
from jitsched.client.sdk import Trainer, TrainerOptions, _Report
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.errors import ValidationError
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job

JOB = layer_chain_job("train", "h0", "h1", VGG16_LAYERS[:3])
N_COMPUTES = len(JOB.computes)


def _daemon(port: int | str = "*", **kw) -> Daemon:
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e9), job_endpoint=f"tcp://127.0.0.1:{port}",
                       agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=2.0,
                       resend_s=0.1, slot_s=0.1, policy="jit", **kw)
    return Daemon(cfg).start()


@contextlib.contextmanager
def daemon(port: int | str = "*", **kw):
    d = _daemon(port, **kw)
    try:
        yield d
    finally:
        d.stop()


def _recurring(endpoint: str, job_id: str = "train") -> dict:
    with Client(endpoint, timeout_s=5.0) as c:
        job = c.status()["jobs"].get(job_id)
    return {} if job is None else job | job.get("recurring", {})


def _opts(endpoint: str, **kw) -> TrainerOptions:
    base = dict(endpoint=endpoint, request_timeout_s=0.5, retry_s=0.2)
    return TrainerOptions(**(base | kw))


def test_options_refuse_bad_values_naming_the_field():
    for kw, words in (({"request_timeout_s": 0}, "request_timeout_s"), ({"retry_s": float("nan")}, "retry_s"),
                      ({"lease_renew_s": True}, "lease_renew_s"), ({"max_pending": 0}, "max_pending"),
                      ({"endpoint": "localhost"}, "endpoint"), ({"job_class": "urgent"}, "job_class")):
        with pytest.raises(ValidationError, match=words):
            TrainerOptions(**kw)
    with pytest.raises(ValidationError, match="job id"):
        Trainer({"computes": []}, TrainerOptions())


def test_a_training_loop_registers_once_and_sends_one_message_per_step():
    with daemon() as d:
        tr = Trainer(JOB, _opts(d.job_endpoint))
        for i in range(20):
            with tr.step() as s:
                time.sleep(0.005)
                s["compute_s"] = [c.duration_s * (1.5 if i % 2 else 0.5) for c in JOB.computes]
        assert tr.stats.steps == 20
        assert wait_until(lambda: tr.stats.sent == 20, 5.0), tr.stats
        got = _recurring(d.job_endpoint)
        assert got["iterations"] == 20 and got["state"] == "running"
        assert got["iteration_s_mean"] >= 0.005 and got["iteration_s_p95"] >= got["iteration_s_mean"]
        assert got["estimate_error"] is not None and got["learned_from"] == "computes"
        tr.close()
        st = tr.stats
        assert (st.state, st.registrations, st.outages, st.dropped, st.coalesced) == ("closed", 1, 0, 0, 0)
        assert _recurring(d.job_endpoint)["state"] == "finished"


def test_without_a_daemon_steps_cost_microseconds_it_says_so_once_and_resumes_when_one_comes(caplog):
    caplog.set_level(logging.INFO, logger="jitsched.client.sdk")
    port = free_ports(1)[0]
    endpoint = f"tcp://127.0.0.1:{port}"
    tr = Trainer(JOB, _opts(endpoint))
    try:
        # training at full speed: a step's mark never waits for the daemon (0.5 s timeouts)
        worst, t0 = 0.0, time.perf_counter()
        for _ in range(3000):
            s0 = time.perf_counter()
            tr.step_done(0.001, compute_s=[0.001] * N_COMPUTES)
            worst = max(worst, time.perf_counter() - s0)
        mean = (time.perf_counter() - t0) / 3000
        assert mean < 200e-6 and worst < 0.1, (mean, worst)
        assert wait_until(lambda: tr.stats.state == "unreachable", 3.0), tr.stats
        time.sleep(0.6)  # retries meanwhile: one outage, one warning
        st = tr.stats
        # one report waits for the daemon (the steps merged into it before the trainer found
        # the daemon away), the others were dropped
        assert st.outages == 1 and st.sent == 0 and "no reply" in st.last_error
        assert len(tr._pending) == 1 and st.dropped + tr._pending[0].count == 3000 and st.coalesced > 0
        warned = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warned) == 1 and "training goes on" in warned[0].getMessage()
        # a daemon comes: the trainer registers and the next steps are reported
        with daemon(port):
            assert wait_until(lambda: tr.stats.state == "ok", 5.0), tr.stats
            n = tr.step_done(0.001, compute_s=[0.001] * N_COMPUTES)
            assert wait_until(lambda: _recurring(endpoint).get("iterations") == n, 5.0), tr.stats
            assert tr.stats.registrations == 1
        # it goes away (no journal) and comes back: the same no-op, logged at info level,
        # then the template registered again (the new daemon never heard of it)
        for _ in range(50):
            tr.step_done(0.001)
            time.sleep(0.02)
        assert wait_until(lambda: tr.stats.state == "unreachable", 3.0), tr.stats
        with daemon(port):
            def reported():
                tr.step_done(0.001)
                return _recurring(endpoint).get("iterations") == tr.stats.steps
            assert wait_until(reported, 10.0, step_s=0.1), tr.stats
            assert tr.stats.outages == 2 and tr.stats.registrations == 2
            assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
            tr.close()
    finally:
        tr.close(timeout_s=1.0)


def test_steps_queued_while_the_daemon_is_slow_are_merged_into_fewer_messages():
    port = free_ports(1)[0]
    endpoint = f"tcp://127.0.0.1:{port}"
    # the first request waits for a daemon that is not there yet (5 s timeout): the
    # steps queue up, at most 3 messages' worth
    tr = Trainer(JOB, _opts(endpoint, request_timeout_s=5.0, max_pending=3))
    try:
        for i in range(10):
            tr.step_done(0.01 * (i + 1), compute_s=[float(i + 1)] * N_COMPUTES)
        assert tr.stats.coalesced == 7
        with daemon(port):
            assert wait_until(lambda: tr.stats.sent == 3, 8.0), tr.stats
            got = _recurring(endpoint)
            assert got["iterations"] == 10  # the newest step's number: every step counted
            tr.close()
    finally:
        tr.close(timeout_s=1.0)


def test_a_merged_report_averages_its_steps():
    a = _Report(1, 1, 1.0, [1.0, 2.0], None, None)
    a.merge(_Report(2, 1, 3.0, [3.0, 4.0], None, None))
    a.merge(_Report(3, 1, 5.0, [5.0, 6.0], None, [7.0]))
    assert (a.n, a.count, a.step_s, a.compute_s, a.nbytes) == (3, 3, 3.0, [3.0, 4.0], [7.0])


def test_a_refused_report_is_counted_and_training_goes_on(caplog):
    with daemon() as d:
        tr = Trainer(JOB, _opts(d.job_endpoint))
        tr.step_done(0.01, compute_s=[0.001] * (N_COMPUTES + 1))  # one value too many
        tr.step_done(0.01, compute_s=[0.001] * N_COMPUTES)
        assert wait_until(lambda: tr.stats.sent == 1, 5.0), tr.stats
        assert tr.stats.rejected == 1 and "body.compute_s" in tr.stats.last_error
        assert _recurring(d.job_endpoint)["iterations"] == 2
        tr.close()


def test_a_job_ended_by_its_operator_is_no_longer_reported():
    with daemon() as d:
        tr = Trainer(JOB, _opts(d.job_endpoint))
        tr.step_done(0.01)
        assert wait_until(lambda: tr.stats.sent == 1, 5.0), tr.stats
        with Client(d.job_endpoint) as c:
            c.cancel_job("train")
        tr.step_done(0.01)
        assert wait_until(lambda: tr.stats.state == "ended", 5.0), tr.stats
        for _ in range(5):
            tr.step_done(0.01)
        assert tr.stats.sent == 1 and tr.stats.dropped == 6 and "job_ended" in tr.stats.last_error
        assert tr.stats.registrations == 1  # not registered again behind its operator's back
        tr.close()
        assert _recurring(d.job_endpoint)["state"] == "cancelled"


def test_an_idle_job_keeps_its_lease():
    with daemon(job_lease_s=1.0) as d:
        tr = Trainer(JOB, _opts(d.job_endpoint, lease_renew_s=0.3))
        tr.step_done(0.01)
        time.sleep(2.5)  # a long evaluation pause: no steps, over twice the lease
        assert _recurring(d.job_endpoint)["state"] == "running"
        assert tr.stats.lease_renewals >= 4
        tr.close()
    # without renewals the daemon ends it as abandoned
    with daemon(job_lease_s=1.0) as d:
        tr = Trainer(JOB, _opts(d.job_endpoint, lease_renew_s=60.0))
        tr.step_done(0.01)
        assert wait_until(lambda: _recurring(d.job_endpoint).get("state") == "abandoned", 5.0)
        tr.close()


def test_a_process_of_a_job_registered_elsewhere_only_counts_its_steps():
    with daemon() as d:
        follower = Trainer("train", _opts(d.job_endpoint))
        follower.step_done(0.01)
        time.sleep(0.5)
        assert follower.stats.state == "connecting"  # no such job yet: it keeps looking
        owner = Trainer(JOB, _opts(d.job_endpoint))
        assert wait_until(lambda: follower.stats.state == "ok", 3.0), follower.stats
        assert follower.flow_job == "train" and follower.stats.sent == 0
        follower.close()
        owner.close()


def test_a_trainer_registers_its_job_in_the_class_it_is_given():
    with daemon() as d:
        tr = Trainer(JOB, _opts(d.job_endpoint, job_class="critical"))
        tr.step_done(0.01)
        assert wait_until(lambda: tr.stats.sent == 1, 5.0), tr.stats
        assert d.state.job_registry.jobs["train"].job.job_class == "critical"
        tr.close()


def test_options_refuse_an_endpoint_the_client_cannot_connect_to():
    with pytest.raises(ValidationError, match="endpoint"):
        TrainerOptions(endpoint="tcp://127.0.0.1")  # no port
    with pytest.raises(ValidationError, match="endpoint"):
        TrainerOptions(endpoint="tcp://127.0.0.1:5555,tcp://127.0.0.1")


def test_a_client_that_cannot_be_made_ends_the_trainer_and_says_why(tmp_path):
    # a key directory without this client's keys: the trainer ends, naming the missing file
    tr = Trainer(JOB, _opts("tcp://127.0.0.1:1", keys=tmp_path))
    try:
        assert wait_until(lambda: not tr._thread.is_alive(), 5.0)
        assert tr.stats.state == "ended"
        assert "key" in tr.stats.last_error
        assert tr.step_done(0.01) == 1 and tr.stats.dropped == 1
    finally:
        tr.close(1.0)


def test_a_second_trainer_of_a_running_job_ends_instead_of_reporting_uncounted_steps():
    # another trainer (a restarted process whose first one never closed) holds the job:
    # the daemon refuses the registration, and the new trainer says so in its stats
    with daemon() as d:
        first = Trainer(JOB, _opts(d.job_endpoint))
        second = None
        try:
            for _ in range(10):
                first.step_done(0.01)
            assert wait_until(lambda: first.stats.sent == 10, 5.0), first.stats
            second = Trainer(JOB, _opts(d.job_endpoint))
            for _ in range(5):
                second.step_done(0.01)
            assert wait_until(lambda: second.stats.state == "ended", 5.0), second.stats
            assert "duplicate_job" in second.stats.last_error or "already running" in second.stats.last_error
            assert second.stats.sent == 0 and second.stats.registrations == 0
            assert _recurring(d.job_endpoint)["iterations"] == 10
        finally:
            first.close(2.0)
            if second is not None:
                second.close(2.0)


def test_a_job_ended_by_its_operator_and_pruned_meanwhile_is_not_registered_again():
    # on a busy daemon the cancelled job leaves the registry (max_ended_jobs) before the
    # training's next step: the next report finds no job, and the job stays cancelled
    with daemon(max_ended_jobs=0) as d:
        tr = Trainer(JOB, _opts(d.job_endpoint))
        tr.step_done(0.01)
        assert wait_until(lambda: tr.stats.sent == 1, 5.0), tr.stats
        with Client(d.job_endpoint) as c:
            c.cancel_job("train")
        assert wait_until(lambda: not _recurring(d.job_endpoint), 5.0)  # pruned
        tr.step_done(0.01)
        assert wait_until(lambda: tr.stats.state == "ended", 5.0), tr.stats
        assert tr.stats.registrations == 1 and tr.stats.sent == 1
        tr.close()
        assert _recurring(d.job_endpoint) == {}
