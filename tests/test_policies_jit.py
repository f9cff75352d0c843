"""Tests of the JIT policy's re-plan triggers: on arrival, periodic and drift-triggered."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload
from jitsched.errors import ValidationError
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
    real = jit.plan_jobs

    def spy(dag, cluster, options, **kw):
        seen.append((options.time_limit_s, options.iteration_limit))
        return real(dag, cluster, options, **kw)

    monkeypatch.setattr(jit, "plan_jobs", spy)
    view, _ = build_view(PlanRequest(1, 0.0, ((push_job(0, 0.0), {}, {}),), (), ()), CLUSTER)
    pol = jit.JitPolicy(jit.JitOptions(alpha=1.0, time_limit_s=2.5, iteration_limit=1000))
    pol.reset(CLUSTER)
    pol.on_job_arrival(view, 0)
    assert pol.schedule(view) is not None
    assert seen == [(2.5, 1000)]


# ---------------------------------------------------------------- dl_share


def test_dl_share_is_validated():
    from jitsched.policies.jit import JitOptions, JitPolicy

    for bad in (0.0, -0.1, 1.5, True, "half", float("nan")):
        with pytest.raises(ValidationError, match="dl_share"):
            JitPolicy(JitOptions(dl_share=bad))
    assert JitPolicy(JitOptions(dl_share=1)).dl_share == 1.0


@pytest.mark.parametrize("option, bad", [
    ("resolve_period_s", "x"), ("resolve_period_s", [1]), ("resolve_period_s", 0.0),
    ("resolve_period_s", float("nan")), ("drift_min_interval_s", "x"), ("drift_min_interval_s", None),
    ("drift_min_interval_s", -1.0), ("drift_min_interval_s", float("nan")), ("drift_min_interval_s", False),
    ("backfill", "yes"), ("replan_on_drift", 1), ("replan_on_arrival", None),
    ("slot_s", 1e-9), ("slot_s", 0.0009),
    ("be_age", -1.0), ("be_age", float("nan")), ("be_age", "ten"), ("be_age", True),
    ("lend_slack", -0.1), ("lend_slack", 0.0), ("lend_slack", float("nan")), ("lend_slack", "some"), ("lend_slack", False),
])
def test_each_option_of_the_wrong_type_or_range_is_named(option, bad):
    from jitsched.policies.jit import JitOptions, JitPolicy

    with pytest.raises(ValidationError, match=f"^{option}: "):
        JitPolicy(JitOptions(**{option: bad}))


def test_jit_takes_one_options_object_and_jit_paper_declares_its_own_defaults():
    from jitsched.policies.jit import JitOptions, JitPaperOptions, JitPaperPolicy, JitPolicy

    o = JitOptions(alpha=0.5, slot_s=0.2, leftover="fair", bg_weight=2, job_exp=0)
    pol = JitPolicy(o)
    assert pol.options is o and pol.plan_options == o.plan_options()
    assert (pol.alpha, pol.slot_s, pol.leftover, pol.bg_weight, pol.job_exp) == (0.5, 0.2, "fair", 2.0, 0.0)
    assert isinstance(o.bg_weight, float) and pol.plan_options.trans_estimate == "ordered"
    # the paper's defaults are its options class's; the rest are jit's
    paper = JitPaperPolicy()
    assert isinstance(paper.options, JitPaperOptions) and (paper.alpha, paper.leftover) == (0.4, "fair")
    assert {k: v for k, v in vars(JitPaperOptions()).items() if k not in ("alpha", "leftover")} == {
        k: v for k, v in vars(JitOptions()).items() if k not in ("alpha", "leftover")}
    assert JitPaperPolicy(JitPaperOptions(alpha=0.7)).alpha == 0.7
    with pytest.raises(TypeError, match="JitPaperPolicy takes a JitPaperOptions, got dict"):
        JitPaperPolicy({"alpha": 0.7})


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


# ---------------------------------------------------------------- priority leftover (the default)

C = 1.25e8  # bytes/s of a 1 Gbit/s port


def one_transfer_job(name: str, nbytes: float, src: str = "h0", dst: str = "h1", arrival_s: float = 0.0) -> Job:
    return Job(name, (Compute("c", dst, 0.0),), (Transfer("t", src, dst, nbytes),), (("t", "c"),), arrival_s)


def test_default_jit_serves_the_job_with_fewer_bytes_left_first():
    # two jobs on one host pair at once: shortest first finishes B at 1 s and A
    # at 3 s; fair sharing (tensorflow) would finish B at 2 s
    wl = Workload(CLUSTER, (one_transfer_job("a", 2 * C), one_transfer_job("b", C)))
    jit = Simulator(wl, "jit").run()
    tf = Simulator(wl, "tensorflow").run()
    assert jit.jct_s == pytest.approx([3.0, 1.0])
    assert tf.jct_s == pytest.approx([3.0, 2.0])


def test_default_jit_orders_a_jobs_transfers_by_need():
    # t1 feeds c1 (0.5 s), t2 feeds c2, which also waits for c1. Sent in need
    # order, t1 lands at 1 s, c1 runs 1-1.5, t2 lands at 2 s, c2 runs 2-2.5:
    # JCT 2.5 s. Fair sharing lands both at 2 s and c2 ends at 3 s. t2 is
    # listed first so that node order alone would get it wrong.
    job = Job("j", (Compute("c1", "h1", 0.5), Compute("c2", "h1", 0.5)),
              (Transfer("t2", "h0", "h1", C), Transfer("t1", "h0", "h1", C)),
              (("t1", "c1"), ("t2", "c2"), ("c1", "c2")), 0.0)
    wl = Workload(CLUSTER, (job,))
    assert Simulator(wl, "jit").run().jct_s[0] == pytest.approx(2.5)
    assert Simulator(wl, "tensorflow").run().jct_s[0] == pytest.approx(3.0)


def test_a_receiver_takes_one_jobs_transfers_from_several_senders_in_need_order():
    # a worker (h2) of a job sharded over two servers: c1 needs 3 s of bytes from h1,
    # then c2 needs 1 s from h0, then 0.5 s of gradients go back to each server (four
    # host pairs: the job lends no slack). Need order: the large read lands at 3 s, c1
    # runs 3-4, the small one lands at 4 s, c2 runs 4-4.5, the pushes share h2's egress
    # to 5.5 s. Ranked by each sender's bytes left the small read went first: c1 at 4-5
    # and the job at 6.5 s, as under fair sharing.
    job = Job("j", (Compute("c1", "h2", 1.0), Compute("c2", "h2", 0.5)),
              (Transfer("small", "h0", "h2", C), Transfer("big", "h1", "h2", 3 * C),
               Transfer("g0", "h2", "h0", C / 2), Transfer("g1", "h2", "h1", C / 2)),
              (("big", "c1"), ("small", "c2"), ("c1", "c2"), ("c2", "g0"), ("c2", "g1")), 0.0)
    wl = Workload(Cluster.uniform(3), (job,))
    assert Simulator(wl, "jit").run().jct_s[0] == pytest.approx(5.5)
    assert Simulator(wl, "tensorflow").run().jct_s[0] == pytest.approx(6.5)


def test_ingress_components_put_one_jobs_groups_into_a_host_together():
    from jitsched.plan.priority import ingress_components

    # groups: a h0->h2, a h1->h2 (together), a h2->h0 (alone), b h3->h2 (another job),
    # a h2->h2 (stays on its host), no transfer (job -1)
    comp = ingress_components(np.array([0, 0, 0, 1, 0, -1]), np.array([0, 1, 2, 3, 2, 0]),
                              np.array([2, 2, 0, 2, 2, 0]))
    assert comp[0] == comp[1] and len(set(comp.tolist())) == 5


@pytest.mark.parametrize("file_bytes,file_first", [(1e9, True), (2e9, False)])
def test_background_ranks_against_jobs_by_smiths_rule(file_bytes, file_first):
    # a DL job with 0.8 GB on h0->h1 and a file on the same pair, both at 0.
    # The file's key is remaining * (size / 1 GB) * 0.7: 0.7e9 < 0.8e9 for a
    # 1 GB file (it goes first), 2.8e9 > 0.8e9 for a 2 GB file (it goes after).
    job = one_transfer_job("j", 0.8e9)
    wl = Workload(CLUSTER, (job,), (Background("f", "h0", "h1", file_bytes, 0.0),))
    res = Simulator(wl, "jit").run()
    dl, f = 0.8e9 / C, file_bytes / C
    if file_first:
        assert res.bg_jct_s[0] == pytest.approx(f) and res.jct_s[0] == pytest.approx(f + dl)
    else:
        assert res.jct_s[0] == pytest.approx(dl) and res.bg_jct_s[0] == pytest.approx(dl + f)


def test_bg_weight_moves_the_file_behind_the_job():
    wl = Workload(CLUSTER, (one_transfer_job("j", 0.8e9),), (Background("f", "h0", "h1", 1e9, 0.0),))
    res = Simulator(wl, "jit", policy_options={"bg_weight": 1.0}).run()  # key 1e9 > 0.8e9
    assert res.jct_s[0] == pytest.approx(0.8e9 / C)
    with pytest.raises(ValidationError, match="bg_weight"):
        Simulator(wl, "jit", policy_options={"bg_weight": 0.0})
    with pytest.raises(ValidationError, match="leftover"):
        Simulator(wl, "jit", policy_options={"leftover": "lottery"})


def test_a_job_alone_gets_its_isolated_jct_under_background_it_outranks():
    # a small job next to a large file on the same pair: the job's key (0.1 GB)
    # beats the file's (5 GB * 5 * 0.7), so the job runs as if alone
    job = one_transfer_job("j", 1e8)
    alone = Simulator(Workload(CLUSTER, (job,)), "jit").run().jct_s[0]
    with_bg = Simulator(Workload(CLUSTER, (job,), (Background("f", "h0", "h1", 5e9, 0.0),)), "jit").run()
    assert alone == pytest.approx(1e8 / C)
    assert with_bg.jct_s[0] == pytest.approx(alone)


class _Checked:
    """Wraps a policy: asserts every allocation is work-conserving and honours reservations."""

    def __init__(self, policy):
        self.p, self.allocations = policy, 0

    def __getattr__(self, name):
        return getattr(self.p, name)

    def allocate(self, view):
        a = self.p.allocate(view)
        f, cl = view.flows, view.cluster
        h = len(cl)
        used_e = np.bincount(f.src, weights=a.rates, minlength=h)
        used_i = np.bincount(f.dst, weights=a.rates, minlength=h)
        full_e = used_e >= cl.egress_Bps * (1 - 1e-9)
        full_i = used_i >= cl.ingress_Bps * (1 - 1e-9)
        # work conservation: a flow below line rate has a saturated port
        assert np.all((full_e[f.src] | full_i[f.dst]) | (a.rates >= np.minimum(
            cl.egress_Bps[f.src], cl.ingress_Bps[f.dst]) * (1 - 1e-9)))
        pol = self.p
        if len(pol._plan_nodes) and len(f):
            # every planned transfer in its slot gets at least its reservation
            # (reservations fit: the LP plans within capacity)
            k = pol._slot(view.now)
            for i in np.flatnonzero(f.node >= 0):
                v = int(f.node[i])
                s = int(pol._p_start[v])
                if s >= 0 and 0 <= k - s < pol._p_len[v]:
                    floor = pol._rates[pol._p_off[v] + k - s]
                    assert a.rates[i] >= floor * (1 - 1e-6) - 1e-3
        self.allocations += 1
        return a


def random_ps_job(rng, i: int, n_hosts: int) -> Job:
    """A parameter-server iteration: reads feed a forward chain, then gradient pushes."""
    ps, w = (f"h{x}" for x in rng.choice(n_hosts, 2, replace=False))
    n = int(rng.integers(1, 4))
    comps = [Compute(f"f{k}", w, float(rng.uniform(0, 0.3))) for k in range(n)]
    comps.append(Compute("b", w, float(rng.uniform(0, 0.3))))
    tr = [Transfer(f"r{k}", ps, w, float(rng.uniform(1e6, 2e8))) for k in range(n)]
    tr += [Transfer(f"g{k}", w, ps, float(rng.uniform(1e6, 2e8))) for k in range(n)]
    edges = [(f"r{k}", f"f{k}") for k in range(n)] + [(f"f{k}", f"f{k + 1}") for k in range(n - 1)]
    edges += [(f"f{n - 1}", "b")] + [("b", f"g{k}") for k in range(n)]
    return Job(f"j{i}", tuple(comps), tuple(tr), tuple(edges), float(rng.uniform(0, 2)))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 1.0]))
def test_priority_leftover_is_work_conserving_and_keeps_reservations(seed, alpha):
    from jitsched.policies import make_policy

    rng = np.random.default_rng(seed)
    cl = Cluster.uniform(4)
    jobs = tuple(random_ps_job(rng, i, 4) for i in range(3))
    bg = tuple(Background(f"b{i}", f"h{a}", f"h{(a + 1 + d) % 4}", float(rng.uniform(1e7, 3e8)),
                          float(rng.uniform(0, 3)))
               for i, (a, d) in enumerate(zip(rng.integers(0, 4, 3), rng.integers(0, 3, 3), strict=True)))
    pol = _Checked(make_policy("jit", alpha=alpha))
    res = Simulator(Workload(cl, jobs, bg), pol).run()
    assert pol.allocations > 0 and np.all(np.isfinite(res.jct_s))


def test_background_key_is_the_same_at_a_tenth_of_the_link_rate_and_bytes():
    # The 1 GB file ranks ahead of the 0.8 GB job at 1 Gbit/s (key 0.7e9 < 0.8e9);
    # on 100 Mbit/s links with a tenth of every size the order must not change: the
    # file first, so the job ends after both (a byte-count reference put every file
    # of the 100 Mbit/s testbed ahead of every job)
    slow = Cluster.uniform(2, bps=1e8)
    wl = Workload(slow, (one_transfer_job("j", 0.8e8),), (Background("f", "h0", "h1", 1e8, 0.0),))
    res = Simulator(wl, "jit").run()
    c = 1.25e7
    assert res.bg_jct_s[0] == pytest.approx(1e8 / c) and res.jct_s[0] == pytest.approx(1.8e8 / c)


def test_infinite_bg_weight_puts_background_after_every_job():
    # a 10 MB file against a 0.8 GB job: Smith's rule sends the file first (key
    # 0.01 * 0.7e7 bytes), bg_weight inf after the job, as the host agents do
    wl = Workload(CLUSTER, (one_transfer_job("j", 0.8e9),), (Background("f", "h0", "h1", 1e7, 0.0),))
    first = Simulator(wl, "jit").run()
    last = Simulator(wl, "jit", policy_options={"bg_weight": float("inf")}).run()
    assert first.bg_jct_s[0] == pytest.approx(1e7 / C)
    assert last.jct_s[0] == pytest.approx(0.8e9 / C)
    assert last.bg_jct_s[0] == pytest.approx((0.8e9 + 1e7) / C)
    with pytest.raises(ValidationError, match="bg_weight"):
        Simulator(wl, "jit", policy_options={"bg_weight": float("nan")})


def test_infinite_bg_weight_shares_the_leftover_among_background_flows():
    # a 40 MB and a 10 MB file behind a 0.8 GB job on one pair: after the job
    # they share the port evenly, as TCP does in the agents' one background FIFO,
    # so the 10 MB file ends 20 MB-times later (at C/2), the 40 MB one after 50 MB.
    # Served first come, first served (the tie of two inf keys) the 40 MB file
    # would end first, at +40 MB, and the 10 MB one at +50 MB
    wl = Workload(CLUSTER, (one_transfer_job("j", 0.8e9),),
                  (Background("big", "h0", "h1", 4e7, 0.0), Background("small", "h0", "h1", 1e7, 0.0)))
    res = Simulator(wl, "jit", policy_options={"bg_weight": float("inf")}).run()
    assert res.jct_s[0] == pytest.approx(0.8e9 / C)
    assert res.bg_jct_s[1] == pytest.approx(0.82e9 / C)
    assert res.bg_jct_s[0] == pytest.approx(0.85e9 / C)


def _view(jobs, cluster, now=0.0):
    from jitsched.daemon.state import PlanRequest, build_view

    return build_view(PlanRequest(1, now, tuple((j, {}, {}) for j in jobs), (), ()), cluster)[0]


def _ranks_by_name(jobs, cluster):
    """A fresh default jit's priority ranks of ``jobs``: {(job, transfer): rank}, its view, nodes and ranks."""
    from jitsched.policies.jit import JitPolicy

    pol = JitPolicy()
    pol.reset(cluster)
    view = _view(jobs, cluster)
    nodes, ranks = pol.priority_ranks(view)
    got = {(view.dag.job_ids[view.dag.job_of[n]], view.dag.node_ids[n]): int(r)
           for n, r in zip(nodes, ranks, strict=True)}
    return got, pol, view, nodes, ranks


def two_transfer_job(name: str, a: float, b: float, src: str, dst: str) -> Job:
    return Job(name, (Compute("c", dst, 0.0),),
               (Transfer("t1", src, dst, a), Transfer("t2", src, dst, b)), (("t1", "c"), ("t2", "c")), 0.0)


def test_priority_ranks_order_job_pairs_by_bytes_left_across_hosts():
    from jitsched.policies.jit import JitOptions, JitPolicy

    cluster = Cluster.uniform(4)
    # on h0: job b has 30 MB for h2, job a 150 MB (two transfers) for h1, job c
    # 500 MB for h1; on h3, job d 900 MB for h1. One order for every host: b 0,
    # a 1 (both of its transfers), c 2, d 3 -- so h1's ingress, fed by h0 and
    # h3, serves a, c, then d (with a rank per source host d was 0, first there)
    jobs = [two_transfer_job("a", 1e8, 5e7, "h0", "h1"), one_transfer_job("b", 3e7, "h0", "h2"),
            one_transfer_job("c", 5e8, "h0", "h1"), one_transfer_job("d", 9e8, "h3", "h1")]
    got, pol, *_ = _ranks_by_name(jobs, cluster)
    assert got == {("a", "t1"): 1, ("a", "t2"): 1, ("b", "t"): 0, ("c", "t"): 2, ("d", "t"): 3}
    # half of c sent: 250 MB left, still behind a's 150 MB; then 100 MB left: ahead of a
    view = _view(jobs, cluster)
    c = view.dag.node_ids.index("t", int(view.dag.job_ptr[2]))
    view.remaining[c] = 2.5e8
    assert pol.priority_ranks(view)[1][list(pol.priority_ranks(view)[0]).index(c)] == 2
    view.remaining[c] = 1e8
    assert pol.priority_ranks(view)[1][list(pol.priority_ranks(view)[0]).index(c)] == 1
    # the schedule lists every unfinished transfer with its rank and no rates (alpha 0)
    sched = pol.schedule(_view(jobs, cluster))
    assert sched.prio == got and all(len(f[5]) == 0 for f in sched.flows)
    # increments: ranked (alpha 0) yes; with reservations under the priority leftover, no
    assert pol.plans_increments() and not JitPolicy(JitOptions(alpha=0.4)).plans_increments()


def test_priority_ranks_give_one_jobs_groups_into_a_host_its_largest_key():
    from jitsched.policies.jit import group_ranks

    # job a reads 10 MB from h0 and 300 MB from h1 on h2; job b 100 MB from h3 on h2. Ranked
    # by each sender's bytes left a's 10 MB went first; as one, a ranks by its 300 MB: b
    # first, then a's two groups, level (the receiver shares its ingress between them)
    cluster = Cluster.uniform(4)
    a = Job("a", (Compute("c", "h2", 0.0),), (Transfer("t0", "h0", "h2", 1e7), Transfer("t1", "h1", "h2", 3e8)),
            (("t0", "c"), ("t1", "c")), 0.0)
    got, pol, view, nodes, ranks = _ranks_by_name([a, one_transfer_job("b", 1e8, "h3", "h2")], cluster)
    assert got == {("b", "t"): 0, ("a", "t0"): 1, ("a", "t1"): 1}
    dag = view.dag
    scratch = group_ranks(dag.job_of[nodes], dag.src[nodes].astype(np.int64), dag.dst[nodes].astype(np.int64),
                          view.remaining[nodes], 4, egress=np.full(4, 1.25e8), job_exp=pol.job_exp,
                          job_scale=pol._job_scale)
    assert scratch.tolist() == ranks.tolist()


def test_ranked_increment_places_new_jobs_after_the_base_in_their_own_order():
    from jitsched.policies.jit import JitPolicy

    cluster = Cluster.uniform(4)
    pol = JitPolicy()
    pol.reset(cluster)
    old = [one_transfer_job("x", 1e9, "h0", "h1"), one_transfer_job("y", 2e9, "h2", "h3")]
    base = pol.schedule(_view(old, cluster))
    assert sorted(base.prio.values()) == [0, 1]
    # on top of it: a (150 MB, two transfers to h1) and b (30 MB): b before a, both after x, y
    new = [two_transfer_job("a", 1e8, 5e7, "h0", "h1"), one_transfer_job("b", 3e7, "h0", "h2")]
    busy = np.zeros(4, dtype=np.int64)
    inc = pol.schedule_increment(_view(new, cluster, now=0.5), base, busy, busy)
    assert inc.prio == {("b", "t"): 2, ("a", "t1"): 3, ("a", "t2"): 3}
    assert (inc.epoch_s, inc.slot_s) == (base.epoch_s, base.slot_s)
    assert {(f[0], f[1]): (f[2], f[3], f[4], len(f[5])) for f in inc.flows} == {
        ("b", "t"): (0, 2, 0, 0), ("a", "t1"): (0, 1, 0, 0), ("a", "t2"): (0, 1, 0, 0)}
    # on no base: ranked from 0, as a joint plan of them alone would rank them
    alone = pol.schedule_increment(_view(new, cluster), None, busy, busy)
    assert alone.prio == {("b", "t"): 0, ("a", "t1"): 1, ("a", "t2"): 1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3),
                          st.floats(1e3, 1e9), st.floats(0.0, 1.0)), min_size=1, max_size=12),
       st.sampled_from([0.0, 1.0]))
def test_group_ranks_agree_with_priority_ranks(spec, job_exp):
    # the from-scratch ranks (increments) and the policy's kept ones (joint plans) agree
    from jitsched.policies.jit import JitOptions, JitPolicy, group_ranks

    cluster = Cluster.uniform(4)
    jobs = []
    for j, (a, b, c, size, _) in enumerate(spec):
        src, dst = f"h{a}", f"h{(a + 1 + b) % 4}"
        ts = tuple(Transfer(f"t{k}", src, dst, size / (k + 1)) for k in range(c + 1))
        jobs.append(Job(f"j{j}", (Compute("c", dst, 0.0),), ts, tuple((t.id, "c") for t in ts), 0.0))
    view = _view(jobs, cluster)
    for j, (*_, frac) in enumerate(spec):  # some bytes of each job's first transfer sent
        first = int(view.dag.job_ptr[j]) + view.dag.node_ids[int(view.dag.job_ptr[j]):].index("t0")
        view.remaining[first] = max(view.dag.size[first] * (1 - frac), 1.0)
    pol = JitPolicy(JitOptions(job_exp=job_exp))
    pol.reset(cluster)
    nodes, ranks = pol.priority_ranks(view)
    dag = view.dag
    again = group_ranks(dag.job_of[nodes], dag.src[nodes], dag.dst[nodes], view.remaining[nodes], 4,
                        cluster.egress_Bps, job_exp)
    assert again.tolist() == ranks.tolist()


def test_job_exp_puts_a_small_job_before_a_big_jobs_small_pair():
    # job 0 (LeNet-like): 13 MB on h0 -> h1; job 1: 8 MB on h0 -> h2 and 100 MB on h3 -> h1.
    # Bytes left per pair (job_exp 0): job 1's 8 MB pair first. Smith with the jobs' bytes
    # left (job_exp 1, 1 GB/s, BG_REF_S 8 s): keys 13e6 * 13e6 / 8e9 = 2.1e4 for job 0,
    # 8e6 * 108e6 / 8e9 = 1.08e5 and 100e6 * 108e6 / 8e9 = 1.35e6 for job 1's pairs.
    from jitsched.policies.jit import group_ranks

    job, src, dst = np.array([0, 1, 1]), np.array([0, 0, 3]), np.array([1, 2, 1])
    rem = np.array([13e6, 8e6, 100e6])
    egress = np.full(4, 1e9)
    assert group_ranks(job, src, dst, rem, 4).tolist() == [1, 0, 2]
    assert group_ranks(job, src, dst, rem, 4, egress, 1.0).tolist() == [0, 1, 2]



def test_the_default_ranks_push_a_small_job_before_a_big_jobs_small_pair():
    # The hand case above through the ranks the daemon pushes, with the policy's defaults
    # (job_exp 1.75): the 13 MB job first, then the big job's 8 MB pair, then its 100 MB pair.
    # job_exp 0 would rank the 8 MB pair first (8 < 13 MB left on the pair).
    from jitsched.policies.jit import DEFAULT_JOB_EXP, JitOptions, JitPolicy

    cluster = Cluster.uniform(4)
    small = one_transfer_job("small", 13e6, "h0", "h1")
    big = Job("big", (Compute("c1", "h1", 0.0), Compute("c2", "h2", 0.0)),
              (Transfer("t1", "h0", "h2", 8e6), Transfer("t2", "h3", "h1", 100e6)),
              (("t1", "c2"), ("t2", "c1")), 0.0)
    got = {}
    for pol in (JitPolicy(), JitPolicy(JitOptions(job_exp=0.0))):
        pol.reset(cluster)
        got[pol.job_exp] = pol.schedule(_view([small, big], cluster)).prio
    assert got[DEFAULT_JOB_EXP] == {("small", "t"): 0, ("big", "t1"): 1, ("big", "t2"): 2}
    assert got[0.0] == {("big", "t1"): 0, ("small", "t"): 1, ("big", "t2"): 2}


def test_priority_schedule_keeps_the_lp_rates_of_planned_transfers_as_floors():
    from jitsched.policies.jit import JitOptions, JitPolicy

    cluster = Cluster.uniform(4)
    jobs = [two_transfer_job("a", 1e8, 5e7, "h0", "h1"), one_transfer_job("b", 3e7, "h0", "h2")]
    pol = JitPolicy(JitOptions(alpha=1.0))
    pol.reset(cluster)
    sched = pol.schedule(_view(jobs, cluster))
    # every transfer planned: its LP rates carry its bytes, and it still has its rank
    assert sched.prio == {("a", "t1"): 1, ("a", "t2"): 1, ("b", "t"): 0}
    sent = {(f[0], f[1]): float(np.sum(f[5])) * sched.slot_s for f in sched.flows}
    assert sent == pytest.approx({("a", "t1"): 1e8, ("a", "t2"): 5e7, ("b", "t"): 3e7}, rel=1e-6)
    assert sched.leftover_egress.shape[1] > 0 and sched.late == []


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([0.0, 1.0]), st.sampled_from([0.5, np.inf]),
       st.sampled_from([0.0, 1.0]), st.booleans())
def test_priority_kernel_runs_bit_identical_to_the_numpy_order(seed, alpha, bg_weight, job_exp, classes):
    # The default policy's order runs in kernels over the groups' first flows
    # (jitsched.plan.priority.GroupPriority, its tiers of classes and lenders, and
    # flow_lenders): whole simulations with the numpy references in their place give
    # the same JCTs bit for bit.
    from jitsched.plan import priority
    from jitsched.policies import jit as jit_module
    from jitsched.policies import make_policy
    from jitsched.policies.jit import BG_REF_S, DRIFT_RTOL

    rng = np.random.default_rng(seed)
    cl = Cluster.uniform(4)
    jobs = tuple(random_ps_job(rng, i, 4) for i in range(4))
    if classes:  # three tiers of classes, each split by lending
        jobs = (classed(jobs[0], "critical"), jobs[1], jobs[2], classed(jobs[3], "best-effort"))
    bg = tuple(Background(f"b{i}", f"h{a}", f"h{(a + 1 + d) % 4}", float(rng.uniform(1e7, 3e8)),
                          float(rng.uniform(0, 3)))
               for i, (a, d) in enumerate(zip(rng.integers(0, 4, 3), rng.integers(0, 3, 3), strict=True)))
    wl = Workload(cl, jobs, bg)

    def reference(self, src, dst, node, job, bg, remaining, free_e, free_i, *, in_range=False, tier=None):
        return priority.group_priority_reference(src, dst, node, job, bg, remaining, self.size, self.need,
                                                 self.group, self.pair_left, self.bg_bytes, self.egress,
                                                 BG_REF_S, bg_weight, DRIFT_RTOL, self.n_jobs, free_e, free_i,
                                                 self.job_left, self.job_exp, self.job_scale, tier=tier)

    got = Simulator(wl, make_policy("jit", alpha=alpha, bg_weight=bg_weight, job_exp=job_exp)).run()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(priority.GroupPriority, "rates", reference)
        mp.setattr(jit_module, "flow_lenders", priority.flow_lenders_reference)
        want = Simulator(wl, make_policy("jit", alpha=alpha, bg_weight=bg_weight, job_exp=job_exp)).run()
    np.testing.assert_array_equal(got.jct_s, want.jct_s)
    np.testing.assert_array_equal(got.bg_jct_s, want.bg_jct_s)


# ---------------------------------------------------------------- classes


def classed(job: Job, job_class: str) -> Job:
    from dataclasses import replace

    return replace(job, job_class=job_class)


def test_a_critical_job_behind_a_long_normal_job_gets_its_isolated_jct():
    # a normal job of 3 s on h0->h1 from 0; at 1 s a critical job of 4 s on the same
    # port. Without classes the normal job's 2 s left go first (critical JCT 6 s);
    # critical first, it runs alone: JCT 4 s, its isolated JCT, and the normal job waits
    big = one_transfer_job("big", 3 * C)
    crit = one_transfer_job("crit", 4 * C, arrival_s=1.0)
    plain = Simulator(Workload(CLUSTER, (big, crit)), "jit").run()
    assert plain.jct_s == pytest.approx([3.0, 6.0])
    res = Simulator(Workload(CLUSTER, (big, classed(crit, "critical"))), "jit").run()
    assert res.jct_s == pytest.approx([7.0, 4.0])
    # sincronia ignores classes
    sin = [Simulator(Workload(CLUSTER, (big, c)), "sincronia").run().jct_s for c in (crit, classed(crit, "critical"))]
    assert sin[0] == pytest.approx(sin[1])


@pytest.mark.parametrize("seed", [0, 1])
def test_one_class_for_every_job_gives_the_classless_jcts(seed):
    # all critical (or all best-effort, never aging) and no background flows (they rank
    # with the normal class): one class, the same order, the same rates
    from jitsched.workloads.paper import generate_workload

    wl = generate_workload(n_jobs=12, n_hosts=4, load=0.7, seed=seed)
    wl = Workload(wl.cluster, wl.jobs)
    base = Simulator(wl, "jit").run().jct_s
    for cls, opts in (("critical", {}), ("best-effort", {"be_age": float("inf")})):
        w = Workload(wl.cluster, tuple(classed(j, cls) for j in wl.jobs))
        assert np.array_equal(Simulator(w, "jit", policy_options=opts).run().jct_s, base)


def test_best_effort_goes_last_and_ages_into_normal():
    # a best-effort job of 1 s and a normal one of 2 s on one port at 0. Never aging,
    # best-effort waits for the normal job: 2 s, then 3 s. Aging at 0.5 x its isolated
    # JCT (1 s), at 0.5 s it ranks as normal with 0.5 s left... of 1 s against 1.5 s:
    # it goes first and ends at 1.5 s, the normal job at 3 s.
    be = classed(one_transfer_job("be", C), "best-effort")
    wl = Workload(CLUSTER, (be, one_transfer_job("n", 2 * C)))
    never = Simulator(wl, "jit", policy_options={"be_age": float("inf")}).run()
    assert never.jct_s == pytest.approx([3.0, 2.0])
    assert Simulator(wl, "jit").run().jct_s == pytest.approx([3.0, 2.0])  # default 10 x 1 s: never reached
    aged = Simulator(wl, "jit", policy_options={"be_age": 0.5}).run()
    assert aged.jct_s == pytest.approx([1.5, 3.0])


def test_priority_ranks_put_the_class_first():
    from jitsched.policies.jit import JitOptions, JitPolicy, group_ranks

    cluster = Cluster.uniform(4)
    # by bytes alone: b (30 MB) 0, c (500 MB) 1, d (900 MB) 2; d critical ranks 0,
    # b best-effort last; the increment's ranks agree
    jobs = [classed(one_transfer_job("b", 3e7, "h0", "h2"), "best-effort"),
            one_transfer_job("c", 5e8, "h0", "h1"), classed(one_transfer_job("d", 9e8, "h3", "h1"), "critical")]
    pol = JitPolicy(JitOptions(job_exp=0.0))
    pol.reset(cluster)
    view = _view(jobs, cluster)
    nodes, ranks = pol.priority_ranks(view)
    got = {view.dag.job_ids[view.dag.job_of[n]]: int(r) for n, r in zip(nodes, ranks, strict=True)}
    assert got == {"d": 0, "c": 1, "b": 2}
    dag = view.dag
    inc = group_ranks(dag.job_of[nodes], dag.src[nodes], dag.dst[nodes], view.remaining[nodes], 4,
                      tier=dag.job_class[dag.job_of[nodes]])
    assert inc.tolist() == ranks.tolist()
    assert group_ranks(dag.job_of[nodes], dag.src[nodes], dag.dst[nodes], view.remaining[nodes], 4).tolist() \
        == [0, 1, 2]


def test_ranks_take_no_lat_pass_per_job_unless_a_best_effort_job_ages(monkeypatch):
    # a joint re-solve hands the policy a new DAG: the need order (one LAT pass per job)
    # is not what ranks read, so it is computed only where an isolated JCT ages a job
    import jitsched.policies.jit as jit

    cluster = Cluster.uniform(4)
    jobs = [two_transfer_job("a", 1e8, 5e7, "h0", "h1"), one_transfer_job("b", 3e7, "h0", "h2"),
            one_transfer_job("c", 5e8, "h0", "h1"), one_transfer_job("d", 9e8, "h3", "h1")]
    eager = jit.JitPolicy()
    eager.reset(cluster)
    view = _view(jobs, cluster)
    eager._sync_priority(view)  # the need order computed first: the ranks do not change
    want = eager.schedule(view)
    passes = []
    real = jit.isolated_need
    monkeypatch.setattr(jit, "isolated_need", lambda *a, **k: passes.append(1) or real(*a, **k))
    lazy = jit.JitPolicy()
    lazy.reset(cluster)
    got = lazy.schedule(_view(jobs, cluster))
    assert passes == [] and got.prio == want.prio
    assert [f[:5] for f in got.flows] == [f[:5] for f in want.flows]
    aging = [classed(jobs[0], "best-effort"), *jobs[1:]]
    lazy.schedule(_view(aging, cluster))
    assert passes == [1]


def _ring(name: str, hosts: list[str], chunk: float) -> Job:
    """One ring step: every host sends ``chunk`` bytes to the next, which then computes."""
    ts = tuple(Transfer(f"s{k}", h, hosts[(k + 1) % len(hosts)], chunk) for k, h in enumerate(hosts))
    cs = tuple(Compute(f"c{k}", hosts[(k + 1) % len(hosts)], 0.0) for k in range(len(hosts)))
    return Job(name, cs, ts, tuple((f"s{k}", f"c{k}") for k in range(len(hosts))), 0.0)


def test_bottleneck_scale_counts_a_job_by_its_busiest_port():
    from jitsched.policies.jit import bottleneck_scale

    cluster = Cluster.uniform(4)
    ps = Job("ps", (Compute("c", "h1", 0.0),), (Transfer("pull", "h1", "h0", 5e6), Transfer("push", "h0", "h1", 7e6)),
             (("pull", "c"), ("push", "c")), 0.0)
    one_pair = two_transfer_job("pair", 1e6, 3e6, "h2", "h3")
    view = _view([_ring("ring", ["h0", "h1", "h2", "h3"], 2e6), ps, one_pair], cluster)
    # ring: each port 2 MB of 8 MB (2 * 1/4); ps: h0's egress 7 MB of 12 (capped at 1); one pair: 1
    assert bottleneck_scale(view.dag, 4).tolist() == [0.5, 1.0, 1.0]


@pytest.mark.parametrize("job_size, first", [("bytes", "x"), ("bottleneck", "ring")])
def test_job_size_bottleneck_ranks_a_ring_by_its_busiest_port(job_size, first):
    # The ring has 30 MB on h0 -> h1 and 120 MB in all; job x 50 MB on h0 -> h2 alone.
    # Bytes (job_exp 1): x's key 50 * 50 before the ring's 30 * 120. Bottleneck: the
    # ring's size is 120 * 1/2, its key 30 * 60, before x's.
    from jitsched.policies.jit import JitOptions, JitPolicy, group_ranks

    cluster = Cluster.uniform(4)
    x = Job("x", (Compute("c", "h2", 0.0),), (Transfer("t", "h0", "h2", 50e6),), (("t", "c"),), 0.0)
    view = _view([_ring("ring", ["h0", "h1", "h2", "h3"], 30e6), x], cluster)
    pol = JitPolicy(JitOptions(job_size=job_size))
    pol.reset(cluster)
    nodes, ranks = pol.priority_ranks(view)
    dag = view.dag
    on_h0 = dag.src[nodes] == 0
    by_rank = dag.job_ids[dag.job_of[nodes[on_h0][np.argsort(ranks[on_h0])]][0]]
    assert by_rank == first
    # the from-scratch ranks (a daemon's increments) agree
    from jitsched.policies.jit import bottleneck_scale

    scale = bottleneck_scale(dag, 4) if job_size == "bottleneck" else None
    again = group_ranks(dag.job_of[nodes], dag.src[nodes], dag.dst[nodes], view.remaining[nodes], 4,
                        cluster.egress_Bps, 1.0, None, scale)
    assert again.tolist() == ranks.tolist()


def test_job_size_is_checked():
    from jitsched.policies.jit import JitOptions

    with pytest.raises(ValidationError, match="job_size"):
        JitOptions(job_size="ports")


def test_a_group_with_slack_lets_another_jobs_urgent_transfer_go_first():
    # a pulls 0.1 s of parameters, then after 0.1 s of compute pushes g1 (0.1 s), which
    # nothing waits for before a ends at 1.3 s (after 1 s more compute and g2): g1 has
    # 0.9 s of slack at 0.2 s, more than the default 0.2 of a's 1.3 s alone. b arrives then
    # and pulls 0.4 s into the same host, which its compute needs at once. Without lending
    # a's smaller group goes first and b waits 0.1 s
    mb = 1e6
    a = Job("a", (Compute("c1", "h1", 0.1), Compute("c2", "h1", 1.0), Compute("f", "h1", 0.0)),
            (Transfer("p", "h0", "h1", 12.5 * mb), Transfer("g1", "h1", "h0", 12.5 * mb),
             Transfer("g2", "h1", "h0", 12.5 * mb)),
            (("p", "f"), ("f", "c1"), ("c1", "g1"), ("c1", "c2"), ("c2", "g2")))
    b = Job("b", (Compute("f", "h0", 0.1),), (Transfer("p", "h2", "h0", 50 * mb), Transfer("g", "h0", "h2", 50 * mb)),
            (("p", "f"), ("f", "g")), arrival_s=0.2)
    wl = Workload(Cluster.uniform(3, bps=1e9), (a, b))
    lent = Simulator(wl, "jit").run()
    assert lent.jct_s.tolist() == pytest.approx([1.3, 0.9])  # both as alone
    held = Simulator(wl, "jit", policy_options={"lend_slack": float("inf")}).run()
    assert held.jct_s.tolist() == pytest.approx([1.3, 1.0])
    # g1 went after b's pull, and still arrived before a needed it
    g1 = np.flatnonzero(lent.transfer_job == 0)[1]  # a's transfers in node order: p, g1, g2
    assert lent.transfer_arrival_s[g1] == pytest.approx(0.7)
    assert held.transfer_arrival_s[g1] == pytest.approx(0.3)
    # a job of more than one host pair each way (here a's worker also reports to h3) never
    # lends: its isolated plan's LATs do not see its own flows sharing its ports
    many = replace(a, transfers=a.transfers + (Transfer("r", "h1", "h3", 1e3),), edges=a.edges + (("f", "r"),))
    wl4 = Workload(Cluster.uniform(4, bps=1e9), (many, b))
    assert Simulator(wl4, "jit").run().jct_s[1] == pytest.approx(1.0)


def test_a_job_that_computes_before_its_first_transfer_has_no_slack_to_lend():
    # three jobs compute 0.5 s, send 1 s over one port, compute 0.5 s: one at a time is best
    # (2, 3 and 4 s). The first transfers appear at 0.5 s; their LATs count from the jobs'
    # arrival (1.5 s), not from then (2 s), or each would seem to have 0.5 s to lend
    jobs = tuple(Job(f"j{k}", (Compute("a", "h0", 0.5), Compute("b", "h1", 0.5)),
                     (Transfer("t", "h0", "h1", 125e6),), (("a", "t"), ("t", "b"))) for k in range(3))
    r = Simulator(Workload(Cluster.uniform(2, bps=1e9), jobs), "jit").run()
    assert sorted(r.jct_s.tolist()) == pytest.approx([2.0, 3.0, 4.0])


def test_isolated_jct_ends_with_a_last_transfer_no_compute_waits_for():
    # pull 1 s, compute 2 s, push 3 s with nothing after it (a gradient a parameter server
    # takes in): alone the job takes 6 s, not the 3 s its last compute ends at
    from jitsched.dag.model import compile_jobs
    from jitsched.policies.jit import isolated_need

    cluster = Cluster.uniform(2, bps=8e8)  # 1e8 bytes/s
    job = Job("j", (Compute("c", "h1", 2.0),), (Transfer("pull", "h0", "h1", 1e8), Transfer("push", "h1", "h0", 3e8)),
              (("pull", "c"), ("c", "push")), 0.5)
    dag = compile_jobs([job], cluster)
    jct = np.full(1, np.nan)
    nodes, need = isolated_need(dag, cluster, np.array([0]), dag.arrival, jct_out=jct)
    assert jct[0] == pytest.approx(6.0)
    assert dict(zip([dag.node_ids[n] for n in nodes], need.tolist(), strict=True)) == pytest.approx(
        {"pull": 1.5, "push": 6.5})


def _ring_and_sharded_jobs():
    from jitsched.workloads.paper import load_model_job
    from jitsched.workloads.shapes import expand_job

    # an AlexNet sharded over h0, h1 with workers h2-h5, and an AlexNet ring all-reduce over
    # h5-h8 arriving 0.14 s later: they share h5
    sharded = expand_job(load_model_job("alexnet", "ps", "worker", "sharded"), "ps-sharded",
                         ["h0", "h1"], ["h2", "h3", "h4", "h5"])
    ring = expand_job(load_model_job("alexnet", "ps", "worker", "ring", 0.14), "allreduce", [],
                      ["h5", "h6", "h7", "h8"])
    return Workload(Cluster.uniform(9, 1e10), (sharded, ring))


def test_ring_hosts_names_rings_of_three_or_more_hosts_only():
    from jitsched.dag.model import compile_jobs
    from jitsched.policies.jit import ring_hosts
    from jitsched.workloads.paper import load_model_job
    from jitsched.workloads.shapes import expand_job

    wl = _ring_and_sharded_jobs()
    tmpl = load_model_job("lenet", "ps", "worker", "t")
    jobs = wl.jobs + (
        expand_job(tmpl, "ps", ["h0"], ["h1", "h2", "h3"], job_id="ps"),
        expand_job(tmpl, "allreduce", [], ["h0", "h1"], job_id="ring2"),  # a server and a worker in shape
        expand_job(tmpl, "allreduce", [], ["h2", "h3", "h4"], job_id="ring3"),
        load_model_job("lenet", "h0", "h1", "one"),
    )
    dag = compile_jobs(jobs, wl.cluster)
    assert ring_hosts(dag, 9).tolist() == [1.0, 4.0, 1.0, 1.0, 3.0, 1.0]
    # under the default job_size its key is divided by its hosts; "bytes" leaves it
    from jitsched.policies.jit import JitOptions, JitPolicy, bottleneck_scale

    pol = JitPolicy()
    ratio = pol._job_scales(dag, 9) / bottleneck_scale(dag, 9)
    assert np.allclose(ratio ** pol.job_exp, [1, 1 / 4, 1, 1, 1 / 3, 1])
    assert np.all(JitPolicy(JitOptions(job_size="bytes"))._job_scales(dag, 9) == 1.0)


def test_a_ring_ranks_by_its_ports_not_behind_a_sharded_job_of_the_same_bytes(monkeypatch):
    import jitsched.policies.jit as jit_mod

    # each ring pair carries its port's bytes, each of the sharded job's a quarter of its
    # server's: ranked by pair bytes the ring waited at h5 behind the bigger sharded job
    wl = _ring_and_sharded_jobs()
    now = Simulator(wl, "jit").run().jct_s
    monkeypatch.setattr(jit_mod, "ring_hosts", lambda dag, n: np.ones(dag.n_jobs))
    before = Simulator(wl, "jit").run().jct_s
    assert now[1] < 0.8 * before[1] and now.sum() < before.sum()


def test_a_best_effort_job_ages_at_the_instant_it_is_due_whatever_the_rounding():
    # arrival 0.3 s, be_age 0.9 of a 1-s isolated JCT: it ranks as normal at 0.3 + 0.9 s,
    # where 1.2 - 0.3 < 0.9 in floats. With 1 s left against the normal job's 8.8 s it
    # goes first: JCT 0.9 + 1 s, not the normal job's end (10 s) plus its 1 s
    be = classed(one_transfer_job("be", C, arrival_s=0.3), "best-effort")
    wl = Workload(CLUSTER, (one_transfer_job("n", 10 * C), be))
    res = Simulator(wl, "jit", policy_options={"be_age": 0.9}).run()
    assert res.jct_s == pytest.approx([11.0, 1.9])


def test_a_best_effort_job_takes_what_background_flows_sharing_what_dl_leaves_leave_idle():
    # bg_weight inf: two files into h2 share its ingress, 0.5 of a port each for 20 s;
    # best-effort ranks after them, and h0's egress has half a port they leave idle:
    # the job's 0.5 s at line rate take 1 s there (not the files' 20 s, nor until it ages)
    cluster = Cluster.uniform(4)
    be = classed(one_transfer_job("be", 0.5 * C, "h0", "h3"), "best-effort")
    bgs = (Background("a", "h0", "h2", 10 * C, 0.0), Background("b", "h1", "h2", 10 * C, 0.0))
    res = Simulator(Workload(cluster, (be,), bgs), "jit", policy_options={"bg_weight": float("inf")}).run()
    assert res.jct_s == pytest.approx([1.0])
    assert res.bg_finish_s == pytest.approx([20.0, 20.0])
