"""TensorFlow's default behaviour: every released transfer and background flow shares the ports max-min fair."""

from __future__ import annotations

import numpy as np

from jitsched.alloc import maxmin_fair
from jitsched.policies.base import Allocation, Policy, SchedulerView, register_policy


def pair_maxmin(src: np.ndarray, dst: np.ndarray, cap_e: np.ndarray, cap_i: np.ndarray) -> np.ndarray:
    """Per-flow max-min fair rates, computed once per (src, dst) pair.

    Flows on the same host pair always get the same max-min rate, so the
    kernel runs on pairs weighted by their flow counts: the same answer with
    far fewer flows (a job's many parameter reads share one pair).

    Returns
    -------
    ndarray, shape (F,)
        Rates, bytes/s.
    """
    if len(src) == 0:
        return np.zeros(0)
    h = len(cap_e)
    key = src * h + dst
    uniq, inv, count = np.unique(key, return_inverse=True, return_counts=True)
    group = maxmin_fair(uniq // h, uniq % h, cap_e, cap_i, count.astype(np.float64))
    return (group / count)[inv]


@register_policy
class TensorFlowPolicy(Policy):
    """Per-flow max-min fair sharing of host ports (TCP-like), no notion of jobs or DAGs.

    A transfer sends as soon as it is released (its sender is ready and the
    receiver asked); concurrent flows progress in no particular order.
    """

    name = "tensorflow"

    def allocate(self, view: SchedulerView) -> Allocation:
        """Max-min fair rates for every flow in ``view.flows`` (bytes/s)."""
        f = view.flows
        return Allocation(pair_maxmin(f.src, f.dst, view.cluster.egress_Bps, view.cluster.ingress_Bps))
