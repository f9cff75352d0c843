"""Tests of the bandwidth LP against residual capacity: hand-computed plans, never over the residual."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.plan.lp import LPOptions, solve_bandwidth_lp

ONE = np.ones(2)  # 2 hosts at 1 byte/s each way, 1 s slots: demands are capacity-slots


def dense_port_load(sol, ports, n_hosts):
    """Planned bytes/s per host and slot for the given per-transfer host indices."""
    rates = sol.dense_rates()
    out = np.zeros((n_hosts, rates.shape[1]))
    np.add.at(out, np.asarray(ports), rates)
    return out


def assert_within_residual(sol, src, dst, size, slot_s, cap_e, cap_i, res_e, res_i):
    """Demand met exactly; every port and slot carries at most its residual (capacity past it)."""
    rates = sol.dense_rates()
    np.testing.assert_allclose(rates.sum(axis=1) * slot_s, size, rtol=1e-6)
    assert np.all(rates >= -1e-9)
    nh = len(cap_e)
    for load, cap, res in ((dense_port_load(sol, src, nh), cap_e, res_e),
                           (dense_port_load(sol, dst, nh), cap_i, res_i)):
        limit = np.tile(cap[:, None], (1, load.shape[1]))
        w = min(load.shape[1], res.shape[1])
        limit[:, :w] = res[:, :w]
        assert np.all(load <= limit + 1e-7 * cap[:, None]), (load, limit)


def test_minmax_fills_around_frozen_load_hand_optimum():
    # h0 -> h1, 2 units due by t=4. Egress of h0 has [0, 1, 0.5, 1] left: slot 0 is
    # taken, slot 2 half taken. minmax: z >= x1, 0.5 + x2, x3 with x1+x2+x3 = 2
    # gives z = 5/6, x = (0, 5/6, 1/3, 5/6).
    res_e = np.array([[0.0, 1.0, 0.5, 1.0], [1.0, 1.0, 1.0, 1.0]])
    sol = solve_bandwidth_lp([0], [1], [2.0], [0.0], [4.0], ONE, ONE,
                             LPOptions(slot_s=1.0, objective="minmax"), residual_egress_Bps=res_e)
    assert sol.status == "optimal" and sol.late.size == 0
    np.testing.assert_allclose(sol.dense_rates()[0], [0, 5 / 6, 1 / 3, 5 / 6], atol=1e-7)
    assert sol.peak_utilization == pytest.approx(1.0)  # the frozen slot 0 counts too
    np.testing.assert_allclose(sol.leftover_egress[0], [0, 1 / 6, 1 / 6, 1 / 6], atol=1e-7)
    np.testing.assert_allclose(sol.leftover_ingress[1], [1, 1 / 6, 2 / 3, 1 / 6], atol=1e-7)


def test_balanced_weighs_frozen_utilisation_hand_optimum():
    # h0 -> h1, 1 unit due by t=2; 0.8 of h0's egress in slot 0 is frozen. Moving
    # load into slot 0 costs egress phi'(0.8 + x0) + ingress phi'(x0) and saves
    # 2 phi'(x1): profitable while 16 + 1 < 2 * 16, i.e. up to x0 = 0.15, x1 = 0.85
    # (0.95 and 0.85 are breakpoints). Without the frozen load it splits 0.5/0.5.
    res_e = np.array([[0.2, 1.0], [1.0, 1.0]])
    sol = solve_bandwidth_lp([0], [1], [1.0], [0.0], [2.0], ONE, ONE,
                             LPOptions(slot_s=1.0), residual_egress_Bps=res_e)
    assert sol.status == "optimal"
    np.testing.assert_allclose(sol.dense_rates()[0], [0.15, 0.85], atol=1e-7)
    free = solve_bandwidth_lp([0], [1], [1.0], [0.0], [2.0], ONE, ONE, LPOptions(slot_s=1.0))
    np.testing.assert_allclose(free.dense_rates()[0], [0.5, 0.5], atol=1e-7)


def test_no_residual_left_means_late_and_after_the_window():
    # the whole window [0, 2) is taken on h1's ingress: the transfer can only run
    # after it, at full rate, and is reported late by exactly that much.
    res_i = np.array([[1.0, 1.0], [0.0, 0.0]])
    sol = solve_bandwidth_lp([0], [1], [1.0], [0.0], [2.0], ONE, ONE,
                             LPOptions(slot_s=1.0), residual_ingress_Bps=res_i)
    np.testing.assert_allclose(sol.dense_rates()[0], [0, 0, 1.0], atol=1e-7)
    assert list(sol.late) == [0] and sol.lateness_s[0] == pytest.approx(1.0)
    assert sol.leftover_ingress.shape[1] == 3


def test_full_residual_is_the_same_plan_as_none():
    rng = np.random.default_rng(3)
    src = rng.integers(0, 4, 12)
    dst = (src + rng.integers(1, 4, 12)) % 4
    size = rng.uniform(0.1, 1.5, 12)
    rel = rng.uniform(0, 2, 12)
    lat = rel + rng.uniform(1, 4, 12)
    cap = np.full(4, 2.0)
    for objective in ("balanced", "minmax"):
        plain = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                                   LPOptions(slot_s=0.5, objective=objective))
        full = solve_bandwidth_lp(src, dst, size, rel, lat, cap, cap,
                                  LPOptions(slot_s=0.5, objective=objective),
                                  residual_egress_Bps=np.tile(cap[:, None], (1, 7)),
                                  residual_ingress_Bps=np.tile(cap[:, None], (1, 7)))
        assert full.objective_value == pytest.approx(plain.objective_value, rel=1e-6, abs=1e-9)
        assert full.peak_utilization == pytest.approx(plain.peak_utilization, abs=1e-7)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", ["balanced", "minmax"])
def test_random_plans_never_exceed_the_residual(seed, objective):
    rng = np.random.default_rng(seed)
    nh, m, slot_s = 5, 15, 0.5
    cap_e = rng.uniform(1.0, 3.0, nh)
    cap_i = rng.uniform(1.0, 3.0, nh)
    src = rng.integers(0, nh, m)
    dst = (src + rng.integers(1, nh, m)) % nh
    size = rng.uniform(0.1, 2.0, m)
    rel = rng.uniform(0, 2, m)
    lat = rel + rng.uniform(0.5, 3, m)
    width = int(rng.integers(2, 12))
    res_e = cap_e[:, None] * rng.choice([0.0, 0.3, 0.7, 1.0], size=(nh, width))
    res_i = cap_i[:, None] * rng.choice([0.0, 0.5, 1.0], size=(nh, width))
    sol = solve_bandwidth_lp(src, dst, size, rel, lat, cap_e, cap_i,
                             LPOptions(slot_s=slot_s, objective=objective),
                             residual_egress_Bps=res_e,
                             residual_ingress_Bps=res_i)
    assert sol.status == "optimal"
    assert_within_residual(sol, src, dst, size, slot_s, cap_e, cap_i, res_e, res_i)
    # the leftover is exactly the residual minus what was planned
    load = dense_port_load(sol, src, nh)
    w = sol.leftover_egress.shape[1]
    limit = np.tile(cap_e[:, None], (1, w))
    limit[:, :width] = res_e
    planned = np.zeros((nh, w))
    planned[:, :load.shape[1]] = load
    np.testing.assert_allclose(sol.leftover_egress, np.maximum(limit - planned, 0), atol=1e-6)


def test_fallback_fill_respects_the_residual():
    rng = np.random.default_rng(7)
    src = rng.integers(0, 4, 30)
    dst = (src + rng.integers(1, 4, 30)) % 4
    size = rng.uniform(0.1, 1.0, 30)
    cap = np.ones(4)
    res = rng.choice([0.0, 0.5, 1.0], size=(4, 6))
    sol = solve_bandwidth_lp(src, dst, size, np.zeros(30), np.full(30, 3.0), cap, cap,
                             LPOptions(slot_s=0.5, time_limit_s=1e-6),
                             residual_egress_Bps=res,
                             residual_ingress_Bps=res)
    assert sol.status == "fallback"
    assert_within_residual(sol, src, dst, size, 0.5, cap, cap, res, res)


def test_bad_residuals_are_refused():
    with pytest.raises(ValidationError, match="residual_egress_Bps"):
        solve_bandwidth_lp([0], [1], [1.0], [0.0], [2.0], ONE, ONE,
                           LPOptions(slot_s=1.0), residual_egress_Bps=np.ones(2))
    with pytest.raises(ValidationError, match="residual_ingress_Bps"):
        solve_bandwidth_lp([0], [1], [1.0], [0.0], [2.0], ONE, ONE,
                           LPOptions(slot_s=1.0), residual_ingress_Bps=np.full((2, 3), np.nan))
