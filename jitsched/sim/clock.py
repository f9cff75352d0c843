"""The simulator's virtual clock behind a clock interface, and a small event heap with deterministic ties."""

from __future__ import annotations

import heapq
import itertools
import math
from abc import ABC, abstractmethod
from typing import Any


class Clock(ABC):
    """Seconds on some clock: the interface of the simulator's :class:`VirtualClock`."""

    @abstractmethod
    def now(self) -> float:
        """Current time, seconds."""

    @abstractmethod
    def wait_until(self, t: float) -> None:
        """Return once the clock reads at least ``t`` seconds."""


class VirtualClock(Clock):
    """Simulated time: jumps straight to the next event; never goes backwards."""

    def __init__(self, start_s: float = 0.0) -> None:
        self._now = float(start_s)

    def now(self) -> float:
        return self._now

    def wait_until(self, t: float) -> None:
        if t < self._now:
            raise ValueError(f"virtual clock cannot go back from {self._now} to {t}")
        self._now = float(t)


class EventQueue:
    """A heap of ``(time, rank, payload)``: earliest first, then lower rank, then insertion order.

    The insertion counter makes ties deterministic and keeps payloads from
    ever being compared.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, t: float, rank: int, payload: Any) -> None:
        """Schedule ``payload`` at ``t`` seconds; at equal times lower ``rank`` comes first."""
        heapq.heappush(self._heap, (float(t), int(rank), next(self._seq), payload))

    def peek_time(self) -> float:
        """Time of the earliest event, ``inf`` when empty."""
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> tuple[float, int, Any]:
        """Remove and return the earliest ``(time, rank, payload)``."""
        t, rank, _, payload = heapq.heappop(self._heap)
        return t, rank, payload
