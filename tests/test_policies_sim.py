"""Tests of the simulator-side policies' own algorithms: BSSI, TicTac orders, fair-share estimate, sub-DAGs, jit schedule."""

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


def test_jit_schedule_and_options():
    from jitsched.model import Workload
    from jitsched.sim import Simulator

    cl = Cluster.uniform(4)
    sim = Simulator(Workload(cl, tuple(random_vgg16_jobs(2, cl.names, seed=0))), "jit")
    sim.run()
    st = sim.policy.stats()
    assert st["solves"] == 1 and len(st["lp_solve_s"]) == 1  # both jobs arrive at 0: one plan
    with pytest.raises(ValidationError):
        make_policy("jit", alpha=1.5)
    with pytest.raises(ValidationError):
        make_policy("jit", trans_estimate="magic")
    with pytest.raises(ValidationError):
        make_policy("nope")
