"""Scheduling policies, registered by name (see jitsched.policies.base)."""

from jitsched.policies import jit  # noqa: F401  (registers "jit")
from jitsched.policies.base import (
    DONE,
    POLICIES,
    RUNNING,
    WAITING,
    Allocation,
    FlowSet,
    Policy,
    SchedulerView,
    SlotSchedule,
    make_policy,
    register_policy,
)

__all__ = [
    "DONE", "RUNNING", "WAITING", "POLICIES", "Allocation", "FlowSet", "Policy",
    "SchedulerView", "SlotSchedule", "make_policy", "register_policy",
]
