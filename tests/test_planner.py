"""Tests of jitsched.plan.planner: alpha selection and plans keyed by job and transfer."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.dag.model import Cluster, compile_jobs
from jitsched.errors import ValidationError
from jitsched.plan.planner import PlanOptions, plan_jobs, select_alpha
from jitsched.workloads.synth import random_vgg16_jobs
from tests.dags import job, workload

GB = 1e9


def chain_workload(n_transfers=5):
    comps = [(f"c{i}", "h1", 0.5) for i in range(n_transfers)]
    trans = [(f"t{i}", "h0", "h1", 0.1 * GB) for i in range(n_transfers)]
    edges = [(f"t{i}", f"c{i}") for i in range(n_transfers)]
    edges += [(f"c{i}", f"c{i + 1}") for i in range(n_transfers - 1)]
    b_edges = [("t0", "c0"), ("t1", "c1"), ("c0", "c1")]
    return workload([job("a", comps, trans, edges), job("b", comps[:2], trans[:2], b_edges)])


@pytest.mark.parametrize("alpha, expected", [(0.0, 0), (0.2, 2), (0.4, 3), (1.0, 7)])
def test_select_alpha_counts_per_job(alpha, expected):
    w = chain_workload()
    d = compile_jobs(w.jobs, w.cluster)
    chosen = select_alpha(d, alpha)
    assert chosen.sum() == expected
    # the first transfers in topological order: t0 before t1 in each job
    ids = [d.node_ids[i] for i in np.flatnonzero(chosen)]
    if alpha == 0.4:
        assert sorted(ids) == ["t0", "t0", "t1"]


def test_select_alpha_respects_eligible_and_range():
    w = chain_workload()
    d = compile_jobs(w.jobs, w.cluster)
    elig = np.ones(d.n_nodes, dtype=bool)
    elig[d.node("a", "t0")] = False
    chosen = select_alpha(d, 0.4, elig)
    assert not chosen[d.node("a", "t0")] and chosen[d.node("a", "t1")] and chosen[d.node("a", "t2")]
    with pytest.raises(ValidationError, match="alpha"):
        select_alpha(d, 1.5)


def test_plan_json_shape_and_consistency():
    w = chain_workload()
    plan = plan_jobs(w.jobs, w.cluster, PlanOptions(slot_s=0.1, alpha=1.0, objective="minmax"))
    out = plan.to_json()
    assert out["status"] == "optimal" and out["slot_s"] == 0.1
    assert set(out["rates"]) == {"a", "b"} and set(out["rates"]["a"]) == {f"t{i}" for i in range(5)}
    total = {}
    for job_rates in out["rates"].values():
        for tid, r in job_rates.items():
            total[tid] = total.get(tid, 0) + sum(r["bytes_per_s"]) * 0.1
    assert total["t4"] == pytest.approx(0.1 * GB) and total["t0"] == pytest.approx(0.2 * GB)
    left = out["leftover_bytes_per_s"]
    assert set(left) == {"h0", "h1", "h2", "h3"}
    assert all(v == pytest.approx(1e9) for v in left["h2"])
    assert min(left["h0"]) >= -1e-6 and out["late"] == []


def test_plan_vgg16_jobs_no_late_transfers_when_uncontended():
    c = Cluster.uniform(20, 1e9)
    jobs = random_vgg16_jobs(5, c.names, seed=3)
    plan = plan_jobs(jobs, c, PlanOptions(slot_s=0.05, alpha=0.4))
    assert plan.lp.status == "optimal"
    assert len(plan.scheduled) == 5 * 13  # ceil(0.4 * 32)
    # planned rates finish every scheduled transfer
    sizes = plan.dag.size[plan.scheduled]
    sent = np.array([plan.lp.rates(k).sum() * 0.05 for k in range(len(plan.scheduled))])
    np.testing.assert_allclose(sent, sizes, rtol=1e-6)


def test_plan_replanning_mid_run_uses_now_and_remaining():
    w = chain_workload(3)
    d = compile_jobs(w.jobs[:1], w.cluster)
    known = np.full(d.n_nodes, np.nan)
    known[d.node("a", "t0")] = 0.1
    unfinished = d.kind == 1
    unfinished[d.node("a", "t0")] = False
    remaining = d.size.copy()
    remaining[d.node("a", "t1")] = 0.05 * GB
    plan = plan_jobs(d, w.cluster, PlanOptions(alpha=1.0, slot_s=0.1), now=0.2, known_done=known,
                     remaining=remaining, unfinished=unfinished)
    ids = [d.node_ids[i] for i in plan.scheduled]
    assert ids == ["t1", "t2"]
    assert plan.origin_s == 0.2
    assert plan.lp.rates(0).sum() * 0.1 == pytest.approx(0.05 * GB)


@pytest.mark.parametrize("field,value", [
    ("alpha", 1.5), ("alpha", float("nan")), ("slot_s", 0.0), ("slot_s", True), ("k_std", -1.0),
    ("objective", "fastest"), ("estimator", "x"), ("trans_estimate", "psychic"), ("job_order", "lifo"),
    ("solver", "gurobi"), ("time_limit_s", 0.0), ("iteration_limit", 2.5), ("iteration_limit", 0),
    ("fine_slots", 0), ("fine_slots", 1.5), ("aggregate", "yes"), ("lowest_peak", 1),
])
def test_plan_options_refuse_bad_values_by_name(field, value):
    with pytest.raises(ValidationError, match=f"^{field}:"):
        PlanOptions(**{field: value})


def test_plan_options_normalise_and_policies_validate_through_them():
    from jitsched.policies.jit import JitOptions, JitPolicy

    o = PlanOptions(alpha=1, slot_s=np.float64(0.05), iteration_limit=np.int64(7))
    assert (type(o.alpha), type(o.slot_s), type(o.iteration_limit)) == (float, float, int)
    with pytest.raises(ValidationError, match="^trans_estimate:"):
        JitPolicy(JitOptions(trans_estimate="psychic"))
    pol = JitPolicy(JitOptions(alpha=0.5, slot_s=0.2))
    assert (pol.alpha, pol.slot_s) == (0.5, 0.2) and pol.plan_options.trans_estimate == "ordered"


def test_plan_options_reach_the_lp():
    """aggregate, lowest_peak and fine_slots change how the LP plans, not whether the plan is on time."""
    cluster = Cluster.uniform(4, 1e9)
    jobs = random_vgg16_jobs(6, cluster.names, seed=2)
    plans = {name: plan_jobs(jobs, cluster, PlanOptions(**kw)) for name, kw in {
        "default": {}, "each": {"aggregate": False, "lowest_peak": False},
        "coarse": {"lowest_peak": False, "fine_slots": 4}}.items()}
    sched, dag = plans["default"].scheduled, plans["default"].dag
    pairs = {(int(s), int(d)) for s, d in zip(dag.src[sched], dag.dst[sched], strict=True)}
    # a VGG16 job reads from one host: one flow per job, even where jobs share a host pair
    assert len(pairs) < 6
    assert plans["default"].lp.n_flows == 6 and plans["each"].lp.n_flows == len(sched)
    assert plans["default"].lp.n_proven == plans["default"].lp.n_components
    assert plans["each"].lp.n_proven == 0 and plans["each"].lp.n_variables > 0
    for plan in plans.values():
        assert plan.lp.status == "optimal" and plan.lp.late.size == 0
    assert plans["default"].lp.objective_value == pytest.approx(plans["each"].lp.objective_value, rel=1e-6)
    out = plans["default"].to_json()
    assert (out["flows"], out["proven_components"], out["iterations"]) == (6, out["components"], 0)


def test_plan_options_build_the_lps_options():
    from jitsched.plan.lp import LPOptions

    o = PlanOptions(slot_s=0.2, objective="minmax", time_limit_s=None, iteration_limit=500, solver="ipm",
                    aggregate=False, fine_slots=8, lowest_peak=False)
    assert o.lp_options() == LPOptions(slot_s=0.2, objective="minmax", time_limit_s=None, iteration_limit=500,
                                       solver="ipm", aggregate=False, fine_slots=8, lowest_peak=False)
    assert PlanOptions().lp_options() == LPOptions(slot_s=PlanOptions().slot_s, iteration_limit=None)


def test_a_capped_plan_refuses_a_grid_too_large_before_the_lp(monkeypatch):
    import jitsched.plan.planner as planner

    w = chain_workload()
    opts = PlanOptions(slot_s=0.1, alpha=1.0)
    plan = plan_jobs(w.jobs, w.cluster, opts)
    ports, k = 2 * len(w.cluster.hosts), plan.scheduled
    n = int(planner.grid_slots(plan.dag.src[k], plan.dag.dst[k], plan.dag.size[k], plan.lat.release[k] - plan.origin_s,
                               plan.lat.lat[k] - plan.origin_s, w.cluster.egress_Bps, w.cluster.ingress_Bps, 0.1))
    assert n >= plan.lp.n_slots  # its deadlines' slots: the plan may end sooner
    assert plan_jobs(w.jobs, w.cluster, opts, max_port_slots=ports * n).lp.n_slots == plan.lp.n_slots
    with pytest.raises(ValidationError, match=f"would span {n} slots of 0.1 s on {ports} ports"):
        plan_jobs(w.jobs, w.cluster, opts, max_port_slots=ports * n - 1)

    def no_lp(*a, **k):
        raise AssertionError("the LP was built")

    monkeypatch.setattr(planner, "solve_bandwidth_lp", no_lp)
    # 1e14 bytes at 1 GB/s: 10^6 slots on 8 ports
    huge = workload([job("big", [("c", "h1", 0.1)], [("t", "h0", "h1", 1e14)], [("t", "c")])])
    with pytest.raises(ValidationError, match=r"would span 1,000,000 slots of 0.1 s on 8 ports \(8,000,000 "
                                              r"port-slots\), more than 4,194,304: plan with longer slots"):
        plan_jobs(huge.jobs, huge.cluster, opts, max_port_slots=1 << 22)


def test_grid_slots_counts_deadlines_and_full_rate_transfers():
    from jitsched.plan.planner import grid_slots

    cap = np.full(2, 1e9)
    one = np.array([0]), np.array([1])
    # released at 0.25 s (slot 2), 0.35 s at full rate: slots 2..5, past its 0.3 s deadline
    assert grid_slots(*one, np.array([3.5e8]), np.array([0.25]), np.array([0.3]), cap, cap, 0.1) == 6
    # a deadline at 1 s: slots 0..9
    assert grid_slots(*one, np.array([1e8]), np.array([0.0]), np.array([1.0]), cap, cap, 0.1) == 10
    assert grid_slots(np.zeros(0, int), np.zeros(0, int), np.zeros(0), np.zeros(0), np.zeros(0), cap, cap, 0.1) == 0
