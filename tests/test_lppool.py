"""Tests of the LP component pool: parallel solves give the serial plan, bit for bit."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import replace

import numpy as np
import pytest

from jitsched.dag.model import Cluster
from jitsched.errors import ValidationError
from jitsched.plan import lppool
from jitsched.plan.lp import LPOptions, solve_bandwidth_lp
from jitsched.plan.planner import PlanOptions, plan_jobs
from jitsched.workloads.synth import layer_chain_job


@pytest.fixture
def pool_stopped():
    yield
    lppool.shutdown()
    assert not mp.active_children()


def disjoint_instance(n_groups: int, seed: int = 3):
    """Transfers inside ``n_groups`` disjoint triples of hosts, loaded past what fits on
    time: at least ``n_groups`` components, each needing a solve (phase 2 included)."""
    rng = np.random.default_rng(seed)
    m = 12 * n_groups
    grp = rng.integers(0, n_groups, m) * 3
    src = grp + rng.integers(0, 3, m)
    dst = grp + (src - grp + rng.integers(1, 3, m)) % 3
    size = rng.uniform(0.5, 3.0, m)
    rel = rng.uniform(0, 2, m)
    lat = rel + rng.uniform(0.5, 3, m)
    return src, dst, size, rel, lat, np.ones(3 * n_groups)


def test_parallel_components_give_the_serial_plan_bit_for_bit(pool_stopped):
    src, dst, size, rel, lat, cap = disjoint_instance(6)
    for objective in ("balanced", "minmax"):
        opts = LPOptions(slot_s=0.25, objective=objective, time_limit_s=None, lowest_peak=False)
        one = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, opts)
        two = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, replace(opts, workers=3))
        assert one.n_components >= 6 and one.iterations > 0
        assert two.component_status == one.component_status
        assert two.iterations == one.iterations and two.n_variables == one.n_variables
        for name in ("start_slot", "rate_ptr", "rate_values", "leftover_egress", "leftover_ingress"):
            np.testing.assert_array_equal(getattr(two, name), getattr(one, name))
        assert two.objective_value == one.objective_value
    assert len(mp.active_children()) == 2  # the pool: workers - 1 processes, this one the third


def test_a_joint_plan_of_vgg16_jobs_is_the_same_with_two_workers(pool_stopped):
    cluster = Cluster.uniform(12)
    names = cluster.names
    jobs = [layer_chain_job(f"j{k}", names[k % 12], names[(k * 5 + 1) % 12]) for k in range(16)]
    opts = PlanOptions(alpha=0.4, trans_estimate="ordered", lowest_peak=False, time_limit_s=None,
                       iteration_limit=100_000)
    one = plan_jobs(jobs, cluster, opts)
    two = plan_jobs(jobs, cluster, PlanOptions(**{**opts.__dict__, "lp_workers": 2}))
    assert one.lp.n_components > 1 and one.lp.status == "optimal"
    np.testing.assert_array_equal(two.scheduled, one.scheduled)
    np.testing.assert_array_equal(two.lp.rate_values, one.lp.rate_values)
    np.testing.assert_array_equal(two.lp.start_slot, one.lp.start_slot)


def test_batches_balance_the_flows_largest_first():
    assert lppool.batches([5, 1, 4, 2, 3], 2) == [[0, 1, 3], [2, 4]]  # 5+1+2 against 4+3
    assert lppool.batches([7], 3) == [[0]]
    assert sorted(k for b in lppool.batches(list(range(20)), 4) for k in b) == list(range(20))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_workers_must_be_a_positive_integer(bad):
    with pytest.raises(ValidationError, match="workers: must be a positive integer"):
        LPOptions(slot_s=0.25, workers=bad)
    with pytest.raises(ValidationError, match="lp_workers: must be a positive integer"):
        PlanOptions(lp_workers=bad)


def test_a_dead_worker_fails_the_plan_and_the_next_plan_starts_a_new_pool(pool_stopped):
    import os
    import signal
    from concurrent.futures.process import BrokenProcessPool

    src, dst, size, rel, lat, cap = disjoint_instance(4)
    opts = LPOptions(slot_s=0.25, time_limit_s=None, lowest_peak=False, workers=2)
    want = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, opts)
    (worker,) = mp.active_children()
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10)
    with pytest.raises(BrokenProcessPool):
        solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, opts)
    again = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, opts)
    np.testing.assert_array_equal(again.rate_values, want.rate_values)
