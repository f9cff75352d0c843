"""bench_agent: a many-transfer job alone with and without its agents, and one registration's re-apply."""

from __future__ import annotations

import json

from jitsched.bench import bench_agent


def test_inception_alone_under_pacing_agents_never_walks_their_schedules(capsys):
    assert bench_agent.main(["--repeat", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["job"].startswith("inception") and out["transfers"] == 851
    # every transfer registers with its sender's agent; pacing agents look up the flows
    # registered with them and never walk the schedule (not once per registration)
    assert out["schedule_walks_per_run"] == 0
    assert out["jct_s_agents"] > 0 and out["jct_s_no_agents"] > 0
    assert {b: set(v) for b, v in out["reapply_ms"].items()} == \
        {b: {str(n) for n in bench_agent.SCHEDULE_FLOWS} for b in ("pacing", "record")}
