"""CURVE on the daemon's sockets, on real loopback ZeroMQ: no key no service, keys bound to hosts and jobs."""

from __future__ import annotations

import contextlib
import time

import pytest
import zmq

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.cli import main
from jitsched.client import Client
from jitsched.client.runner import JobRunner
from jitsched.client.transfer import TransferSink
from jitsched.config import load_config
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.errors import ValidationError
from jitsched.keys import AGENT_DOMAIN, CLIENT_DOMAIN, CurveKeys, init_keys, load_curve_keys
from jitsched.protocol import (
    ErrorCode,
    MsgType,
    RemoteError,
    decode_reply,
    encode_request,
    is_reply,
)
from tests.test_daemon import config
from tests.test_runner import _job

HOSTS = ("h0", "h1")
SHORT_S = 0.5  # how long a refused peer waits for a reply that never comes


@pytest.fixture
def keys(tmp_path):
    d = tmp_path / "keys"
    init_keys(d, list(HOSTS), ["alice", "bob"])
    return d


@contextlib.contextmanager
def secured(keys_dir, hosts=HOSTS, backend="record"):
    """A daemon with keys and one agent per host holding its own key, all stopped on exit."""
    d = Daemon(config(cluster=config().cluster, keys_dir=str(keys_dir)))
    agents: dict[str, Agent] = {}
    try:
        d.start()
        for h in hosts:
            agents[h] = Agent(h, d.agent_endpoint, AgentOptions(backend=backend),
                              keys=keys_dir, local_namespace=f"sec{id(d)}").start()
        assert wait_until(lambda: all(a.registered.is_set() for a in agents.values()), 5.0)
        yield d, agents
    finally:
        for a in agents.values():
            a.stop()
        d.stop()


@contextlib.contextmanager
def raw_dealer(endpoint: str, keys: CurveKeys | None):
    """A bare DEALER socket, as a hand-written peer would open one."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        keys.apply(s)
    s.connect(endpoint)
    try:
        yield s
    finally:
        s.close(0)
        ctx.term()


def ask(s: zmq.Socket, type_: str, body: dict, timeout_s: float = 2.0):
    """The reply to one request, or None when none comes within ``timeout_s``."""
    s.send(encode_request(type_, body))
    end = time.monotonic() + timeout_s
    while s.poll(max(1, int((end - time.monotonic()) * 1000))):
        data = s.recv()
        if is_reply(data):  # not a schedule the daemon pushed
            return decode_reply(data)
    return None


def test_plaintext_and_unknown_keys_get_no_service(keys, tmp_path):
    with secured(keys) as (d, _):
        # no key: the CURVE handshake never completes, nothing reaches the daemon
        with Client(d.job_endpoint, timeout_s=SHORT_S) as c, pytest.raises(TimeoutError, match="handshake"):
            c.submit_job(_job())
        # a well-formed key pair the daemon does not know, even with the daemon's public key
        other = tmp_path / "other"
        init_keys(other, [], ["alice"])
        stranger = load_curve_keys(other, "clients", "alice")
        stranger = CurveKeys(stranger.public, stranger.secret, d.keys.public)
        with Client(d.job_endpoint, timeout_s=SHORT_S, keys=stranger) as c, \
                pytest.raises(TimeoutError, match="refused this key"):
            c.status()
        # a host's key is no client key: each socket lets in its own keys only
        with Client(d.job_endpoint, timeout_s=SHORT_S, keys=load_curve_keys(keys, "hosts", "h0")) as c, \
                pytest.raises(TimeoutError, match="refused"):
            c.cancel_job("small")
        # nor is a client's key a host's: no registration, no schedule
        with raw_dealer(d.agent_endpoint, load_curve_keys(keys, "clients", "alice")) as s:
            assert ask(s, MsgType.REGISTER, {"host": "h0"}, SHORT_S) is None
        with raw_dealer(d.agent_endpoint, None) as s:
            assert ask(s, MsgType.GET_SCHEDULE, {"host": "h0"}, SHORT_S) is None
        assert d.state.jobs == {}
        assert d.key_checks[CLIENT_DOMAIN].refused >= 2 and d.key_checks[AGENT_DOMAIN].refused >= 1
        assert d.state.agents["h0"].peer == "h0" and d.state.agents["h0"].up


def test_a_host_key_registers_its_own_host_only(keys):
    with secured(keys, hosts=("h0",)) as (d, agents):
        h0 = d.state.agents["h0"]
        identity = h0.identity
        with raw_dealer(d.agent_endpoint, load_curve_keys(keys, "hosts", "h1")) as s:
            # h1's key cannot register as the live h0, nor push it out
            rep = ask(s, MsgType.REGISTER, {"host": "h0", "backend": "evil"})
            assert rep is not None and not rep.ok and rep.code == ErrorCode.FORBIDDEN
            assert "h1" in rep.message
            # nor read h0's schedule, nor heartbeat for it
            for type_, body in ((MsgType.GET_SCHEDULE, {"host": "h0"}), (MsgType.HEARTBEAT, {"host": "h0"})):
                rep = ask(s, type_, body)
                assert rep is not None and not rep.ok and rep.code == ErrorCode.NOT_REGISTERED
            # its own host, which has no agent yet, it may register
            rep = ask(s, MsgType.REGISTER, {"host": "h1"})
            assert rep is not None and rep.ok
        st = d.state.agents["h0"]
        assert st is h0 and st.identity == identity and st.backend == "record" and st.up
        assert agents["h0"].registered.is_set()
        # h0's own key on a second connection is a second agent: refused while the first
        # is alive; once it stopped (its connection closed), the key takes its host back
        with raw_dealer(d.agent_endpoint, load_curve_keys(keys, "hosts", "h0")) as s:
            rep = ask(s, MsgType.REGISTER, {"host": "h0", "backend": "again"})
            assert rep is not None and rep.code == ErrorCode.HOST_IN_USE
            assert d.state.agents["h0"] is h0 and agents["h0"].registered.is_set()
            agents["h0"].stop()
            assert wait_until(lambda: (ask(s, MsgType.REGISTER, {"host": "h0", "backend": "again"}) or rep).ok, 2.0)
        assert d.state.agents["h0"].backend == "again" and d.state.agents["h0"].up


def test_a_live_host_keeps_its_key():
    # Keys make a host's name its key's, so a second key for a live host cannot come
    # from the key directory; the table refuses it all the same.
    from jitsched.daemon.agents import AgentTable

    table = AgentTable(config(), 0.0, lambda *_: None)
    assert isinstance(table.register(b"a", {"host": "h0"}, 0.0, peer="h0"), dict)
    rep = table.register(b"b", {"host": "h0"}, 0.1, peer="h0-other")
    assert rep.code == ErrorCode.FORBIDDEN
    assert table.agents["h0"].identity == b"a"
    # and a connection that reuses the registered routing id with another key is not h0
    rep = table.heartbeat(b"a", {"host": "h0"}, 0.2, peer="h1")
    assert rep.code == ErrorCode.FORBIDDEN
    table.check(10.0)  # h0 falls silent: down
    assert isinstance(table.register(b"b", {"host": "h0"}, 10.1, peer=None), dict)


def test_a_job_answers_to_the_key_that_submitted_it(keys):
    with secured(keys) as (d, _):
        with Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as alice, \
                Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="bob") as bob:
            # each client names its jobs by its own ids; the daemon holds them by key
            assert alice.submit(_job()) == {"job_id": "small", "flow_job": "alice:small"}
            forged = [
                lambda: bob.cancel_job("small"),
                lambda: bob.job_finished("small", 1.0),
                lambda: bob.transfer_finished("small", "t0", 200_000.0),
                lambda: bob.transfer_started("small", "t1"),
                lambda: bob.compute_finished("small", "c0", 0.01),
                lambda: bob.cancel_job("alice:small"),  # nor by the scoped id
            ]
            for call in forged:
                with pytest.raises(RemoteError) as err:
                    call()
                assert err.value.code == ErrorCode.UNKNOWN_JOB and "of client 'bob'" in err.value.message
            js = d.state.jobs["alice:small"]
            assert js.active and js.owner == "alice" and js.done == {} and js.started == {}
            # bob may look (status is read-only) and sees whose job it is
            entry = bob.status()["jobs"]["alice:small"]
            assert entry["owner"] == "alice" and entry["id"] == "small"
            # bob's own job of the same id is another job: it squats nothing of alice's
            assert bob.submit(_job()) == {"job_id": "small", "flow_job": "bob:small"}
            assert bob.cancel_job("small") == {"state": "cancelled"}
            assert d.state.jobs["alice:small"].active and d.state.jobs["bob:small"].state == "cancelled"
            # nor can it take over alice's once it ended: a resubmission of bob's is bob's
            assert alice.transfer_finished("small", "t0")["lat_hit"] in (True, False, None)
            assert alice.cancel_job("small") == {"state": "cancelled"}
            assert bob.submit_job(_job()) == "small"
            assert d.state.jobs["alice:small"].state == "cancelled" and d.state.jobs["alice:small"].done
            assert d.state.jobs["bob:small"].active
            alice.transfer_started("small", "t1")  # alice's ended job, not bob's running one
            assert "t1" in d.state.jobs["alice:small"].started and not d.state.jobs["bob:small"].started
        assert d.metrics is not None


def test_runner_and_agents_work_with_keys(keys):
    with secured(keys, backend="pacing") as (d, agents):
        sinks = {h: TransferSink() for h in HOSTS}
        try:
            runner = JobRunner(_job(), d.job_endpoint, {h: s.address for h, s in sinks.items()},
                               agents={h: a.local_name for h, a in agents.items()}, keys=keys, key_name="bob")
            r = runner.run(timeout_s=30)
        finally:
            for s in sinks.values():
                s.close()
        assert r.error == ""
        js = d.state.jobs["bob:small"]
        assert js.state == "finished" and js.owner == "bob"
        # its flows went by the id the daemon's schedules name them by
        assert runner.flow_job == "bob:small"
        assert set(js.done) == {"t0", "t1", "push", "c0", "c1"}
        # the agents got their schedules over CURVE and acked them
        assert wait_until(lambda: all(a.acked_seq >= 1 for a in d.state.agents.values()), 5.0)


def test_non_loopback_bind_without_keys_is_refused(tmp_path, keys, capsys):
    for ep in ("tcp://0.0.0.0:*", "tcp://*:*"):
        with pytest.raises(ValidationError, match="--insecure"):
            Daemon(config(job_endpoint=ep))
    # with keys, or insecure, such a config is accepted (not started here: no bind)
    for kw in ({"keys_dir": str(keys)}, {"insecure": True}):
        d = Daemon(config(agent_endpoint="tcp://0.0.0.0:*", **kw))
        d.stop()
    toml = tmp_path / "c.toml"
    toml.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n'
                    '[daemon]\njob_endpoint = "tcp://0.0.0.0:5555"\n', encoding="utf-8")
    with pytest.raises(ValidationError, match="not a loopback address"):
        load_config(toml)
    assert main(["daemon", "--config", str(toml)]) == 2
    assert "--insecure" in capsys.readouterr().err
    assert load_config(toml, insecure=True).insecure
    # a relative keys_dir is the config file's neighbour
    toml.write_text(toml.read_text(encoding="utf-8") + '[security]\nkeys_dir = "keys"\n', encoding="utf-8")
    assert load_config(toml).keys_dir == str(keys)


def test_cli_submit_and_status_with_keys(keys, tmp_path, capsys):
    import json

    job = tmp_path / "job.json"
    job.write_text(json.dumps(_job().to_dict()), encoding="utf-8")
    with secured(keys) as (d, _):
        ep = d.job_endpoint
        assert main(["status", "--daemon", ep, "--timeout-s", str(SHORT_S)]) == 1
        assert "handshake" in capsys.readouterr().err
        assert main(["submit", str(job), "--daemon", ep, "--keys", str(keys), "--key-name", "alice"]) == 0
        assert "submitted small" in capsys.readouterr().out
        assert main(["status", "--daemon", ep, "--keys", str(keys), "--key-name", "bob"]) == 0
        assert "owner alice" in capsys.readouterr().out
        assert d.state.jobs["alice:small"].owner == "alice"


def test_a_client_key_added_as_a_host_key_later_is_refused_on_the_agent_socket(keys):
    # one key for a client and a host is refused at start; a host key read again while the
    # daemon runs is held to the same: alice's key does not become host h9's
    from jitsched.keys import public_path, read_key

    with secured(keys, hosts=("h0",)) as (d, _):
        alice = read_key(public_path(keys, "clients", "alice"), secret=False)
        p = public_path(keys, "hosts", "h9")
        p.write_bytes(alice + b"\n")
        p.chmod(0o600)
        with raw_dealer(d.agent_endpoint, load_curve_keys(keys, "clients", "alice")) as s:
            assert ask(s, MsgType.REGISTER, {"host": "h9"}, SHORT_S) is None
        assert alice.decode() not in d.key_checks[AGENT_DOMAIN].keys
