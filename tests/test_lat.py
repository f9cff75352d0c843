"""Tests of jitsched.dag.lat: hand-computed DAGs, and kernels against pure-Python and networkx references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from jitsched.dag.lat import latest_arrival_times
from jitsched.dag.model import compile_jobs, topological_order
from jitsched.errors import ValidationError
from jitsched.plan.estimate import trans_times
from jitsched.reference import (
    lat_bruteforce,
    lat_exact_reference,
    lat_paper_reference,
    topological_order_reference,
)
from tests.dags import job, random_jobs, workload

GB = 1e9  # the test cluster moves 1e9 bytes/s per port


def lats(jobs, estimator="exact", **kw):
    w = workload(jobs)
    d = compile_jobs(w.jobs, w.cluster)
    return latest_arrival_times(d, w.cluster, estimator=estimator, **kw).by_job(d)


def test_chain():
    # t1 -> c1 -> c2 ; t2 -> c2. t1 alone on h0->h1 takes 1 s, c1 2 s.
    jobs = [job(computes=[("c1", "h1", 2.0), ("c2", "h1", 1.0)],
                transfers=[("t1", "h0", "h1", GB), ("t2", "h2", "h1", GB)],
                edges=[("t1", "c1"), ("c1", "c2"), ("t2", "c2")])]
    # both enter h1: num(h1)=2 -> each 2 s. c1 starts at 2, ends 4; t2 may arrive by 4.
    assert lats(jobs) == {"j": {"t1": 2.0, "t2": 4.0}}
    # paper: l_t2 = l_t1 + c(t1,t2) + trans(t2) = 2 + 2 + 2
    assert lats(jobs, "paper") == {"j": {"t1": 2.0, "t2": 6.0}}


def test_fan_in_waits_for_slowest_input():
    # Three inputs of one op: the small ones may arrive when the big one does.
    jobs = [job(computes=[("c", "h3", 1.0)],
                transfers=[("big", "h0", "h3", 3 * GB), ("s1", "h1", "h3", 0.3 * GB),
                           ("s2", "h2", "h3", 0.6 * GB)],
                edges=[("big", "c"), ("s1", "c"), ("s2", "c")])]
    # num(h3)=3, each gets 1/3 GB/s: big 9 s, s1 0.9 s, s2 1.8 s; c starts at 9.
    assert lats(jobs) == {"j": {"big": 9.0, "s1": 9.0, "s2": 9.0}}


def test_diamond_with_compute_holdup():
    # c0 (4 s) -> {c1 (1 s), c2 (3 s)} -> c3 ; t feeds c1, u feeds c3
    jobs = [job(computes=[("c0", "h1", 4.0), ("c1", "h1", 1.0), ("c2", "h1", 3.0), ("c3", "h1", 1.0)],
                transfers=[("t", "h0", "h1", GB), ("u", "h2", "h3", GB)],
                edges=[("c0", "c1"), ("c0", "c2"), ("c1", "c3"), ("c2", "c3"), ("t", "c1"), ("u", "c3")])]
    # t arrives at 1 at the earliest but c1 cannot start before c0 ends at 4;
    # c3 starts at max(c1 end 5, c2 end 7) = 7; u may arrive as late as 7.
    assert lats(jobs) == {"j": {"t": 4.0, "u": 7.0}}


def test_shared_consumer_and_min_over_consumers():
    # t feeds c_early (starts at 0) and c_late (after a 5 s op): its LAT is the earlier need.
    jobs = [job(computes=[("c0", "h1", 5.0), ("c_early", "h1", 1.0), ("c_late", "h1", 1.0)],
                transfers=[("t", "h0", "h1", 2 * GB)],
                edges=[("t", "c_early"), ("t", "c_late"), ("c0", "c_late")])]
    assert lats(jobs) == {"j": {"t": 2.0}}


def test_sink_transfer_waits_for_the_last_compute():
    # A gradient push after the backward op: nothing consumes it, it may
    # arrive when the job's last compute ends (but never before it can).
    jobs = [job(computes=[("fwd", "h1", 1.0), ("bwd", "h1", 2.0), ("other", "h1", 10.0)],
                transfers=[("grad", "h1", "h0", GB)],
                edges=[("fwd", "bwd"), ("bwd", "grad")])]
    assert lats(jobs) == {"j": {"grad": 10.0}}
    jobs[0]["computes"][2]["duration_s"] = 0.5
    assert lats(jobs) == {"j": {"grad": 4.0}}  # earliest arrival 3 + 1 dominates


def test_arrival_offsets_and_jobs_planned_together():
    a = job("a", computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", GB)], edges=[("t", "c")],
            arrival_s=10.0)
    b = job("b", computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", GB)], edges=[("t", "c")])
    assert lats([a]) == {"a": {"t": 11.0}}
    # planned together, the two transfers share h0's egress and h1's ingress
    assert lats([a, b]) == {"a": {"t": 12.0}, "b": {"t": 2.0}}


def test_trans_eq1_counts_active_transfers_per_port():
    w = workload([job(computes=[("c", "h1", 0)],
                      transfers=[("a", "h0", "h1", GB), ("b", "h0", "h2", GB), ("c2", "h3", "h1", GB)],
                      edges=[("a", "c")])], bps=8e9)
    d = compile_jobs(w.jobs, w.cluster)
    t = trans_times(d, w.cluster)
    ids = list(d.node_ids)
    # a: egress h0 shared by 2, ingress h1 shared by 2 -> 2 s; b: egress 2 -> 2 s; c2: ingress 2 -> 2 s
    assert [t[ids.index(x)] for x in ("a", "b", "c2")] == [2.0, 2.0, 2.0]
    active = np.ones(d.n_nodes, dtype=bool)
    active[ids.index("b")] = False
    t = trans_times(d, w.cluster, active=active)
    assert t[ids.index("a")] == 2.0 and t[ids.index("b")] == 0.0 and t[ids.index("c2")] == 2.0


def test_known_done_and_now_for_replanning():
    jobs = [job(computes=[("c1", "h1", 2.0), ("c2", "h1", 1.0)],
                transfers=[("t1", "h0", "h1", GB), ("t2", "h0", "h1", GB)],
                edges=[("t1", "c1"), ("c1", "c2"), ("t2", "c2")])]
    w = workload(jobs)
    d = compile_jobs(w.jobs, w.cluster)
    known = np.full(d.n_nodes, np.nan)
    known[d.node("j", "t1")] = 0.5  # t1 already arrived at 0.5
    active = np.ones(d.n_nodes, dtype=bool)
    active[d.node("j", "t1")] = False
    r = latest_arrival_times(d, w.cluster, now=0.5, known_done=known, active=active)
    # c1: 0.5..2.5; t2 alone now (1 s from 0.5): LAT = start of c2 = 2.5
    assert r.lat[d.node("j", "t2")] == pytest.approx(2.5)
    assert r.done[d.node("j", "c1")] == pytest.approx(2.5)


def test_bad_estimator_and_k_std():
    w = workload([job(computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", GB)], edges=[("t", "c")])])
    d = compile_jobs(w.jobs, w.cluster)
    with pytest.raises(ValidationError, match="estimator"):
        latest_arrival_times(d, w.cluster, estimator="magic")
    with pytest.raises(ValidationError, match="k_std"):
        latest_arrival_times(d, w.cluster, k_std=-1)


def _close(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    same_nan = np.isnan(a) == np.isnan(b)
    ok = np.isnan(a) | np.isclose(a, b, rtol=1e-9, atol=1e-12)
    return bool(np.all(same_nan) and np.all(ok))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_jobs())
def test_exact_kernel_matches_python_reference_and_networkx(jobs):
    w = workload([j.to_dict() for j in jobs])
    d = compile_jobs(w.jobs, w.cluster)
    r = latest_arrival_times(d, w.cluster)
    rel, done, lat, finish = lat_exact_reference(d, r.trans, d.arrival, d.duration)
    assert _close(r.release, rel) and _close(r.done, done)
    assert _close(r.lat, lat) and _close(r.job_finish, finish)
    assert _close(r.lat, lat_bruteforce(d, r.trans, d.arrival, d.duration))
    t = d.kind == 1
    # never earlier than physically possible
    assert np.all(r.lat[t] >= r.done[t] - 1e-9)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_jobs())
def test_paper_kernel_matches_algorithm_1_bookkeeping(jobs):
    w = workload([j.to_dict() for j in jobs])
    d = compile_jobs(w.jobs, w.cluster)
    r = latest_arrival_times(d, w.cluster, estimator="paper")
    ref = lat_paper_reference(d, r.trans, d.arrival, d.duration)
    assert _close(r.lat, ref)


@settings(max_examples=100, deadline=None)
@given(random_jobs(max_jobs=1, max_nodes=20))
def test_topological_order_kernel_matches_reference(jobs):
    w = workload([j.to_dict() for j in jobs])
    d = compile_jobs(w.jobs, w.cluster)
    order = topological_order(d.n_nodes, d.pred_ptr, d.succ_ptr, d.succ_idx)
    ref = topological_order_reference(d.n_nodes, d.pred_ptr, d.succ_ptr, d.succ_idx)
    assert order.tolist() == ref


def test_topological_order_reports_cycle_by_length():
    # 0 -> 1 -> 2 -> 1 (CSR by hand)
    pred_ptr = np.array([0, 0, 2, 3])
    succ_ptr = np.array([0, 1, 2, 3])
    succ_idx = np.array([1, 2, 1], dtype=np.int32)
    assert topological_order(3, pred_ptr, succ_ptr, succ_idx).tolist() == [0]


def test_unbuilt_kernel_raises_one_clear_error(monkeypatch):
    import sys

    from jitsched.errors import ExtensionNotBuiltError, load_kernel

    # a None entry in sys.modules makes `import jitsched._lat` fail as an unbuilt tree does
    monkeypatch.setitem(sys.modules, "jitsched._lat", None)
    load_kernel.cache_clear()
    w = workload([job(computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", GB)], edges=[("t", "c")])])
    try:
        with pytest.raises(ExtensionNotBuiltError, match=r"pip install \.") as info:
            compile_jobs(w.jobs, w.cluster)
    finally:
        load_kernel.cache_clear()
    assert "jitsched._lat is not built" in str(info.value)
