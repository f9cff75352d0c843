"""Tests of the simulator's virtual clock and event heap: order, deterministic ties, no going back."""

from __future__ import annotations

import math
import random

import pytest

from jitsched.sim.clock import EventQueue, VirtualClock


def test_events_come_out_by_time_then_rank_then_insertion():
    q = EventQueue()
    q.push(2.0, 0, "late")
    q.push(1.0, 5, "early, high rank")
    q.push(1.0, 1, "early, low rank, first")
    q.push(1.0, 1, "early, low rank, second")
    q.push(0.5, 9, "earliest")
    out = [q.pop() for _ in range(len(q))]
    assert [p for _, _, p in out] == ["earliest", "early, low rank, first", "early, low rank, second",
                                      "early, high rank", "late"]
    assert [(t, r) for t, r, _ in out] == [(0.5, 9), (1.0, 1), (1.0, 1), (1.0, 5), (2.0, 0)]


def test_ties_never_compare_payloads():
    """Payloads that cannot be ordered (dicts, objects) share a time and rank without error."""
    q = EventQueue()
    first, second = {"job": 1}, {"job": 2}
    q.push(3.0, 0, first)
    q.push(3.0, 0, second)
    assert q.pop()[2] is first and q.pop()[2] is second


def test_peek_time_and_empty_queue():
    q = EventQueue()
    assert q.peek_time() == math.inf and len(q) == 0
    q.push(4, 0, None)
    q.push(1.5, 0, None)
    assert q.peek_time() == 1.5 and len(q) == 2
    q.pop()
    assert q.peek_time() == 4.0
    q.pop()
    with pytest.raises(IndexError):
        q.pop()


@pytest.mark.parametrize("seed", range(5))
def test_pops_are_sorted_by_time_rank_and_insertion_whatever_the_push_order(seed):
    rng = random.Random(seed)
    q = EventQueue()
    pushed = []
    for i in range(200):  # few distinct times and ranks: many ties
        t, rank = rng.choice([0.0, 0.1, 0.2, 1.0]), rng.randrange(3)
        q.push(t, rank, i)
        pushed.append((t, rank, i))
    assert [q.pop() for _ in range(len(q))] == sorted(pushed)


def test_virtual_clock_jumps_forward_and_never_back():
    clock = VirtualClock(1.0)
    assert clock.now() == 1.0
    clock.wait_until(3.5)
    assert clock.now() == 3.5
    clock.wait_until(3.5)  # standing still is allowed
    assert clock.now() == 3.5
    with pytest.raises(ValueError, match="cannot go back"):
        clock.wait_until(3.0)
    assert clock.now() == 3.5
