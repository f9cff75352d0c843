"""The daemon's log lines: ``event=NAME key=value`` with escaped values, and a rate limiter."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any


def escape(text: str) -> str:
    """``text`` with backslashes, double quotes and unprintable characters escaped as in
    a Python literal (``\\n``, ``\\x1b``...): a value can never start a line of its own."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def kv(event: str, **fields: Any) -> str:
    """A structured log line: ``event=NAME key=value ...``.

    Values are escaped (:func:`escape`) and quoted when they hold spaces, are
    empty or were escaped, so a job id sent by a client cannot forge a line.
    """
    parts = [f"event={event}"]
    for k, v in fields.items():
        s = f"{v:.6g}" if isinstance(v, float) else str(v)
        e = escape(s)
        parts.append(f'{k}="{e}"' if (" " in e or not e or e != s) else f"{k}={e}")
    return " ".join(parts)


class LogLimiter:
    """Rate-limited log lines: per event, the first ``burst`` in each ``interval_s`` seconds,
    then a count of the ones held back, at the level of the lines it counts (a count of
    lines an operator's level hides is hidden with them).

    Parameters
    ----------
    logger : logging.Logger
    burst : int
        Lines of one event logged per interval.
    interval_s : float
        Seconds.
    clock : callable, optional
        Monotonic seconds (tests pass their own).
    """

    def __init__(self, logger: logging.Logger, burst: int = 5, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.burst = burst
        self.interval_s = interval_s
        self.clock = clock
        # event -> (start, logged, held back, the highest level held back)
        self._window: dict[str, tuple[float, int, int, int]] = {}

    def log(self, level: int, event: str, exc_info: BaseException | None = None, **fields: Any) -> bool:
        """Log ``kv(event, **fields)`` at ``level`` (with ``exc_info``'s traceback) unless
        ``event`` used up its burst; returns whether it was logged."""
        now = self.clock()
        start, logged, held, top = self._window.get(event, (now, 0, 0, logging.NOTSET))
        if now - start >= self.interval_s:
            self._summary(event, held, top)
            start, logged, held, top = now, 0, 0, logging.NOTSET
        if logged >= self.burst:
            self._window[event] = (start, logged, held + 1, max(top, level))
            return False
        self._window[event] = (start, logged + 1, held, top)
        self.logger.log(level, kv(event, **fields), exc_info=exc_info)
        return True

    def flush(self) -> None:
        """Log the count of every event whose interval is over and had lines held back."""
        now = self.clock()
        for event, (start, _, held, top) in list(self._window.items()):
            if now - start >= self.interval_s:
                self._summary(event, held, top)
                del self._window[event]

    def _summary(self, event: str, held: int, level: int) -> None:
        if held:
            self.logger.log(level, kv("log_suppressed", of=event, count=held, interval_s=float(self.interval_s)))


__all__ = ["LogLimiter", "escape", "kv"]
