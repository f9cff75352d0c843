"""Reject: an expected rejection, returned (not raised) by the daemon's state methods."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reject:
    """An expected rejection, returned (not raised) by state methods; becomes an error reply."""

    code: str
    message: str


__all__ = ["Reject"]
