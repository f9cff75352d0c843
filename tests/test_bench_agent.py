"""bench_agent: a many-transfer job alone with and without its agents, and one registration's re-apply."""

from __future__ import annotations

import json

from bench import bench_agent


def test_inception_alone_walks_its_agents_schedules_per_slot_not_per_registration(capsys):
    assert bench_agent.main(["--repeat", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["job"].startswith("inception") and out["transfers"] == 851
    # every transfer registers with its sender's agent; the schedule is walked once per slot
    # and schedule, so far fewer times than the transfers registered (851 before session 19)
    assert 0 < out["schedule_walks_per_run"] < out["transfers"] / 4
    assert out["jct_s_agents"] > 0 and out["jct_s_no_agents"] > 0
    assert set(out["reapply_ms"]) == {str(n) for n in bench_agent.SCHEDULE_FLOWS}
