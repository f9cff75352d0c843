"""Announced background flows: bulk transfers outside every DAG that tell the daemon their size."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jitsched.config import ANONYMOUS, DaemonConfig
from jitsched.daemon.jobs import scoped_id
from jitsched.daemon.reject import Reject
from jitsched.protocol import ErrorCode


@dataclass(frozen=True)
class Announced:
    """One announced background flow (times on the daemon clock, seconds).

    ``name`` is the client-scoped name the daemon holds it by
    (:func:`jitsched.daemon.jobs.scoped_id` of its owner and the name the
    client gave, as a job's id): its agents know it as
    :func:`jitsched.protocol.background_flow_id` ``(name)``. ``src``/``dst``
    are host indices in the daemon's cluster, ``bytes`` the size the sender gave and ``left`` what it last said it still has (bytes);
    ``started_s`` is its first announcement, ``seen_s`` its latest.
    """

    name: str
    src: int
    dst: int
    bytes: float
    started_s: float
    owner: str | None
    left: float
    seen_s: float


class BackgroundTable:
    """The announced background flows, by client-scoped name, and what became of the ones that left.

    A client names its flows by its own names; the table holds them by
    :func:`jitsched.daemon.jobs.scoped_id` of the client and the name, so no
    two clients' flows meet (without keys, the names themselves).

    A flow stays until its sender says it finished or, if the sender never
    does (it died), ``background_ttl_s`` after it last heard of it (an
    announcement or a progress report, which renew it): a leaked
    announcement must not keep a rank in every plan for ever. A daemon with
    a journal takes its flows back after a restart (:meth:`restore`). Each
    client holds at most its quota's ``max_background`` (``by_owner`` counts
    them), the daemon ``max_background``.
    """

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.flows: dict[str, Announced] = {}
        self.by_owner: dict[str | None, int] = {}  # flows held, by the client that announced them
        # dropped: flows to or from a host that left the cluster (never said to have finished)
        self.counts = {"announced": 0, "restored": 0, "finished": 0, "expired": 0, "dropped": 0}

    def start(self, body: dict, now: float, peer: str | None = None) -> Announced | Reject:
        """Announce ``body``'s flow (``flow``, ``src``, ``dst``, ``bytes``, optional ``left``); a
        Reject says why not.

        Announcing a name again replaces it, if ``peer`` owns it: a sender
        that resends after a lost reply, or says how many bytes it still has
        (``left``, default ``bytes``) as it goes; ``started_s`` stays the
        first one's, the time-to-live counts from the latest.
        """
        got = self._checked(body)
        if isinstance(got, Reject):
            return got
        if len(body["flow"]) > self.config.max_id_chars:
            return Reject(ErrorCode.INVALID_BODY, f"body.flow: longer than {self.config.max_id_chars} characters")
        name = scoped_id(peer, body["flow"])
        old = self.flows.get(name)
        if old is not None and peer is not None and old.owner != peer:
            return Reject(ErrorCode.FORBIDDEN, f"background flow {name!r} was announced with another client's key")
        full = self._full(name, peer)
        if full is not None:
            return full
        flow = Announced(name, *got[:3], now if old is None else old.started_s, peer, got[3], now)
        self._hold(flow)
        if old is None:
            self.counts["announced"] += 1
        return flow

    def _hold(self, flow: Announced) -> None:
        old = self.flows.get(flow.name)
        if old is not None:
            self._drop(old.name)
        self.flows[flow.name] = flow
        self.by_owner[flow.owner] = self.by_owner.get(flow.owner, 0) + 1

    def _drop(self, name: str) -> None:
        flow = self.flows.pop(name)
        left = self.by_owner[flow.owner] - 1
        if left:
            self.by_owner[flow.owner] = left
        else:
            del self.by_owner[flow.owner]

    def restore(self, body: dict, owner: str | None, started_s: float, seen_s: float) -> Announced | Reject:
        """Hold again a flow a journal kept (``body`` as for :meth:`start`, ``left`` included,
        ``flow`` the scoped name it was held by).

        The daemon's cluster or limits may have changed since: a Reject says
        why the flow is not taken back.
        """
        got = self._checked(body)
        if isinstance(got, Reject):
            return got
        full = self._full(body["flow"], quota=False)  # journalled: it was accepted
        if full is not None:
            return full
        flow = Announced(body["flow"], *got[:3], started_s, owner, got[3], seen_s)
        self._hold(flow)
        self.counts["restored"] += 1
        return flow

    def _full(self, name: str, owner: str | None = None, quota: bool = True) -> Reject | None:
        # a new name past max_background (the daemon's, or the client's quota) is
        # refused; a held one may always be replaced
        if name in self.flows:
            return None
        most = self.config.quota(owner).max_background
        if quota and self.by_owner.get(owner, 0) >= most:
            return Reject(ErrorCode.OVERLOADED, f"client {owner or ANONYMOUS!r} already holds {most} background "
                          "flows ([limits.per_client] max_background)")
        if len(self.flows) >= self.config.max_background:
            return Reject(ErrorCode.OVERLOADED, f"the daemon already holds {self.config.max_background} "
                          "background flows ([limits] max_background)")
        return None

    def _checked(self, body: dict) -> tuple[int, int, float, float] | Reject:
        # (src index, dst index, bytes, left) of a well-formed flow for this cluster
        cfg = self.config
        cluster, ends = cfg.cluster, []
        for key in ("src", "dst"):
            if body[key] not in cluster:
                return Reject(ErrorCode.UNKNOWN_HOST, f"body.{key}: no host {body[key][:64]!r} in the cluster")
            ends.append(cluster.index(body[key]))
        if ends[0] == ends[1]:
            return Reject(ErrorCode.INVALID_BODY, "body.dst: a background flow needs two distinct hosts")
        size = body["bytes"]
        if not (isinstance(size, (int, float)) and math.isfinite(size) and 0 < size <= cfg.max_transfer_bytes):
            return Reject(ErrorCode.INVALID_BODY,
                          f"body.bytes: must be in (0, {cfg.max_transfer_bytes:g}], got {size!r}")
        left = body.get("left", size)
        if not (isinstance(left, (int, float)) and 0 <= left <= size):
            return Reject(ErrorCode.INVALID_BODY, f"body.left: must be within [0, bytes], got {left!r}")
        return ends[0], ends[1], float(size), float(left)

    def finish(self, body: dict, peer: str | None = None) -> bool | Reject:
        """Client ``peer``'s flow ``body["flow"]`` ended: True if it was held (a second finish
        is a no-op)."""
        flow = self.flows.get(scoped_id(peer, body["flow"]))
        if flow is None:
            return False
        if peer is not None and flow.owner != peer:
            return Reject(ErrorCode.FORBIDDEN,
                          f"background flow {flow.name!r} was announced with another client's key")
        self._drop(flow.name)
        self.counts["finished"] += 1
        return True

    def drop_host(self, idx: int) -> list[str]:
        """Drop the flows to or from host ``idx`` (it left the cluster); their names."""
        return self._drop_counted([n for n, f in self.flows.items() if idx in (f.src, f.dst)], "dropped")

    def expire(self, now: float) -> list[str]:
        """Drop the flows last heard of ``background_ttl_s`` or more before ``now``; their names."""
        ttl = self.config.background_ttl_s
        return self._drop_counted([n for n, f in self.flows.items() if now - f.seen_s >= ttl], "expired")

    def _drop_counted(self, names: list[str], why: str) -> list[str]:
        """Drop the flows ``names``, counted under ``why``; the names."""
        for n in names:
            self._drop(n)
        self.counts[why] += len(names)
        return names

    def snapshot(self) -> tuple[Announced, ...]:
        """Every flow held now, in announcement order."""
        return tuple(self.flows.values())
