"""Tests of the demo: a tiny run end to end (daemon, pacing agents, model DAG jobs) and its JSON summary."""

from __future__ import annotations

import dataclasses
import time

import pytest

from jitsched.cli import main
from jitsched.daemon import Daemon, create_policy
from jitsched.demo import QUICK, SUMMARY_KEYS, demo_exit_code, demo_jobs, demo_problems, run_demo
from jitsched.policies.jit import JitPolicy


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


def test_demo_verdict_fails_on_unfinished_jobs_and_failed_plans():
    ok = {"jobs": 2, "completed": 2, "plans_failed": 0}
    assert demo_problems(ok) == [] and demo_exit_code(ok) == 0
    assert demo_problems(ok | {"plans_failed": 3}) == ["3 plans failed"]
    assert demo_exit_code(ok | {"plans_failed": 3}) == 1
    assert demo_exit_code(ok | {"completed": 1}) == 1
    assert demo_problems({"jobs": 2, "completed": 1, "plans_failed": 1}) == [
        "1 of 2 jobs did not complete", "1 plans failed"]


class FailsOnce(JitPolicy):
    """The first plan of the process takes 0.3 s and fails; every later one works."""

    failed = False

    def schedule(self, view):
        if not FailsOnce.failed:
            FailsOnce.failed = True
            time.sleep(0.3)
            raise RuntimeError("the first plan fails")
        return super().schedule(view)


@pytest.mark.alone
def test_demo_with_a_failed_plan_exits_non_zero_and_times_successful_plans_only(monkeypatch):
    import jitsched.demo as demo

    def daemon(cfg):
        base = create_policy(cfg)
        pol = FailsOnce.__new__(FailsOnce)
        pol.__dict__.update(base.__dict__)
        # planning "full": every plan goes through schedule(), so the first one fails
        # whatever the timing (under the default incremental planning both arrivals could
        # be admitted by increments, and the run end with no full plan: seen once in CI
        # on a slow machine, plans_failed 0)
        return Daemon(cfg.with_(planner_process=False, plan_retry_s=0.05, planning="full"), policy=pol)

    monkeypatch.setattr(FailsOnce, "failed", False)
    monkeypatch.setattr(demo, "Daemon", daemon)
    # jobs of a second or so: the failed plan and the retry happen while they run
    small = dataclasses.replace(QUICK, jobs=2, rate_per_s=5.0, byte_scale=0.005, max_compute_s=1.5,
                                models=("vgg16", "lenet"))
    lines: list[str] = []
    out = run_demo(scale=small, say=lines.append)
    assert out["completed"] == 2 and out["plans_failed"] == 1 and out["planner"] == "thread"
    assert demo_exit_code(out) == 1
    assert "FAILED: 1 plans failed" in lines and "last plan error: RuntimeError: the first plan fails" in lines
    # the failed plan's 0.3 s counts in no solve-time figure
    assert out["details"]["solve_s"] and max(out["details"]["solve_s"]) < 0.3
    assert out["solve_s_p50"] < 0.3


def test_cli_demo_exit_status_and_json_follow_the_verdict(monkeypatch, capsys):
    import json

    import jitsched.demo as demo

    summary = {"jobs": 2, "completed": 2, "plans_failed": 0, "planner": "process", "lat_hit_rate": 1.0,
               "mean_jct_s": 1.0, "solve_s_p50": 0.01, "details": {}}
    monkeypatch.setattr(demo, "run_demo", lambda **kw: summary)
    assert main(["demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plans_failed"] == 0
    summary["plans_failed"] = 4
    assert main(["demo", "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {k: summary[k] for k in SUMMARY_KEYS}
