"""bench_recurring at a small scale: a daemon process with agents takes recurring jobs' iterations."""

from __future__ import annotations

import json

import pytest

from jitsched.bench import bench_recurring


@pytest.mark.alone
def test_recurring_jobs_against_a_daemon_at_one_message_per_iteration(capsys):
    # three hosts: the second job's parameter server shares the first one's worker host
    assert bench_recurring.main(["--jobs", "2", "--iterations", "21", "--rate", "20", "--hosts", "3",
                                 "--models", "lenet,alexnet", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["jobs"] == 2 and out["hosts"] == 3 and out["iterations"] == 42
    assert out["messages_per_iteration"] == 1.0  # ranks in force: no schedule pushed per iteration
    assert out["iterations_unranked"] == 0 and not out["iteration_errors"]
    assert out["estimate_error_after_20"] is not None and out["estimate_error_after_20"] < 0.5
    assert out["daemon_cpu_per_iteration_ms"] > 0 and out["ranks_latency_p99_ms"] > 0


def test_recurring_jobs_against_a_replica_on_etcd(capsys):
    # the daemon as one replica on a real etcd: its iterations' counts go to etcd too
    assert bench_recurring.main(["--jobs", "2", "--iterations", "21", "--rate", "20", "--models", "lenet",
                                 "--etcd", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["etcd"] is True and out["iterations"] == 42 and not out["iteration_errors"]
    assert out["messages_per_iteration"] == 1.0


def test_convergence_table_and_bad_arguments(capsys):
    assert bench_recurring.main(["--convergence", "--models", "lenet", "--iterations", "3",
                                 "--sim-policies", "jit", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["convergence"]
    assert [(r["model"], r["declared"]) for r in rows] == [("lenet", 0.5), ("lenet", 2.0)]
    assert all(r["iteration_s_oracle"] > 0 for r in rows)
    assert bench_recurring.main(["--models", "nope"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert bench_recurring.main(["--hosts", "1"]) == 2
    assert "--hosts 0 or >= 2" in capsys.readouterr().err
