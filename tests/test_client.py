"""Tests of the daemon's client library: requests, error replies, timeouts, announced flows."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest
import zmq

from jitsched.client import Client
from jitsched.daemon.server import wait_until
from jitsched.protocol import ErrorCode, RemoteError
from tests.test_daemon import system


def test_remote_errors_and_status():
    with system(hosts=("h0", "h1")) as (d, _):
        with Client(d.job_endpoint) as c:
            with pytest.raises(RemoteError) as ei:
                c.submit_job({"id": "x", "computes": [{"id": "c", "host": "h7", "duration_s": 1}]})
            assert ei.value.code == ErrorCode.INVALID_JOB and "h7" in ei.value.message
            assert c.submit_job({"id": "y", "computes": [{"id": "c", "host": "h0", "duration_s": 1}]}) == "y"
            assert c.status()["jobs"]["y"]["computes"] == 1


@pytest.mark.alone
def test_timeout_when_nobody_answers():
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    try:
        with Client(f"tcp://127.0.0.1:{port}", timeout_s=0.2, ctx=ctx) as c:
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                c.status()
            assert time.monotonic() - t0 < 2.0
    finally:
        silent.close(0)
        ctx.term()


def test_announced_flow_announces_registers_and_always_finishes():
    import socket as socket_mod

    from jitsched.client import announced_flow
    from tests.test_daemon import system

    with system(policy="jit", hosts=("h0", "h1")) as (d, agents), Client(d.job_endpoint) as c:
        srv = socket_mod.create_server(("127.0.0.1", 0))
        s = socket_mod.create_connection(srv.getsockname())
        try:
            with announced_flow(c, "ckpt", "h0", "h1", 5e6, s, agent=agents["h0"].local_name) as left:
                # the daemon holds it and the sender's agent knows the socket by its background id
                assert set(d.state.background.flows) == {"ckpt"}
                assert d.state.background.flows["ckpt"].left == 5e6
                assert wait_until(lambda: "/ckpt" in agents["h0"].flows, 5.0)
                left(2e6)  # progress: what it has left, clipped to its size
                assert d.state.background.flows["ckpt"].left == 2e6
                left(9e9)
                assert d.state.background.flows["ckpt"].left == 5e6
            assert wait_until(lambda: "/ckpt" not in agents["h0"].flows, 5.0)
            assert d.state.background.flows == {} and d.state.background.counts["finished"] == 1
            # an error in the block still ends the announcement
            with pytest.raises(ZeroDivisionError), announced_flow(c, "bad", "h0", "h1", 1e6):
                raise ZeroDivisionError
            assert d.state.background.flows == {} and d.state.background.counts["finished"] == 2
        finally:
            s.close()
            srv.close()


@pytest.mark.alone
def test_a_request_to_an_endpoint_nobody_serves_times_out_instead_of_blocking():
    import time as _time

    from jitsched.client import Client

    with socket.socket() as s:  # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"tcp://127.0.0.1:{port}", timeout_s=0.3) as c:
        t0 = _time.monotonic()
        with pytest.raises(TimeoutError, match="no (connection to|reply from)"):
            c.status()
        assert _time.monotonic() - t0 < 2.0


class _PeerLeavesOnce:
    """A client socket whose first send finds no peer although its poll found room: the
    connection a refused CURVE handshake had goes between the two."""

    def __init__(self, sock: zmq.Socket) -> None:
        self._sock, self.refused = sock, 0

    def send(self, data, flags=0):
        if not self.refused:
            self.refused += 1
            raise zmq.Again()
        return self._sock.send(data, flags)

    def __getattr__(self, name):
        return getattr(self._sock, name)


def test_a_send_refused_after_its_poll_is_tried_again_within_the_deadline():
    with system(hosts=("h0", "h1")) as (d, _), Client(d.job_endpoint, timeout_s=5.0) as c:
        real, c.sock = c.sock, _PeerLeavesOnce(c.sock)
        try:
            assert c.status()["agent_counts"]["agents_marked_down"] == 0
            assert c.sock.refused == 1
        finally:
            c.sock = real


@contextlib.contextmanager
def dead_then_duplicate():
    """Two replicas' job endpoints ("A,B") and the request types B got: A takes every request
    and never answers (it died after acting on it); B already holds the job (A's state
    reached etcd), so it refuses a submission ``duplicate_job`` and answers the rest."""
    from jitsched.protocol import MsgType, decode_request, encode_error, encode_ok

    ctx = zmq.Context()
    a, b = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    ends = [f"tcp://127.0.0.1:{s.bind_to_random_port('tcp://127.0.0.1')}" for s in (a, b)]
    seen: list[str] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            if not b.poll(50):
                continue
            peer, data = b.recv_multipart()
            req = decode_request(data)
            seen.append(req.type)
            if req.type == MsgType.SUBMIT_JOB:
                rep = encode_error(req.id, ErrorCode.DUPLICATE_JOB, f"job {req.body['job']['id']!r} is already running")
            else:
                rep = encode_ok(req.id, {"results": [{}] * len(req.body.get("events", []))})
            b.send_multipart([peer, rep])

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield ",".join(ends), seen
    finally:
        stop.set()
        t.join(5)
        for s in (a, b):
            s.close(0)
        ctx.term()


def test_a_submission_a_dead_replica_took_is_this_clients_own_when_the_leader_has_it():
    with dead_then_duplicate() as (endpoint, seen), Client(endpoint, timeout_s=5.0) as c:
        assert c.submit({"id": "x", "computes": [{"id": "c", "host": "h0", "duration_s": 1}]}) == {
            "job_id": "x", "resent": True}
        assert c.unanswered_sends == 1 and seen == ["submit_job"]
        # a refusal of a first send that was answered is another's job of that id
        with pytest.raises(RemoteError) as ei:
            c._move(endpoint.split(",")[1])
            c.submit_job({"id": "x", "computes": [{"id": "c", "host": "h0", "duration_s": 1}]})
        assert ei.value.code == ErrorCode.DUPLICATE_JOB and c.unanswered_sends == 0


def test_closing_a_client_twice_is_harmless():
    with Client("tcp://127.0.0.1:1", timeout_s=0.2) as c:
        c.close()  # and __exit__ closes it again
    assert c.sock.closed and c.ctx.closed
