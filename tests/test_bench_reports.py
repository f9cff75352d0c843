"""bench_reports at a small scale: single-event reports against a daemon process alone and as a replica on etcd."""

from __future__ import annotations

import json

from jitsched.bench import bench_reports


def test_every_report_is_answered_by_both_daemons(capsys):
    assert bench_reports.main(["--jobs", "2", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for mode in ("alone", "etcd"):
        r = out[mode]
        # two jobs of 64 transfers, each reported started and finished
        assert r["reports"] == 2 * 128 and r["errors"] == 0
        assert r["reports_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["daemon_cpu_per_report_ms"] > 0
    assert out["etcd_over_alone_rate"] == out["etcd"]["reports_per_s"] / out["alone"]["reports_per_s"]


def test_bad_arguments_are_refused(capsys):
    assert bench_reports.main(["--jobs", "0"]) == 2
    assert "--jobs and --repeats must be >= 1" in capsys.readouterr().err
