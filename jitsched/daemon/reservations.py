"""A daemon schedule with the critical jobs' reserved rates as their flows' floor and off the leftover."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from jitsched.dag.model import Cluster
from jitsched.policies.base import SlotSchedule


def with_reservations(sched: SlotSchedule | None, reserved: dict, cluster: Cluster,
                      keep_epoch: bool = False) -> SlotSchedule | None:
    """``sched`` with each reserved flow's rates raised to its reservation on ``sched``'s grid.

    A flow's rates become the larger of the policy's and the reservation's in each
    slot (each schedule slot takes the reserved rate at its middle; a schedule of
    ranks alone first moves its epoch back onto the reservations' slot boundaries), and every
    port's leftover loses what the reservation adds: the agents enforce the
    reserved rates as the flow's floor, and nothing unscheduled takes them.

    Parameters
    ----------
    sched : SlotSchedule or None
    reserved : dict of (job id, transfer id) to (start_s, slot_s, rates)
        Each reserved transfer's rates (bytes/s) per ``slot_s`` from ``start_s``, on
        ``sched``'s clock (:meth:`jitsched.plan.reserve.ReservationBook.flows`).
    cluster : Cluster
    keep_epoch : bool, optional
        Keep ``sched``'s epoch however it lies: an increment merged onto the schedule
        in force shares that schedule's grid.

    Returns
    -------
    SlotSchedule or None
    """
    if sched is None or not reserved:
        return sched
    given, sched = sched, sched if keep_epoch else _on_reserved_grid(sched, reserved)
    s, ep = sched.slot_s, sched.epoch_s
    flows = list(sched.flows)
    adds: list[tuple[int, int, int, np.ndarray]] = []  # src, dst, first slot, added rates
    for i, (job, tid, src, dst, start, rates) in enumerate(flows):
        got = reserved.get((job, tid))
        if got is None:
            continue
        r_start, r_slot, r = got
        j0 = max(0, math.floor((r_start - ep) / s + 1e-9))
        j1 = math.ceil((r_start + len(r) * r_slot - ep) / s - 1e-9)
        if j1 <= j0:
            continue
        k = np.floor((ep + (np.arange(j0, j1) + 0.5) * s - r_start) / r_slot).astype(np.int64)
        want = np.where((k >= 0) & (k < len(r)), r[np.clip(k, 0, len(r) - 1)], 0.0)
        lo, hi = (min(j0, int(start)), max(j1, int(start) + len(rates))) if len(rates) else (j0, j1)
        old = np.zeros(hi - lo)
        old[int(start) - lo:int(start) - lo + len(rates)] = rates
        new = old.copy()
        new[j0 - lo:j1 - lo] = np.maximum(old[j0 - lo:j1 - lo], want)
        flows[i] = (job, tid, src, dst, lo, new)
        adds.append((src, dst, lo, new - old))
    if not adds:
        return given
    n = max(sched.leftover_egress.shape[1], max(lo + len(a) for _, _, lo, a in adds))
    le = _widened(sched.leftover_egress, n, cluster.egress_Bps)
    li = _widened(sched.leftover_ingress, n, cluster.ingress_Bps)
    for src, dst, lo, a in adds:
        le[src, lo:lo + len(a)] -= a
        li[dst, lo:lo + len(a)] -= a
    return replace(sched, flows=flows, leftover_egress=np.maximum(le, 0.0), leftover_ingress=np.maximum(li, 0.0))


def _on_reserved_grid(sched: SlotSchedule, reserved: dict) -> SlotSchedule:
    """``sched`` started at the reservations' slot boundary at or before its epoch, when it
    has no rates of its own (ranks alone) and the same slot length as they have.

    A plan starts when it is made, anywhere inside a reservation's slot; a schedule slot
    then straddles two reserved slots and carries one of them up to half a slot early or
    late. Ranks have no grid of their own to keep, so such a schedule takes the
    reservations' and each reserved rate reaches the agents in its own slot.
    """
    s = sched.slot_s
    if sched.leftover_egress.shape[1] or sched.leftover_ingress.shape[1] or any(len(f[5]) for f in sched.flows):
        return sched
    if any(abs(r_slot - s) > 1e-12 or abs(r_start / r_slot - round(r_start / r_slot)) > 1e-9
           for r_start, r_slot, _ in reserved.values()):
        return sched  # not on one grid of this slot length from 0
    ep = math.floor(sched.epoch_s / s + 1e-9) * s
    return sched if ep == sched.epoch_s else replace(sched, epoch_s=ep)


def _widened(left: np.ndarray, n: int, line: np.ndarray) -> np.ndarray:
    out = np.repeat(np.asarray(line, dtype=np.float64)[:, None], n, axis=1)
    out[:, :left.shape[1]] = left
    return out


__all__ = ["with_reservations"]
