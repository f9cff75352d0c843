"""The daemon's agent table: registered host agents, their liveness and schedule delivery."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from jitsched.config import DaemonConfig
from jitsched.daemon.bodies import IdleFrame, host_bodies
from jitsched.daemon.capacity import LiveCapacity, check_sample
from jitsched.daemon.logs import kv
from jitsched.daemon.reject import Reject
from jitsched.protocol import AGENT_COUNTS, HEARTBEAT_TAKES, ErrorCode, unpack_body

log = logging.getLogger("jitsched.daemon")

# Re-sends of a schedule body its agent does not ack: the first resend_s after the send,
# each next one twice as late, at most RESEND_BACKOFF_MAX x resend_s apart, and after
# RESEND_TRIES of them none (counted, and the agent's resends_stopped in status) until
# the host's body changes or the agent comes back or registers again. An agent that
# missed its body sees the seq it lacks in its heartbeat replies and asks for it.
RESEND_TRIES = 8
RESEND_BACKOFF_MAX = 16
AGENT_ID_CHARS = 64  # of an agent's id kept (agents send 32 hex digits)


def check_counts(counts: dict) -> str | None:
    """What is wrong with a heartbeat's ``counts``, or None: each an
    :data:`~jitsched.protocol.AGENT_COUNTS` name with an int >= 0."""
    for k, v in counts.items():
        if k not in AGENT_COUNTS:
            return f"body.counts: unknown count {k!r} (expected {', '.join(AGENT_COUNTS)})"
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"body.counts.{k}: expected an int >= 0, got {v!r}"
    return None


@dataclass
class AgentState:
    """A registered host agent and the schedule delivery state for it."""

    host: str
    identity: bytes
    backend: str
    last_seen_s: float
    peer: str | None = None  # the host whose key registered it (None: the daemon has no keys)
    agent_id: str = ""  # the registering agent's own (random) id; "" if it sent none
    source: object = None  # the connection it registered on (AgentTable.source), None: unknown
    up: bool = True
    acked_seq: int = 0
    acked_at_s: float = -math.inf  # when acked_seq last advanced (daemon clock)
    sent_seq: int = 0
    sent_at_s: float = -math.inf
    applied_seq: int = 0
    resends: int = 0  # re-sends of the body of sent_seq
    resends_stopped: bool = False  # ... given up: the agent never acked it
    flow_rates_Bps: dict = field(default_factory=dict)
    total_Bps: float = 0.0
    attached: dict = field(default_factory=dict)  # per attached job: its bytes and rank (the agent's heartbeat)
    unscheduled_Bps: dict = field(default_factory=dict)  # the port's unscheduled traffic as last measured
    clock_offset_s: float | None = None  # the agent's clock minus the daemon's, as it measured
    clock_rtt_s: float | None = None  # the heartbeat round trip of that measurement
    clock_off: bool = False  # the offset is over a slot
    caps_held: int = 0  # destinations whose unranked traffic the agent holds (its heartbeat)
    caps_unenforced: bool = False  # caps came that its backend cannot hold
    floor_held: float | None = None  # the floor it keeps for a critical job now (its heartbeat)
    counts: dict = field(default_factory=dict)  # what it refused or dropped since it started (its heartbeat)
    background_floor: float = 0.0  # the share of each port it keeps for unranked traffic (its registration)
    payload_share: float = 1.0  # the share of the line a flow's payload takes (its registration)
    holds_floor: bool = False  # it keeps [daemon] critical_floor on a critical job's ports (its registration)

    @property
    def reservable(self) -> float:
        """The share of each port's line rate it can give reserved flows' payload while
        unranked traffic is backlogged: its payload share of what its floor leaves."""
        return self.payload_share * (1.0 - self.background_floor)

    def reservable_with(self, held_floor: float | None) -> float:
        """:attr:`reservable` while it keeps ``held_floor`` for unranked traffic where that
        is below its own floor and it :attr:`holds_floor` ([daemon] critical_floor; None:
        its own floor)."""
        return self.payload_share * (1.0 - self.kept_with(held_floor))

    def kept_with(self, held_floor: float | None) -> float:
        """The share of each port it keeps for unranked traffic while a critical job holds
        it: ``held_floor`` where that is below its own floor and it :attr:`holds_floor`,
        else its own floor."""
        if held_floor is None or not self.holds_floor:
            return self.background_floor
        return min(self.background_floor, held_floor)


class AgentTable:
    """Agents by host, each host's current packed schedule body, and what is still unacked.

    Parameters
    ----------
    config : DaemonConfig
    t0_wall_s : float
        The daemon clock's wall-clock origin (for the empty body's epoch).
    on_change : callable
        ``on_change(reason, now)`` when an agent comes back (``agent_up``) or
        goes silent (``agent_down``): a re-solve trigger.
    """

    def __init__(self, config: DaemonConfig, t0_wall_s: float,
                 on_change: Callable[[str, float], None]) -> None:
        self.config = config
        self.cluster = config.cluster
        self.t0_wall_s = t0_wall_s
        self._on_change = on_change
        # each port's unscheduled traffic, smoothed: what plans take off the line rate
        self.capacity = LiveCapacity(self.cluster, enabled=config.live_capacity)
        self.agents: dict[str, AgentState] = {}
        self.by_identity: dict[bytes, str] = {}
        self.host_frames: dict[str, bytes] = {}  # packed body per host
        self._bodies: dict[str, dict] = {}  # decoded on demand
        self.host_seq: dict[str, int] = {}
        self.idle: set[str] = set()  # hosts whose current body is idle both ways (an IdleFrame)
        self.kept_idle = 0  # idle bodies not published because the host's body was idle already
        self.content: dict[str, bytes | None] = {}  # a host's current RankFrame content (None: other)
        self.kept_same = 0  # rank-only bodies not published because the host's was the same
        self.queued_last = 0  # hosts the last publish queued bodies for
        self.unacked: set[str] = set()  # hosts whose agent has not acked its current body
        self._outbox_changed = False  # bodies or agents changed since the last outbox scan
        self._next_resend_s = math.inf
        self.incarnation = 0  # the daemon process's (SchedulerState sets it)
        self.epoch = 0  # the leader's among daemon replicas (SchedulerState sets it)
        # The server's view of connections: the one the message being handled came on, and
        # whether one is still open. An agent whose connection closed is gone, whatever
        # its last heartbeat says, and another agent may take its host at once.
        self.source: Callable[[], object] = lambda: None
        self.source_open: Callable[[object], bool] = lambda source: True
        # since start: agents marked down, registrations and acks refused, schedule bodies
        # re-sent and hosts whose re-sends stopped unacked (status' agent_counts)
        self.counts = {"agents_marked_down": 0, "registrations_refused": 0, "acks_refused": 0,
                       "schedule_resends": 0, "schedule_resends_stopped": 0}

    def register(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Register (or re-register) the agent of ``body["host"]``; it gets the current schedule.

        ``peer``: the host whose key sent it (None: the daemon has no keys). A key
        registers its own host only, and a host that is up keeps the key it has.
        While a host's agent is alive (heard within ``heartbeat_timeout_s``)
        another agent is refused (``host_in_use``): the same agent (its
        ``agent_id``, or its connection) may register again.
        """
        got = self._admit(identity, body, now, peer)
        if isinstance(got, Reject):
            self.counts["registrations_refused"] += 1
            return got
        host = body["host"]
        old = self.agents.get(host)
        if old is not None:
            self.by_identity.pop(old.identity, None)
        a = AgentState(host, identity, str(body.get("backend", "")), now, peer,
                       str(body.get("agent_id", ""))[:AGENT_ID_CHARS], self.source(),
                       applied_seq=int(body.get("applied_seq", 0)),
                       background_floor=float(body.get("background_floor", 0.0)),
                       payload_share=float(body.get("payload_share", 1.0)),
                       holds_floor=bool(body.get("holds_floor", False)))
        self.agents[host] = a
        self.by_identity[identity] = host
        if self.host_seq.get(host, 0):
            self.unacked.add(host)
            self._outbox_changed = True
        if old is not None and not old.up:
            self._on_change("agent_up", now)
        idx = self.cluster.index(host)
        h = self.cluster.hosts[idx]
        # the incarnation tells an agent that held another daemon's schedule to count seqs
        # anew; past heartbeat_timeout_s of silence it stops enforcing what it holds
        return {"host": host, "seq": self.host_seq.get(host, 0), "heartbeat_s": self.config.heartbeat_s,
                "heartbeat_timeout_s": self.config.heartbeat_timeout_s,
                "line_Bps": h.egress_Bps, "ingress_Bps": h.ingress_Bps,
                "t0_wall_ns": int(self.t0_wall_s * 1e9), "incarnation": self.incarnation,
                "epoch": self.epoch, "takes": list(HEARTBEAT_TAKES)}

    def admissible(self, identity: bytes, body: dict, now: float, peer: str | None,
                   joining: bool = False) -> None | Reject:
        """Why this registration would be refused, if it would (``joining``: its host is to
        join the cluster first)."""
        return self._admit(identity, body, now, peer, joining)

    def forget(self, host: str) -> None:
        """``host`` left the cluster: its agent is no longer registered (its seqs stay) and
        what it measured of its ports is forgotten."""
        a = self.agents.pop(host, None)
        if a is not None:
            self.by_identity.pop(a.identity, None)
        self.unacked.discard(host)
        if host in self.cluster.names:  # its ports are measured afresh if it comes back
            self.capacity.forget(host)

    def registered(self, identity: bytes, body: dict, peer: str | None) -> AgentState | Reject:
        """The agent registered on ``identity`` for ``body["host"]`` with ``peer``'s key."""
        host = self.by_identity.get(identity)
        a = self.agents.get(host) if host is not None else None
        if a is None or a.host != body["host"]:
            return Reject(ErrorCode.NOT_REGISTERED, f"agent for host {body['host']!r} must register first")
        if a.peer != peer:
            return Reject(ErrorCode.FORBIDDEN, f"host {a.host!r} is registered with another key")
        return a

    def _admit(self, identity: bytes, body: dict, now: float, peer: str | None,
               joining: bool = False) -> None | Reject:
        """Why this registration is refused, if it is."""
        host = body["host"]
        floor, payload = body.get("background_floor", 0.0), body.get("payload_share", 1.0)
        if not 0.0 <= floor < 1.0:
            return Reject(ErrorCode.INVALID_BODY, f"body.background_floor: must be within [0, 1) (a share of "
                                                  f"each port), got {floor!r}")
        if not 0.0 < payload <= 1.0:
            return Reject(ErrorCode.INVALID_BODY, f"body.payload_share: must be within (0, 1] (a share of "
                                                  f"the line), got {payload!r}")
        if peer is not None and peer != host:
            return Reject(ErrorCode.FORBIDDEN, f"the key of host {peer!r} cannot register as host {host!r}")
        if host not in self.cluster and not joining:
            return Reject(ErrorCode.UNKNOWN_HOST, f"host {host!r} is not in the cluster")
        old = self.agents.get(host)
        if old is None or not old.up:
            return None
        if old.peer != peer:
            return Reject(ErrorCode.FORBIDDEN, f"host {host!r} is up, registered with another key")
        age = now - old.last_seen_s
        agent_id = str(body.get("agent_id", ""))[:AGENT_ID_CHARS]
        if identity != old.identity and not (agent_id and agent_id == old.agent_id) \
                and age <= self.config.heartbeat_timeout_s \
                and (old.source is None or self.source_open(old.source)):
            return Reject(ErrorCode.HOST_IN_USE,
                          f"host {host!r} is served by another agent, heard from {max(age, 0.0):.1f} s ago: "
                          f"a second one is refused until the first is silent for heartbeat_timeout_s "
                          f"({self.config.heartbeat_timeout_s:g} s)")
        return None

    def _agent(self, identity: bytes, body: dict, now: float, peer: str | None) -> AgentState | Reject:
        host = self.by_identity.get(identity)
        a = self.agents.get(host) if host is not None else None
        if a is None or a.host != body["host"]:
            return Reject(ErrorCode.NOT_REGISTERED,
                          f"agent for host {body['host']!r} must register first")
        if a.peer != peer:  # another key behind the registered connection's routing id
            return Reject(ErrorCode.FORBIDDEN, f"host {a.host!r} is registered with another key")
        a.last_seen_s = now
        if not a.up:
            a.up = True
            # it missed what was sent while it was down: re-sent at once, backing off anew
            a.sent_at_s, a.resends, a.resends_stopped = -math.inf, 0, False
            self._outbox_changed = True
            self._on_change("agent_up", now)
        return a

    def heartbeat(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Liveness plus measured rates (bytes/s) from an agent."""
        a = self._agent(identity, body, now, peer)
        if isinstance(a, Reject):
            return a
        counts = body.get("counts")
        bad = check_counts(counts) if counts is not None else None
        if bad is not None:  # refused before any of the heartbeat is taken
            return Reject(ErrorCode.INVALID_BODY, bad)
        sample = body.get("unscheduled_Bps")
        if sample is not None:
            bad = check_sample(sample)
            if bad is not None:
                return Reject(ErrorCode.INVALID_BODY, bad)
            a.unscheduled_Bps = {d: float(v) for d, v in sample.items()}
            if self.capacity.observe(a.host, sample, now):
                self._on_change("capacity", now)
        if counts is not None:
            a.counts = {k: int(v) for k, v in counts.items() if v}
        a.applied_seq = int(body.get("applied_seq", a.applied_seq))
        a.flow_rates_Bps = dict(body.get("flow_rates_Bps", {}))
        a.total_Bps = float(body.get("total_Bps", 0.0))
        a.attached = dict(body.get("attached", {}))
        a.caps_held = int(body.get("caps_held", 0))
        a.caps_unenforced = bool(body.get("caps_unenforced", False))
        a.floor_held = float(body["floor_held"]) if "floor_held" in body else None
        offset = body.get("clock_offset_s")
        if offset is not None and math.isfinite(offset):
            self._clock(a, float(offset), float(body.get("clock_rtt_s", 0.0)))
        # the daemon's wall clock beside the agent's send time: one round trip's offset
        reply = {"seq": self.host_seq.get(a.host, 0), "t_ns": int(round((self.t0_wall_s + now) * 1e9))}
        if "sent_ns" in body:
            reply["sent_ns"] = body["sent_ns"]
        return reply

    def _clock(self, a: AgentState, offset_s: float, rtt_s: float) -> None:
        """The agent's measured clock offset; past a slot it is said (once each way)."""
        a.clock_offset_s, a.clock_rtt_s = offset_s, rtt_s
        off = abs(offset_s) > self.config.slot_s
        if off != a.clock_off:
            a.clock_off = off
            if off:
                log.warning(kv("agent_clock_off", host=a.host, offset_s=offset_s, rtt_s=rtt_s,
                               slot_s=float(self.config.slot_s), corrected="by the agent"))
            else:
                log.info(kv("agent_clock_ok", host=a.host, offset_s=offset_s))

    def ack(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """An agent confirms it holds schedule ``seq`` (of this daemon's incarnation, if it says)."""
        a = self._agent(identity, body, now, peer)
        if isinstance(a, Reject):
            return a
        if body.get("incarnation", self.incarnation) != self.incarnation:
            return {"stale": True}  # a previous daemon's seq: says nothing of this one's
        seq = int(body["seq"])
        sent = self.host_seq.get(a.host, 0)
        if seq > sent:
            # taken, it would stand for every body still to come: the host never gets one
            self.counts["acks_refused"] += 1
            return Reject(ErrorCode.INVALID_BODY, f"body.seq: {seq} was never sent to host {a.host!r} "
                                                  f"(its latest schedule is seq {sent})")
        if seq > a.acked_seq:
            a.acked_seq = seq
            a.acked_at_s = now
        if a.acked_seq >= self.host_seq.get(a.host, 0):
            self.unacked.discard(a.host)
        return {}

    def get_schedule(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """The current schedule body of the asking agent's host (empty if none yet)."""
        a = self._agent(identity, body, now, peer)
        if isinstance(a, Reject):
            return a
        return self.host_body(a.host)

    def check(self, now: float) -> list[str]:
        """Mark agents silent for longer than the heartbeat timeout as down; return them."""
        down = []
        for a in self.agents.values():
            if a.up and now - a.last_seen_s > self.config.heartbeat_timeout_s:
                a.up = False
                down.append(a.host)
                # nothing measures its ports now: planned on their line rate
                self.capacity.forget(a.host)
                a.unscheduled_Bps = {}
        if down:
            self.counts["agents_marked_down"] += len(down)
            self._on_change("agent_down", now)
        return down

    def down(self) -> set[str]:
        """The hosts whose registered agent is down."""
        return {h for h, a in self.agents.items() if not a.up}

    def publish(self, frames: dict[str, bytes], seq: int) -> int:
        """New packed bodies of plan ``seq`` for some hosts: queue them for their agents.

        A host whose new body is idle both ways (an :class:`IdleFrame`) and whose
        current body is idle too keeps its current body and seq: the two differ
        in seq and slot-grid epoch only, which an idle agent does not use (it
        paces nothing and leaves the line to all). Returns the number of hosts
        queued.
        """
        # A full re-solve moves the slot grid, so every body used to change, and at
        # 10,000 hosts with two busy ones the daemon sent 10,000 schedules per plan
        # (1.5 s to the last agent on 2 cores) to say "nothing" again. Idle agents still
        # hear from the daemon (heartbeat replies), so they keep their schedule past
        # heartbeat_timeout_s; a re-registering agent is sent its current body.
        queued = 0
        # Likewise a busy host whose body means the same on any grid (ranks, no rates: a
        # RankFrame) and whose flows and ranks did not change: with the default jit every
        # arrival's joint re-solve re-sent all 1000 hosts' bodies at 1000 jobs, and their
        # 1000 acks held the loop while the next arrival waited.
        for h, frame in frames.items():
            if isinstance(frame, IdleFrame):
                if h in self.idle and h in self.host_frames:
                    self.kept_idle += 1
                    continue
                self.idle.add(h)
            else:
                self.idle.discard(h)
            content = getattr(frame, "content", None)
            if content is not None and h in self.host_frames and self.content.get(h) == content:
                self.kept_same += 1
                continue
            self.content[h] = content
            self.host_frames[h] = frame
            self._bodies.pop(h, None)
            self.host_seq[h] = seq
            self.unacked.add(h)
            queued += 1
        self.queued_last = queued
        self._outbox_changed = True
        return queued

    def outbox(self, now: float) -> list[tuple[AgentState, bytes]]:
        """Packed schedule bodies to (re-)send: to every up agent whose ack of its body is overdue.

        Only hosts whose body changed since their agent's last ack are looked at.
        """
        # Nothing new to send and no re-send due: skip the scan (the loop asks every turn).
        if not self._outbox_changed and now < self._next_resend_s:
            return []
        self._outbox_changed = False
        out = []
        next_resend = math.inf
        for h in list(self.unacked):
            a = self.agents.get(h)
            if a is None or not a.up:
                continue  # pushed once it registers or comes back
            seq = self.host_seq[h]
            if a.acked_seq >= seq:
                self.unacked.discard(h)
                continue
            if a.sent_seq < seq:  # a new body: sent now, re-sends counted anew
                a.sent_seq, a.resends, a.resends_stopped = seq, 0, False
            elif a.resends_stopped:
                continue
            elif now - a.sent_at_s >= self.resend_gap(a.resends):
                if a.resends >= RESEND_TRIES:
                    a.resends_stopped = True
                    self.counts["schedule_resends_stopped"] += 1
                    log.warning(kv("schedule_resends_stopped", host=h, seq=seq, resends=a.resends))
                    continue
                a.resends += 1
                self.counts["schedule_resends"] += 1
            else:
                next_resend = min(next_resend, a.sent_at_s + self.resend_gap(a.resends))
                continue
            a.sent_at_s = now
            out.append((a, self.host_frames[h]))
            next_resend = min(next_resend, now + self.resend_gap(a.resends))
        self._next_resend_s = next_resend
        return out

    def resend_gap(self, resends: int) -> float:
        """Seconds from a send of a body to its next re-send, after ``resends`` re-sends."""
        return self.config.resend_s * min(2 ** min(resends, 30), RESEND_BACKOFF_MAX)

    def host_body(self, host: str) -> dict:
        """The schedule message body for ``host`` (idempotent by ``seq``)."""
        body = self._bodies.get(host)
        if body is None and host in self.host_frames:
            body = self._bodies[host] = unpack_body(self.host_frames[host])
        if body is None:  # nothing planned for it yet: the empty body of seq 0
            body = host_bodies(None, [self.cluster.index(host)], 0, self.t0_wall_s, self.cluster,
                               self.config.slot_s, self.incarnation, self.epoch)[host]
        return body


__all__ = ["RESEND_BACKOFF_MAX", "RESEND_TRIES", "AgentState", "AgentTable", "check_counts"]
