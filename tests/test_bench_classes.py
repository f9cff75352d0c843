"""Tests of bench/bench_classes.py: the classes drawn, the rows at a small scale, bad input."""

from __future__ import annotations

import json
import math

from bench.bench_classes import ClassesOptions, classed_workload, main, measure
from jitsched.workloads.paper import generate_workload


def test_classed_workload_marks_the_shares_and_changes_nothing_else():
    wl = generate_workload(0.5, n_jobs=40, n_hosts=6, seed=3)  # DL jobs and files together
    n = len(wl.jobs)
    out = classed_workload(wl, 0.1, 0.2, seed=3)
    cls = [j.job_class for j in out.jobs]
    assert (cls.count("critical"), cls.count("best-effort")) == (round(0.1 * n), round(0.2 * n))
    assert cls.count("critical") >= 1 and cls.count("normal") == n - round(0.1 * n) - round(0.2 * n)
    assert [j.id for j in out.jobs] == [j.id for j in wl.jobs] and out.background == wl.background
    assert all(a.transfers == b.transfers and a.arrival_s == b.arrival_s for a, b in zip(out.jobs, wl.jobs, strict=True))


def test_critical_jobs_keep_their_isolated_jct_under_jit_at_a_small_scale():
    rows = measure(ClassesOptions(loads=(0.9,), n_jobs=30, n_hosts=6, critical=0.2))
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"jit", "sincronia"} and by["jit"]["n_critical"] >= 2
    assert by["jit"]["critical_over_isolated_max"] <= 1.05
    assert by["jit"]["critical_over_isolated_max"] <= by["sincronia"]["critical_over_isolated_max"]
    assert all(math.isfinite(r["best_effort_p99_slowdown"]) and r["best_effort_p99_slowdown"] >= 1.0 - 1e-9
               for r in rows)


def test_json_line_and_bad_input(capsys):
    assert main(["--loads", "0.5", "--jobs", "6", "--hosts", "4", "--policies", "jit", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["load"], r["policy"]) for r in rows] == [(0.5, "jit")]
    assert main(["--loads", "half"]) == 2
    assert capsys.readouterr().err.strip() == "bench_classes: --loads: expected comma-separated numbers, got 'half'"
    assert main(["--critical", "0.7", "--best-effort", "0.5"]) == 2
    assert "sum to at most 1" in capsys.readouterr().err
