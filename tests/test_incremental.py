"""Tests of incremental JIT planning: a job alone against the capacity a frozen schedule leaves."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jitsched.config import DaemonConfig
from jitsched.daemon.server import create_policy
from jitsched.daemon.state import PlanRequest, build_view, merge_schedules
from jitsched.dag.model import Cluster, Compute, Job, Transfer
from jitsched.plan.planner import increment_window, place_increment, shared_cluster
from jitsched.policies.base import SlotSchedule
from jitsched.workloads.synth import random_vgg16_jobs

GBYTE = 1e9  # bytes/s of an 8 Gbit/s port: 1 GB takes 1 s


def policy(n_hosts: int, slot_s: float = 1.0, alpha: float = 1.0):
    cfg = DaemonConfig(cluster=Cluster.uniform(n_hosts, bps=8e9), slot_s=slot_s, alpha=alpha,
                       policy="jit-paper")
    return create_policy(cfg), cfg.cluster


def view_of(jobs, cluster, now):
    req = PlanRequest(1, now, tuple((j, {}, {}) for j in jobs), (), ())
    return build_view(req, cluster)[0]


def one_transfer_job(jid, src, dst, size, arrival, compute_s=0.1):
    return Job(jid, (Compute("c", dst, compute_s),), (Transfer("t", src, dst, size),),
               (("t", "c"),), arrival)


def port_rates(sched: SlotSchedule, n_hosts: int, width: int, ingress: bool = False) -> np.ndarray:
    """Planned bytes/s per host and slot of all flows of ``sched``."""
    out = np.zeros((n_hosts, width))
    for _, _, src, dst, start, rates in sched.flows:
        out[dst if ingress else src, start:start + len(rates)] += rates
    return out


def test_first_slot_partly_gone_gets_higher_rate_for_its_rest():
    # Base grid from t=0 with 1 s slots; a 1.2 GB transfer arrives at t=0.5, LAT 1.7.
    # Half of slot 0 is gone: the LP sees it half full (0.5 GB of room), the deadline
    # is at least the end of slot 1, and balancing egress and ingress fills both
    # slots to 0.85: 0.35 GB in slot 0, sent at 0.7 GB/s over the half slot left,
    # and 0.85 GB in slot 1.
    pol, cluster = policy(2)
    base = SlotSchedule(0.0, 1.0, [], np.full((2, 2), GBYTE), np.full((2, 2), GBYTE))
    job = one_transfer_job("new", "h0", "h1", 1.2 * GBYTE, 0.5)
    inc = pol.schedule_increment(view_of([job], cluster, 0.5), base, np.zeros(2), np.zeros(2))
    assert inc.epoch_s == 0.0 and inc.late == []
    [(jid, tid, src, dst, start, rates)] = inc.flows
    assert (jid, tid, src, dst, start) == ("new", "t", 0, 1, 0)
    np.testing.assert_allclose(rates, [0.7 * GBYTE, 0.85 * GBYTE], rtol=1e-6)
    np.testing.assert_allclose(inc.leftover_egress[0], [0.3 * GBYTE, 0.15 * GBYTE], rtol=1e-6)
    np.testing.assert_allclose(inc.leftover_ingress[1], [0.3 * GBYTE, 0.15 * GBYTE], rtol=1e-6)


def test_arrival_in_the_last_sliver_of_a_slot_starts_at_the_next_boundary():
    # At t=0.95 only 5% of slot 0 is left: the job is planned as if it arrived at 1.0,
    # so its 0.4 GB transfer is due at 1.4 and runs in slot 1, on time.
    pol, cluster = policy(2)
    base = SlotSchedule(0.0, 1.0, [], np.full((2, 1), GBYTE), np.full((2, 1), GBYTE))
    job = one_transfer_job("new", "h0", "h1", 0.4 * GBYTE, 0.95)
    inc = pol.schedule_increment(view_of([job], cluster, 0.95), base, np.zeros(2), np.zeros(2))
    [(_, _, _, _, start, rates)] = inc.flows
    assert start == 1 and inc.late == []
    np.testing.assert_allclose(rates, [0.4 * GBYTE], rtol=1e-6)
    np.testing.assert_allclose(inc.leftover_egress[0], [GBYTE, 0.6 * GBYTE], rtol=1e-6)


def test_frozen_port_pushes_the_new_transfer_after_it_and_reports_it_late():
    # h0's egress is fully planned for slots 0-1. A new 0.5 GB transfer from h0 shares
    # the port with that one job: its LAT estimate uses half the port (1 s), so its
    # deadline is slot 0, which it cannot meet; it runs in slot 2 (lateness 3 - 1 = 2 s).
    pol, cluster = policy(3)
    left = np.full((3, 2), GBYTE)
    left[0] = 0.0
    left_in = np.full((3, 2), GBYTE)
    left_in[1] = 0.0
    base = SlotSchedule(0.0, 1.0, [("old", "t", 0, 1, 0, np.array([GBYTE, GBYTE]))], left, left_in)
    job = one_transfer_job("new", "h0", "h2", 0.5 * GBYTE, 0.0)
    inc = pol.schedule_increment(view_of([job], cluster, 0.0), base, np.array([1, 0, 0]),
                                 np.array([0, 1, 0]))
    [(_, _, _, _, start, rates)] = inc.flows
    assert start == 2
    np.testing.assert_allclose(rates, [0.5 * GBYTE], rtol=1e-6)
    assert len(inc.late) == 1 and inc.late[0]["lateness_s"] == pytest.approx(2.0)
    np.testing.assert_allclose(inc.leftover_egress[0], [0, 0, 0.5 * GBYTE], atol=1.0)


def test_share_cluster_divides_capacity_among_jobs_on_the_port():
    c = shared_cluster(Cluster.uniform(2, bps=8e9), [3, 0], [0, 1])
    np.testing.assert_allclose(c.egress_Bps, [GBYTE / 4, GBYTE])
    np.testing.assert_allclose(c.ingress_Bps, [GBYTE, GBYTE / 2])


def test_window_past_the_end_of_the_base_is_all_free():
    cluster = Cluster.uniform(2, bps=8e9)
    win = increment_window(5.25, 1.0, cluster, 0.0, np.zeros((2, 3)), np.zeros((2, 3)))
    assert (win.first_slot, win.origin_s, win.fraction) == (5, 5.0, 0.75)
    np.testing.assert_allclose(win.residual_egress_Bps, [[0.75 * GBYTE]] * 2)
    assert win.base_egress_Bps.shape == (2, 5)
    _, _, left_e, _ = place_increment(None, win, np.zeros(0, int), np.zeros(0, int))
    np.testing.assert_allclose(left_e, [[0, 0, 0, GBYTE, GBYTE, GBYTE]] * 2)
    # less than MIN_SLOT_FRACTION left: the plan starts at the next boundary
    late = increment_window(5.95, 1.0, cluster, 0.0)
    assert (late.first_slot, late.origin_s, late.fraction) == (6, 6.0, 1.0)


def test_incremental_and_full_both_meet_deadlines_with_slack():
    # Job a (h0 -> h1, 0.5 GB) is planned alone: due at 0.5 s, it takes half of slot 0.
    # Job b (h0 -> h2, 0.5 GB) is then planned on top; its LAT assumes half of h0's
    # port (due at 1 s, slot 0 again) and it fits in the half a left. The joint plan
    # of both is the same: each at half the port in slot 0.
    pol, cluster = policy(3)
    a = one_transfer_job("a", "h0", "h1", 0.5 * GBYTE, 0.0)
    b = one_transfer_job("b", "h0", "h2", 0.5 * GBYTE, 0.0)
    full_a = pol.schedule(view_of([a], cluster, 0.0))
    assert full_a.late == []
    inc = pol.schedule_increment(view_of([b], cluster, 0.0), full_a, np.array([1, 0, 0]),
                                 np.zeros(3))
    merged = merge_schedules(full_a, inc)
    assert merged.late == []
    w = merged.leftover_egress.shape[1]
    used = port_rates(merged, 3, w)
    assert np.all(used <= GBYTE * (1 + 1e-6))
    np.testing.assert_allclose(merged.leftover_egress, GBYTE - used, atol=1.0)
    for _, _, _, _, _, rates in merged.flows:
        assert rates.sum() * 1.0 == pytest.approx(0.5 * GBYTE, rel=1e-6)
    pol2, _ = policy(3)
    joint = pol2.schedule(view_of([a, b], cluster, 0.0))
    assert joint.late == []
    for sched in (merged, joint):
        got = sorted((f[0], f[4], *f[5]) for f in sched.flows)
        assert [g[:2] for g in got] == [("a", 0), ("b", 0)]
        assert [g[2] for g in got] == pytest.approx([0.5 * GBYTE, 0.5 * GBYTE])
        assert all(len(g) == 3 for g in got)


@pytest.mark.parametrize("seed", range(4))
def test_increments_on_a_joint_plan_never_exceed_capacity(seed):
    # 4 VGG16 jobs planned jointly at t=0, then 2 more added one at a time mid-slot:
    # every port, every slot, every instant stays within capacity, and every planned
    # transfer gets its bytes (the first slot's rate over the part of it that is left).
    n_hosts, slot_s = 6, 0.1
    cfg = DaemonConfig(cluster=Cluster.uniform(n_hosts, bps=1e9), slot_s=slot_s, policy="jit-paper")
    pol, cluster = create_policy(cfg), cfg.cluster
    names = cluster.names
    jobs = random_vgg16_jobs(6, names, seed=seed)
    sched = pol.schedule(view_of(jobs[:4], cluster, 0.0))
    busy_e = np.bincount([names.index(j.transfers[0].src) for j in jobs[:4]], minlength=n_hosts)
    busy_i = np.bincount([names.index(j.transfers[0].dst) for j in jobs[:4]], minlength=n_hosts)
    for k, now in ((4, 0.137), (5, 0.262)):
        job = replace(jobs[k], arrival_s=now)
        inc = pol.schedule_increment(view_of([job], cluster, now), sched, busy_e, busy_i)
        assert inc.epoch_s == sched.epoch_s
        k0 = int(np.floor(now / slot_s))
        frac = 1.0 - (now / slot_s - k0)
        for _, tid, _, _, start, rates in inc.flows:
            assert start >= k0
            t = next(t for t in job.transfers if t.id == tid)
            secs = np.full(len(rates), slot_s)
            if start == k0:
                secs[0] = frac * slot_s
            assert float(rates @ secs) == pytest.approx(t.bytes, rel=1e-5)
        sched = merge_schedules(sched, inc)
        w = sched.leftover_egress.shape[1]
        for ingress in (False, True):
            used = port_rates(sched, n_hosts, w, ingress)
            cap = cluster.ingress_Bps if ingress else cluster.egress_Bps
            assert np.all(used <= cap[:, None] * (1 + 1e-6))
            left = sched.leftover_ingress if ingress else sched.leftover_egress
            np.testing.assert_allclose(left, np.maximum(cap[:, None] - used, 0), atol=cap[0] * 1e-6)
        busy_e[names.index(job.transfers[0].src)] += 1
        busy_i[names.index(job.transfers[0].dst)] += 1


def test_increment_plans_within_dl_share_of_each_port():
    # dl_share 0.5: a 1.2 GB transfer (LAT from a half port: 2.4 s) never gets more than
    # half of either port, on the grid of a base that already holds a flow on h0's egress
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=8e9), slot_s=1.0, alpha=1.0, policy="jit-paper",
                       policy_options={"dl_share": 0.5})
    pol, cluster = create_policy(cfg), cfg.cluster
    base = SlotSchedule(0.0, 1.0, [("old", "t", 0, 1, 0, np.array([0.2 * GBYTE]))],
                        np.array([[0.3 * GBYTE], [0.5 * GBYTE]]), np.array([[0.5 * GBYTE], [0.3 * GBYTE]]))
    job = one_transfer_job("new", "h0", "h1", 1.2 * GBYTE, 0.0)
    inc = pol.schedule_increment(view_of([job], cluster, 0.0), base, np.zeros(2), np.zeros(2))
    merged = merge_schedules(base, inc)
    width = inc.leftover_egress.shape[1]
    eg = port_rates(merged, 2, width)
    ing = port_rates(merged, 2, width, ingress=True)
    assert eg.max() <= 0.5 * GBYTE * (1 + 1e-6) and ing.max() <= 0.5 * GBYTE * (1 + 1e-6)
    [(_, _, _, _, start, rates)] = inc.flows
    assert float(np.sum(rates)) * 1.0 == pytest.approx(1.2 * GBYTE, rel=1e-6)  # demand met
    # the leftover the schedule reports is what later plans may still take: up to the share
    np.testing.assert_allclose(inc.leftover_egress[0], 0.5 * GBYTE - eg[0], atol=1.0)
