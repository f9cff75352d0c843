"""Attach tickets: an agent attaches a job's processes only with the daemon's ticket for that job, host and user."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from jitsched import tickets
from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.keys import init_keys, load_daemon_keys
from jitsched.localreg import attach, detach
from jitsched.protocol import MsgType, ProtocolError, RemoteError, encode_request, validate_body
from jitsched.workloads.synth import layer_chain_job
from tests.test_attach import _ticket, as_user, system
from tests.test_daemon import config
from tests.test_daemon_security import secured

NOBODY = 65534
REFUSED = "ticket_refused"


def _refused(fn) -> str:
    """The agent's refusal of ``fn()``'s request, "code message" (the test fails if it was taken)."""
    with pytest.raises(RemoteError) as e:
        fn()
    return f"{e.value.code} {e.value.message}"


def test_a_local_user_naming_a_job_without_its_own_ticket_is_refused_and_counted():
    # a real second user on the agent's socket (SO_PEERCRED says 65534): without a ticket,
    # and with the ticket the daemon gave root, it attaches nothing; with its own it does
    with system(allowed_uids=(NOBODY,)) as (d, a, c):
        theirs = subprocess.Popen(["sleep", "30"], user=NOBODY)
        try:
            got = as_user(NOBODY, lambda: attach(a.local_name, "j", pids=[theirs.pid]))
            assert got.startswith(f"{REFUSED} job 'j' is named without a ticket"), got
            roots = _ticket(c)
            got = as_user(NOBODY, lambda: attach(a.local_name, "j", pids=[theirs.pid], ticket=roots))
            assert got == f"{REFUSED} the ticket is for uid 0, not the caller's uid {NOBODY}", got
            assert not a.attached.attachments and a.tickets_refused == 2
            # the agent's status carries the count to the daemon's
            assert wait_until(lambda: c.status()["agents"]["h0"].get("counts", {}).get("tickets_refused") == 2,
                              3.0)
            own = _ticket(c, uid=NOBODY)
            got = as_user(NOBODY, lambda: attach(a.local_name, "j", pids=[theirs.pid], ticket=own))
            assert got == str({"job": "j", "attachments": 1, "conns": 0})
            # detach takes no ticket: it removes the caller's own attachments only
            assert as_user(NOBODY, lambda: detach(a.local_name, "j")) == str({"job": "j", "detached": 1})
        finally:
            theirs.kill()
            theirs.wait()


def test_a_forged_expired_or_other_hosts_jobs_or_daemons_ticket_is_refused():
    with system() as (d, a, c):
        me, pid = os.geteuid(), os.getpid()
        got = _refused(lambda: attach(a.local_name, "j", pids=[pid]))
        assert got.startswith(f"{REFUSED} job 'j' is named without a ticket"), got
        c.submit_job(layer_chain_job("k", "h0", "h1"))
        good = _ticket(c)
        far = time.time_ns() + 10**12
        cases = [
            (good | {"mac": "0" * 64}, "signature does not match"),
            # any field changed breaks the signature
            (good | {"expires_ns": good["expires_ns"] + 10**12}, "signature does not match"),
            (good | {"uid": me + 1}, "signature does not match"),  # root may use any uid's: the MAC decides
            (tickets.issue(d.state.ticket_secret, "j", "h0", me, time.time_ns() - 10**9), "the ticket expired"),
            (_ticket(c, host="h1"), "the ticket is for host 'h1', not this agent's 'h0'"),
            (_ticket(c, job="k"), "the ticket is for job 'k', not 'j'"),
            # signed with another daemon's secret
            (tickets.issue(tickets.daemon_secret(), "j", "h0", me, far), "signature does not match"),
        ]
        for ticket, words in cases:
            got = _refused(lambda t=ticket: attach(a.local_name, "j", pids=[pid], ticket=t))
            assert got.startswith(REFUSED) and words in got, (ticket, got)
        assert not a.attached.attachments and a.tickets_refused == 1 + len(cases) and a.running
        # a field of the wrong type is the body's schema's to refuse
        got = _refused(lambda: attach(a.local_name, "j", pids=[pid], ticket=good | {"uid": "0"}))
        assert got == "invalid_body body.ticket.uid: expected int, got str", got
        assert attach(a.local_name, "j", pids=[pid], ticket=good)["attachments"] == 1


def test_an_agent_that_has_not_met_the_daemon_refuses_saying_so():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"tk{uuid.uuid4().hex[:8]}").start()
    try:
        t = tickets.issue(tickets.daemon_secret(), "j", "h0", os.geteuid(), time.time_ns() + 10**12)
        got = _refused(lambda: attach(a.local_name, "j", pids=[os.getpid()], ticket=t))
        assert got.startswith(f"{REFUSED} the agent of 'h0' has no ticket key yet: it has not registered"), got
        assert a.running and not a.attached.attachments and a.counts()["tickets_refused"] == 1
    finally:
        a.stop()


@pytest.fixture
def keys(tmp_path):
    d = tmp_path / "keys"
    init_keys(d, ["h0", "h1"], ["alice", "bob"])
    return d


def test_with_keys_another_tenants_job_gets_no_ticket_and_its_own_ticket_names_only_its_own_job(keys):
    # alice's job is "alice:j" on the agents; bob, on the same host, holds a ticket for his
    # own job only, and the daemon gives him none for alice's
    with secured(keys) as (d, agents), \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as alice, \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="bob") as bob:
        a, pid = agents["h0"], os.getpid()
        alice.submit_job(layer_chain_job("j", "h0", "h1"))
        bob.submit_job(layer_chain_job("k", "h0", "h1"))
        got = _refused(lambda: attach(a.local_name, "alice:j", pids=[pid]))
        assert got.startswith(f"{REFUSED} job 'alice:j' is named without a ticket"), got
        with pytest.raises(RemoteError) as e:
            bob.attach_job("j", "h0", uid=os.geteuid())
        assert e.value.code == "unknown_job"
        bobs = bob.attach_job("k", "h0", uid=os.geteuid())
        assert bobs["job_id"] == bobs["ticket"]["job"] == "bob:k"
        got = _refused(lambda: attach(a.local_name, "alice:j", pids=[pid], ticket=bobs["ticket"]))
        assert got == f"{REFUSED} the ticket is for job 'bob:k', not 'alice:j'", got
        alices = alice.attach_job("j", "h0", uid=os.geteuid())
        assert attach(a.local_name, "alice:j", pids=[pid], ticket=alices["ticket"])["attachments"] == 1


def _secret(**kw) -> bytes:
    """The ticket secret of a daemon built (not started) with ``config(**kw)``."""
    d = Daemon(config(**kw))
    try:
        return d.state.ticket_secret
    finally:
        d.ctx.term()


def test_the_ticket_secret_follows_the_daemons_key_so_replicas_and_restarts_sign_alike(keys, tmp_path):
    s1, s2 = _secret(keys_dir=str(keys)), _secret(keys_dir=str(keys))
    assert s1 == s2 == tickets.daemon_secret(load_daemon_keys(keys).secret)
    t = tickets.issue(s1, "alice:j", "h0", 1000, 10**19)
    tickets.check(tickets.host_key(s2, "h0"), t, job="alice:j", host="h0", uid=1000, now_ns=0)
    # another key directory, and a daemon without keys: another secret
    init_keys(tmp_path / "other", ["h0", "h1"], ["alice"])
    others = {_secret(keys_dir=str(tmp_path / "other")), _secret(), _secret()}
    assert s1 not in others and len(others) == 3
    # each host's key is its own: h0's signs nothing h1's agent takes
    assert tickets.host_key(s1, "h0") != tickets.host_key(s1, "h1")


def test_the_ticket_check_refuses_each_mismatch():
    secret = tickets.daemon_secret()
    key = tickets.host_key(secret, "h0")
    t = tickets.issue(secret, "c:j", "h0", 1000, 5000)

    def why(**kw) -> str:
        args = {"job": "c:j", "host": "h0", "uid": 1000, "now_ns": 4999} | kw
        try:
            tickets.check(args.pop("key", key), args.pop("ticket", t), **args)
        except ProtocolError as exc:
            assert exc.code == REFUSED
            return exc.message
        return ""

    assert why() == "" and why(uid=0) == ""  # root may act for the user the ticket names
    assert "is for uid 1000, not the caller's uid 1001" in why(uid=1001)
    assert "expired" in why(now_ns=5000)
    assert "is for job 'c:j', not 'c:j2'" in why(job="c:j2")
    assert "is for host 'h0', not this agent's 'h1'" in why(host="h1")
    assert "signature" in why(key=tickets.host_key(secret, "h1"))
    assert "no ticket key yet" in why(key=None)
    assert "without a ticket" in why(ticket=None)
    # one signed message per (job, host, uid, expiry): no separator trick makes two equal
    assert tickets.issue(secret, "a:b", "c", 1, 2)["mac"] != tickets.issue(secret, "a", "b:c", 1, 2)["mac"]


def test_the_attach_body_takes_a_ticket_of_the_declared_fields():
    t = {"job": "j", "host": "h0", "uid": 0, "expires_ns": 1, "mac": "00"}
    validate_body(MsgType.ATTACH, {"job": "j", "pids": [1], "ticket": t})
    for bad, words in ((t | {"extra": 1}, "body.ticket.extra: unknown field"),
                       ({k: v for k, v in t.items() if k != "mac"}, "body.ticket.mac: missing required field"),
                       ("tok", "body.ticket: expected dict")):
        with pytest.raises(ProtocolError) as e:
            validate_body(MsgType.ATTACH, {"job": "j", "pids": [1], "ticket": bad})
        assert words in e.value.message
    assert encode_request(MsgType.ATTACH_JOB, {"job_id": "j", "host": "h0", "uid": 1000})
