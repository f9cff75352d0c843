"""bench_fanout at a small size: every figure measured, the parallel LP's plan the serial one's."""

from __future__ import annotations

import json
import multiprocessing

from jitsched.bench import bench_fanout


def test_small_run_measures_every_figure(capsys):
    assert bench_fanout.main(["--agents", "8", "--jobs", "6", "--hosts", "6", "--repeats", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fanout_hosts"] == 8  # "all": every agent sent a body of its own
    assert 0.0 < out["fanout_from_install_s"] <= out["fanout_s"] < 10.0
    for key in ("resolve_s", "resolve_lp_s", "resolve_lp_parallel_s"):
        assert 0.0 < out[key] < 10.0 and len(out[key.replace("_s", "_runs_s", 1)]) == 1
    assert out["lp_same"] is True and out["lp_components"] >= 1
    assert not multiprocessing.active_children()


def test_bad_arguments_exit_2_in_one_line(capsys):
    assert bench_fanout.main(["--parts", "fanout,nope"]) == 2
    assert bench_fanout.main(["--agents", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("bench_fanout: ") for e in err)
