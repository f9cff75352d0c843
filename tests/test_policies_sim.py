"""Tests of the simulator-side policies' own algorithms: BSSI, TicTac orders, fair-share estimate, sub-DAGs, jit schedule."""

from dataclasses import replace

import numpy as np
import pytest

from jitsched.dag.model import TRANSFER, Cluster, Compute, Job, Transfer, compile_jobs
from jitsched.errors import ValidationError
from jitsched.plan.estimate import fair_share_trans
from jitsched.policies import make_policy
from jitsched.policies.common import sub_dag
from jitsched.policies.sincronia import bssi_order
from jitsched.policies.tictac import tictac_order
from jitsched.workloads.synth import random_vgg16_jobs
from tests.dags import reversed_chain_job


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
    from jitsched.dag.model import Workload
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

def test_jit_job_order_smallest_first_in_simulation():
    # a 6-second job arrives just before a 1-second one on the same ports:
    # smallest-first finishes the small job first without delaying the mean
    from jitsched.dag.model import Workload
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
    from jitsched.dag.lat import latest_arrival_times
    from jitsched.dag.model import Workload
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
    from jitsched.dag.model import Workload
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


def test_sincronia_schedule_ranks_jobs_in_bssi_order_for_the_agents():
    from jitsched.daemon.state import PlanRequest, build_view
    from jitsched.policies.sincronia import SincroniaOptions, SincroniaPolicy

    def job(name, transfers):
        return Job(name, (Compute("c", transfers[0][2], 0.0),),
                   tuple(Transfer(t, s, d, b) for t, s, d, b in transfers), tuple((t[0], "c") for t in transfers), 0.0)

    cluster = Cluster.uniform(4)
    # h1's ingress (a 150 + c 500 + d 900 MB) is the bottleneck: d goes last; then
    # h0's egress (a 150, b 30, c 500): c; then a; b first (BSSI by hand, unit weights)
    jobs = [job("a", [("t1", "h0", "h1", 1e8), ("t2", "h0", "h1", 5e7)]), job("b", [("t", "h0", "h2", 3e7)]),
            job("c", [("t", "h0", "h1", 5e8)]), job("d", [("t", "h3", "h1", 9e8)])]
    view = build_view(PlanRequest(1, 0.0, tuple((j, {}, {}) for j in jobs), (), ()), cluster)[0]
    pol = SincroniaPolicy(SincroniaOptions(slot_s=0.25))
    pol.reset(cluster)
    sched = pol.schedule(view)
    # one rank per job (its coflow), dense, no rates: agents serve them by rank
    assert sched.prio == {("b", "t"): 0, ("a", "t1"): 1, ("a", "t2"): 1, ("c", "t"): 2, ("d", "t"): 3}
    assert sched.slot_s == 0.25 and all(len(f[5]) == 0 for f in sched.flows)
    with pytest.raises(ValidationError, match="slot_s"):
        SincroniaOptions(slot_s=0)


def test_tictac_schedule_ranks_jobs_first_come_first_served_then_in_tictac_order():
    from jitsched.daemon.state import PlanRequest, build_view
    from jitsched.policies.tictac import TicTacOptions, TicTacPolicy

    cluster = Cluster.uniform(2)
    # "late" is listed (and compiled) first but arrived later: FIFO is by arrival
    late, early = replace(chain_job(), id="late", arrival_s=1.0), replace(chain_job(), id="early", arrival_s=0.5)
    done = {"t0": 0.2, "c0": 0.3}  # early's first read is over: it is not listed
    view = build_view(PlanRequest(1, 2.0, ((late, {}, {}), (early, done, {})), (), ()), cluster)[0]
    pol = TicTacPolicy(TicTacOptions(slot_s=0.2))
    pol.reset(cluster)
    sched = pol.schedule(view)
    # inside a job the reads in the order its chain needs them (t0, t1, t2; by hand above)
    assert sched.prio == {("early", "t1"): 0, ("early", "t2"): 1,
                          ("late", "t0"): 2, ("late", "t1"): 3, ("late", "t2"): 4}
    assert sched.slot_s == 0.2 and all(len(f[5]) == 0 for f in sched.flows)
    # node indices are the plan's own: a view without "late" ranks early's reads the same
    alone = build_view(PlanRequest(2, 2.0, ((early, done, {}),), (), ()), cluster)[0]
    assert pol.schedule(alone).prio == {("early", "t1"): 0, ("early", "t2"): 1}
    with pytest.raises(ValidationError, match="slot_s"):
        TicTacOptions(slot_s=-1.0)


@pytest.mark.parametrize("name, files_end", [("sincronia", [0.1, 0.2]), ("tictac", [0.3, 0.3])])
def test_baselines_put_background_last_when_asked_as_the_testbed_agents_do(name, files_end):
    from jitsched.dag.model import Background, Workload
    from jitsched.sim import simulate

    # one 1-s read h0 -> h1 (1 Gbit/s ports) and two 0.1-s files on the same ports, all at 0
    job = Job("j", (Compute("c", "h1", 0.0),), (Transfer("t", "h0", "h1", 1.25e8),), (("t", "c"),), 0.0, 0.0, "m")
    files = (Background("f0", "h0", "h1", 1.25e7, 0.0), Background("f1", "h0", "h1", 1.25e7, 0.0))
    wl = Workload(Cluster.uniform(2), (job,), files)
    own = simulate(wl, name)
    last = simulate(wl, name, policy_options={"background": "last"})
    # by default the files go first under BSSI (each a coflow with the smaller
    # bottleneck), and TicTac's DL flows keep only their fair third of the port
    assert sorted(own.bg_finish_s.tolist()) == pytest.approx(files_end) and own.jct_s[0] == pytest.approx(1.2)
    # last: the job alone at the line rate, then the files sharing the port evenly
    assert last.jct_s[0] == pytest.approx(1.0)
    assert last.bg_finish_s.tolist() == pytest.approx([1.2, 1.2])
    with pytest.raises(ValidationError, match="background"):
        make_policy(name, background="nonsense")
