"""bench/bench_order.py: its job-order variants of jit, checked against the policies they restate."""

from __future__ import annotations

import numpy as np

from bench.bench_order import BssiJit, BusiestJit, RemapJit, SmithJit, summarise
from bench.paper.spec import SCALES
from bench.paper.workload import paper_workload
from jitsched.sim import simulate


def _workload(seed=0):
    sc = SCALES["tiny"]
    return paper_workload(sc["jobs"], n_hosts=sc["hosts"], load=0.85, background_share=0.5, seed=seed,
                          real=False)


def test_bssi_with_unit_weights_is_sincronias_order():
    """Unit file weights give Sincronia's BSSI order over the same loads: the same JCTs and file slowdowns."""
    wl = _workload()
    a = simulate(wl, "sincronia", seed=0)
    b = simulate(wl, BssiJit(file_w=None), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)


def test_smith_weights_favour_the_files():
    """Smith-weighted files (x1/0.7) go ahead of where unit weights put them: the files' mean slowdown drops
    (25 jobs on 20 hosts at the paper point's load: 1.521 with unit weights, 1.460 Smith-weighted)."""
    wl = paper_workload(25, n_hosts=20, load=0.85, background_share=0.5, seed=0, real=False)
    unit = simulate(wl, BssiJit(file_w=None), seed=0)
    smith = simulate(wl, BssiJit(file_w=0.7), seed=0)
    assert smith.bg_slowdown.mean() < unit.bg_slowdown.mean() - 0.03


def test_busiest_and_remap_run_every_job():
    for policy in (BusiestJit(), RemapJit()):
        res = simulate(_workload(), policy, seed=0)
        assert np.all(np.isfinite(res.jct_s)) and len(res.jct_s) == SCALES["tiny"]["jobs"]


def test_smith_with_exponent_zero_is_jit_without_job_exp():
    """gamma 0 scales no key: the numpy greedy over jit's own keys gives the kernel's JCTs and slowdowns."""
    from jitsched.policies.jit import JitPolicy

    wl = _workload()
    a = simulate(wl, JitPolicy(job_exp=0.0), seed=0)
    b = simulate(wl, SmithJit(gamma=0.0), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)


def test_job_exp_in_the_kernel_is_the_smith_variant_with_bytes_left():
    """JitPolicy(job_exp=1) through the GroupPriority kernel gives SmithJit's run (the numpy greedy,
    the job's bytes left from its live transfers), and not jit's without it."""
    from jitsched.policies.jit import JitPolicy

    wl = _workload()
    a = simulate(wl, SmithJit(gamma=1.0, size="left"), seed=0)
    b = simulate(wl, JitPolicy(job_exp=1.0), seed=0)
    c = simulate(wl, JitPolicy(job_exp=0.0), seed=0)
    np.testing.assert_allclose(b.jct_s, a.jct_s, rtol=1e-9)
    np.testing.assert_allclose(b.bg_slowdown, a.bg_slowdown, rtol=1e-9)
    assert not np.allclose(c.jct_s, b.jct_s)


def test_summarise_speedup_by_hand():
    """Mean over models of the per-model mean JCT ratio, mean over seeds; JCT and slowdown pooled."""
    results = {("p", 0, "tensorflow", "{}"): (["a", "a", "b"], [2.0, 4.0, 3.0], [2.0]),
               ("p", 0, "x", "{}"): (["a", "a", "b"], [1.0, 4.0, 1.0], [1.0, 3.0])}
    out = summarise(results, ["p"], [0], (("x", "x", {}),))["p"]["x"]
    # model a: (2/1 + 4/4) / 2 = 1.5; model b: 3/1 = 3; mean 2.25
    assert out["speedup_mean"] == 2.25
    assert out["jct_mean_s"] == 2.0 and out["bg_slowdown_mean"] == 2.0
