"""Tests of bench/bench_floor.py: the simulator's side of the sweep at a small scale, the choice, bad flags."""

from __future__ import annotations

import json

import pytest

from jitsched.bench import bench_floor


def point(stall: float | None, share: float | None, ratio: float = 1.6) -> dict:
    return {"background_max_stall_s": stall, "goodput_share_of_none": share, "jct_ratio_none_over_jit": ratio}


def test_the_smallest_floor_meeting_the_goals_on_every_scenario_is_chosen():
    result = {"floors": [0.0, 0.05, 0.1, 0.2], "scenarios": {
        "a": {"testbed": {"0": point(1.8, 0.95), "0.05": point(0.6, 0.93), "0.1": point(0.3, 0.94),
                          "0.2": point(0.2, 0.96)}},
        "b": {"testbed": {"0": point(0.9, 0.80), "0.05": point(0.7, 0.88), "0.1": point(0.4, 0.91),
                          "0.2": point(None, 0.97)}}}}
    # 0: a file stalls 1.8 s on a; 0.05: 88 % on b; 0.2: a run without a stall figure
    assert bench_floor.choose_floor(result) == 0.1
    assert bench_floor.goals(point(0.99, 0.9, 1.5)) == {"jct_ratio": True, "goodput_share": True, "max_stall": True}
    assert bench_floor.goals(point(1.0, 0.89, 1.49)) == {"jct_ratio": False, "goodput_share": False,
                                                         "max_stall": False}
    assert bench_floor.choose_floor(result, bench_floor.no_stall) == 0.05  # the stalls alone
    result["scenarios"]["b"]["testbed"]["0.1"] = point(1.2, 0.95)
    assert bench_floor.choose_floor(result) is None


def test_the_simulators_sweep_writes_its_json_and_figure(tmp_path, capsys):
    out = tmp_path / "floor"
    assert bench_floor.main(["--sim-only", "--scenario", "quick", "--floors", "0.2", "0", "--out", str(out)]) == 0
    saved = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert saved["floors"] == [0.0, 0.2]
    sim = saved["scenarios"]["quick"]["simulator"]
    # the floor costs the DL jobs: their mean JCT grows with it
    assert sim["0.2"]["mean_jct_s"] > sim["0"]["mean_jct_s"]
    assert 0.5 < sim["0"]["goodput_share_of_none"] <= 1.05
    assert "quick" in capsys.readouterr().out
    # more floors added to the saved result, its points kept
    assert bench_floor.main(["--sim-only", "--scenario", "quick", "--floors", "0.1", "--extend",
                             str(out.with_suffix(".json")), "--out", str(out)]) == 0
    more = json.loads(out.with_suffix(".json").read_text())
    assert more["floors"] == [0.0, 0.1, 0.2]
    assert set(more["scenarios"]["quick"]["simulator"]) == {"0", "0.1", "0.2"}
    assert more["scenarios"]["quick"]["simulator"]["0.2"] == sim["0.2"]


@pytest.mark.parametrize("argv, message", [
    (["--floors", "1"], "background_floor: must be within [0, 1), got 1.0"),
    (["--floors", "-0.1"], "background_floor: must be within [0, 1)"),
    (["--runs", "0"], "--runs: at least 1, got 0"),
    (["--scenario", "nope"], "unknown scenario 'nope'"),
    (["--prefix", "Bad"], "prefix: bad prefix"),
    (["--extend", "/nonexistent/floor.json"], "--extend /nonexistent/floor.json: not a bench_floor result"),
])
def test_bad_flags_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_floor.main(["--sim-only", "--out", "-", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_one_floor_alternates_jit_and_plain_tcp_and_sums_up_their_medians(monkeypatch):
    order = []

    def fake_runs(scenario, options, runs, say):
        assert runs == 1
        order.append(options.policy)
        jit = options.policy == "jit"
        return [{"mean_jct_s": 6.0 if jit else 10.0, "background_mbit_mean": 47.0 if jit else 50.0,
                 "background_max_stall_s": 0.4 if jit else 0.3, "cpu_busy_during_jobs": 0.5,
                 "agents_failed": {}, "completed": 6, "jobs": 6}]

    monkeypatch.setattr(bench_floor, "testbed_runs", fake_runs)
    out = bench_floor.sweep(["quick"], [0.05], 3, 0, "floor", lambda msg: None)
    assert order == ["none", "jit", "jit", "none", "none", "jit"]
    point = out["scenarios"]["quick"]["testbed"]["0.05"]
    assert point["jct_ratio_none_over_jit"] == pytest.approx(10 / 6)
    assert point["goodput_share_of_none"] == pytest.approx(0.94)
    assert point["goals_met"] == {"jct_ratio": True, "goodput_share": True, "max_stall": True}
    assert out["chosen_floor"] == out["no_stall_floor"] == 0.05
