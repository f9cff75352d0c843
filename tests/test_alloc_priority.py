"""GroupPriority (the default JIT policy's strict-priority kernel) against its numpy reference, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.errors import ValidationError
from jitsched.plan import alloc, priority

# few distinct values, so that keys, needs and bytes tie often (the order's tie-breaks)
NEEDS = st.sampled_from([0.5, 1.0, 1.0, 2.0, np.inf, np.nan])
SIZES = st.sampled_from([1.0, 2.0, 4.0, 8.0])


@st.composite
def dags(draw):
    """Jobs of transfers on a few host pairs, grouped by (job, src, dst) as the JIT policy groups them."""
    h = draw(st.integers(2, 4))
    nj = draw(st.integers(1, 4))
    job, src, dst = [-1], [-1], [-1]  # node 0: a compute, alone in group 0 as the policy has it
    for j in range(nj):
        for _ in range(draw(st.integers(0, 7))):
            s = draw(st.integers(0, h - 1))
            job.append(j)
            src.append(s)
            dst.append((s + draw(st.integers(1, h - 1))) % h)
    job, src, dst = (np.array(a, dtype=np.int64) for a in (job, src, dst))
    nn = len(job)
    _, group = np.unique((job * h + src) * h + dst, return_inverse=True)
    group = group.astype(np.int64).ravel()
    ng = int(group.max()) + 1
    size = np.array([1.0] + [draw(SIZES) for _ in range(nn - 1)])
    need = np.array([draw(NEEDS) for _ in range(nn)])
    # bytes left per group: small integers (ties between groups of a job) or anything
    pair_left = np.array([draw(st.one_of(st.sampled_from([0.0, 4.0, 8.0]), st.floats(0.0, 40.0)))
                          for _ in range(ng)])
    return h, nj, job, src, dst, group, size, need, pair_left


@st.composite
def cases(draw):
    h, nj, job, src, dst, group, size, need, pair_left = draw(dags())
    nn = len(job)
    nodes = draw(st.permutations(list(range(1, nn))))
    nodes = nodes[:draw(st.integers(0, len(nodes)))]
    nb = draw(st.integers(0, 4))
    bg_bytes = np.array([draw(SIZES) * 10 for _ in range(nb)])
    bgs = draw(st.permutations(list(range(nb))))[:draw(st.integers(0, nb))]
    rows = [(int(src[v]), int(dst[v]), v, int(job[v]), -1) for v in nodes]
    for b in bgs:
        s = draw(st.integers(0, h - 1))
        rows.append((s, (s + draw(st.integers(1, h - 1))) % h, -1, -1, b))
    rows = draw(st.permutations(rows))
    f_src, f_dst, f_node, f_job, f_bg = (np.array([r[i] for r in rows], dtype=np.int64).reshape(-1)
                                         for i in range(5))
    # remaining: whole, part, a crumb (at most 1e-6 of the size), nothing
    rem = []
    for v, b in zip(f_node.tolist(), f_bg.tolist(), strict=True):
        full = size[v] if v >= 0 else bg_bytes[b]
        rem.append(full * draw(st.sampled_from([1.0, 0.5, 0.25, 1e-7, 0.0])))
    caps = st.lists(st.one_of(st.sampled_from([0.0, 1.0, 3.0]), st.floats(0.0, 10.0)), min_size=h, max_size=h)
    egress = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 10.0]), min_size=h, max_size=h)))
    bg_weight = draw(st.sampled_from([0.7, 1.0, np.inf]))
    if draw(st.booleans()):  # no sizes known (a view without background arrays): remaining stands in
        bg_bytes = np.zeros(0)
    # Smith's rule for jobs (job_exp > 0): each job's bytes left, small integers (ties) or
    # anything, sometimes less than its live transfers sent (clamped at 0)
    job_exp = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.0]))
    job_left = np.array([draw(st.one_of(st.sampled_from([0.0, 8.0, 16.0]), st.floats(0.0, 80.0)))
                         for _ in range(nj)])
    # a factor per job on its bytes left (job_size "bottleneck"), or none (ones)
    job_scale = (np.array([draw(st.sampled_from([1.0, 0.5, 1 / 3, 0.75])) for _ in range(nj)])
                 if draw(st.booleans()) else None)
    # each group alone, a job's groups into one host together (the JIT policy's), or any merge
    ng = len(pair_left)
    g_job, g_src, g_dst = (np.zeros(ng, dtype=np.int64) for _ in range(3))
    g_job[group], g_src[group], g_dst[group] = job, src, dst
    comp = draw(st.sampled_from(["alone", "ingress", "any"]))
    group_comp = {"alone": None, "ingress": priority.ingress_components(g_job, g_src, g_dst),
                  "any": np.array([draw(st.integers(0, ng - 1)) for _ in range(ng)])}[comp]
    return dict(src=f_src, dst=f_dst, node=f_node, job=f_job, bg=f_bg, remaining=np.array(rem), size=size,
                need=need, group=group, pair_left=pair_left, bg_bytes=bg_bytes, egress=egress, bg_ref_s=8.0,
                bg_weight=bg_weight, crumb_rtol=1e-6, n_jobs=nj, free_e=np.array(draw(caps)),
                free_i=np.array(draw(caps)), job_left=job_left, job_exp=job_exp, job_scale=job_scale,
                group_comp=group_comp), (job, src, dst)


def kernel(c, nodes_of):
    return priority.GroupPriority(c["size"], c["need"], c["group"], c["pair_left"], *nodes_of, c["bg_bytes"],
                               c["egress"], bg_ref_s=c["bg_ref_s"], bg_weight=c["bg_weight"],
                               crumb_rtol=c["crumb_rtol"], n_jobs=c["n_jobs"], job_left=c["job_left"],
                               job_exp=c["job_exp"], job_scale=c["job_scale"], group_comp=c["group_comp"])


def flows_of(c):
    return c["src"], c["dst"], c["node"], c["job"], c["bg"], c["remaining"], c["free_e"], c["free_i"]


@settings(max_examples=400, deadline=None)
@given(cases())
def test_group_priority_matches_reference(case):
    c, nodes_of = case
    want = priority.group_priority_reference(**c)
    k = kernel(c, nodes_of)
    for in_range in (False, True):
        np.testing.assert_array_equal(k.rates(*flows_of(c), in_range=in_range), want)
    alloc.check_capacity(c["src"], c["dst"], want, np.maximum(c["free_e"], 0.0), np.maximum(c["free_i"], 0.0))


@settings(max_examples=100, deadline=None)
@given(cases(), st.data())
def test_group_priority_reused_over_calls(case, data):
    # One kernel serves a whole run while the owner updates need and pair_left in
    # place: its per-group scratch must come back clean after every call.
    c, nodes_of = case
    k = kernel(c, nodes_of)
    n = len(c["src"])
    for _ in range(3):
        keep = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        sub = {**c, **{x: c[x][keep] for x in ("src", "dst", "node", "job", "bg", "remaining")}}
        c["pair_left"][:] = np.array(data.draw(st.lists(st.floats(0.0, 40.0), min_size=len(c["pair_left"]),
                                                        max_size=len(c["pair_left"]))))
        c["need"][:] = np.roll(c["need"], 1)
        np.testing.assert_array_equal(k.rates(*flows_of(sub), in_range=True),
                                      priority.group_priority_reference(**sub))


@settings(max_examples=300, deadline=None)
@given(cases(), st.data())
def test_group_priority_tiers_match_reference(case, data):
    # tier by tier in one call: as a call per tier on what the tiers before left
    c, nodes_of = case
    n = len(c["src"])
    tier = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), dtype=np.int64)
    want = priority.group_priority_reference(**c, tier=tier)
    k = kernel(c, nodes_of)
    for in_range in (False, True):
        np.testing.assert_array_equal(k.rates(*flows_of(c), in_range=in_range, tier=tier), want)
    if n:  # one tier is no tier
        np.testing.assert_array_equal(k.rates(*flows_of(c), tier=np.full(n, 3)), priority.group_priority_reference(**c))
    alloc.check_capacity(c["src"], c["dst"], want, np.maximum(c["free_e"], 0.0), np.maximum(c["free_i"], 0.0))


def test_group_priority_tiers_by_hand():
    # Two jobs send 0 -> 1 and 0 -> 2; job 1 has fewer bytes left (first in one tier)
    # but in tier 1 behind job 0: job 0 takes host 0's egress to host 1's ingress (3),
    # job 1 what is left of it (7), and with tier 0 for job 1 the other way round.
    size, need = np.array([0.0, 8.0, 2.0]), np.zeros(3)
    job, src, dst = np.array([-1, 0, 1]), np.array([-1, 0, 0]), np.array([-1, 1, 2])
    k = priority.GroupPriority(size, need, np.array([0, 1, 2]), np.array([0.0, 8.0, 2.0]), job, src, dst,
                               np.zeros(0), np.full(3, 10.0), bg_ref_s=8.0, bg_weight=1.0, crumb_rtol=1e-6,
                               n_jobs=2)
    flows = ([0, 0], [1, 2], [1, 2], [0, 1], [-1, -1], [8.0, 2.0], [10.0, 10.0, 10.0], [10.0, 3.0, 10.0])
    assert k.rates(*flows).tolist() == [0.0, 10.0]
    assert k.rates(*flows, tier=[0, 1]).tolist() == [3.0, 7.0]
    assert k.rates(*flows, tier=[1, 0]).tolist() == [0.0, 10.0]
    with pytest.raises(ValidationError, match="tier: must be >= 0"):
        k.rates(*flows, tier=[0, -1])
    with pytest.raises(ValidationError, match="tier: expected shape"):
        k.rates(*flows, tier=[0])


def test_group_priority_by_hand():
    # Job 0 has two transfers 0 -> 1 (group of 5 bytes left) and job 1 one
    # transfer 0 -> 2 (3 bytes left): job 1 goes first and takes host 0's
    # egress to what host 2 takes in (4 of 10); of job 0's pair, the transfer
    # needed first takes what is left of host 0's egress, the other none. A
    # crumb of job 0 (0 -> 3, ingress 0.5) goes before everyone; the file
    # (1 -> 2) ranks last (key 50 * 100 / 80 * 0.7) and finds host 2's ingress full.
    size = np.array([0.0, 3.0, 2.0, 3.0, 1.0])
    need = np.array([np.inf, 2.0, 1.0, 0.5, 9.0])
    job = np.array([-1, 0, 0, 1, 0])
    src = np.array([-1, 0, 0, 0, 0])
    dst = np.array([-1, 1, 1, 2, 3])
    group = np.array([0, 1, 1, 2, 3])
    pair_left = np.array([0.0, 5.0, 3.0, 1.0])
    k = priority.GroupPriority(size, need, group, pair_left, job, src, dst, np.array([100.0]), np.full(4, 10.0),
                            bg_ref_s=8.0, bg_weight=0.7, crumb_rtol=1e-6, n_jobs=2)
    cap_e, cap_i = np.array([10.0, 10.0, 10.0, 10.0]), np.array([10.0, 10.0, 4.0, 0.5])
    rate = k.rates([0, 0, 0, 0, 1], [1, 1, 2, 3, 2], [1, 2, 3, 4, -1], [0, 0, 1, 0, -1], [-1, -1, -1, -1, 0],
                   [3.0, 2.0, 3.0, 1e-9, 50.0], cap_e, cap_i)
    np.testing.assert_array_equal(rate, [0.0, 5.5, 4.0, 0.5, 0.0])
    np.testing.assert_array_equal(cap_e, [10.0, 10.0, 10.0, 10.0])  # the caller's capacities stay


def test_group_priority_bad_input():
    size, need = np.ones(3), np.zeros(3)
    job, src, dst = np.array([0, 0, 0]), np.array([0, 0, 1]), np.array([1, 1, 0])
    ok = dict(bg_ref_s=8.0, bg_weight=1.0, crumb_rtol=1e-6, n_jobs=1)
    egress, bgb = np.ones(2), np.zeros(0)
    with pytest.raises(ValidationError, match="share job"):  # nodes 1 and 2 differ in hosts
        priority.GroupPriority(size, need, np.array([0, 1, 1]), np.zeros(2), job, src, dst, bgb, egress, **ok)
    with pytest.raises(ValidationError, match="out of range"):
        priority.GroupPriority(size, need, np.array([0, 0, 2]), np.zeros(2), job, src, dst, bgb, egress, **ok)
    with pytest.raises(ValidationError, match="reference"):  # a copy would miss the owner's updates
        priority.GroupPriority(size, [0.0, 0.0, 0.0], np.array([0, 0, 1]), np.zeros(2), job, src, dst, bgb,
                            egress, **ok)
    k = priority.GroupPriority(size, need, np.array([0, 0, 1]), np.zeros(2), job, src, dst, bgb, egress, **ok)
    args = ([0], [1], [0], [0], [-1], [1.0], [1.0, 1.0], [1.0, 1.0])
    assert k.rates(*args)[0] == 1.0
    for i, bad in ((1, [0]), (2, [3]), (3, [1])):  # another dst than its node's, no such node, another job
        a = list(args)
        a[i] = bad
        with pytest.raises(ValidationError):
            k.rates(*a)
    with pytest.raises(ValidationError, match="background"):  # background index -1
        k.rates([0], [1], [-1], [-1], [-1], [1.0], [1.0, 1.0], [1.0, 1.0])
    k = priority.GroupPriority(size, need, np.array([0, 0, 1]), np.zeros(2), job, src, dst, np.ones(1), egress,
                            **ok)
    with pytest.raises(ValidationError, match="background"):  # beyond bg_bytes
        k.rates([0], [1], [-1], [-1], [1], [1.0], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValidationError, match="shape"):
        k.rates([0], [1], [0, 1], [0], [-1], [1.0], [1.0, 1.0], [1.0, 1.0])


def test_group_priority_job_scale_by_hand():
    # Two jobs send 0 -> 1: job 0 4 bytes there of 8 left in all, job 1 3 of 3.
    # With job_exp 1 job 1 goes first (3 * 3 < 4 * 8); with job 0's bytes scaled by
    # 1/4 (job_size "bottleneck": its bytes spread over four ports) job 0 does (4 * 2 < 3 * 3).
    size, need = np.array([0.0, 4.0, 3.0]), np.zeros(3)
    job, src, dst = np.array([-1, 0, 1]), np.array([-1, 0, 0]), np.array([-1, 1, 1])
    flows = ([0, 0], [1, 1], [1, 2], [0, 1], [-1, -1], [4.0, 3.0], [1.0, 1.0], [1.0, 1.0])
    ok = dict(bg_ref_s=8.0, bg_weight=1.0, crumb_rtol=1e-6, n_jobs=2, job_left=np.array([8.0, 3.0]), job_exp=1.0)
    for scale, want in ((None, [0.0, 1.0]), (np.array([0.25, 1.0]), [1.0, 0.0])):
        k = priority.GroupPriority(size, need, np.array([0, 1, 2]), np.array([0.0, 4.0, 3.0]), job, src, dst,
                                   np.zeros(0), np.full(2, 10.0), job_scale=scale, **ok)
        assert k.rates(*flows).tolist() == want
        ref = dict(zip(("src", "dst", "node", "job", "bg", "remaining", "free_e", "free_i"), flows, strict=True))
        assert priority.group_priority_reference(
            **ref, size=size, need=need, group=np.array([0, 1, 2]), pair_left=np.array([0.0, 4.0, 3.0]),
            bg_bytes=np.zeros(0), egress=np.full(2, 10.0), job_scale=scale, **ok).tolist() == want
    with pytest.raises(ValidationError, match="job_scale"):
        priority.GroupPriority(size, need, np.array([0, 1, 2]), np.array([0.0, 4.0, 3.0]), job, src, dst,
                               np.zeros(0), np.full(2, 10.0), job_scale=np.array([0.0, 1.0]), **ok)


def one_port(need, job, group, t_left, n_groups, slack, late, now, iso=1.0):
    """flow_lenders' arguments for flows each of its own DAG node (``need``, ``group``; job
    -1: background) on one port of 1 B/s (time left = bytes left), every job lending at
    ``slack`` of an isolated JCT ``iso``."""
    job = np.asarray(job)
    node = np.where(job >= 0, np.arange(len(job)), -1)
    zero = np.zeros(len(job), dtype=np.int64)
    return dict(node=node, job=job, src=zero, dst=zero, remaining=np.asarray(t_left, dtype=float),
                need=np.asarray(need, dtype=float), group=np.maximum(np.asarray(group), 0), n_groups=n_groups,
                may_lend=np.ones(len(late), dtype=bool), iso_jct=np.full(len(late), iso), lend_slack=slack,
                cap_e=np.ones(1), cap_i=np.ones(1), late=late, now=now)


@pytest.mark.parametrize("lenders", [priority.flow_lenders, priority.flow_lenders_reference])
def test_lenders_by_hand(lenders):
    # flows: job 0's group 0 (two flows), job 0's group 1, job 1's group 2, a background flow
    need, job, group = [1.0, 2.0, 0.3, 0.5, np.inf], [0, 0, 0, 1, -1], [0, 0, 1, 2, -1]
    t_left = [0.1, 0.1, 0.1, 0.2, 1.0]
    late = np.zeros(2)
    lend, wake = lenders(**one_port(need, job, group, t_left, 3, 0.05, late, now=0.0))
    # slack: 0.9, 1.9, 0.2, 0.3 (job 0 and 1 on plan); every job group lends, background never
    assert lend.tolist() == [True, True, True, True, False]
    assert wake == pytest.approx(0.2 - 0.05)  # group 1's slack runs out first
    # at 0.45 s job 0 runs 0.25 s behind (group 1 still needs 0.1 s, LAT 0.3 s) and job 1
    # 0.15 s: their flows' LATs move that much later; the most behind have no slack left,
    # group 0's first flow 0.7 s
    lend, wake = lenders(**one_port(need, job, group, t_left, 3, 0.05, late, now=0.45))
    assert late.tolist() == pytest.approx([0.25, 0.15])
    assert lend.tolist() == [True, True, False, False, False]
    assert wake == pytest.approx(0.45 + (1.0 + 0.25 - 0.45 - 0.1) - 0.05)
    # a group lends only if all its live flows can wait: one urgent flow holds its group
    lend, _ = lenders(**one_port([0.12, 5.0], [0, 0], [0, 0], [0.1, 0.1], 1, 0.05, np.zeros(1), now=0.0))
    assert lend.tolist() == [False, False]
    # slack just above the threshold (a lender sending at line rate keeps it there): look
    # again half a threshold later, not at once
    lend, wake = lenders(**one_port([1.151], [0], [0], [0.1], 1, 0.05, np.zeros(1), now=1.0))
    assert lend.tolist() == [True] and wake == pytest.approx(1.025)
    # no plan (need inf), or background flows only: nothing lends, no wake
    lend, wake = lenders(**one_port([np.inf], [0], [0], [0.1], 1, 0.05, np.zeros(1), now=0.0))
    assert not lend.any() and wake == np.inf
    lend, wake = lenders(**one_port([np.inf], [-1], [-1], [0.1], 1, 0.05, np.zeros(1), now=0.0))
    assert not lend.any() and wake == np.inf


@st.composite
def lender_flows(draw):
    """A policy's flows over a DAG of a few jobs and groups, with per-node and per-job lookups."""
    h, nj = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    nn, ng = draw(st.integers(1, 12)), draw(st.integers(1, 6))
    times = st.floats(0.0, 5.0)
    need = np.array(draw(st.lists(st.one_of(times, st.just(np.inf)), min_size=nn, max_size=nn)))
    group = np.array(draw(st.lists(st.integers(0, ng - 1), min_size=nn, max_size=nn)), dtype=np.int64)
    n = draw(st.integers(0, 20))
    node = np.array(draw(st.lists(st.integers(-1, nn - 1), min_size=n, max_size=n)), dtype=np.int64)
    job = np.where(node >= 0, np.array(draw(st.lists(st.integers(0, nj - 1), min_size=n, max_size=n)) or [0]), -1)
    src, dst = (np.array(draw(st.lists(st.integers(0, h - 1), min_size=n, max_size=n)), dtype=np.int64)
                for _ in range(2))
    remaining = np.array(draw(st.lists(st.floats(0.0, 100.0), min_size=n, max_size=n)))
    caps = st.lists(st.sampled_from([1.0, 10.0, 40.0]), min_size=h, max_size=h)
    may_lend = np.array(draw(st.lists(st.booleans(), min_size=nj, max_size=nj)))
    iso = np.array(draw(st.lists(st.one_of(st.floats(0.0, 3.0), st.just(np.inf)), min_size=nj, max_size=nj)))
    late = np.array(draw(st.lists(st.floats(0.0, 1.0), min_size=nj, max_size=nj)))
    return dict(node=node, job=job, src=src, dst=dst, remaining=remaining, need=need, group=group, n_groups=ng,
                may_lend=may_lend, iso_jct=iso, lend_slack=draw(st.sampled_from([0.01, 0.1, 1.0])),
                cap_e=np.array(draw(caps)), cap_i=np.array(draw(caps)), late=late, now=draw(times))


@settings(max_examples=300, deadline=None)
@given(lender_flows())
def test_flow_lenders_match_reference(c):
    late_k, late_r, late_i = c["late"].copy(), c["late"].copy(), c["late"].copy()
    got = priority.flow_lenders(**{**c, "late": late_k})
    want = priority.flow_lenders_reference(**{**c, "late": late_r})
    assert got[0].tolist() == want[0].tolist() and got[1] == want[1]
    assert late_k.tolist() == late_r.tolist()
    # the caller's own contiguous arrays, taken as they are
    fast = priority.flow_lenders(**{**c, "late": late_i}, in_range=True)
    assert fast[0].tolist() == want[0].tolist() and fast[1] == want[1] and late_i.tolist() == late_r.tolist()


def test_flow_lenders_by_hand():
    # job 0's two flows of one group (nodes 0, 1) and a background flow; the port 0 -> 1 at
    # 10 B/s: 2 s and 1 s to send. Node 1's LAT at 5 s leaves 4 s; node 0's at 3 s leaves 1 s:
    # over a threshold of 0.5 s (lend_slack 0.25 of a 2 s JCT) both, so the group lends,
    # and looks again when node 0's slack falls to 0.5 s
    c = dict(node=np.array([0, 1, -1]), job=np.array([0, 0, -1]), src=np.array([0, 0, 1]), dst=np.array([1, 1, 0]),
             remaining=np.array([20.0, 10.0, 5.0]), need=np.array([3.0, 5.0]), group=np.array([0, 0]), n_groups=1,
             may_lend=np.array([True]), iso_jct=np.array([2.0]), lend_slack=0.25, cap_e=np.array([10.0, 10.0]),
             cap_i=np.array([40.0, 10.0]), late=np.zeros(1), now=0.0)
    lend, wake = priority.flow_lenders(**c)
    assert lend.tolist() == [True, True, False] and wake == pytest.approx(0.5)
    lend, wake = priority.flow_lenders(**{**c, "may_lend": np.array([False])})
    assert not lend.any() and wake == np.inf
    with pytest.raises(ValidationError, match="out of range"):
        priority.flow_lenders(**{**c, "node": np.array([2, 1, -1])})
    with pytest.raises(ValidationError, match="out of range"):
        priority.flow_lenders(**{**c, "src": np.array([0, 2, 1])})
    with pytest.raises(ValidationError, match="shapes disagree"):
        priority.flow_lenders(**{**c, "iso_jct": np.ones(2)})
    with pytest.raises(ValidationError, match="expected shape"):
        priority.flow_lenders(**{**c, "remaining": np.ones(2)})
    with pytest.raises(ValidationError, match="late: expected a contiguous float64"):
        priority.flow_lenders(**{**c, "late": [0.0]})
    with pytest.raises(ValidationError, match="out of range"):
        priority.flow_lenders(**{**c, "group": np.array([0, 1])})
    with pytest.raises(ValidationError, match="out of range"):
        priority.flow_lenders(**{**c, "job": np.array([0, 1, -1])})
