"""Tests of jitsched.plan.lp: hand-computed plans, feasibility, minimal lateness, components, fallback."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from jitsched.errors import ValidationError
from jitsched.plan.lp import SEGMENT_WIDTHS, LPOptions, _phi, solve_bandwidth_lp

ONE = np.ones(4)  # 4 hosts at 1 byte/s each way: demands are in capacity-seconds


def check_valid(sol, src, dst, size, cap_e, cap_i, slot_s):
    """Every byte planned once, no port over capacity, no rate before release."""
    rates = sol.dense_rates()
    assert np.all(rates >= -1e-9)
    np.testing.assert_allclose(rates.sum(axis=1) * slot_s, size, rtol=1e-6)
    for h in range(len(cap_e)):
        assert np.all(rates[np.asarray(src) == h].sum(axis=0) <= cap_e[h] * (1 + 1e-7))
        assert np.all(rates[np.asarray(dst) == h].sum(axis=0) <= cap_i[h] * (1 + 1e-7))
    return rates


def random_instance(seed, m, nh, release_max, slack_lo, slack_hi):
    """Random transfers on ``nh`` unit-capacity hosts: (src, dst, size, release, lat)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, nh, m)
    dst = (src + rng.integers(1, nh, m)) % nh
    size = rng.uniform(0.1, 2.0, m)
    rel = rng.uniform(0, release_max, m)
    return src, dst, size, rel, rel + rng.uniform(slack_lo, slack_hi, m)


def test_two_transfers_sharing_a_port_meet_their_deadlines():
    # both leave h0; A needs 1 unit by t=1, B 1 unit by t=3: A must take slot 0
    # fully, B spreads over slots 1-2 (balanced) at half rate.
    sol = solve_bandwidth_lp([0, 0], [1, 2], [1.0, 1.0], [0, 0], [1.0, 3.0], ONE, ONE, LPOptions(slot_s=1.0))
    rates = check_valid(sol, [0, 0], [1, 2], [1.0, 1.0], ONE, ONE, 1.0)
    assert sol.status == "optimal"
    np.testing.assert_allclose(rates, [[1.0, 0, 0], [0, 0.5, 0.5]], atol=1e-7)
    assert sol.late.size == 0
    np.testing.assert_allclose(sol.leftover_egress[0], [0, 0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(sol.leftover_ingress[2], [1, 0.5, 0.5], atol=1e-7)


def test_minmax_peak_equals_hand_optimum():
    # three transfers into h3 of 1, 1, 2 units, all due by t=4 (4 slots):
    # 4 units over 4 slots on h3's ingress -> optimal peak 1.0; with t=8: 0.5.
    args = ([0, 1, 2], [3, 3, 3], [1.0, 1.0, 2.0], [0, 0, 0])
    sol = solve_bandwidth_lp(*args, [4.0, 4.0, 4.0], ONE, ONE, LPOptions(slot_s=1.0, objective="minmax"))
    assert sol.peak_utilization == pytest.approx(1.0, abs=1e-7)
    sol = solve_bandwidth_lp(*args, [8.0, 8.0, 8.0], ONE, ONE, LPOptions(slot_s=1.0, objective="minmax"))
    assert sol.peak_utilization == pytest.approx(0.5, abs=1e-7)
    assert sol.late.size == 0


def test_scaled_model_finds_true_optimum_at_gigabit_magnitudes():
    # docs/architecture.md §5: with raw bytes/s coefficients HiGHS stopped at peak 1.62 where
    # 0.62 was attainable. 1 Gbit/s ports, 100 ms slots, 3 transfers into one host.
    cap = np.full(4, 1.25e8)
    size = np.array([0.31, 0.31, 0.62]) * 1.25e8  # 1.24 capacity-seconds in all
    sol = solve_bandwidth_lp([0, 1, 2], [3, 3, 3], size, [0, 0, 0], [2.0, 2.0, 2.0], cap, cap,
                             LPOptions(slot_s=0.1, objective="minmax"))
    check_valid(sol, [0, 1, 2], [3, 3, 3], size, cap, cap, 0.1)
    assert sol.peak_utilization == pytest.approx(0.62, abs=1e-6)
    bal = solve_bandwidth_lp([0, 1, 2], [3, 3, 3], size, [0, 0, 0], [2.0, 2.0, 2.0], cap, cap,
                             LPOptions(slot_s=0.1))
    # balanced is exact only to its segment grid: 0.62 lies in the 0.5..0.7 segment
    edges = np.cumsum(SEGMENT_WIDTHS)
    assert bal.peak_utilization <= edges[np.searchsorted(edges, 0.62)] + 1e-9


def hard_deadline_feasible(src, dst, size, a, dl, nh, horizon):
    """Independent check with scipy's linprog: can every demand meet its deadline slot?"""
    m = len(src)
    cols = [(f, t) for f in range(m) for t in range(a[f], dl[f] + 1)]
    A_eq = np.zeros((m, len(cols)))
    A_ub = np.zeros((2 * nh * horizon, len(cols)))
    for k, (f, t) in enumerate(cols):
        A_eq[f, k] = 1
        A_ub[src[f] * horizon + t, k] = 1
        A_ub[(nh + dst[f]) * horizon + t, k] = 1
    res = linprog(np.zeros(len(cols)), A_ub=A_ub, b_ub=np.ones(len(A_ub)), A_eq=A_eq, b_eq=size,
                  bounds=(0, None), method="highs")
    return res.status == 0


def min_total_lateness(src, dst, size, a, dl, nh, horizon):
    """Independent minimum of sum_f sum_{t > l_f} (t - l_f) * y[f, t]."""
    m = len(src)
    cols = [(f, t) for f in range(m) for t in range(a[f], horizon)]
    c = np.array([max(t - dl[f], 0) for f, t in cols], dtype=float)
    A_eq = np.zeros((m, len(cols)))
    A_ub = np.zeros((2 * nh * horizon, len(cols)))
    for k, (f, t) in enumerate(cols):
        A_eq[f, k] = 1
        A_ub[src[f] * horizon + t, k] = 1
        A_ub[(nh + dst[f]) * horizon + t, k] = 1
    res = linprog(c, A_ub=A_ub, b_ub=np.ones(len(A_ub)), A_eq=A_eq, b_eq=size, bounds=(0, None),
                  method="highs")
    assert res.status == 0
    return res.fun


def plan_lateness(sol, dl):
    rates = sol.dense_rates()
    t = np.arange(rates.shape[1])
    return float(np.sum(rates * np.maximum(t[None, :] - np.asarray(dl)[:, None], 0)))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_random_instances_valid_on_time_when_feasible_else_minimal_lateness(seed, objective):
    rng = np.random.default_rng(seed)
    nh, m = 4, int(rng.integers(2, 9))
    src = rng.integers(0, nh, m)
    dst = (src + rng.integers(1, nh, m)) % nh
    size = rng.uniform(0.2, 3.0, m)
    a = rng.integers(0, 4, m)
    dl = a + rng.integers(0, 5, m)
    sol = solve_bandwidth_lp(src, dst, size, a.astype(float), dl + 1.0, ONE, ONE,
                             LPOptions(slot_s=1.0, objective=objective))
    assert sol.status == "optimal"
    np.testing.assert_array_equal(sol.deadline_slot, dl)
    rates = check_valid(sol, src, dst, size, ONE, ONE, 1.0)
    for f in range(m):
        assert np.all(rates[f, :a[f]] == 0)  # nothing before release
    horizon = rates.shape[1] + int(np.ceil(size.sum())) + 2
    if hard_deadline_feasible(src, dst, size, a, dl, nh, horizon):
        assert sol.late.size == 0 and plan_lateness(sol, dl) == pytest.approx(0, abs=1e-6)
    else:
        assert sol.late.size > 0
        assert plan_lateness(sol, dl) == pytest.approx(
            min_total_lateness(src, dst, size, a, dl, nh, horizon), rel=1e-6, abs=1e-6)


def test_components_solved_separately_equal_monolithic():
    rng = np.random.default_rng(7)
    # two disjoint host groups {0,1,2} and {3,4,5}: at least two components
    m = 16
    grp = rng.integers(0, 2, m) * 3
    src = grp + rng.integers(0, 3, m)
    dst = grp + (src - grp + rng.integers(1, 3, m)) % 3
    size = rng.uniform(0.1, 2.0, m)
    rel = rng.uniform(0, 3, m)
    lat = rel + rng.uniform(0.5, 4, m)
    cap = np.ones(6)
    for objective in ("balanced", "minmax"):
        split = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                                   LPOptions(slot_s=0.5, objective=objective))
        mono = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                                  LPOptions(slot_s=0.5, objective=objective, split_components=False))
        assert split.n_components >= 2 and mono.n_components == 1
        if objective == "balanced":
            assert split.objective_value == pytest.approx(mono.objective_value, rel=1e-7)
        else:
            # minmax over components: the monolithic peak is the largest component peak
            assert split.peak_utilization == pytest.approx(mono.peak_utilization, rel=1e-7)


def test_tardiness_grows_with_lateness_so_late_transfers_finish_early():
    # one port, two units due at t=1 (infeasible): the late unit goes in slot 1, not later
    sol = solve_bandwidth_lp([0, 0], [1, 2], [1.0, 1.0], [0, 0], [1.0, 1.0], ONE, ONE, LPOptions(slot_s=1.0))
    assert sol.n_slots == 2
    assert sorted(sol.finish_slot.tolist()) == [0, 1] or sol.finish_slot.tolist() == [1, 1]
    assert sol.lateness_s.max() == pytest.approx(1.0)


def test_time_limit_fallback_is_a_valid_edf_plan():
    m, nh = 400, 10
    src, dst, size, rel, lat = random_instance(3, m, nh, 5, 0.5, 6)
    cap = np.ones(nh)
    sol = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, LPOptions(slot_s=0.25, time_limit_s=1e-6))
    assert sol.status == "fallback"
    assert any(s.startswith("fallback(time_limit") for s in sol.component_status)
    rates = check_valid(sol, src, dst, size, cap, cap, 0.25)
    a = np.floor(rel / 0.25).astype(int)
    for f in range(m):
        assert np.all(rates[f, :a[f]] == 0)


def test_iteration_limit_fallback_is_valid_and_machine_independent():
    m, nh = 60, 6
    src, dst, size, rel, lat = random_instance(3, m, nh, 5, 0.5, 6)
    cap = np.ones(nh)
    full = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap, LPOptions(slot_s=0.25, time_limit_s=None))
    assert full.status == "optimal" and full.iterations > 50
    # a budget far below what the solves need: every component falls back, however fast the machine
    cut = [solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                              LPOptions(slot_s=0.25, time_limit_s=None, iteration_limit=5)) for _ in range(2)]
    assert cut[0].status == "fallback"
    assert any(s == "fallback(iteration_limit)" for s in cut[0].component_status)
    check_valid(cut[0], src, dst, size, cap, cap, 0.25)
    np.testing.assert_array_equal(cut[0].rate_values, cut[1].rate_values)
    # a budget the solves fit in: the same plan as no budget at all
    roomy = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                               LPOptions(slot_s=0.25, time_limit_s=None, iteration_limit=10 * full.iterations))
    assert roomy.status == "optimal" and roomy.iterations == full.iterations
    np.testing.assert_array_equal(roomy.rate_values, full.rate_values)


def test_balanced_spreads_a_lone_transfer_evenly_over_its_window():
    sol = solve_bandwidth_lp([0], [1], [2.0], [0.0], [4.0], ONE, ONE, LPOptions(slot_s=1.0))
    np.testing.assert_allclose(sol.rates(0), [0.5, 0.5, 0.5, 0.5], atol=1e-7)
    assert sol.objective_value == pytest.approx(2 * 4 * _phi(np.array([0.5]))[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"objective": "cheap"}, "objective"),
    ({"slot_s": 0}, "slot_s"),
    ({"time_limit_s": -1}, "time_limit_s"),
    ({"time_limit_s": 0.0}, "time_limit_s"),
    ({"iteration_limit": 0}, "iteration_limit"),
    ({"iteration_limit": 2.5}, "iteration_limit"),
    ({"iteration_limit": True}, "iteration_limit"),
    ({"solver": "gurobi"}, "solver"),
])
def test_bad_arguments(kwargs, message):
    args = dict(slot_s=1.0)
    args.update(kwargs)
    with pytest.raises(ValidationError, match=message):
        solve_bandwidth_lp([0], [1], [1.0], [0.0], [1.0], ONE, ONE, LPOptions(**args))


def test_bad_arrays():
    with pytest.raises(ValidationError, match="size_bytes"):
        solve_bandwidth_lp([0], [1], [0.0], [0.0], [1.0], ONE, ONE, LPOptions(slot_s=1.0))
    with pytest.raises(ValidationError, match="out of range"):
        solve_bandwidth_lp([0], [7], [1.0], [0.0], [1.0], ONE, ONE, LPOptions(slot_s=1.0))
    with pytest.raises(ValidationError, match="dst: expected shape"):
        solve_bandwidth_lp([0, 1], [1], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0], ONE, ONE, LPOptions(slot_s=1.0))


def test_empty_problem():
    sol = solve_bandwidth_lp([], [], [], [], [], ONE, ONE, LPOptions(slot_s=1.0))
    assert sol.status == "optimal" and sol.n_slots == 0 and sol.late.size == 0


@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_interior_point_and_dual_simplex_agree(objective):
    src, dst, size, rel, lat = random_instance(11, 40, 6, 3, 0.2, 3)
    cap = np.ones(6)
    a = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                           LPOptions(slot_s=0.5, objective=objective, solver="simplex"))
    b = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                           LPOptions(slot_s=0.5, objective=objective, solver="ipm"))
    assert a.status == b.status == "optimal"
    assert a.objective_value == pytest.approx(b.objective_value, rel=1e-6)
    check_valid(b, src, dst, size, cap, cap, 0.5)


def test_the_lp_takes_an_options_object_checked_when_made():
    with pytest.raises(TypeError, match="options: expected an LPOptions, got dict"):
        solve_bandwidth_lp([0], [1], [1.0], [0.0], [1.0], ONE, ONE, {"slot_s": 1.0})
    for kw, field in (({"threads": 0}, "threads"), ({"aggregate": 1}, "aggregate"),
                      ({"fine_slots": 0}, "fine_slots"), ({"objective": "fastest"}, "objective")):
        with pytest.raises(ValidationError, match=f"^{field}: "):
            LPOptions(slot_s=1.0, **kw)
    # the same plan whichever way the options object was made
    a = solve_bandwidth_lp([0], [1], [1.0], [0.0], [3.0], ONE, ONE, LPOptions(slot_s=1.0))
    b = solve_bandwidth_lp([0], [1], [1.0], [0.0], [3.0], ONE, ONE, LPOptions(1.0, "balanced", 5.0))
    np.testing.assert_array_equal(a.dense_rates(), b.dense_rates())


def test_slot_windows_by_hand():
    from jitsched.plan.lp import slot_windows

    # released at 0.25 s (slot 2), LAT 0.3 s (slot 2 ends by it); a release a float crumb
    # before a slot's start is in that slot; a LAT before the release slot's end keeps it
    first, last = slot_windows(np.array([0.25, 0.3 - 1e-12, 0.0, -1.0]), np.array([0.3, 0.55, 0.01, 0.2]), 0.1)
    assert first.tolist() == [2.0, 3.0, 0.0, 0.0]
    assert last.tolist() == [2.0, 5.0, 0.0, 1.0]


def test_fallback_plans_every_byte_where_a_greedy_fill_outgrows_the_busiest_port_load():
    # Three hosts, every transfer released in slot 0; a greedy earliest-deadline-first
    # fill needs more slots than the busiest port's load (the optimal plan's span).
    src, dst = [2, 1, 1, 2, 0], [1, 0, 2, 0, 1]
    size, rel, lat = [2.0, 2.0, 1.5, 2.0, 1.5], [0.0] * 5, [2.0, 1.0, 1.0, 1.0, 1.0]
    cap = np.ones(3)
    sol = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                             LPOptions(slot_s=1.0, time_limit_s=None, iteration_limit=1))
    assert sol.status == "fallback"
    check_valid(sol, src, dst, size, cap, cap, 1.0)


def test_a_small_transfer_spread_thin_keeps_all_its_bytes():
    # 1 kB over a 100 s window at 100 Gbit/s: its even spread is 10 bytes/s a slot,
    # far below any solver tolerance, yet every byte is planned
    cap = np.full(2, 1.25e10)
    for lowest_peak in (True, False):
        sol = solve_bandwidth_lp([0], [1], [1000.0], [0.0], [100.0], cap, cap,
                                 LPOptions(slot_s=0.1, lowest_peak=lowest_peak))
        assert sol.status == "optimal" and sol.late.size == 0
        check_valid(sol, [0], [1], [1000.0], cap, cap, 0.1)


def test_a_small_transfer_that_cannot_be_on_time_is_planned_late_not_dropped():
    # h0 -> h1 is full until slot 99 with a heavier transfer due then; a tiny one due in
    # slot 0 cannot fit on time: it is planned, late, rather than left without bytes
    size = [100.0, 5e-8]
    sol = solve_bandwidth_lp([0, 0], [1, 1], size, [0.0, 0.0], [100.0, 1.0], ONE, ONE,
                             LPOptions(slot_s=1.0), weight=[2.0, 1.0], group=[0, 1])
    assert sol.status == "optimal"
    check_valid(sol, [0, 0], [1, 1], size, ONE, ONE, 1.0)
    assert sol.late.size > 0


def test_a_small_transfer_beside_a_large_one_keeps_its_bytes():
    # 100 Gbit/s ports, 0.1 s slots: 100 bytes are 8e-8 of a port's slot, within
    # HiGHS's feasibility tolerance of nothing; the LP still plans all of them
    cap = np.full(3, 1.25e10)
    src, dst, size = [0, 0], [1, 2], [5e9, 100.0]
    sol = solve_bandwidth_lp(src, dst, size, [0.0, 0.0], [1.0, 1.0], cap, cap, LPOptions(slot_s=0.1))
    assert sol.status == "optimal" and sol.n_proven == 0 and sol.late.size == 0
    check_valid(sol, src, dst, size, cap, cap, 0.1)
