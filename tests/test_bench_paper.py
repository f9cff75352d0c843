"""Tests of ``python -m bench.paper``: a tiny end-to-end run, the dominance verdict, the paper-point calibration."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from jitsched.bench.paper import __main__ as bp
from jitsched.bench.paper import metrics as pm
from jitsched.bench.paper import spec

FILES = ("summary.md", "summary.json", "metrics.csv", "jct.csv", "remaining_bw.csv", "background.csv",
         "alpha_sweep.csv", "lp_time.csv", "fig5_speedup.png", "fig6_waiting.png", "fig7_arrival_vs_use.png",
         "fig8_remaining_bw_cdf.png", "fig9_background_slowdown.png", "fig10_alpha.png", "fig11_lp_time.png",
         "figP_pareto.png", "figL_load_sweep.png")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert bp.main(["--scale", "tiny", "--paper-load", "0.8", "--json", "--out", str(out)]) == 0
    return out, buf.getvalue()


def test_tiny_json_line(tiny_run):
    out, stdout = tiny_run
    lines = stdout.strip().splitlines()
    assert len(lines) == 1  # the markdown stays in the file
    d = json.loads(lines[0])
    assert d["scale"] == "tiny" and d["paper_load"] == 0.8
    assert set(d["points"]) == {"load0.5", "paper"}
    pols = bp.run_policies()
    assert pols[:len(spec.POLICIES)] == spec.POLICIES
    for pt in ("load0.5", "paper"):
        assert set(d["points"][pt]) == set(pols)
        for pol in pols:
            m = d["points"][pt][pol]
            for key in spec.JSON_METRICS:
                assert key in m
            assert m["speedup_mean"] > 0 and m["jct_mean_s"] > 0 and m["jct_p95_slowdown"] > 0
            assert 0 <= m["remaining_bw_p5"] <= m["remaining_bw_median"] <= 1
        assert d["points"][pt]["tensorflow"]["speedup_mean"] == pytest.approx(1.0)


def test_tiny_files_and_summary(tiny_run):
    out, _ = tiny_run
    for name in FILES:
        assert (out / name).stat().st_size > 0, name
    s = json.loads((out / "summary.json").read_text())
    assert s["paper_point"]["load"] == 0.8 and s["paper_point"]["source"] == "--paper-load"
    assert s["isolated_jct_host_check"] <= 1e-9  # a model's job alone: same JCT on other hosts
    md = (out / "summary.md").read_text()
    assert "jit dominates at load0.5: " in md and "jit dominates at paper: " in md
    assert "offered load 0.8" in md
    assert not (out / "paper_load.json").exists()  # --paper-load: no calibration


def metrics(**by_policy):
    base = {"speedup_mean": 1.0, "jct_mean_s": 5.0, "bg_slowdown_mean": 2.0,
            "remaining_bw_p5": 0.1, "remaining_bw_median": 0.5}
    return {pol: {**base, **kw} for pol, kw in by_policy.items()}


def test_dominance_yes():
    ms = metrics(tensorflow={}, tictac={"speedup_mean": 1.2}, sincronia={"jct_mean_s": 4.0}, varys={},
                 jit={"speedup_mean": 1.2, "jct_mean_s": 4.0, "bg_slowdown_mean": 1.9,
                      "remaining_bw_p5": 0.2, "remaining_bw_median": 0.6})
    assert pm.dominance_failures(ms) == []
    assert pm.dominance_line("paper", ms) == "jit dominates at paper: yes"


def test_dominance_no_names_metric_and_baseline():
    ms = metrics(tensorflow={}, tictac={"remaining_bw_median": 0.7}, sincronia={"speedup_mean": 1.5},
                 varys={"bg_slowdown_mean": 2.5},
                 jit={"speedup_mean": 1.4, "jct_mean_s": 4.0, "bg_slowdown_mean": 2.0,
                      "remaining_bw_p5": 0.2, "remaining_bw_median": 0.6})
    fails = pm.dominance_failures(ms)
    assert fails == [
        "speedup_mean 1.400 < sincronia 1.500",
        "bg_slowdown_mean 2.000 >= tensorflow 2.000",  # strictly lower is required
        "bg_slowdown_mean 2.000 >= tictac 2.000",
        "bg_slowdown_mean 2.000 >= sincronia 2.000",
        "remaining_bw_median 0.600 <= tictac 0.700",
    ]
    line = pm.dominance_line("load0.5", ms)
    assert line.startswith("jit dominates at load0.5: no (speedup_mean 1.400 < sincronia 1.500; ")


def test_dominance_missing_metric_fails():
    ms = metrics(tensorflow={}, tictac={}, sincronia={}, varys={},
                 jit={"speedup_mean": 2.0, "jct_mean_s": 1.0, "bg_slowdown_mean": None,
                      "remaining_bw_p5": 0.9, "remaining_bw_median": 0.9})
    assert pm.dominance_failures(ms) == [f"bg_slowdown_mean missing vs {b}" for b in spec.BASELINES]


def test_calibration_bisects_and_picks_closest():
    calls = []

    def slowdown(load, share):
        calls.append((load, share))
        return 1.0 + 1.5 * load  # 2.23 at load 0.82

    cal = bp.calibrate_paper_point("tiny", slowdown=slowdown)
    # 1.2 -> 2.8 and 0.5 -> 1.75 bracket the target; then 5 bisection steps
    assert [c[0] for c in calls] == pytest.approx([1.2, 0.5, 0.85, 0.675, 0.7625, 0.80625, 0.828125])
    assert all(c[1] == spec.DEFAULT_SHARE for c in calls)
    assert cal["load"] == pytest.approx(0.828125)  # |2.2422 - 2.23| beats 0.80625's |2.2094 - 2.23|
    assert cal["background_share"] == spec.DEFAULT_SHARE
    assert cal["tf_bg_slowdown"] == pytest.approx(1.0 + 1.5 * 0.828125)
    assert len(cal["evaluations"]) == spec.CALIBRATION_EVALS
    assert bp.calibrate_paper_load("tiny", slowdown=lambda load, share: 1.0 + 1.5 * load) == pytest.approx(0.828125)


def test_calibration_raises_share_when_top_load_falls_short():
    def slowdown(load, share):
        return 1.0 + 5.0 * load * share  # at share 0.2 the top load gives 2.2 < 2.23; 0.3 gives 2.8

    cal = bp.calibrate_paper_point("tiny", slowdown=slowdown)
    ev = cal["evaluations"]
    # flattened: pytest.approx compares flat sequences only
    assert [x for e in ev[:3] for x in e[:2]] == pytest.approx([1.2, 0.2, 1.2, 0.3, 0.5, 0.3])
    assert cal["background_share"] == pytest.approx(0.3)
    # the choice is the evaluation closest to the target
    assert abs(cal["tf_bg_slowdown"] - 2.23) == pytest.approx(min(abs(e[2] - 2.23) for e in ev))
    assert len(ev) == spec.CALIBRATION_EVALS


def test_calibration_never_reaching_target():
    cal = bp.calibrate_paper_point("tiny", slowdown=lambda load, share: 1.0 + share)
    assert [x for e in cal["evaluations"] for x in e[:2]] == pytest.approx(
        [1.2, 0.2, 1.2, 0.3, 1.2, 0.4, 1.2, 0.5])
    assert cal["background_share"] == pytest.approx(0.5) and cal["load"] == pytest.approx(1.2)


def test_select_calibration_ties_prefer_lower_share_and_load():
    ev = [(1.0, 0.3, 2.20), (0.9, 0.2, 2.26), (0.8, 0.2, 2.20)]
    assert bp.select_calibration(ev) == {"load": 0.8, "background_share": 0.2, "tf_bg_slowdown": 2.20}


def test_paper_point_cache(tmp_path):
    sc = spec.SCALES["tiny"]
    key = bp._calibration_key("tiny", sc, True)
    (tmp_path / "paper_load.json").write_text(json.dumps(
        {key: {"load": 0.93, "background_share": 0.2, "tf_bg_slowdown": 2.2}}))
    args = SimpleNamespace(paper_load=None, paper_share=0.2)
    p = bp.paper_point(args, "tiny", sc, True, tmp_path, executor=None)  # no executor: must not simulate
    assert p["load"] == 0.93 and p["source"].startswith("cached")
    p = bp.paper_point(SimpleNamespace(paper_load=0.7, paper_share=0.3), "tiny", sc, True, tmp_path, None)
    assert (p["load"], p["background_share"], p["source"]) == (0.7, 0.3, "--paper-load")


def test_calibration_runs_its_own_seeds_and_keys_the_cache_by_them():
    # more seeds at the main points must not move (or re-run) the paper point's calibration
    sc = dict(spec.SCALES["tiny"], seeds=(0, 1, 2), calibration_seeds=(0,))
    seen = []

    class Record:
        def map(self, fn, tasks):
            tasks = list(tasks)
            seen.extend(t["seed"] for t in tasks)
            return [{"bg_slowdown": [2.0]} for _ in tasks]

    assert bp.tf_bg_slowdown(sc, 0.5, 0.2, executor=Record(), real=False) == 2.0
    assert seen == [0]
    more = dict(sc, seeds=(0, 1, 2, 3, 4, 5))
    assert bp._calibration_key("tiny", more, True) == bp._calibration_key("tiny", sc, True)
    assert bp._calibration_key("tiny", dict(sc, calibration_seeds=(0, 1)), True) != bp._calibration_key(
        "tiny", sc, True)


def test_variant_names():
    assert bp.variant_name("jit", {}) == "jit"
    assert bp.variant_name("jit", {"bg_weight": 1.5}) == "jit[bg_weight=1.5]"
    assert bp.point_name(0.5) == "load0.5"


def test_unknown_knob_option_is_skipped_with_a_note(monkeypatch):
    monkeypatch.setattr(bp, "PARETO_KNOB", ("jit", "no_such_option", (1.0, 2.0)))
    runs, notes = bp.plan_runs(spec.SCALES["tiny"], {}, bp.run_policies())
    assert not any("no_such_option" in r[1] for r in runs)
    assert len([n for n in notes if "no_such_option" in n]) == 2
    # every policy still runs at both main points
    assert {(r[0], r[1]) for r in runs} >= {(pt, pol) for pt in spec.MAIN_POINTS for pol in bp.run_policies()}


def test_quick_scale_policy_order_at_load_half():
    """The CI-scale bench at load 0.5: the order of the policies the default-scale runs show.

    Simulations are deterministic (iteration budget, no wall clock), so these
    orders are exact results, not noisy measurements; measured values in the
    comments (seed 0, 20 hosts, 25 DL jobs).
    """
    sc = spec.SCALES["quick"]
    points = {"load0.5": {"load": 0.5, "share": spec.DEFAULT_SHARE}}
    pols = bp.run_policies()
    runs = [("load0.5", pol, pol, {}, sc["seeds"]) for pol in pols]
    real = bp.real_models_available()
    results = {}
    for task in bp.make_tasks(sc, points, runs, real):
        results[task["key"]] = bp.run_one(task)
    iso, _ = bp.isolated_jcts(sc["hosts"], real)
    m = {pol: pm.point_metrics(results, "load0.5", pol, sc["seeds"], iso) for pol in pols}
    speed = {p: m[p]["speedup_mean"] for p in pols}
    jct = {p: m[p]["jct_mean_s"] for p in pols}
    bg = {p: m[p]["bg_slowdown_mean"] for p in pols}
    # DL: jit at least as fast as every baseline, the paper's formulation well behind it
    assert speed["jit"] >= max(speed[b] for b in spec.BASELINES)  # 1.395 vs sincronia 1.394
    assert jct["jit"] <= min(jct[b] for b in spec.BASELINES)  # 3.96 s vs 4.01 s
    assert sorted(spec.BASELINES, key=jct.get) == ["sincronia", "varys", "tictac", "tensorflow"]
    assert speed["jit"] > speed["jit-paper"] > speed["tictac"] > speed["tensorflow"] == pytest.approx(1.0)
    # background: jit no worse than Sincronia (its 6 files never contend there), both well
    # ahead of the policies that let DL and files share or favour DL
    assert bg["jit"] <= bg["sincronia"] < min(bg["tensorflow"], bg["tictac"], bg["jit-paper"])
    # the remaining bandwidth where background wanted the port tells them apart
    cont = {p: m[p]["remaining_bw_contended_median"] for p in pols}
    assert cont["jit"] == pytest.approx(cont["sincronia"], rel=1e-9)  # 0.866: the same slots
    assert cont["sincronia"] > cont["tensorflow"] > cont["tictac"]


def test_figure_seed_labels():
    from jitsched.bench.common import seed_label

    assert seed_label((0, 1, 2, 3, 4, 5)) == "0-5"
    assert seed_label([0]) == "0" and seed_label([0, 1]) == "0,1" and seed_label([0, 2, 3]) == "0,2,3"


# ---------------------------------------------------------------------- the regime sweep


def test_regime_keys_and_confidence_intervals():
    from jitsched.bench.paper import regimes

    assert [regimes.rate_key(b) for b in regimes.RATES_BPS] == ["1e9", "1e10", "4e10", "1e11"]
    mean, half = regimes.ci95(np.array([1.0, 2.0, 3.0]))
    assert mean == pytest.approx(2.0) and half == pytest.approx(4.302653 * 1.0 / 3 ** 0.5, rel=1e-5)


def test_regime_summary_pairs_seeds_and_divides_by_the_bound():
    from jitsched.bench.paper import regimes

    runs = [{"bps": 1e9, "seed": s, "bound": 1.0,
             "jct": {"tensorflow": [4.0, 4.0], "jit": [2.0, 2.0 + s], "sincronia": [3.0, 3.0]}}
            for s in range(3)]
    row = regimes.summarize(runs, ("tensorflow", "jit", "sincronia"), "tensorflow", "jit")["1e9"]
    assert row["jit"]["jct_mean_s"] == pytest.approx(np.mean([2.0, 2.5, 3.0]))
    assert row["jit"]["over_bound"] == pytest.approx(2.5)
    assert row["tensorflow"]["speedup_mean"] == pytest.approx(1.0)
    # sincronia against jit per seed: 3/2, 3/2.5, 3/3 -> +50 %, +20 %, 0 %
    assert row["sincronia"]["vs_jit"] == pytest.approx(np.mean([0.5, 0.2, 0.0]))
    assert row["seeds"] == [0, 1, 2] and row["bound_mean_jct_s"] == 1.0


def test_regime_figure_labels_each_bar_with_its_percent_above_the_bound(tmp_path, monkeypatch):
    import matplotlib.axes

    from jitsched.bench.paper import regimes

    runs = [{"bps": 1e9, "seed": s, "bound": 2.0, "jct": {"sincronia": [2.2, 2.2], "jit": [2.05, 2.05]}}
            for s in range(12)]
    summary = regimes.summarize(runs, ("sincronia", "jit"), "sincronia", "jit")
    labels, titles = [], []
    real_label, real_title = matplotlib.axes.Axes.bar_label, matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "bar_label",
                        lambda ax, bars, texts, **k: labels.append(list(texts)) or real_label(ax, bars, texts, **k))
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda ax, text, **k: titles.append(text) or real_title(ax, text, **k))
    regimes.figure(summary, ("sincronia", "jit"), tmp_path / "r.png")
    assert labels == [["10.0"], ["2.5"]]
    assert titles and titles[0].endswith("seeds 0-11 (12 per rate)")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_a_regime_run_is_never_under_its_bound(monkeypatch):
    from jitsched.bench.paper import regimes

    monkeypatch.setattr(regimes, "N_JOBS", 6)
    monkeypatch.setattr(regimes, "N_HOSTS", 4)
    r = regimes.run_regime((1e10, 0, ("tensorflow", "jit")))
    assert 0 < r["bound"] <= min(np.mean(v) for v in r["jct"].values()) * (1 + 1e-9)


def test_mixed_point_json_line_reports_every_policy_against_the_bound(tmp_path, capsys):
    assert bp.main(["--mixed", "--mixed-seeds", "1", "--mixed-jobs", "12", "--mixed-models", "lenet,alexnet",
                    "--json", "--out", str(tmp_path), "--workers", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])["mixed"]
    assert json.loads((tmp_path / "mixed.json").read_text())["mixed"] == d
    assert "--shape mixed --workers 4 --servers 2" in d["workload"]
    assert sum(d["jobs_by_shape"].values()) > 0 and d["bound_mean_jct_s"] > 0
    for pol in bp.run_policies():
        m = d[pol]
        assert m["over_bound"] >= 1 - 1e-9 and m["jct_mean_s"] > 0 and m["speedup_mean"] > 0
        assert m["jct_mean_s"] == pytest.approx(m["over_bound"] * d["bound_mean_jct_s"])  # one seed
    assert d["tensorflow"]["speedup_mean"] == pytest.approx(1.0)


def test_mixed_summary_splits_the_jcts_by_shape():
    from jitsched.bench.paper import mixed

    runs = [{"seed": s, "bound": 1.0, "shape": ["ps", "allreduce", "allreduce"],
             "jct": {"tensorflow": [4.0, 2.0, 2.0], "jit": [2.0, 1.0, 1.0 + s]}} for s in range(2)]
    d = mixed.summarize(runs, ("tensorflow", "jit"), "tensorflow")
    assert d["jit"]["jct_mean_s_by_shape"] == {"ps": 2.0, "ps-sharded": None, "allreduce": pytest.approx(1.25)}
    assert d["jit"]["over_bound"] == pytest.approx(np.mean([4 / 3, 5 / 3]))
    assert d["jit"]["speedup_mean"] == pytest.approx(np.mean([2.0, np.mean([2, 2, 1])]))
    assert d["jobs_by_shape"] == {"ps": 2, "ps-sharded": 0, "allreduce": 4}


def test_the_regime_sweep_runs_the_seeds_it_is_given(tmp_path, monkeypatch):
    # --regime-first-seed S --regime-seeds N: seeds S .. S+N-1 at every rate (other workloads
    # than the default's, to check a figure on seeds it was not chosen on)
    from jitsched.bench.paper import regimes

    asked = []

    def sweep(ex, seeds, policies, progress=None):
        asked.append(list(seeds))
        raise KeyboardInterrupt  # stop before any workload runs

    monkeypatch.setattr(regimes, "sweep", sweep)
    with pytest.raises(KeyboardInterrupt):
        bp.main(["--regimes", "--regime-seeds", "3", "--regime-first-seed", "40", "--out", str(tmp_path)])
    assert asked == [[40, 41, 42]]
    with pytest.raises(SystemExit):
        bp.main(["--regimes", "--regime-first-seed", "-1", "--out", str(tmp_path)])


def test_regime_over_bound_is_the_mean_over_the_seeds_of_each_seeds_ratio():
    # each seed's mean JCT over its own bound, then the mean over the seeds (every workload
    # weighs alike), not the mean JCT over the mean bound (3.5 / 2.0 here)
    from jitsched.bench.paper import regimes

    runs = [{"bps": 1e10, "seed": 0, "bound": 1.0, "jct": {"jit": [1.0, 1.0]}},
            {"bps": 1e10, "seed": 1, "bound": 3.0, "jct": {"jit": [6.0, 6.0]}}]
    row = regimes.summarize(runs, ("jit",), "jit", "jit")["1e10"]
    assert row["jit"]["jct_mean_s"] == pytest.approx(3.5) and row["bound_mean_jct_s"] == pytest.approx(2.0)
    assert row["jit"]["over_bound"] == pytest.approx((1.0 / 1.0 + 6.0 / 3.0) / 2)


def test_mixed_over_bound_is_the_mean_over_the_seeds_of_each_seeds_ratio():
    from jitsched.bench.paper import mixed

    runs = [{"seed": 0, "bound": 1.0, "shape": ["ps"], "jct": {"jit": [1.0]}},
            {"seed": 1, "bound": 3.0, "shape": ["ps"], "jct": {"jit": [6.0]}}]
    d = mixed.summarize(runs, ("jit",), "jit")
    assert d["jit"]["over_bound"] == pytest.approx(1.5)


def test_regimes_json_line_maps_each_rate_to_its_policies_only(tmp_path, monkeypatch, capsys):
    # {"regimes": {"1e9": {policy: {"jct_mean_s", "speedup_mean", "over_bound", ...}}, ...}}:
    # every key under a rate is a policy; the bound and the seeds are reported beside
    from jitsched.bench.paper import regimes

    pols = bp.run_policies()

    def sweep(ex, seeds, policies, progress=None):
        return [{"bps": b, "seed": s, "bound": 1.0, "jct": {p: [2.0, 2.0 + s] for p in policies}}
                for b in regimes.RATES_BPS for s in seeds]

    monkeypatch.setattr(regimes, "sweep", sweep)
    assert bp.main(["--regimes", "--regime-seeds", "2", "--json", "--out", str(tmp_path), "--workers", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    d = json.loads(lines[0])
    assert list(d["regimes"]) == ["1e9", "1e10", "4e10", "1e11"]
    for row in d["regimes"].values():
        assert set(row) == set(pols)
        for m in row.values():
            assert {"jct_mean_s", "speedup_mean", "over_bound"} <= set(m)
    assert d["bound_mean_jct_s"]["1e9"] == 1.0 and d["seeds"] == [0, 1]
