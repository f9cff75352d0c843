"""The etcd store and the lease election, against a real etcd on loopback."""

from __future__ import annotations

import time

import pytest

from jitsched.bench.bench_faults import free_ports
from jitsched.config import DaemonConfig, parse_config
from jitsched.daemon.ha import (
    Election,
    Etcd,
    EtcdStore,
    EtcdUnavailable,
    LocalEtcd,
    delete_op,
    put_op,
    txn_chunks,
)
from jitsched.daemon.journal import DONE, STARTED, JournalFlow
from jitsched.daemon.state import SchedulerState
from jitsched.daemon.store import FencedError
from jitsched.dag.model import parse_cluster
from jitsched.errors import ValidationError


@pytest.fixture(scope="module")
def etcd():
    e = LocalEtcd(*free_ports(2))
    try:
        yield e
    finally:
        e.stop()


def _elected(etcd: LocalEtcd, prefix: str, ttl_s: float = 2.0) -> tuple[Etcd, Election]:
    client = Etcd([etcd.endpoint])
    el = Election(client, prefix, ttl_s)
    assert el.campaign("tcp://127.0.0.1:1", "tcp://127.0.0.1:2")
    return client, el


def _replica(etcd: LocalEtcd, prefix: str, hosts: tuple[str, ...] = ("h1", "h2")):
    """A daemon (not started) leading on ``etcd`` under ``prefix``, lease 30 s: its etcd
    client, election, store and itself."""
    from jitsched.daemon.server import Daemon

    client, el = _elected(etcd, prefix, ttl_s=30.0)
    cluster = parse_cluster({"hosts": [{"name": h, "egress_bps": 1e9, "ingress_bps": 1e9} for h in hosts]})
    ports = free_ports(2)
    store = EtcdStore(client, el)
    d = Daemon(DaemonConfig(cluster=cluster, job_endpoint=f"tcp://127.0.0.1:{ports[0]}",
                            agent_endpoint=f"tcp://127.0.0.1:{ports[1]}", planner_process=False),
               store=store, epoch=el.me.epoch, leading=el.leading)
    return client, el, store, d


def test_one_replica_wins_and_epochs_rise(etcd):
    a = Election(Etcd([etcd.endpoint]), "/t-elect", 2)
    b = Election(Etcd([etcd.endpoint]), "/t-elect", 2)
    assert a.campaign("tcp://127.0.0.1:11", "tcp://127.0.0.1:12")
    assert not b.campaign("tcp://127.0.0.1:21", "tcp://127.0.0.1:22")
    assert b.leader() == a.me and a.me.epoch == 1 and a.leading()
    a.resign()
    assert not a.leading() and b.leader() is None
    assert b.campaign("tcp://127.0.0.1:21", "tcp://127.0.0.1:22")
    assert b.me.epoch == 2 and b.leader().job_endpoint == "tcp://127.0.0.1:21"
    b.resign()


def test_store_round_trip(etcd):
    client, el = _elected(etcd, "/t-store")
    s = EtcdStore(client, el)
    s.put("t0_wall_s", "12.5")
    row = s.submitted("j1", {"id": "j1", "nodes": [1, 2]}, "alice", 3.0)
    s.event(row, "n1", STARTED, 4.0)
    s.event(row, "n1", DONE, 5.0, 0.75)
    s.template(row, 3, b"learned")
    s.template(row, 4)
    s.background_held(JournalFlow("f", "h1", "h2", 10.0, 5.0, "alice", 1.0, 2.0))
    gone = s.submitted("j2", {"id": "j2"}, None, 3.5)
    s.ended(gone, "done", 6.0, 2.5)
    # a fresh store (another replica's, once elected) reads back what this one wrote
    s2 = EtcdStore(client, el)
    assert s2.get("t0_wall_s") == "12.5"
    [jj] = s2.unfinished()
    assert (jj.row, jj.job_map, jj.owner, jj.submitted_s) == (row, {"id": "j1", "nodes": [1, 2]}, "alice", 3.0)
    assert jj.started == {"n1": 4.0} and jj.done == {"n1": 5.0} and jj.measured_s == {"n1": 0.75}
    assert s2.templates() == {row: (4, b"learned")}
    assert [f.name for f in s2.background()] == ["f"]
    assert s2.compact() == 1  # j2 ended
    s2.background_gone(["f"])
    assert s2.background() == []
    el.resign()


def test_counts_held_back_go_with_the_next_write_or_flush_in_one_transaction(etcd):
    # a recurring job's count at each JOURNAL_EVERY-th iteration is no reply's promise: 100 of
    # them, reached in one loop turn, are one transaction, not 100 on the daemon's loop
    client, el = _elected(etcd, "/t-later")
    s = EtcdStore(client, el)
    rows = [s.submitted(f"j{i}", {"id": f"j{i}"}, None, 0.0) for i in range(100)]
    writes = s.writes
    for r in rows:
        s.template(r, 20, b"L", later=True)
    def stored() -> dict:  # another replica's reading: the running jobs first, then their counts
        other = EtcdStore(client, el)
        other.unfinished()
        return other.templates()

    assert s.writes == writes and stored() == {}
    s.flush()
    assert s.writes == writes + 1 and s.flush() is None and s.writes == writes + 1
    assert stored() == {r: (20, b"L") for r in rows}
    # held back, then another write: they go first, in the same transaction
    s.template(rows[0], 40, later=True)
    s.ended(rows[1], "done", 1.0)
    assert s.writes == writes + 2 and stored()[rows[0]] == (40, b"L")
    el.resign()


def test_counts_held_while_etcd_is_down_stay_two_per_job_and_the_newest_goes(etcd):
    # recurring jobs iterate on while etcd refuses every write: each job's newer count and
    # state replace the held ones, so what is held does not grow with the outage's length
    client, el = _elected(etcd, "/t-outage", ttl_s=30.0)
    s = EtcdStore(client, el)
    rows = [s.submitted(f"j{i}", {"id": f"j{i}"}, None, 0.0) for i in range(3)]
    real = client.txn

    def down(compare, ops):
        raise EtcdUnavailable("down")

    client.txn = down
    try:
        for n in range(20, 2020, 20):
            for r in rows:
                s.template(r, n, f"L{n}".encode(), later=True)
            with pytest.raises(EtcdUnavailable):
                s.flush()
            s._retry_at = 0.0  # the next write is tried at once
        with pytest.raises(EtcdUnavailable), s.batch():
            s.event(rows[0], "t0", STARTED, 1.0)
            s.event(rows[0], "t1", STARTED, 2.0)
        assert s.held_writes == 2 * len(rows) + 2 and s.holding  # the events are held, in order
        client.txn = real
        s._retry_at = 0.0
        s.flush()
        assert s.held_writes == 0 and not s.holding
        other = EtcdStore(client, el)
        jobs = {jj.row: jj for jj in other.unfinished()}
        assert other.templates() == {r: (2000, b"L2000") for r in rows}
        assert list(jobs[rows[0]].started) == ["t0", "t1"]
    finally:
        client.txn = real
        el.resign()


def test_transactions_stay_under_etcds_operation_and_request_limits():
    # 30 learned states of a ResNet152's size (98 kB) held back together: one transaction
    # would be 3 MB, over etcd's default 1.5 MiB request
    big = [put_op(f"/p/tpl/{i}/learned", b"x" * 98_000) for i in range(30)]
    chunks = txn_chunks(big)
    assert [op for c in chunks for op in c] == big
    assert all(sum(len(op["request_put"]["value"]) for op in c) <= 1 << 20 for c in chunks)
    assert len(chunks) == 4  # 130,668 bytes of base64 each: 8 a transaction
    small = [put_op(f"/p/ev/{i}", b"e") for i in range(250)]
    assert [len(c) for c in txn_chunks(small)] == [100, 100, 50]
    assert txn_chunks([]) == [[]]  # a write of nothing still checks the fence
    huge = [put_op("/p/one", b"y" * 2_000_000), put_op("/p/two", b"z")]
    assert [len(c) for c in txn_chunks(huge)] == [1, 1]


def test_operations_on_one_key_go_in_separate_transactions_in_order():
    # etcd refuses a transaction that touches a key twice: a job's progress event and the
    # delete of its events, or a held count and the delete of its job's counts
    ops = [put_op("/p/ev/1/5", b"e"), put_op("/p/job/1", b"end"), delete_op("/p/ev/1/", prefix=True),
           put_op("/p/ev/2/1", b"e"), put_op("/p/tpl/2/n", b"3"), delete_op("/p/tpl/2/", prefix=True),
           delete_op("/p/job/3"), put_op("/p/job/3", b"x")]
    assert [[ops.index(op) for op in c] for c in txn_chunks(ops)] == [[0, 1], [2, 3, 4], [5, 6], [7]]
    # a prefix's delete does not reach past its prefix
    assert len(txn_chunks([put_op("/p/ev/10/1", b"e"), delete_op("/p/ev/1/", prefix=True)])) == 1


def test_a_jobs_events_and_its_end_in_one_turn_are_written_and_later_writes_go_on(etcd):
    # a report with a job's last events, then its end, in one loop turn; a count held for
    # a job that is then forgotten: each write goes through, and the ones after it too
    client, el = _elected(etcd, "/t-one-turn", ttl_s=30.0)
    s = EtcdStore(client, el)
    row = s.submitted("j", {"id": "j"}, None, 0.0)
    with s.batch():
        s.event(row, "t", STARTED, 1.0)
        s.event(row, "t", DONE, 2.0)
        s.ended(row, "done", 2.0, 2.0)
    assert s.held_writes == 0 and s.unfinished() == []
    assert not client.range(s._k("ev", s._row(row)) + "/", prefix=True)
    s.template(row, 20, b"L", later=True)
    s.forget([row])
    assert s.held_writes == 0 and not client.range(s._k("tpl", s._row(row)) + "/", prefix=True)
    assert not client.range(s._k("job", s._row(row)))
    s.put("after", "yes")
    assert EtcdStore(client, el).get("after") == "yes"
    el.resign()


def test_deposed_writer_is_refused(etcd):
    client, a = _elected(etcd, "/t-fence")
    store = EtcdStore(client, a)
    store.put("k", "1")
    time.sleep(a.ttl_s + 1.2)  # no renewal: the lease lapses
    assert not a.leading()
    with pytest.raises(FencedError):
        store.put("k", "2")  # refused before it reaches etcd
    b = Election(Etcd([etcd.endpoint]), "/t-fence", 2)
    assert b.campaign("tcp://127.0.0.1:21", "tcp://127.0.0.1:22") and b.me.epoch == a.me.epoch + 1
    # even a writer that believes it still leads is refused by etcd: the leader key is b's
    a.lost.clear()
    a._deadline = time.monotonic() + 60
    with pytest.raises(FencedError):
        store.put("k", "3")
    assert a.lost.is_set() and store.fenced == 2
    assert EtcdStore(client, b).get("k") == "1"
    b.resign()


def test_rows_of_two_leaders_never_collide(etcd):
    client, a = _elected(etcd, "/t-rows")
    r1 = EtcdStore(client, a).submitted("j", {"id": "j"}, None, 0.0)
    a.resign()
    b = Election(client, "/t-rows", 2)
    assert b.campaign("x", "y")
    r2 = EtcdStore(client, b).submitted("j", {"id": "j"}, None, 0.0)
    assert r1 != r2 and r2 >> 32 == b.me.epoch
    b.resign()


def test_state_fails_submissions_a_deposed_store_refuses(etcd):
    client, el = _elected(etcd, "/t-state")
    cluster = parse_cluster({"hosts": [{"name": "h1", "egress_bps": 1e9, "ingress_bps": 1e9},
                                       {"name": "h2", "egress_bps": 1e9, "ingress_bps": 1e9}]})
    cfg = DaemonConfig(cluster=cluster)
    state = SchedulerState(cfg, journal=EtcdStore(client, el), epoch=el.me.epoch)
    job = {"id": "a", "computes": [], "transfers": [{"id": "t", "src": "h1", "dst": "h2", "bytes": 1e6}]}
    assert "job_id" in state.submit_job({"job": job}, 1.0)
    assert state.agent_table.epoch == el.me.epoch and state.host_body("h1")["epoch"] == el.me.epoch
    el.resign()
    got = state.submit_job({"job": {**job, "id": "b"}}, 2.0)
    assert got.code == "unavailable" and state.journal_errors == 1
    assert "b" not in state.job_registry.jobs


def test_unreachable_etcd_is_an_error():
    with pytest.raises(EtcdUnavailable):
        Etcd([f"http://127.0.0.1:{free_ports(1)[0]}"], timeout_s=0.3).range("/x")


@pytest.mark.parametrize("ha, message", [
    ({"etcd_endpoints": ["127.0.0.1:2379"]}, "etcd_endpoints[0]"),
    ({"etcd_endpoints": ["http://127.0.0.1:2379"], "lease_ttl_s": 0.2}, "lease_ttl_s"),
    ({"etcd_prefix": "jitsched"}, "etcd_prefix"),
    ({"etcd_endpoints": ["http://127.0.0.1:2379"], "campaign_s": 100.0}, "campaign_s"),
])
def test_bad_ha_settings_are_named(ha, message):
    doc = {"hosts": [{"name": "h1", "egress_bps": 1e9, "ingress_bps": 1e9}], "ha": ha}
    with pytest.raises(ValidationError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_config(doc)


def test_replicas_keep_no_journal_and_take_no_wildcard_port():
    base = {"hosts": [{"name": "h1", "egress_bps": 1e9, "ingress_bps": 1e9}],
            "ha": {"etcd_endpoints": ["http://127.0.0.1:2379"]}}
    assert parse_config(base).etcd_endpoints == ["http://127.0.0.1:2379"]
    with pytest.raises(ValidationError, match="set one of them"):
        parse_config(base | {"daemon": {"journal": "/tmp/j.sqlite"}})
    with pytest.raises(ValidationError, match="give a port"):
        parse_config(base | {"daemon": {"job_endpoint": "tcp://127.0.0.1:*"}})


def test_a_reports_events_go_to_etcd_together_and_in_order(etcd):
    # 300 transfers reported started and finished in one message: 600 events in
    # ceil(600 / TXN_OPS) fenced transactions (one each, unbatched), all read back
    from jitsched.daemon.ha import TXN_OPS

    client, el = _elected(etcd, "/t-batch")
    cluster = parse_cluster({"hosts": [{"name": "h1", "egress_bps": 1e9, "ingress_bps": 1e9},
                                       {"name": "h2", "egress_bps": 1e9, "ingress_bps": 1e9}]})
    store = EtcdStore(client, el)
    state = SchedulerState(DaemonConfig(cluster=cluster), journal=store, epoch=el.me.epoch)
    n = 300
    job = {"id": "a", "computes": [],
           "transfers": [{"id": f"t{i}", "src": "h1", "dst": "h2", "bytes": 1e3} for i in range(n + 1)]}
    assert "job_id" in state.submit_job({"job": job}, 1.0)
    txns = []
    real = client.txn
    client.txn = lambda compare, ops: txns.append(len(ops)) or real(compare, ops)
    events = [["started", f"t{i}", None] for i in range(n)] + [["finished", f"t{i}", 1e3] for i in range(n)]
    got = state.report({"job_id": "a", "events": events}, 2.0)
    assert len(got["results"]) == 2 * n and state.journal_errors == 0
    assert len(txns) == -(-2 * n // TXN_OPS) and sum(txns) == 2 * n
    [jj] = EtcdStore(client, el).unfinished()
    assert set(jj.started) == set(jj.done) == {f"t{i}" for i in range(n)}
    # a refused event ends the batch; the ones before it are written all the same
    txns.clear()
    got = state.report({"job_id": "a", "events": [["started", f"t{n}", None], ["started", "nope", None]]}, 3.0)
    assert got.code == "unknown_node" and "events[1]" in got.message and txns == [1]
    assert f"t{n}" in EtcdStore(client, el).unfinished()[0].started
    # a replica that no longer leads: the batch's write is refused, counted and shown
    el.resign()
    got = state.report({"job_id": "a", "events": [["finished", f"t{n}", 1e3]]}, 4.0)
    assert state.journal_errors == 1 and "no longer leads" in state.journal_last_error
    client.txn = real


def test_a_turn_of_one_event_reports_goes_in_few_writes_each_reply_after_its_event(etcd):
    # 40 clients each report one transfer started while the store's writes are slowed
    # (50 ms each): the reports that wait meanwhile go together in the next turn's write,
    # and each client's reply comes only once its event is in etcd
    import base64

    import zmq

    from jitsched.client import Client
    from jitsched.protocol import MsgType, decode_any, encode_request

    client, el, store, d = _replica(etcd, "/t-turn")
    d.start()
    n = 40
    ctx = zmq.Context()
    socks = []
    try:
        job = {"id": "a", "computes": [],
               "transfers": [{"id": f"t{i}", "src": "h1", "dst": "h2", "bytes": 1e3} for i in range(n)]}
        with Client(d.job_endpoint, timeout_s=5) as c:
            assert c.submit_job(job) == "a"
        events_in: list[int] = []
        real = client.txn

        def slow_txn(compare, ops):
            time.sleep(0.05)
            ok = real(compare, ops)
            events_in.append(sum("/ev/" in base64.b64decode(op["request_put"]["key"]).decode()
                                 for op in ops if "request_put" in op))
            return ok

        client.txn = slow_txn
        for _ in range(n):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.job_endpoint)
            socks.append(s)
        for i, s in enumerate(socks):
            s.send(encode_request(MsgType.REPORT, {"job_id": "a", "events": [["started", f"t{i}", None]]}))
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        answered: set[int] = set()
        deadline = time.monotonic() + 20
        while len(answered) < n:
            assert time.monotonic() < deadline, f"{n - len(answered)} reports unanswered"
            for s, _ in poller.poll(100):
                i = socks.index(s)
                got = decode_any(s.recv())
                assert got.ok, got
                # the reply follows the write of its event
                assert f"t{i}" in EtcdStore(client, el).unfinished()[0].started
                answered.add(i)
        client.txn = real
        assert sum(events_in) == n and d.state.journal_errors == 0
        assert len([e for e in events_in if e]) <= n // 4, events_in
    finally:
        client.txn = real
        for s in socks:
            s.close(0)
        ctx.term()
        d.stop()
        el.resign()


def test_replies_wait_for_the_turns_write_only_from_the_first_that_left_events_held(etcd):
    from jitsched.daemon.ha import put_op as op

    client, el, store, d = _replica(etcd, "/t-held", ("h1",))

    class Sock:
        def __init__(self):
            self.sent = []

        def send_multipart(self, frames, flags=0):
            self.sent.append(frames[1])

    jobs, agents = Sock(), Sock()
    held: list = []
    try:
        d._held_replies = (jobs, held)
        d._send_reply(jobs, b"c1", b"r1", promises=True)  # nothing held in the store: at once
        assert jobs.sent == [b"r1"] and not held
        store._pending.append(op("/t-held/ev/x", "1"))  # a message left an event held
        d._send_reply(jobs, b"c0", b"s0")  # a status: it says nothing of events
        d._send_reply(jobs, b"c2", b"r2", promises=True)
        store._pending.clear()  # written by another write: still after the held one, in order
        d._send_reply(jobs, b"c3", b"r3")
        d._send_reply(agents, b"h1", b"a1")  # the agents' socket never waits
        assert jobs.sent == [b"r1", b"s0"] and [h[2] for h in held] == [b"r2", b"r3"]
        assert agents.sent == [b"a1"]
    finally:
        d.stop()
        el.resign()


def test_a_report_whose_events_a_deposed_replica_could_not_write_is_answered_not_leader(etcd):
    # the replica loses its lease; a report's events then go to no store, and the client is
    # told to ask the leader rather than that they are recorded
    from jitsched.client import Client
    from jitsched.errors import RemoteError

    client, el, store, d = _replica(etcd, "/t-deposed")
    d.start()
    try:
        job = {"id": "a", "computes": [],
               "transfers": [{"id": f"t{i}", "src": "h1", "dst": "h2", "bytes": 1e3} for i in range(2)]}
        with Client(d.job_endpoint, timeout_s=5) as c:
            assert c.submit_job(job) == "a"
            assert c.request("report", {"job_id": "a", "events": [["started", "t0", None]]})["results"] == [{}]
            el.resign()
            with pytest.raises(RemoteError) as err:
                c.request("report", {"job_id": "a", "events": [["started", "t1", None]]})
            assert err.value.code == "not_leader"
            # what needs no write is answered as before
            assert c.status()["jobs"]["a"]["state"] == "running"
        assert d.state.journal_errors == 1 and "no longer leads" in d.state.journal_last_error
    finally:
        d.stop()


def test_a_report_whose_events_etcd_did_not_take_is_answered_unavailable_and_taken_when_sent_again(
        etcd, monkeypatch, capsys):
    from prometheus_client import generate_latest

    import jitsched.daemon.ha as ha
    from jitsched.cli import main
    from jitsched.client import Client
    from jitsched.daemon.metrics import Metrics
    from jitsched.errors import RemoteError

    client, el, store, d = _replica(etcd, "/t-unavailable")
    d.start()
    real = client.txn
    try:
        job = {"id": "a", "computes": [], "transfers": [{"id": "t0", "src": "h1", "dst": "h2", "bytes": 1e3}]}
        with Client(d.job_endpoint, timeout_s=5) as c:
            assert c.submit_job(job) == "a"

            def down(compare, ops):
                raise EtcdUnavailable("no etcd endpoint answered")

            client.txn = down
            with pytest.raises(RemoteError) as err:
                c.request("report", {"job_id": "a", "events": [["started", "t0", None]]})
            assert err.value.code == "unavailable" and "no etcd endpoint answered" in err.value.message
            assert d.state.journal_errors == 1
            # the store holds the event: sent again within WRITE_RETRY_S, it is not tried yet
            with pytest.raises(RemoteError) as err:
                c.request("report", {"job_id": "a", "events": [["started", "t0", None]]})
            assert err.value.code == "unavailable" and d.state.journal_errors == 1
            # a status says nothing of events: answered meanwhile, with what is held
            st = c.status()
            assert st["jobs"]["a"]["state"] == "running" and st["journal_held"] == 1
            assert main(["status", "--daemon", d.job_endpoint]) == 0
            assert ("JOURNAL: 1 writes failed (last: no etcd endpoint answered); submissions are refused until "
                    "it can be written; 1 writes held, not yet durable") in capsys.readouterr().out
            m = Metrics()
            m.update(d.state, d.now())
            assert "jitsched_journal_held 1.0" in generate_latest(m.registry).decode()
            client.txn = real
            monkeypatch.setattr(ha, "WRITE_RETRY_S", 0.0)
            d.state.journal._retry_at = 0.0
            # sent again: the held event goes, then the reply
            assert c.request("report", {"job_id": "a", "events": [["started", "t0", None]]})["results"] == [{}]
            assert c.status()["journal_held"] == 0
        assert "t0" in EtcdStore(client, el).unfinished()[0].started
    finally:
        client.txn = real
        d.stop()
        el.resign()


def test_events_a_failed_write_could_not_take_stay_held_in_order_and_go_with_the_next(etcd):
    client, el = _elected(etcd, "/t-retain", ttl_s=30.0)
    s = EtcdStore(client, el)
    row = s.submitted("j", {"id": "j"}, None, 0.0)
    real, calls = client.txn, []

    def one_then_down(compare, ops):
        calls.append(len(ops))
        if len(calls) > 1:
            raise EtcdUnavailable("down")
        return real(compare, ops)

    client.txn = one_then_down
    try:
        # 150 events: the first transaction (100) goes, the second fails
        with pytest.raises(EtcdUnavailable), s.batch():
            for i in range(150):
                s.event(row, f"t{i}", STARTED, float(i))
        assert s.holding and len(s._pending) == 50 and calls == [100, 50]
        # within WRITE_RETRY_S a batch's end leaves them held
        with s.batch():
            s.event(row, "t150", STARTED, 150.0)
        assert len(s._pending) == 51 and calls == [100, 50]
        client.txn = real
        s.put("k", "v")  # any other write takes them first
        assert not s.holding
        [jj] = s.unfinished()
        assert set(jj.started) == {f"t{i}" for i in range(151)}
        assert list(jj.started)[:3] == ["t0", "t1", "t2"]
    finally:
        client.txn = real
        el.resign()


def _two_host_cluster(hosts=("h1", "h2")):
    return parse_cluster({"hosts": [{"name": h, "egress_bps": 1e9, "ingress_bps": 1e9} for h in hosts]})


def _one_transfer_job(jid: str) -> dict:
    return {"id": jid, "computes": [], "transfers": [{"id": "t", "src": "h1", "dst": "h2", "bytes": 1e9}]}


def _previous_leader_with_a_job(etcd: LocalEtcd, prefix: str) -> int:
    """A leader that wrote one running job (with progress) to etcd, then resigned."""
    client, el = _elected(etcd, prefix, ttl_s=30.0)
    s = EtcdStore(client, el)
    s.put("t0_wall_s", repr(time.time() - 5))
    row = s.submitted("j1", _one_transfer_job("j1"), None, 0.5)
    s.event(row, "t", "S", 1.0)
    el.resign()
    return row


def test_a_new_leader_that_cannot_read_its_jobs_does_not_serve_without_them(etcd):
    # one etcd read that fails while the elected replica loads its state (a request timing
    # out) is not taken for an empty journal: the replica resigns, campaigns again and leads
    # with the running job
    from jitsched.daemon.replica import LEADER, Replica

    prefix = "/t-restore-read"
    _previous_leader_with_a_job(etcd, prefix)
    ports = free_ports(2)
    cfg = DaemonConfig(cluster=_two_host_cluster(), job_endpoint=f"tcp://127.0.0.1:{ports[0]}",
                       agent_endpoint=f"tcp://127.0.0.1:{ports[1]}", planner_process=False,
                       etcd_endpoints=[etcd.endpoint], etcd_prefix=prefix, lease_ttl_s=2)
    r = Replica(cfg)
    real = r.etcd.range
    failed = []

    def flaky(key, prefix=False):
        if prefix and key.endswith("/ev/") and not failed:  # the one read of progress in unfinished()
            failed.append(key)
            raise EtcdUnavailable("no etcd endpoint answered (a timeout, once)")
        return real(key, prefix)

    r.etcd.range = flaky
    r.start()
    try:
        assert r.wait_role(LEADER, 20)
        d = r.daemon
        assert failed, "the injected failure did not happen"
        assert d.state.restored == ["j1"], (
            f"leader epoch {d.state.epoch} serves without its jobs: restored={d.state.restored} "
            f"journal_errors={d.state.journal_errors} ({d.state.journal_last_error})")
    finally:
        r.stop()
    assert r.failure is None


def test_one_failed_read_of_the_joined_hosts_does_not_end_their_jobs_as_failed(etcd):
    # a failed read of the joined hosts stops the restore: a state built on the configured
    # cluster alone would refuse the job on joined host h3 and end it in etcd as failed
    from jitsched.daemon.state import SchedulerState
    from jitsched.daemon.store import StoreError

    prefix = "/t-restore-joined"
    client, el = _elected(etcd, prefix, ttl_s=30.0)
    s = EtcdStore(client, el)
    s.put("t0_wall_s", repr(time.time() - 5))
    s.put("joined_hosts", '[{"name": "h3", "egress_bps": 1e9, "ingress_bps": 1e9}]')
    s.submitted("j3", {"id": "j3", "computes": [], "transfers": [{"id": "t", "src": "h1", "dst": "h3",
                                                                   "bytes": 1e9}]}, None, 0.5)
    el.resign()
    # the next leader; one of its reads times out
    client2 = Etcd([etcd.endpoint])
    el2 = Election(client2, prefix, 30)
    assert el2.campaign("tcp://127.0.0.1:3", "tcp://127.0.0.1:4")
    real = client2.range
    failed = []

    def flaky(key, prefix=False):
        if key.endswith("/meta/joined_hosts") and not failed:
            failed.append(key)
            raise EtcdUnavailable("no etcd endpoint answered (a timeout, once)")
        return real(key, prefix)

    client2.range = flaky
    with pytest.raises(StoreError):
        SchedulerState(DaemonConfig(cluster=_two_host_cluster()), journal=EtcdStore(client2, el2), epoch=el2.me.epoch)
    assert failed
    left = [jj.job_map.get("id") for jj in EtcdStore(Etcd([etcd.endpoint]), el2).unfinished()]
    el2.resign()
    assert left == ["j3"], "a job on a joined host was ended as failed after one failed read"


@pytest.mark.alone
def test_a_leader_whose_state_takes_longer_than_its_lease_to_load_keeps_leading(etcd):
    # the lease is renewed while the new leader reads and restores its state: a state that
    # takes longer than the lease to load (3000 running jobs, a 1 s lease here; the daemon
    # admits 10,000 with a 2 s lease by default) does not depose it at its first renewal
    from jitsched.daemon.ha import _pack
    from jitsched.daemon.replica import LEADER, Replica

    prefix = "/t-restore-load"
    client, el = _elected(etcd, prefix, ttl_s=30.0)
    hosts = [f"h{i}" for i in range(8)]
    ops = [put_op(f"{prefix}/meta/t0_wall_s", repr(time.time() - 5))]
    for n in range(1, 3001):
        job = {"id": f"j{n}", "computes": [],
               "transfers": [{"id": f"t{k}", "src": hosts[k % 8], "dst": hosts[(k + 1) % 8], "bytes": 1e8}
                             for k in range(20)]}
        rec = {"id": job["id"], "owner": None, "sub": 0.0, "state": "running", "job": _pack(job)}
        ops.append(put_op(f"{prefix}/job/{(1 << 32) | n:020d}", _pack(rec)))
    for chunk in txn_chunks(ops):
        assert client.txn(el.fence(), chunk)
    el.resign()
    ports = free_ports(2)
    cfg = DaemonConfig(cluster=_two_host_cluster(tuple(hosts)), job_endpoint=f"tcp://127.0.0.1:{ports[0]}",
                       agent_endpoint=f"tcp://127.0.0.1:{ports[1]}", planner_process=False,
                       etcd_endpoints=[etcd.endpoint], etcd_prefix=prefix, lease_ttl_s=1)
    r = Replica(cfg).start()
    try:
        assert r.wait_role(LEADER, 60), "never led"
        t_led = time.monotonic()
        while time.monotonic() - t_led < 4:
            time.sleep(0.1)
        assert r.role == LEADER and r.leaderships == 1, (
            f"deposed while loading: {r.leaderships} leaderships, role {r.role}")
        assert len(r.daemon.state.restored) == 3000
    finally:
        r.stop(30)
    assert r.failure is None


def test_a_big_report_whose_events_etcd_did_not_take_is_not_answered_ok(etcd):
    # a report larger than [limits] offload_bytes is decoded off the loop; its reply waits
    # for its events' write as any report's does, and says unavailable when etcd did not take
    # them (a runner does not send events again that were answered as recorded)
    from jitsched.client import Client
    from jitsched.daemon.server import Daemon
    from jitsched.errors import RemoteError

    prefix = "/t-offload"
    client, el = _elected(etcd, prefix, ttl_s=30.0)
    ports = free_ports(2)
    d = Daemon(DaemonConfig(cluster=_two_host_cluster(), job_endpoint=f"tcp://127.0.0.1:{ports[0]}",
                            agent_endpoint=f"tcp://127.0.0.1:{ports[1]}", planner_process=False,
                            offload_bytes=2048),
               store=EtcdStore(client, el), epoch=el.me.epoch, leading=el.leading)
    d.start()
    real = client.txn
    n = 200
    try:
        job = {"id": "a", "computes": [],
               "transfers": [{"id": f"t{i:04d}", "src": "h1", "dst": "h2", "bytes": 1e3} for i in range(n)]}
        with Client(d.job_endpoint, timeout_s=5) as c:
            assert c.submit_job(job) == "a"

            def down(compare, ops):
                raise EtcdUnavailable("no etcd endpoint answered")

            client.txn = down
            events = [["started", f"t{i:04d}", None] for i in range(n)]
            try:
                got = c.request("report", {"job_id": "a", "events": events})
            except RemoteError as exc:
                got = exc
            assert d.counts["requests_offloaded"] >= 1, "the report was not offloaded"
            assert d.state.journal_errors >= 1
            client.txn = real
            recorded = EtcdStore(client, el).unfinished()[0].started
            assert isinstance(got, RemoteError), (
                f"answered ok ({len(got['results'])} results) although etcd holds {len(recorded)} of its "
                f"{n} events")
    finally:
        client.txn = real
        d.stop()
        el.resign()


def test_a_leader_whose_daemon_dies_hands_over_at_once_and_says_so(etcd, monkeypatch, capsys):
    # the leader's daemon stops on an error: it resigns (the other replica leads well within
    # the 10 s lease), follows, and its own status and gauges name the failure
    from jitsched.cli import main
    from jitsched.daemon.replica import FOLLOWER, LEADER, Replica
    from jitsched.daemon.server import Daemon

    real = Daemon._housekeeping
    broken = []

    def breaks_once(self, now):
        if not broken:
            broken.append(self)
            raise RuntimeError("housekeeping broke")
        return real(self, now)

    def cfg() -> DaemonConfig:
        ports = free_ports(2)
        return DaemonConfig(cluster=_two_host_cluster(), job_endpoint=f"tcp://127.0.0.1:{ports[0]}",
                            agent_endpoint=f"tcp://127.0.0.1:{ports[1]}", planner_process=False,
                            etcd_endpoints=[etcd.endpoint], etcd_prefix="/t-lead-fails", lease_ttl_s=10)

    first = Replica(cfg()).start()
    second = None
    try:
        assert first.wait_role(LEADER, 20)
        second = Replica(cfg()).start()
        assert second.wait_role(FOLLOWER, 5)
        monkeypatch.setattr(Daemon, "_housekeeping", breaks_once)
        t0 = time.monotonic()
        assert second.wait_role(LEADER, 8), "the other replica waited out the lease"
        took = time.monotonic() - t0
        assert first.wait_role(FOLLOWER, 5)
        assert took < 8 and broken
        assert (first.lead_failures, second.lead_failures) == (1, 0)
        assert "RuntimeError: housekeeping broke" in first.last_lead_failure
        assert first.failure is None and first.running  # it follows, and may lead again
        assert main(["status", "--replicas", "--daemon", first.config.job_endpoint, "--timeout-s", "5"]) == 0
        line = capsys.readouterr().out
        assert "follower" in line and "LEADING FAILED 1 times, last: the daemon stopped: RuntimeError: " \
            "housekeeping broke" in line, line
    finally:
        for r in (first, second):
            if r is not None:
                r.stop()


def test_a_jobs_end_a_failed_write_could_not_take_stays_held_and_goes_with_a_flush(etcd, monkeypatch):
    # a leader after a failover must not take an ended job back as running: its end is
    # held (counted in held_writes, which status shows) and written by the next flush,
    # no sooner than WRITE_RETRY_S after the failure
    import jitsched.daemon.ha as ha

    client, el = _elected(etcd, "/t-ended-held", ttl_s=30.0)
    s = EtcdStore(client, el)
    row = s.submitted("j", {"id": "j"}, None, 0.0)
    s.event(row, "t", STARTED, 1.0)
    real = client.txn

    def down(compare, ops):
        raise EtcdUnavailable("down")

    monkeypatch.setattr(ha, "WRITE_RETRY_S", 0.5)
    client.txn = down
    try:
        with pytest.raises(EtcdUnavailable):
            s.ended(row, DONE, 5.0, 5.0)
        assert s.held_writes == 2
        client.txn = real
        s.flush()  # within WRITE_RETRY_S of the failure: not tried
        assert s.held_writes == 2 and [jj.row for jj in s.unfinished()] == [row]
        time.sleep(0.6)
        client.txn = down
        with pytest.raises(EtcdUnavailable):
            s.flush()
        assert s.held_writes == 2
        client.txn = real
        time.sleep(0.6)
        s.flush()
        assert s.held_writes == 0
        assert s.unfinished() == []
        assert not client.range(s._k("ev", s._row(row)) + "/", prefix=True)
    finally:
        client.txn = real
        el.resign()
