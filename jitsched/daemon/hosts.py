"""The daemon's host membership: hosts of the configuration, hosts that joined, hosts that left."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jitsched.config import ALLOW_LIST, DaemonConfig
from jitsched.daemon.reject import Reject
from jitsched.dag.model import MIN_HOST_BPS, Cluster, Host
from jitsched.errors import ValidationError
from jitsched.keys import check_name
from jitsched.protocol import ErrorCode

# hosts that left, listed by status (the oldest are forgotten first)
MAX_LEFT_LISTED = 1000
# The most a joining host may register, bits/s each way: 1 Pbit/s, far above any NIC; a
# registration of 1e300 would reach the LP as a capacity with no meaning.
MAX_HOST_BPS = 1e15


@dataclass
class Membership:
    """How one host came to be in the cluster, and whether it is still there."""

    joined_s: float  # daemon clock; -inf: a host of the configuration
    left_s: float = math.nan  # when it left (nan: it is in the cluster)
    why: str = ""  # why it left


class HostTable:
    """Which hosts the cluster has: the configuration's, and those whose agents joined.

    A host is never taken out of the :class:`Cluster` (plans, jobs and flows name
    hosts by index): one that leaves is listed in :attr:`absent`, and new jobs on
    it are refused until its agent registers again.

    Parameters
    ----------
    config : DaemonConfig
    """

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.initial = frozenset(config.cluster.names)
        self.members: dict[str, Membership] = {h: Membership(-math.inf) for h in config.cluster.names}
        self.absent: frozenset[str] = frozenset()
        self.counts = {"hosts_joined": 0, "hosts_left": 0, "joins_refused": 0}

    def admit(self, cluster: Cluster, body: dict, now: float, peer: str | None) -> Cluster | None | Reject:
        """The cluster once the agent registering with ``body`` is in it: None when it is
        in it already as it is, a new :class:`Cluster` when its host joins, comes back or
        registers other capacities, or why it may not join.

        Only a host's own key registers it (checked by the agent table); with no keys,
        anyone who reaches the daemon's local socket may add hosts, as they may act on
        any job. A host of the configuration keeps the capacities the configuration gives it.
        """
        host = body["host"]
        if peer is not None and peer != host:
            return None  # the agent table refuses it, naming both
        if host in self.initial:
            return None
        if self.config.host_join == ALLOW_LIST:
            self.counts["joins_refused"] += 1
            return Reject(ErrorCode.UNKNOWN_HOST, f"host {host!r} is not in the cluster, and only the "
                          "configuration's hosts may register ([daemon] host_join = \"allow-list\")")
        if "egress_bps" not in body and "ingress_bps" not in body and host not in self.members:
            self.counts["joins_refused"] += 1
            return Reject(ErrorCode.UNKNOWN_HOST, f"host {host!r} is not in the cluster; it joins when its "
                          "agent registers its capacities (`jitsched agent --egress-bps`)")
        try:
            check_name(host, "host")  # a joined host is named in status, logs and key files
        except ValidationError as exc:
            self.counts["joins_refused"] += 1
            return Reject(ErrorCode.INVALID_BODY, f"body.host: {exc}")
        caps = []
        for key in ("egress_bps", "ingress_bps"):
            v = body.get(key)
            if v is None and host in cluster:  # one that left, back as it was
                x = cluster.hosts[cluster.index(host)]
                v = getattr(x, key)
            if v is None or not MIN_HOST_BPS <= float(v) <= MAX_HOST_BPS:
                self.counts["joins_refused"] += 1
                return Reject(ErrorCode.INVALID_BODY, f"body.{key}: host {host!r} is not in the daemon's "
                              f"configuration and joins with its capacities (bits/s, at least "
                              f"{MIN_HOST_BPS:g} and at most {MAX_HOST_BPS:g}), got {v!r}")
            caps.append(float(v))
        if host not in cluster and len(cluster) >= self.config.max_hosts:
            self.counts["joins_refused"] += 1
            return Reject(ErrorCode.OVERLOADED, f"host {host!r} cannot join: the cluster has {len(cluster)} hosts "
                          f"([limits] max_hosts)")
        address = body.get("address") or None
        want = Host(host, caps[0], caps[1], address)
        m = self.members.get(host)
        if m is not None and math.isnan(m.left_s) and host in cluster \
                and cluster.hosts[cluster.index(host)] == want:
            return None
        return cluster.with_host(want)

    def joined(self, host: str, now: float) -> None:
        """``host``'s agent registered and the cluster has it (again)."""
        m = self.members.get(host)
        if m is None or not math.isnan(m.left_s):
            self.counts["hosts_joined"] += 1
        self.members[host] = Membership(now if host not in self.initial else -math.inf)
        self.absent = self.absent - {host}

    def left(self, host: str, now: float, why: str) -> bool:
        """``host`` leaves the cluster; False if it was not in it."""
        m = self.members.get(host)
        if m is None or not math.isnan(m.left_s):
            return False
        m.left_s, m.why = now, why
        self.absent = self.absent | {host}
        self.counts["hosts_left"] += 1
        gone = [h for h, x in self.members.items() if not math.isnan(x.left_s)]
        for h in gone[:max(0, len(gone) - MAX_LEFT_LISTED)]:
            if h not in self.initial:
                del self.members[h]
        return True

    def overdue(self, down_since: dict[str, float], now: float) -> list[str]:
        """Joined hosts whose agent has been silent ``host_leave_s`` (``down_since``: the hosts
        whose agent is down, each with when it was last heard from)."""
        limit = self.config.host_leave_s
        return [h for h, seen in down_since.items()
                if h not in self.initial and h not in self.absent and now - seen >= limit]

    def summary(self, cluster: Cluster) -> dict:
        """What status shows: how hosts join, and the hosts that joined and that left."""
        joined = {}
        left = {}
        for h, m in self.members.items():
            if not math.isnan(m.left_s):
                left[h] = {"left_at_s": m.left_s, "why": m.why}
            elif h not in self.initial and h in cluster:
                x = cluster.hosts[cluster.index(h)]
                joined[h] = {"joined_at_s": m.joined_s, "egress_bps": x.egress_bps,
                             "ingress_bps": x.ingress_bps, **({"address": x.address} if x.address else {})}
        return {"host_join": self.config.host_join, "configured": len(self.initial),
                "in_cluster": len(cluster) - len(self.absent), "joined": joined, "left": left, **self.counts}


__all__ = ["MAX_HOST_BPS", "MAX_LEFT_LISTED", "HostTable", "Membership"]
