"""Tests of the socket loop's bounds: big requests decoded off the loop, connection cap,
idle timeout and the cap on unread reply bytes per peer (real sockets on loopback)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import msgpack
import pytest
import zmq

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.protocol import ErrorCode, MsgType, decode_reply, encode_request, unpack_chunked
from tests.test_daemon import config
from tests.test_daemon_limits import tiny_job


@contextlib.contextmanager
def daemon(**kw):
    d = Daemon(config(policy="jit", **kw))
    try:
        d.start()
        yield d
    finally:
        d.stop()


def chain_job(n_nodes: int, job_id: str = "big") -> dict:
    """A chain of computes and 1 kB transfers over h0..h3 (``n_nodes`` nodes)."""
    k = n_nodes // 2
    h = ("h0", "h1", "h2", "h3")
    return {"id": job_id,
            "computes": [{"id": f"c{i}", "host": h[i % 4], "duration_s": 0.001} for i in range(k)],
            "transfers": [{"id": f"t{i}", "src": h[i % 4], "dst": h[(i + 1) % 4], "bytes": 1000.0}
                          for i in range(k)],
            "edges": [[f"t{i}", f"c{i}"] for i in range(k)] + [[f"c{i}", f"t{i + 1}"] for i in range(k - 1)]}


def test_chunked_unpack_is_unpackb():
    for obj in ({"v": 1, "body": {"job": chain_job(40)}}, {"a": [1, [2, [3, [4, [5]]]]]}, [], {}, 7, "x"):
        data = msgpack.packb(obj, use_bin_type=True)
        assert unpack_chunked(data) == msgpack.unpackb(data, raw=False)
    for bad in (msgpack.packb({"a": 1}) + b"\x01", msgpack.packb({1: 2}), msgpack.packb({"a": [1, 2]})[:-1]):
        with pytest.raises(Exception):  # noqa: B017 - whatever unpackb raises
            msgpack.unpackb(bad, raw=False, strict_map_key=True)
        with pytest.raises(Exception):  # noqa: B017
            unpack_chunked(bad)


def test_big_submit_is_decoded_off_the_loop_and_replies_keep_their_order():
    # 30k nodes, 1.7 MB: ~0.8 s of decoding and checking on the worker; meanwhile another
    # client's status is answered and the agents' heartbeats keep them up
    job = chain_job(30_000)
    data = encode_request(MsgType.SUBMIT_JOB, {"job": job}, 77)
    with daemon(heartbeat_s=0.1, heartbeat_timeout_s=0.6) as d:
        agents = [Agent(h, d.agent_endpoint, AgentOptions(backend="record"),
                        local_namespace=f"c{id(d)}").start()
                  for h in ("h0", "h1")]
        try:
            assert wait_until(lambda: all(a.registered.is_set() for a in agents), 5.0)
            lat: list[float] = []
            stop = threading.Event()

            def poll() -> None:
                with Client(d.job_endpoint, timeout_s=10.0) as c:
                    while not stop.is_set():
                        t0 = time.perf_counter()
                        c.status(limit=5)
                        lat.append(time.perf_counter() - t0)
                        time.sleep(0.005)

            t = threading.Thread(target=poll)
            t.start()
            ctx = zmq.Context.instance()
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.job_endpoint)
            try:
                t0 = time.perf_counter()
                # the big submit, then a status of the same peer: the submit is answered first
                s.send(data)
                s.send(encode_request(MsgType.STATUS, {"limit": 5}, 78))
                assert s.poll(30_000)
                first = decode_reply(s.recv())
                took = time.perf_counter() - t0
                assert s.poll(10_000)
                second = decode_reply(s.recv())
            finally:
                s.close(0)
                stop.set()
                t.join(10)
            assert (first.id, first.ok, second.id, second.ok) == (77, True, 78, True), (first, second)
            assert "big" in second.body["jobs"]
            assert d.counts["requests_offloaded"] == 1 and d.counts["requests_deferred"] == 1
            assert len(lat) >= 5, lat
            assert took > 0.2  # it did take a while, and status was answered meanwhile
            assert sorted(lat)[len(lat) // 2] < 0.1, lat
            assert all(a.up for a in d.state.agents.values())
            assert d.state.loop["requests_offloaded"] == 1 or wait_until(
                lambda: d.state.loop.get("requests_offloaded") == 1, 1.0)
        finally:
            for a in agents:
                a.stop()


def test_big_request_refused_after_decoding_gets_its_error():
    with daemon(max_job_nodes=1000) as d, Client(d.job_endpoint, timeout_s=10.0) as c:
        with pytest.raises(Exception) as ei:
            c.submit_job(chain_job(20_000))
        assert ei.value.code == ErrorCode.INVALID_JOB and "max_job_nodes" in ei.value.message
        assert d.counts["requests_offloaded"] == 1
        assert c.status()["jobs"] == {}


def _closed(s: socket.socket, timeout_s: float) -> bool:
    # the daemon greets first (ZMTP): read past its greeting to the end of the stream
    s.settimeout(timeout_s)
    try:
        while s.recv(256):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_connections_beyond_the_cap_are_closed_and_counted():
    with daemon(max_connections=4) as d:
        host, port = d.job_endpoint.rsplit("/", 1)[1].rsplit(":", 1)
        socks = [socket.create_connection((host, int(port))) for _ in range(7)]
        try:
            assert wait_until(lambda: d.conns["jobs"].refused == 3, 5.0), d.conns["jobs"].refused
            closed = [_closed(s, 0.5) for s in socks]
            assert sorted(closed) == [False] * 4 + [True] * 3  # those accepted last go
            assert len(d.conns["jobs"].open) == 4
        finally:
            for s in socks:
                s.close()
        # once they are gone, clients are served again
        assert wait_until(lambda: not d.conns["jobs"].open, 5.0)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            st = c.status()
        assert st["loop"]["jobs_connections_refused"] == 3 and st["loop"]["jobs_connections_cap"] == 4, st["loop"]


def test_connections_silent_longest_make_way_for_a_new_client():
    with daemon(max_connections=4) as d:
        host, port = d.job_endpoint.rsplit("/", 1)[1].rsplit(":", 1)
        socks = [socket.create_connection((host, int(port))) for _ in range(4)]
        try:
            assert wait_until(lambda: len(d.conns["jobs"].open) == 4, 5.0)
            time.sleep(1.2)  # EVICT_AFTER_S: these four never spoke
            with Client(d.job_endpoint, timeout_s=5.0) as c:
                c.status()  # served: a silent connection made way
                # the new connection's accept event comes through the socket monitor, which may
                # deliver it after its first request was served: the eviction follows it
                assert wait_until(lambda: d.conns["jobs"].evicted == 1, 5.0), d.conns["jobs"].evicted
                assert d.conns["jobs"].refused == 0
                # status counts as of the last housekeeping tick (50 ms)
                assert wait_until(lambda: c.status()["loop"]["jobs_connections_evicted"] == 1, 5.0)
            assert sum(_closed(s, 0.3) for s in socks) == d.conns["jobs"].evicted
        finally:
            for s in socks:
                s.close()


def test_idle_connections_are_closed_and_clients_reconnect():
    with daemon(idle_timeout_s=0.5) as d, Client(d.job_endpoint, timeout_s=5.0) as c:
        c.status()
        assert wait_until(lambda: d.conns["jobs"].idle_closed >= 1, 5.0)
        assert wait_until(lambda: not d.conns["jobs"].open, 5.0)
        # the zmq client reconnected by itself and is served
        assert c.submit_job(tiny_job("after")) == "after"
        assert c.status()["loop"]["jobs_connections_idle_closed"] >= 1


def test_unread_replies_are_capped_per_peer():
    # status pages of ~220 kB; a peer asks for 150 and reads none: the daemon keeps at
    # most max_peer_queued_bytes of them (beyond what the kernel buffers took), and
    # answers the rest with a short overloaded error each
    cap = 8 * 1024 * 1024
    with daemon(max_peer_queued_bytes=cap) as d:
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            for k in range(1000):
                c.submit_job(tiny_job(f"{k:04d}-" + "x" * 100))
            page = len(encode_request(MsgType.STATUS, {})) and None  # noqa: F841
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RCVHWM, 1)
        s.setsockopt(zmq.RCVBUF, 4096)
        s.connect(d.job_endpoint)
        try:
            n = 150
            for i in range(n):
                s.send(encode_request(MsgType.STATUS, {}, 1000 + i))
            assert wait_until(lambda: d.replies.refused > 0, 20.0)
            queued = max((d.replies.pending(i) for i in list(d.replies.queued)), default=0)
            assert queued <= cap
            got = {}
            end = time.monotonic() + 30
            while len(got) < n and time.monotonic() < end:
                if s.poll(1000):
                    r = decode_reply(s.recv())
                    got[r.id] = r
            assert sorted(got) == list(range(1000, 1000 + n))  # each answered once
            refused = [r for r in got.values() if not r.ok]
            assert refused and all(r.code == ErrorCode.OVERLOADED and "max_peer_queued_bytes" in r.message
                                   for r in refused)
            assert len(refused) == d.replies.refused
            ok = [r for r in got.values() if r.ok]
            assert len(ok) >= 8_000_000 // 250_000  # the cap's worth at least were sent
        finally:
            s.close(0)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            assert c.status(limit=1)["loop"]["replies_refused_queued"] == len(refused)


def test_a_first_message_read_before_its_accept_event_marks_the_connection_spoken():
    # the loop reads messages before it takes the monitor's events: a client's first
    # message may come while its connection is not yet tracked, and it must still count
    # as spoken (else the cap closes it first, as a raw connect that never spoke)
    import logging

    from jitsched.daemon.conns import Connections
    from jitsched.daemon.logs import LogLimiter

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    conns = Connections(router, "jobs", 16, 10.0, LogLimiter(logging.getLogger("test")))
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(router.getsockopt(zmq.LAST_ENDPOINT).decode())
    try:
        dealer.send(b"hello")
        assert router.poll(5000)
        frames = router.recv_multipart(copy=False)
        fd = frames[-1].get(zmq.SRCFD)
        assert fd not in conns.open  # no event taken yet
        got = conns.seen(fd, 1.0)
        assert got is not None and got[0] == fd
        assert conns.open[fd].spoke and fd not in conns.unspoken
    finally:
        conns.close()
        dealer.close(0)
        router.close(0)
        ctx.term()


def test_idle_scans_run_at_most_every_twentieth_of_the_timeout():
    import logging

    from jitsched.daemon.conns import Conn, Connections
    from jitsched.daemon.logs import LogLimiter

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.bind("tcp://127.0.0.1:*")
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    acc, _ = srv.accept()
    try:
        conns = Connections(router, "jobs", 16, 10.0, LogLimiter(logging.getLogger("test")))
        conns.open[acc.fileno()] = Conn(acc.getpeername(), last_s=100.0)
        assert conns.expire(109.9) == 0  # scanned: silent 9.9 s of 10; the next scan at 110.4
        assert conns.expire(110.2) == 0 and not conns.open[acc.fileno()].closing  # idle, not scanned
        assert conns.expire(110.5) == 1 and conns.idle_closed == 1  # scanned: closed
        assert cli.recv(1) == b""  # the peer sees the end of the connection
    finally:
        conns.close()
        for s in (cli, acc, srv):
            s.close()
        router.close(0)
        ctx.term()


def test_connections_that_never_spoke_make_way_first():
    # a flood of raw connections (nothing sent) against a cap: the oldest of them go
    # first, and a client that has spoken keeps its connection and its answers
    with daemon(max_connections=4) as d, Client(d.job_endpoint, timeout_s=5.0) as c:
        c.status()
        host, port = d.job_endpoint.rsplit("/", 1)[1].rsplit(":", 1)
        socks = []
        try:
            for _ in range(12):
                socks.append(socket.create_connection((host, int(port))))
                time.sleep(0.02)  # accepted one by one, as a churn of connects arrives
            assert wait_until(lambda: d.conns["jobs"].refused == 9, 5.0), d.conns["jobs"].refused
            closed = [_closed(s, 0.3) for s in socks]
            assert closed == [True] * 9 + [False] * 3, closed  # the oldest that never spoke went
            before = d.conns["jobs"].evicted + d.conns["jobs"].refused
            assert c.status()["loop"]["jobs_connections_refused"] == 9  # the client kept its connection
            assert d.conns["jobs"].evicted + d.conns["jobs"].refused == before
        finally:
            for s in socks:
                s.close()


def test_a_clients_pending_requests_are_capped_by_its_quota():
    from dataclasses import replace

    from jitsched.config import ClientQuota

    # every request over 1 kB is decoded off the loop; the rest of the client's wait
    # behind it, at most max_pending_requests of them in all (the ids are over max_id_chars:
    # each decoded one is refused invalid_job, the rest overloaded)
    with daemon(offload_bytes=1024, per_client=replace(ClientQuota(), max_pending_requests=2)) as d:
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(d.job_endpoint)
        try:
            n = 40
            for i in range(n):
                s.send(encode_request(MsgType.SUBMIT_JOB, {"job": tiny_job(f"p{i}-" + "x" * 2000)}, 100 + i))
            codes = []
            while len(codes) < n and s.poll(10_000):
                r = decode_reply(s.recv())
                codes.append("ok" if r.ok else r.code)
                if not r.ok:
                    assert "max_pending_requests" in r.message or "max_id_chars" in r.message, r.message
        finally:
            s.close(0)
        assert len(codes) == n and ErrorCode.OVERLOADED in codes, codes
        assert d.counts["requests_refused_quota"] == codes.count(ErrorCode.OVERLOADED)


def test_housekeeping_survives_a_client_whose_last_tracked_reply_has_left():
    # counting each client's bytes in flight forgets a client whose last tracked reply
    # libzmq has handed on: housekeeping must not iterate the live table meanwhile (the
    # loop died of "dictionary changed size during iteration" under a flood of reports)
    from collections import deque

    class Tracker:  # libzmq hands the bytes on between the sweep and the count
        def __init__(self) -> None:
            self.asked = 0

        @property
        def done(self) -> bool:
            self.asked += 1
            return self.asked > 1

    d = Daemon(config())
    for client, ident in (("a", b"\x01"), ("b", b"\x02")):
        d.replies.queued[ident] = deque([(Tracker(), 100)])
        d.replies.client_of[ident] = client
        d.replies.identities[client] = {ident}
    d._housekeeping(time.monotonic())
    assert d.replies.identities == {} and d.state.client_inflight == {
        "a": {"pending_requests": 0, "bytes_in_flight": 0}, "b": {"pending_requests": 0, "bytes_in_flight": 0}}
