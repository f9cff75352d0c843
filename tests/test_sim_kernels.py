"""The simulator's per-event kernels (jitsched._sim) against pure-Python references, bit for bit."""

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched import _sim
from jitsched.plan.alloc import CAPACITY_RTOL


def advance_reference(dt, n, rate, rem, node, bg, sent, remaining, bg_sent):
    """The simulator's former numpy advance step, on copies; ``remaining`` of flows at rate 0 is left alone."""
    rem, sent, remaining, bg_sent = rem.copy(), sent.copy(), remaining.copy(), bg_sent.copy()
    moved = rate[:n] * dt
    r = rem[:n] - moved
    rem[:n] = r
    is_job = node[:n] >= 0
    sent[node[:n][is_job]] += moved[is_job]
    moves = is_job & ((rate[:n] != 0.0) | (r == 0.0))
    remaining[node[:n][moves]] = np.maximum(r[moves], 0.0)
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


def append_reference(rows, abs_tol, rel_tol):
    """The columns a flow table gets from rows (src, dst, node, job, bg, release, bytes)."""
    cols = list(zip(*rows, strict=True)) if rows else [()] * 7
    ints = [np.array(c, dtype=np.int64) for c in cols[:5]]
    size = np.array(cols[6], dtype=np.float64)
    return ints, [np.array(cols[5], dtype=np.float64), size, abs_tol + rel_tol * size]


@st.composite
def flow_rows(draw, h, n_nodes, n_bg):
    k = draw(st.integers(0, 6))
    rows = []
    for _ in range(k):
        if draw(st.booleans()):
            node, job, bg = draw(st.integers(0, n_nodes - 1)), draw(st.integers(0, 9)), -1
        else:
            node, job, bg = -1, -1, draw(st.integers(0, n_bg - 1))
        rows.append((draw(st.integers(0, h - 1)), draw(st.integers(0, h - 1)), node, job, bg,
                     draw(st.floats(0.0, 1e4)), draw(st.floats(1e-4, 1e6))))
    return rows


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 4), st.booleans())
def test_flow_table_matches_kernels(data, h, check):
    # The table runs the kernels above on buffers it holds: a random sequence of
    # appends, advances, allocations and completions must leave every buffer
    # bit-identical to the same kernels on plain arrays (appends: the reference).
    n_nodes, n_bg = 12, 4
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    cap_e, cap_i = rng.uniform(0.0, 4e3, h), rng.uniform(0.0, 4e3, h)
    # sent, remaining, bg_sent, dag_egress, dag_egress_int
    mine = [np.zeros(n_nodes), rng.random(n_nodes), np.zeros(n_bg), np.zeros(h), np.zeros(h)]
    ref = [a.copy() for a in mine]
    table = _sim.FlowTable(*mine, cap_e, cap_i, 1e-3, 1e-9, data.draw(st.integers(0, 3)))
    cols = [np.zeros(0, dtype=np.int64) for _ in range(5)] + [np.zeros(0) for _ in range(5)]
    SRC, DST, NODE, JOB, BG, REL, REM, RATE, FIN, TOL = range(10)
    t_ref = 0.0

    def advance_both(t):
        nonlocal t_ref
        table.advance(t)
        if t - t_ref > 0 and len(cols[0]):
            _sim.advance(t - t_ref, len(cols[0]), cols[RATE], cols[REM], cols[NODE], cols[BG], *ref)
        t_ref = t
        assert table.t_last == t

    t = 0.0
    for _ in range(data.draw(st.integers(1, 6))):
        rows = data.draw(flow_rows(h, n_nodes, n_bg))
        table.append(rows)
        new_i, (rel, rem, tol) = append_reference(rows, 1e-3, 1e-9)
        k = len(rows)
        for c, add in enumerate((*new_i, rel, rem, np.zeros(k), np.full(k, np.inf), tol)):
            cols[c] = np.concatenate([cols[c], add])
        n = len(cols[0])
        assert table.n == n
        t += data.draw(st.sampled_from([0.0, 1e-3, 0.5]))
        advance_both(t)
        np.testing.assert_array_equal(table.remaining(), np.maximum(cols[REM], 0.0))
        rate = rng.uniform(0.0, 1e3, n) * (rng.random(n) < 0.8)
        got = table.allocated(t, check, CAPACITY_RTOL, rate)
        cols[RATE] = rate.copy()
        want = _sim.after_allocation(t, n, check, cols[SRC], cols[DST], cols[NODE], cols[RATE], cols[REM],
                                     cap_e, cap_i, CAPACITY_RTOL, np.zeros(h), np.zeros(h), ref[3], cols[FIN])
        np.testing.assert_array_equal(got, want)  # earliest finish, utilisations (NaN as NaN), ok
        t += data.draw(st.sampled_from([0.0, 0.1, 10.0]))
        advance_both(t)
        fin_nodes, fin_bgs, crumbs = table.collect_done(t)
        outs = [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n)]
        d = _sim.collect_done(t, n, *cols, *outs)
        assert (fin_nodes, fin_bgs, crumbs) == (outs[0][:d].tolist(), outs[1][:d].tolist(), outs[2][:d].tolist())
        cols = [c[:n - d] for c in cols]
        assert table.n == n - d
        for c, name in enumerate(("src", "dst", "node", "job", "bg", "rel", "rem", "rate", "fin", "tol")):
            np.testing.assert_array_equal(getattr(table, name)[:n - d], cols[c])
        for got_a, want_a in zip(mine, ref, strict=True):
            np.testing.assert_array_equal(got_a, want_a)


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


def test_flow_table_remaining_is_numpy_maximum():
    # NaN stays NaN and -0.0 becomes +0.0, as np.maximum(rem, 0.0) has them
    table = _sim.FlowTable(np.zeros(4), np.zeros(4), np.zeros(1), np.zeros(2), np.zeros(2), np.ones(2),
                           np.ones(2), 1e-3, 1e-9, 2)
    table.append([(0, 1, v, 0, -1, 0.0, 1.0) for v in range(4)])
    rem = np.array([-0.0, np.nan, -1.0, 2.5])
    table.rem[:4] = rem
    got = table.remaining()
    np.testing.assert_array_equal(got, np.maximum(rem, 0.0))
    np.testing.assert_array_equal(np.signbit(got), np.signbit(np.maximum(rem, 0.0)))
    assert len(got) == table.n == 4
