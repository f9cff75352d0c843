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

``--figure PATH`` draws each scenario's per-job JCTs (testbed medians beside
the simulator's) to a PNG; ``--replot FILE.json`` redraws it from a saved
``--json`` output without running anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if not __package__:  # run as ``python bench/bench_testbed.py``: sys.path starts at the script's folder,
    # not at the checkout root as with ``python -m``; add the root so that ``bench`` imports
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import pyplot, require_matplotlib
from jitsched import testbed
from jitsched.agents.backends.tc import SPARE_MODES
from jitsched.estimate import JOB_ORDERS
from jitsched.testbed.measure import measure_enforcement, summarize
from jitsched.testbed.scenario import SCENARIOS, predict, require_daemon_side

GOALS = {"rate_accuracy_p50": "within ±3 %", "rate_accuracy_p5": "within ±10 %",
         "rate_change_latency_ms_p50": "< 5 ms after the slot boundary",
         "jct_ratio_none_over_jit": ">= 1.3 with background present",
         "background": "JIT background goodput >= none's"}
RUN_KEYS = ("mean_jct_s", "completed", "jobs", "lat_hit_rate", "background_mbit_mean",
            "background_slowdown_mean", "background_completed")


def _f(x, spec: float) -> str:
    """``x`` formatted as ``{x:<spec>f}``, or ``-`` for None."""
    return "-" if x is None else format(x, f"{spec}f")


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _paired(jit: dict, none: dict) -> dict:
    """JCT ratio of one jit/none pair, mean per-job speedup and per-model mean speedups."""
    jj, nj = jit["details"]["jct_s"], none["details"]["jct_s"]
    both = [j for j in jj if j in nj and jj[j] > 0 and j not in jit["details"]["errors"]
            and j not in none["details"]["errors"]]
    by_model: dict[str, list[float]] = {}
    for j in both:
        by_model.setdefault(j.rsplit("-", 1)[0], []).append(nj[j] / jj[j])
    a, b = jit["mean_jct_s"], none["mean_jct_s"]
    return {"jct_ratio_none_over_jit": b / a if a and b else None,
            "mean_speedup": statistics.fmean(nj[j] / jj[j] for j in both) if both else None,
            "speedup_by_model": {m: statistics.fmean(v) for m, v in sorted(by_model.items())}}


def run_jobs(scenario: str, seed: int, repeat: int, prefix: str, say, *, alpha: float | None = None,
             job_order: str | None = None, switch_priority: bool = False, ingress: bool | None = None,
             drift_s: float | None = None, early_s: float | None = None, dl_share: float = 1.0,
             planning: str | None = None, max_planner_duty: float | None = None,
             spare: str = "background") -> dict:
    """``repeat`` jit/none pairs of ``scenario`` on ``seed`` plus the simulator's prediction.

    ``alpha``, ``job_order`` and ``dl_share`` are the jit policy's (daemon and simulator
    alike; None: the policy's default); ``switch_priority`` gives DL transfers the switch ports' priority
    band under both policies; ``ingress``: jit agents enforce their hosts' ingress too;
    ``drift_s``: the jit daemon re-solves when a transfer is this many seconds
    behind its plan (None: never, as the simulator's prediction); ``early_s``:
    also when one arrives this many seconds before its LAT (None: never);
    ``planning`` and ``max_planner_duty``: the jit daemon's planning mode and
    bound on re-solve time (None: the testbed's defaults, full re-solves as the
    simulator plans, unbounded); ``spare``: who borrows capacity no plan holds
    (:func:`jitsched.testbed.e2e.run_scenario`).
    """
    from jitsched.testbed.e2e import run_scenario

    t = time.perf_counter()
    pred = predict(scenario, seed, alpha=alpha, job_order=job_order, dl_share=dl_share)
    say(f"{scenario}: simulator tensorflow {pred['tensorflow']['mean_jct_s']:.2f} s, "
        f"jit {pred['jit']['mean_jct_s']:.2f} s, ratio {pred['jct_ratio_tf_over_jit']:.3f} "
        f"({time.perf_counter() - t:.0f} s)")
    policy_options = {k: v for k, v in (("job_order", job_order), ("dl_share", dl_share)) if v is not None}
    jit_options: dict = {"policy_options": policy_options} if policy_options else {}
    if drift_s is not None:
        jit_options["drift_s"] = drift_s
    if early_s is not None:
        jit_options["early_s"] = early_s
    if planning is not None:
        jit_options["planning"] = planning
    if max_planner_duty is not None:
        jit_options["max_planner_duty"] = max_planner_duty
    runs = []
    for r in range(repeat):
        order = ("jit", "none") if r % 2 == 0 else ("none", "jit")
        res = {}
        for pol in order:
            t = time.perf_counter()
            res[pol] = run_scenario(scenario, policy=pol, seed=seed, prefix=prefix, measure_slots=0,
                                    timeout_s=300.0, alpha=alpha, switch_priority=switch_priority,
                                    ingress=ingress, spare=spare,
                                    daemon_options=jit_options if pol == "jit" else {})
            say(f"{scenario} repeat {r} {pol}: mean JCT {res[pol]['mean_jct_s']}, "
                f"{res[pol]['completed']}/{res[pol]['jobs']} jobs, "
                f"background {res[pol]['background_mbit_mean']} Mbit/s ({time.perf_counter() - t:.0f} s)")
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
    for pol in ("jit", "none"):
        for k in ("mean_jct_s", "lat_hit_rate", "background_mbit_mean", "background_slowdown_mean"):
            med[f"{pol}_{k}"] = _median(x[pol][k] for x in runs)
        # DL bytes that crossed the files' ports while they moved: what the files gave up
        for side in ("egress", "ingress"):
            med[f"{pol}_background_{side}_dl_mb"] = _median(
                sum(c[f"{side}_dl_mb"] for c in x[pol]["background_contention"].values()) for x in runs)
    # how late the agents' tc changes landed after their slot boundaries during the jit runs
    med["jit_apply_late_ms_p50"] = _median(a.get("apply_late_ms_p50") for x in runs
                                           for a in x["jit"]["agents"].values())
    med["jit_apply_late_ms_p95"] = _median(a.get("apply_late_ms_p95") for x in runs
                                           for a in x["jit"]["agents"].values())
    sim_by_model = {m: pred["tensorflow"]["jct_by_model_s"][m] / pred["jit"]["jct_by_model_s"][m]
                    for m in pred["jit"]["jct_by_model_s"]}
    return {"scenario": scenario, "seed": seed, "repeat": repeat, "alpha": alpha, "job_order": job_order,
            "dl_share": dl_share, "planning": planning, "max_planner_duty": max_planner_duty, "spare": spare,
            "switch_priority": switch_priority, "ingress": ingress, "drift_s": drift_s, "early_s": early_s,
            "median": med,
            "simulator": {"jct_ratio_tf_over_jit": pred["jct_ratio_tf_over_jit"],
                          "mean_speedup": pred["mean_speedup"],
                          "tensorflow_mean_jct_s": pred["tensorflow"]["mean_jct_s"],
                          "jit_mean_jct_s": pred["jit"]["mean_jct_s"],
                          "speedup_by_model": sim_by_model,
                          "background_slowdown": {p: pred[p]["background_slowdown"]
                                                  for p in ("tensorflow", "jit")},
                          "background_mbit": {p: pred[p]["background_mbit_mean"]
                                              for p in ("tensorflow", "jit")},
                          "jct_s": {p: pred[p]["jct_s"] for p in ("tensorflow", "jit")}},
            "runs": runs}


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
    jobs = sorted(sim["jit"], key=lambda j: sim["tensorflow"][j])
    med = result["median"]

    def testbed_median(pol: str) -> list[float]:
        return [_median(r[pol]["jct_s"].get(j) for r in result["runs"]) or np.nan for j in jobs]

    series = [
        (f"testbed none (plain TCP), files {_f(med['none_background_mbit_mean'], 0.1)} Mbit/s",
         testbed_median("none"), "#bbbbbb"),
        (f"testbed jit, files {_f(med['jit_background_mbit_mean'], 0.1)} Mbit/s",
         testbed_median("jit"), "#1f77b4"),
        ("simulator tensorflow (fair sharing)", [sim["tensorflow"][j] for j in jobs], "#e0e0e0"),
        ("simulator jit", [sim["jit"][j] for j in jobs], "#aec7e8"),
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


def _options(result: dict, share: bool = True) -> str:
    """The jit options of a :func:`run_jobs` result, as a figure title shows them."""
    opts = ", ".join(f"{name} {result[key]}" for key, name in (("alpha", "alpha"), ("job_order", "job order"))
                     if result.get(key) is not None) or "jit defaults"
    if share and result.get("dl_share", 1.0) != 1.0:
        opts += f", DL share {result['dl_share']}"
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
    return opts


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
    results = sorted(results, key=lambda r: r.get("dl_share", 1.0))
    none_mbit = _median(r["median"]["none_background_mbit_mean"] for r in results)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = [r["median"]["jit_background_mbit_mean"] for r in results]
    ys = [r["median"]["jct_ratio_none_over_jit"] for r in results]
    ax.plot(xs, ys, "o-", color="#d62728", label="testbed jit (median of pairs)")
    for r, x, y in zip(results, xs, ys, strict=True):
        if x is not None and y is not None:
            ax.annotate(f"DL share {r.get('dl_share', 1.0):g}", (x, y), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
    sx = [r["simulator"].get("background_mbit", {}).get("jit") for r in results]
    sy = [r["simulator"]["jct_ratio_tf_over_jit"] for r in results]
    if all(v is not None for v in sx):
        ax.plot(sx, sy, "s--", color="#aec7e8", label="simulator jit vs tensorflow")
        # the same files under fair sharing whatever the DL share: one point
        tf = results[0]["simulator"]["background_mbit"].get("tensorflow")
        if tf is not None:
            ax.plot([tf], [1.0], "D", color="#aec7e8", markeredgecolor="black", markeredgewidth=0.4,
                    label="simulator tensorflow")
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


def _draw(results: dict, figure: str | None, tradeoff: str | None, say) -> None:
    # --figure: one per result; --tradeoff: one per scenario, over its DL shares
    if figure:
        for name, res in results.items():
            plot_jobs(res, _figure_path(figure, name, len(results)))
            say(f"wrote {_figure_path(figure, name, len(results))}")
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5, help="enforcement measurements (default 5)")
    p.add_argument("--link-mbit", type=float, default=100.0)
    p.add_argument("--slot-s", type=float, default=0.1)
    p.add_argument("--slots", type=int, default=40)
    p.add_argument("--prefix", default="jsb")
    p.add_argument("--scenario", nargs="+", choices=tuple(SCENARIOS), default=["quick"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job-repeat", type=int, default=3, help="jit/none pairs per scenario (default 3)")
    p.add_argument("--skip-enforcement", action="store_true")
    p.add_argument("--alpha", type=float, default=None,
                   help="jit: fraction of each job's transfers planned (default: the policy's, 0)")
    p.add_argument("--job-order", choices=JOB_ORDERS, default=None,
                   help="jit: how jobs share a port in the LAT estimate (default: the policy's)")
    p.add_argument("--dl-share", type=float, nargs="+", default=[1.0],
                   help="jit: fraction of each port plans may give DL transfers; the rest is the "
                        "background's floor (default 1). Several values: one set of pairs each")
    p.add_argument("--planning", choices=("full", "incremental"), default=None,
                   help="jit daemon's planning mode (default full: every arrival re-solves all jobs, "
                        "as the simulator plans)")
    p.add_argument("--max-planner-duty", type=float, default=None,
                   help="jit daemon: bound on the share of time full re-solves keep the planner busy "
                        "(default: none)")
    p.add_argument("--spare", choices=SPARE_MODES, default="background",
                   help="jit agents: who borrows capacity no plan holds: the files first (background, "
                        "default, as the simulator's backfill) or flows and files in turn (shared)")
    p.add_argument("--tradeoff", metavar="PATH.png",
                   help="draw each scenario's JCT ratio against the files' goodput, one point per "
                        "--dl-share, beside none's goodput and the simulator's curve")
    p.add_argument("--switch-priority", action="store_true",
                   help="DL transfers in a strict-priority band at the switch ports (both policies)")
    p.add_argument("--ingress", action=argparse.BooleanOptionalAction, default=None,
                   help="jit agents also order their hosts' ingress (tc-ingress; default on under jit)")
    p.add_argument("--drift-s", type=float, default=None,
                   help="jit: re-solve when a transfer is this many seconds behind its plan "
                        "(default: never, like the simulator's prediction)")
    p.add_argument("--early-s", type=float, default=None,
                   help="jit: also re-solve when a transfer arrives this many seconds before its LAT "
                        "(default: never)")
    p.add_argument("--figure", metavar="PATH.png",
                   help="draw each scenario's per-job JCTs (testbed and simulator) to this PNG")
    p.add_argument("--replot", metavar="FILE.json",
                   help="only redraw --figure / --tradeoff from a saved --json output (runs nothing)")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.figure or a.tradeoff:
        try:
            require_matplotlib()  # drawn after the runs: say now, not after them, if it cannot be
        except ImportError as exc:
            p.error(str(exc))
    if a.replot:
        if not (a.figure or a.tradeoff):
            p.error("--replot needs --figure or --tradeoff")
        try:
            with open(a.replot) as fh:
                saved = json.load(fh)
            drawn = {k: v for k, v in saved["scenarios"].items() if isinstance(v, dict)}
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            p.error(f"--replot {a.replot}: not a bench_testbed --json output ({exc})")
        _draw(drawn, a.figure, a.tradeoff, print)
        return 0
    if a.max_planner_duty is not None and not 0.0 < a.max_planner_duty <= 1.0:
        p.error(f"--max-planner-duty: must be within (0, 1], got {a.max_planner_duty}")
    for share in a.dl_share:
        if not 0.0 < share <= 1.0:
            p.error(f"--dl-share: must be within (0, 1], got {share}")
    for name in ("drift_s", "early_s"):
        v = getattr(a, name)
        if v is not None and not v > 0:
            p.error(f"--{name.replace('_', '-')}: must be positive, got {v}")

    def say(msg: str) -> None:
        print(msg, file=sys.stderr if a.json else sys.stdout, flush=True)

    med: dict = {}
    if not a.skip_enforcement:
        runs = []
        for r in range(a.repeat):
            tb = testbed.up(2, a.link_mbit, prefix=a.prefix)
            try:
                runs.append(summarize(measure_enforcement(tb, slot_s=a.slot_s, n_slots=a.slots, seed=r)))
            finally:
                testbed.down(a.prefix)
        med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    try:
        require_daemon_side()
    except testbed.TestbedError as exc:
        scenarios: dict = {"unavailable": str(exc)}
    else:
        # one share: results under the scenario's name; several: "<scenario>@<share>"
        scenarios = {(s if len(a.dl_share) == 1 else f"{s}@{share:g}"):
                     run_jobs(s, a.seed, a.job_repeat, a.prefix, say, alpha=a.alpha,
                              job_order=a.job_order, switch_priority=a.switch_priority,
                              ingress=a.ingress, drift_s=a.drift_s, early_s=a.early_s, dl_share=share,
                              planning=a.planning, max_planner_duty=a.max_planner_duty, spare=a.spare)
                     for s in a.scenario for share in a.dl_share}
    out = {"link_mbit": a.link_mbit, "slot_s": a.slot_s, "slots": a.slots, "repeat": a.repeat,
           "median": med, "scenarios": scenarios, "goals": GOALS}
    _draw({k: v for k, v in scenarios.items() if isinstance(v, dict)}, a.figure, a.tradeoff, say)
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    if med:
        print(f"tc enforcement, {a.link_mbit:g} Mbit/s links, {a.slots} slots of {a.slot_s * 1e3:g} ms, "
              f"median of {a.repeat} runs")
        for k, v in med.items():
            print(f"  {k:<30} {v:10.4f}   {GOALS.get(k, '')}")
    for name, s in scenarios.items():
        if not isinstance(s, dict):
            print(f"{name}: {s}")
            continue
        m, sim = s["median"], s["simulator"]
        print(f"{name}, seed {s['seed']}, DL share {s.get('dl_share', 1.0):g}, median of {s['repeat']} jit/none pairs "
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
        for model, v in m["speedup_by_model"].items():
            print(f"    speedup {model:<16} {v:6.3f}   simulator {sim['speedup_by_model'].get(model, float('nan')):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
