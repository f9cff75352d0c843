"""Tests of the JIT policy's re-plan triggers: on arrival, periodic and drift-triggered."""

import numpy as np

from jitsched.model import Cluster, Compute, Job, Transfer, Workload
from jitsched.sim import Simulator

CLUSTER = Cluster.uniform(2)


def push_job(i: int, arrival_s: float) -> Job:
    """Read t0 -> compute c0 (1 s) -> gradient push t1 -> c2: t1's release depends on c0's real time."""
    return Job(f"j{i}", (Compute("c0", "h1", 1.0), Compute("c2", "h0", 0.5)),
               (Transfer("t0", "h0", "h1", 1.25e8), Transfer("t1", "h1", "h0", 1.25e8)),
               (("t0", "c0"), ("c0", "t1"), ("t1", "c2")), arrival_s)


def run(jobs, seed=0, noise=0.0, **opts):
    sim = Simulator(Workload(CLUSTER, tuple(jobs)), "jit", seed=seed, compute_noise=noise,
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
