"""The simulator's per-event kernels (jitsched._sim) against pure-Python references, bit for bit."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched import _sim
from jitsched.alloc import CAPACITY_RTOL


def advance_reference(dt, n, rate, rem, node, bg, sent, remaining, bg_sent):
    """The simulator's former numpy advance step, on copies."""
    rem, sent, remaining, bg_sent = rem.copy(), sent.copy(), remaining.copy(), bg_sent.copy()
    moved = rate[:n] * dt
    r = rem[:n] - moved
    rem[:n] = r
    is_job = node[:n] >= 0
    sent[node[:n][is_job]] += moved[is_job]
    remaining[node[:n][is_job]] = np.maximum(r[is_job], 0.0)
    bg_sent[bg[:n][~is_job]] += moved[~is_job]
    return rem, sent, remaining, bg_sent


def after_allocation_reference(now, n, check, src, dst, node, rate, rem, cap_e, cap_i):
    """Finish times, DAG egress rate, utilisation and capacity verdict, as the numpy code had them."""
    h = len(cap_e)
    src, dst, node, rate, rem = src[:n], dst[:n], node[:n], rate[:n], rem[:n]
    is_job = node >= 0
    dag_egress = np.bincount(src[is_job], rate[is_job], h)
    with np.errstate(all="ignore"):  # 0/0 and x/subnormal where the rate is 0 or tiny
        fin = np.where(rate > 0, now + np.maximum(rem, 0.0) / rate, math.inf)
    tmin = float(fin.min()) if n else math.inf
    util_e = util_i = -math.inf
    ok = True
    if check:
        le, li = np.bincount(src, rate, h), np.bincount(dst, rate, h)
        ok = bool(np.all(rate >= 0) and np.all(np.isfinite(rate))
                  and not np.any(le > cap_e * (1 + CAPACITY_RTOL) + 1e-6)
                  and not np.any(li > cap_i * (1 + CAPACITY_RTOL) + 1e-6))
        if ok:
            with np.errstate(divide="ignore", invalid="ignore"):
                util_e, util_i = float(np.max(le / cap_e)), float(np.max(li / cap_i))
    return tmin, util_e, util_i, ok, dag_egress, fin


def collect_done_reference(now, n, arrays, rem, fin, tol):
    """Split the live flows into finished (in order) and kept (in order)."""
    done = (rem[:n] <= tol[:n]) | (fin[:n] <= now)
    return done, [a[:n][~done] for a in arrays]


@st.composite
def live_flows(draw):
    h = draw(st.integers(1, 5))
    n = draw(st.integers(0, 30))
    spare = draw(st.integers(0, 3))  # buffers are longer than the live prefix
    size = n + spare
    n_nodes, n_bg = size + 2, size + 2
    is_job = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype=bool)
    ids = np.array(draw(st.permutations(list(range(size)))), dtype=np.int64) if size else np.zeros(0, np.int64)
    node = np.where(is_job, ids, -1).astype(np.int64)
    bg = np.where(is_job, -1, ids).astype(np.int64)
    hosts = st.lists(st.integers(0, h - 1), min_size=size, max_size=size)
    src = np.array(draw(hosts), dtype=np.int64)
    dst = np.array(draw(hosts), dtype=np.int64)
    floats = st.lists(st.floats(0.0, 1e3), min_size=size, max_size=size)
    rate = np.array(draw(floats))
    rate[np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), dtype=bool)] = 0.0
    rem = np.array(draw(st.lists(st.floats(-1e-3, 1e4), min_size=size, max_size=size)))
    caps = st.lists(st.floats(0.0, 4e3), min_size=h, max_size=h)
    return dict(h=h, n=n, n_nodes=n_nodes, n_bg=n_bg, node=node, bg=bg, src=src, dst=dst,
                rate=rate, rem=rem, cap_e=np.array(draw(caps)), cap_i=np.array(draw(caps)))


@settings(max_examples=200, deadline=None)
@given(live_flows(), st.floats(1e-6, 10.0))
def test_advance_matches_reference(c, dt):
    rng = np.random.default_rng(0)
    sent, remaining, bg_sent = rng.random(c["n_nodes"]), rng.random(c["n_nodes"]), rng.random(c["n_bg"])
    dag_egress, dag_egress_int = rng.random(c["h"]) * 1e3, rng.random(c["h"]) * 1e4
    want = advance_reference(dt, c["n"], c["rate"], c["rem"], c["node"], c["bg"], sent, remaining, bg_sent)
    want_int = dag_egress_int.copy()
    want_int[:] += dag_egress * dt
    rem = c["rem"].copy()
    _sim.advance(dt, c["n"], c["rate"], rem, c["node"], c["bg"], sent, remaining, bg_sent,
                 dag_egress, dag_egress_int)
    for got, ref in zip((rem, sent, remaining, bg_sent, dag_egress_int), (*want, want_int), strict=True):
        np.testing.assert_array_equal(got, ref)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 50), st.integers(-1, 50), st.integers(-1, 10**6), st.integers(-1, 999),
                          st.integers(-1, 999), st.floats(0.0, 1e4), st.floats(0.0, 1e10)), max_size=12),
       st.integers(0, 5))
def test_append_flows_matches_reference(rows, lo):
    add = np.array(rows, dtype=np.float64).reshape(-1, 7)
    size = lo + len(rows) + 2
    ints = [np.full(size, -7, dtype=np.int64) for _ in range(5)]
    flts = [np.full(size, -7.0) for _ in range(3)]
    _sim.append_flows(add.reshape(-1), lo, 1e-3, 1e-9, *ints, *flts)
    hi = lo + len(rows)
    for col, a in enumerate(ints):
        np.testing.assert_array_equal(a[lo:hi], add[:, col].astype(np.int64))
        assert (a[:lo] == -7).all() and (a[hi:] == -7).all()
    np.testing.assert_array_equal(flts[0][lo:hi], add[:, 5])
    np.testing.assert_array_equal(flts[1][lo:hi], add[:, 6])
    np.testing.assert_array_equal(flts[2][lo:hi], 1e-3 + 1e-9 * add[:, 6])


@settings(max_examples=200, deadline=None)
@given(live_flows(), st.floats(0.0, 100.0), st.booleans())
def test_after_allocation_matches_reference(c, now, check):
    h = c["h"]
    dag_egress, fin = np.full(h, np.nan), np.full(len(c["rate"]), np.nan)
    tmin, ue, ui, ok = _sim.after_allocation(now, c["n"], check, c["src"], c["dst"], c["node"], c["rate"],
                                             c["rem"], c["cap_e"], c["cap_i"], CAPACITY_RTOL,
                                             np.zeros(h), np.zeros(h), dag_egress, fin)
    rt, re, ri, rok, regress, rfin = after_allocation_reference(
        now, c["n"], check, c["src"], c["dst"], c["node"], c["rate"], c["rem"], c["cap_e"], c["cap_i"])
    assert ok == rok
    assert tmin == rt
    if ok:
        np.testing.assert_array_equal([ue, ui], [re, ri])  # NaN where 0/0, as np.max
    np.testing.assert_array_equal(dag_egress, regress)
    np.testing.assert_array_equal(fin[:c["n"]], rfin)


@settings(max_examples=200, deadline=None)
@given(live_flows(), st.floats(0.0, 10.0))
def test_collect_done_matches_reference(c, now):
    n, size = c["n"], len(c["rate"])
    rng = np.random.default_rng(1)
    fin = np.where(rng.random(size) < 0.3, rng.uniform(0.0, 20.0, size), np.inf)
    tol = 1e-3 + 1e-9 * rng.uniform(0.0, 1e4, size)
    job = np.where(c["node"] >= 0, rng.integers(0, 5, size), -1).astype(np.int64)
    rel = rng.random(size)
    ints = [c["src"].copy(), c["dst"].copy(), c["node"].copy(), job, c["bg"].copy()]
    flts = [rel, c["rem"].copy(), c["rate"].copy(), fin, tol]
    done, kept = collect_done_reference(now, n, ints + flts, c["rem"], fin, tol)
    out_node, out_bg = np.zeros(size, np.int64), np.zeros(size, np.int64)
    out_crumb = np.zeros(size)
    d = _sim.collect_done(now, n, *ints, *flts, out_node, out_bg, out_crumb)
    assert d == int(done.sum())
    for got, ref in zip(ints + flts, kept, strict=True):
        np.testing.assert_array_equal(got[:n - d], ref)
    np.testing.assert_array_equal(out_node[:d], c["node"][:n][done])
    np.testing.assert_array_equal(out_bg[:d], c["bg"][:n][done])
    np.testing.assert_array_equal(out_crumb[:d], c["rem"][:n][done])
