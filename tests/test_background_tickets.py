"""Announced background flows: an agent takes a ``/<name>`` socket only with the daemon's ticket for that flow."""

from __future__ import annotations

import os
import time

from jitsched import tickets
from jitsched.client import Client, announced_flow
from jitsched.daemon.server import wait_until
from jitsched.localreg import register_flow, unregister_flow
from jitsched.workloads.synth import layer_chain_job
from tests.flowtickets import TEST_SECRET
from tests.test_attach_tickets import keys  # noqa: F401 - a fixture
from tests.test_daemon_security import secured
from tests.test_flow_tickets import REFUSED, _agent, _register
from tests.test_localreg import tcp_pair


def test_a_background_flow_without_its_own_valid_ticket_is_refused_and_counted():
    me, later = os.geteuid(), time.time_ns() + 60 * 10**9
    with _agent() as a:
        cases = [
            (None, "without a ticket"),
            (tickets.issue(TEST_SECRET, "/other", "h0", me, later), "not '/bulk'"),
            # a job's ticket names no background flow, even one its id prefixes
            (tickets.issue(TEST_SECRET, "", "h0", me, later), "not '/bulk'"),
            (tickets.issue(TEST_SECRET, "/bulk", "h1", me, later), "for host 'h1'"),
            (tickets.issue(TEST_SECRET, "/bulk", "h0", me + 1, later), f"not the caller's uid {me}"),
            (tickets.issue(TEST_SECRET, "/bulk", "h0", me, time.time_ns() - 10**9), "expired"),
            (tickets.issue(b"another daemon's secret.........", "/bulk", "h0", me, later), "signature"),
        ]
        if me == 0:  # root may use a ticket of any uid
            del cases[4]
        for ticket, why in cases:
            rep = _register(a, "/bulk", ticket)
            assert not rep.ok and rep.code == REFUSED and why in rep.message, (ticket, rep)
        assert a.flows == {} and a.tickets_refused == len(cases)
        rep = _register(a, "/bulk", tickets.issue(TEST_SECRET, "/bulk", "h0", me, later))
        assert rep.ok, rep
        assert list(a.flows) == ["/bulk"]


def test_with_keys_one_tenant_cannot_register_anothers_background_flow(keys):  # noqa: F811
    # both announce "bulk": the daemon holds alice:bulk and bob:bulk, the agents know them as
    # /alice:bulk and /bob:bulk, and each one's tickets name its own flow only
    me = os.geteuid()
    with secured(keys) as (d, agents), \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as alice, \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="bob") as bob:
        a = agents["h0"]
        got = alice.background_started("bulk", "h0", "h1", 5e6, uid=me)
        assert got["flow_id"] == "/alice:bulk" and got["ticket_s"] > 0
        assert set(got["tickets"]) == {"h0", "h1"}
        assert all(t["job"] == "/alice:bulk" and t["host"] == h and t["uid"] == me
                   for h, t in got["tickets"].items())
        bobs = bob.background_started("bulk", "h0", "h1", 5e6, uid=me)
        assert bobs["flow_id"] == "/bob:bulk" and set(d.state.background.flows) == {"alice:bulk", "bob:bulk"}
        bob_job = bob.submit(layer_chain_job("k", "h0", "h1"), uid=me)["tickets"]
        assert "tickets" not in alice.background_started("other", "h0", "h1", 1e6)  # no uid: none
        with tcp_pair() as s:
            for wrong in (bobs["tickets"]["h0"], bob_job["h0"], got["tickets"]["h1"], None):
                assert register_flow(a.local_name, "/alice:bulk", s, ticket=wrong) is None
            assert a.flows == {} and a.tickets_refused == 4
            ctrl = register_flow(a.local_name, "/alice:bulk", s, ticket=got["tickets"]["h0"])
            assert ctrl is not None and list(a.flows) == ["/alice:bulk"]
            unregister_flow(ctrl, "/alice:bulk")
        # a progress report brings new tickets (for a later registration)
        again = alice.background_started("bulk", "h0", "h1", 5e6, left=1e6, uid=me)
        assert again["tickets"]["h0"]["expires_ns"] >= got["tickets"]["h0"]["expires_ns"]


def test_with_keys_announced_flow_registers_its_socket_by_its_scoped_id(keys):  # noqa: F811
    with secured(keys) as (d, agents), \
            Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as alice, tcp_pair() as s:
        a = agents["h0"]
        with announced_flow(alice, "ckpt", "h0", "h1", 5e6, s, agent=a.local_name) as left:
            assert set(d.state.background.flows) == {"alice:ckpt"}
            assert wait_until(lambda: "/alice:ckpt" in a.flows, 5.0)
            left(2e6)
            assert d.state.background.flows["alice:ckpt"].left == 2e6
        assert wait_until(lambda: "/alice:ckpt" not in a.flows, 5.0)
        assert d.state.background.flows == {} and a.tickets_refused == 0


def test_a_negative_uid_gets_no_ticket_but_a_refusal():
    # a submission, a template, the announcement and attach_job issue tickets to the uid
    # they name: one below 0 is no user, refused as a bad body, and nothing is taken
    from jitsched.daemon.reject import Reject
    from jitsched.daemon.state import SchedulerState
    from jitsched.protocol import ErrorCode
    from tests.test_daemon import config

    st = SchedulerState(config())
    job = layer_chain_job("j", "h0", "h1").to_dict()
    other = layer_chain_job("k", "h0", "h1").to_dict()
    for got in (st.submit_job({"job": job, "uid": -1}, 0.0),
                st.submit_prepared(st.job_registry.prepare({"job": job, "uid": -1}), {"job": job, "uid": -1}, 0.0),
                st.register_template({"job": other, "uid": -1}, 0.0)):
        assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_BODY and "body.uid" in got.message
    assert st.job_registry.jobs == {} and st.templates.templates == {}
    assert "tickets" in st.submit_job({"job": job, "uid": 0}, 0.0)
    for got in (st.background_started({"flow": "f", "src": "h0", "dst": "h1", "bytes": 1e6, "uid": -1}, 1.0),
                st.attach_job({"job_id": "j", "host": "h0", "uid": -1}, 1.0)):
        assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_BODY and "body.uid" in got.message
    assert st.background.flows == {}
    assert "ticket" in st.attach_job({"job_id": "j", "host": "h0", "uid": 0}, 1.0)
