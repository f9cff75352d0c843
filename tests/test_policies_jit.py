"""Tests of the JIT policy's re-plan triggers: on arrival, periodic and drift-triggered."""

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.model import Background, Cluster, Compute, Job, Transfer, Workload
from jitsched.sim import Simulator

CLUSTER = Cluster.uniform(2)


def push_job(i: int, arrival_s: float) -> Job:
    """Read t0 -> compute c0 (1 s) -> gradient push t1 -> c2: t1's release depends on c0's real time."""
    return Job(f"j{i}", (Compute("c0", "h1", 1.0), Compute("c2", "h0", 0.5)),
               (Transfer("t0", "h0", "h1", 1.25e8), Transfer("t1", "h1", "h0", 1.25e8)),
               (("t0", "c0"), ("c0", "t1"), ("t1", "c2")), arrival_s)


def run(jobs, seed=0, noise=0.0, **opts):
    sim = Simulator(Workload(CLUSTER, tuple(jobs)), "jit-paper", seed=seed, compute_noise=noise,
                    policy_options=dict(alpha=1.0, **opts))
    res = sim.run()
    return res, sim.policy


def test_periodic_replan_spacing():
    res, pol = run([push_job(0, 0.0), push_job(1, 0.0)], resolve_period_s=1.0)
    times = [s["t_s"] for s in pol.solve_log]
    # two jobs of ~5 s: the arrival plan plus periodic ones, never closer than the period
    assert len(times) >= 3
    assert np.all(np.diff(times) >= 1.0 - 1e-9)
    assert np.all(np.isfinite(res.jct_s))


def test_drift_triggers_replan_only_when_enabled():
    # With noise, c0 takes longer than its estimate on this seed: t1 is released
    # after its planned slots, i.e. the plan drifts.
    jobs = [push_job(0, 0.0), push_job(1, 0.0)]
    res_off, off = run(jobs, seed=1, noise=0.5, replan_on_drift=False)
    res_on, on = run(jobs, seed=1, noise=0.5, replan_on_drift=True, drift_min_interval_s=0.2)
    assert off.drift_events >= 1 and off.stats()["solves"] == 1
    assert on.drift_events >= 1 and on.stats()["solves"] == 2
    first = on.solve_log[0]
    replan_t = on.solve_log[1]["t_s"]
    # the re-plan comes after the first plan's slots for t1 have passed
    assert replan_t > first["t_s"] + 0.2
    # the same noisy durations either way (same seed): both runs finish every job
    assert np.all(np.isfinite(res_off.jct_s)) and np.all(np.isfinite(res_on.jct_s))


def test_no_drift_without_noise():
    _, pol = run([push_job(0, 0.0), push_job(1, 0.0)], replan_on_drift=True)
    assert pol.drift_events == 0 and pol.stats()["solves"] == 1
    assert pol.stats()["lat_misses_scheduled"] == 0


def test_replan_on_arrival_switch():
    jobs = [push_job(0, 0.0), push_job(1, 1.0)]
    _, every = run(jobs)
    _, once = run(jobs, replan_on_arrival=False)
    assert [s["t_s"] for s in every.solve_log] == [0.0, 1.0]
    # without arrival re-plans the second job's transfers share the leftover
    assert [s["t_s"] for s in once.solve_log] == [0.0]
    assert once.solve_log[0]["jobs"] == 1


def test_simulation_ignores_the_wall_clock_time_limit():
    # a wall-clock budget no solve fits in: a simulation must not notice it, or its
    # results would depend on the machine's speed (the iteration limit is the budget there)
    jobs = [push_job(i, 0.25 * i) for i in range(4)]
    res, pol = run(jobs)
    res_tiny, tiny = run(jobs, time_limit_s=1e-9)
    assert [s["status"] for s in tiny.solve_log] == ["optimal"] * 4
    np.testing.assert_array_equal(res_tiny.jct_s, res.jct_s)
    _, cut = run(jobs, iteration_limit=1)
    assert all(s["status"] == "fallback" for s in cut.solve_log)


def test_wall_clock_views_pass_the_time_limit(monkeypatch):
    import jitsched.policies.jit as jit
    from jitsched.daemon.state import PlanRequest, build_view

    seen = []
    real = jit.plan_subset

    def spy(*args, **kw):
        seen.append((kw["time_limit_s"], kw["iteration_limit"]))
        return real(*args, **kw)

    monkeypatch.setattr(jit, "plan_subset", spy)
    view, _ = build_view(PlanRequest(1, 0.0, ((push_job(0, 0.0), {}, {}),), (), ()), CLUSTER)
    pol = jit.JitPolicy(alpha=1.0, time_limit_s=2.5, iteration_limit=1000)
    pol.reset(CLUSTER)
    pol.on_job_arrival(view, 0)
    assert pol.schedule(view) is not None
    assert seen == [(2.5, 1000)]


# ---------------------------------------------------------------- dl_share


def test_dl_share_is_validated():
    from jitsched.policies.jit import JitPolicy

    for bad in (0.0, -0.1, 1.5, True, "half", float("nan")):
        with pytest.raises(ValidationError, match="dl_share"):
            JitPolicy(dl_share=bad)
    assert JitPolicy(dl_share=1).dl_share == 1.0


def big_job(arrival_s: float = 0.0) -> Job:
    # one 250 MB read (2 s on a whole 1 Gbit/s port), then a short compute
    return Job("dl", (Compute("c", "h1", 0.1),), (Transfer("t", "h0", "h1", 2.5e8),), (("t", "c"),), arrival_s)


def test_dl_share_caps_what_plans_promise_per_port():
    bg = (Background("file", "h0", "h1", 5e8, 0.0),)
    for share in (1.0, 0.4):
        sim = Simulator(Workload(CLUSTER, (big_job(),), bg), "jit-paper",
                        policy_options={"alpha": 1.0, "dl_share": share})
        sim.run()
        lp = sim.policy.plan.lp
        cap = CLUSTER.egress_Bps[0]
        peak = max(lp.rates(k).max() for k in range(len(lp.start_slot)))
        if share == 1.0:
            assert peak > 0.5 * cap  # the whole port is plannable: the plan takes more than 0.4
        else:
            assert peak <= share * cap * (1 + 1e-6)


def test_dl_share_gives_background_a_floor_and_dl_backfills_an_idle_port():
    def run_with(share, background):
        wl = Workload(CLUSTER, (big_job(),), background)
        res = Simulator(wl, "jit-paper", policy_options={"alpha": 1.0, "dl_share": share}).run()
        return float(res.jct_s[0]), (float(res.bg_slowdown[0]) if len(res.bg_slowdown) else None)

    # a file shorter than the DL transfer: its whole life falls within the transfer's
    bg = (Background("file", "h0", "h1", 1e8, 0.0),)
    jct_full, slow_full = run_with(1.0, bg)
    jct_cap, slow_cap = run_with(0.4, bg)
    # the file keeps at least 60 % of the port while the DL transfer runs: it ends sooner,
    # the DL job later (its planned floor is 40 % of the port)
    assert slow_cap < slow_full - 0.1
    assert jct_cap > jct_full + 0.5
    # alone on the port, DL backfills what the background does not use: same JCT either way
    alone_full, _ = run_with(1.0, ())
    alone_cap, _ = run_with(0.4, ())
    assert alone_cap == pytest.approx(alone_full, abs=0.11)  # within one 0.1 s slot
