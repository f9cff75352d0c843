"""Tests of the daemon-side commands of the CLI (``jitsched agent`` options)."""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from jitsched.agents.backends.base import BACKGROUND_FLOOR, FLOW_FLOOR, FLOW_FLOORS_SUM
from jitsched.cli import main
from jitsched.errors import ValidationError


def _refused(capsys, argv: list[str]) -> str:
    """``jitsched argv`` exits 2 with one line on stderr; returns it."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("value", ["5", "999", "200000"])
def test_agent_refuses_an_rto_cap_outside_the_kernels_range(value, tmp_path, capsys):
    err = _refused(capsys, ["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
                            "--local-dir", str(tmp_path), "--rto-max-ms", value])
    assert re.match(r"jitsched agent: error: --rto-max-ms: must be in 1000\.\.120000", err)


@pytest.mark.parametrize("value", ["0.5", "250"])
def test_agent_refuses_an_rto_floor_outside_1_to_200_ms(value, tmp_path, capsys):
    err = _refused(capsys, ["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
                            "--local-dir", str(tmp_path), "--rto-min-ms", value])
    assert re.match(r"jitsched agent: error: --rto-min-ms: must be in 1\.\.200", err)


@pytest.mark.parametrize("extra, message", [
    (["--backend", "pacing", "--ingress"], "--ingress: needs backend tc"),
    (["--backend", "tc", "--ingress-share", "0"], "--ingress-share: must be within"),
    (["--backend", "tc", "--ingress-share", "nan"], "--ingress-share: must be within"),
])
def test_agent_refuses_ingress_options_it_cannot_use(extra, message, tmp_path, capsys):
    err = _refused(capsys, ["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--local-dir",
                            str(tmp_path), *extra])
    assert err.startswith(f"jitsched agent: error: {message}")


TC = {"dev": "eth1", "borrow": True, "background_floor": BACKGROUND_FLOOR, "flow_floor": FLOW_FLOOR,
      "flow_floors_sum": FLOW_FLOORS_SUM}


@pytest.mark.parametrize("extra, ingress, egress", [
    ([], TC | {"share": 0.98}, TC),
    (["--ingress-share", "0.9"], TC | {"share": 0.9}, TC),
    (["--no-ingress"], None, TC),
    (["--background-floor", "0.2"], TC | {"background_floor": 0.2, "share": 0.98}, TC | {"background_floor": 0.2}),
    (["--flow-floor", "0.001"], TC | {"flow_floor": 0.001, "share": 0.98}, TC | {"flow_floor": 0.001}),
])
def test_agent_with_tc_orders_its_ingress_unless_told_not_to(monkeypatch, tmp_path, extra, ingress, egress, capsys):
    import jitsched.agents.agent as agent_mod

    made = {}

    class Stub(agent_mod.Agent):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            made["agent"] = self
            raise ValidationError("stop here")

    monkeypatch.setattr(agent_mod, "Agent", Stub)
    monkeypatch.setattr("socket.if_nametoindex", lambda dev: 7)  # eth1 is the stub's, not this host's
    assert "stop here" in _refused(capsys, ["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1",
                                            "--local-dir", str(tmp_path), "--backend", "tc", "--dev", "eth1",
                                            *extra])
    assert made["agent"].backend_options == egress
    assert made["agent"].ingress_options == ingress


def _agent_against_fake_daemon(monkeypatch, tmp_path, load_backend, *flags: str) -> int:
    """``jitsched agent ... --quiet`` against a fake daemon that answers its registration once; its exit code."""
    import jitsched.agents.agent as agent_mod
    from tests.test_agent import _FakeDaemon, _register_reply

    monkeypatch.setattr(agent_mod, "load_backend", load_backend)
    fake = _FakeDaemon()
    answered = threading.Thread(target=lambda: fake.reply(*fake.recv("register")[:2], _register_reply(1)))
    answered.start()
    try:
        return main(["agent", "--host", "h0", "--daemon", fake.endpoint, "--local-dir", str(tmp_path),
                     *flags, "--quiet"])
    finally:
        answered.join(10)
        fake.close()


def test_agent_command_exits_1_when_its_agent_fails(monkeypatch, tmp_path, capsys):
    def broken(name, line, **options):
        raise OSError("tc: Operation not permitted")

    assert _agent_against_fake_daemon(monkeypatch, tmp_path, broken, "--backend", "record") == 1
    err = capsys.readouterr().err
    assert "jitsched agent h0: stopped: OSError: tc: Operation not permitted" in err
    assert "--no-ingress" not in err  # no ingress to blame


def test_agent_command_names_no_ingress_when_the_ingress_cannot_be_ordered(monkeypatch, tmp_path, capsys):
    # tc with its default ingress on a host whose IFB cannot be made: the egress backend
    # is installed, the ingress one fails, and the message names the way out
    monkeypatch.setattr("socket.if_nametoindex", lambda dev: 7)  # eth9 is the stub's, not this host's
    from jitsched.agents.backends.record import RecordBackend

    loaded = []

    def egress_only(name, line, **options):
        loaded.append((name, options))
        if name == "tc-ingress":
            raise OSError("ip link add jsi-eth9 type ifb: Operation not supported")
        return RecordBackend(line)

    assert _agent_against_fake_daemon(monkeypatch, tmp_path, egress_only, "--backend", "tc", "--dev", "eth9") == 1
    tc = {"dev": "eth9", "borrow": True, "background_floor": BACKGROUND_FLOOR, "flow_floor": FLOW_FLOOR,
          "flow_floors_sum": FLOW_FLOORS_SUM}
    assert loaded == [("tc", tc), ("tc-ingress", tc | {"share": 0.98})]
    err = capsys.readouterr().err
    assert "stopped: OSError: ip link add jsi-eth9 type ifb: Operation not supported" in err
    assert "--no-ingress orders the egress only" in err


def test_counts_in_the_daemons_lines_agree_with_their_number():
    from jitsched.cli.daemon import _count

    assert [_count(n, "announced flow") for n in (0, 1, 2)] == ["0 announced flows", "1 announced flow",
                                                                  "2 announced flows"]
    assert _count(1, "job") == "1 job"


def test_attach_names_a_jobs_process_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    import json
    import subprocess

    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.client import Client
    from jitsched.config import DaemonConfig
    from jitsched.daemon import Daemon
    from jitsched.daemon.server import wait_until
    from jitsched.dag.model import Cluster
    from jitsched.workloads.synth import layer_chain_job

    d = Daemon(DaemonConfig(cluster=Cluster.uniform(2, bps=1e8), job_endpoint="tcp://127.0.0.1:*",
                            agent_endpoint="tcp://127.0.0.1:*", policy="jit")).start()
    a = Agent("h0", d.agent_endpoint, AgentOptions(backend="record"), local_dir=tmp_path).start()
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("j", "h0", "h1"))
        base = ["attach", "j", "--host", "h0", "--daemon", d.job_endpoint, "--local-dir", str(tmp_path)]
        assert main([*base, "--pid", str(proc.pid), "--peer", "198.18.0.2=h1", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"job": "j", "attachments": 1, "conns": 0}
        assert wait_until(lambda: a.attached.attachments, 1.0)
        assert a.attached.attachments[0].peers == {"198.18.0.2": "h1"} and a.attached.attachments[0].uid == 0

        def status_text() -> str:
            assert main(["status", "--daemon", d.job_endpoint]) == 0
            return capsys.readouterr().out

        assert wait_until(lambda: "attached j " in status_text(), 5.0)
        assert "0 connections (0 scheduled, 0 to unknown peers), rank None, 0.0 MB sent" in status_text()
        for argv, why in [
            ([*base, "--pid", "999999999"], "invalid_body: pid 999999999 does not exist"),
            ([*base, "--cgroup", "/etc"], "invalid_body: cgroup path '/etc' is outside /sys/fs/cgroup"),
            ([*base, "--pid", "1", "--port", "80"], "name exactly one of --pid, --cgroup and --port"),
            ([*base, "--pid", str(proc.pid), "--peer", "h1"], "--peer 'h1': expected ADDR[:PORT]=HOST"),
            ([*base, "--pid", str(proc.pid), "--peer", "198.18.0.9=zz"], "--peer: 'zz' not among job 'j''s hosts (h0, h1)"),
            (["attach", "nope", *base[2:], "--pid", str(proc.pid)], "unknown_job: no job 'nope'"),
        ]:
            assert main(argv) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and why in err, err
        assert main([*base, "--detach"]) == 0
        assert capsys.readouterr().out == "detached job j on h0: 1 attachment removed\n"
        assert a.running and not a.attached.attachments
    finally:
        proc.kill()
        proc.wait()
        a.stop()
        d.stop()


def test_status_text_shows_recurring_jobs_and_journal_trouble(tmp_path, capsys):
    from jitsched.client import Client
    from jitsched.daemon import Daemon
    from jitsched.workloads.synth import layer_chain_job
    from tests.test_daemon import config
    from tests.test_daemon_limits import tiny_job

    d = Daemon(config(journal=str(tmp_path / "j.db"), planner_process=False, policy="jit")).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            jid = c.register_template(layer_chain_job("tpl", "h0", "h1"))
            for n in (1, 2, 3):
                c.iteration(jid, n, step_s=0.5 + 0.1 * n)
            assert c.submit(tiny_job("crit", 1.25e8, src="h2", dst="h3") | {"class": "critical"})["class"] == "critical"
        d.state.journal_errors, d.state.journal_last_error = 2, "database or disk is full"
        d.state.job_registry.active["crit"].at_risk["h3"] = "reserved on more than the 0.8 of host h3's ports"
        assert main(["status", "--daemon", d.job_endpoint]) == 0
    finally:
        d.stop()
    out = capsys.readouterr().out
    assert "recurring tpl: 3 iterations, mean 0.700 s" in out
    assert "JOURNAL: 2 writes failed (last: database or disk is full)" in out
    assert "critical jobs (JCT within 1.05x isolated): 1 holding reservations, 0 refused" in out
    # its hosts have no address in this cluster: the agents cannot cap traffic into them
    assert ("as normal instead; 0 finished within it, 0 did not, AT RISK (reserved on more than an agent can "
            "give): crit; 2 hosts held, their agents keeping 0.01 for unranked traffic, NOT CAPPED (no "
            "address): h2, h3" in out)
    assert "critical: on time AT RISK: reserved on more than the 0.8 of host h3's ports" in out


def test_status_names_an_agent_whose_clock_is_off_or_that_never_acks(capsys):
    # a real daemon: h0's agent runs 30 s behind and says so; h1's body goes unacked
    import time

    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.daemon.server import wait_until
    from tests.test_daemon import system

    with system(hosts=("h2",)) as (d, _):
        a = Agent("h0", d.agent_endpoint, AgentOptions(backend="record"),
                  local_namespace=f"cli{id(d)}", clock_ns=lambda: time.time_ns() - 30 * 10**9).start()
        try:
            assert wait_until(lambda: d.state.agents.get("h0") is not None and d.state.agents["h0"].clock_off, 5.0)
            d.state.agents["h2"].resends_stopped = True  # as after RESEND_TRIES unacked re-sends
            # as a tc agent registers: a 5 % floor, and payload in whole frames
            d.state.agents["h2"].background_floor, d.state.agents["h2"].payload_share = 0.05, 1448 / 1514
            d.state.agents["h2"].holds_floor = True  # and with the DL marks: it lowers it under a critical job
            d.state.agent_table.counts["schedule_resends_stopped"] = 1
            a.stale = 2  # bodies older than its own, as a daemon sending seqs out of order makes
            assert wait_until(lambda: d.state.agents["h0"].counts.get("stale") == 2, 5.0)
            assert main(["status", "--daemon", d.job_endpoint]) == 0
        finally:
            a.stop()
    out = capsys.readouterr().out
    [h0] = [ln for ln in out.splitlines() if "agent h0" in ln]
    # the offset is estimated over a round trip, so a loaded machine reads a few ms off -30 s
    m = re.search(r"CLOCK OFF by ([-+][0-9.]+) s", h0)
    assert m and abs(float(m.group(1)) + 30.0) < 0.1, h0
    [h2] = [ln for ln in out.splitlines() if "agent h2" in ln]
    assert "NOT ACKING" in h2
    assert h0.endswith("; ignored 2 schedules older than its own") and "older" not in h2
    # a critical job is reserved on what the daemon's critical floor leaves there (0.99 of 0.956)
    assert ("reserves 0.947 of its ports (floor 0.05, 0.01 while a critical job holds them, payload 0.956)"
            in h2 and "reserves" not in h0)
    assert "  agents: schedule_resends_stopped 1" in out


def test_daemon_command_exits_1_when_its_loop_dies(monkeypatch, tmp_path, capsys):
    """A daemon whose loop died serves nothing: the command ends at once with exit 1 and says why,
    so that a supervisor restarts it (rather than a process that lives on, deaf)."""
    from jitsched.daemon.server import Daemon

    cfg = tmp_path / "c.toml"
    cfg.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n'
                   '[daemon]\njob_endpoint = "tcp://127.0.0.1:0"\nagent_endpoint = "tcp://127.0.0.1:0"\n')
    turns = []

    def dies_on_the_third_turn(self, now):
        turns.append(now)
        if len(turns) == 3:
            raise RuntimeError("housekeeping broke")

    monkeypatch.setattr(Daemon, "_housekeeping", dies_on_the_third_turn)
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # the command sets its own
    # a command that missed its loop's death would wait for a signal: it gets one, late
    late = threading.Timer(10.0, os.kill, (os.getpid(), signal.SIGTERM))
    t0 = time.monotonic()
    late.start()
    try:
        rc = main(["daemon", "--config", str(cfg), "--quiet"])
    finally:
        late.cancel()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert rc == 1
    assert time.monotonic() - t0 < 10
    assert len(turns) == 3
    err = capsys.readouterr().err
    assert "jitsched daemon: stopped: RuntimeError: housekeeping broke" in err


def test_submit_through_a_replica_that_died_after_taking_the_job_says_it_was_submitted(tmp_path, capsys):
    import json

    from tests.test_client import dead_then_duplicate

    f = tmp_path / "j.json"
    f.write_text(json.dumps({"id": "x", "computes": [{"id": "c", "host": "h0", "duration_s": 1}]}))
    with dead_then_duplicate() as (endpoint, seen):
        assert main(["submit", str(f), "--daemon", endpoint]) == 0
    assert capsys.readouterr().out == "submitted x\n" and seen == ["submit_job"]


def test_cancel_ends_this_clients_running_jobs_and_names_what_it_could_not(capsys):
    import json

    from jitsched.client import Client
    from jitsched.config import DaemonConfig
    from jitsched.daemon import Daemon
    from jitsched.dag.model import Cluster
    from jitsched.workloads.synth import layer_chain_job

    d = Daemon(DaemonConfig(cluster=Cluster.uniform(2, bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                            agent_endpoint="tcp://127.0.0.1:*"))
    d.start()
    try:
        with Client(d.job_endpoint) as c:
            # no agents: both jobs stay running until cancelled
            for jid in ("a", "b"):
                c.submit_job(layer_chain_job(jid, "h0", "h1"))
        capsys.readouterr()
        assert main(["cancel", "a", "--daemon", d.job_endpoint]) == 0
        assert capsys.readouterr().out == "cancelled a\n"
        assert d.state.job_registry.jobs["a"].state == "cancelled"
        assert d.state.job_registry.jobs["b"].state == "running"
        # an unknown id is refused and named; the known one is still cancelled; exit 2
        assert main(["cancel", "nope", "b", "--daemon", d.job_endpoint, "--json"]) == 2
        out, err = capsys.readouterr()
        jobs = json.loads(out)["jobs"]
        assert jobs["b"] == {"state": "cancelled"} and jobs["nope"]["error"] == "unknown_job"
        assert err.startswith("jitsched cancel: error: nope: unknown_job: ") and len(err.splitlines()) == 1
        assert d.state.job_registry.jobs["b"].state == "cancelled"
    finally:
        d.stop()


def test_waiting_for_a_signal_puts_the_previous_handlers_back():
    # the daemon and agent commands wait so; a process that runs them in-process (or forks
    # after) gets SIGINT and SIGTERM back as they were, not a handler that only sets an event
    from jitsched.cli.daemon import _until_signal

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop = threading.Event()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        _until_signal(stop)
    finally:
        timer.cancel()
    assert stop.is_set()
    assert {sig: signal.getsignal(sig) for sig in before} == before
