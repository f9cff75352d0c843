"""What the daemon's state keeps its jobs in: the interface the sqlite journal and the etcd store share."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from jitsched.daemon.journal import JournalFlow, JournalJob


class StoreError(Exception):
    """A store's read or write failed or was refused (the state counts it as a journal error)."""


class FencedError(StoreError):
    """A write refused because its writer no longer leads (its epoch is over)."""


class Store(Protocol):
    """A daemon's durable state: :class:`jitsched.daemon.journal.Journal` (sqlite, one
    daemon) or :class:`jitsched.daemon.ha.EtcdStore` (etcd, daemon replicas).

    Each write returns once it is durable, or raises ``sqlite3.Error`` or
    :class:`StoreError`; ``writes`` counts the writes that held.
    """

    writes: int
    # whether batch() holds progress events back until it ends (then the daemon serves a
    # turn of job messages inside one batch and sends their replies after it)
    holds_batches: bool

    @property
    def holding(self) -> bool:
        """Whether an open batch holds progress events not yet written."""

    @property
    def held_writes(self) -> int:
        """Operations held back and not yet written: progress events after a failed write,
        recurring jobs' counts until the loop turn's write."""

    def get(self, key: str) -> str | None:
        """A stored setting, or None."""

    def put(self, key: str, value: str) -> None:
        """Store a setting."""

    def submitted(self, job_id: str, job_map: dict, owner: str | None, submitted_s: float) -> int:
        """Record a submitted job; returns its row, which names it in later writes."""

    def event(self, row: int, node: str, kind: str, t_s: float, measured_s: float | None = None) -> None:
        """Record that ``node`` of job ``row`` started or ended at ``t_s``."""

    def batch(self) -> AbstractContextManager[None]:
        """A block whose progress events may be written together as it ends (raising then if
        they could not be); any other write inside it writes the events held so far first."""

    def ended(self, row: int, state: str, t_s: float, jct_s: float | None = None, error: str = "") -> None:
        """Record that job ``row`` ended as ``state``; its map and events go."""

    def forget(self, rows: list[int]) -> None:
        """Drop the rows of ended jobs."""

    def background_held(self, flow: JournalFlow) -> None:
        """Record an announced background flow (a new one or a progress report)."""

    def background_gone(self, names: list[str]) -> None:
        """Forget announced background flows."""

    def template(self, row: int, iterations: int, learned: bytes | None = None, *, later: bool = False) -> None:
        """Record recurring job ``row``'s iteration count and, if given, its learned state;
        ``later``: it may wait for the next write or :meth:`flush` (it is no answer's promise)."""

    def flush(self) -> None:
        """Write what :meth:`template` was allowed to hold back (raising as a write does)."""

    def templates(self) -> dict[int, tuple[int, bytes | None]]:
        """Every running recurring job's row -> (iteration count, learned state or None)."""

    def background(self) -> list[JournalFlow]:
        """Every announced background flow held, oldest first."""

    def unfinished(self) -> list[JournalJob]:
        """Every job recorded as running, in submission order, with its progress."""

    def compact(self) -> int:
        """Forget ended jobs; returns how many."""

    def close(self) -> None:
        """Release the store."""


__all__ = ["FencedError", "Store", "StoreError"]
