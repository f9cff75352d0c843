"""A policy that sends reserved critical jobs' transfers at their reserved rates and every other flow by an inner policy on the capacity left."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from jitsched.dag.model import COMPUTE, Cluster
from jitsched.plan.planner import scale_cluster
from jitsched.plan.reserve import ReservationBook
from jitsched.policies.base import Allocation, Policy, SchedulerView

# A port fully reserved still shows the inner policy a sliver of capacity (capacities
# must be positive), this fraction of its line rate: below the simulator's capacity
# tolerance (alloc.CAPACITY_RTOL, 1e-9), so the sliver never overfills the port.
MIN_LEFT = 1e-10


class Reserved(Policy):
    """Reservations first, then ``inner`` on what they leave.

    A transfer of a job with a reservation in ``book`` sends at least its
    reserved rate in every slot where it has one; on top of that, and outside
    its reservation, it is the inner policy's, as every other flow is, on the
    line rate less the reserved rates of the slot.

    Parameters
    ----------
    inner : Policy
    book : ReservationBook
    reserved : dict of int to str
        DAG job index to the job's id in ``book``.
    """

    name = ""

    def __init__(self, inner: Policy, book: ReservationBook, reserved: dict[int, str]) -> None:
        self.inner, self.book, self.reserved = inner, book, dict(reserved)
        self._left: tuple[int, np.ndarray, Cluster] | None = None

    def reset(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.inner.reset(cluster)
        self._first: np.ndarray | None = None

    def on_job_arrival(self, view: SchedulerView, job: int) -> None:
        self.inner.on_job_arrival(view, job)

    def on_flow_arrival(self, view: SchedulerView, bg: int) -> None:
        self.inner.on_flow_arrival(view, bg)

    def on_node_done(self, view: SchedulerView, node: int) -> None:
        self.inner.on_node_done(view, node)

    def on_flow_done(self, view: SchedulerView, bg: int) -> None:
        self.inner.on_flow_done(view, bg)

    def on_tick(self, view: SchedulerView) -> None:
        self.inner.on_tick(view)

    def _first_transfer(self, view: SchedulerView) -> np.ndarray:
        if self._first is None:
            dag = view.dag
            comp = np.add.reduceat((dag.kind == COMPUTE).astype(np.int64), dag.job_ptr[:-1]) \
                if dag.n_jobs else np.zeros(0, dtype=np.int64)
            self._first = dag.job_ptr[:-1] + comp
        return self._first

    def allocate(self, view: SchedulerView) -> Allocation:
        f = view.flows
        slot_s = self.book.options.slot_s
        now_slot = math.floor(view.now / slot_s + 1e-9)
        r = np.zeros(len(f))
        first = self._first_transfer(view)
        for k in np.flatnonzero(f.job >= 0):
            bid = self.reserved.get(int(f.job[k]))
            if bid is not None:
                r[k] = self.book.rate(bid, int(f.node[k] - first[f.job[k]]), view.now)
        fixed = r > 0
        cl = view.cluster
        cap_e, cap_i = cl.egress_Bps, cl.ingress_Bps
        if fixed.any():
            # the LP's rounding may reserve a port a hair over its line rate: cut to it
            used_e = np.bincount(f.src[fixed], r[fixed], len(cap_e))
            used_i = np.bincount(f.dst[fixed], r[fixed], len(cap_i))
            cut_e = cap_e / np.maximum(used_e, cap_e)
            cut_i = cap_i / np.maximum(used_i, cap_i)
            r = r * np.minimum(cut_e[f.src], cut_i[f.dst])
            left_e = np.maximum(cap_e - np.bincount(f.src[fixed], r[fixed], len(cap_e)), MIN_LEFT * cap_e)
            left_i = np.maximum(cap_i - np.bincount(f.dst[fixed], r[fixed], len(cap_i)), MIN_LEFT * cap_i)
            key = np.concatenate([left_e, left_i])
            if self._left is None or self._left[0] != now_slot or not np.array_equal(self._left[1], key):
                self._left = (now_slot, key, scale_cluster(cl, left_e / cap_e, left_i / cap_i))
            view = replace(view, cluster=self._left[2])
        # every flow, reserved ones too, shares what the reservations leave: a critical
        # transfer never sends slower than its reservation, and faster where there is room
        alloc = self.inner.allocate(view)
        rates = r + alloc.rates
        until = alloc.valid_until_s
        if any(h.end_slot > now_slot for h in self.book.held.values()):
            until = min(until, (now_slot + 1) * slot_s)  # the reserved rates change at slot bounds
        return Allocation(rates, until)


__all__ = ["Reserved"]
