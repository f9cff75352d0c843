"""Daemon replicas on etcd: the leader's election by lease, and its state in etcd, every write fenced by its epoch."""

# One module although past 500 lines: the election and the store share one etcd
# connection and one guard, the leader's epoch: every write of EtcdStore is a
# transaction conditioned on Election.fence, and the local one-member etcd the tests
# and benches use is started and stopped beside them.

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from jitsched.daemon.journal import DONE, STARTED, JournalFlow, JournalJob, unpack_job
from jitsched.daemon.store import FencedError, StoreError
from jitsched.errors import JitschedError

log = logging.getLogger("jitsched.daemon.ha")

# etcd refuses a transaction of more operations than its --max-txn-ops (128 by default)
TXN_OPS = 100
# ... or of a request larger than its --max-request-bytes (1.5 MiB by default): a
# transaction carries at most this many bytes of base64 keys and values (3/4 of it raw),
# or one operation if that alone is more. A ResNet152's learned state is 98 kB.
TXN_BYTES = 1 << 20
# seconds one etcd request may take before the next endpoint is tried
REQUEST_TIMEOUT_S = 1.0
# after a failed write, a batch's end leaves the events it holds for this long before it
# tries them again: an unreachable etcd holds the daemon's loop up to REQUEST_TIMEOUT_S a try
WRITE_RETRY_S = 1.0


class EtcdUnavailable(StoreError, JitschedError):
    """No etcd endpoint answered."""


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


def _range_end(prefix: str) -> str:
    """The end of the key range of every key starting with ``prefix`` (base64)."""
    b = bytearray(prefix.encode())
    b[-1] += 1
    return _b64(bytes(b))


def _pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


class Etcd:
    """etcd's v3 JSON gateway over a list of endpoints (``http://HOST:PORT``), through etcd3gw.

    A request that fails to connect or times out goes to the next endpoint;
    :class:`EtcdUnavailable` when none answers.
    """

    def __init__(self, endpoints: list[str], timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        from etcd3gw.client import Etcd3Client  # the optional extra "ha"

        self.clients = []
        for ep in endpoints:
            proto, rest = ep.rstrip("/").split("://", 1)
            host, port = rest.rsplit(":", 1)
            self.clients.append(Etcd3Client(host=host, port=int(port), protocol=proto, timeout=timeout_s,
                                            api_path="/v3/"))
        self.endpoints = list(endpoints)
        self._at = 0  # the endpoint that answered last
        self._lock = threading.Lock()  # one requests.Session is not for two threads at once

    def call(self, path: str, body: dict) -> dict:
        """POST ``body`` to ``/v3/<path>``; the JSON reply.

        Raises
        ------
        EtcdUnavailable
            No endpoint answered.
        """
        from etcd3gw import exceptions

        last = ""
        with self._lock:
            for i in range(len(self.clients)):
                k = (self._at + i) % len(self.clients)
                c = self.clients[k]
                try:
                    got = c.post(c.get_url(path), json=body)
                except (exceptions.ConnectionFailedError, exceptions.ConnectionTimeoutError) as exc:
                    last = f"{self.endpoints[k]}: {type(exc).__name__}"
                    continue
                except exceptions.Etcd3Exception as exc:
                    raise StoreError(f"etcd {self.endpoints[k]} refused {path}: {exc}") from None
                self._at = k
                return got
        raise EtcdUnavailable(f"no etcd endpoint answered ({last})")

    def range(self, key: str, prefix: bool = False) -> list[tuple[str, bytes, int]]:
        """Every (key, value, mod_revision) of ``key`` (or every key under it), in key order."""
        body: dict[str, Any] = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _range_end(key)
        got = self.call("kv/range", body)
        return [(_unb64(kv["key"]).decode(), _unb64(kv.get("value", "")), int(kv.get("mod_revision", 0)))
                for kv in got.get("kvs", [])]

    def txn(self, compare: list[dict], success: list[dict]) -> bool:
        """Run ``success`` if every ``compare`` holds; whether it did."""
        return bool(self.call("kv/txn", {"compare": compare, "success": success}).get("succeeded", False))

    def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; its id."""
        return int(self.call("lease/grant", {"TTL": ttl_s, "ID": 0})["ID"])

    def keepalive(self, lease: int) -> int:
        """Renew ``lease``; its TTL now (seconds), or -1 when it has expired."""
        got = self.call("lease/keepalive", {"ID": lease})
        return int(got.get("result", {}).get("TTL", -1))

    def revoke(self, lease: int) -> None:
        """End ``lease`` now (its keys go)."""
        try:
            self.call("kv/lease/revoke", {"ID": lease})
        except StoreError:
            pass  # an expired lease is already gone


def put_op(key: str, value: bytes | str, lease: int = 0) -> dict:
    """A transaction's put of ``key``."""
    put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease:
        put["lease"] = lease
    return {"request_put": put}


def txn_chunks(ops: list[dict], most_ops: int = TXN_OPS, most_bytes: int = TXN_BYTES) -> list[list[dict]]:
    """``ops`` in order, cut into transactions of at most ``most_ops`` operations and
    ``most_bytes`` bytes of encoded keys and values (an operation larger than that alone),
    and where an operation touches a key an earlier one in the transaction touched (etcd
    refuses such a transaction as a bad request: a put and a delete of one key, or a
    progress event and the delete of its job's events); one empty transaction for no
    operations (a write of nothing still checks the fence)."""
    out: list[list[dict]] = [[]]
    size = 0
    spans: list[tuple[bytes, bytes]] = []  # the current transaction's key ranges, [lo, hi)
    for op in ops:
        body = next(iter(op.values()))
        n = len(body.get("key", "")) + len(body.get("value", ""))
        lo = _unb64(body["key"])
        hi = _unb64(body["range_end"]) if "range_end" in body else lo + b"\0"
        if out[-1] and (len(out[-1]) >= most_ops or size + n > most_bytes
                        or any(lo < b and a < hi for a, b in spans)):
            out.append([])
            size = 0
            spans = []
        out[-1].append(op)
        spans.append((lo, hi))
        size += n
    return out


def _op_key(op: dict) -> str:
    """The (encoded) key a transaction's operation writes or deletes from."""
    return next(iter(op.values()))["key"]


def delete_op(key: str, prefix: bool = False) -> dict:
    """A transaction's delete of ``key`` (or every key under it)."""
    d = {"key": _b64(key)}
    if prefix:
        d["range_end"] = _range_end(key)
    return {"request_delete_range": d}


@dataclass(frozen=True)
class Leader:
    """The replica that leads: its epoch and where it serves jobs and agents."""

    epoch: int
    job_endpoint: str
    agent_endpoint: str
    pid: int
    lease: int

    def packed(self) -> bytes:
        """The leader key's value."""
        return json.dumps({"epoch": self.epoch, "jobs": self.job_endpoint, "agents": self.agent_endpoint,
                           "pid": self.pid, "lease": self.lease}, sort_keys=True).encode()

    @classmethod
    def unpacked(cls, data: bytes) -> Leader | None:
        """The leader a leader key's value names, or None if it is not one."""
        try:
            d = json.loads(data)
            return cls(int(d["epoch"]), str(d["jobs"]), str(d["agents"]), int(d["pid"]), int(d["lease"]))
        except (ValueError, KeyError, TypeError):
            return None


class Election:
    """One replica's part in electing the leader of ``prefix``: a lease, the leader key and the epoch.

    The leader key ``PREFIX/leader`` exists while its holder's lease does;
    taking it also raises ``PREFIX/epoch`` by one in the same transaction, so
    every leadership has its own, higher epoch. The holder renews the lease
    every ``ttl_s / 4``; :meth:`leading` also says False once ``ttl_s`` has
    passed on this host's monotonic clock since the last renewal was sent (a
    process stopped, then continued, learns it may have been deposed before
    it asks etcd). Writes are fenced by :meth:`fence`: the leader key still
    holds exactly this replica's value.
    """

    def __init__(self, etcd: Etcd, prefix: str, ttl_s: float) -> None:
        self.etcd = etcd
        self.prefix = prefix.rstrip("/")
        self.ttl_s = max(1, int(round(ttl_s)))
        self.leader_key = f"{self.prefix}/leader"
        self.epoch_key = f"{self.prefix}/epoch"
        self.me: Leader | None = None  # set while this replica leads
        self._deadline = 0.0  # monotonic time the lease may have lapsed by
        self.lost = threading.Event()  # set when this replica's leadership ended

    def leader(self) -> Leader | None:
        """The leader now, as etcd says (None: no leader)."""
        got = self.etcd.range(self.leader_key)
        return Leader.unpacked(got[0][1]) if got else None

    def wait_leader(self, timeout_s: float, epoch_above: int = 0, poll_s: float = 0.02) -> Leader | None:
        """The first leader of an epoch above ``epoch_above`` within ``timeout_s`` (None: none)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self.leader()
            if got is not None and got.epoch > epoch_above:
                return got
            time.sleep(poll_s)
        return None

    def campaign(self, job_endpoint: str, agent_endpoint: str) -> bool:
        """Try once to become the leader; whether this replica leads now."""
        if self.etcd.range(self.leader_key):
            return False
        got = self.etcd.range(self.epoch_key)
        epoch = int(got[0][1]) + 1 if got else 1
        seen = got[0][2] if got else 0
        sent = time.monotonic()
        lease = self.etcd.grant(self.ttl_s)
        me = Leader(epoch, job_endpoint, agent_endpoint, os.getpid(), lease)
        compare = [{"key": _b64(self.leader_key), "target": "CREATE", "result": "EQUAL", "create_revision": 0},
                   {"key": _b64(self.epoch_key), "target": "MOD", "result": "EQUAL", "mod_revision": seen}]
        if not self.etcd.txn(compare, [put_op(self.leader_key, me.packed(), lease),
                                       put_op(self.epoch_key, str(epoch))]):
            self.etcd.revoke(lease)
            return False
        self.me, self._deadline = me, sent + self.ttl_s
        self.lost.clear()
        log.info("event=ha_elected epoch=%d pid=%d", epoch, me.pid)
        return True

    def leading(self) -> bool:
        """Whether this replica leads, as far as it can tell without asking etcd."""
        return self.me is not None and not self.lost.is_set() and time.monotonic() < self._deadline

    def renew(self) -> bool:
        """Renew the lease; whether this replica still leads (False: it lost its leadership)."""
        if self.me is None:
            return False
        sent = time.monotonic()
        if sent >= self._deadline:
            self.depose("the lease may have lapsed before it was renewed")
            return False
        try:
            ttl = self.etcd.keepalive(self.me.lease)
        except StoreError as exc:
            log.warning("event=ha_renew_failed error=%r", str(exc))
            return self.leading()
        if ttl <= 0:
            self.depose("the lease expired")
            return False
        self._deadline = sent + ttl
        return self.leading()

    def depose(self, why: str) -> None:
        """This replica no longer leads (its writes are refused from now on)."""
        if not self.lost.is_set():
            log.warning("event=ha_deposed epoch=%d reason=%r", self.me.epoch if self.me else 0, why)
        self.lost.set()

    def resign(self) -> None:
        """Give the leadership up at once (the lease and the leader key go)."""
        if self.me is not None:
            self.etcd.revoke(self.me.lease)
        self.depose("resigned")

    def fence(self) -> list[dict]:
        """The compare every write of this leader carries: the leader key is still its own."""
        assert self.me is not None
        return [{"key": _b64(self.leader_key), "target": "VALUE", "result": "EQUAL",
                 "value": _b64(self.me.packed())}]


class EtcdStore:
    """The daemon's jobs, templates, progress and announced flows in etcd (the
    :class:`jitsched.daemon.store.Store` of a leading replica).

    Keys under ``PREFIX/``: ``meta/KEY``; ``job/ROW`` (the job as
    submitted, its owner and state, packed); ``ev/ROW/N`` (a progress event);
    ``tpl/ROW/n`` and ``tpl/ROW/learned`` (a recurring job's count and learned
    state); ``bg/NAME`` (an announced flow). Rows are ``epoch << 32 | n``: no
    two leaders give the same. Every write is one transaction conditioned on
    :meth:`Election.fence`; a refused one raises :class:`FencedError` and
    deposes the replica.
    """

    holds_batches = True

    def __init__(self, etcd: Etcd, election: Election) -> None:
        self.etcd = etcd
        self.election = election
        self.prefix = election.prefix
        self.writes = 0
        self.fenced = 0  # writes refused because this replica no longer led
        self._n = 0
        self._jobs: dict[int, dict] = {}  # running rows: their job record without the map
        self._batching = 0  # open batch() blocks
        self._pending: list[dict] = []  # progress events a batch holds back, in order
        # recurring jobs' counts and learned states held back for the next write or flush():
        # an iteration's write would be one transaction on the loop (3.1 ms), and jobs started
        # together reach their JOURNAL_EVERY-th iteration together. By key: a newer count or
        # state replaces the one held, so while etcd is down they stay two per job however
        # long the jobs iterate.
        self._later: dict[str, dict] = {}
        self._retry_at = -math.inf  # a batch's end writes its events no sooner (WRITE_RETRY_S)

    def _k(self, *parts: object) -> str:
        return "/".join([self.prefix, *map(str, parts)])

    @staticmethod
    def _row(row: int) -> str:
        return f"{row:020d}"

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Progress events written inside the block go to etcd together as it ends, in as
        few transactions as :data:`TXN_OPS` allows (any other write inside sends them first,
        in order): one fenced transaction took 3.1 ms (median of 300 events) on a one-member
        etcd on loopback, and a report's events each took one.

        Raises :class:`StoreError` (or :class:`FencedError`) when the block ends if they
        could not be written. Events a failed write could not take stay held
        (:attr:`holding`) and go with the next write; a block ending within
        :data:`WRITE_RETRY_S` of the failure leaves them held without trying.
        """
        self._batching += 1
        try:
            yield
        finally:
            self._batching -= 1
            if not self._batching and self._pending and time.monotonic() >= self._retry_at:
                self._write([])

    @property
    def holding(self) -> bool:
        """Whether an open batch holds progress events not yet written."""
        return bool(self._pending)

    @property
    def held_writes(self) -> int:
        """Operations held back and not yet written: progress events and jobs' ends after a
        failed write, recurring jobs' counts until the loop turn's write."""
        return len(self._pending) + len(self._later)

    def _write(self, ops: list[dict]) -> None:
        """Write what is held back, then ``ops``; what is held back and not written stays
        held (its order kept) when this raises. The progress events go first: a job's end
        held after a failed write deletes the events written before it."""
        later, pending = list(self._later.values()), self._pending
        held, self._later, self._pending = pending + later, {}, []
        done = 0
        try:
            if not self.election.leading():
                self.fenced += 1
                raise FencedError("this replica no longer leads: its writes are refused")
            for chunk in txn_chunks(held + ops):
                if not self.etcd.txn(self.election.fence(), chunk):
                    self.fenced += 1
                    self.election.depose("a write was refused: another replica leads")
                    raise FencedError("this replica no longer leads: etcd refused its write")
                done += len(chunk)
        except BaseException:
            # events not written stay in order; counts and states go back to be replaced by newer ones
            self._pending = pending[done:] + self._pending
            for op in later[max(done - len(pending), 0):]:
                self._later.setdefault(_op_key(op), op)
            self._retry_at = time.monotonic() + WRITE_RETRY_S
            raise
        self._retry_at = -math.inf
        self.writes += 1

    def _next(self) -> int:
        self._n += 1
        assert self.election.me is not None
        return (self.election.me.epoch << 32) | self._n

    def get(self, key: str) -> str | None:
        """A stored setting, or None."""
        got = self.etcd.range(self._k("meta", key))
        return got[0][1].decode() if got else None

    def put(self, key: str, value: str) -> None:
        """Store a setting."""
        self._write([put_op(self._k("meta", key), value)])

    def submitted(self, job_id: str, job_map: dict, owner: str | None, submitted_s: float) -> int:
        """Record a submitted job; returns its row."""
        row = self._next()
        rec = {"id": job_id, "owner": owner, "sub": submitted_s, "state": "running"}
        self._write([put_op(self._k("job", self._row(row)), _pack(rec | {"job": _pack(job_map)}))])
        self._jobs[row] = rec
        return row

    def event(self, row: int, node: str, kind: str, t_s: float, measured_s: float | None = None) -> None:
        """Record that ``node`` of job ``row`` started or ended at ``t_s`` (inside :meth:`batch`:
        when the block ends)."""
        op = put_op(self._k("ev", self._row(row), f"{self._next():020d}"), _pack([node, kind, t_s, measured_s]))
        if self._batching:
            self._pending.append(op)
        else:
            self._write([op])

    def ended(self, row: int, state: str, t_s: float, jct_s: float | None = None, error: str = "") -> None:
        """Record that job ``row`` ended as ``state``; its map and events go."""
        rec = dict(self._jobs.get(row) or {"id": "?", "owner": None, "sub": 0.0})
        rec.update(state=state, ended=t_s, jct=jct_s, error=error)
        ops = [put_op(self._k("job", self._row(row)), _pack(rec)),
               delete_op(self._k("ev", self._row(row)) + "/", prefix=True)]
        self._jobs.pop(row, None)
        try:
            self._write(ops)
        except StoreError:
            # the end stays held and goes with the next write or flush: a leader after a
            # failover would otherwise take the ended job back as running
            self._hold_later(ops)
            raise

    def forget(self, rows: list[int]) -> None:
        """Drop the rows of ended jobs."""
        ops = []
        for r in rows:
            ops += [delete_op(self._k("job", self._row(r))), delete_op(self._k("tpl", self._row(r)) + "/", prefix=True)]
        self._write(ops)

    def background_held(self, flow: JournalFlow) -> None:
        """Record an announced background flow (a new one or a progress report)."""
        self._write([put_op(self._k("bg", flow.name), _pack([flow.name, flow.src, flow.dst, flow.bytes, flow.left,
                                                             flow.owner, flow.started_s, flow.seen_s]))])

    def background_gone(self, names: list[str]) -> None:
        """Forget announced background flows."""
        self._write([delete_op(self._k("bg", n)) for n in names])

    def template(self, row: int, iterations: int, learned: bytes | None = None, *, later: bool = False) -> None:
        """Record recurring job ``row``'s iteration count and, if given, its learned state;
        ``later``: with the next write or :meth:`flush`."""
        ops = [put_op(self._k("tpl", self._row(row), "n"), str(iterations))]
        if learned is not None:
            ops.append(put_op(self._k("tpl", self._row(row), "learned"), learned))
        if later:
            self._hold_later(ops)
        else:
            self._write(ops)

    def _hold_later(self, ops: list[dict]) -> None:
        """Hold ``ops`` for the next write or :meth:`flush`, each replacing what was held for
        its key; the newer goes last, after what was held before it."""
        for op in ops:
            key = _op_key(op)
            self._later.pop(key, None)
            self._later[key] = op

    def flush(self) -> None:
        """Write what is held back, if any: the counts and learned states :meth:`template`
        held, and jobs' ends a failed write could not take (no sooner than
        :data:`WRITE_RETRY_S` after a failed write)."""
        if self._later and not self._batching and time.monotonic() >= self._retry_at:
            self._write([])

    def templates(self) -> dict[int, tuple[int, bytes | None]]:
        """Every running recurring job's row -> (iteration count, learned state or None)."""
        out: dict[int, list] = {}
        for key, value, _ in self.etcd.range(self._k("tpl") + "/", prefix=True):
            row, what = key.rsplit("/", 2)[-2:]
            entry = out.setdefault(int(row), [0, None])
            if what == "n":
                entry[0] = int(value)
            else:
                entry[1] = value
        running = {r for r in out if r in self._jobs}
        return {r: (v[0], v[1]) for r, v in out.items() if r in running}

    def background(self) -> list[JournalFlow]:
        """Every announced background flow held, oldest first."""
        flows = [JournalFlow(*msgpack.unpackb(v, raw=False)) for _, v, _ in
                 self.etcd.range(self._k("bg") + "/", prefix=True)]
        return sorted(flows, key=lambda f: (f.started_s, f.name))

    def unfinished(self) -> list[JournalJob]:
        """Every job recorded as running, in submission order, with its progress."""
        out: dict[int, JournalJob] = {}
        for key, value, _ in self.etcd.range(self._k("job") + "/", prefix=True):
            row = int(key.rsplit("/", 1)[1])
            try:
                rec = msgpack.unpackb(value, raw=False)
            except Exception:  # noqa: BLE001 - one unreadable record is its job's problem
                rec = {"id": "?", "state": "running", "job": None}
            if not isinstance(rec, dict) or rec.get("state") != "running":
                continue
            job_map, error = unpack_job(rec.get("job"))
            self._jobs[row] = {k: rec.get(k) for k in ("id", "owner", "sub", "state")}
            if error:
                out[row] = JournalJob(row, {"id": str(rec.get("id"))}, rec.get("owner"), float(rec.get("sub") or 0),
                                      error=error)
            else:
                out[row] = JournalJob(row, job_map, rec.get("owner"), float(rec.get("sub") or 0))
        for key, value, _ in self.etcd.range(self._k("ev") + "/", prefix=True):
            j = out.get(int(key.rsplit("/", 2)[-2]))
            if j is None:
                continue
            node, kind, t_s, measured = msgpack.unpackb(value, raw=False)
            if kind == STARTED:
                j.started.setdefault(node, t_s)
            elif kind == DONE:
                j.done.setdefault(node, t_s)
                if measured is not None:
                    j.measured_s[node] = measured
        return list(out.values())

    def compact(self) -> int:
        """Forget ended jobs; returns how many."""
        ended = []
        for key, value, _ in self.etcd.range(self._k("job") + "/", prefix=True):
            try:
                rec = msgpack.unpackb(value, raw=False)
            except Exception:  # noqa: BLE001 - unreadable: unfinished() reports it
                continue
            if isinstance(rec, dict) and rec.get("state") != "running":
                ended.append(int(key.rsplit("/", 1)[1]))
        if ended:
            self.forget(ended)
        return len(ended)

    def close(self) -> None:
        """Nothing to release: the election holds the lease."""


class LocalEtcd:
    """A one-member etcd (Debian's ``etcd``) on two loopback ports, its data in a temporary
    directory: what the tests and benches run replicas against. :meth:`stop` ends it and
    removes the directory.

    Raises
    ------
    JitschedError
        ``etcd`` is not installed, or it did not answer within ``timeout_s``.
    """

    def __init__(self, client_port: int, peer_port: int, timeout_s: float = 15.0) -> None:
        exe = shutil.which("etcd")
        if exe is None:
            raise JitschedError("etcd is not installed (Debian: apt-get install etcd-server)")
        self.dir = tempfile.mkdtemp(prefix="jitsched-etcd-")
        self.endpoint = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        self.log = open(os.path.join(self.dir, "etcd.log"), "wb")  # noqa: SIM115 - closed by stop()
        self.proc = subprocess.Popen(
            [exe, "--name", "jitsched-test", "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"jitsched-test={peer}", "--heartbeat-interval", "50",
             "--election-timeout", "500", "--max-request-bytes", str(16 * 1024 * 1024)],
            stdout=self.log, stderr=subprocess.STDOUT)
        etcd = Etcd([self.endpoint], timeout_s=0.5)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                etcd.range("/")
                return
            except StoreError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise JitschedError(f"etcd did not start on {self.endpoint}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """End etcd and remove its directory."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


__all__ = ["Election", "Etcd", "EtcdStore", "EtcdUnavailable", "Leader", "LocalEtcd", "delete_op", "put_op",
           "txn_chunks"]
