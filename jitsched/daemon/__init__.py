"""The jitsched daemon: scheduler state (jitsched.daemon.state) and socket loop (jitsched.daemon.server)."""

from __future__ import annotations

import importlib

# Loaded when first asked for: the client commands use small modules of this package
# (jitsched.daemon.logs' escape) and should not pay for the server, its planner and SciPy.
_LAZY = {"Daemon": "jitsched.daemon.server", "create_policy": "jitsched.daemon.server",
         "SchedulerState": "jitsched.daemon.state"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Daemon", "SchedulerState", "create_policy"]
