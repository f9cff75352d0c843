"""Tests of the rate-allocation kernels against their pure-Python references and by hand."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.errors import ValidationError
from jitsched.plan import alloc


@st.composite
def flows(draw):
    h = draw(st.integers(2, 6))
    nf = draw(st.integers(0, 25))
    src = np.array(draw(st.lists(st.integers(0, h - 1), min_size=nf, max_size=nf)), dtype=np.int64)
    off = np.array(draw(st.lists(st.integers(1, h - 1), min_size=nf, max_size=nf)), dtype=np.int64)
    dst = (src + off) % h
    caps = st.lists(st.floats(0.0, 10.0), min_size=h, max_size=h)
    w = np.array(draw(st.lists(st.floats(0.1, 5.0), min_size=nf, max_size=nf)))
    return src, dst, np.array(draw(caps)), np.array(draw(caps)), w


@settings(max_examples=150, deadline=None)
@given(flows())
def test_maxmin_kernel_matches_reference(case):
    src, dst, ce, ci, w = case
    got = alloc.maxmin_fair(src, dst, ce, ci, w)
    ref = alloc.maxmin_fair_reference(src, dst, ce, ci, w)
    np.testing.assert_allclose(got, ref, atol=1e-9)
    alloc.check_capacity(src, dst, got, ce, ci)


@settings(max_examples=150, deadline=None)
@given(flows(), st.randoms(use_true_random=False))
def test_greedy_kernel_matches_reference(case, rnd):
    src, dst, ce, ci, _ = case
    order = list(range(len(src)))
    rnd.shuffle(order)
    got = alloc.priority_greedy(order, src, dst, ce, ci)
    np.testing.assert_allclose(got, alloc.priority_greedy_reference(order, src, dst, ce, ci))
    alloc.check_capacity(src, dst, got, ce, ci)


def test_maxmin_by_hand():
    # flows 0,1 leave host 0 (cap 10); flow 2 goes 1 -> 2 whose ingress is 3:
    # host 0 splits 5/5, flow 1 (0 -> 2) is held to 3 - x by host 2's ingress shared with flow 2.
    src = [0, 0, 1]
    dst = [1, 2, 2]
    ce = [10.0, 10.0, 10.0]
    ci = [10.0, 10.0, 3.0]
    np.testing.assert_allclose(alloc.maxmin_fair(src, dst, ce, ci), [8.5, 1.5, 1.5])


def test_greedy_by_hand_and_fixed_then_maxmin():
    # flow 1 goes first and takes all of host 2's ingress (10); flow 0 gets the rest of host 0 (4)
    rate = alloc.priority_greedy([1, 0], [0, 0], [1, 2], [14.0, 0, 0], [0, 8.0, 10.0])
    np.testing.assert_allclose(rate, [4.0, 10.0])
    # flow 0 planned at 7 on host 0's egress (10): flows 1 and 2 share the last 3
    rate = alloc.fixed_then_maxmin([7.0, np.nan, np.nan], [0, 0, 0], [1, 2, 1],
                                   [10.0, 10, 10], [10.0, 10, 10])
    np.testing.assert_allclose(rate, [7.0, 1.5, 1.5])
    # an overcommitted plan is scaled down to fit
    np.testing.assert_allclose(alloc.fit_fixed([8.0, 8.0], [0, 0], [1, 2], [8.0, 8, 8], [8.0] * 3),
                               [4.0, 4.0])


def test_bad_input():
    with pytest.raises(ValidationError):
        alloc.maxmin_fair([0], [5], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValidationError):
        alloc.priority_greedy([0, 0], [0, 1], [1, 0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(AssertionError):
        alloc.check_capacity([0, 0], [1, 1], [0.6, 0.6], [1.0, 1.0], [1.0, 1.0])


def pair_maxmin_reference(src, dst, cap_e, cap_i):
    """Pure-Python pair grouping (sorted pairs, flow counts as weights) over the pure-Python filling."""
    pairs = sorted({(int(s), int(d)) for s, d in zip(src, dst, strict=True)})
    count = [sum(1 for s, d in zip(src, dst, strict=True) if (s, d) == p) for p in pairs]
    group = alloc.maxmin_fair_reference([p[0] for p in pairs], [p[1] for p in pairs], cap_e, cap_i, count)
    at = {p: g / c for p, g, c in zip(pairs, group, count, strict=True)}
    return np.array([at[(int(s), int(d))] for s, d in zip(src, dst, strict=True)], dtype=np.float64)


def pair_maxmin_unique(src, dst, cap_e, cap_i):
    """The former numpy implementation (np.unique groups, maxmin_fair kernel): the kernel must equal it bit for bit."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    if len(src) == 0:
        return np.zeros(0)
    h = len(cap_e)
    uniq, inv, count = np.unique(src * h + dst, return_inverse=True, return_counts=True)
    group = alloc.maxmin_fair(uniq // h, uniq % h, cap_e, cap_i, count.astype(np.float64))
    return (group / count)[inv]


@st.composite
def pair_flows(draw):
    # few hosts and many flows, so that pairs repeat; capacities may be negative (count as zero)
    h = draw(st.integers(1, 5))
    nf = draw(st.integers(0, 40))
    src = np.array(draw(st.lists(st.integers(0, h - 1), min_size=nf, max_size=nf)), dtype=np.int64)
    dst = np.array(draw(st.lists(st.integers(0, h - 1), min_size=nf, max_size=nf)), dtype=np.int64)
    caps = st.lists(st.floats(-1.0, 10.0), min_size=h, max_size=h)
    return src, dst, np.array(draw(caps)), np.array(draw(caps))


@settings(max_examples=200, deadline=None)
@given(pair_flows())
def test_pair_maxmin_kernel_matches_references(case):
    src, dst, ce, ci = case
    got = alloc.pair_maxmin(src, dst, ce, ci)
    np.testing.assert_array_equal(got, pair_maxmin_unique(src, dst, ce, ci))
    np.testing.assert_allclose(got, pair_maxmin_reference(src, dst, ce, ci), atol=1e-9)
    alloc.check_capacity(src, dst, got, np.maximum(ce, 0.0), np.maximum(ci, 0.0))


def test_pair_maxmin_bad_input():
    with pytest.raises(ValidationError):
        alloc.pair_maxmin([0, 3], [1, 1], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValidationError):
        alloc.pair_maxmin([0], [-1], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValidationError):
        alloc.pair_maxmin([0], [1], [1.0, np.inf], [1.0, 1.0])
    assert alloc.pair_maxmin([], [], [1.0], [1.0]).shape == (0,)


def fixed_then_maxmin_numpy(fixed, src, dst, cap_e, cap_i, weight=None):
    """The former numpy composition (fit_fixed, then maxmin_fair on what is left): the kernel must equal it."""
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    cap_e, cap_i = np.asarray(cap_e, dtype=np.float64), np.asarray(cap_i, dtype=np.float64)
    fixed = np.asarray(fixed, dtype=np.float64)
    planned = ~np.isnan(fixed)
    rate = np.zeros(len(src))
    h = len(cap_e)
    if planned.any():
        rate[planned] = alloc.fit_fixed(fixed[planned], src[planned], dst[planned], cap_e, cap_i)
        cap_e = cap_e - np.bincount(src[planned], weights=rate[planned], minlength=h)
        cap_i = cap_i - np.bincount(dst[planned], weights=rate[planned], minlength=h)
    share = ~planned
    if share.any():
        w = None if weight is None else np.asarray(weight, dtype=np.float64)[share]
        rate[share] = alloc.maxmin_fair(src[share], dst[share], np.maximum(cap_e, 0.0),
                                        np.maximum(cap_i, 0.0), w)
    return rate


def fixed_then_maxmin_reference(fixed, src, dst, cap_e, cap_i, weight=None):
    """Pure Python: planned rates scaled per port, then the pure-Python filling of the leftover."""
    h = len(cap_e)
    fixed = [float(x) for x in fixed]
    planned = [not np.isnan(x) for x in fixed]
    load_e, load_i = [0.0] * h, [0.0] * h
    for f, p in enumerate(planned):
        if p:
            load_e[src[f]] += max(fixed[f], 0.0)
            load_i[dst[f]] += max(fixed[f], 0.0)
    rate = [0.0] * len(src)
    left_e, left_i = [float(c) for c in cap_e], [float(c) for c in cap_i]
    for f, p in enumerate(planned):
        if p:
            fe = max(cap_e[src[f]], 0.0) / load_e[src[f]] if load_e[src[f]] > cap_e[src[f]] else 1.0
            fi = max(cap_i[dst[f]], 0.0) / load_i[dst[f]] if load_i[dst[f]] > cap_i[dst[f]] else 1.0
            rate[f] = max(fixed[f], 0.0) * min(fe, fi)
            left_e[src[f]] -= rate[f]
            left_i[dst[f]] -= rate[f]
    share = [f for f, p in enumerate(planned) if not p]
    if share:
        w = None if weight is None else [weight[f] for f in share]
        got = alloc.maxmin_fair_reference([src[f] for f in share], [dst[f] for f in share],
                                          [max(c, 0.0) for c in left_e], [max(c, 0.0) for c in left_i], w)
        for f, r in zip(share, got, strict=True):
            rate[f] = r
    return np.asarray(rate, dtype=np.float64)


@settings(max_examples=200, deadline=None)
@given(flows(), st.data())
def test_fixed_then_maxmin_kernel_matches_references(case, data):
    src, dst, ce, ci, w = case
    nf = len(src)
    fixed = np.array(data.draw(st.lists(st.one_of(st.just(np.nan), st.floats(-1.0, 8.0)),
                                        min_size=nf, max_size=nf)))
    for weight in (None, w):
        got = alloc.fixed_then_maxmin(fixed, src, dst, ce, ci, weight)
        np.testing.assert_array_equal(got, fixed_then_maxmin_numpy(fixed, src, dst, ce, ci, weight))
        np.testing.assert_allclose(got, fixed_then_maxmin_reference(fixed, src, dst, ce, ci, weight),
                                   atol=1e-9)
        alloc.check_capacity(src, dst, got, ce, ci)


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 8), st.integers(1, 300), st.randoms(use_true_random=False),
       st.sampled_from([1.0, 3.0, 7.5]), st.integers(1, 6))
def test_unit_weight_filling_matches_weighted_ones(h, nf, rnd, scale, run):
    # Without weights the kernel fills host pairs (flows grouped by runs and a
    # hash table) with the float operations of the flow-by-flow filling, and
    # skips the saturated port's own updates: the rates must be bit-identical to
    # the weighted path with weights of one, on crowded ports with tied levels.
    src = np.array([rnd.randrange(min(h, 3)) for _ in range(nf)], dtype=np.int64)
    dst = (src + np.array([rnd.randrange(1, h) for _ in range(nf)], dtype=np.int64)) % h
    src, dst = np.repeat(src, run)[:nf], np.repeat(dst, run)[:nf]  # runs of one pair, as a job releases them
    ce = np.array([scale * rnd.randrange(1, 5) for _ in range(h)])
    ci = np.array([scale * rnd.randrange(1, 5) for _ in range(h)])
    fixed = np.full(nf, np.nan)
    got = alloc.fixed_then_maxmin(fixed, src, dst, ce, ci)
    np.testing.assert_array_equal(got, alloc.maxmin_fair(src, dst, ce, ci, np.ones(nf)))
    np.testing.assert_allclose(got, alloc.maxmin_fair_reference(src, dst, ce, ci), rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(flows(), st.data())
def test_backfill_kernel_matches_reference(case, data):
    src, dst, ce, ci, w = case
    nf, h = len(src), len(ce)
    rate = alloc.maxmin_fair(src, dst, ce / 2, ci / 2) if nf else np.zeros(0)
    order = np.array(data.draw(st.lists(st.integers(0, nf - 1), unique=True)) if nf else [], dtype=np.int64)
    got = alloc.backfill(order, src, dst, ce, ci, rate)
    free_e = np.maximum(ce - np.bincount(src, rate, h), 0.0)
    free_i = np.maximum(ci - np.bincount(dst, rate, h), 0.0)
    want = rate.copy()
    if len(order):
        want[order] += alloc.priority_greedy_reference(np.arange(len(order)), src[order], dst[order],
                                                       free_e, free_i)
    np.testing.assert_array_equal(got, want)
    alloc.check_capacity(src, dst, got, ce, ci)


def test_fixed_then_maxmin_and_backfill_bad_input():
    with pytest.raises(ValidationError):
        alloc.fixed_then_maxmin([1.0], [0, 1], [1, 0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValidationError):
        alloc.fixed_then_maxmin([np.nan], [0], [1], [1.0, 1.0], [1.0, 1.0], weight=[0.0])
    with pytest.raises(ValidationError):
        alloc.backfill([2], [0, 1], [1, 0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0])
    with pytest.raises(ValidationError):
        alloc.backfill([0], [0, 1], [1, 0], [1.0, 1.0], [1.0, 1.0], [0.0])


def jit_rates(k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat,
              cap_e, cap_i, crumb_rtol, backfill_free=True):
    """One JIT allocation with a plan made for it: ``SlotPlan(...).rates(...)``, the arguments
    of :func:`slot_rates` in one flat list."""
    return alloc.SlotPlan(p_start, p_len, p_off, plan_rates, lat).rates(
        k, node, src, dst, remaining, size, cap_e, cap_i, crumb_rtol, backfill_free)


def slot_rates(k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat,
               cap_e, cap_i, crumb_rtol):
    """The kernel's first step of :meth:`SlotPlan.rates` alone, inputs checked as it checks them.

    Returns ``(fixed, cand, cand_lat, drifted)``: each flow's planned rate in slot ``k`` (0
    before its first planned slot, line rate for a crumb, NaN for flows that share the
    leftover), the flows before or within their planned slots in flow order, their nodes'
    ``lat``, and the flows past their planned slots with more than a crumb left.
    """
    plan = alloc.SlotPlan(p_start, p_len, p_off, plan_rates, lat)
    node, src, dst, remaining, size, cap_e, cap_i = plan._check(node, src, dst, remaining, size, cap_e, cap_i)
    nf = len(src)
    fixed, cand, key = np.empty(nf), np.empty(nf, dtype=np.int64), np.empty(nf)
    nc, nd = alloc._kernels().slot_rates(int(k), node, src, dst, remaining, plan.p_start, plan.p_len,
                                         plan.p_off, plan.plan_rates, size, plan.lat, cap_e, cap_i,
                                         float(crumb_rtol), fixed, cand, key)
    return fixed, cand[:nc], key[:nc], int(nd)


def slot_rates_reference(k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat,
                         cap_e, cap_i, crumb_rtol):
    """Pure Python: each flow's planned rate in slot k, the waiting/running flows and the drift count."""
    fixed, cand, key, drifted = [], [], [], 0
    for f, v in enumerate(node):
        if v < 0 or p_start[v] < 0:
            fixed.append(np.nan)
            continue
        off = k - p_start[v]
        if off < 0:
            fixed.append(0.0)
        elif off < p_len[v]:
            fixed.append(plan_rates[p_off[v] + off])
        else:
            if remaining[f] <= crumb_rtol * size[v]:
                fixed.append(min(cap_e[src[f]], cap_i[dst[f]]))
            else:
                fixed.append(np.nan)
                drifted += 1
            continue
        cand.append(f)
        key.append(lat[v])
    return np.array(fixed, dtype=np.float64), np.array(cand, dtype=np.int64), np.array(key), drifted


@st.composite
def plans(draw):
    src, dst, ce, ci, _ = draw(flows())
    nf = len(src)
    nn = nf + draw(st.integers(0, 3))
    node = np.array(draw(st.permutations(list(range(nn))))[:nf], dtype=np.int64)
    node[np.array(draw(st.lists(st.booleans(), min_size=nf, max_size=nf)), dtype=bool)] = -1
    p_len = np.array(draw(st.lists(st.integers(0, 4), min_size=nn, max_size=nn)), dtype=np.int64)
    p_off = (np.cumsum(p_len) - p_len).astype(np.int64)
    p_start = np.array(draw(st.lists(st.integers(-1, 5), min_size=nn, max_size=nn)), dtype=np.int64)
    plan_rates = np.array(draw(st.lists(st.floats(0.0, 6.0), min_size=int(p_len.sum()),
                                        max_size=int(p_len.sum()))))
    size = np.array(draw(st.lists(st.floats(1.0, 100.0), min_size=nn, max_size=nn)))
    remaining = np.array(draw(st.lists(st.floats(0.0, 1e-2), min_size=nf, max_size=nf))) \
        * draw(st.sampled_from([1.0, 1e4]))
    # ties and NaN among the LATs exercise the stable order
    lat = np.array(draw(st.lists(st.one_of(st.sampled_from([1.0, 2.0, np.nan]), st.floats(0.0, 3.0)),
                                 min_size=nn, max_size=nn)))
    k = draw(st.integers(-1, 7))
    return (k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat, ce, ci, 1e-3)


@settings(max_examples=200, deadline=None)
@given(plans())
def test_slot_rates_and_jit_rates_match_references(case):
    fixed, cand, key, drifted = slot_rates(*case)
    rfixed, rcand, rkey, rdrifted = slot_rates_reference(*case)
    np.testing.assert_array_equal(fixed, rfixed)
    np.testing.assert_array_equal(cand, rcand)
    np.testing.assert_array_equal(key, rkey)
    assert drifted == rdrifted
    src, dst, ce, ci = case[2], case[3], case[11], case[12]
    for bf in (False, True):
        rate, n_planned, nd = jit_rates(*case, backfill_free=bf)
        want = alloc.fixed_then_maxmin(rfixed, src, dst, ce, ci)
        if bf and len(rcand):
            want = alloc.backfill(rcand[np.argsort(rkey, kind="stable")], src, dst, ce, ci, want)
        np.testing.assert_array_equal(rate, want)
        assert (n_planned, nd) == (len(rcand), rdrifted)
        alloc.check_capacity(src, dst, rate, ce, ci)


@settings(max_examples=300, deadline=None)
@given(plans(), st.data())
def test_slot_plan_matches_composition_on_odd_inputs(case, data):
    # SlotPlan.rates fuses the three kernels and sends only flows planned above
    # 0 through the scaling and free-capacity passes: it must stay bit-identical
    # to them in turn where that shortcut is delicate too, i.e. negative and
    # zero capacities (a 0/0 factor makes a 0.0 flow NaN) and NaN, negative or
    # zero planned rates (NaN shares the leftover, the others count as 0).
    k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat, ce, ci, crumb = case
    def oddly(x: np.ndarray, values: list[float]) -> np.ndarray:
        # each entry kept (None) or replaced by an odd value: one draw per array
        picks = data.draw(st.lists(st.one_of(st.none(), st.sampled_from(values)), min_size=len(x), max_size=len(x)))
        return np.array([float(v) if p is None else p for v, p in zip(x, picks, strict=True)], dtype=np.float64)

    odd = [0.0, -0.0, -1.0, -3.5, np.nan, 2.0]
    plan_rates = oddly(plan_rates, odd)
    ce = oddly(ce, [v for v in odd if np.isfinite(v)])
    ci = oddly(ci, [v for v in odd if np.isfinite(v)])
    args = (k, node, src, dst, remaining, p_start, p_len, p_off, plan_rates, size, lat, ce, ci, crumb)
    fixed, cand, key, drifted = slot_rates(*args)
    for bf in (False, True):
        rate, n_planned, nd = jit_rates(*args, backfill_free=bf)
        with np.errstate(all="ignore"):
            want = alloc.fixed_then_maxmin(fixed, src, dst, ce, ci)
            if bf and len(cand):
                want = alloc.backfill(cand[np.argsort(key, kind="stable")], src, dst, ce, ci, want)
        np.testing.assert_array_equal(rate, want)  # NaN where NaN
        assert (n_planned, nd) == (len(cand), drifted)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, np.nan, -np.inf, np.inf]), st.floats(-5.0, 5.0),
                          st.floats(allow_nan=True)), max_size=300))
def test_stable_order_matches_numpy(keys):
    key = np.array(keys, dtype=np.float64)
    idx, tmp = np.empty(len(key), dtype=np.int64), np.empty(len(key), dtype=np.int64)
    alloc._kernels().stable_order(key, idx, tmp)
    np.testing.assert_array_equal(idx, np.argsort(key, kind="stable"))


def test_slot_rates_bad_input():
    plan = ([-1] * 3, [0] * 3, [0] * 3, [], [1.0] * 3, [1.0] * 3, [1.0, 1.0], [1.0, 1.0], 1e-3)
    with pytest.raises(ValidationError):
        slot_rates(0, [3], [0], [1], [1.0], *plan)
    with pytest.raises(ValidationError):
        jit_rates(0, [0, 1], [0], [1], [1.0], *plan)
    fixed, cand, _, drifted = slot_rates(0, [-1, 2], [0, 1], [1, 0], [1.0, 1.0], *plan)
    assert np.isnan(fixed).all() and len(cand) == 0 and drifted == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(plans(), min_size=1, max_size=6), st.booleans())
def test_slot_plan_reused_over_calls_matches_jit_rates(cases, bf):
    # One SlotPlan serves every call of a plan: its scratch, sized by the first
    # call and grown by later ones, must not leak from one allocation into the next.
    nn = max(len(c[5]) for c in cases)
    p_start = np.full(nn, -1, dtype=np.int64)
    p_len = np.zeros(nn, dtype=np.int64)
    p_off = np.zeros(nn, dtype=np.int64)
    lat, size = np.full(nn, np.nan), np.ones(nn)
    first = cases[0]
    m = len(first[5])
    p_start[:m], p_len[:m], p_off[:m], lat[:m], size[:m] = first[5], first[6], first[7], first[10], first[9]
    plan = alloc.SlotPlan(p_start, p_len, p_off, first[8], lat)
    for k, node, src, dst, remaining, *_, ce, ci, crumb in cases:
        node = np.where(node < m, node, -1)  # flows of nodes the plan does not know share the leftover
        want = jit_rates(k, node, src, dst, remaining, p_start, p_len, p_off, first[8], size, lat,
                         ce, ci, crumb, backfill_free=bf)
        for in_range in (False, True):
            got = plan.rates(k, node, src, dst, remaining, size, ce, ci, crumb, bf, in_range=in_range)
            np.testing.assert_array_equal(got[0], want[0])
            assert got[1:] == want[1:]


def plan_extent_reference(p_start, p_len, p_off):
    """Pure Python: smallest offset and largest end of the planned nodes' rates."""
    spans = [(o, o + n) for s, n, o in zip(p_start, p_len, p_off, strict=True) if s >= 0 and n > 0]
    return (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 3), st.integers(-1, 4), st.integers(-3, 9)), max_size=12))
def test_plan_extent_matches_reference(rows):
    p_start, p_len, p_off = (np.array([r[i] for r in rows], dtype=np.int64) for i in range(3))
    assert alloc._kernels().plan_extent(p_start, p_len, p_off) == plan_extent_reference(p_start, p_len, p_off)


def test_slot_plan_bad_input():
    ok = dict(p_start=[0, -1], p_len=[2, 5], p_off=[0, 9], plan_rates=[1.0, 2.0], lat=[1.0, 2.0])
    alloc.SlotPlan(**ok)  # the unplanned node's span is never read
    for bad in (dict(p_off=[1, 0]), dict(p_len=[3, 0]), dict(p_off=[-1, 0]), dict(lat=[1.0]),
                dict(p_len=[2]), dict(plan_rates=[[1.0, 2.0]])):
        with pytest.raises(ValidationError):
            alloc.SlotPlan(**{**ok, **bad})
    plan = alloc.SlotPlan(**ok)
    args = ([0], [0], [1], [1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 1e-3)
    rate, n_planned, drifted = plan.rates(1, [0], [0], [1], [1.0], [1.0, 1.0], [4.0, 4.0], [4.0, 4.0], 1e-3,
                                          False)
    np.testing.assert_array_equal(rate, [2.0])  # slot 1 of node 0's plan
    assert (n_planned, drifted) == (1, 0)
    rate, _, _ = plan.rates(1, *args)
    np.testing.assert_array_equal(rate, [1.0])  # scaled to the ports
    with pytest.raises(ValidationError):
        plan.rates(0, [2], *args[1:])  # node out of range
    with pytest.raises(ValidationError):
        plan.rates(0, [0], [0], [2], *args[3:])  # host out of range
    with pytest.raises(ValidationError):
        plan.rates(0, [0], [0], [1], [1.0], [1.0], *args[5:])  # size of one node for two
    i8 = np.array([0], dtype=np.int64)
    with pytest.raises(ValidationError):  # in_range still checks the shapes
        plan.rates(0, i8, np.array([0, 1], dtype=np.int64), i8, np.ones(1), np.ones(2), np.ones(2),
                   np.ones(2), 1e-3, in_range=True)
    with pytest.raises(ValueError):  # and the kernel the dtypes
        plan.rates(0, i8, i8.astype(np.int32), i8 + 1, np.ones(1), np.ones(2), np.ones(2), np.ones(2), 1e-3,
                   in_range=True)
    rate, _, _ = plan.rates(1, i8, i8, i8 + 1, np.ones(1), np.ones(2), np.ones(2), np.ones(2), 1e-3,
                            in_range=True)
    np.testing.assert_array_equal(rate, [1.0])


@pytest.mark.parametrize("w", [[1e-13, 1e-13], [1e-6, 1e-6], [1.0, 1.0], [1e9, 1e9], [1.0, 1e-13], [0.5, 1e-14]])
def test_weighted_filling_is_the_same_at_any_scale_of_the_weights(w):
    # h0's egress saturates first; h1's ingress then has 9 left for the flow out of h2
    src, dst = [0, 2], [1, 1]
    ce, ci = np.array([1.0, 10.0, 10.0]), np.array([10.0, 10.0, 10.0])
    w = np.array(w)
    want = alloc.maxmin_fair_reference(src, dst, ce, ci, w)
    np.testing.assert_allclose(want, [1.0, 9.0])
    np.testing.assert_allclose(alloc.maxmin_fair(src, dst, ce, ci, w), want, rtol=1e-12)
    np.testing.assert_allclose(alloc.fixed_then_maxmin([np.nan, np.nan], src, dst, ce, ci, w), want, rtol=1e-12)
