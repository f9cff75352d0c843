"""Scheduling policies, registered by name (see jitsched.policies.base)."""

# importing the policy modules registers them by name
from jitsched.policies import jit, sincronia, tensorflow, tictac  # noqa: F401
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
