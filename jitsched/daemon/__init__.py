"""The jitsched daemon: scheduler state (jitsched.daemon.state) and socket loop (jitsched.daemon.server)."""

from jitsched.daemon.server import Daemon, create_policy
from jitsched.daemon.state import SchedulerState

__all__ = ["Daemon", "SchedulerState", "create_policy"]
