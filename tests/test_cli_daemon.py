"""Tests of the daemon-side commands of the CLI (``jitsched agent`` options)."""

from __future__ import annotations

import threading

import pytest

from jitsched.cli import main


@pytest.mark.parametrize("value", ["5", "999", "200000"])
def test_agent_refuses_an_rto_cap_outside_the_kernels_range(value, tmp_path):
    with pytest.raises(SystemExit, match=r"jitsched agent: rto_max_ms must be in 1000\.\.120000"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
              "--local-dir", str(tmp_path), "--rto-max-ms", value])


@pytest.mark.parametrize("value", ["0.5", "250"])
def test_agent_refuses_an_rto_floor_outside_1_to_200_ms(value, tmp_path):
    with pytest.raises(SystemExit, match=r"jitsched agent: rto_min_ms must be in 1\.\.200"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
              "--local-dir", str(tmp_path), "--rto-min-ms", value])


@pytest.mark.parametrize("extra, message", [
    (["--backend", "pacing", "--ingress"], "ingress: needs backend tc"),
    (["--backend", "tc", "--ingress-share", "0"], "ingress_share: must be within"),
    (["--backend", "tc", "--ingress-share", "nan"], "ingress_share: must be within"),
])
def test_agent_refuses_ingress_options_it_cannot_use(extra, message, tmp_path):
    with pytest.raises(SystemExit, match=f"jitsched agent: {message}"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--local-dir", str(tmp_path), *extra])


@pytest.mark.parametrize("extra, ingress", [
    ([], {"dev": "eth1", "borrow": True, "share": 0.98}),
    (["--ingress-share", "0.9"], {"dev": "eth1", "borrow": True, "share": 0.9}),
    (["--no-ingress"], None),
])
def test_agent_with_tc_orders_its_ingress_unless_told_not_to(monkeypatch, tmp_path, extra, ingress):
    import jitsched.agents.agent as agent_mod

    made = {}

    class Stub:
        def __init__(self, host, daemon, **kw):
            made.update(kw)
            raise ValueError("stop here")

    monkeypatch.setattr(agent_mod, "Agent", Stub)
    with pytest.raises(SystemExit, match="stop here"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--local-dir", str(tmp_path),
              "--backend", "tc", "--dev", "eth1", *extra])
    assert made["backend_options"] == {"dev": "eth1", "borrow": True}
    assert made.get("ingress") == ingress


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
    from jitsched.agents.backends.record import RecordBackend

    loaded = []

    def egress_only(name, line, **options):
        loaded.append((name, options))
        if name == "tc-ingress":
            raise OSError("ip link add jsi-eth9 type ifb: Operation not supported")
        return RecordBackend(line)

    assert _agent_against_fake_daemon(monkeypatch, tmp_path, egress_only, "--backend", "tc", "--dev", "eth9") == 1
    assert loaded == [("tc", {"dev": "eth9", "borrow": True}),
                      ("tc-ingress", {"dev": "eth9", "borrow": True, "share": 0.98})]
    err = capsys.readouterr().err
    assert "stopped: OSError: ip link add jsi-eth9 type ifb: Operation not supported" in err
    assert "--no-ingress orders the egress only" in err


def test_counts_in_the_daemons_lines_agree_with_their_number():
    from jitsched.cli.daemon import _count

    assert [_count(n, "announced flow") for n in (0, 1, 2)] == ["0 announced flows", "1 announced flow",
                                                                  "2 announced flows"]
    assert _count(1, "job") == "1 job"


def test_status_names_an_agent_whose_clock_is_off_or_that_never_acks(capsys):
    # a real daemon: h0's agent runs 30 s behind and says so; h1's body goes unacked
    import time

    from jitsched.agents.agent import Agent
    from jitsched.daemon.server import wait_until
    from tests.test_daemon import system

    with system(hosts=("h2",)) as (d, _):
        a = Agent("h0", d.agent_endpoint, backend="record", local_namespace=f"cli{id(d)}",
                  clock_ns=lambda: time.time_ns() - 30 * 10**9).start()
        try:
            assert wait_until(lambda: d.state.agents.get("h0") is not None and d.state.agents["h0"].clock_off, 5.0)
            d.state.agents["h2"].resends_stopped = True  # as after RESEND_TRIES unacked re-sends
            d.state.agent_table.counts["schedule_resends_stopped"] = 1
            assert main(["status", "--daemon", d.job_endpoint]) == 0
        finally:
            a.stop()
    out = capsys.readouterr().out
    [h0] = [ln for ln in out.splitlines() if "agent h0" in ln]
    assert "CLOCK OFF by -30.0" in h0
    [h2] = [ln for ln in out.splitlines() if "agent h2" in ln]
    assert "NOT ACKING" in h2
    assert "  agents: schedule_resends_stopped 1" in out
