"""The daemon's journal in sqlite: jobs (submissions, progress, ends) and announced flows, to resume after a restart."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

from jitsched.errors import JitschedError

# One row per submitted job (the job map as submitted, packed), one per progress event;
# an ended job keeps its row (state, end, JCT) without its map and events, so the file
# holds what running jobs need and little else. An announced background flow is one
# row while the daemon holds it (a progress report replaces it), deleted when it ends.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    row INTEGER PRIMARY KEY, job_id TEXT NOT NULL, owner TEXT, job BLOB,
    submitted_s REAL NOT NULL, state TEXT NOT NULL DEFAULT 'running',
    ended_s REAL, jct_s REAL, error TEXT);
CREATE TABLE IF NOT EXISTS events (
    row INTEGER NOT NULL, node TEXT NOT NULL, kind TEXT NOT NULL, t_s REAL NOT NULL,
    measured_s REAL);
CREATE INDEX IF NOT EXISTS events_by_job ON events (row);
CREATE TABLE IF NOT EXISTS background (
    name TEXT PRIMARY KEY, src TEXT NOT NULL, dst TEXT NOT NULL, bytes REAL NOT NULL,
    left REAL NOT NULL, owner TEXT, started_s REAL NOT NULL, seen_s REAL NOT NULL);
"""
STARTED = "S"  # a transfer started sending
DONE = "D"  # a transfer arrived or a compute ended


class JournalError(JitschedError):
    """A journal file that cannot be opened, written or read as a journal."""


@dataclass
class JournalJob:
    """An unfinished job as the journal holds it (times on the daemon clock, seconds)."""

    row: int
    job_map: dict
    owner: str | None
    submitted_s: float
    done: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    measured_s: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class JournalFlow:
    """An announced background flow as the journal holds it: host names, bytes, daemon-clock seconds."""

    name: str
    src: str
    dst: str
    bytes: float
    left: float
    owner: str | None
    started_s: float
    seen_s: float


class Journal:
    """An append-mostly sqlite file (WAL, ``synchronous=NORMAL``) of jobs and their progress.

    Each event is one small transaction, written before the daemon replies to
    the request that caused it: a reply the client got is in the WAL, which
    survives the daemon's process being killed (not a power loss: with
    ``synchronous=NORMAL`` WAL commits are not fsynced, checkpoints are).

    Parameters
    ----------
    path : str or Path
        The database file; made if missing.

    Raises
    ------
    JournalError
        The file's directory is missing, the file cannot be opened or written,
        is not a database, or WAL mode cannot be set (the message names the file).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.parent.is_dir():
            raise JournalError(f"journal {self.path}: no such directory {self.path.parent}")
        if self.path.is_dir():
            raise JournalError(f"journal {self.path}: a directory, not a file")
        try:
            # the daemon's loop thread writes, but the state (and this) is built on another
            self.db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalError(f"journal {self.path}: cannot open ({exc})") from None
        try:
            mode = self.db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JournalError(f"journal {self.path}: cannot use WAL mode (got {mode!r})")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            self.db.close()
            raise JournalError(f"journal {self.path}: cannot use ({exc})") from None
        except JournalError:
            self.db.close()
            raise
        self.writes = 0  # transactions since open

    def close(self) -> None:
        """Close the database (a checkpoint folds the WAL into the file)."""
        self.db.close()

    # ------------------------------------------------------------------ meta

    def get(self, key: str) -> str | None:
        """A stored setting, or None."""
        got = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if got is None else got[0]

    def put(self, key: str, value: str) -> None:
        """Store a setting."""
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
        self.writes += 1

    # ------------------------------------------------------------------ events

    def submitted(self, job_id: str, job_map: dict, owner: str | None, submitted_s: float) -> int:
        """Record a job as submitted; returns its row, which names it in later events."""
        blob = msgpack.packb(job_map, use_bin_type=True)
        cur = self.db.execute("INSERT INTO jobs (job_id, owner, job, submitted_s) VALUES (?, ?, ?, ?)",
                              (job_id, owner, blob, submitted_s))
        self.writes += 1
        return int(cur.lastrowid)

    def event(self, row: int, node: str, kind: str, t_s: float, measured_s: float | None = None) -> None:
        """Record that ``node`` of job ``row`` started (``STARTED``) or ended (``DONE``) at ``t_s``."""
        self.db.execute("INSERT INTO events (row, node, kind, t_s, measured_s) VALUES (?, ?, ?, ?, ?)",
                        (row, node, kind, t_s, measured_s))
        self.writes += 1

    def ended(self, row: int, state: str, t_s: float, jct_s: float | None = None, error: str = "") -> None:
        """Record that job ``row`` ended as ``state``; its map and events are dropped."""
        db = self.db
        db.execute("BEGIN")
        try:
            db.execute("UPDATE jobs SET state = ?, ended_s = ?, jct_s = ?, error = ?, job = NULL "
                       "WHERE row = ?", (state, t_s, jct_s, error, row))
            db.execute("DELETE FROM events WHERE row = ?", (row,))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.writes += 1

    def forget(self, rows: list[int]) -> None:
        """Drop the rows of ended jobs the daemon no longer lists (one transaction)."""
        db = self.db
        db.execute("BEGIN")
        try:
            db.executemany("DELETE FROM jobs WHERE row = ? AND state != 'running'", [(r,) for r in rows])
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        self.writes += 1

    def background_held(self, flow: JournalFlow) -> None:
        """Record an announced background flow: a new one, or a progress report (replaces it)."""
        self.db.execute("INSERT OR REPLACE INTO background (name, src, dst, bytes, left, owner, started_s, "
                        "seen_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (flow.name, flow.src, flow.dst, flow.bytes, flow.left, flow.owner, flow.started_s,
                         flow.seen_s))
        self.writes += 1

    def background_gone(self, names: list[str]) -> None:
        """Forget announced background flows that finished or expired (one transaction)."""
        self.db.executemany("DELETE FROM background WHERE name = ?", [(n,) for n in names])
        self.writes += 1

    # ------------------------------------------------------------------ restart

    def background(self) -> list[JournalFlow]:
        """Every announced background flow held when the journal was last written, oldest first."""
        return [JournalFlow(*row) for row in self.db.execute(
            "SELECT name, src, dst, bytes, left, owner, started_s, seen_s FROM background "
            "ORDER BY started_s, name")]

    def unfinished(self) -> list[JournalJob]:
        """Every job recorded as running, in submission order, with its progress."""
        out: dict[int, JournalJob] = {}
        for row, owner, blob, sub in self.db.execute(
                "SELECT row, owner, job, submitted_s FROM jobs WHERE state = 'running' ORDER BY row"):
            out[row] = JournalJob(row, msgpack.unpackb(blob, raw=False), owner, sub)
        for row, node, kind, t_s, measured in self.db.execute(
                "SELECT row, node, kind, t_s, measured_s FROM events ORDER BY rowid"):
            j = out.get(row)
            if j is None:
                continue
            if kind == STARTED:
                j.started.setdefault(node, t_s)
            else:
                j.done.setdefault(node, t_s)
                if measured is not None:
                    j.measured_s[node] = measured
        return list(out.values())

    def compact(self) -> int:
        """Forget ended jobs (a restarted daemon does not list them); returns how many."""
        cur = self.db.execute("DELETE FROM jobs WHERE state != 'running'")
        self.writes += 1
        return cur.rowcount


__all__ = ["DONE", "STARTED", "Journal", "JournalError", "JournalFlow", "JournalJob"]
