"""Fault benchmarks: a seeded protocol fuzzer on both daemon sockets, kill -9 restart cycles, a soak."""

# One module although past 500 lines: each mode (fuzz, kill -9 cycles, soak, big
# submit, churn) drives the same harness -- a daemon in a child process with its
# journal, agents and job runners in processes, RSS and descriptor probes -- and
# prints into the one --json line operators' scripts read. Splitting the modes into a
# bench/faults/ package is the next step; the modes of the daemon's bounds (ended jobs'
# memory, connection churn) live in bench/faults_limits.py already.
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import random
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import zmq

from jitsched import protocol
from jitsched.protocol import (
    AGENT_TYPES,
    ERROR_CODES,
    JOB_TYPES,
    MESSAGE_TYPES,
    MsgType,
    decode_reply,
    is_reply,
)
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job

HOSTS = ("h0", "h1", "h2", "h3")
JOB_IDS = tuple(f"fz{i}" for i in range(12))  # few ids: fuzzed reports often hit a real job
# node ids of the two-layer template job, so that fuzzed reports name real nodes
TRANSFERS = ("read_w0", "read_b0", "read_w1", "read_b1")
COMPUTES = ("fwd0", "fwd1", "bwd0", "bwd1")
T_NS = 1_700_000_000 * 10**9  # a plausible wall clock, ns
FIRST_ID = 1_000_000  # fuzzer request ids count up from here (peer ids in replies stand out)
EXTREME_NUMBERS = (2**63 - 1, 2**64 - 1, -(2**63), -1, 0, -0.0, math.nan, math.inf, -math.inf,
                   1e308, -1e308, 5e-324, 2**53 + 1)


def log(msg: str) -> None:
    """Progress on stderr (stdout carries the result)."""
    print(f"[bench_faults {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- the generator


@dataclass
class Case:
    """One fuzzed message: its frames, the socket it goes to and what the daemon owes it.

    ``expect_reply``: the protocol requires an answer (every request frame does;
    on the agent socket a frame that parses as a reply is dropped by design).
    ``expect_id``: the id the answer must carry (the envelope's integer id, 0 when
    the frame has none the daemon can read).
    """

    side: str  # "job" or "agent"
    frames: list[bytes]
    label: str
    expect_reply: bool = True
    expect_id: int = 0


def expected_id(data: bytes) -> int:
    """The id a reply to ``data`` must carry: the map's integer ``id`` when it unpacks, else 0."""
    if len(data) > protocol.MAX_MESSAGE_BYTES:
        return 0
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001 - any failure: no readable id
        return 0
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else 0


def _pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


class Fuzzer:
    """Seeded mutator of the protocol's messages (``protocol._SCHEMAS`` is the table it starts from).

    Each :meth:`case` is a valid request of a message type that socket takes,
    then, most of the time, one mutation: of the body (missing, extra or
    wrongly typed fields, extreme numbers, long strings, control characters,
    a mangled job map), of the envelope (version, id, type, body), of the
    bytes (truncated, flipped, garbage, not a map, bad UTF-8, lying length
    headers, deep nesting, extension types), of the frame count, or a valid
    message out of order (reports on jobs never submitted, acks of plans
    never sent). The same seed gives the same messages.

    Parameters
    ----------
    seed : int
    too_large_p : float
        Probability of a message just over the 8 MiB limit (rare: they cost
        memory and time on both ends).
    """

    SCHEMAS = protocol._SCHEMAS  # noqa: SLF001 - the schema table is the generator's input

    def __init__(self, seed: int, too_large_p: float = 1 / 4000) -> None:
        self.rng = random.Random(seed)
        self.too_large_p = too_large_p
        self.next_id = FIRST_ID
        self.mutations: list[tuple[str, Callable[[str, dict], list[bytes]], float]] = [
            ("valid", self._m_valid, 12),
            ("missing_field", self._m_missing, 5),
            ("extra_field", self._m_extra, 4),
            ("wrong_type", self._m_wrong_type, 8),
            ("extreme_number", self._m_extreme, 8),
            ("long_string", self._m_long_string, 3),
            ("control_chars", self._m_control, 4),
            ("job_map", self._m_job_map, 8),
            ("envelope", self._m_envelope, 8),
            ("unknown_type", self._m_unknown_type, 4),
            ("reply_frame", self._m_reply_frame, 2),
            ("truncated", self._m_truncated, 5),
            ("bitflip", self._m_bitflip, 5),
            ("garbage", self._m_garbage, 4),
            ("not_a_map", self._m_not_a_map, 3),
            ("raw_bytes", self._m_raw_bytes, 5),
            ("frames", self._m_frames, 4),
            ("out_of_order", self._m_out_of_order, 8),
        ]
        self._weights = [w for _, _, w in self.mutations]

    # -------------------------------------------------------------- valid values

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def job_map(self, job_id: str | None = None) -> dict:
        """A small valid job map (two VGG16 layers between two random hosts)."""
        ps, worker = self.rng.sample(HOSTS, 2)
        jid = job_id or self.rng.choice(JOB_IDS)
        return layer_chain_job(jid, ps, worker, layers=VGG16_LAYERS[:2]).to_dict()

    def value(self, type_: str, key: str, kind) -> object:
        """A valid value of field ``key`` of ``type_``'s body."""
        r = self.rng
        if key == "job_id":
            return r.choice(JOB_IDS) if r.random() < 0.85 else f"nope{r.randrange(1000)}"
        if key == "transfer":
            return r.choice(TRANSFERS + COMPUTES[:1])
        if key == "compute":
            return r.choice(COMPUTES + TRANSFERS[:1])
        if key == "host":
            return r.choice(HOSTS) if r.random() < 0.9 else "hX"
        if key == "job":
            return self.job_map()
        if key == "cluster":
            return {"hosts": [{"name": h, "egress_bps": 1e9, "ingress_bps": 1e9}
                              for h in r.sample(HOSTS, r.randint(1, 4))]}
        if key in ("seq", "applied_seq"):
            return r.randrange(0, 40)
        if key == "t_ns":
            return T_NS + r.randrange(-10**9, 10**12)  # fixed base: the same seed, the same bytes
        if key == "flow_rates_Bps":
            return {f"{r.choice(JOB_IDS)}/{r.choice(TRANSFERS)}": r.uniform(0, 1e8)
                    for _ in range(r.randrange(3))}
        if key == "backend":
            return r.choice(("record", "pacing", "tc"))
        if key == "verbose":
            return r.random() < 0.5
        if key == "direction":
            return r.choice(("in", "out"))
        if kind == protocol.NUM:
            return r.choice((0.01, 1.0, 6912.0, 1e9, 3))
        if kind is int:
            return r.randrange(0, 10**6)
        if kind is str:
            return f"s{r.randrange(100)}"
        if kind is list:
            return [r.uniform(0, 1e6) for _ in range(r.randrange(3))]
        if kind is dict:
            return {}
        if kind is bool:
            return True
        return None

    def body(self, type_: str, optional_p: float = 0.5) -> dict:
        """A valid body of ``type_``: every required field, each optional one with ``optional_p``."""
        out = {}
        for key, (kind, required) in self.SCHEMAS[type_].items():
            if required or self.rng.random() < optional_p:
                out[key] = self.value(type_, key, kind)
        return out

    def envelope(self, type_: str, body: dict) -> dict:
        """A valid request envelope around ``body``, with a fresh id."""
        return {"v": protocol.VERSION, "id": self._id(), "type": type_, "body": body}

    # -------------------------------------------------------------- odd values

    def odd_value(self) -> object:
        """A value of a random type, often an awkward one."""
        r = self.rng
        pick = r.randrange(12)
        if pick == 0:
            return r.choice(EXTREME_NUMBERS)
        if pick == 1:
            return None
        if pick == 2:
            return r.random() < 0.5
        if pick == 3:
            return self.long_string()
        if pick == 4:
            return self.control_string()
        if pick == 5:
            return bytes(r.randrange(256) for _ in range(r.randrange(40)))
        if pick == 6:
            return [self.odd_value() for _ in range(r.randrange(4))] if r.random() < 0.7 else []
        if pick == 7:
            return {f"k{i}": self.odd_value() for i in range(r.randrange(3))}
        if pick == 8:
            return msgpack.ExtType(r.randrange(0, 128), b"\x00\x01")
        if pick == 9:
            return r.uniform(-1e12, 1e12)
        if pick == 10:
            return r.randrange(-(2**63), 2**64)
        return ""

    def long_string(self) -> str:
        """A long string: 1 KiB to 256 KiB, sometimes multi-byte characters."""
        n = self.rng.choice((1024, 65536, 262144))
        return self.rng.choice(("x", "\u00e9", "\U0001f600", "/")) * n

    def control_string(self) -> str:
        """Control characters, NULs, newlines, quotes and right-to-left marks in an id-like string."""
        bits = ["\x00", "\n", "\r", "\x1b[2J", "\t", "\x7f", '"', "'", "\\", "\u202e", "/", "=", " ", "%s"]
        return "".join(self.rng.choice(bits) + self.rng.choice(("a", "")) for _ in range(self.rng.randrange(1, 12)))

    # -------------------------------------------------------------- mutations

    def _frames(self, env: dict) -> list[bytes]:
        return [_pack(env)]

    def _m_valid(self, type_: str, body: dict) -> list[bytes]:
        return self._frames(self.envelope(type_, body))

    def _m_missing(self, type_: str, body: dict) -> list[bytes]:
        if body:
            body.pop(self.rng.choice(sorted(body)))
        return self._frames(self.envelope(type_, body))

    def _m_extra(self, type_: str, body: dict) -> list[bytes]:
        body[self.rng.choice(("foo", "job_id2", "", "\x00", "v", "seq"))] = self.odd_value()
        return self._frames(self.envelope(type_, body))

    def _m_wrong_type(self, type_: str, body: dict) -> list[bytes]:
        keys = sorted(self.SCHEMAS[type_])
        body[self.rng.choice(keys)] = self.odd_value()
        return self._frames(self.envelope(type_, body))

    def _m_extreme(self, type_: str, body: dict) -> list[bytes]:
        numeric = [k for k, (kind, _) in self.SCHEMAS[type_].items() if kind in (protocol.NUM, int)]
        if numeric:
            body[self.rng.choice(numeric)] = self.rng.choice(EXTREME_NUMBERS)
        else:  # no numeric field: the id instead
            env = self.envelope(type_, body)
            env["id"] = self.rng.choice([x for x in EXTREME_NUMBERS if isinstance(x, int)])
            return self._frames(env)
        return self._frames(self.envelope(type_, body))

    def _m_long_string(self, type_: str, body: dict) -> list[bytes]:
        strs = [k for k, (kind, _) in self.SCHEMAS[type_].items() if kind is str]
        env = self.envelope(type_, body)
        if strs and self.rng.random() < 0.8:
            body[self.rng.choice(strs)] = self.long_string()
        else:
            env["type"] = self.long_string()
        return self._frames(env)

    def _m_control(self, type_: str, body: dict) -> list[bytes]:
        strs = [k for k, (kind, _) in self.SCHEMAS[type_].items() if kind is str]
        if strs:
            body[self.rng.choice(strs)] = self.control_string()
        elif type_ == MsgType.SUBMIT_JOB:
            body["job"]["id"] = self.control_string()
        return self._frames(self.envelope(type_, body))

    def _mutate_tree(self, obj, depth: int = 0):
        """``obj`` with one value somewhere inside replaced, removed or added to."""
        r = self.rng
        if isinstance(obj, dict) and obj and depth < 6:
            key = r.choice(sorted(obj, key=str))
            what = r.random()
            if what < 0.5:
                obj[key] = self._mutate_tree(obj[key], depth + 1)
            elif what < 0.65:
                del obj[key]
            elif what < 0.8:
                obj[r.choice(("foo", "id", "bytes", "src"))] = self.odd_value()
            else:
                obj[key] = self.odd_value()
            return obj
        if isinstance(obj, list) and obj and depth < 6:
            i = r.randrange(len(obj))
            what = r.random()
            if what < 0.6:
                obj[i] = self._mutate_tree(obj[i], depth + 1)
            elif what < 0.75:
                del obj[i]
            elif what < 0.9:
                obj.append(obj[i] if r.random() < 0.5 else self.odd_value())  # duplicates too
            else:
                obj[i] = self.odd_value()
            return obj
        if isinstance(obj, (int, float)) and not isinstance(obj, bool) and r.random() < 0.7:
            return r.choice(EXTREME_NUMBERS)
        return self.odd_value()

    def _m_job_map(self, type_: str, body: dict) -> list[bytes]:
        if type_ != MsgType.SUBMIT_JOB:
            return self._m_wrong_type(type_, body)
        r = self.rng
        job = body["job"]
        pick = r.random()
        if pick < 0.12:  # a cycle
            job["edges"].append(["bwd0", "fwd0"])
        elif pick < 0.2:  # an edge to a node that does not exist, or to itself
            job["edges"].append(r.choice((["fwd0", "nope"], ["fwd1", "fwd1"])))
        elif pick < 0.28:  # a host not in the cluster
            job["transfers"][0]["src"] = "hX"
        elif pick < 0.34:  # many nodes (limits)
            job["transfers"] += [{"id": f"x{i}", "src": "h0", "dst": "h1", "bytes": 1.0}
                                 for i in range(r.choice((500, 5000)))]
        elif pick < 0.4:
            body["cluster"] = self._mutate_tree(self.value(type_, "cluster", dict))
        else:
            for _ in range(r.randint(1, 3)):
                job = self._mutate_tree(job)
            body["job"] = job
        return self._frames(self.envelope(type_, body))

    def _m_envelope(self, type_: str, body: dict) -> list[bytes]:
        env = self.envelope(type_, body)
        key = self.rng.choice(("v", "id", "type", "body", "extra", "drop"))
        if key == "extra":
            env[self.rng.choice(("ok", "error", "x", "ID"))] = self.odd_value()
        elif key == "drop":
            del env[self.rng.choice(("v", "id", "type", "body"))]
        elif key == "v" and self.rng.random() < 0.4:
            env["v"] = self.rng.choice((0, 2, "1", 1.0, True, -1))
        else:
            env[key] = self.odd_value()
        return self._frames(env)

    def _m_unknown_type(self, type_: str, body: dict) -> list[bytes]:
        other = self.rng.choice(sorted(MESSAGE_TYPES) + ["nope", "", "SUBMIT_JOB", "status "])
        return self._frames(self.envelope(other, self.body(other) if other in MESSAGE_TYPES else body))

    def _m_reply_frame(self, type_: str, body: dict) -> list[bytes]:
        rep = {"v": protocol.VERSION, "id": self._id(), "ok": self.rng.random() < 0.5, "body": body}
        if self.rng.random() < 0.3:
            rep["type"] = type_
        return [_pack(rep)]

    def _m_truncated(self, type_: str, body: dict) -> list[bytes]:
        data = _pack(self.envelope(type_, body))
        return [data[: self.rng.randrange(len(data))]]

    def _m_bitflip(self, type_: str, body: dict) -> list[bytes]:
        data = bytearray(_pack(self.envelope(type_, body)))
        for _ in range(self.rng.randint(1, 4)):
            data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        return [bytes(data)]

    def _m_garbage(self, type_: str, body: dict) -> list[bytes]:
        n = self.rng.choice((0, 1, 2, 7, 64, 4096))
        return [bytes(self.rng.randrange(256) for _ in range(n))]

    def _m_not_a_map(self, type_: str, body: dict) -> list[bytes]:
        return [_pack(self.rng.choice(([type_, body], 1, "status", None, b"\x00", 1.5, [])))]

    def _m_raw_bytes(self, type_: str, body: dict) -> list[bytes]:
        r = self.rng
        pick = r.randrange(7)
        if pick == 0:  # a fixstr with bytes that are not UTF-8, as a value and as a key
            bad = b"\xa3\xff\xfe\xfd"
            if r.random() < 0.5:
                return [b"\x84\xa1v\x01\xa2id" + _pack(self._id()) + b"\xa4type" + bad + b"\xa4body\x80"]
            return [b"\x81" + bad + b"\x01"]
        if pick == 1:  # array/map/str headers claiming 4 G entries with nothing behind them
            return [r.choice((b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xdb\xff\xff\xff\xff",
                              b"\xc6\xff\xff\xff\xff", b"\x81\xa4body\xdf\x7f\xff\xff\xff"))]
        if pick == 2:  # deep nesting
            depth = r.choice((100, 2000, 100_000))
            return [b"\x91" * depth + b"\x00"]
        if pick == 3:  # map with non-string keys
            return [_pack({1: 2, "v": 1, "id": self._id()}) if r.random() < 0.5
                    else b"\x82\xa1v\x01\x90\x00"]
        if pick == 4:  # extension types and msgpack timestamps
            env = self.envelope(type_, body)
            env[r.choice(("id", "body", "type"))] = r.choice((msgpack.Timestamp(2**33, 999_999_999), msgpack.ExtType(5, b"\x00" * 8)))
            return [_pack(env)]
        if pick == 5:  # trailing bytes after a valid message
            return [_pack(self.envelope(type_, body)) + b"\xc1\x00"]
        # the reserved type byte 0xc1 in a map value
        return [b"\x84\xa1v\x01\xa2id" + _pack(self._id()) + b"\xa4type\xc1\xa4body\x80"]

    def _m_frames(self, type_: str, body: dict) -> list[bytes]:
        data = _pack(self.envelope(type_, body))
        r = self.rng
        pick = r.randrange(4)
        if pick == 0:  # as a REQ socket would: an empty delimiter first
            return [b"", data]
        if pick == 1:  # junk frames before the message
            return [b"junk", b"\x00" * r.randrange(3), data]
        if pick == 2:  # the message, then junk after it (the daemon reads the last frame)
            return [data, _pack({"v": 1, "id": self._id(), "type": "status", "body": {}})]
        return [b""] * r.randint(1, 5)

    def _m_out_of_order(self, type_: str, body: dict) -> list[bytes]:
        # valid messages that the daemon's state must refuse or absorb
        r = self.rng
        pick = r.randrange(7)
        if pick == 0:
            t, b = MsgType.TRANSFER_FINISHED, {"job_id": f"never{r.randrange(10**6)}", "transfer": "read_w0"}
        elif pick == 1:
            t, b = MsgType.ACK, {"host": r.choice(HOSTS), "seq": r.choice((0, 10**9, 2**63 - 1, -5))}
        elif pick == 2:
            t, b = MsgType.HEARTBEAT, {"host": r.choice(HOSTS), "applied_seq": 10**9}
        elif pick == 3:
            t, b = MsgType.JOB_FINISHED, {"job_id": r.choice(JOB_IDS), "jct_s": r.choice((-1.0, 0.0, 1e9))}
        elif pick == 4:
            t, b = MsgType.COMPUTE_FINISHED, {"job_id": r.choice(JOB_IDS), "compute": "fwd0",
                                              "duration_s": r.choice((-1.0, 0.0, 1e9, 1e-9))}
        elif pick == 5:
            t, b = MsgType.GET_SCHEDULE, {"host": r.choice(HOSTS)}
        else:
            t, b = MsgType.CANCEL_JOB, {"job_id": r.choice(JOB_IDS)}
        return self._frames(self.envelope(t, b))

    # -------------------------------------------------------------- cases

    def case(self, side: str) -> Case:
        """The next message for the ``side`` socket (``"job"`` or ``"agent"``)."""
        r = self.rng
        if r.random() < self.too_large_p:
            env = self.envelope(MsgType.STATUS, {"verbose": False})
            env["body"] = {"pad": "x" * (protocol.MAX_MESSAGE_BYTES + 16)}
            frames, label = [_pack(env)], "too_large"
        else:
            types = sorted(JOB_TYPES if side == "job" else AGENT_TYPES)
            type_ = r.choice(types)
            label, fn, _ = r.choices(self.mutations, weights=self._weights)[0]
            frames = fn(type_, self.body(type_))
        data = frames[-1]
        expect = not (side == "agent" and is_reply(data))
        return Case(side, frames, label, expect, expected_id(data) if expect else 0)


# ---------------------------------------------------------------------- the driver


@dataclass
class FuzzStats:
    """What a fuzz run saw. ``hangs``: requests the daemon owed an answer and gave none in time."""

    sent: int = 0
    replies: int = 0
    hangs: int = 0
    crashes: int = 0
    unexpected: int = 0  # replies with an id nothing was waiting for
    bad_replies: int = 0  # answers that are no valid reply envelope or carry an unknown code
    pushes: int = 0  # schedules the daemon pushed to fuzzing agent connections
    send_timeouts: int = 0  # sends that did not leave within timeout_s (the daemon reads nothing)
    wedged: int = 0  # 1 if the daemon's pid lived on but it stopped answering status
    codes: collections.Counter = field(default_factory=collections.Counter)
    labels: collections.Counter = field(default_factory=collections.Counter)
    hung: list = field(default_factory=list)  # (label, frames) of the first few hangs
    internal: list = field(default_factory=list)  # (label, frames, message) of internal errors
    elapsed_s: float = 0.0

    def summary(self) -> dict:
        """The counters as plain JSON types."""
        return {"sent": self.sent, "replies": self.replies, "hangs": self.hangs, "crashes": self.crashes,
                "wedged": self.wedged, "send_timeouts": self.send_timeouts,
                "unexpected": self.unexpected, "bad_replies": self.bad_replies, "pushes": self.pushes,
                "codes": dict(self.codes), "internal": len(self.internal), "elapsed_s": round(self.elapsed_s, 2)}


class _Conn:
    def __init__(self, ctx: zmq.Context, side: str, endpoint: str, k: int, timeout_s: float) -> None:
        self.side = side
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # a daemon that stops reading must not block the bench: every send is bounded
        self.sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        self.sock.setsockopt(zmq.MAXMSGSIZE, 64 * 1024 * 1024)
        self.sock.setsockopt(zmq.ROUTING_ID, f"fuzz-{side}-{k}-{os.getpid()}".encode())
        self.sock.connect(endpoint)
        self.pending: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self.n_pending = 0

    def oldest(self) -> float:
        return min((q[0][0] for q in self.pending.values() if q), default=math.inf)


def fuzz(job_endpoint: str, agent_endpoint: str, n: int, seed: int = 0, *,
         alive: Callable[[], bool] = lambda: True, timeout_s: float = 5.0, window: int = 8,
         conns: int = 3, progress_every: int = 0) -> FuzzStats:
    """Send ``n`` fuzzed messages, half to each socket, and check every one owed an answer got it.

    Parameters
    ----------
    job_endpoint, agent_endpoint : str
        The daemon's sockets.
    n : int
        Messages in all.
    seed : int
        Seeds the :class:`Fuzzer`.
    alive : callable
        Whether the daemon still serves (checked every 256 messages, after a send that
        timed out, and at the end); :meth:`DaemonProc.serving` asks it for its status.
    timeout_s : float
        An answer later than this after its request counts as a hang.
    window : int
        Requests in flight per connection.
    conns : int
        DEALER connections per socket.
    progress_every : int
        Log a line every this many messages (0: never).
    """
    fz = Fuzzer(seed)
    rng = random.Random(seed + 1)
    stats = FuzzStats()
    ctx = zmq.Context()
    eps = {"job": job_endpoint, "agent": agent_endpoint}
    pool = [_Conn(ctx, side, eps[side], k, timeout_s) for side in ("job", "agent") for k in range(conns)]
    poller = zmq.Poller()
    for c in pool:
        poller.register(c.sock, zmq.POLLIN)
    by_sock = {c.sock: c for c in pool}
    t0 = time.monotonic()

    def receive(wait_ms: int) -> None:
        for s, _ in poller.poll(wait_ms):
            c = by_sock[s]
            while True:
                try:
                    data = s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if c.side == "agent" and not is_reply(data):
                    stats.pushes += 1  # a schedule: left unacked (the daemon re-sends it)
                    continue
                try:
                    rep = decode_reply(data)
                except Exception:  # noqa: BLE001 - counted, the run goes on
                    stats.bad_replies += 1
                    continue
                if rep.ok:
                    stats.codes["ok"] += 1
                else:
                    stats.codes[rep.code] += 1
                    if rep.code not in ERROR_CODES:
                        stats.bad_replies += 1
                q = c.pending.get(rep.id)
                if not q:
                    stats.unexpected += 1
                    continue
                _, case = q.popleft()
                c.n_pending -= 1
                stats.replies += 1
                if not rep.ok and rep.code == protocol.ErrorCode.INTERNAL and len(stats.internal) < 50:
                    stats.internal.append((case.label, case.frames, rep.message))

    def expire(now: float) -> None:
        for c in pool:
            if c.n_pending and now - c.oldest() > timeout_s:
                for q in c.pending.values():
                    while q and now - q[0][0] > timeout_s:
                        _, case = q.popleft()
                        c.n_pending -= 1
                        stats.hangs += 1
                        if len(stats.hung) < 10:
                            stats.hung.append((case.label, case.frames))

    try:
        for i in range(n):
            side = "job" if i % 2 == 0 else "agent"
            case = fz.case(side)
            stats.labels[case.label] += 1
            choices = [c for c in pool if c.side == side]
            c = rng.choice(choices)
            while c.n_pending >= window:
                receive(50)
                expire(time.monotonic())
            try:
                c.sock.send_multipart(case.frames)
            except zmq.Again:
                stats.send_timeouts += 1
                if not alive():
                    stats.crashes += 1
                    break
                continue
            stats.sent += 1
            if case.expect_reply:
                c.pending[case.expect_id].append((time.monotonic(), case))
                c.n_pending += 1
            if i % 64 == 0:
                receive(0)
                expire(time.monotonic())
            if i % 256 == 0 and not alive():
                stats.crashes += 1
                break
            if progress_every and i and i % progress_every == 0:
                log(f"fuzz: {i}/{n} sent, {stats.replies} answered, {stats.hangs} hangs, "
                    f"{len(stats.internal)} internal")
        end = time.monotonic() + timeout_s + 1.0
        while any(c.n_pending for c in pool) and time.monotonic() < end:
            receive(50)
        expire(math.inf)  # whatever is still owed now is a hang
        if not stats.crashes and not alive():
            stats.crashes += 1
    finally:
        for c in pool:
            c.sock.close(0)
        ctx.term()
    stats.elapsed_s = time.monotonic() - t0
    return stats


ZMTP_GREETING = (b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00")
                 + b"\x00" + b"\x00" * 31)  # ZMTP 3.0, NULL mechanism, as client (64 bytes)


def _zmtp_frame(body: bytes, flags: int = 0) -> bytes:
    if len(body) < 256:
        return bytes((flags, len(body))) + body
    return bytes((flags | 0x02,)) + len(body).to_bytes(8, "big") + body


def _zmtp_ready(socket_type: bytes = b"DEALER") -> bytes:
    body = b"\x05READY" + b"\x0bSocket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    return _zmtp_frame(body, 0x04)


def torn_connections(endpoint: str, n: int, seed: int = 0, *, stop: threading.Event | None = None) -> int:
    """Open ``n`` real ZMTP connections that each send a request and reset at once.

    Each speaks the NULL-mechanism handshake a DEALER would, then sends a whole
    ``status`` request, a request cut off inside its frame, or a few requests,
    and closes with a TCP reset (``SO_LINGER`` 0): the daemon reads messages
    whose connection is already gone. Returns the connections made.
    """
    rng = random.Random(seed)
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    made = 0
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        req = protocol.encode_request(MsgType.STATUS, {}, FIRST_ID + 10_000_000 + i)
        kind = rng.randrange(3)
        if kind == 0:
            payload = _zmtp_frame(req)
        elif kind == 1:
            whole = _zmtp_frame(req + bytes(300))
            payload = whole[:rng.randrange(2, len(whole))]  # inside the frame
        else:
            payload = b"".join(_zmtp_frame(req) for _ in range(rng.randrange(2, 20)))
        try:
            with socket.create_connection((host, int(port)), timeout=1.0) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.sendall(ZMTP_GREETING + _zmtp_ready() + payload)
                if rng.random() < 0.5:
                    with contextlib.suppress(OSError):
                        s.recv(64)  # sometimes after the daemon's greeting, sometimes before
                made += 1
        except OSError:
            continue
    return made


def raw_tcp_garbage(endpoint: str, n: int, seed: int = 0) -> None:
    """Open ``n`` plain TCP connections to a ZeroMQ endpoint and write junk (no ZMTP greeting)."""
    rng = random.Random(seed)
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    for _ in range(n):
        with contextlib.suppress(OSError), socket.create_connection((host, int(port)), timeout=1.0) as s:
            greeting = b"\xff" + b"\x00" * 8 + b"\x7f\x03"  # a ZMTP 3 signature, then nonsense
            s.sendall(rng.choice((b"", greeting)) + bytes(rng.randrange(256) for _ in range(rng.randrange(200))))


# ---------------------------------------------------------------------- a daemon process


def free_ports(k: int) -> list[int]:
    """``k`` distinct TCP ports free on loopback right now (kept across restarts of the daemon).

    They are drawn below the kernel's ephemeral range (``ip_local_port_range``): a port the
    kernel picked for ``bind(0)`` could be handed to the next outgoing connection or
    ZeroMQ ``tcp://...:*`` bind of a concurrent process before the caller binds it.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    low = max(low, 2048)
    first = max(1024, low - 20000)
    rng = random.SystemRandom()
    picked: list[int] = []
    for _ in range(1000 * k):
        if len(picked) == k:
            return picked
        port = rng.randrange(first, low)
        if port in picked:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        picked.append(port)
    if len(picked) == k:
        return picked
    raise RuntimeError(f"no {k} free loopback ports in {first}..{low - 1}")


def daemon_supports_journal() -> bool:
    """Whether ``jitsched daemon`` takes ``--journal`` (the restart journal)."""
    out = subprocess.run([sys.executable, "-m", "jitsched", "daemon", "--help"], capture_output=True,
                         text=True, timeout=60)
    return "--journal" in out.stdout


def rss_bytes(pid: int) -> int:
    """Resident set size of process ``pid`` (0 if gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def fd_count(pid: int) -> int:
    """Open file descriptors of process ``pid`` (0 if gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class DaemonProc:
    """``jitsched daemon`` as a child process (its own session) on fixed loopback ports.

    Parameters
    ----------
    workdir : Path
        Holds the TOML file, the log and the journal, if any.
    journal : bool
        Pass ``--journal`` (only if the daemon supports it).
    daemon_options : dict
        ``[daemon]`` settings besides the endpoints.
    limits : dict
        ``[limits]`` settings.
    hosts : tuple of str
        The cluster's hosts (1 Gbit/s each way).
    """

    def __init__(self, workdir: Path, *, journal: bool = False, daemon_options: dict | None = None,
                 ports: list[int] | None = None, limits: dict | None = None,
                 hosts: tuple[str, ...] = HOSTS) -> None:
        self.workdir = Path(workdir)
        self.ports = ports or free_ports(2)
        self.job_endpoint = f"tcp://127.0.0.1:{self.ports[0]}"
        self.agent_endpoint = f"tcp://127.0.0.1:{self.ports[1]}"
        self.journal = self.workdir / "journal" if journal else None
        self.proc: subprocess.Popen | None = None
        self.incarnations = 0
        opts = {"heartbeat_s": 0.2, "heartbeat_timeout_s": 1.0, "resend_s": 0.2} | dict(daemon_options or {})
        lines = []
        for h in hosts:
            lines += ["[[hosts]]", f'name = "{h}"', "egress_bps = 1e9", "ingress_bps = 1e9", ""]
        lines += ["[daemon]", f'job_endpoint = "{self.job_endpoint}"', f'agent_endpoint = "{self.agent_endpoint}"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in opts.items()]
        if limits:
            lines += ["", "[limits]"] + [f"{k} = {json.dumps(v)}" for k, v in limits.items()]
        self.config = self.workdir / "daemon.toml"
        self.config.write_text("\n".join(lines) + "\n")
        self.log_path = self.workdir / "daemon.log"

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def start(self, timeout_s: float = 60.0) -> DaemonProc:
        """Start (again, on the same ports) and return once a status request is answered."""
        cmd = [sys.executable, "-m", "jitsched", "daemon", "--config", str(self.config), "--quiet"]
        if self.journal is not None:
            cmd += ["--journal", str(self.journal)]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=logf, stderr=logf, start_new_session=True)
        self.incarnations += 1
        if not self.wait_ready(timeout_s):
            raise RuntimeError(f"daemon did not answer within {timeout_s} s (log {self.log_path})")
        return self

    def wait_ready(self, timeout_s: float) -> bool:
        """Poll ``status`` until the daemon answers; False if it died or timed out."""
        from jitsched.client import Client

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if not self.alive():
                return False
            with Client(self.job_endpoint, timeout_s=0.5) as c:
                try:
                    c.status()
                    return True
                except (TimeoutError, zmq.ZMQError):
                    continue
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def serving(self, timeout_s: float = 5.0) -> bool:
        """Alive and answering ``status`` within ``timeout_s``: a live pid whose loop is
        wedged or gone is not serving."""
        from jitsched.client import Client

        if not self.alive():
            return False
        with Client(self.job_endpoint, timeout_s=timeout_s) as c:
            try:
                c.status()
                return True
            except (TimeoutError, zmq.ZMQError):
                return False

    def kill(self) -> None:
        """kill -9 the daemon and its planner child (the whole session)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; idempotent."""
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:  # a planner child may outlive a crashed daemon
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def run_fuzz(n: int, seed: int, workdir: Path) -> dict:
    """Fuzz a fresh daemon process with ``n`` messages while other connections are torn
    down mid-message on both sockets; counts, RSS and descriptors before and after."""
    from jitsched.client import Client

    d = DaemonProc(workdir)
    try:
        d.start()
        rss0, fds0 = rss_bytes(d.pid), fd_count(d.pid)
        log(f"fuzz: daemon pid {d.pid} up, rss {rss0 / 2**20:.1f} MiB; {n} messages, seed {seed}")
        raw_tcp_garbage(d.job_endpoint, 20, seed)
        raw_tcp_garbage(d.agent_endpoint, 20, seed + 1)
        stop = threading.Event()
        torn = collections.Counter()

        def tear(endpoint: str, k0: int) -> None:
            k = k0
            while not stop.is_set():
                torn[endpoint] += torn_connections(endpoint, 10, seed * 100_000 + k, stop=stop)
                k += 2
                stop.wait(0.02)

        tearers = [threading.Thread(target=tear, args=(ep, i), daemon=True)
                   for i, ep in enumerate((d.job_endpoint, d.agent_endpoint))]
        for th in tearers:
            th.start()
        try:
            st = fuzz(d.job_endpoint, d.agent_endpoint, n, seed, alive=d.serving, progress_every=10_000)
        finally:
            stop.set()
            for th in tearers:
                th.join(10.0)
        if st.crashes and d.alive():
            st.wedged = 1  # the pid lives on and nothing answers: what a supervisor cannot see
        post_ok = d.serving(10.0)
        loop: dict = {}
        if post_ok:
            with Client(d.job_endpoint, timeout_s=5.0) as c:
                loop = c.status().get("loop", {})
        rss1, fds1 = rss_bytes(d.pid), fd_count(d.pid)
        log(f"fuzz: seed {seed}: {st.summary()}, torn connections {sum(torn.values())}, "
            f"daemon loop_errors {loop.get('loop_errors')}, srcfd_unreadable {loop.get('srcfd_unreadable')}")
        for label, frames, msg in st.internal[:5]:
            log(f"fuzz: internal error on {label}: {msg[:200]} frames={[f[:120].hex() for f in frames]}")
        for label, frames in st.hung[:5]:
            log(f"fuzz: hang on {label}: frames={[f[:120].hex() for f in frames]}")
        if st.crashes or not post_ok:
            log(f"fuzz: daemon log tail:\n{d.log_tail()}")
        return {"seed": seed, "fuzz_messages": st.sent, "crashes": st.crashes, "hangs": st.hangs,
                "wedged": st.wedged, "send_timeouts": st.send_timeouts,
                "torn_connections": sum(torn.values()), "loop_errors": loop.get("loop_errors"),
                "srcfd_unreadable": loop.get("srcfd_unreadable"),
                "fuzz_internal_errors": len(st.internal), "fuzz_unexpected_replies": st.unexpected,
                "fuzz_bad_replies": st.bad_replies, "fuzz_answers_after": post_ok,
                "fuzz_rss_before": rss0, "fuzz_rss_after": rss1, "fuzz_fds_before": fds0,
                "fuzz_fds_after": fds1, "fuzz_s": round(st.elapsed_s, 2)}
    finally:
        d.stop()


def run_fuzz_seeds(n: int, seeds: list[int], workdir: Path) -> dict:
    """:func:`run_fuzz` once per seed, each on a fresh daemon; totals and every seed's figures."""
    runs = []
    for s in seeds:
        (workdir / f"seed{s}").mkdir(parents=True, exist_ok=True)
        runs.append(run_fuzz(n, s, workdir / f"seed{s}"))
    total = {k: sum(r[k] for r in runs) for k in ("fuzz_messages", "crashes", "hangs", "wedged",
                                                    "torn_connections", "fuzz_internal_errors",
                                                    "fuzz_bad_replies")}
    return total | {"fuzz_seeds": seeds, "fuzz_answers_after": all(r["fuzz_answers_after"] for r in runs),
                    "fuzz_runs": runs}


# ---------------------------------------------------------------------- kill -9 cycles and soak


class _Workload:
    """Runner threads, each running small jobs back to back through :class:`JobRunner`.

    A job counts as completed when its runner finished it without error (every
    report answered, ``job_finished`` acked); anything else is lost: refused
    or unanswered submissions included.
    """

    def __init__(self, endpoint: str, agents: dict, threads: int, seed: int) -> None:
        from jitsched.client.transfer import TransferSink

        self.endpoint = endpoint
        self.agents = agents
        self.sinks = {h: TransferSink() for h in HOSTS}
        self.seed = seed
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.submitted = self.completed = 0
        self.errors: collections.Counter = collections.Counter()
        self.samples: dict[str, str] = {}  # the first whole error of each kind
        self.threads = [threading.Thread(target=self._loop, args=(k,), name=f"faults-runner-{k}", daemon=True)
                        for k in range(threads)]

    def start(self) -> _Workload:
        for t in self.threads:
            t.start()
        return self

    def _loop(self, k: int) -> None:
        from jitsched.client.runner import JobRunner

        rng = random.Random(self.seed * 1000 + k)
        n = 0
        while not self.stop.is_set():
            ps, worker = rng.sample(HOSTS, 2)
            job = layer_chain_job(f"w{k}-{n}", ps, worker, layers=VGG16_LAYERS[:3])
            n += 1
            with self.lock:
                self.submitted += 1
            runner = JobRunner(job, self.endpoint, {h: s.address for h, s in self.sinks.items()},
                               agents={h: a.local_name for h, a in self.agents.items()})
            try:
                res = runner.run(timeout_s=60.0)
                err = res.error
            except Exception as exc:  # noqa: BLE001 - a lost job, counted
                err = f"{type(exc).__name__}: {exc}"
            with self.lock:
                if err:
                    # the exception's type and, for a refusal, its code ("RemoteError: unavailable")
                    kind = ":".join(err.split(":")[:2]) if not err.startswith("report") else err[:60]
                    self.errors[kind] += 1
                    self.samples.setdefault(kind, err[:300])
                else:
                    self.completed += 1
            self.stop.wait(0.05)

    def log_errors(self, what: str) -> None:
        """Log the lost jobs counted by their first error, and the first whole error of each kind."""
        log(f"{what}: lost jobs by first error: {dict(self.errors.most_common(6))}")
        for kind, text in self.samples.items():
            log(f"{what}: first {kind}: {text}")

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(90)
        for s in self.sinks.values():
            with contextlib.suppress(Exception):
                s.close()


def _agents(endpoint: str, tag: str) -> dict:
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions

    return {h: Agent(h, endpoint, AgentOptions(backend="record"),
                     local_namespace=f"{tag}{os.getpid()}").start()
            for h in HOSTS}


class _StaleWatch:
    """How long agents held (and enforced) a schedule from a daemon already killed.

    Agents' schedule bodies carry the daemon's ``incarnation``; a body whose
    incarnation was killed at ``t`` is stale from ``t`` until the agent holds
    no schedule or another daemon's. None when bodies carry no incarnation.
    """

    def __init__(self, agents: dict) -> None:
        self.agents = agents
        self.killed: dict[int, float] = {}  # incarnation -> monotonic kill time
        self.since: dict[str, float] = {}
        self.intervals: list[float] = []
        self.supported = True

    def poll(self) -> None:
        now = time.monotonic()
        for h, a in self.agents.items():
            s = a.schedule
            inc = s.get("incarnation") if isinstance(s, dict) else None
            if s is not None and inc is None:
                self.supported = False
            if inc is not None and inc in self.killed:
                self.since.setdefault(h, self.killed[inc])
            elif h in self.since:
                self.intervals.append(now - self.since.pop(h))

    def close(self) -> None:
        now = time.monotonic()
        self.intervals += [now - t for t in self.since.values()]
        self.since.clear()


def _status(endpoint: str, timeout_s: float = 1.0) -> dict | None:
    from jitsched.client import Client

    with Client(endpoint, timeout_s=timeout_s) as c:
        try:
            return c.status()
        except (TimeoutError, zmq.ZMQError):
            return None


def kill_cycles(n_cycles: int, seed: int, workdir: Path, *, runners: int = 3,
                gap_s: tuple[float, float] = (0.2, 5.0)) -> dict:
    """kill -9 the daemon ``n_cycles`` times under a job workload and restart it on the same ports.

    Uptime before each kill is drawn from ``gap_s`` (seeded). Resume is the time
    from spawning the new daemon until its status shows an agent that acked one
    of its schedules (censored if the next kill comes first: not counted).
    """
    journal = daemon_supports_journal()
    d = DaemonProc(workdir, journal=journal)
    rng = random.Random(seed)
    agents: dict = {}
    work = None
    watch = None
    resumes: list[float] = []
    censored = 0
    try:
        d.start()
        agents = _agents(d.agent_endpoint, "kc")
        watch = _StaleWatch(agents)
        work = _Workload(d.job_endpoint, agents, runners, seed).start()
        log(f"kill cycles: {n_cycles}, journal {'on' if journal else 'unsupported'}, {runners} runner threads")
        spawn = None
        for cycle in range(n_cycles + 1):
            gap = rng.uniform(*gap_s) if cycle < n_cycles else 3.0  # a last stretch to resume in
            end = time.monotonic() + gap
            st = None
            while time.monotonic() < end:
                watch.poll()
                if spawn is not None:
                    st = _status(d.job_endpoint, 0.5)
                    if st and any(a.get("acked_seq", 0) >= 1 for a in st.get("agents", {}).values()):
                        resumes.append(time.monotonic() - spawn)
                        spawn = None
                time.sleep(0.02)
            if spawn is not None:
                censored += 1
                spawn = None
            if cycle == n_cycles:
                break
            st = _status(d.job_endpoint, 1.0)
            inc = st.get("incarnation") if st else None
            d.kill()
            if inc is not None:
                watch.killed[inc] = time.monotonic()
            spawn = time.monotonic()
            d.start()
            log(f"kill cycle {cycle + 1}/{n_cycles}: uptime {gap:.2f} s; jobs {work.completed}/{work.submitted} "
                f"completed; resumed {len(resumes)}, censored {censored}")
    finally:
        if work is not None:
            work.close()
        if watch is not None:
            watch.poll()
            watch.close()
        for a in agents.values():
            a.stop()
        d.stop()
    lost = work.submitted - work.completed if work else 0
    if work is not None:
        work.log_errors("kill cycles")
    else:
        log("kill cycles: lost jobs by first error: {}")
    stale = (max(watch.intervals, default=0.0) if watch.supported else None) if watch else None
    return {"kill_cycles": n_cycles, "journal": journal,
            "jobs_submitted": work.submitted if work else 0, "jobs_completed": work.completed if work else 0,
            "jobs_lost": lost,
            "resume_s_p50": statistics.median(resumes) if resumes else None,
            "resume_s_max": max(resumes) if resumes else None, "resume_censored": censored,
            "stale_schedule_s_max": stale}


def soak(seconds: float, seed: int, workdir: Path, rate_per_s: float = 20.0) -> dict:
    """Steady submissions (each job finished at once) while agents are killed and restarted.

    RSS and descriptor count of the daemon are taken at start, after a warm-up
    (a tenth of the run, at least 5 s; growth is counted from here) and at the
    end, and RSS once a minute (``soak_rss_trace``, MiB). Failed submissions
    are counted, as are the ended jobs the daemon pruned.
    """
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.client import Client

    d = DaemonProc(workdir, journal=daemon_supports_journal())
    rng = random.Random(seed)
    agents: dict = {}
    stop = threading.Event()
    sent = [0]
    errors: collections.Counter = collections.Counter()

    def submit() -> None:
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            n = 0
            while not stop.is_set():
                ps, worker = rng.sample(HOSTS, 2)
                jid = f"soak{n}"
                try:
                    c.submit_job(layer_chain_job(jid, ps, worker, layers=VGG16_LAYERS[:3]))
                    c.job_finished(jid, 0.01)
                except Exception as exc:  # noqa: BLE001 - counted, the soak goes on
                    errors[type(exc).__name__] += 1
                n += 1
                sent[0] = n
                stop.wait(1.0 / rate_per_s)

    t = threading.Thread(target=submit, name="faults-soak", daemon=True)
    try:
        d.start()
        agents = _agents(d.agent_endpoint, "sk0")
        rss_start, fds_start = rss_bytes(d.pid), fd_count(d.pid)
        t.start()
        t0 = time.monotonic()
        warm = max(5.0, seconds / 10)
        rss0 = fds0 = None
        churns = 0
        trace: list[float] = []
        next_trace = 0.0
        while time.monotonic() - t0 < seconds:
            if time.monotonic() - t0 >= next_trace:
                trace.append(round(rss_bytes(d.pid) / 2**20, 1))
                next_trace += 60.0
            if rss0 is None and time.monotonic() - t0 >= warm:
                rss0, fds0 = rss_bytes(d.pid), fd_count(d.pid)
                log(f"soak: warm, rss {rss0 / 2**20:.1f} MiB, {fds0} fds, {sent[0]} jobs")
            time.sleep(rng.uniform(0.5, 1.5))
            h = rng.choice(HOSTS)
            old = agents[h]
            old.kill() if rng.random() < 0.5 else old.stop()
            churns += 1
            agents[h] = Agent(h, d.agent_endpoint, AgentOptions(backend="record"),
                              local_namespace=f"sk{churns}-{os.getpid()}").start()
        rss1, fds1 = rss_bytes(d.pid), fd_count(d.pid)
        trace.append(round(rss1 / 2**20, 1))
        if rss0 is None:
            rss0, fds0 = rss1, fds1
        st = _status(d.job_endpoint, 10.0) or {}
        log(f"soak: {seconds} s, {sent[0]} jobs ({dict(errors)} failed), {churns} agent restarts; rss "
            f"{rss_start / 2**20:.1f} (start) {rss0 / 2**20:.1f} (warm) -> {rss1 / 2**20:.1f} MiB, fds "
            f"{fds_start} -> {fds0} -> {fds1}; jobs listed {st.get('jobs_total')}, pruned {st.get('jobs_pruned')}")
        return {"soak_s": seconds, "soak_jobs": sent[0], "soak_agent_restarts": churns,
                "soak_rss_growth": (rss1 - rss0) / rss0 if rss0 else None,
                "soak_rss_before": rss0, "soak_rss_after": rss1, "soak_fds_before": fds0, "soak_fds_after": fds1,
                "soak_rss_start": rss_start, "soak_fds_start": fds_start, "soak_rss_trace": trace,
                "soak_submit_errors": sum(errors.values()), "soak_jobs_total": st.get("jobs_total"),
                "soak_jobs_pruned": st.get("jobs_pruned"), "soak_loop": st.get("loop")}
    finally:
        stop.set()
        if t.is_alive():
            t.join(15)
        for a in agents.values():
            a.stop()
        d.stop()


# ---------------------------------------------------------------------- a responsive loop


def big_job(n_nodes: int = 144_000, job_id: str = "big") -> dict:
    """A chain of ``n_nodes`` nodes (computes and 1 kB transfers alternating over the
    hosts): 144k nodes pack to 7.8 MB, the size of a 7 MB job's probe."""
    k = n_nodes // 2
    hosts = HOSTS
    return {"id": job_id,
            "computes": [{"id": f"c{i}", "host": hosts[i % 4], "duration_s": 0.001} for i in range(k)],
            "transfers": [{"id": f"t{i}", "src": hosts[i % 4], "dst": hosts[(i + 1) % 4], "bytes": 1000.0}
                          for i in range(k)],
            "edges": [[f"t{i}", f"c{i}"] for i in range(k)] + [[f"c{i}", f"t{i + 1}"] for i in range(k - 1)]}


def _percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs))) - 1)]


def big_submit(workdir: Path, n_nodes: int = 144_000, repeats: int = 3, accept: bool = True,
               heartbeat_timeout_s: float = 2.0) -> dict:
    """Status latency while a job of ``n_nodes`` nodes is submitted, and agents marked down.

    A thread asks ``status`` every 10 ms from before the submission until 3 s
    after its reply (the plan of the job runs then); four record agents, each
    a process, heartbeat every ``heartbeat_timeout_s`` / 4 (default 2 s: the
    daemon's defaults, 0.5 s and 2 s). ``accept``: the daemon's max_job_nodes
    admits the job (else it is refused after parsing, as by default). The
    submission is repeated ``repeats`` times (new job ids), each on a fresh
    daemon; latencies are pooled.
    """
    from jitsched.client import Client
    from jitsched.protocol import encode_request

    lat: list[float] = []
    submit_s: list[float] = []
    downs = 0
    outcome = ""
    size = 0
    for r in range(repeats):
        (workdir / f"big{r}").mkdir()
        limits = {"max_job_nodes": max(n_nodes + 1, 50_000)} if accept else {}
        d = DaemonProc(workdir / f"big{r}", limits=limits,
                       daemon_options={"heartbeat_s": heartbeat_timeout_s / 4,
                                       "heartbeat_timeout_s": heartbeat_timeout_s})
        agents: dict = {}
        stop = threading.Event()
        during: list[float] = []

        def poll(d=d, stop=stop, during=during) -> None:
            with Client(d.job_endpoint, timeout_s=30.0) as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    c.status(limit=10)
                    during.append(time.perf_counter() - t0)
                    stop.wait(0.01)

        t = threading.Thread(target=poll, name="faults-status", daemon=True)
        try:
            d.start()
            # each agent a process of its own, as on hosts: an agent decoding its share of
            # the big job's schedule holds its own interpreter, not this one's poller
            agents = {h: subprocess.Popen(
                [sys.executable, "-m", "jitsched", "agent", "--host", h, "--daemon", d.agent_endpoint,
                 "--backend", "record", "--local-dir", str(workdir / f"big{r}" / f"a-{h}"), "--quiet"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                for h in HOSTS}
            end = time.monotonic() + 60
            while time.monotonic() < end:
                st = _status(d.job_endpoint)
                if st and sum(a["up"] for a in st["agents"].values()) == len(HOSTS):
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            data = encode_request(MsgType.SUBMIT_JOB, {"job": big_job(n_nodes, f"big{r}")})
            size = len(data)
            t.start()
            time.sleep(0.3)
            with Client(d.job_endpoint, timeout_s=60.0) as c:
                t0 = time.perf_counter()
                try:
                    c.request_raw(data, protocol.decode_request(data, max_bytes=len(data)).id)
                    outcome = "accepted"
                except protocol.RemoteError as exc:
                    outcome = exc.code
                submit_s.append(time.perf_counter() - t0)
            time.sleep(3.0)
            stop.set()
            t.join(30)
            lat += during
            downs += d.log_tail(10**6).count("event=agent_down")
            log(f"big submit {r + 1}/{repeats}: {size / 1e6:.1f} MB, {outcome} in {submit_s[-1]:.2f} s; "
                f"status p50 {_percentile(during, 0.5) * 1e3:.1f} ms, p99 {_percentile(during, 0.99) * 1e3:.1f} "
                f"ms, max {max(during) * 1e3:.1f} ms over {len(during)}; agent_down lines so far {downs}")
        finally:
            stop.set()
            for a in agents.values():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(a.pid, signal.SIGTERM)
            for a in agents.values():
                try:
                    a.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(a.pid, signal.SIGKILL)
                    a.wait(10)
            d.stop()
    return {"big_submit_bytes": size, "big_heartbeat_timeout_s": heartbeat_timeout_s, "big_submit_nodes": n_nodes, "big_submit_outcome": outcome,
            "big_submit_s_p50": statistics.median(submit_s) if submit_s else None,
            "big_status_s_p50": _percentile(lat, 0.5), "big_status_s_p99": _percentile(lat, 0.99),
            "big_status_s_max": max(lat) if lat else None, "big_status_n": len(lat),
            "big_agent_down": downs}


def status_after_churn(workdir: Path, n: int = 50_000) -> dict:
    """Submit and cancel ``n`` small jobs, then the size of one status reply (bytes) and of
    all its pages, and the daemon's RSS and descriptors."""
    from jitsched.client import Client
    from jitsched.protocol import encode_request

    d = DaemonProc(workdir)
    try:
        d.start()
        job = layer_chain_job("x", "h0", "h1", layers=VGG16_LAYERS[:3]).to_dict()
        t0 = time.monotonic()
        with Client(d.job_endpoint, timeout_s=30.0) as c:
            for k in range(n):
                jid = f"churn{k}"
                c.submit_job(job | {"id": jid})
                c.cancel_job(jid)
                if k and k % 10_000 == 0:
                    log(f"churn: {k}/{n} submitted and cancelled, rss {rss_bytes(d.pid) / 2**20:.1f} MiB")
            churn_s = time.monotonic() - t0
            s = c.sock
            rid = protocol.next_id()
            s.send(encode_request(MsgType.STATUS, {}, rid))
            assert s.poll(30_000)
            raw = s.recv()
            first = decode_reply(raw).body
            full = c.status()
        unread = unread_replies(d, 300)
        log(f"churn: {n} submit+cancel in {churn_s:.1f} s; status reply {len(raw)} bytes, "
            f"{len(first['jobs'])} jobs; all pages: {full['pages']} pages, {len(full['jobs'])} jobs, "
            f"pruned {full.get('jobs_pruned')}; rss {rss_bytes(d.pid) / 2**20:.1f} MiB")
        return {"churn_jobs": n, "churn_s": round(churn_s, 1), "churn_status_bytes": len(raw),
                "churn_status_jobs": len(first["jobs"]), "churn_status_pages": full["pages"],
                "churn_jobs_listed": len(full["jobs"]), "churn_jobs_pruned": full.get("jobs_pruned"),
                "churn_rss": rss_bytes(d.pid), "churn_fds": fd_count(d.pid)} | unread
    finally:
        d.stop()


def unread_replies(d: DaemonProc, n: int = 300) -> dict:
    """A peer asks ``status`` ``n`` times and reads nothing for 5 s: the daemon's RSS before,
    then, and after the peer left; how many replies came back ``overloaded``."""
    from jitsched.protocol import encode_request

    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.setsockopt(zmq.RCVHWM, 1)
    s.setsockopt(zmq.RCVBUF, 4096)
    s.connect(d.job_endpoint)
    try:
        rss0 = rss_bytes(d.pid)
        for i in range(n):
            s.send(encode_request(MsgType.STATUS, {}, 10_000 + i))
        time.sleep(5.0)
        rss1 = rss_bytes(d.pid)
        codes: collections.Counter = collections.Counter()
        end = time.monotonic() + 60
        while sum(codes.values()) < n and time.monotonic() < end:
            if s.poll(1000):
                r = decode_reply(s.recv())
                codes["ok" if r.ok else r.code] += 1
    finally:
        s.close(0)
        ctx.term()
    time.sleep(1.0)
    rss2 = rss_bytes(d.pid)
    log(f"unread: {n} status requests unread for 5 s: daemon rss {rss0 / 2**20:.1f} -> {rss1 / 2**20:.1f} MiB "
        f"(after {rss2 / 2**20:.1f}); replies {dict(codes)}")
    return {"unread_requests": n, "unread_rss_before": rss0, "unread_rss_during": rss1, "unread_rss_after": rss2,
            "unread_ok": codes["ok"], "unread_overloaded": codes["overloaded"]}


KEYS = ("fuzz_messages", "fuzz_seeds", "crashes", "hangs", "wedged", "kill_cycles", "jobs_submitted", "jobs_completed", "jobs_lost",
        "resume_s_p50", "resume_s_max", "stale_schedule_s_max", "flood_agents_down", "flood_status_p99_s",
        "leader_kills", "failover_s_p50", "failover_s_max", "fenced_schedules_installed")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    ap.add_argument("--fuzz", type=int, default=100_000,
                    help="fuzzed messages per seed, half per socket (default 100000)")
    ap.add_argument("--fuzz-seeds", type=int, default=3, metavar="K",
                    help="fuzz K seeds (--seed, --seed+1, ...), each on a fresh daemon (default 3)")
    ap.add_argument("--kill-cycles", type=int, default=20, help="kill -9 / restart cycles (default 20)")
    ap.add_argument("--runners", type=int, default=3, help="job runner threads during kill cycles (default 3)")
    ap.add_argument("--ha", action="store_true",
                    help="also run daemon replicas on an etcd of their own (Debian's etcd) and kill -9 the "
                         "leader under a workload: failover and fencing (bench/faults_ha.py)")
    ap.add_argument("--leader-kills", type=int, default=None, metavar="N",
                    help="leader kill -9 cycles with --ha (default 20)")
    ap.add_argument("--lease-ttl-s", type=float, default=2.0, help="the replicas' [ha] lease_ttl_s (default 2)")
    ap.add_argument("--soak-s", type=float, default=0.0, help="soak for this many seconds (default 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="seeds the fuzzer, the gaps and the workload")
    ap.add_argument("--big-submit", type=int, default=0, metavar="NODES",
                    help="status latency while a job of NODES nodes is submitted (144000: 7.8 MB; "
                         "default 0: none)")
    ap.add_argument("--big-repeats", type=int, default=3, help="big submissions, each on a new daemon")
    ap.add_argument("--big-heartbeat-timeout-s", type=float, default=2.0,
                    help="agents' heartbeat timeout during the big submissions (default 2, the daemon's)")
    ap.add_argument("--big-refused", action="store_true",
                    help="leave max_job_nodes at its default (the big job is refused after parsing)")
    ap.add_argument("--churn", type=int, default=0, metavar="N",
                    help="submit and cancel N jobs, then measure the status reply (default 0: none)")
    ap.add_argument("--ended-memory", type=int, default=0, metavar="LOOPS",
                    help="submit and cancel a big job LOOPS times: ended_job_memory_growth_mb (default 0: none)")
    ap.add_argument("--ended-memory-nodes", type=int, default=49_800,
                    help="nodes of that job (default 49800)")
    ap.add_argument("--ended-memory-budget", type=int, default=None, metavar="BYTES",
                    help="[limits] max_ended_bytes for it (default: the daemon's)")
    ap.add_argument("--conn-churn-s", type=float, default=0.0, metavar="SECONDS",
                    help="keyed status while raw TCP connects arrive for SECONDS: churn_status_p99_s "
                         "(default 0: none)")
    ap.add_argument("--conn-churn-rate", type=float, default=400.0, help="raw connects a second (default 400)")
    ap.add_argument("--conn-churn-max-connections", type=int, default=50,
                    help="[limits] max_connections during it (default 50)")
    ap.add_argument("--flood-s", type=float, default=10.0, metavar="SECONDS",
                    help="a client pipelines 4,096-event reports for SECONDS while --flood-agents agents "
                         "heartbeat: agents marked down, status p99 (bench_flood.py; default 10, 0: none)")
    ap.add_argument("--flood-agents", type=int, default=100, help="agents during the flood (default 100)")
    args = ap.parse_args(argv)
    out: dict = dict.fromkeys(KEYS)
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        tmp = Path(tmp)
        if args.fuzz:
            (tmp / "fuzz").mkdir()
            out |= run_fuzz_seeds(args.fuzz, [args.seed + k for k in range(args.fuzz_seeds)], tmp / "fuzz")
        if args.kill_cycles:
            (tmp / "kill").mkdir()
            out |= kill_cycles(args.kill_cycles, args.seed, tmp / "kill", runners=args.runners)
        if args.ha and (args.leader_kills is None or args.leader_kills > 0):
            from jitsched.bench.faults_ha import leader_kills

            (tmp / "ha").mkdir()
            out |= leader_kills(20 if args.leader_kills is None else args.leader_kills, args.seed, tmp / "ha",
                                runners=args.runners, ttl_s=args.lease_ttl_s)
        if args.big_submit:
            out |= big_submit(tmp, args.big_submit, args.big_repeats, accept=not args.big_refused,
                              heartbeat_timeout_s=args.big_heartbeat_timeout_s)
        if args.churn:
            (tmp / "churn").mkdir()
            out |= status_after_churn(tmp / "churn", args.churn)
        if args.soak_s:
            (tmp / "soak").mkdir()
            out |= soak(args.soak_s, args.seed, tmp / "soak")
        if args.ended_memory or args.conn_churn_s:
            from jitsched.bench.faults_limits import churn_status, ended_job_memory
        if args.ended_memory:
            (tmp / "ended").mkdir()
            out |= ended_job_memory(tmp / "ended", args.ended_memory_nodes, args.ended_memory,
                                    args.ended_memory_budget)
        if args.conn_churn_s:
            (tmp / "conn-churn").mkdir()
            out |= churn_status(tmp / "conn-churn", args.conn_churn_rate, args.conn_churn_s,
                                args.conn_churn_max_connections)
        if args.flood_s:
            from jitsched.bench.bench_flood import flood  # imports this module's harness

            (tmp / "flood").mkdir()
            out |= flood(tmp / "flood", args.flood_s, args.flood_agents)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            if k != "fuzz_runs":
                print(f"{k:<28} {v}")
    failed = {k: out[k] for k in ("crashes", "hangs", "wedged", "jobs_lost", "flood_agents_down", "ha_jobs_lost",
                                  "fenced_schedules_installed", "failover_censored") if out.get(k)}
    if out.get("fuzz_answers_after") is False:
        failed["fuzz_answers_after"] = False
    if failed:
        log(f"FAILED: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
