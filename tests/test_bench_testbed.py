"""bench_testbed's figure: drawn from a saved --json output, and clear errors for bad input."""

from __future__ import annotations

import json

import pytest

from bench.bench_testbed import _figure_path, main


def saved_output() -> dict:
    jobs = {"lenet-0": (0.3, 0.2), "vgg16-1": (25.0, 17.0)}
    run = {p: {"jct_s": {j: v[k] for j, v in jobs.items()}} for k, p in enumerate(("none", "jit"))}
    return {"scenarios": {"quick": {
        "scenario": "quick", "seed": 0, "repeat": 1, "alpha": 0.7, "job_order": "smallest",
        "ingress": True, "drift_s": 0.5,
        "median": {"jct_ratio_none_over_jit": 1.2, "none_background_mbit_mean": 56.0,
                   "jit_background_mbit_mean": 45.0},
        "simulator": {"jct_ratio_tf_over_jit": 1.3,
                      "jct_s": {"tensorflow": {"lenet-0": 0.2, "vgg16-1": 17.6},
                                "jit": {"lenet-0": 0.2, "vgg16-1": 15.6}}},
        "runs": [run]}}}


def test_replot_draws_a_png_from_saved_output(tmp_path, capsys):
    src = tmp_path / "bt.json"
    src.write_text(json.dumps(saved_output()))
    fig = tmp_path / "jobs.png"
    assert main(["--replot", str(src), "--figure", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
    assert str(fig) in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--replot", "x.json"], "--replot needs --figure"),
    (["--replot", "/nonexistent/bt.json", "--figure", "f.png"], "not a bench_testbed --json output"),
    (["--drift-s", "0"], "--drift-s: must be positive"),
    (["--dl-share", "0"], "--dl-share: must be within (0, 1]"),
    (["--max-planner-duty", "2"], "--max-planner-duty: must be within (0, 1]"),
    (["--dl-share", "1.2"], "--dl-share: must be within (0, 1]"),
])
def test_bad_arguments_exit_2_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_one_figure_per_scenario_when_several():
    assert _figure_path("out/jobs.png", "quick", 1) == "out/jobs.png"
    assert _figure_path("out/jobs.png", "paper-mini", 2) == "out/jobs-paper-mini.png"
    assert _figure_path("jobs", "quick", 2) == "jobs-quick"


def test_tradeoff_figure_from_a_saved_dl_share_sweep(tmp_path, capsys):
    one = saved_output()["scenarios"]["quick"]
    sweep = {}
    for share, ratio, mbit in ((1.0, 1.3, 45.0), (0.6, 1.1, 48.0)):
        r = json.loads(json.dumps(one))
        r["dl_share"] = share
        r["median"].update(jct_ratio_none_over_jit=ratio, jit_background_mbit_mean=mbit)
        r["simulator"]["background_mbit"] = {"jit": mbit + 4, "tensorflow": 46.0}
        sweep[f"quick@{share:g}"] = r
    src = tmp_path / "sweep.json"
    src.write_text(json.dumps({"scenarios": sweep}))
    fig = tmp_path / "tradeoff.png"
    assert main(["--replot", str(src), "--tradeoff", str(fig)]) == 0
    # one scenario: one figure at the path as given, however many shares
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
    assert capsys.readouterr().out.strip() == f"wrote {fig}"
