"""Tests of the simulator: conservation, capacity, precedence for every policy; hand-computed scenarios; determinism."""

import numpy as np
import pytest

from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload
from jitsched.plan.coflow import coflow_workload
from jitsched.policies import POLICIES
from jitsched.sim import simulate
from jitsched.sim.coflow import cct_summary

GB = 1.25e8  # bytes/s of 1 Gbit/s


def random_workload(seed: int, n_hosts: int = 5, n_jobs: int = 5, n_bg: int = 2) -> Workload:
    rng = np.random.default_rng(seed)
    cl = Cluster.uniform(n_hosts)
    jobs = []
    for j in range(n_jobs):
        computes, transfers, edges = [], [], []
        nc = int(rng.integers(1, 5))
        for c in range(nc):
            computes.append(Compute(f"c{c}", f"h{rng.integers(n_hosts)}", float(rng.uniform(0, 0.05))))
            if c:
                edges.append((f"c{int(rng.integers(c))}", f"c{c}"))
        for t in range(int(rng.integers(1, 6))):
            a, b = rng.choice(n_hosts, 2, replace=False)
            transfers.append(Transfer(f"t{t}", f"h{a}", f"h{b}", float(rng.uniform(1e5, 3e7))))
            edges.append((f"t{t}", f"c{int(rng.integers(nc))}"))
            if rng.random() < 0.3:  # a transfer released by a compute (e.g. a gradient push)
                edges.append((f"c{int(rng.integers(nc))}", f"t{t}"))
        job = Job(f"j{j}", tuple(computes), tuple(transfers), tuple(edges),
                  float(rng.uniform(0, 0.5)), 0.0, "m")
        from jitsched.dag.model import find_cycle_node
        if find_cycle_node(job) is None:
            jobs.append(job)
    bgs = []
    for b in range(n_bg):
        a, c = rng.choice(n_hosts, 2, replace=False)
        bgs.append(Background(f"bg{b}", f"h{a}", f"h{c}", float(rng.uniform(1e6, 5e7)),
                              float(rng.uniform(0, 0.5))))
    return Workload(cl, tuple(jobs), tuple(bgs))


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("seed", [1, 2])
def test_conservation_capacity_precedence(policy, seed):
    wl = random_workload(seed)
    res = simulate(wl, policy, seed=seed, check=True)  # check: every allocation fits every port
    assert res.max_port_utilization <= 1 + 1e-9
    np.testing.assert_allclose(res.transfer_sent, res.transfer_size, rtol=1e-9, atol=1e-2)
    np.testing.assert_allclose(res.bg_sent, res.bg_size, rtol=1e-9, atol=1e-2)
    assert np.all(np.isfinite(res.jct_s)) and np.all(res.jct_s > 0)
    from jitsched.dag.model import compile_jobs
    dag = compile_jobs(list(wl.jobs), wl.cluster)
    for v in range(dag.n_nodes):
        preds = dag.pred_idx[dag.pred_ptr[v]:dag.pred_ptr[v + 1]]
        earliest = max([dag.arrival[dag.job_of[v]]] + [res.node_finish_s[p] for p in preds])
        assert res.node_start_s[v] >= earliest - 1e-9
        assert res.node_finish_s[v] >= res.node_start_s[v] - 1e-12
    # a transfer can't beat its port: time >= bytes / 1 Gbit/s
    dur = res.transfer_arrival_s - res.transfer_release_s
    assert np.all(dur >= res.transfer_size / GB - 1e-9)


def two_jobs(second_arrival: float = 0.0) -> Workload:
    """Two single-transfer jobs leaving h0 (to h1 and h2), each then computing 0.5 s."""
    cl = Cluster.uniform(3)
    jobs = []
    for k, (dst, arr) in enumerate((("h1", 0.0), ("h2", second_arrival))):
        jobs.append(Job(f"j{k}", (Compute("c", dst, 0.5),), (Transfer("t", "h0", dst, 1.25e8),),
                        (("t", "c"),), arr, 0.0, "m"))
    return Workload(cl, tuple(jobs))


def test_two_jobs_tensorflow_share_fairly():
    res = simulate(two_jobs(), "tensorflow")
    # both share h0's egress: 1.25e8 bytes each at 0.625e8 bytes/s -> 2 s, then 0.5 s compute
    np.testing.assert_allclose(res.jct_s, [2.5, 2.5])
    np.testing.assert_allclose(res.waiting_s, [0.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("policy", ["tictac", "fifo", "sincronia"])
def test_two_jobs_strict_priority(policy):
    res = simulate(two_jobs(), policy)
    # one job at a time at full rate: 1 s + 0.5 s, then the other 2 s + 0.5 s (equal
    # loads; job 0 arrived first / has the lower index)
    np.testing.assert_allclose(sorted(res.jct_s), [1.5, 2.5])


def test_two_jobs_later_arrival_fifo_vs_sincronia():
    wl = two_jobs(second_arrival=0.5)
    # FIFO keeps job 0 first: it ends at 1.5; job 1 sends 1 s from t=1, ends 2.5 -> JCT 2.0
    np.testing.assert_allclose(simulate(wl, "fifo").jct_s, [1.5, 2.0])
    # Sincronia re-orders at the arrival: job 0 has 0.5 s of load left vs job 1's 1 s, so
    # job 0 stays first: same result
    np.testing.assert_allclose(simulate(wl, "sincronia").jct_s, [1.5, 2.0])


@pytest.mark.parametrize("estimate", ["ordered", "fair"])
@pytest.mark.parametrize("backfill", [True, False])
def test_two_jobs_jit_finishes_by_plan(estimate, backfill):
    res = simulate(two_jobs(), "jit-paper", policy_options={"alpha": 1.0, "slot_s": 0.1,
                                                      "trans_estimate": estimate,
                                                      "backfill": backfill})
    # LAT is 2 s for both: fair sharing of h0 by the two transfers, or (ordered)
    # each job's 1 s of bytes at half the port: the plan delivers both by t=2
    assert np.all(res.transfer_arrival_s <= 2.0 + 1e-6)
    np.testing.assert_allclose(res.jct_s, [2.5, 2.5], atol=1e-6)
    assert res.stats["lat_misses"] == 0 and res.stats["solves"] == 1


def test_background_slowdown_alone_is_one():
    cl = Cluster.uniform(2)
    wl = Workload(cl, (), (Background("b", "h0", "h1", 2.5e8, 1.0),))
    for pol in ("tensorflow", "jit", "sincronia", "tictac"):
        res = simulate(wl, pol)
        np.testing.assert_allclose(res.bg_jct_s, [2.0])
        np.testing.assert_allclose(res.bg_slowdown, [1.0])


def test_same_seed_same_result():
    wl = random_workload(3)
    a = simulate(wl, "jit", seed=7, compute_noise=0.3)
    b = simulate(wl, "jit", seed=7, compute_noise=0.3)
    c = simulate(wl, "jit", seed=8, compute_noise=0.3)
    np.testing.assert_array_equal(a.jct_s, b.jct_s)
    np.testing.assert_array_equal(a.node_finish_s, b.node_finish_s)
    assert not np.array_equal(a.node_finish_s, c.node_finish_s)


def test_coflow_trace(tmp_path):
    p = tmp_path / "trace.txt"
    # coflow 1: mappers 0,1 -> reducer 2 with 2 MB (1 MB each); coflow 2: mapper 2 -> reducer 2 (local)
    p.write_text("3 2\n1 0 2 0 1 1 2:2.0\n2 0 1 2 1 2:5.0\n")
    wl = coflow_workload(p)
    assert len(wl.jobs) == 1 and len(wl.jobs[0].transfers) == 2
    out = cct_summary(simulate(wl, "sincronia"))
    # 2 MiB into host 2's ingress at 1.25e8 bytes/s
    assert out["coflows"] == 1
    np.testing.assert_allclose(out["avg_cct_s"], 2 * 2**20 / GB)


def test_checked_flows_skip_checks_only():
    # The simulator marks its flows checked (policies skip their O(F) range
    # checks); a JIT run must not depend on whether the policy trusts them.
    import dataclasses

    from jitsched.policies.jit import JitOptions, JitPolicy

    seen = []

    class Unchecked(JitPolicy):
        def allocate(self, view):
            seen.append(view.flows.checked)
            view.flows = dataclasses.replace(view.flows, checked=False)
            return super().allocate(view)

    wl = random_workload(4, n_jobs=8)
    opts = {"alpha": 0.5, "slot_s": 0.05}
    a = simulate(wl, JitPolicy(JitOptions(**opts)), seed=4)
    b = simulate(wl, Unchecked(JitOptions(**opts)), seed=4)
    assert seen and all(seen)
    assert a.stats["solves"] >= 1
    np.testing.assert_array_equal(a.node_finish_s, b.node_finish_s)
    np.testing.assert_array_equal(a.bg_jct_s, b.bg_jct_s)


def test_infinite_capacity_rejected():
    from jitsched.dag.model import Host
    from jitsched.errors import ValidationError

    cl = Cluster((Host("h0", 1e9, 1e9), Host("h1", float("inf"), 1e9)))
    with pytest.raises(ValidationError, match="finite"):
        simulate(Workload(cl, (), (Background("b", "h0", "h1", 1e6, 0.0),)), "jit")


@pytest.fixture(scope="module")
def mixed_workload():
    from jitsched.workloads.paper import generate_workload
    from jitsched.workloads.shapes import MIXED, ShapeOptions

    wl = generate_workload(0.5, n_jobs=14, n_hosts=10, bps=1e10, models=("lenet", "alexnet"), seed=3,
                           shapes=ShapeOptions(MIXED, 3, 2))
    assert {j.id.split("-", 1)[1].rsplit("-", 1)[0] for j in wl.jobs} == {"ps", "ps-sharded", "allreduce"}
    return wl


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_finishes_a_workload_of_mixed_shapes(policy, mixed_workload):
    from jitsched.dag.model import compile_jobs
    from jitsched.plan.bound import lower_bound_mean_jct

    wl = mixed_workload
    res = simulate(wl, policy, check=True)
    assert np.all(np.isfinite(res.jct_s)) and len(res.jct_s) == len(wl.jobs)
    np.testing.assert_allclose(res.transfer_sent, res.transfer_size, rtol=1e-9, atol=1e-2)
    np.testing.assert_allclose(res.bg_sent, res.bg_size, rtol=1e-9, atol=1e-2)
    dag = compile_jobs(list(wl.jobs), wl.cluster)
    for v in range(dag.n_nodes):  # a ring step starts after the chunk it forwards has arrived
        preds = dag.pred_idx[dag.pred_ptr[v]:dag.pred_ptr[v + 1]]
        earliest = max([dag.arrival[dag.job_of[v]]] + [res.node_finish_s[p] for p in preds])
        assert res.node_start_s[v] >= earliest - 1e-9
    assert res.jct_s.mean() >= lower_bound_mean_jct(wl) * (1 - 1e-9)


def test_makespan_is_the_last_completion_not_a_later_wake_up():
    from pathlib import Path

    from jitsched.dag.model import load_workload

    wl = load_workload(Path(__file__).resolve().parents[1] / "jitsched" / "examples" / "vgg16-4jobs.json")
    every = simulate(wl, "jit")
    # a re-plan every 30 s wakes the simulator past the last completion (9.51 s): same run
    periodic = simulate(wl, "jit", policy_options={"resolve_period_s": 30})
    np.testing.assert_array_equal(periodic.jct_s, every.jct_s)
    last = max(np.max(every.job_finish_s), np.max(every.bg_finish_s))
    assert every.end_s == periodic.end_s == last
    assert periodic.summary()["makespan_s"] == pytest.approx(9.51, abs=0.01)
    ticked = simulate(two_jobs(), "tensorflow", tick_s=0.7)  # the last tick comes after 2.5 s
    assert ticked.end_s == 2.5
    bg_only = simulate(Workload(Cluster.uniform(2), (), (Background("b", "h0", "h1", 2.5e8, 1.0),)), "tensorflow")
    assert bg_only.end_s == 3.0


def test_arrivals_too_late_to_time_to_the_microsecond_are_refused():
    from jitsched.errors import ValidationError
    from jitsched.plan.bound import MAX_ARRIVAL_S

    def one(arrival_s: float, bg_arrival_s: float = 0.0) -> Workload:
        job = Job("j", (), (Transfer("t", "h0", "h1", 1.25e8),), (), arrival_s, 0.0, "m")
        return Workload(Cluster.uniform(2), (job,), (Background("b", "h1", "h0", 1e6, bg_arrival_s),))

    # the latest arrival taken still times a 1 s transfer to the microsecond
    assert simulate(one(MAX_ARRIVAL_S), "tensorflow").jct_s[0] == pytest.approx(1.0, abs=1e-6)
    for wl, who in ((one(1e16), "job 'j'"), (one(0.0, 1e15), "background flow 'b'")):
        with pytest.raises(ValidationError, match=f"{who}: arrival_s 1e\\+1[56] is after 2\\*\\*32 s"):
            simulate(wl, "tensorflow")


def test_a_trace_of_local_flows_only_has_no_cct():
    from jitsched.dag.model import Workload as W

    out = cct_summary(simulate(W(Cluster.uniform(2)), "sincronia"))
    assert out == {"coflows": 0, "avg_cct_s": None, "p95_cct_s": None}


@pytest.mark.parametrize("policy", ["fifo", "sincronia", "varys"])
def test_a_transfer_whose_bytes_are_all_sent_when_a_higher_priority_one_starts_is_done_then(policy):
    # tB (h0 -> h1, 0.4 + 0.2 s at line rate) is sent from 0.1 s; at (0.1 + 0.4) + 0.2 s,
    # an ulp before its computed finish, c1 releases tA, which takes the port ahead of it
    # (node order, or its job's coflow) with float crumbs of tB left. tB is done at 0.7 s, and cB (2 s) ends at
    # 2.7 s: the JCT is 2.6 s, not tA's 1 s later
    job = Job("j", (Compute("c0", "h0", 0.4), Compute("c1", "h0", 0.2), Compute("cA", "h1", 0.0),
                    Compute("cB", "h1", 2.0)),
              (Transfer("tA", "h0", "h1", GB), Transfer("tB", "h0", "h1", (0.4 + 0.2) * GB)),
              (("c0", "c1"), ("c1", "tA"), ("tA", "cA"), ("tB", "cB")), arrival_s=0.1)
    res = simulate(Workload(Cluster.uniform(2), (job,)), policy)
    assert res.jct_s == pytest.approx([2.6])
