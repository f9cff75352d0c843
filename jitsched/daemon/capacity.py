"""Live port capacity: each port's line rate less the smoothed rate of traffic jitsched does not schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jitsched.dag.model import Cluster
from jitsched.plan.planner import scale_cluster

DIRECTIONS = ("out", "in")


@dataclass(frozen=True)
class CapacitySmoothing:
    """How a port's measured unscheduled rate becomes the rate the daemon plans around.

    Attributes
    ----------
    tau_s : float
        Time constant of the exponentially weighted mean, seconds: a sample
        ``dt`` after the previous one moves the mean by ``1 - exp(-dt / tau_s)``
        of the difference. Heartbeats come every 0.5 s by default, so 2 s
        averages over about four of them: one TCP window's burst does not
        move the plan, a flow that lasts does within a few seconds.
    dead_band : float
        Fraction of the port's line rate the mean must move away from the
        rate planned on before the plan follows it (and a re-solve is due):
        below it the plan keeps its capacity, so noise does not re-plan.
    hold_s : float
        Least seconds between two moves of a host's planned rates. On the
        testbed (``jitsched testbed run --scenario live-capacity --policy
        jit-paper``, a loaded 2-core machine) a 5 % band and no hold moved
        them 78 times in a 65-s run, each a joint re-solve: 38 s of planning.
    min_share : float
        Least fraction of the line rate a port is planned with, however busy
        it is measured: a plan on zero capacity would stretch every transfer
        to the horizon.
    """

    tau_s: float = 2.0
    dead_band: float = 0.1
    hold_s: float = 2.0
    min_share: float = 0.1

    def __post_init__(self) -> None:
        if not (self.tau_s > 0 and math.isfinite(self.tau_s)):
            raise ValueError(f"tau_s: expected a positive number of seconds, got {self.tau_s!r}")
        if not 0.0 <= self.dead_band < 1.0:
            raise ValueError(f"dead_band: expected a fraction in [0, 1), got {self.dead_band!r}")
        if not (self.hold_s >= 0 and math.isfinite(self.hold_s)):
            raise ValueError(f"hold_s: expected seconds >= 0, got {self.hold_s!r}")
        if not 0.0 < self.min_share <= 1.0:
            raise ValueError(f"min_share: expected a fraction in (0, 1], got {self.min_share!r}")


class LiveCapacity:
    """Per host and direction: the smoothed unscheduled rate and the one plans use.

    Parameters
    ----------
    cluster : Cluster
        Line rates (the configured capacities).
    smoothing : CapacitySmoothing, optional
    enabled : bool
        False: samples are kept for ``status`` but plans stay on the line rate.
    """

    def __init__(self, cluster: Cluster, smoothing: CapacitySmoothing | None = None,
                 enabled: bool = True) -> None:
        self.cluster = cluster
        self.smoothing = smoothing or CapacitySmoothing()
        self.enabled = enabled
        self.line = {"out": cluster.egress_Bps, "in": cluster.ingress_Bps}
        n = len(cluster)
        self.mean = {d: np.zeros(n) for d in DIRECTIONS}  # EWMA of the samples, bytes/s
        self.planned = {d: np.zeros(n) for d in DIRECTIONS}  # the unscheduled rate plans use
        self._last_s = np.full(n, -math.inf)  # daemon clock of each host's last sample
        self._moved_s = np.full(n, -math.inf)  # ... and of the last move of its planned rates
        self.changes = 0  # times a port's planned rate moved past the dead band, since start

    def fit(self, cluster: Cluster) -> None:
        """Follow a cluster that grew or changed capacities (hosts are appended, no index moves)."""
        n, old = len(cluster), len(self.cluster)
        self.cluster = cluster
        self.line = {"out": cluster.egress_Bps, "in": cluster.ingress_Bps}
        if n > old:
            for d in DIRECTIONS:
                self.mean[d] = np.concatenate([self.mean[d], np.zeros(n - old)])
                self.planned[d] = np.concatenate([self.planned[d], np.zeros(n - old)])
            self._last_s = np.concatenate([self._last_s, np.full(n - old, -math.inf)])
            self._moved_s = np.concatenate([self._moved_s, np.full(n - old, -math.inf)])

    def observe(self, host: str, sample: dict, now: float) -> bool:
        """One heartbeat's measured unscheduled rates of ``host`` (``{"out": Bps, "in": Bps}``).

        Returns True when a port's planned rate moved (a re-solve is due).
        """
        k = self.cluster.index(host)
        first = self._last_s[k] == -math.inf
        dt = now - self._last_s[k]
        self._last_s[k] = now
        weight = 1.0 if first else 1.0 - math.exp(-max(dt, 0.0) / self.smoothing.tau_s)
        for d in DIRECTIONS:
            if d in sample:
                x = min(max(float(sample[d]), 0.0), float(self.line[d][k]))
                self.mean[d][k] += weight * (x - self.mean[d][k])
        if now - self._moved_s[k] < self.smoothing.hold_s:
            return False
        out = [d for d in DIRECTIONS
               if abs(self.mean[d][k] - self.planned[d][k]) > self.smoothing.dead_band * self.line[d][k]]
        for d in out:
            self.planned[d][k] = self.mean[d][k]
        moved = bool(out)
        if moved:
            self.changes += 1
            self._moved_s[k] = now
        return moved and self.enabled

    def forget(self, host: str) -> bool:
        """``host``'s agent is gone: its ports are planned on their line rate again.

        Returns True when that changed what plans use.
        """
        k = self.cluster.index(host)
        self._last_s[k] = self._moved_s[k] = -math.inf
        moved = False
        for d in DIRECTIONS:
            moved = moved or bool(self.planned[d][k])
            self.mean[d][k] = self.planned[d][k] = 0.0
        return moved and self.enabled

    def capacity(self, direction: str) -> np.ndarray:
        """Per host, bytes/s the plans use in ``direction``: line less planned unscheduled, floored."""
        line = self.line[direction]
        if not self.enabled:
            return line.copy()
        return np.maximum(line - self.planned[direction], self.smoothing.min_share * line)

    def reduced(self) -> bool:
        """Whether any port is planned below its line rate."""
        return self.enabled and any(bool(self.planned[d].any()) for d in DIRECTIONS)

    def arrays(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(egress, ingress) capacities for a plan, bytes/s; None while every port is at its line rate."""
        return (self.capacity("out"), self.capacity("in")) if self.reduced() else None

    def host_view(self, host: str) -> dict:
        """``status``' figures of ``host``: the smoothed unscheduled rate and the capacity planned on, per direction."""
        k = self.cluster.index(host)
        return {"unscheduled_mean_Bps": {d: float(self.mean[d][k]) for d in DIRECTIONS},
                "planned_capacity_Bps": {d: float(self.capacity(d)[k]) for d in DIRECTIONS}}


def live_cluster(cluster: Cluster, capacity: tuple[np.ndarray, np.ndarray] | None) -> Cluster:
    """``cluster`` with every host's capacities set to ``capacity`` (egress, ingress; bytes/s).

    ``None`` gives ``cluster`` itself.
    """
    if capacity is None:
        return cluster
    egress, ingress = capacity
    line_e, line_i = cluster.egress_Bps, cluster.ingress_Bps
    fe = np.where(line_e > 0, np.asarray(egress, dtype=np.float64) / np.where(line_e > 0, line_e, 1.0), 1.0)
    fi = np.where(line_i > 0, np.asarray(ingress, dtype=np.float64) / np.where(line_i > 0, line_i, 1.0), 1.0)
    return scale_cluster(cluster, fe, fi)


def check_sample(sample: dict) -> str | None:
    """What is wrong with a heartbeat's ``unscheduled_Bps``, or None.

    ``sample`` maps ``"out"`` and/or ``"in"`` to a finite rate >= 0, bytes/s.
    """
    for d, v in sample.items():
        if d not in DIRECTIONS:
            return f"body.unscheduled_Bps: unknown direction {d!r} (expected {', '.join(DIRECTIONS)})"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            return f"body.unscheduled_Bps.{d}: expected a finite rate >= 0, bytes/s, got {v!r}"
    return None


__all__ = ["DIRECTIONS", "CapacitySmoothing", "LiveCapacity", "check_sample", "live_cluster"]
