"""The ``record`` backend: remembers every applied slot instead of enforcing it (for tests)."""

from __future__ import annotations

import threading
import time

from jitsched.agents.backends.base import Backend, FlowRate, register_backend


@register_backend
class RecordBackend(Backend):
    """Appends ``(monotonic_s, {flow_id: rate_Bps}, leftover_Bps)`` per :meth:`apply` call."""

    name = "record"
    needs_endpoints = False

    def __init__(self, line_rate_Bps: float, **options) -> None:
        super().__init__(line_rate_Bps, **options)
        self.calls: list[tuple[float, dict[str, float], float]] = []
        self.attached: dict[str, object] = {}
        self.last: list[FlowRate] = []  # the flows of the last apply, with their endpoints and levels
        self.closed = False
        self.caps: dict[str, float] = {}  # the caps of the last cap_destinations
        self.floor: float | None = None  # the share of the last hold_floor
        self._lock = threading.Lock()

    caps_destinations = True

    def cap_destinations(self, caps: dict[str, float]) -> None:
        """Record the caps on unranked traffic per destination address (bytes/s)."""
        with self._lock:
            self.caps = dict(caps)

    holds_floor = True

    def hold_floor(self, share: float | None) -> None:
        """Record the floor held for unranked traffic (a share of the line; None: its own)."""
        with self._lock:
            self.floor = share

    def apply(self, flows: list[FlowRate], leftover_Bps: float) -> None:
        """Record the slot's rates (bytes/s)."""
        with self._lock:
            self.calls.append((time.monotonic(), {f.flow_id: f.rate_Bps for f in flows},
                               float(leftover_Bps)))
            self.last = list(flows)

    def attach(self, flow_id: str, sock) -> None:
        """Remember the flow's socket."""
        self.attached[flow_id] = sock

    def detach(self, flow_id: str) -> None:
        """Forget the flow's socket."""
        self.attached.pop(flow_id, None)

    def close(self) -> None:
        """Mark closed (nothing was installed)."""
        self.closed = True

    def snapshot(self) -> list[tuple[float, dict[str, float], float]]:
        """A copy of the calls so far (thread-safe)."""
        with self._lock:
            return list(self.calls)
