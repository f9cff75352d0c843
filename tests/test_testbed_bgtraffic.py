"""Tests of jitsched.testbed.bgtraffic that need no namespaces: the receiver's per-read record."""

from __future__ import annotations

from jitsched.testbed.bgtraffic import FlowRecord


def test_bytes_between_counts_reads_in_the_half_open_window():
    rec = FlowRecord("f", ("198.18.0.1", 1), 0.0, t=[1.0, 2.0, 3.0, 4.0], n=[10, 20, 40, 80])
    assert rec.bytes_between(2.0, 4.0) == 60  # 2.0 in, 4.0 out
    assert rec.bytes_between(0.0, 10.0) == 150
    assert rec.bytes_between(5.0, 6.0) == 0


def test_bytes_between_ignores_a_read_caught_half_recorded():
    """The reader appends t before n; a sampler in between must not fail (it raised IndexError)."""
    rec = FlowRecord("f", ("198.18.0.1", 1), 0.0, t=[1.0, 2.0, 3.0], n=[10, 20])
    assert rec.bytes_between(0.0, 10.0) == 30
