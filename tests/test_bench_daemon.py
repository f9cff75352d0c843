"""bench_daemon's harness at a small size: its receivers see every body the daemon sends."""

from __future__ import annotations

import multiprocessing

import pytest

from jitsched.bench import bench_daemon


@pytest.mark.parametrize("in_process", [True, False])
def test_fanout_counts_every_body_sent_and_received(in_process):
    # 8 agents: "changed" sends the two busy hosts (h0 -> h1) a body, "all" every agent one
    out = bench_daemon.fanout(8, 1, agents_in_process=in_process, receivers=2)
    assert out["changed"]["hosts"] == 2 and out["all"]["hosts"] == 8
    for part in ("changed", "all"):
        f = out[part]
        # reception follows the install, which follows the plan
        assert 0.0 < f["from_install"] <= f["from_plan"] < 10.0, f
    assert not multiprocessing.active_children()
