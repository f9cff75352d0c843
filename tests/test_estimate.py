"""Tests of the LAT pass's transfer-time estimates: fair sharing, need-order queues (against a reference), job ranks."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.dag.model import TRANSFER, Cluster, Job, Transfer, compile_jobs
from jitsched.plan.estimate import fair_share_trans, job_ranks, ordered_trans, segmented_cummax
from tests.dags import reversed_chain_job


def test_fair_share_trans_processor_sharing():
    cl = Cluster.uniform(3)
    job = Job("j", (), tuple(Transfer(f"t{i}", "h0", "h1", s) for i, s in enumerate((3e8, 1.25e8, 2.5e8))),
              (), 0.0)
    dag = compile_jobs([job], cl)
    t = fair_share_trans(dag, cl, dag.size, dag.kind == TRANSFER)
    # sizes 1, 2, 2.4 capacity-seconds sharing one port: done at 3, 5, 5.4
    np.testing.assert_allclose(t, [5.4, 3.0, 5.0])





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
