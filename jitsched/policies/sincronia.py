"""Sincronia (SIGCOMM 2018): bottleneck-select-scale-iterate coflow order, strict priority, work-conserving."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jitsched.dag.model import TRANSFER
from jitsched.errors import ValidationError
from jitsched.optspec import option
from jitsched.plan.alloc import priority_greedy
from jitsched.plan.planner import DEFAULT_SLOT_S
from jitsched.policies.base import (
    Allocation,
    Policy,
    SchedulerView,
    SlotSchedule,
    register_policy,
)
from jitsched.policies.common import (
    check_bg_floor,
    check_slot_s,
    coflow_loads,
    coflow_ranks,
    floored_background_shares,
    ranked_schedule,
    unfinished_transfers,
)

RECOMPUTE = ("events", "arrivals", "flows")
# Where background flows go: each a coflow of its own in the BSSI order (the
# baseline's), or after every job, sharing what the jobs leave max-min fair
# (what the testbed's agents do with traffic the daemon does not rank).
BACKGROUNDS = ("coflows", "last")


def bssi_order(load: np.ndarray, weight: np.ndarray | None = None) -> np.ndarray:
    """Bottleneck-select-scale-iterate: a coflow order, built from the last position backwards.

    Each round: the port with the largest total load of the unplaced coflows
    is the bottleneck; among unplaced coflows with load on it, the one with
    the smallest residual weight / load goes last; that ratio times each
    unplaced coflow's load on the bottleneck is subtracted from its residual
    weight. Coflows with no load left go first, in index order.

    Parameters
    ----------
    load : ndarray, shape (C, P)
        Each coflow's load on each port (seconds of port time).
    weight : ndarray, shape (C,), optional
        Initial weights (default 1).

    Returns
    -------
    ndarray of int64, shape (C,)
        Coflow indices, first to serve first.
    """
    load = np.asarray(load, dtype=np.float64)
    nc = load.shape[0]
    w = np.ones(nc) if weight is None else np.asarray(weight, dtype=np.float64).copy()
    unplaced = np.ones(nc, dtype=bool)
    back: list[int] = []
    empty = ~(load > 0).any(axis=1)
    unplaced &= ~empty
    for _ in range(int(unplaced.sum())):
        b = int(np.argmax(load[unplaced].sum(axis=0)))
        cand = np.flatnonzero(unplaced & (load[:, b] > 0))
        ratio = w[cand] / load[cand, b]
        k = int(np.argmin(ratio))
        c, r = int(cand[k]), float(ratio[k])
        w[unplaced] -= r * load[unplaced, b]
        unplaced[c] = False
        back.append(c)
    return np.concatenate([np.flatnonzero(empty), np.asarray(back[::-1], dtype=np.int64)]).astype(np.int64)


@dataclass(frozen=True)
class SincroniaOptions:
    """:class:`SincroniaPolicy`'s options, checked here."""

    recompute: str = option("events", "when the coflow order is recomputed (see SincroniaPolicy)",
                            choices=RECOMPUTE)
    slot_s: float = option(DEFAULT_SLOT_S, "slot length of the (ranks-only) schedules, seconds")
    background: str = option("coflows", "where background flows go (see SincroniaPolicy)",
                             choices=BACKGROUNDS)
    bg_floor: float = option(0.0, "with background last: share of each port, in [0, 1), background "
                                  "flows are guaranteed while jobs' flows are backlogged on it")

    def __post_init__(self) -> None:
        # checked against the tuples, not the fields' metadata: VarysOptions fixes both fields
        for name, allowed in (("recompute", RECOMPUTE), ("background", BACKGROUNDS)):
            if getattr(self, name) not in allowed:
                raise ValidationError(f"{name}: expected one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        object.__setattr__(self, "slot_s", check_slot_s(self.slot_s))
        object.__setattr__(self, "bg_floor", check_bg_floor(self.bg_floor))


@register_policy
class SincroniaPolicy(Policy):
    """Coflows (all transfers of one DAG job; each background flow alone) ordered by BSSI.

    Rates: coflows in order, and inside a coflow its flows in node order, each
    take min(free egress of its source, free ingress of its destination):
    greedy, preemptive and work-conserving, recomputed at every allocation.

    Parameters
    ----------
    options : SincroniaOptions, optional
        None: the defaults. Its fields:

        - ``recompute`` {"events", "arrivals", "flows"}: when the order is
          recomputed from the coflows' remaining loads: ``events`` at coflow
          arrivals and completions (online Sincronia), ``arrivals`` only at
          arrivals (the public simulator), ``flows`` also at every transfer
          completion;
        - ``slot_s``: slot length of the schedules a daemon asks for
          (:meth:`schedule`), seconds; they carry ranks only, so it sets
          nothing but their grid;
        - ``background`` {"coflows", "last"}: ``coflows`` (default), each
          background flow is a coflow in the order; ``last``, background flows
          after every job, max-min fair among themselves (the testbed's agents;
          ``jitsched.testbed.scenario.predict``);
        - ``bg_floor``: with ``last``, the share of each port, in [0, 1), the
          background flows are guaranteed while jobs' flows are backlogged on
          it (the agents' background floor,
          :func:`jitsched.policies.common.floored_background_shares`; default 0).
    """

    name = "sincronia"
    needs_dag = False  # orders flows and coflows only
    role = "baseline"
    role_rank = 1  # after tictac, the order bench.paper's tables and figures have always used
    Options = SincroniaOptions

    def __init__(self, options: SincroniaOptions | None = None) -> None:
        super().__init__(options)
        self.background = self.options.background
        self.slot_s = self.options.slot_s
        self.recompute = self.options.recompute
        self.bg_floor = self.options.bg_floor
        self._stale = True
        self._job_rank = np.zeros(0, dtype=np.int64)
        self._bg_rank = np.zeros(0, dtype=np.int64)
        self.orderings = 0

    def reset(self, cluster) -> None:
        self.cluster = cluster
        self._stale = True
        self.orderings = 0

    def on_job_arrival(self, view: SchedulerView, job: int) -> None:
        self._stale = True

    def on_flow_arrival(self, view: SchedulerView, bg: int) -> None:
        self._stale = True

    def on_node_done(self, view: SchedulerView, node: int) -> None:
        if view.dag.kind[node] != TRANSFER:
            return
        if self.recompute == "flows":
            self._stale = True
        elif self.recompute == "events" and view.job_done[view.dag.job_of[node]]:
            self._stale = True

    def on_flow_done(self, view: SchedulerView, bg: int) -> None:
        if self.recompute != "arrivals":
            self._stale = True

    def _order(self, load: np.ndarray) -> np.ndarray:
        """The coflow order (first served first) for coflows of ``load`` (C, P): BSSI."""
        return bssi_order(load)

    def _reorder(self, view: SchedulerView) -> None:
        # "last": no background coflow in the order; every one ranks after the jobs
        jobs, bgs, load = coflow_loads(view, background=self.background == "coflows")
        self._job_rank, self._bg_rank = coflow_ranks(self._order(load), view, jobs, bgs)
        self._stale = False
        self.orderings += 1

    def flow_ranks(self, view: SchedulerView) -> np.ndarray:
        """Each flow of ``view.flows``' coflow rank (re-ordering first if due), shape (F,)."""
        f = view.flows
        if self._stale or len(self._job_rank) != view.dag.n_jobs:
            self._reorder(view)
        # a background flow that arrived since the last ordering waits behind ranked coflows
        bg_rank = self._bg_rank[np.maximum(f.bg, 0)] if len(self._bg_rank) else np.zeros(len(f), dtype=np.int64)
        job_rank = self._job_rank[np.maximum(f.job, 0)] if len(self._job_rank) else 0
        return np.where(f.job >= 0, job_rank, bg_rank)

    def allocate(self, view: SchedulerView) -> Allocation:
        """Greedy rates in coflow order, flows in node order inside a coflow (bytes/s)."""
        f = view.flows
        rank = self.flow_ranks(view)
        if len(f) == 0:
            return Allocation(np.zeros(0))
        order = np.lexsort((f.bg, f.node, rank))
        cap_e, cap_i = view.cluster.egress_Bps, view.cluster.ingress_Bps
        if self.background != "last":
            return Allocation(self._rates(f, rank, order, cap_e, cap_i))
        return Allocation(floored_background_shares(lambda e, i: self._rates(f, rank, order, e, i),
                                                    f, cap_e, cap_i, self.bg_floor))

    def _rates(self, f, rank: np.ndarray, order: np.ndarray, cap_e: np.ndarray, cap_i: np.ndarray) -> np.ndarray:
        """Every flow's rate on ports of ``cap_e``/``cap_i`` bytes/s, given each flow's coflow
        ``rank`` and the flows in ``order``: strict priority in that order."""
        return priority_greedy(order, f.src, f.dst, cap_e, cap_i)

    def schedule(self, view: SchedulerView) -> SlotSchedule | None:
        """Every unfinished transfer of the active jobs with its job's rank in BSSI order, for host agents.

        The coflow order of :meth:`allocate`, recomputed from the jobs'
        remaining loads whenever a daemon asks (it asks on arrivals and
        completions, ``recompute="events"``), as one global order of dense
        ranks; a job's transfers share its rank (Sincronia orders coflows,
        not the flows inside one). Background the daemon does not know goes
        after every ranked flow at the agents, as for ``jit``; with
        ``background="coflows"`` announced background flows (``view.bg_ids``)
        are coflows of the order like the jobs.
        """
        self._reorder(view)
        nodes = unfinished_transfers(view)
        nb = len(view.bg_ids) if self.background == "coflows" else 0
        if not len(nodes) and not nb:
            return None
        _, ranks = np.unique(np.r_[self._job_rank[view.dag.job_of[nodes]], self._bg_rank[:nb]],
                             return_inverse=True)
        ranks = ranks.ravel()
        return ranked_schedule(view, nodes, ranks[:len(nodes)], self.slot_s, bg_rank=ranks[len(nodes):])

    def ranks_background(self) -> bool:
        return self.background == "coflows"

    def stats(self) -> dict:
        return {"orderings": self.orderings}
