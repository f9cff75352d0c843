"""Real enforcement and JIT vs plain TCP on the emulated cluster, medians of repeated runs, beside the fluid simulator's prediction.

Needs root and network namespaces. First the tc backend alone: each repeat
builds a fresh 2-host testbed, drives the backend with a random per-slot
schedule (3 scheduled flows + 1 unscheduled background flow, host 0 ->
host 1), measures per-slot rate accuracy and rate-change latency, and tears
it down.

Then, per scenario (:data:`jitsched.testbed.scenario.SCENARIOS`: the paper's
model DAGs and file transfers, bytes scaled to the link rate), ``jitsched
testbed run`` under ``jit`` (daemon + tc agents) and ``none`` (plain TCP
sharing, the TensorFlow baseline) on the same seed, alternating which goes
first. Per run: mean JCT, LAT hit rate, background goodput; per repeat the
JCT ratio none / jit (> 1: JIT faster) and the mean per-job speedup. The
fluid simulator runs the same workload under ``tensorflow`` (ideal max-min
fair sharing) and ``jit``: its ratio is what the policy could attain on an
ideal network, next to what the testbed measured.

The run flags (``--link-mbit``, ``--alpha``, ``--dl-share``...) are
:class:`jitsched.testbed.options.TestbedOptions`' fields, the same as
``jitsched testbed run``'s; ``--link-mbit`` sets the enforcement testbeds'
and the runs' link rate (default: 100 Mbit/s, the scenarios'). Several
``--dl-share`` values: one set of pairs each.

``--figure PATH`` draws each scenario's per-job JCTs (testbed medians beside
the simulator's) to a PNG, ``--policies PATH`` its mean JCT and files'
goodput per policy (jit, the ``--baseline`` policies, none); ``--replot
FILE.json`` redraws them from a saved ``--json`` output without running
anything.
"""

# One module although past 500 lines: its runs, its medians and the figures
# drawn from them share one result dictionary and one command line.

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from jitsched import testbed
from jitsched.bench.common import policy_default, pyplot, require_matplotlib
from jitsched.errors import ValidationError
from jitsched.testbed import DEFAULT_LINK_MBIT
from jitsched.testbed.measure import measure_enforcement, summarize
from jitsched.testbed.options import (
    BASELINES,
    DAEMON_POLICY,
    MeasureOptions,
    TestbedOptions,
    add_options,
    flag_fields,
    options_from_args,
)
from jitsched.testbed.scenario import SCENARIOS, predict, require_daemon_side

GOALS = {"rate_accuracy_p50": "within ±3 %", "rate_accuracy_p5": "within ±10 %",
         "rate_change_latency_ms_p50": "< 5 ms after the slot boundary",
         "jct_ratio_none_over_jit": ">= 1.3 with background present",
         "background": "JIT's files >= the simulator's fair sharing (tensorflow)"}
# The option flags whose defaults differ from jitsched testbed's: the bench's own
# namespaces, so that it never tears down a testbed the CLI left up under js, and
# longer enforcement measurements. Every scenario runs under each testbed policy,
# so --policy is not a flag; --dl-share takes several values, one set of pairs each.
MEASURE_DEFAULTS = {"slots": 40}
RUN_DEFAULTS = {"prefix": "jsb"}
RUN_EXCLUDE = ("policy",)
SWEEP = ("dl_share",)
# every run's: paper-mini's jobs need longer than the CLI's 120 s, and enforcement
# is measured apart, on fresh testbeds, rather than before each run
RUN_OVERRIDES = {"timeout_s": 300.0, "measure_slots": 0}
# the simulator's counterpart of each testbed policy (jitsched.testbed.scenario.predict):
# the jit policy for jit, the reference (tensorflow) for none
# the bench pairs jit with plain TCP; --baseline adds the other enforced policies
PAIR = ("jit", "none")
SIM_JIT, SIM_NONE = DAEMON_POLICY["jit"], DAEMON_POLICY["none"]
SIM_POLICIES = (SIM_JIT, SIM_NONE)
RUN_KEYS = ("mean_jct_s", "completed", "jobs", "lat_hit_rate", "background_mbit_mean",
            "background_slowdown_mean", "background_completed", "agents_failed")


def _f(x, spec: float) -> str:
    """``x`` formatted as ``{x:<spec>f}``, or ``-`` for None."""
    return "-" if x is None else format(x, f"{spec}f")


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _paired(jit: dict, none: dict) -> dict:
    """JCT ratio of one jit/none pair, mean per-job speedup and per-model mean speedups, all
    over the jobs both runs completed."""
    jj, nj = jit["details"]["jct_s"], none["details"]["jct_s"]
    both = [j for j in jj if j in nj and jj[j] > 0 and j not in jit["details"]["errors"]
            and j not in none["details"]["errors"]]
    by_model: dict[str, list[float]] = {}
    for j in both:
        by_model.setdefault(j.rsplit("-", 1)[0], []).append(nj[j] / jj[j])
    # the two runs' mean JCTs over the same jobs: a job lost in one run leaves both means
    a = statistics.fmean(jj[j] for j in both) if both else None
    b = statistics.fmean(nj[j] for j in both) if both else None
    return {"jct_ratio_none_over_jit": b / a if a and b else None,
            "mean_speedup": statistics.fmean(nj[j] / jj[j] for j in both) if both else None,
            "speedup_by_model": {m: statistics.fmean(v) for m, v in sorted(by_model.items())}}


def run_jobs(scenario: str, options: TestbedOptions, repeat: int, say, baselines: tuple[str, ...] = ()) -> dict:
    """``repeat`` pairs of runs of ``scenario``, one under each testbed policy, plus the simulator's prediction.

    Parameters
    ----------
    scenario : str
        A key of :data:`jitsched.testbed.scenario.SCENARIOS`.
    options : TestbedOptions
        Every run's, but for the policy; the jit settings reach the daemon of
        the jit runs and the simulator's jit
        (:func:`jitsched.testbed.e2e.run_scenario`, :func:`jitsched.testbed.scenario.predict`).
    repeat : int
        Pairs; the first policy alternates.
    say : callable
        Takes each progress line.
    baselines : tuple of str
        Other testbed policies (``sincronia``) run in every repeat beside the
        pair, in the same alternating order; their medians join ``median``
        with ``jct_ratio_<policy>_over_jit``.

    Returns
    -------
    dict
        ``scenario``, ``repeat``, every option flag's value but the policy's,
        ``median`` (over the pairs), ``simulator`` and ``runs``.
    """
    from jitsched.testbed.e2e import run_scenario

    t = time.perf_counter()
    pred = predict(scenario, options.seed, **options.prediction_options(), baselines=tuple(baselines))
    sim_pols = SIM_POLICIES + tuple(DAEMON_POLICY[b] for b in baselines)
    say(f"{scenario}: simulator " + ", ".join(f"{p} {pred[p]['mean_jct_s']:.2f} s" for p in sim_pols)
        + f", ratio {pred['jct_ratio_tf_over_jit']:.3f} ({time.perf_counter() - t:.0f} s)")
    runs = []
    pols = PAIR + tuple(baselines)
    for r in range(repeat):
        order = pols if r % 2 == 0 else pols[::-1]
        res = {}
        for pol in order:
            t = time.perf_counter()
            res[pol] = run_scenario(scenario, options, policy=pol)
            say(f"{scenario} repeat {r} {pol}: mean JCT {res[pol]['mean_jct_s']}, "
                f"{res[pol]['completed']}/{res[pol]['jobs']} jobs, "
                f"background {res[pol]['background_mbit_mean']} Mbit/s ({time.perf_counter() - t:.0f} s)")
            if res[pol].get("agents_failed"):
                say(f"{scenario} repeat {r} {pol}: AGENTS FAILED, not this policy's figures: "
                    f"{res[pol]['agents_failed']}")
        runs.append({**{pol: {k: res[pol][k] for k in RUN_KEYS}
                        | {"jct_s": res[pol]["details"]["jct_s"], "wall_s": res[pol]["details"]["wall_s"],
                           "daemon": res[pol]["details"]["daemon"], "agents": res[pol]["details"]["agents"],
                           "errors": res[pol]["details"]["errors"],
                           "background_contention": res[pol]["details"]["background_contention"]}
                        for pol in order},
                     **_paired(res["jit"], res["none"])})
    models = sorted({m for x in runs for m in x["speedup_by_model"]})
    med = {"jct_ratio_none_over_jit": _median(x["jct_ratio_none_over_jit"] for x in runs),
           "mean_speedup": _median(x["mean_speedup"] for x in runs),
           "speedup_by_model": {m: _median(x["speedup_by_model"].get(m) for x in runs) for m in models}}
    for pol in pols:
        for k in ("mean_jct_s", "lat_hit_rate", "background_mbit_mean", "background_slowdown_mean"):
            med[f"{pol}_{k}"] = _median(x[pol][k] for x in runs)
        # DL bytes that crossed the files' ports while they moved: what the files gave up
        for side in ("egress", "ingress"):
            med[f"{pol}_background_{side}_dl_mb"] = _median(
                sum(c[f"{side}_dl_mb"] for c in x[pol]["background_contention"].values()) for x in runs)
    for pol in baselines:
        med[f"jct_ratio_{pol}_over_jit"] = _median(x[pol]["mean_jct_s"] / x["jit"]["mean_jct_s"]
                                                   if x[pol]["mean_jct_s"] and x["jit"]["mean_jct_s"] else None
                                                   for x in runs)
    # how late the agents' tc changes landed after their slot boundaries during the jit runs
    med["jit_apply_late_ms_p50"] = _median(a.get("apply_late_ms_p50") for x in runs
                                           for a in x["jit"]["agents"].values())
    med["jit_apply_late_ms_p95"] = _median(a.get("apply_late_ms_p95") for x in runs
                                           for a in x["jit"]["agents"].values())
    settings = {f.name: getattr(options, f.name) for f in flag_fields(TestbedOptions) if f.name not in RUN_EXCLUDE}
    return {"scenario": scenario, "repeat": repeat, **settings, "baselines": list(baselines), "median": med,
            "simulator": simulator_summary(pred, baselines), "runs": runs}


def simulator_summary(pred: dict, baselines: tuple[str, ...] | list[str]) -> dict:
    """A scenario's ``simulator`` entry: what :func:`predict` (``pred``, with ``baselines``) expects.

    Returns
    -------
    dict
        Ratios and mean JCTs (s) of jit, fair sharing and each baseline, jit's speed-up by
        model, the files' slowdown and goodput (Mbit/s) and every job's JCT (s) per policy.
    """
    sim_pols = SIM_POLICIES + tuple(DAEMON_POLICY[b] for b in baselines)
    # per model the mean per-job speed-up, as the testbed's (_paired) beside which it is printed
    tf_jct, jit_jct = pred[SIM_NONE]["jct_s"], pred[SIM_JIT]["jct_s"]
    per_model: dict[str, list[float]] = {}
    for j, x in jit_jct.items():
        if x > 0 and j in tf_jct:
            per_model.setdefault(j.rsplit("-", 1)[0], []).append(tf_jct[j] / x)
    sim_by_model = {m: statistics.fmean(v) for m, v in sorted(per_model.items())}
    return {"jct_ratio_tf_over_jit": pred["jct_ratio_tf_over_jit"],
            "mean_speedup": pred["mean_speedup"],
            "tensorflow_mean_jct_s": pred[SIM_NONE]["mean_jct_s"],
            "jit_mean_jct_s": pred[SIM_JIT]["mean_jct_s"],
            "speedup_by_model": sim_by_model,
            **{f"{b}_mean_jct_s": pred[DAEMON_POLICY[b]]["mean_jct_s"] for b in baselines},
            **{f"jct_ratio_{b}_over_jit": pred[DAEMON_POLICY[b]]["mean_jct_s"]
               / pred[SIM_JIT]["mean_jct_s"] for b in baselines},
            "background_slowdown": {p: pred[p]["background_slowdown"] for p in sim_pols},
            "background_mbit": {p: pred[p]["background_mbit_mean"] for p in sim_pols},
            "jct_s": {p: pred[p]["jct_s"] for p in sim_pols}}


def plot_jobs(result: dict, path: str) -> None:
    """Per-job JCT bars of one scenario: testbed none and jit (medians over the pairs), simulator
    tensorflow and jit, with the files' mean goodput in the legend.

    Parameters
    ----------
    result : dict
        One scenario of the ``--json`` output (:func:`run_jobs`).
    path : str
        PNG file to write.
    """
    import numpy as np

    plt = pyplot()

    sim = result["simulator"]["jct_s"]
    jobs = sorted(sim[SIM_JIT], key=lambda j: sim[SIM_NONE][j])
    med = result["median"]

    def testbed_median(pol: str) -> list[float]:
        return [_median(r[pol]["jct_s"].get(j) for r in result["runs"]) or np.nan for j in jobs]

    series = [
        (f"testbed none (plain TCP), files {_f(med['none_background_mbit_mean'], 0.1)} Mbit/s",
         testbed_median("none"), "#bbbbbb"),
        (f"testbed jit, files {_f(med['jit_background_mbit_mean'], 0.1)} Mbit/s",
         testbed_median("jit"), "#1f77b4"),
        (f"simulator {SIM_NONE} (fair sharing)", [sim[SIM_NONE][j] for j in jobs], "#e0e0e0"),
        (f"simulator {SIM_JIT}", [sim[SIM_JIT][j] for j in jobs], "#aec7e8"),
    ]
    x = np.arange(len(jobs))
    w = 0.2
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(jobs) + 2), 3.8))
    for k, (label, ys, color) in enumerate(series):
        ax.bar(x + (k - 1.5) * w, ys, w, label=label, color=color, edgecolor="black", linewidth=0.4)
    ax.set_xticks(x, jobs, rotation=20, ha="right")
    ax.set_ylabel("JCT (s)")
    ax.set_title(f"{result['scenario']}, seed {result['seed']}, {result['repeat']} pairs; {_options(result)}\n"
                 f"JCT ratio none/jit {_f(med['jct_ratio_none_over_jit'], 0.3)}, "
                 f"simulator {result['simulator']['jct_ratio_tf_over_jit']:.3f}", fontsize=9)
    _save(fig, ax, path)


def policy_figures(result: dict) -> dict[str, dict[str, tuple[list, object, object]]]:
    """Per policy, the mean JCTs and files' goodputs a :func:`plot_policies` figure draws.

    Returns
    -------
    dict
        ``{"jct": {policy: (runs, median, simulator)}, "files": {...}}``: the
        testbed's per-run values (seconds; Mbit/s), their median and the
        simulator's value for the same workload (None where it has none),
        policies in the order jit, the baselines, none.
    """
    sim = result["simulator"]
    pols = ["jit", *result.get("baselines", []), "none"]
    out: dict = {"jct": {}, "files": {}}
    for pol in pols:
        sp = DAEMON_POLICY[pol]
        sim_jct = sim.get("jct_s", {}).get(sp)
        for what, key, sim_value in (
                ("jct", "mean_jct_s", sum(sim_jct.values()) / len(sim_jct) if sim_jct else None),
                ("files", "background_mbit_mean", sim.get("background_mbit", {}).get(sp))):
            runs = [r[pol][key] for r in result["runs"] if r.get(pol, {}).get(key) is not None]
            out[what][pol] = (runs, result["median"].get(f"{pol}_{key}"), sim_value)
    return out


def plot_policies(result: dict, path: str) -> None:
    """One scenario's mean JCT and files' goodput per policy: testbed medians and runs beside the simulator.

    Parameters
    ----------
    result : dict
        One scenario of the ``--json`` output (:func:`run_jobs`), with its ``--baseline`` runs.
    path : str
        PNG file to write.
    """
    import numpy as np

    plt = pyplot()
    data = policy_figures(result)
    pols = list(data["jct"])
    x = np.arange(len(pols))
    fig, axes = plt.subplots(1, 2, figsize=(max(7.0, 1.6 * len(pols) + 3), 3.8))
    for ax, what, unit in ((axes[0], "jct", "mean JCT (s)"), (axes[1], "files", "files' mean goodput (Mbit/s)")):
        runs, med, sim = zip(*(data[what][p] for p in pols), strict=True)
        ax.bar(x - 0.2, [np.nan if m is None else m for m in med], 0.4, color="#1f77b4", edgecolor="black",
               linewidth=0.4, label="testbed (median)")
        for k, ys in enumerate(runs):
            ax.plot([x[k] - 0.2] * len(ys), ys, "k.", markersize=4, label="testbed runs" if k == 0 else None)
        ax.bar(x + 0.2, [np.nan if v is None else v for v in sim], 0.4, color="#aec7e8", edgecolor="black",
               linewidth=0.4, label="simulator")
        ax.set_xticks(x, [p if p != "none" else "none (plain TCP)" for p in pols], rotation=15)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7, frameon=False)
    fig.suptitle(f"{result['scenario']}, seed {result['seed']}, {result['repeat']} repeats; {_options(result)}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _options(result: dict, share: bool = True) -> str:
    """The jit options of a :func:`run_jobs` result, as a figure title shows them."""
    opts = ", ".join(f"{name} {result[key]}" for key, name in (("alpha", "alpha"), ("job_order", "job order"))
                     if result.get(key) is not None) or "jit defaults"
    if share and _dl_share(result) != _default_dl_share():
        opts += f", DL share {_dl_share(result):g}"
    if result.get("ingress") is False:
        opts += ", egress only"
    if result.get("drift_s") is not None:
        opts += f", drift re-plans at {result['drift_s']} s"
    if result.get("early_s") is not None:
        opts += f", early re-plans at {result['early_s']} s"
    if result.get("planning") is not None:
        opts += f", {result['planning']} planning"
    if result.get("max_planner_duty") is not None:
        opts += f", planner duty {result['max_planner_duty']}"
    if result.get("spare", "background") != "background":
        opts += f", spare {result['spare']}"
    if result.get("announce_files"):
        opts += ", files announced"
    return opts


def _default_dl_share() -> float:
    """What a run's DL share is when none is set: the jit policy's own default (read from
    the registered policy's options when asked, so that ``--help`` does not import the
    policies)."""
    return policy_default(SIM_JIT, "dl_share")


def _dl_share(result: dict) -> float:
    """The DL share of a :func:`run_jobs` result: the one set, or the jit policy's default."""
    share = result.get("dl_share")
    return _default_dl_share() if share is None else share


def _save(fig, ax, path: str) -> None:
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)


def plot_tradeoff(results: list[dict], path: str) -> None:
    """One scenario's JCT ratio none/jit against the files' mean goodput, a point per DL share.

    Testbed medians (jit points labelled with their ``dl_share``), none's
    goodput as a vertical line, the simulator's jit beside its tensorflow,
    and the issue's goal region (ratio >= 1.3, goodput >= none's) shaded.

    Parameters
    ----------
    results : list of dict
        :func:`run_jobs` outputs of one scenario and seed (one per DL share).
    path : str
        PNG file to write.
    """
    plt = pyplot()
    results = sorted(results, key=_dl_share)
    none_mbit = _median(r["median"]["none_background_mbit_mean"] for r in results)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [r["median"]["jit_background_mbit_mean"] for r in results]
    ys = [r["median"]["jct_ratio_none_over_jit"] for r in results]
    ax.plot(xs, ys, "o-", color="#d62728", label="testbed jit (median of pairs)")
    for r, x, y in zip(results, xs, ys, strict=True):
        if x is not None and y is not None:
            ax.annotate(f"DL share {_dl_share(r):g}", (x, y), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
    sx = [r["simulator"].get("background_mbit", {}).get(SIM_JIT) for r in results]
    sy = [r["simulator"]["jct_ratio_tf_over_jit"] for r in results]
    if all(v is not None for v in sx):
        ax.plot(sx, sy, "s--", color="#aec7e8", label=f"simulator {SIM_JIT} vs {SIM_NONE}")
        # the same files under fair sharing whatever the DL share: one point
        tf = results[0]["simulator"]["background_mbit"].get(SIM_NONE)
        if tf is not None:
            ax.plot([tf], [1.0], "D", color="#aec7e8", markeredgecolor="black", markeredgewidth=0.4,
                    label=f"simulator {SIM_NONE}")
    if none_mbit is not None:
        ax.axvline(none_mbit, color="#1f77b4", linestyle=":", label=f"testbed none: {none_mbit:.1f} Mbit/s")
        x_hi = max([v for v in xs + sx + [none_mbit] if v is not None]) * 1.1
        y_hi = max([v for v in ys + sy + [1.3] if v is not None]) * 1.1
        ax.fill_between([none_mbit, x_hi], 1.3, y_hi, color="#2ca02c", alpha=0.12,
                        label="goal: ratio >= 1.3 and files >= none")
        ax.set_xlim(right=x_hi)
        ax.set_ylim(top=y_hi)
    ax.axhline(1.0, color="grey", linewidth=0.6)
    ax.set_xlabel("files' mean goodput (Mbit/s)")
    ax.set_ylabel("mean JCT none / jit")
    r0 = results[0]
    ax.set_title(f"{r0['scenario']}, seed {r0['seed']}: DL speed-up against background goodput\n"
                 f"{_options(r0, share=False)}", fontsize=9)
    _save(fig, ax, path)


def _draw(results: dict, figure: str | None, tradeoff: str | None, say, policies: str | None = None) -> None:
    # --figure, --policies: one per result; --tradeoff: one per scenario, over its DL shares
    for path, plot in ((figure, plot_jobs), (policies, plot_policies)):
        if path:
            for name, res in results.items():
                plot(res, _figure_path(path, name, len(results)))
                say(f"wrote {_figure_path(path, name, len(results))}")
    if tradeoff:
        by_scenario: dict[str, list[dict]] = {}
        for res in results.values():
            by_scenario.setdefault(res["scenario"], []).append(res)
        for name, group in by_scenario.items():
            plot_tradeoff(group, _figure_path(tradeoff, name, len(by_scenario)))
            say(f"wrote {_figure_path(tradeoff, name, len(by_scenario))}")


def _figure_path(path: str, scenario: str, n: int) -> str:
    # one scenario: the path as given; several: the scenario's name before the suffix
    if n == 1:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}-{scenario}.{ext}" if dot else f"{path}-{scenario}"


def build_parser() -> argparse.ArgumentParser:
    """The bench's flags: its own, and the option classes' (as ``jitsched testbed``'s, but for the policy)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="enforcement measurements (default 5)")
    p.add_argument("--skip-enforcement", action="store_true")
    add_options(p, MeasureOptions, defaults=MEASURE_DEFAULTS)
    p.add_argument("--scenario", nargs="+", choices=tuple(SCENARIOS), default=["quick"],
                   help="workloads to run (default quick)")
    p.add_argument("--job-repeat", type=int, default=3, help="jit/none pairs per scenario (default 3)")
    p.add_argument("--baseline", nargs="+", default=[], choices=BASELINES,
                   help="also run these testbed policies in every repeat (their ranks through the same "
                        "agents), for their JCT ratio to jit")
    add_options(p, TestbedOptions, exclude=RUN_EXCLUDE, defaults=RUN_DEFAULTS, many=SWEEP)
    p.add_argument("--tradeoff", metavar="PATH.png",
                   help="draw each scenario's JCT ratio against the files' goodput, one point per "
                        "--dl-share, beside none's goodput and the simulator's curve")
    p.add_argument("--figure", metavar="PATH.png",
                   help="draw each scenario's per-job JCTs (testbed and simulator) to this PNG")
    p.add_argument("--policies", metavar="PATH.png",
                   help="draw each scenario's mean JCT and files' goodput per policy (jit, the --baseline "
                        "policies, none), testbed runs beside the simulator, to this PNG")
    p.add_argument("--replot", metavar="FILE.json",
                   help="only redraw --figure / --policies / --tradeoff from a saved --json output (runs nothing)")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.figure or a.tradeoff or a.policies:
        try:
            require_matplotlib()  # drawn after the runs: say now, not after them, if it cannot be
        except ImportError as exc:
            p.error(str(exc))
    if a.replot:
        if not (a.figure or a.tradeoff or a.policies):
            p.error("--replot needs --figure, --policies or --tradeoff")
        try:
            with open(a.replot) as fh:
                saved = json.load(fh)
            drawn = {k: v for k, v in saved["scenarios"].items() if isinstance(v, dict)}
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            p.error(f"--replot {a.replot}: not a bench_testbed --json output ({exc})")
        _draw(drawn, a.figure, a.tradeoff, print, a.policies)
        return 0
    try:  # every run's options checked before anything runs
        measure = options_from_args(a, MeasureOptions)
        sweep = [options_from_args(a, TestbedOptions, dl_share=share, **RUN_OVERRIDES) for share in a.dl_share]
    except ValidationError as exc:
        p.error(str(exc))
    link_mbit = a.link_mbit or DEFAULT_LINK_MBIT

    def say(msg: str) -> None:
        print(msg, file=sys.stderr if a.json else sys.stdout, flush=True)

    med: dict = {}
    if not a.skip_enforcement:
        runs = []
        for r in range(a.repeat):
            tb = testbed.up(2, link_mbit, prefix=a.prefix)
            try:
                runs.append(summarize(measure_enforcement(tb, slot_s=measure.slot_s, n_slots=measure.slots,
                                                          seed=r)))
            finally:
                testbed.down(a.prefix)
        med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    try:
        require_daemon_side()
    except testbed.TestbedError as exc:
        scenarios: dict = {"unavailable": str(exc)}
    else:
        # one share: results under the scenario's name; several: "<scenario>@<share>"
        scenarios = {(s if len(sweep) == 1 else f"{s}@{o.dl_share:g}"):
                     run_jobs(s, o, a.job_repeat, say, tuple(dict.fromkeys(a.baseline)))
                     for s in a.scenario for o in sweep}
    out = {"link_mbit": link_mbit, "slot_s": measure.slot_s, "slots": measure.slots, "repeat": a.repeat,
           "median": med, "scenarios": scenarios, "goals": GOALS}
    _draw({k: v for k, v in scenarios.items() if isinstance(v, dict)}, a.figure, a.tradeoff, say, a.policies)
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    if med:
        print(f"tc enforcement, {link_mbit:g} Mbit/s links, {measure.slots} slots of {measure.slot_s * 1e3:g} ms, "
              f"median of {a.repeat} runs")
        for k, v in med.items():
            print(f"  {k:<30} {v:10.4f}   {GOALS.get(k, '')}")
    for name, s in scenarios.items():
        if not isinstance(s, dict):
            print(f"{name}: {s}")
            continue
        m, sim = s["median"], s["simulator"]
        print(f"{name}, seed {s['seed']}, DL share {_dl_share(s):g}, median of {s['repeat']} jit/none pairs "
              f"(simulator: tensorflow vs jit, same workload)")
        print(f"  {'JCT ratio none/jit':<28} {m['jct_ratio_none_over_jit']:8.3f}   simulator "
              f"{sim['jct_ratio_tf_over_jit']:.3f}   goal {GOALS['jct_ratio_none_over_jit']}")
        print(f"  {'mean per-job speedup':<28} {m['mean_speedup']:8.3f}   simulator {sim['mean_speedup']:.3f}")
        print(f"  {'mean JCT jit / none (s)':<28} {m['jit_mean_jct_s']:8.2f} / {m['none_mean_jct_s']:.2f}   "
              f"simulator {sim['jit_mean_jct_s']:.2f} / {sim['tensorflow_mean_jct_s']:.2f}")
        print(f"  {'LAT hit rate jit / none':<28} {_f(m['jit_lat_hit_rate'], 8.3)} / {_f(m['none_lat_hit_rate'], 0.3)}")
        sim_mbit = sim.get("background_mbit", {})
        print(f"  {'background Mbit/s jit / none':<28} {_f(m['jit_background_mbit_mean'], 8.1)} / "
              f"{_f(m['none_background_mbit_mean'], 0.1)}   simulator {_f(sim_mbit.get('jit'), 0.1)} / "
              f"{_f(sim_mbit.get('tensorflow'), 0.1)}   goal {GOALS['background']}")
        print(f"  {'background slowdown jit/none':<28} {_f(m['jit_background_slowdown_mean'], 8.2)} / "
              f"{_f(m['none_background_slowdown_mean'], 0.2)}   simulator "
              f"{_f(sim['background_slowdown']['jit'], 0.2)} / {_f(sim['background_slowdown']['tensorflow'], 0.2)}")
        print(f"  {'DL MB on files ports, jit':<28} {_f(m['jit_background_egress_dl_mb'], 8.1)} / "
              f"{_f(m['jit_background_ingress_dl_mb'], 0.1)}   none "
              f"{_f(m['none_background_egress_dl_mb'], 0.1)} / {_f(m['none_background_ingress_dl_mb'], 0.1)}"
              "   (senders' egress / receivers' ingress, during the files' lives)")
        print(f"  {'tc apply after slot p50/p95':<28} {_f(m['jit_apply_late_ms_p50'], 8.2)} / "
              f"{_f(m['jit_apply_late_ms_p95'], 0.2)} ms (agents during the jit runs)")
        for pol in s.get("baselines", []):
            print(f"  {'mean JCT ' + pol + ' / jit':<28} {_f(m[pol + '_mean_jct_s'], 8.2)} / "
                  f"{_f(m['jit_mean_jct_s'], 0.2)} s (ratio {_f(m['jct_ratio_' + pol + '_over_jit'], 0.3)}), "
                  f"background {_f(m[pol + '_background_mbit_mean'], 0.1)} Mbit/s   simulator ratio "
                  f"{_f(sim.get('jct_ratio_' + pol + '_over_jit'), 0.3)}, "
                  f"background {_f(sim_mbit.get(DAEMON_POLICY[pol]), 0.1)} Mbit/s")
        for model, v in m["speedup_by_model"].items():
            print(f"    speedup {model:<16} {v:6.3f}   simulator {sim['speedup_by_model'].get(model, float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
