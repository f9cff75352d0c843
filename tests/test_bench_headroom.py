"""bench_headroom's search: jit's own order as its start, only improvements kept, figures that add up."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jitsched.bench import bench_headroom as bh
from jitsched.sim import simulate
from jitsched.workloads.paper import generate_workload


def test_unit_factors_are_jit_itself():
    wl = generate_workload(0.5, n_jobs=20, n_hosts=20, bps=1e10, seed=1)
    jit = float(np.mean(simulate(wl, "jit", seed=1).jct_s))
    assert bh.weighted_mean_jct(wl, None, 1) == jit
    assert bh.weighted_mean_jct(wl, np.ones(len(wl.jobs)), 1) == jit
    # a factor moves the order: some job's weight changes what the run gives
    assert any(bh.weighted_mean_jct(wl, np.where(np.arange(len(wl.jobs)) == j, 1e-3, 1.0), 1) != jit
               for j in range(len(wl.jobs)))


def test_the_search_keeps_only_what_lowers_the_mean(capsys):
    assert bh.main(["--seeds", "2", "--n-jobs", "12", "--factors", "0.25,4", "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for r in out["runs"]:
        assert r["searched_s"] <= r["jit_s"]
        assert (r["searched_s"] < r["jit_s"]) == bool(r["factors"])
        assert set(r["factors"].values()) <= {0.25, 4.0}
    s = out["summary"]
    assert s["seeds"] == [0, 1] and s["searched"]["jct_mean_s"] <= s["jit"]["jct_mean_s"]
    assert s["searched"]["sincronia_over"] >= s["jit"]["sincronia_over"]


@pytest.mark.parametrize("bad", [["--factors", "1"], ["--factors", "a,b"], ["--factors", "-2"], ["--seeds", "0"]])
def test_bad_options_are_refused(bad, capsys):
    with pytest.raises(SystemExit) as e:
        bh.main(bad)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_lp_order_runs_jit_under_each_variant(capsys):
    assert bh.main(["--lp-order", "--seeds", "2", "--n-jobs", "12", "--lp-exponents", "1,64", "--lp-spreads",
                    "1000", "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for r in out["runs"]:
        assert set(r["variants"]) == {"stretch^1", "stretch^64", "rank 1000"}
        assert r["lp_stretch_max"] >= 1.0 - 1e-9
        wl = generate_workload(0.5, n_jobs=12, n_hosts=20, bps=1e10, seed=r["seed"])
        assert r["jit_s"] == float(np.mean(simulate(wl, "jit", seed=r["seed"]).jct_s))
    s = out["summary"]
    assert s["seeds"] == [0, 1]
    for name in ("stretch^1", "stretch^64", "rank 1000"):
        x = [r["variants"][name] for r in out["runs"]]
        assert s[name]["jct_mean_s"] == pytest.approx(np.mean(x))
        assert s[name]["over_jit"] == pytest.approx(np.mean([v / r["jit_s"] - 1 for v, r in zip(x, out["runs"], strict=True)]))
    # a nearly strict order by LP completion is not jit's own order
    assert any(r["variants"]["rank 1000"] != r["jit_s"] for r in out["runs"])


@pytest.mark.parametrize("bad", [["--lp-order", "--lp-exponents", "x"], ["--lp-order", "--lp-spreads", "0"]])
def test_bad_lp_options_are_refused(bad, capsys):
    with pytest.raises(SystemExit) as e:
        bh.main(bad)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err
