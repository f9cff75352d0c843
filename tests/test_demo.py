"""Tests of the demo: a tiny run end to end (daemon, pacing agents, model DAG jobs) and its JSON summary."""

from __future__ import annotations

import dataclasses

from jitsched.cli import main
from jitsched.demo import QUICK, demo_jobs, run_demo


def test_tiny_demo_completes_every_job():
    tiny = dataclasses.replace(QUICK, jobs=2, rate_per_s=5.0, byte_scale=0.001, max_compute_s=0.2,
                               models=("lenet", "alexnet"))
    lines = []
    out = run_demo(scale=tiny, say=lines.append)
    assert out["jobs"] == 2 and out["completed"] == 2
    assert 0.0 <= out["lat_hit_rate"] <= 1.0
    assert out["mean_jct_s"] > 0 and out["solve_s_p50"] > 0
    assert any(line.startswith("scale:") for line in lines)
    assert sum("done" in line for line in lines) == 2


def test_jobs_are_scaled_and_poisson():
    jobs, sources = demo_jobs(QUICK, seed=1)
    assert len(jobs) == QUICK.jobs and jobs[0][0] == 0.0
    assert all(b >= a for (a, _), (b, _) in zip(jobs, jobs[1:], strict=False))
    for _, job in jobs:
        assert sum(c.duration_s for c in job.computes) <= QUICK.max_compute_s + 1e-9
        assert len({t.src for t in job.transfers} | {t.dst for t in job.transfers}) >= 2
    assert sources


def test_cli_status_against_missing_daemon_times_out(capsys):
    assert main(["status", "--daemon", "tcp://127.0.0.1:1", "--timeout-s", "0.2", "--json"]) == 1
    assert "no reply" in capsys.readouterr().err
