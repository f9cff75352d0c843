"""bench_flood's harness at a small size: a daemon process, agents and a flooding client all run,
and the figures it reports come from them."""

from __future__ import annotations

import multiprocessing

from jitsched.bench import bench_flood


def test_a_short_flood_reports_its_figures(tmp_path):
    out = bench_flood.flood(tmp_path, seconds=2.0, n_agents=4)
    assert out["flood_agents"] == 4 and out["flood_agents_down"] == 0 and out["flood_agents_failed"] == 0
    assert 0 < out["flood_reports_answered"] <= out["flood_reports_sent"] and out["flood_report_errors"] == 0
    assert out["flood_report_bytes"] > 64_000 and out["flood_report_events"] == 4096
    assert out["flood_status_n"] > 0 and 0 < out["flood_status_p50_s"] <= out["flood_status_p99_s"]
    assert out["flood_daemon_serving_after"] is True
    assert not multiprocessing.active_children()
