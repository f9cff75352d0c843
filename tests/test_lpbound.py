"""The time-indexed LP bound: exact where the answer is known, never above a schedule found by exhaustive search, and above the combinatorial bounds where two jobs need one port at once."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from jitsched.bench.bench_bound import best_found, instance
from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload
from jitsched.plan import lpbound
from jitsched.plan.bound import BANDS, _bands, job_bounds, lower_bound_mean_jct
from jitsched.sim import simulate

GBPS = 1e9  # bits/s; 125e6 bytes/s


def _ps_job(jid: str, ps: str, worker: str, arrival_s: float, hello: bool = False) -> Job:
    """A 125 MB pull ps -> worker, a compute of 0 s, a 125 MB push back (1 s each at 1 Gbit/s);
    with ``hello``, also a 1-byte worker -> ps message that can go at once."""
    transfers = [Transfer("pull", ps, worker, 125e6), Transfer("push", worker, ps, 125e6)]
    edges = [("pull", "f"), ("f", "push")]
    if hello:
        transfers.append(Transfer("hello", worker, ps, 1.0))
    return Job(jid, (Compute("f", worker, 0.0),), tuple(transfers), tuple(edges), arrival_s=arrival_s)


def _crossing() -> Workload:
    # a's push into h0 over [1, 2] s alone; b arrives at 1 s and pulls into h0 at once: one
    # of them waits 1 s, mean (2 + 3) / 2. a's 1-byte message into h0 can go at 0 s, so
    # h0's ingress is free for a from 0 s on as far as the port bounds see
    return Workload(Cluster.uniform(3, bps=GBPS), (_ps_job("a", "h0", "h1", 0.0, hello=True),
                                                   _ps_job("b", "h2", "h0", 1.0)))


def test_two_jobs_needing_one_port_at_once_are_seen_by_the_lp_only():
    wl = _crossing()
    best = best_found(wl)
    assert best == pytest.approx(2.5)
    assert lower_bound_mean_jct(wl, lp=False) == pytest.approx(2.0)
    # the LP loses at most a slot (a 100th of the mean time alone) per job
    assert 2.5 - 0.02 <= lower_bound_mean_jct(wl) <= best * (1 + 1e-9)


def test_equal_jobs_on_one_port_are_exact_up_to_a_slot():
    jobs = tuple(Job(f"j{k}", (Compute("a", "h0", 0.5), Compute("b", "h1", 0.5)),
                     (Transfer("t", "h0", "h1", 125e6),), (("a", "t"), ("t", "b"))) for k in range(3))
    wl = Workload(Cluster.uniform(2, bps=GBPS), jobs)
    # one at a time over the port: 2 + 3 + 4 s
    assert float(np.mean(simulate(wl, "jit").jct_s)) == pytest.approx(3.0)
    assert 3.0 - 2.0 / 100 <= lower_bound_mean_jct(wl) <= 3.0 * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(12, 36))
def test_the_lp_is_never_above_any_schedule_found(seed):
    wl = instance(seed)
    assert lower_bound_mean_jct(wl) <= best_found(wl) * (1 + 1e-9)


def test_a_short_window_keeps_the_bound_valid():
    # bytes past a band's window count at its end and take no port: looser, never above
    wl = _crossing()
    eg = np.full(3, 125e6)
    bounds = [job_bounds(j, eg, eg, wl.cluster.index) for j in wl.jobs]
    args = (np.array([0.0, 1.0]), np.array([b.alone for b in bounds]), [b.bands for b in bounds], np.full(6, 125e6))
    full, short = lpbound.lp_sum_bound(*args), lpbound.lp_sum_bound(*args, window=0.25)
    assert 4.0 <= short <= full <= 5.0 * (1 + 1e-9)


def test_a_solver_failure_is_raised_with_its_status(monkeypatch):
    monkeypatch.setattr(lpbound, "linprog", lambda *a, **k: SimpleNamespace(status=4, message="stuck", fun=0.0))
    with pytest.raises(RuntimeError, match="numerical difficulties: stuck"):
        lower_bound_mean_jct(_crossing())


def test_an_early_message_does_not_let_later_bytes_start_with_it():
    # (tail, head, bytes): the 1-byte message at 0 s, the push at 1 s, on one pair of hosts
    bands = _bands(3, 5, [(0.0, 0.0, 1.0), (0.0, 1.0, 125e6)], span=0.1)
    assert [(b[3], b[2]) for b in bands] == [(0.0, 1.0), (1.0, 125e6)]
    # within the span, bands are cut at equal shares of the bytes, largest tails first
    rows = [(1.0 - k / 100, 0.0, 1e6) for k in range(100)]
    cut = _bands(0, 1, rows, span=10.0)
    assert len(cut) == BANDS and [b[2] for b in cut] == pytest.approx([100e6 / BANDS] * BANDS)
    assert [b[4] for b in cut] == sorted((b[4] for b in cut), reverse=True)


def test_simplex_out_of_time_hands_the_lp_to_the_interior_point_method(monkeypatch):
    wl = _crossing()
    eg = np.full(3, 125e6)
    bounds = [job_bounds(j, eg, eg, wl.cluster.index) for j in wl.jobs]
    args = (np.array([0.0, 1.0]), np.array([b.alone for b in bounds]), [b.bands for b in bounds], np.full(6, 125e6))
    methods = []
    real = lpbound.linprog

    def spy(*a, **k):
        res = real(*a, **k)
        methods.append((k["method"], res.status))
        return res

    monkeypatch.setattr(lpbound, "linprog", spy)
    quick = lpbound.lp_sum_bound(*args)
    assert methods == [("highs-ds", 0)]
    methods.clear()
    late = lpbound.lp_sum_bound(*args, simplex_s=0.0)
    assert methods == [("highs-ds", 1), ("highs-ipm", 0)]
    assert late == pytest.approx(quick, rel=1e-8)
    assert quick > float(args[1].sum())  # the LP binds here: both methods solved it


def test_jobs_that_never_share_a_port_slot_are_separate_lps(monkeypatch):
    # the crossing pair, and the same pair again 1000 s later: two LPs of one pair each
    first = _crossing()
    later = tuple(replace(j, id=f"{j.id}-late", arrival_s=j.arrival_s + 1000.0) for j in first.jobs)
    both = Workload(first.cluster, first.jobs + later)
    calls = []
    real = lpbound.linprog

    def spy(c, **k):
        calls.append(len(c))
        return real(c, **k)

    monkeypatch.setattr(lpbound, "linprog", spy)
    one = lower_bound_mean_jct(first)
    assert len(calls) == 1
    calls.clear()
    assert lower_bound_mean_jct(both) == pytest.approx(one, rel=1e-9)
    assert len(calls) == 2 and calls[0] == calls[1]  # the same LP for each pair


def test_the_lps_job_jcts_add_up_to_its_sum():
    from jitsched.plan.bound import lp_job_jcts

    wl = _crossing()
    lp, alone = lp_job_jcts(wl)
    eg = np.full(3, 125e6)
    bounds = [job_bounds(j, eg, eg, wl.cluster.index) for j in wl.jobs]
    np.testing.assert_allclose(alone, [b.alone for b in bounds])
    total = lpbound.lp_sum_bound(np.array([0.0, 1.0]), alone, [b.bands for b in bounds], np.full(6, 125e6))
    assert total > alone.sum()  # the LP binds here, so its JCTs are its sum's parts
    assert lp.sum() == pytest.approx(total, rel=1e-9)
    assert np.all(lp >= alone * (1 - 1e-9))
    assert lower_bound_mean_jct(wl) >= lp.mean() * (1 - 1e-9)
