"""Tests of bench/bench_classes.py: the classes drawn, the rows at a small scale, bad input."""

from __future__ import annotations

import json
import math

from jitsched.bench.bench_classes import (
    ClassesOptions,
    bunched,
    classed_workload,
    main,
    measure,
    measure_shared,
)
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


def test_reservations_admit_more_critical_jobs_sharing_ports_than_exclusivity_and_hold_them():
    # 40 Gbit/s: compute is most of a step, so two jobs' bursts can take turns on a port
    opts = ClassesOptions(loads=(0.9,), n_jobs=24, n_hosts=4, critical=0.6, bps=4e10, slot_s=0.002,
                          critical_gap_s=0.02)
    (row,) = measure_shared(opts)
    assert row["n_critical"] >= 4
    assert row["admitted_lp"] > row["admitted_exclusive"] >= 1
    assert row["critical_over_isolated_max"] <= 1.05
    assert len(row["refused_bottlenecks"]) == row["n_critical"] - row["admitted_lp"]
    assert all(b.split()[1] in ("egress", "ingress") for b in row["refused_bottlenecks"])
    assert math.isfinite(row["normal_p99_slowdown"]) and math.isfinite(row["best_effort_p99_slowdown"])


def test_bunched_moves_only_the_critical_jobs():
    wl = classed_workload(generate_workload(0.5, n_jobs=20, n_hosts=4, seed=1), 0.3, 0.0, seed=1)
    out = bunched(wl, 0.5)
    crit = sorted(j.arrival_s for j in out.jobs if j.job_class == "critical")
    assert crit == [crit[0] + 0.5 * i for i in range(len(crit))] and len(crit) >= 2
    assert [j.arrival_s for j in out.jobs if j.job_class != "critical"] == [
        j.arrival_s for j in wl.jobs if j.job_class != "critical"]


def test_shared_bad_input_is_one_line(capsys):
    assert main(["--shared", "--slot", "0"]) == 2
    assert capsys.readouterr().err.strip() == "bench_classes: --bps, --slot: must be positive; --eps: must be >= 0"
