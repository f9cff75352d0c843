"""Reserved rates laid onto a daemon schedule: the larger of the policy's rates and the reservation's, off the leftover."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.daemon.reservations import with_reservations
from jitsched.policies.base import SlotSchedule
from tests.dags import cluster

CL = cluster(4)  # 1e9 bytes/s per port


def schedule() -> SlotSchedule:
    # slot 0 at 0.05 s, 0.1-s slots; a ranked flow with no rates and a planned one
    flows = [("j", "t", 0, 1, 0, np.zeros(0)), ("k", "u", 0, 2, 1, np.array([5e7, 5e7])),
             ("n", "v", 3, 1, 0, np.array([1e8]))]
    left = np.full((4, 2), 1e9)
    left[0, 1] -= 5e7
    return SlotSchedule(0.05, 0.1, flows, left, np.full((4, 2), 1e9), prio={("j", "t"): 0})


def test_reserved_flows_take_the_larger_rate_per_slot_and_the_leftover_loses_what_they_add():
    reserved = {("j", "t"): (0.0, 0.04, np.full(7, 1e8)),  # 0-0.28 s on a 0.04-s grid
                ("k", "u"): (0.15, 0.1, np.array([2e7, 9e7]))}
    got = with_reservations(schedule(), reserved, CL)
    by = {(f[0], f[1]): f for f in got.flows}
    # each schedule slot takes the reservation at its middle: 0.1, 0.2 s in, 0.3 s past it
    assert by[("j", "t")][4] == 0 and by[("j", "t")][5].tolist() == [1e8, 1e8, 0.0]
    # the policy's own 5e7 stays where the reservation asks less
    assert by[("k", "u")][4] == 1 and by[("k", "u")][5].tolist() == [5e7, 9e7]
    assert by[("n", "v")][5].tolist() == [1e8]  # not reserved: untouched
    assert got.prio == {("j", "t"): 0}
    # three slots now; the ranked flow's 1e8 and the planned one's extra 4e7 are off h0's egress
    assert got.leftover_egress.shape == (4, 3)
    assert got.leftover_egress[0].tolist() == pytest.approx([1e9 - 1e8, 1e9 - 5e7 - 1e8, 1e9 - 4e7])
    assert got.leftover_ingress[1].tolist() == pytest.approx([1e9 - 1e8, 1e9 - 1e8, 1e9])
    assert got.leftover_ingress[2].tolist() == pytest.approx([1e9, 1e9, 1e9 - 4e7])


def test_nothing_reserved_is_the_same_schedule():
    s = schedule()
    assert with_reservations(s, {}, CL) is s
    assert with_reservations(None, {("j", "t"): (0.0, 0.1, np.ones(1))}, CL) is None
    assert with_reservations(s, {("x", "y"): (0.0, 0.1, np.ones(1))}, CL) is s


def ranks(epoch_s: float) -> SlotSchedule:
    # ranks alone (the default jit's daemon schedule): no rates, no leftover
    return SlotSchedule(epoch_s, 0.1, [("j", "t", 0, 1, 0, np.zeros(0)), ("n", "v", 3, 1, 0, np.zeros(0))],
                        np.zeros((4, 0)), np.zeros((4, 0)), prio={("j", "t"): 0, ("n", "v"): 1})


def test_a_schedule_of_ranks_alone_moves_onto_the_reservations_slots():
    # reserved 0.3-0.4 s at 1e8 and 0.4-0.5 s at 5e8; the plan made at 0.34 s
    reserved = {("j", "t"): (0.3, 0.1, np.array([1e8, 5e8]))}
    got = with_reservations(ranks(0.34), reserved, CL)
    assert got.epoch_s == pytest.approx(0.3)
    by = {(f[0], f[1]): f for f in got.flows}
    # each reserved rate in its own slot, from the slot holding the plan's instant
    assert by[("j", "t")][4] == 0 and by[("j", "t")][5].tolist() == [1e8, 5e8]
    assert got.leftover_egress[0].tolist() == pytest.approx([1e9 - 1e8, 1e9 - 5e8])
    assert got.prio == {("j", "t"): 0, ("n", "v"): 1}
    # on the plan's own grid (an increment's: keep_epoch) the slot 0.39-0.49 s takes the
    # 0.4-0.5 s rate, 0.01 s early, and the last 0.01 s of the 1e8 is gone
    kept = with_reservations(ranks(0.39), reserved, CL, keep_epoch=True)
    assert kept.epoch_s == 0.39
    assert {(f[0], f[1]): f for f in kept.flows}[("j", "t")][5].tolist() == [5e8, 0.0]
    assert with_reservations(ranks(0.39), reserved, CL).epoch_s == pytest.approx(0.3)


def test_a_schedule_with_rates_or_another_grid_keeps_its_epoch():
    reserved = {("j", "t"): (0.3, 0.1, np.array([1e8]))}
    assert with_reservations(schedule(), reserved, CL).epoch_s == 0.05  # rates of its own
    off = {("j", "t"): (0.32, 0.1, np.array([1e8]))}  # a reservation off the 0.1-s grid from 0
    assert with_reservations(ranks(0.34), off, CL).epoch_s == 0.34
    assert with_reservations(ranks(0.34), {("j", "t"): (0.3, 0.04, np.ones(3))}, CL).epoch_s == 0.34
    # nothing of it reserved: the schedule as it was
    s = ranks(0.34)
    assert with_reservations(s, {("x", "y"): (0.3, 0.1, np.ones(1))}, CL) is s
