"""Flow tickets: an agent takes a job's socket (register_flow) only with the daemon's ticket for that job."""

from __future__ import annotations

import contextlib
import os
import socket
import time

from jitsched import tickets
from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.localreg import register_flow, unregister_flow
from jitsched.protocol import MsgType, Reply, decode_reply, encode_request
from jitsched.workloads.synth import layer_chain_job
from tests.flowtickets import TEST_SECRET, flow_ticket
from tests.test_attach_tickets import keys  # noqa: F401 - a fixture
from tests.test_daemon_security import secured
from tests.test_localreg import tcp_pair

REFUSED = "ticket_refused"


@contextlib.contextmanager
def _agent():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"ft{time.monotonic_ns()}").start()
    try:
        flow_ticket(a, "x/y")  # gives the agent the test secret's key for its host
        yield a
    finally:
        a.stop()


def _register(a: Agent, flow: str, ticket: dict | None) -> Reply:
    """The agent's reply to a register_flow of a fresh connected socket as ``flow``."""
    body: dict = {"flow": flow} if ticket is None else {"flow": flow, "ticket": ticket}
    with tcp_pair() as s:
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.settimeout(3.0)
        try:
            c.connect(a.local_name)
            socket.send_fds(c, [encode_request(MsgType.REGISTER_FLOW, body)], [s.fileno()])
            return decode_reply(c.recv(65536))
        finally:
            c.close()


def test_a_jobs_flow_without_its_own_valid_ticket_is_refused_and_counted():
    me, later = os.geteuid(), time.time_ns() + 60 * 10**9
    with _agent() as a:
        cases = [
            (None, "is named without a ticket"),
            (tickets.issue(TEST_SECRET, "bob:k", "h0", me, later), "the ticket is for job 'bob:k', not 'alice:j'"),
            # a job id that is the flow's job's prefix covers nothing of it
            (tickets.issue(TEST_SECRET, "alice:", "h0", me, later), "not 'alice:j'"),
            (tickets.issue(TEST_SECRET, "alice:j", "h1", me, later), "for host 'h1'"),
            (tickets.issue(TEST_SECRET, "alice:j", "h0", me, time.time_ns() - 10**9), "expired"),
            (tickets.issue(b"another daemon's secret.........", "alice:j", "h0", me, later), "signature"),
        ]
        for ticket, why in cases:
            rep = _register(a, "alice:j/t", ticket)
            assert not rep.ok and rep.code == REFUSED and why in rep.message, (ticket, rep)
        assert a.flows == {} and a.tickets_refused == len(cases)
        rep = _register(a, "alice:j/t", flow_ticket(a, "alice:j/t"))
        assert rep.ok, rep
        assert list(a.flows) == ["alice:j/t"]
        # inbound too: the same check
        rep = _register(a, "alice:j/in", None)
        assert not rep.ok and rep.code == REFUSED
        # an announced background flow needs one too (tests/test_background_tickets.py)
        assert _register(a, "/bulk", None).code == REFUSED


def test_register_flow_passes_the_ticket_and_unregister_needs_none():
    with _agent() as a, tcp_pair() as s:
        assert register_flow(a.local_name, "j/t", s) is None  # refused: logged, the flow unpaced
        ctrl = register_flow(a.local_name, "j/t", s, ticket=flow_ticket(a, "j/t"))
        assert ctrl is not None and list(a.flows) == ["j/t"]
        unregister_flow(ctrl, "j/t")
        deadline = time.monotonic() + 3.0
        while a.flows and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.flows == {}


def test_with_keys_a_submission_brings_tickets_for_its_own_jobs_flows_only(keys):  # noqa: F811
    # alice's job is "alice:j" on the agents: bob's submission brings tickets for his
    # own job, which the agent refuses for alice's flows; alice's register them
    with secured(keys) as (d, agents), \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as alice, \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="bob") as bob:
        a = agents["h0"]
        got = alice.submit(layer_chain_job("j", "h0", "h1"), uid=os.geteuid())
        assert set(got["tickets"]) == {"h0", "h1"} and got["ticket_s"] > 0
        assert all(t["job"] == "alice:j" and t["host"] == h for h, t in got["tickets"].items())
        bobs = bob.submit(layer_chain_job("k", "h0", "h1"), uid=os.geteuid())["tickets"]
        assert "tickets" not in alice.submit(layer_chain_job("n", "h0", "h1"))  # no uid: none
        with tcp_pair() as s:
            assert register_flow(a.local_name, "alice:j/t", s, ticket=bobs["h0"]) is None
            assert register_flow(a.local_name, "alice:j/t", s, ticket=got["tickets"]["h1"]) is None
            assert a.flows == {} and a.tickets_refused == 2
            ctrl = register_flow(a.local_name, "alice:j/t", s, ticket=got["tickets"]["h0"])
            assert ctrl is not None and list(a.flows) == ["alice:j/t"]
            unregister_flow(ctrl, "alice:j/t")


def test_a_runner_registers_its_flows_at_both_ends_with_the_submissions_tickets():
    from jitsched.client.runner import JobRunner
    from jitsched.client.transfer import TransferSink
    from jitsched.dag.model import Compute, Job, Transfer
    from tests.test_daemon import system

    job = Job("tk", (Compute("c", "h1", 0.0),), (Transfer("big", "h0", "h1", 200_000),), (("big", "c"),), 0.0)
    with system(hosts=("h0", "h1"), backend="record") as (d, agents):
        sinks = {h: TransferSink("127.0.0.1", agent=agents[h].local_name) for h in ("h0", "h1")}
        try:
            runner = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()},
                               agents={h: a.local_name for h, a in agents.items()})
            r = runner.run(timeout_s=30.0)
        finally:
            for s in sinks.values():
                s.close()
        assert r.error == "", r.error
        # the sink registers the inbound flow unless it ended first (a fast loopback): either
        # way the agents refused nothing
        assert agents["h0"].registrations["out"] == 1
        assert agents["h0"].tickets_refused == agents["h1"].tickets_refused == 0
        assert set(runner._tickets) == {"h0", "h1"}


def test_a_runner_asks_for_a_new_ticket_past_half_its_life(monkeypatch):
    from jitsched.client import runner as runner_mod
    from jitsched.client.runner import JobRunner
    from jitsched.dag.model import Job, Transfer

    asked = []

    class FakeClient:
        def __init__(self, *a, **kw):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def attach_job(self, job_id, host, uid=None):
            asked.append((job_id, host, uid))
            return {"job_id": job_id, "host": host, "ticket": {"job": job_id, "host": host, "new": True}}

    monkeypatch.setattr(runner_mod, "Client", FakeClient)
    job = Job("long", (), (Transfer("t", "h0", "h1", 1),), (), 0.0)
    r = JobRunner(job, "tcp://127.0.0.1:1", {})
    r._submitted({"job_id": "long", "tickets": {"h0": {"job": "long", "host": "h0"}}, "ticket_s": 300.0})
    assert r._ticket("h0") == {"job": "long", "host": "h0"} and asked == []
    r._tickets_at["h0"] -= 151.0  # past half of its 300 s
    assert r._ticket("h0")["new"] and asked == [("long", "h0", os.geteuid())]
    assert r._ticket("h0")["new"] and len(asked) == 1  # fresh again


def test_a_recurring_runs_registration_brings_its_tickets():
    from jitsched.client.runner import JobRunner
    from jitsched.client.transfer import TransferSink
    from jitsched.dag.model import Compute, Job, Transfer
    from tests.test_daemon import system

    job = Job("rec", (Compute("c", "h1", 0.0),), (Transfer("big", "h0", "h1", 200_000),), (("big", "c"),), 0.0)
    with system(hosts=("h0", "h1"), backend="record") as (d, agents):
        sinks = {h: TransferSink("127.0.0.1") for h in ("h0", "h1")}
        try:
            runner = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()},
                               agents={h: a.local_name for h, a in agents.items()})
            got = runner.run_iterations(2, 30.0)
        finally:
            for s in sinks.values():
                s.close()
        assert all(r.error == "" for r in got), [r.error for r in got]
        assert agents["h0"].registrations["out"] == 2 and agents["h0"].tickets_refused == 0
        assert set(runner._tickets) == {"h0", "h1"}
