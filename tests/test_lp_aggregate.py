"""Tests of the LP's flows: aggregation with the earliest-deadline-first split, lowest-peak plans, coarse cells."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.plan.lp import SEGMENT_WIDTHS, LPOptions, _cell_edges, solve_bandwidth_lp
from jitsched.plan.lpflows import Flows

ONE = np.ones(4)  # 4 hosts at 1 byte/s each way, 1 s slots: demands are capacity-slots


def check_valid(sol, src, dst, size, rel, cap_e, cap_i, slot_s):
    """Every byte planned once, no port over capacity in any slot, nothing before release."""
    rates = sol.dense_rates()
    assert np.all(rates >= -1e-9)
    np.testing.assert_allclose(rates.sum(axis=1) * slot_s, size, rtol=1e-6)
    for h in range(len(cap_e)):
        assert np.all(rates[np.asarray(src) == h].sum(axis=0) <= cap_e[h] * (1 + 1e-7))
        assert np.all(rates[np.asarray(dst) == h].sum(axis=0) <= cap_i[h] * (1 + 1e-7))
    a = np.floor(np.asarray(rel) / slot_s + 1e-9).astype(int)
    for f in range(len(size)):
        assert np.all(rates[f, :a[f]] == 0)
    return rates


def pair_heavy_instance(seed, m=30, nh=3, tight=False):
    """Many transfers per host pair, a few release slots and two weights: flows of several transfers."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nh, m)
    dst = (src + rng.integers(1, nh, m)) % nh
    size = rng.uniform(0.05, 1.0 if tight else 0.4, m)
    rel = rng.integers(0, 3, m).astype(float)
    lat = rel + rng.uniform(0.5, 4.0 if tight else 12.0, m)
    weight = rng.choice([1.0, 2.0], m)
    return src, dst, size, rel, lat, weight


def split_of(dl, demand, x, a=0):
    """One flow (host 0 -> 1, release slot ``a``) of transfers with these deadline slots, split."""
    m = len(dl)
    flows = Flows.make(np.full(m, a), np.asarray(dl), np.asarray(demand, dtype=float), np.ones(m),
                        np.zeros(m, dtype=np.int64), np.ones(m, dtype=np.int64), True)
    assert flows.n == 1
    start, ptr, vals = flows.split(np.array([0]), np.asarray(x, dtype=float), np.array([len(x)]))
    dense = np.zeros((m, a + len(x)))
    for f in range(m):
        dense[f, start[f]:start[f] + ptr[f + 1] - ptr[f]] = vals[ptr[f]:ptr[f + 1]]
    return dense


def test_split_serves_transfers_earliest_deadline_first():
    # deadlines 2, 0, 2 (slots): transfer 1 first, then 0 and 2 by index
    dense = split_of([2, 0, 2], [1.0, 0.5, 0.5], [1.0, 0.5, 0.5])
    np.testing.assert_allclose(dense, [[0.5, 0.5, 0], [0.5, 0, 0], [0, 0, 0.5]])
    # a release slot shifts everything
    dense = split_of([3, 4], [1.0, 1.0], [1.0, 1.0], a=3)
    np.testing.assert_allclose(dense, [[0, 0, 0, 1.0, 0], [0, 0, 0, 0, 1.0]])


def test_split_ends_a_transfer_at_its_deadline_despite_solver_crumbs():
    # the flow is 5e-8 short of the first deadline (slot 0), within a solver's tolerance
    dense = split_of([0, 2], [1.0, 1.0], [1.0 - 5e-8, 0.0, 1.0 + 5e-8])
    assert dense[0, 1:].sum() == 0 and dense[0, 0] == pytest.approx(1.0, abs=1e-7)
    assert dense.sum() == pytest.approx(2.0)
    # a real shortfall stays a late transfer
    dense = split_of([0, 2], [1.0, 1.0], [0.9, 0.0, 1.1])
    assert dense[0, 2] == pytest.approx(0.1)


@pytest.mark.parametrize("seed", range(40))
def test_split_meets_every_deadline_the_flow_meets(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 12))
    dl = rng.integers(0, 10, m)
    demand = rng.uniform(0.01, 1.0, m)
    # a flow profile that meets every cumulative deadline: each transfer's demand
    # spread at random over its window, summed (the split need not undo this spread)
    x = np.zeros(int(dl.max()) + 1)
    for f in range(m):
        x[:dl[f] + 1] += demand[f] * rng.dirichlet(np.full(dl[f] + 1, 0.5))
    for d in np.unique(dl):
        assert x[:d + 1].sum() >= demand[dl <= d].sum() - 1e-12
    dense = split_of(dl, demand, x)
    assert np.all(dense >= 0)
    np.testing.assert_allclose(dense.sum(axis=1), demand, rtol=1e-9)
    np.testing.assert_allclose(dense.sum(axis=0), x, atol=1e-12)
    for f in range(m):
        nz = np.flatnonzero(dense[f] > 1e-12)
        assert nz[-1] <= dl[f]


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_aggregated_plan_is_valid_and_as_good_as_one_flow_per_transfer(seed, objective):
    src, dst, size, rel, lat, weight = pair_heavy_instance(seed, tight=seed % 2 == 0)
    group = np.random.default_rng(seed).integers(0, 3, len(src)) if seed % 3 == 0 else None
    opts = LPOptions(slot_s=1.0, objective=objective, lowest_peak=False)
    kw = dict(weight=weight, group=group)
    agg = solve_bandwidth_lp(src, dst, size, rel, lat, ONE[:3], ONE[:3], opts, **kw)
    each = solve_bandwidth_lp(src, dst, size, rel, lat, ONE[:3], ONE[:3], replace(opts, aggregate=False), **kw)
    assert agg.status == each.status == "optimal"
    assert each.n_flows == len(src) and agg.n_flows < len(src)
    check_valid(agg, src, dst, size, rel, ONE[:3], ONE[:3], 1.0)
    assert agg.objective_value == pytest.approx(each.objective_value, rel=1e-6, abs=1e-9)
    if each.late.size == 0:  # on time is possible: the split keeps every transfer on time
        assert agg.late.size == 0
        assert np.all(agg.finish_slot <= agg.deadline_slot)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_aggregation_keeps_the_optimum_beside_frozen_load(seed, objective):
    """Frozen load (ports 0-100 % taken per slot) changes what each flow may send, not
    that one flow per host pair plans as well as one per transfer."""
    src, dst, size, rel, lat, weight = pair_heavy_instance(seed, tight=seed % 2 == 0)
    rng = np.random.default_rng(100 + seed)
    res_e = np.vstack([rng.choice([0.0, 0.1, 0.5, 1.0], size=(3, 6)), np.ones((1, 6))])
    res_i = np.vstack([rng.choice([0.0, 0.2, 0.6, 1.0], size=(3, 6)), np.ones((1, 6))])
    opts = LPOptions(slot_s=1.0, objective=objective)
    kw = dict(weight=weight, residual_egress_Bps=res_e, residual_ingress_Bps=res_i)
    agg = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE, opts, **kw)
    each = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE, replace(opts, aggregate=False), **kw)
    assert agg.status == each.status == "optimal" and agg.n_flows < each.n_flows
    assert agg.objective_value == pytest.approx(each.objective_value, rel=1e-6, abs=1e-9)
    check_valid(agg, src, dst, size, rel, ONE, ONE, 1.0)


def test_groups_never_share_a_flow():
    args = ([0, 0, 0], [1, 1, 1], [0.5, 0.5, 0.5], [0.0] * 3, [2.0, 3.0, 3.0], ONE, ONE)
    one = solve_bandwidth_lp(*args, LPOptions(slot_s=1.0, lowest_peak=False))
    two = solve_bandwidth_lp(*args, LPOptions(slot_s=1.0, lowest_peak=False), group=[7, 7, 3])
    assert (one.n_flows, two.n_flows) == (1, 2)
    assert one.objective_value == pytest.approx(two.objective_value)
    with pytest.raises(ValidationError, match="group"):
        solve_bandwidth_lp(*args, LPOptions(slot_s=1.0), group=[1, 2])


def test_aggregation_keeps_residuals_and_release_slots_apart():
    # h0 -> h1: two transfers released in slot 0, one in slot 2 (its own flow); slot 1 of
    # h0's egress is frozen
    res_e = np.array([[1.0, 0.0, 1.0, 1.0], [1.0] * 4, [1.0] * 4, [1.0] * 4])
    src, dst = [0, 0, 0], [1, 1, 1]
    size, rel, lat = [1.0, 1.0, 1.0], [0.0, 0.0, 2.0], [2.0, 4.0, 4.0]
    sol = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE,
                             LPOptions(slot_s=1.0), residual_egress_Bps=res_e)
    assert sol.n_flows == 2 and sol.status == "optimal" and sol.late.size == 0
    rates = check_valid(sol, src, dst, size, rel, ONE, ONE, 1.0)
    np.testing.assert_allclose(rates[:, 1], 0.0, atol=1e-9)  # nothing in the frozen slot
    np.testing.assert_allclose(rates[0], [1.0, 0, 0, 0], atol=1e-7)  # due first: slot 0 only


def test_lowest_peak_profile_of_one_flow_by_hand():
    # one flow h0 -> h1: 1 unit due by slot 1 (2 slots), 1 more by slot 7: the lowest
    # peak is 0.5 in slots 0-1, then 1/6 in slots 2-7; no port leaves the first segment
    sol = solve_bandwidth_lp([0, 0], [1, 1], [1.0, 1.0], [0, 0], [2.0, 8.0], ONE, ONE,
                             LPOptions(slot_s=1.0, objective="minmax"))
    assert sol.n_flows == 1 and sol.n_proven == 1 and sol.n_variables == 0
    np.testing.assert_allclose(sol.dense_rates().sum(axis=0), [0.5, 0.5] + [1 / 6] * 6)
    assert sol.peak_utilization == pytest.approx(0.5) and sol.objective_value == pytest.approx(0.5)
    # balanced: 0.5 leaves phi's first segment, so the LP decides (and spreads further)
    bal = solve_bandwidth_lp([0, 0], [1, 1], [1.0, 1.0], [0, 0], [2.0, 8.0], ONE, ONE, LPOptions(slot_s=1.0))
    assert bal.n_proven == 0 and bal.n_variables > 0


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_lowest_peak_plans_cost_what_the_lp_finds(seed, objective):
    rng = np.random.default_rng(seed)
    nh, m = 8, int(rng.integers(2, 30))
    src = rng.integers(0, nh, m)
    dst = (src + rng.integers(1, nh, m)) % nh
    size = rng.uniform(0.01, 0.3, m) * rng.choice([0.2, 1.0, 3.0])
    rel = rng.integers(0, 3, m) * 0.5
    lat = rel + rng.uniform(0.3, 8, m)
    cap = np.ones(nh)
    opts = LPOptions(slot_s=0.5, objective=objective)
    fast = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, opts)
    lp = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, replace(opts, lowest_peak=False))
    assert fast.status == lp.status == "optimal" and lp.n_proven == 0
    check_valid(fast, src, dst, size, rel, cap, cap, 0.5)
    assert fast.objective_value == pytest.approx(lp.objective_value, rel=1e-6, abs=1e-9)
    assert fast.late.size == lp.late.size
    if objective == "balanced" and fast.n_proven == fast.n_components:
        assert fast.peak_utilization <= SEGMENT_WIDTHS[0] + 1e-9


def test_lowest_peak_needs_ports_free_of_frozen_load():
    res_i = np.array([[1.0] * 3, [0.9] * 3, [1.0] * 3, [1.0] * 3])
    free = solve_bandwidth_lp([0], [1], [0.3], [0.0], [3.0], ONE, ONE, LPOptions(slot_s=1.0))
    busy = solve_bandwidth_lp([0], [1], [0.3], [0.0], [3.0], ONE, ONE,
                              LPOptions(slot_s=1.0), residual_ingress_Bps=res_i)
    other = solve_bandwidth_lp([0], [2], [0.3], [0.0], [3.0], ONE, ONE,
                               LPOptions(slot_s=1.0), residual_ingress_Bps=res_i)
    assert (free.n_proven, busy.n_proven, other.n_proven) == (1, 0, 1)
    np.testing.assert_allclose(free.rates(0), [0.1, 0.1, 0.1])


def test_cell_edges_fine_then_doubling():
    np.testing.assert_array_equal(_cell_edges(0, 5, None, None), np.arange(6))
    e = _cell_edges(0, 40, 4, None)
    np.testing.assert_array_equal(e, [0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40])
    assert np.all(np.diff(e) > 0)
    # the residuals' window stays fine; a grid that starts late starts fine there
    np.testing.assert_array_equal(_cell_edges(0, 12, 2, np.zeros((2, 6)))[:7], np.arange(7))
    np.testing.assert_array_equal(_cell_edges(9, 12, 4, None), [9, 11, 12])


@pytest.mark.parametrize("seed", range(20))
def test_coarse_cells_give_valid_plans(seed):
    src, dst, size, rel, lat, weight = pair_heavy_instance(seed, m=40, nh=4, tight=seed % 2 == 0)
    for fine in (2, 5):
        sol = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE,
                                 LPOptions(slot_s=1.0, fine_slots=fine, lowest_peak=False), weight=weight)
        assert sol.status == "optimal"
        check_valid(sol, src, dst, size, rel, ONE, ONE, 1.0)
    every = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE,
                               LPOptions(slot_s=1.0, lowest_peak=False), weight=weight)
    wide = solve_bandwidth_lp(src, dst, size, rel, lat, ONE, ONE,
                              LPOptions(slot_s=1.0, lowest_peak=False, fine_slots=1000), weight=weight)
    assert wide.objective_value == pytest.approx(every.objective_value, rel=1e-9)


@pytest.mark.parametrize("value", [0, -1, 2.5, True])
def test_fine_slots_must_be_a_positive_integer(value):
    with pytest.raises(ValidationError, match="fine_slots"):
        solve_bandwidth_lp([0], [1], [1.0], [0.0], [1.0], ONE, ONE, LPOptions(slot_s=1.0, fine_slots=value))


@pytest.mark.parametrize("fine, size, expected", [(None, 2.0, "ipm"), (2, 2.0, "ipm"), (2, 10.0, "simplex")])
def test_auto_solver_weighs_load_per_slot_not_per_cell(monkeypatch, fine, size, expected):
    """Light LPs above AUTO_IPM_COLUMNS go to interior point, however coarse their cells.

    2 units over 40 slots on each of 8 ports: 0.05 per slot, light; per cell (7 with
    fine_slots=2) it would look 0.29, heavy. 10 units: 0.25 per slot, heavy.
    """
    import jitsched.plan.lp as lp

    chosen = []
    make = lp._new_highs

    def spy():
        h = make()
        set_option = h.setOptionValue

        def record(name, value):
            if name == "solver":
                chosen.append(value)
            return set_option(name, value)

        h.setOptionValue = record
        return h

    monkeypatch.setattr(lp, "_new_highs", spy)
    monkeypatch.setattr(lp, "AUTO_IPM_COLUMNS", 0)
    src, dst = [0, 1, 2, 3], [1, 2, 3, 0]
    sol = solve_bandwidth_lp(src, dst, [size] * 4, [0.0] * 4, [40.0] * 4, ONE, ONE,
                             LPOptions(slot_s=1.0, fine_slots=fine, lowest_peak=False, split_components=False))
    assert sol.status == "optimal" and chosen[0] == expected
