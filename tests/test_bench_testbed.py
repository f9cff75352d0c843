"""bench_testbed's figure: drawn from a saved --json output, and clear errors for bad input."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from jitsched.agents.backends.base import BACKGROUND_FLOOR
from jitsched.bench.bench_testbed import _figure_path, main


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
    (["--replot", "x.json"], "--replot needs --figure, --policies or --tradeoff"),
    (["--replot", "/nonexistent/bt.json", "--figure", "f.png"], "not a bench_testbed --json output"),
    # the options' own checks, before anything runs, naming the field
    (["--drift-s", "0"], "drift_s: must be positive"),
    (["--dl-share", "0"], "dl_share: must be within (0, 1]"),
    (["--max-planner-duty", "2"], "max_planner_duty: must be within (0, 1]"),
    (["--dl-share", "1", "1.2"], "dl_share: must be within (0, 1]"),
    (["--slots", "0"], "slots: must be within [1, inf)"),
    (["--prefix", "JS"], "prefix: bad prefix 'JS'"),
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


def test_policies_figure_shows_every_policy_testbed_beside_simulator(tmp_path, capsys):
    from jitsched.bench.bench_testbed import policy_figures

    one = saved_output()["scenarios"]["quick"]
    one["baselines"] = ["sincronia"]
    one["runs"] = [{"jit": {"mean_jct_s": 5.0, "background_mbit_mean": 45.0},
                    "none": {"mean_jct_s": 9.0, "background_mbit_mean": 55.0},
                    "sincronia": {"mean_jct_s": 6.0, "background_mbit_mean": 47.0}},
                   {"jit": {"mean_jct_s": 7.0, "background_mbit_mean": 46.0},
                    "none": {"mean_jct_s": 11.0, "background_mbit_mean": 57.0},
                    "sincronia": {"mean_jct_s": 6.5, "background_mbit_mean": 48.0}}]
    one["median"].update(jit_mean_jct_s=6.0, none_mean_jct_s=10.0, sincronia_mean_jct_s=6.25,
                         sincronia_background_mbit_mean=47.5)
    one["simulator"]["jct_s"]["sincronia"] = {"lenet-0": 0.3, "vgg16-1": 16.1}
    one["simulator"]["background_mbit"] = {"jit": 44.0, "tensorflow": 46.0}  # no sincronia: None
    data = policy_figures(one)
    # jit, the baselines, none; the simulator's mean JCT is the mean of its jobs' (by hand)
    assert list(data["jct"]) == ["jit", "sincronia", "none"]
    assert data["jct"]["jit"] == ([5.0, 7.0], 6.0, pytest.approx(7.9))
    assert data["jct"]["sincronia"] == ([6.0, 6.5], 6.25, pytest.approx(8.2))
    assert data["jct"]["none"] == ([9.0, 11.0], 10.0, pytest.approx(8.9))
    assert data["files"]["none"] == ([55.0, 57.0], 56.0, 46.0)
    assert data["files"]["sincronia"] == ([47.0, 48.0], 47.5, None)
    src = tmp_path / "bt.json"
    src.write_text(json.dumps({"scenarios": {"quick": one}}))
    fig = tmp_path / "policies.png"
    assert main(["--replot", str(src), "--policies", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and fig.stat().st_size > 5000
    assert capsys.readouterr().out.strip() == f"wrote {fig}"


def _prediction(baselines: tuple[str, ...] = ()) -> dict:
    """A simulator prediction of one lenet job, the same under jit and tensorflow (for fake runs).

    Each baseline's job takes 1.5 s, its files 40 Mbit/s.
    """
    one = {"mean_jct_s": 1.0, "jct_s": {"lenet-0": 1.0}, "jct_by_model_s": {"lenet": 1.0},
           "background_slowdown": 1.1, "background_mbit_mean": 45.0}
    slow = {**one, "mean_jct_s": 1.5, "jct_s": {"lenet-0": 1.5}, "background_mbit_mean": 40.0}
    return {"jit": one, "tensorflow": one, "jct_ratio_tf_over_jit": 1.0, "mean_speedup": 1.0} | {
        b: slow for b in baselines}


def test_runs_get_the_flags_as_options_one_set_per_dl_share(monkeypatch, capsys):
    import jitsched.bench.bench_testbed as bt
    import jitsched.testbed.e2e as e2e
    from jitsched.testbed.options import TestbedOptions

    runs, predicted = [], []

    def fake_run(scenario, options, **overrides):
        options = replace(options, **overrides)
        runs.append((scenario, options))
        jct = 1.0 if options.policy == "jit" else 1.5
        return {"policy": options.policy, "jobs": 1, "completed": 1, "mean_jct_s": jct, "lat_hit_rate": 1.0,
                "background_mbit_mean": 40.0, "background_slowdown_mean": 1.2, "background_completed": "1/1",
                "agents_failed": {},
                "details": {"jct_s": {"lenet-0": jct}, "wall_s": 2.0, "daemon": {}, "agents": {}, "errors": {},
                            "background_contention": {"file-0": {"egress_dl_mb": 1.0, "ingress_dl_mb": 2.0,
                                                                 "life_s": 3.0}}}}

    def fake_predict(scenario, seed, **kw):
        predicted.append((scenario, seed, kw))
        return _prediction()

    monkeypatch.setattr(e2e, "run_scenario", fake_run)
    monkeypatch.setattr(bt, "predict", fake_predict)
    monkeypatch.setattr(bt, "require_daemon_side", lambda: None)
    assert main(["--skip-enforcement", "--job-repeat", "2", "--dl-share", "0.5", "0.8", "--link-mbit", "50",
                 "--alpha", "0.4", "--switch-priority", "--json"]) == 0
    # every run: the flags, the bench's prefix and per-run settings, one policy; jit first, then none first
    expected = [("quick", TestbedOptions(policy=pol, prefix="jsb", link_mbit=50.0, alpha=0.4, dl_share=share,
                                         switch_priority=True, timeout_s=300.0, measure_slots=0))
                for share in (0.5, 0.8) for pol in ("jit", "none", "none", "jit")]
    assert runs == expected
    assert predicted == [("quick", 0, {"link_mbit": 50.0, "slot_s": 0.1, "alpha": 0.4, "job_order": None,
                                       "dl_share": share, "ingress_share": 0.98, "announce_files": False,
                                       "background_floor": BACKGROUND_FLOOR, "baselines": ()})
                         for share in (0.5, 0.8)]
    out = json.loads(capsys.readouterr().out)
    assert set(out["scenarios"]) == {"quick@0.5", "quick@0.8"}
    res = out["scenarios"]["quick@0.8"]
    assert (res["dl_share"], res["link_mbit"], res["alpha"], res["prefix"], res["switch_priority"]) == \
        (0.8, 50.0, 0.4, "jsb", True)
    assert "policy" not in res and res["median"]["jct_ratio_none_over_jit"] == 1.5


def test_baselines_run_in_every_repeat_beside_the_pair(monkeypatch, capsys):
    import jitsched.bench.bench_testbed as bt
    import jitsched.testbed.e2e as e2e

    order = []
    jct = {"jit": 2.0, "none": 3.0, "sincronia": 2.5}

    def fake_run(scenario, options, **overrides):
        pol = overrides["policy"]
        order.append(pol)
        return {"policy": pol, "jobs": 1, "completed": 1, "mean_jct_s": jct[pol], "lat_hit_rate": 1.0,
                "background_mbit_mean": {"jit": 40.0, "none": 50.0, "sincronia": 42.0}[pol],
                "background_slowdown_mean": 1.2, "background_completed": "1/1",
                # sincronia's second run lost an agent: said, and kept in its run's record
                "agents_failed": {"h1": "OSError: gone"} if pol == "sincronia" and order.count(pol) == 2 else {},
                "details": {"jct_s": {"lenet-0": jct[pol]}, "wall_s": 2.0, "daemon": {}, "agents": {},
                            "errors": {}, "background_contention": {}}}

    monkeypatch.setattr(e2e, "run_scenario", fake_run)
    asked = []

    def fake_predict(scenario, seed, baselines=(), **kw):
        asked.append(baselines)
        return _prediction(baselines)

    monkeypatch.setattr(bt, "predict", fake_predict)
    monkeypatch.setattr(bt, "require_daemon_side", lambda: None)
    assert bt.main(["--skip-enforcement", "--job-repeat", "2", "--baseline", "sincronia", "--json"]) == 0
    assert asked == [("sincronia",)]  # the simulator runs the baseline too
    # the same alternation as the pair: forwards, then backwards
    assert order == ["jit", "none", "sincronia", "sincronia", "none", "jit"]
    printed = capsys.readouterr()
    assert printed.err.count("AGENTS FAILED") == 1
    assert "quick repeat 1 sincronia: AGENTS FAILED, not this policy's figures: {'h1': 'OSError: gone'}" in printed.err
    res = json.loads(printed.out)["scenarios"]["quick"]
    assert [r["sincronia"]["agents_failed"] for r in res["runs"]] == [{}, {"h1": "OSError: gone"}]
    assert res["baselines"] == ["sincronia"]
    med = res["median"]
    assert med["jct_ratio_sincronia_over_jit"] == 1.25 and med["sincronia_mean_jct_s"] == 2.5
    assert med["sincronia_background_mbit_mean"] == 42.0 and med["jct_ratio_none_over_jit"] == 1.5
    # beside it, the simulator's sincronia on the same workload
    sim = res["simulator"]
    assert sim["jct_ratio_sincronia_over_jit"] == 1.5 and sim["sincronia_mean_jct_s"] == 1.5
    assert sim["background_mbit"] == {"jit": 45.0, "tensorflow": 45.0, "sincronia": 40.0}
    # without --baseline only the pair runs
    order.clear()
    assert bt.main(["--skip-enforcement", "--job-repeat", "1", "--json"]) == 0
    assert order == ["jit", "none"]
    assert "jct_ratio_sincronia_over_jit" not in json.loads(capsys.readouterr().out)["scenarios"]["quick"]["median"]


def test_figure_titles_say_when_the_files_were_announced():
    from jitsched.bench.bench_testbed import _options

    assert _options({"announce_files": True}) == "jit defaults, files announced"
    assert _options({"announce_files": False}) == "jit defaults"


def test_simulator_speedup_by_model_is_the_mean_per_job_speedup_as_on_the_testbed():
    # printed side by side with the testbed's (a mean of per-job JCT(none) / JCT(jit) over
    # each model's jobs), the simulator's per-model speed-up is the same statistic
    from jitsched.bench.bench_testbed import SIM_JIT, SIM_NONE, _paired, simulator_summary

    none = {"vgg16-0": 4.0, "vgg16-1": 30.0, "lenet-2": 1.0}
    jit = {"vgg16-0": 1.0, "vgg16-1": 20.0, "lenet-2": 1.0}

    def pol(jct):
        by = {"vgg16": (jct["vgg16-0"] + jct["vgg16-1"]) / 2, "lenet": jct["lenet-2"]}
        return {"mean_jct_s": sum(jct.values()) / 3, "jct_s": jct, "jct_by_model_s": by,
                "background_slowdown": None, "background_mbit_mean": None}

    pred = {SIM_JIT: pol(jit), SIM_NONE: pol(none), "jct_ratio_tf_over_jit": 35 / 22, "mean_speedup": 1.0}
    sim = simulator_summary(pred, ())
    bed = _paired({"mean_jct_s": 22 / 3, "details": {"jct_s": jit, "errors": {}}},
                  {"mean_jct_s": 35 / 3, "details": {"jct_s": none, "errors": {}}})
    assert bed["speedup_by_model"]["vgg16"] == pytest.approx((4.0 + 1.5) / 2)
    assert sim["speedup_by_model"] == pytest.approx(bed["speedup_by_model"])


def test_paired_jct_ratio_compares_the_jobs_both_runs_completed():
    # a job that failed in one run of a pair is out of both runs' means: the ratio of mean
    # JCTs compares the same jobs, as the per-job speed-ups beside it do
    from jitsched.bench.bench_testbed import _paired

    jit = {"details": {"jct_s": {"a-0": 1.0, "b-1": 2.0}, "errors": {"b-1": "runner failed"}}, "mean_jct_s": 1.0}
    none = {"details": {"jct_s": {"a-0": 2.0, "b-1": 10.0}, "errors": {}}, "mean_jct_s": 6.0}
    got = _paired(jit, none)
    assert got["mean_speedup"] == pytest.approx(2.0)
    assert got["jct_ratio_none_over_jit"] == pytest.approx(2.0)
