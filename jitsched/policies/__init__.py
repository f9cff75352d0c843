"""Scheduling policies, registered by name (see jitsched.policies.base)."""

# importing the policy modules registers them by name
from jitsched.policies import jit, sincronia, tensorflow, tictac, varys  # noqa: F401
from jitsched.policies.base import (
    DONE,
    POLICIES,
    ROLES,
    RUNNING,
    WAITING,
    Allocation,
    FlowSet,
    Policy,
    SchedulerView,
    SlotSchedule,
    baseline_policies,
    default_policy,
    make_policy,
    paper_policy,
    policies_with_role,
    reference_policy,
    register_policy,
)

__all__ = [
    "DONE", "RUNNING", "WAITING", "POLICIES", "ROLES", "Allocation", "FlowSet", "Policy",
    "SchedulerView", "SlotSchedule", "baseline_policies", "default_policy", "make_policy",
    "paper_policy", "policies_with_role", "reference_policy", "register_policy",
]
