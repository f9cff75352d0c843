"""The mean-JCT lower bound: SRPT against brute force, exact on cases with a known optimum, and never
above what any schedule reaches on small instances (every job-priority order simulated, every policy)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from jitsched.bench.bench_bound import best_found, instance
from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload
from jitsched.errors import ValidationError
from jitsched.plan.bound import MAX_ARRIVAL_S, job_bounds, lower_bound_mean_jct, srpt_total
from jitsched.sim import simulate

GBPS = 1e9  # bits/s; 125e6 bytes/s


def _chain(jid: str, src: str, dst: str, mbytes: float, compute_s: float, arrival_s: float = 0.0) -> Job:
    """compute on src, then a transfer src -> dst, then compute on dst."""
    return Job(jid, (Compute("a", src, compute_s), Compute("b", dst, compute_s)),
               (Transfer("t", src, dst, mbytes * 1e6),), (("a", "t"), ("t", "b")), arrival_s=arrival_s)


def test_srpt_matches_the_best_order_when_all_are_released_together():
    rng = random.Random(0)
    for _ in range(50):
        work = np.array([rng.uniform(0.1, 2.0) for _ in range(rng.randint(1, 5))])
        best = min(np.cumsum(work[list(p)]).sum() for p in itertools.permutations(range(len(work))))
        assert srpt_total(np.zeros(len(work)), work).sum() == pytest.approx(best)


def test_srpt_preempts_for_a_shorter_arrival():
    done = srpt_total(np.array([0.0, 1.0]), np.array([3.0, 1.0]))
    assert done.tolist() == pytest.approx([4.0, 2.0])


def test_one_chain_job_alone_is_exact():
    wl = Workload(Cluster.uniform(2, bps=GBPS), (_chain("j", "h0", "h1", 125.0, 0.5),))
    assert lower_bound_mean_jct(wl) == pytest.approx(2.0)  # 0.5 + 1 s on the wire + 0.5
    assert simulate(wl, "tensorflow").jct_s[0] == pytest.approx(2.0)


def test_two_transfers_on_one_port_need_srpt_not_their_time_alone():
    # both alone 1 s; on one port the best is one first: mean (1 + 2) / 2
    jobs = (_chain("a", "h0", "h1", 125.0, 0.0), _chain("b", "h0", "h2", 125.0, 0.0))
    wl = Workload(Cluster.uniform(3, bps=GBPS), jobs)
    assert [job_bounds(j, np.full(3, 125e6), np.full(3, 125e6), wl.cluster.index).alone for j in jobs] \
        == pytest.approx([1.0, 1.0])
    assert lower_bound_mean_jct(wl) == pytest.approx(1.5)


@pytest.mark.parametrize("seed", range(12))
def test_the_bound_is_never_above_any_schedule_found(seed):
    # bench_bound runs the same check over more instances and reports how tight it is
    wl = instance(seed)
    bound, best = lower_bound_mean_jct(wl), best_found(wl)
    assert bound <= best * (1 + 1e-9)
    assert bound >= 0.5 * best  # and not vacuous on these small cases


def test_bench_bound_reports_the_ratios_and_fails_on_a_bound_above_a_schedule(capsys, monkeypatch):
    import json

    from jitsched.bench import bench_bound

    assert bench_bound.main(["--instances", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instances"] == 3 and out["above_best"] == []
    assert 0.5 <= out["bound_over_best_min"] <= out["bound_over_best_median"] <= out["bound_over_best_max"] <= 1 + 1e-9
    # a bound that claims too much is listed, and the exit status says so
    monkeypatch.setattr(bench_bound, "lower_bound_mean_jct", lambda wl: 1e9)
    assert bench_bound.main(["--instances", "1"]) == 1
    assert "ABOVE THE BEST FOUND: seed 0" in capsys.readouterr().out


def test_a_jobs_time_alone_counts_its_ports_head_and_tail():
    # two 125 MB transfers h0 -> h1 after 0.5 s of compute, then 0.5 s after both: the
    # port is busy 2 s from 0.5 s at the earliest and the job needs 0.5 s after it
    job = Job("j", (Compute("a", "h0", 0.5), Compute("b", "h1", 0.5)),
              (Transfer("t0", "h0", "h1", 125e6), Transfer("t1", "h0", "h1", 125e6)),
              (("a", "t0"), ("a", "t1"), ("t0", "b"), ("t1", "b")))
    wl = Workload(Cluster.uniform(2, bps=GBPS), (job,))
    # the critical path (1 + 0.5 + 0.5 s) and the port's bytes alone (2 s) are both short of it
    assert job_bounds(job, np.full(2, 125e6), np.full(2, 125e6), wl.cluster.index).alone == pytest.approx(3.0)
    assert lower_bound_mean_jct(wl) == pytest.approx(3.0)
    assert simulate(wl, "tensorflow").jct_s[0] == pytest.approx(3.0)


def test_contention_on_two_ports_at_once_counts_both():
    # two pairs of 1-s transfers, each pair out of one host: one port's SRPT with the others
    # alone gives (1 + 2 + 1 + 1) / 4; each job on its own port, both ports at once, (1 + 2) * 2 / 4
    jobs = (_chain("a", "h0", "h1", 125.0, 0.0), _chain("b", "h0", "h2", 125.0, 0.0),
            _chain("c", "h3", "h4", 125.0, 0.0), _chain("d", "h3", "h5", 125.0, 0.0))
    wl = Workload(Cluster.uniform(6, bps=GBPS), jobs)
    assert lower_bound_mean_jct(wl) == pytest.approx(1.5)
    assert float(np.mean(simulate(wl, "jit").jct_s)) == pytest.approx(1.5)


def test_a_parameter_servers_pull_must_cross_its_port_before_the_push_can_start():
    # two 125 MB parameters pulled over h0 -> h1, a forward op needing both, then two
    # 125 MB gradients pushed h1 -> h0: no gradient exists before both parameters have
    # crossed h0's egress (2 s), and both gradients need h1's egress after that (2 s);
    # neither the longest chain (2 s) nor any one port (2 s) says so
    job = Job("j", (Compute("f", "h1", 0.0),),
              (Transfer("p0", "h0", "h1", 125e6), Transfer("p1", "h0", "h1", 125e6),
               Transfer("g0", "h1", "h0", 125e6), Transfer("g1", "h1", "h0", 125e6)),
              (("p0", "f"), ("p1", "f"), ("f", "g0"), ("f", "g1")))
    wl = Workload(Cluster.uniform(2, bps=GBPS), (job,))
    b = job_bounds(job, np.full(2, 125e6), np.full(2, 125e6), wl.cluster.index)
    assert b.alone == pytest.approx(4.0)
    # the ports' heads and tails see it too: h0's egress is followed by 2 s of gradients
    assert dict((p, (head, tail)) for p, _, head, tail in b.ports)[0] == pytest.approx((0.0, 2.0))
    assert lower_bound_mean_jct(wl) == pytest.approx(4.0)
    assert simulate(wl, "jit").jct_s[0] == pytest.approx(4.0)


def test_release_makespan_is_the_best_single_machine_finish():
    from jitsched.plan.bound import _release_makespan

    # released at 0 and 5 with 1 s each: 6; at 0 and 0.5 with 1 s each: 2
    assert _release_makespan(np.array([0.0, 5.0]), np.array([1.0, 1.0])) == pytest.approx(6.0)
    assert _release_makespan(np.array([0.0, 0.5]), np.array([1.0, 1.0])) == pytest.approx(2.0)
    rng = random.Random(1)
    for _ in range(30):
        n = rng.randint(1, 5)
        rel, work = [rng.uniform(0, 3) for _ in range(n)], [rng.uniform(0.1, 2) for _ in range(n)]
        t, best = 0.0, 0.0
        for r, w in sorted(zip(rel, work, strict=True)):  # the earliest-release schedule is optimal
            t = max(t, r) + w
            best = t
        assert _release_makespan(np.array(rel), np.array(work)) == pytest.approx(best)


def test_jobs_of_one_shape_share_their_bounds_on_their_own_ports():
    from jitsched.plan.bound import _shared_job_bounds
    from jitsched.workloads.paper import generate_workload

    wl = generate_workload(0.5, n_jobs=30, n_hosts=8, bps=1e10, seed=2)
    cl = wl.cluster
    eg = np.array([x.egress_bps / 8.0 for x in cl.hosts])
    ig = np.array([x.ingress_bps / 8.0 for x in cl.hosts])
    cache: dict = {}
    for j in wl.jobs:
        assert _shared_job_bounds(j, eg, ig, cl.index, cache) == job_bounds(j, eg, ig, cl.index)
    assert len(cache) < len(wl.jobs)  # some shapes came again, on other hosts


@pytest.mark.parametrize("at_s", [1e3, 2e9, MAX_ARRIVAL_S])
def test_a_job_as_late_as_arrivals_go_is_bounded_as_any_other(at_s):
    # two jobs on ports of their own: the bound is their mean time alone, 0.8 s and
    # 0.81 s, at_s apart; float seconds at 4e9 s are 5e-7 s apart
    first = Job("a", (), (Transfer("t", "h0", "h1", 1e8),), ())
    late = Job("b", (Compute("c", "h3", 0.01),), (Transfer("t", "h2", "h3", 1e8),), (("t", "c"),), arrival_s=at_s)
    wl = Workload(Cluster.uniform(4, bps=GBPS), (first, late))
    assert lower_bound_mean_jct(wl) == pytest.approx(0.805, abs=1e-6)


def test_the_bound_refuses_arrivals_past_the_latest_it_can_time():
    for at in (MAX_ARRIVAL_S * 2, 1e15):
        wl = Workload(Cluster.uniform(2, bps=GBPS), (_chain("j", "h0", "h1", 1.0, 0.5, at),))
        with pytest.raises(ValidationError, match="job 'j': arrival_s .* is after 2\\*\\*32 s"):
            lower_bound_mean_jct(wl)
