"""TensorFlow's default behaviour: every released transfer and background flow shares the ports max-min fair."""

from __future__ import annotations

from jitsched.plan.alloc import pair_maxmin
from jitsched.policies.base import Allocation, Policy, SchedulerView, register_policy


@register_policy
class TensorFlowPolicy(Policy):
    """Per-flow max-min fair sharing of host ports (TCP-like), no notion of jobs or DAGs.

    A transfer sends as soon as it is released (its sender is ready and the
    receiver asked); concurrent flows progress in no particular order.
    """

    name = "tensorflow"
    needs_dag = False  # orders flows and coflows only
    role = "reference"  # what a network without a scheduler does: speedups are over it

    def allocate(self, view: SchedulerView) -> Allocation:
        """Max-min fair rates for every flow in ``view.flows`` (bytes/s)."""
        f = view.flows
        return Allocation(pair_maxmin(f.src, f.dst, view.cluster.egress_Bps, view.cluster.ingress_Bps))
