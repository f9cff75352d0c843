"""Tests of jitsched.testbed.bgtraffic that need no namespaces: the receiver's per-read record and stalls."""

from __future__ import annotations

import time

import pytest

from jitsched.testbed.bgtraffic import FlowRecord, Receiver, connect, longest_stall_s, send_bytes


def test_bytes_between_counts_reads_in_the_half_open_window():
    rec = FlowRecord("f", ("198.18.0.1", 1), 0.0, t=[1.0, 2.0, 3.0, 4.0], n=[10, 20, 40, 80])
    assert rec.bytes_between(2.0, 4.0) == 60  # 2.0 in, 4.0 out
    assert rec.bytes_between(0.0, 10.0) == 150
    assert rec.bytes_between(5.0, 6.0) == 0


def test_bytes_between_ignores_a_read_caught_half_recorded():
    """The reader appends t before n; a sampler in between must not fail (it raised IndexError)."""
    rec = FlowRecord("f", ("198.18.0.1", 1), 0.0, t=[1.0, 2.0, 3.0], n=[10, 20])
    assert rec.bytes_between(0.0, 10.0) == 30


def test_longest_stall_is_the_largest_gap_between_reads():
    # reads every 50 ms, a 1.3 s hole after 2.0 s, then reads again until 4.0 s
    reads = [0.05 * k for k in range(1, 41)] + [3.3 + 0.05 * k for k in range(15)]
    assert longest_stall_s(reads, 0.0) == pytest.approx(1.3)
    assert longest_stall_s(reads, 0.0, end_s=4.0) == pytest.approx(1.3)
    # the first read 2 s after the accept, the last one 1.5 s before the end
    assert longest_stall_s([2.0, 2.1], 0.0) == pytest.approx(2.0)
    assert longest_stall_s([0.1, 0.2], 0.0, end_s=1.7) == pytest.approx(1.5)
    assert longest_stall_s([], 5.0) == 0.0
    assert longest_stall_s([], 5.0, end_s=6.25) == pytest.approx(1.25)


def test_the_receivers_record_keeps_the_same_stall_as_it_reads():
    reads = [0.05 * k for k in range(1, 41)] + [3.3 + 0.05 * k for k in range(15)]
    rec = FlowRecord("f", ("198.18.0.1", 1), 0.0)
    for t in reads:
        rec.progressed(t)
    assert rec.max_stall_s == pytest.approx(longest_stall_s(reads, 0.0))
    # an open stream stalling now counts; a closed one does not go on stalling
    assert rec.stall_s(now=rec.last_s + 2.5) == pytest.approx(2.5)
    rec.end_s = rec.last_s
    assert rec.stall_s(now=rec.last_s + 2.5) == pytest.approx(1.3)


def test_a_receiver_measures_a_pause_of_its_sender():
    rx = Receiver("127.0.0.1", 0, timestamps=False)  # 64-kB reads, as the testbed's files have them
    try:
        s = connect("127.0.0.1", rx.port, "paused")
        s.sendall(b"\0" * 256 * 1024)
        time.sleep(0.6)
        send_bytes(s, 256 * 1024)
        assert rx.wait(["paused"], 10.0)
        rec = rx.flows["paused"]
        assert rec.bytes == 512 * 1024
        assert 0.55 <= rec.max_stall_s < 1.0
        assert rec.stall_s(time.monotonic() + 5.0) == rec.max_stall_s  # ended: no stall goes on
    finally:
        rx.close()


def test_a_file_of_a_fractional_byte_count_ends_its_stream():
    # a file's size scaled to a link rate (5 Gbit at 33.3 Mbit/s: 20812499.999999996 bytes)
    # need not be whole: the sender still sends its last byte and closes the stream
    import threading

    rx = Receiver("127.0.0.1", 0, timestamps=False)
    stop = threading.Event()
    try:
        s = connect("127.0.0.1", rx.port, "scaled")
        sender = threading.Thread(target=send_bytes, args=(s, 300_000.5, stop), daemon=True)
        sender.start()
        sender.join(10.0)
        ended = not sender.is_alive()
        stop.set()  # the sender gives up if it is still going
        sender.join(5.0)
        assert ended, "the sender was still sending 10 s after its last whole byte"
        assert rx.wait(["scaled"], 10.0)
        assert rx.flows["scaled"].bytes >= 300_000.5
    finally:
        stop.set()
        rx.close()
