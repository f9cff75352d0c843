"""bench_lp and bench_scale on tiny sizes: JSON shapes, LP variants agreeing on the optimum, exponent fits, the figure."""

from __future__ import annotations

import json

import pytest

from jitsched.bench import bench_lp, bench_scale


def test_fit_exponent_is_the_log_log_slope():
    assert bench_scale.fit_exponent([1, 10, 100], [2.0, 200.0, 20000.0]) == pytest.approx(2.0)
    assert bench_scale.fit_exponent([5], [1.0]) != bench_scale.fit_exponent([5], [1.0])  # nan


def test_bench_lp_json_variants_reach_one_optimum(capsys):
    bench_lp.main(["--jobs", "12", "8:20", "--repeat", "1", "--variants", "new", "lp", "lp-each", "lp-simplex",
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    assert [(r["jobs"], r["hosts"]) for r in out["runs"]] == [(12, 100), (8, 20)]
    for r in out["runs"]:
        v = r["variants"]
        assert set(v) == {"new", "lp", "lp-each", "lp-simplex"}
        # the same LP inputs: the same optimum, whichever way it is found
        for name in ("lp", "lp-simplex"):
            assert v[name]["objective_value"] == pytest.approx(v["lp-each"]["objective_value"], rel=1e-6)
            assert v[name]["late"] == v["lp-each"]["late"] == 0
        assert v["new"]["late"] == 0
        # aggregation merges transfers into fewer LP flows; lp-each keeps one per transfer
        assert v["lp"]["flows"] < v["lp-each"]["flows"] == r["transfers"]


def test_bench_scale_json_and_figure(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    fig = tmp_path / "scale.png"
    bench_scale.main(["--jobs", "5", "10", "--jobs-hosts", "20", "--hosts", "20", "40", "--hosts-jobs", "5",
                      "--repeat", "1", "--variants", "new", "--figure", str(fig), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert [(s["axis"], s["variant"], len(s["points"])) for s in out["series"]] == [
        ("jobs", "new", 2), ("hosts", "new", 2)]
    assert all(p["status"] == "optimal" for s in out["series"] for p in s["points"])
    assert fig.stat().st_size > 0
