"""Tests of the simulator-side policies' own algorithms: BSSI, TicTac orders, fair-share estimate, sub-DAGs, jit schedule."""

from dataclasses import replace

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.model import TRANSFER, Cluster, Compute, Job, Transfer, compile_jobs
from jitsched.policies import make_policy
from jitsched.policies.common import sub_dag
from jitsched.policies.jit import fair_share_trans
from jitsched.policies.sincronia import bssi_order
from jitsched.policies.tictac import tictac_order
from jitsched.synth import random_vgg16_jobs


def test_bssi_by_hand():
    # port 0 is the bottleneck (load 5); coflow 0 has the most load there (4), so its
    # weight/load 1/4 is smallest and it goes last; coflow 1 then 2 by the same rule
    load = np.array([[4.0, 0.0], [1.0, 3.0], [0.0, 1.0]])
    assert bssi_order(load).tolist() == [2, 1, 0]
    # a coflow without load goes first
    assert bssi_order(np.array([[1.0], [0.0]])).tolist() == [1, 0]


def chain_job():
    # t0 -> c0 -> c1 <- t1 ; c1 -> c2 <- t2 : a chain where the reads are needed in order
    comps = tuple(Compute(f"c{i}", "h1", 1.0) for i in range(3))
    trs = (Transfer("t2", "h0", "h1", 3e6), Transfer("t0", "h0", "h1", 1e6), Transfer("t1", "h0", "h1", 2e6))
    edges = (("t0", "c0"), ("c0", "c1"), ("t1", "c1"), ("c1", "c2"), ("t2", "c2"))
    return Job("j", comps, trs, edges, 0.0, 0.0, "m")


@pytest.mark.parametrize("mode", ["tac", "tic"])
def test_tictac_orders_chain_reads_in_need_order(mode):
    cl = Cluster.uniform(2)
    dag = compile_jobs([chain_job()], cl)
    comm = np.where(dag.kind == TRANSFER, dag.size / 1.25e8, 0.0)
    ranks = tictac_order(dag, 0, comm, mode)
    names = [dag.node_ids[i] for i in np.flatnonzero(dag.kind == TRANSFER)]
    order = [n for _, n in sorted(zip(ranks.tolist(), names, strict=True))]
    assert order == ["t0", "t1", "t2"]


def test_fair_share_trans_processor_sharing():
    cl = Cluster.uniform(3)
    job = Job("j", (), tuple(Transfer(f"t{i}", "h0", "h1", s) for i, s in enumerate((3e8, 1.25e8, 2.5e8))),
              (), 0.0)
    dag = compile_jobs([job], cl)
    t = fair_share_trans(dag, cl, dag.size, dag.kind == TRANSFER)
    # sizes 1, 2, 2.4 capacity-seconds sharing one port: done at 3, 5, 5.4
    np.testing.assert_allclose(t, [5.4, 3.0, 5.0])


def test_sub_dag_equals_compiling_the_subset():
    cl = Cluster.uniform(4)
    jobs = random_vgg16_jobs(3, cl.names, seed=2)
    dag = compile_jobs(jobs, cl)
    sub, nodes = sub_dag(dag, np.array([0, 2]))
    ref = compile_jobs([jobs[0], jobs[2]], cl)
    for name in ("kind", "src", "dst", "size", "duration", "job_of", "pred_ptr", "pred_idx",
                 "succ_ptr", "succ_idx", "job_ptr"):
        np.testing.assert_array_equal(getattr(sub, name), getattr(ref, name), err_msg=name)
    assert sub.node_ids == ref.node_ids
    np.testing.assert_array_equal(dag.size[nodes], sub.size)
    # topo: the chosen nodes in dag's topological order (the fast path and the
    # fallback for an order that is not job by job)
    for order in (dag.topo, dag.topo[::-1].copy()):
        d = replace(dag, topo=order)
        for sel in ([0, 2], [1], [0, 1, 2], [2]):
            s, nd = sub_dag(d, np.array(sel))
            remap = np.full(d.n_nodes, -1)
            remap[nd] = np.arange(len(nd))
            want = remap[d.topo]
            np.testing.assert_array_equal(s.topo, want[want >= 0])


def test_jit_schedule_and_options():
    from jitsched.model import Workload
    from jitsched.sim import Simulator

    cl = Cluster.uniform(4)
    sim = Simulator(Workload(cl, tuple(random_vgg16_jobs(2, cl.names, seed=0))), "jit-paper")
    sim.run()
    st = sim.policy.stats()
    assert st["solves"] == 1 and len(st["lp_solve_s"]) == 1  # both jobs arrive at 0: one plan
    with pytest.raises(ValidationError):
        make_policy("jit", alpha=1.5)
    with pytest.raises(ValidationError):
        make_policy("jit", trans_estimate="magic")
    with pytest.raises(ValidationError):
        make_policy("nope")


# ---------------------------------------------------------------- the "ordered" LAT estimate

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from jitsched.policies.jit import ordered_trans, segmented_cummax  # noqa: E402


def ordered_trans_reference(dag, cluster, remaining, active, release, need, job_rank=None):
    """Pure-Python single-server queues per (port, job), in need order, at cap / jobs on the port;
    with ``job_rank`` one queue per port at full capacity, jobs by rank then need."""
    out = np.zeros(dag.n_nodes)
    idx = [int(i) for i in np.flatnonzero(active)]
    finish = dict.fromkeys(idx, 0.0)
    for port, cap in ((dag.src, cluster.egress_Bps), (dag.dst, cluster.ingress_Bps)):
        queues: dict[tuple[int, int], list[int]] = {}
        for i in idx:
            key = -1 if job_rank is not None else int(dag.job_of[i])
            queues.setdefault((int(port[i]), key), []).append(i)
        jobs_on = {}
        for p, _ in queues:
            jobs_on[p] = jobs_on.get(p, 0) + 1
        for (p, _), q in queues.items():
            c = -np.inf
            rank = (lambda i: job_rank[dag.job_of[i]]) if job_rank is not None else (lambda i: 0)
            for i in sorted(q, key=lambda i: (rank(i), need[i], release[i], i)):
                c = max(release[i], c) + remaining[i] * jobs_on[p] / cap[p]
                finish[i] = max(finish[i], c)
    for i in idx:
        out[i] = max(finish[i] - release[i], 0.0)
    return out


def reversed_chain_job():
    # c0 -> c1 -> c2, each consuming one read; the read needed first is the largest
    comps = tuple(Compute(f"c{i}", "h1", 1.0) for i in range(3))
    trs = tuple(Transfer(f"t{i}", "h0", "h1", s * 1.25e8) for i, s in enumerate((3.0, 2.0, 1.0)))
    edges = (("t0", "c0"), ("c0", "c1"), ("t1", "c1"), ("c1", "c2"), ("t2", "c2"))
    return Job("j", comps, trs, edges, 0.0, 0.0, "m")


def test_segmented_cummax():
    v = np.array([3.0, 1.0, 5.0, 2.0, 0.5, 4.0, -1.0])
    start = np.array([True, False, False, True, False, True, False])
    np.testing.assert_allclose(segmented_cummax(v, start), [3, 3, 5, 2, 2, 4, 4])


def test_ordered_trans_by_hand():
    cl = Cluster.uniform(3)
    dag = compile_jobs([reversed_chain_job()], cl)
    act = dag.kind == TRANSFER
    rel = np.zeros(dag.n_nodes)
    need = np.where(act, np.arange(dag.n_nodes), 0.0)  # t0, t1, t2 in node order
    t = ordered_trans(dag, cl, dag.size, act, rel, need)
    # alone on the port, one after the other: 3, 3+2, 3+2+1 seconds
    np.testing.assert_allclose(t[act], [3.0, 5.0, 6.0])
    # a second job on the same egress port halves this job's share there
    other = Job("k", (), (Transfer("u", "h0", "h2", 1e6),), (), 0.0, 0.0, "m")
    dag2 = compile_jobs([reversed_chain_job(), other], cl)
    act2 = dag2.kind == TRANSFER
    t2 = ordered_trans(dag2, cl, dag2.size, act2, np.zeros(dag2.n_nodes),
                       np.where(act2, np.arange(dag2.n_nodes), 0.0))
    np.testing.assert_allclose(t2[act2], [6.0, 10.0, 12.0, 2e6 / 1.25e8])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2 ** 31 - 1))
def test_ordered_trans_matches_reference(seed):
    rng = np.random.default_rng(seed)
    cl = Cluster.uniform(4)
    jobs = []
    for j in range(int(rng.integers(1, 4))):
        trs = []
        for t in range(int(rng.integers(1, 7))):
            a, b = rng.choice(4, 2, replace=False)
            trs.append(Transfer(f"t{t}", f"h{a}", f"h{b}", float(rng.uniform(1e3, 1e8))))
        jobs.append(Job(f"j{j}", (), tuple(trs), (), 0.0, 0.0, "m"))
    dag = compile_jobs(jobs, cl)
    act = (dag.kind == TRANSFER) & (rng.random(dag.n_nodes) < 0.8)
    rel = rng.uniform(0, 2, dag.n_nodes)
    need = rng.integers(0, 3, dag.n_nodes).astype(float)  # ties exercise the tie-break
    rem = dag.size * rng.uniform(0.1, 1, dag.n_nodes)
    np.testing.assert_allclose(ordered_trans(dag, cl, rem, act, rel, need),
                               ordered_trans_reference(dag, cl, rem, act, rel, need),
                               rtol=1e-9, atol=1e-9)
    rank = rng.permutation(dag.n_jobs)
    np.testing.assert_allclose(ordered_trans(dag, cl, rem, act, rel, need, rank),
                               ordered_trans_reference(dag, cl, rem, act, rel, need, rank),
                               rtol=1e-9, atol=1e-9)


def test_ordered_trans_job_rank_by_hand():
    # the 6-second chain job and a 1-second job on the same egress port: ranked
    # first, the small job takes the port at full rate and the chain waits 1 s
    cl = Cluster.uniform(3)
    other = Job("k", (), (Transfer("u", "h0", "h2", 1.25e8),), (), 0.0, 0.0, "m")
    dag = compile_jobs([reversed_chain_job(), other], cl)
    act = dag.kind == TRANSFER
    rel, need = np.zeros(dag.n_nodes), np.where(act, np.arange(dag.n_nodes), 0.0)
    t = ordered_trans(dag, cl, dag.size, act, rel, need, np.array([1, 0]))
    np.testing.assert_allclose(t[act], [4.0, 6.0, 7.0, 1.0])
    t = ordered_trans(dag, cl, dag.size, act, rel, need, np.array([0, 1]))
    np.testing.assert_allclose(t[act], [3.0, 5.0, 6.0, 7.0])


def test_job_ranks():
    from jitsched.policies.jit import job_ranks

    cl = Cluster.uniform(3)
    small = Job("k", (), (Transfer("u", "h0", "h2", 1.25e8),), (), 0.0, 0.0, "m")
    dag = compile_jobs([reversed_chain_job(), small], cl)
    act = dag.kind == TRANSFER
    assert job_ranks(dag, cl, dag.size, act, "fair") is None
    assert job_ranks(dag, cl, dag.size, act, "fifo").tolist() == [0, 1]
    # busiest port: 6 s of the chain job on h0/h1, 1 s of the small one
    assert job_ranks(dag, cl, dag.size, act, "smallest").tolist() == [1, 0]
    # what is left counts: with the chain's reads nearly done it goes first
    rem = np.where(dag.job_of == 0, dag.size * 0.1, dag.size)
    assert job_ranks(dag, cl, rem, act, "smallest").tolist() == [0, 1]


def test_jit_job_order_smallest_first_in_simulation():
    # a 6-second job arrives just before a 1-second one on the same ports:
    # smallest-first finishes the small job first without delaying the mean
    from jitsched.model import Workload
    from jitsched.sim import simulate

    cl = Cluster.uniform(3)
    big = replace(reversed_chain_job(), arrival_s=0.0)
    small = Job("k", (Compute("c", "h1", 0.0),), (Transfer("u", "h0", "h1", 1.25e8),),
                (("u", "c"),), 0.01, 0.0, "m")
    wl = Workload(cl, (big, small))
    fair = simulate(wl, "jit-paper", policy_options={"alpha": 1.0})
    smallest = simulate(wl, "jit-paper", policy_options={"alpha": 1.0, "job_order": "smallest"})
    assert smallest.jct_s[1] == pytest.approx(1.0, abs=0.02)  # alone on the port
    assert fair.jct_s[1] > 1.1  # shares h0 with the big job's first read
    assert smallest.jct_s[0] <= fair.jct_s[0] + 1.0 + 1e-6  # the big job waits at most that second
    with pytest.raises(ValidationError, match="job_order"):
        make_policy("jit", job_order="shortest")


def test_ordered_lat_earlier_than_fair_and_jit_beats_fair_sharing():
    from jitsched.lat import latest_arrival_times
    from jitsched.model import Workload
    from jitsched.policies.jit import fair_share_trans
    from jitsched.sim import simulate

    cl = Cluster.uniform(2)
    wl = Workload(cl, (reversed_chain_job(),))
    dag = compile_jobs(list(wl.jobs), cl)
    act = dag.kind == TRANSFER
    fair = latest_arrival_times(dag, cl, trans_s=fair_share_trans(dag, cl, dag.size, act))
    # fair sharing finishes the 1-, 2-, 3-second reads at 3, 5, 6 s: c0 waits for t0 until 6
    assert fair.lat[dag.node("j", "t0")] == pytest.approx(6.0)
    tf = simulate(wl, "tensorflow")
    assert tf.jct_s[0] == pytest.approx(9.0)  # c0 6-7, c1 7-8, c2 8-9
    jit = simulate(wl, "jit-paper", policy_options={"trans_estimate": "ordered", "backfill": True})
    # need order: t0 at 3 (c0 3-4), t1 at 5 (c1 5-6), t2 at 6 (c2 6-7)
    assert jit.jct_s[0] == pytest.approx(7.0, abs=1e-6)
    st_ = jit.stats
    assert st_["lat_misses"] == 0


def test_jit_backfill_uses_idle_capacity():
    from jitsched.model import Workload
    from jitsched.sim import simulate

    # one 1-second read whose consumer is held up 3 s by compute: without backfill
    # JIT sends it just in time (after ~2 s of idle port); with backfill at once
    comps = (Compute("a", "h1", 3.0), Compute("b", "h1", 0.1))
    job = Job("j", comps, (Transfer("t", "h0", "h1", 1.25e8),), (("a", "b"), ("t", "b")), 0.0, 0.0, "m")
    wl = Workload(Cluster.uniform(2), (job,))
    lazy = simulate(wl, "jit-paper", policy_options={"backfill": False, "alpha": 1.0})
    eager = simulate(wl, "jit-paper", policy_options={"backfill": True, "alpha": 1.0})
    assert lazy.transfer_arrival_s[0] > 2.5
    assert eager.transfer_arrival_s[0] == pytest.approx(1.0, abs=1e-6)
    assert eager.jct_s[0] == pytest.approx(lazy.jct_s[0], abs=1e-6)  # compute-bound either way
