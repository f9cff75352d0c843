"""bench/bench_order.py: its job-order variants of jit, checked against the policies they restate."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.bench.bench_order import (
    BssiJit,
    BssiOptions,
    BusiestJit,
    CapJit,
    CapOptions,
    RemapJit,
    SmithJit,
    SmithOptions,
    summarise,
)
from jitsched.bench.paper.spec import SCALES
from jitsched.bench.paper.workload import paper_workload
from jitsched.sim import simulate


def _workload(seed=0):
    sc = SCALES["tiny"]
    return paper_workload(sc["jobs"], n_hosts=sc["hosts"], load=0.85, background_share=0.5, seed=seed,
                          real=False)


def test_bssi_with_unit_weights_is_sincronias_order():
    """Unit file weights give Sincronia's BSSI order over the same loads: the same JCTs and file slowdowns."""
    wl = _workload()
    a = simulate(wl, "sincronia", seed=0)
    b = simulate(wl, BssiJit(BssiOptions(file_w=None)), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)


def test_smith_weights_favour_the_files():
    """Smith-weighted files (x1/0.7) go ahead of where unit weights put them: the files' mean slowdown drops
    (25 jobs on 20 hosts at the paper point's load: 1.521 with unit weights, 1.460 Smith-weighted)."""
    wl = paper_workload(25, n_hosts=20, load=0.85, background_share=0.5, seed=0, real=False)
    unit = simulate(wl, BssiJit(BssiOptions(file_w=None)), seed=0)
    smith = simulate(wl, BssiJit(BssiOptions(file_w=0.7)), seed=0)
    assert smith.bg_slowdown.mean() < unit.bg_slowdown.mean() - 0.03


def test_busiest_and_remap_run_every_job():
    for policy in (BusiestJit(), RemapJit()):
        res = simulate(_workload(), policy, seed=0)
        assert np.all(np.isfinite(res.jct_s)) and len(res.jct_s) == SCALES["tiny"]["jobs"]


def test_smith_with_exponent_zero_is_jit_without_job_exp():
    """gamma 0 scales no key: the numpy greedy over jit's own keys gives the kernel's JCTs and slowdowns."""
    from jitsched.policies.jit import JitOptions, JitPolicy

    wl = _workload()
    a = simulate(wl, JitPolicy(JitOptions(job_exp=0.0)), seed=0)
    b = simulate(wl, SmithJit(SmithOptions(gamma=0.0)), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)


def test_job_exp_in_the_kernel_is_the_smith_variant_with_bytes_left():
    """JitPolicy with job_exp 1 through the GroupPriority kernel gives SmithJit's run (the numpy greedy,
    the job's bytes left from its live transfers), and not jit's without it."""
    from jitsched.policies.jit import JitOptions, JitPolicy

    wl = _workload()
    a = simulate(wl, SmithJit(SmithOptions(gamma=1.0, size="left")), seed=0)
    b = simulate(wl, JitPolicy(JitOptions(job_exp=1.0)), seed=0)
    c = simulate(wl, JitPolicy(JitOptions(job_exp=0.0)), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)
    assert not np.allclose(c.jct_s, b.jct_s)


def test_summarise_speedup_by_hand():
    """Mean over models of the per-model mean JCT ratio, mean over seeds; JCT and slowdown pooled."""
    results = {("p", 0, "tensorflow", "{}"): (["a", "a", "b"], [2.0, 4.0, 3.0], [2.0], [0.5]),
               ("p", 0, "x", "{}"): (["a", "a", "b"], [1.0, 4.0, 1.0], [1.0, 3.0], [0.0, 0.2, 0.4])}
    out = summarise(results, ["p"], [0], (("x", "x", {}),))["p"]["x"]
    # model a: (2/1 + 4/4) / 2 = 1.5; model b: 3/1 = 3; mean 2.25
    assert out["speedup_mean"] == 2.25
    assert out["jct_mean_s"] == 2.0 and out["bg_slowdown_mean"] == 2.0
    # the remaining bandwidth's samples: p5 between 0 and 0.2 (linear: 0.02), median 0.2
    assert out["remaining_bw_p5"] == pytest.approx(0.02) and out["remaining_bw_median"] == pytest.approx(0.2)


def test_a_dl_cap_holds_dl_under_it_and_gives_the_rest_to_the_files():
    from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload
    from jitsched.sim import simulate

    # one 1-s read h0 -> h1 and one 4-s file on the same ports, both at 0 (1 Gbit/s)
    job = Job("j", (Compute("c", "h1", 0.0),), (Transfer("t", "h0", "h1", 1.25e8),), (("t", "c"),), 0.0, 0.0, "m")
    wl = Workload(Cluster.uniform(2), (job,), (Background("f", "h0", "h1", 5e8, 0.0),))
    free = simulate(wl, CapJit(CapOptions(cap=1.0)), seed=0)
    capped = simulate(wl, CapJit(CapOptions(cap=0.5)), seed=0)
    # uncapped, jit's order sends the read first (the large file's key is larger): 1 s,
    # then the file alone: 5 s
    assert free.jct_s[0] == pytest.approx(1.0) and free.bg_finish_s[0] == pytest.approx(5.0)
    # capped at half: the read at half the port for 2 s beside the file, which ends at 5 s
    # all the same; the per-slot remaining bandwidth while the read runs is 0.5
    assert capped.jct_s[0] == pytest.approx(2.0) and capped.bg_finish_s[0] == pytest.approx(5.0)
    assert np.allclose(capped.remaining_bw_slots, 0.5) and np.allclose(free.remaining_bw_slots, 0.0)


def test_files_alone_is_the_files_without_the_jobs_and_under_their_slowdown_beside_them(capsys):
    """--files-alone gives each policy's files' mean slowdown with the DL jobs taken out of the same workload
    (checked against the simulator run directly), and for jit that is under its slowdown beside the jobs."""
    import dataclasses
    import json

    from jitsched.bench.bench_order import POINTS, main

    assert main(["--quick", "--files-alone", "--points", "paper", "--json"]) == 0
    got = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert got["files_alone"] is True and set(got["points"]["paper"]) == {"tensorflow", "jit", "sincronia"}
    sc = SCALES["quick"]
    load, share = POINTS["paper"]
    wl = paper_workload(sc["jobs"], n_hosts=sc["hosts"], load=load, background_share=share, seed=0, real=True)
    alone = simulate(dataclasses.replace(wl, jobs=()), "jit", seed=0)
    assert len(alone.jct_s) == 0 and len(alone.bg_slowdown) == len(wl.background)
    assert got["points"]["paper"]["jit"]["bg_slowdown_mean"] == pytest.approx(alone.bg_slowdown.mean(), rel=1e-12)
    with_jobs = simulate(wl, "jit", seed=0)
    assert alone.bg_slowdown.mean() < with_jobs.bg_slowdown.mean()
    # fair sharing among the files alone is slower for them than either order
    rows = got["points"]["paper"]
    assert rows["tensorflow"]["bg_slowdown_mean"] > max(rows["jit"]["bg_slowdown_mean"],
                                                         rows["sincronia"]["bg_slowdown_mean"])


def test_files_alone_refuses_a_grid_selection():
    from jitsched.bench.bench_order import main

    with pytest.raises(SystemExit):
        main(["--quick", "--files-alone", "--only", "cap"])
