"""Reject: an expected rejection, returned (not raised) by the daemon's state methods."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Reject:
    """An expected rejection, returned (not raised) by state methods; becomes an error reply
    (``detail``, if any, in its ``error.detail`` for clients to read)."""

    code: str
    message: str
    detail: dict | None = field(default=None)


__all__ = ["Reject"]
