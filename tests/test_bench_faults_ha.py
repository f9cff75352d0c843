"""The leader kill -9 cycles of bench_faults --ha at a tiny scale: one kill, real replicas on a real etcd."""

from __future__ import annotations

from jitsched.bench.faults_ha import leader_kills


def test_one_leader_kill_fails_over_without_losing_a_job(tmp_path):
    out = leader_kills(1, 0, tmp_path, runners=1, gap_s=(1.0, 1.0))
    assert out["leader_kills"] == 1 and out["failover_censored"] == 0
    assert out["ha_jobs_submitted"] >= 1 and out["ha_jobs_lost"] == 0
    assert out["fenced_schedules_installed"] == 0
    # the lease (2 s) lapses, a follower takes over, reads the state and every agent hears it
    assert 1.0 < out["failover_s_p50"] == out["failover_s_max"] < 10.0
