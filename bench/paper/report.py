"""What ``bench.paper`` writes: the comparison with the paper, the CSV tables, the figures and summary.md."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from jitsched.bench.common import pyplot, seed_label
from jitsched.bench.paper.metrics import point_metrics, pooled, speedup_table
from jitsched.bench.paper.spec import (
    BASELINES,
    CALIBRATION_LOADS,
    DEFAULT_SHARE,
    JIT,
    JIT_SMALLEST,
    MAIN_POINTS,
    PAPER_POLICY,
    PAPER_TF_BG_SLOWDOWN,
    REFERENCE,
)
from jitsched.bench.paper.workload import DISPLAY, MODELS
from jitsched.sim.metrics import REMAINING_SLOT_S


def legacy_summary(summary: dict, results: dict, pols, seeds, extra, lp_rows) -> None:
    """The figure-by-figure comparison with the paper (Figures 5-11), at the paper point."""
    pt = "paper"
    summary["speedup"] = {pol: speedup_table(results, pt, pol, seeds) for pol in pols}
    summary["waiting_time_s"] = {
        pol: {m: float(np.mean([results[f"{pt}/{pol}/s{s}"]["waiting"][m] for s in seeds
                                if m in results[f"{pt}/{pol}/s{s}"]["waiting"]]))
              for m in MODELS if any(m in results[f"{pt}/{pol}/s{s}"]["waiting"] for s in seeds)}
        for pol in pols}
    summary["remaining_bw"] = {}
    for pol in pols:
        # the old per-host window average (policy-independent by construction) and the per-slot samples
        bw = pooled([results[f"{pt}/{pol}/s{s}"] for s in seeds], "remaining_bw")
        m = summary["points"][pt]["metrics"][pol]
        summary["remaining_bw"][pol] = {"min": float(bw.min()), "median": float(np.median(bw)),
                                        "slot_p5": m["remaining_bw_p5"], "slot_median": m["remaining_bw_median"]}
    summary["background_slowdown"] = {}
    for pol in pols:
        runs = [results[f"{pt}/{pol}/s{s}"] for s in seeds]
        size, slow = pooled(runs, "bg_size"), pooled(runs, "bg_slowdown")
        by = {f"{v * 8 / 1e9:g}": float(slow[size == v].mean()) for v in np.unique(size)}
        summary["background_slowdown"][pol] = {"mean": float(slow.mean()) if len(slow) else None,
                                               "by_size_gbit": by}
    apol = PAPER_POLICY if PAPER_POLICY in pols else JIT
    sweep = []
    for key in sorted({k.split("/")[1] for k in results if k.startswith(f"{pt}/{apol}[alpha=")},
                      key=lambda v: float(v.split("=")[1].rstrip("]"))):
        m = point_metrics(results, pt, key, extra, summary["isolated_jct_s"])
        sweep.append({"alpha": float(key.split("=")[1].rstrip("]")), "speedup": m["speedup_mean"],
                      "remaining_bw": m["remaining_bw_median"]})
    summary["alpha_sweep"] = {"policy": apol, "seeds": list(extra), "rows": sweep}
    if any(k.startswith(f"{pt}/jit-smallest/") for k in results):
        runs = [results[f"{pt}/jit-smallest/s{s}"] for s in extra]
        slow = pooled(runs, "bg_slowdown")
        summary["jit_variants"] = {"jit-smallest": {
            "options": JIT_SMALLEST, "seeds": list(extra),
            "speedup": speedup_table(results, pt, "jit-smallest", extra),
            "background_slowdown": float(slow.mean()) if len(slow) else None}}
    summary["lp_time_s"] = lp_rows
    summary["sim_wall_s"] = {pol: float(np.median([results[f"{pt}/{pol}/s{s}"]["wall_s"] for s in seeds]))
                             for pol in pols}
    summary["jit_plan_s"] = float(np.median([results[f"{pt}/jit/s{s}"]["lp_s"] for s in seeds]))
    summary["jit_lat_misses"] = [results[f"{pt}/jit/s{s}"]["lat_misses"] for s in seeds]
    # Only planned transfers had a deadline JIT tried to meet; the others (beyond
    # alpha) share the leftover and their LAT is an estimate, not a commitment.
    summary["jit_lat_misses_scheduled"] = [results[f"{pt}/jit/s{s}"]["lat_misses_scheduled"] for s in seeds]
    summary["jit_transfers"] = [results[f"{pt}/jit/s{s}"]["transfers_done"] for s in seeds]


def write_csv(out: Path, summary: dict, results: dict, pols, seeds) -> None:
    with open(out / "jct.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", "policy", "seed", "job", "model", "jct_s"])
        for pt in MAIN_POINTS:
            for pol in pols:
                for s in seeds:
                    r = results[f"{pt}/{pol}/s{s}"]
                    for j, m, x in zip(r["job_ids"], r["job_model"], r["jct"], strict=True):
                        w.writerow([pt, pol, s, j, m, f"{x:.6f}"])
    with open(out / "remaining_bw.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", "policy", "seed", "host", "remaining_ratio"])
        for pt in MAIN_POINTS:
            for pol in pols:
                for s in seeds:
                    for h, x in enumerate(results[f"{pt}/{pol}/s{s}"]["remaining_bw"]):
                        w.writerow([pt, pol, s, h, f"{x:.6f}"])
    with open(out / "background.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", "policy", "seed", "size_gbit", "slowdown"])
        for pt in MAIN_POINTS:
            for pol in pols:
                for s in seeds:
                    r = results[f"{pt}/{pol}/s{s}"]
                    for b, x in zip(r["bg_size"], r["bg_slowdown"], strict=True):
                        w.writerow([pt, pol, s, f"{b * 8 / 1e9:g}", f"{x:.6f}"])
    cols = ("speedup_mean", "jct_mean_s", "jct_p95_slowdown", "bg_slowdown_mean", "remaining_bw_p5",
            "remaining_bw_p25", "remaining_bw_median", "remaining_bw_contended_p5",
            "remaining_bw_contended_median", "inception_waiting_s")
    with open(out / "metrics.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["point", "load", "policy", *cols])
        rows = [(pt, summary["points"][pt]["load"], summary["points"][pt]["metrics"]) for pt in MAIN_POINTS]
        rows += [(f"sweep:{r['point']}", r["load"], r["metrics"]) for r in summary["load_sweep"]]
        for pt, load, ms in rows:
            for pol, m in ms.items():
                if m:
                    w.writerow([pt, load, pol, *("" if m[c] is None else f"{m[c]:.6g}" for c in cols)])
        knob = summary["pareto_knob"]
        for pt, curve in knob["points"].items():
            for m in curve:
                w.writerow([f"{pt}:{knob['option']}={m['value']:g}", summary["points"][pt]["load"], knob["policy"],
                            *("" if m.get(c) is None else f"{m[c]:.6g}" for c in cols)])
    with open(out / "alpha_sweep.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["alpha", "speedup", "remaining_bw_slot_median"])
        for row in summary["alpha_sweep"]["rows"]:
            w.writerow([row["alpha"], f"{row['speedup']:.4f}", f"{row['remaining_bw']:.4f}"])
    with open(out / "lp_time.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["jobs", "seconds"])
        for row in summary["lp_time_s"]:
            w.writerow([row["jobs"], f"{row['seconds']:.4f}"])


def figures(out: Path, summary: dict, results: dict, pols, seeds) -> None:
    plt = pyplot()
    pt = "paper"
    x = np.arange(len(MODELS))
    others = [p for p in pols if p != REFERENCE]
    width = 0.8 / len(others)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for k, pol in enumerate(others):
        ax.bar(x + (k - (len(others) - 1) / 2) * width, [summary["speedup"][pol].get(m, np.nan) for m in MODELS],
               width, label=pol)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [DISPLAY[m] for m in MODELS])
    ax.set_ylabel("speedup vs TensorFlow")
    ax.set_title("paper point", fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig5_speedup.png", dpi=120)
    plt.close(fig)

    width = 0.8 / len(pols)
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for k, pol in enumerate(pols):
        ax.bar(x + (k - (len(pols) - 1) / 2) * width, [summary["waiting_time_s"][pol].get(m, np.nan) for m in MODELS],
               width, label=pol)
    ax.set_xticks(x, [DISPLAY[m] for m in MODELS])
    ax.set_ylabel("mean data waiting time (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig6_waiting.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, pol in zip(axes, (REFERENCE, JIT), strict=True):
        f7 = results[f"{pt}/{pol}/s{seeds[0]}"]["fig7"]
        if f7:
            i = np.arange(len(f7["arrival"]))
            ax.plot(i, f7["arrival"], ".", label="arrival")
            ax.plot(i, f7["use"], ".", label="consumer start")
        ax.set_title(f"Inception transfers, {pol}")
        ax.set_xlabel("transfer")
    axes[0].set_ylabel("seconds after job arrival")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "fig7_arrival_vs_use.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, p in zip(axes, ("paper", "load0.5"), strict=True):
        for pol in pols:
            bw = np.sort(pooled([results[f"{p}/{pol}/s{s}"] for s in seeds], "remaining_bw_slots"))
            if len(bw):
                ax.plot(bw, np.arange(1, len(bw) + 1) / len(bw), label=pol)
        ax.set_xlabel(f"remaining egress bandwidth ratio per {REMAINING_SLOT_S:g} s slot")
        ax.set_title(f"{p} (load {summary['points'][p]['load']:.3g})", fontsize=9)
    axes[0].set_ylabel("CDF over (host, slot) with DL egress")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out / "fig8_remaining_bw_cdf.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    sizes = sorted({k for pol in pols for k in summary["background_slowdown"][pol]["by_size_gbit"]}, key=float)
    xs = np.arange(len(sizes))
    width = 0.8 / len(pols)
    for k, pol in enumerate(pols):
        by = summary["background_slowdown"][pol]["by_size_gbit"]
        ax.bar(xs + (k - (len(pols) - 1) / 2) * width, [by.get(s, np.nan) for s in sizes], width, label=pol)
    ax.set_xticks(xs, [f"{s} Gbit" for s in sizes])
    ax.set_ylabel("background slowdown")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig9_background_slowdown.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    sw = summary["alpha_sweep"]["rows"]
    ax.plot([r["alpha"] for r in sw], [r["speedup"] for r in sw], "o-", label="speedup")
    ax2 = ax.twinx()
    ax2.plot([r["alpha"] for r in sw], [r["remaining_bw"] for r in sw], "s--", color="C1",
             label="median remaining bw")
    ax.set_xlabel(f"alpha ({summary['alpha_sweep']['policy']})")
    ax.set_ylabel("speedup")
    ax2.set_ylabel("median remaining bandwidth ratio (per slot)")
    fig.tight_layout()
    fig.savefig(out / "fig10_alpha.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    rows = summary["lp_time_s"]
    ax.plot([r["jobs"] for r in rows], [r["seconds"] for r in rows], "o-")
    ax.set_xlabel("VGG16 jobs planned together")
    ax.set_ylabel("LAT + LP time (s, HiGHS)")
    fig.tight_layout()
    fig.savefig(out / "fig11_lp_time.png", dpi=120)
    plt.close(fig)

    knob = summary["pareto_knob"]
    fig, axes = plt.subplots(1, len(MAIN_POINTS), figsize=(10, 4))
    for ax, p in zip(axes, MAIN_POINTS, strict=True):
        ms = summary["points"][p]["metrics"]
        for k, pol in enumerate(pols):
            m = ms[pol]
            if m and m["bg_slowdown_mean"] is not None:
                ax.plot(m["bg_slowdown_mean"], m["speedup_mean"], "o", color=f"C{k}", label=pol)
        curve = [m for m in knob["points"].get(p, []) if m.get("bg_slowdown_mean") is not None]
        if curve:
            ax.plot([m["bg_slowdown_mean"] for m in curve], [m["speedup_mean"] for m in curve], "--",
                    color="grey", lw=1, label=f"{knob['policy']} over {knob['option']} (seeds {seed_label(knob['seeds'])})")
            for m in curve:
                ax.annotate(f"{m['value']:g}", (m["bg_slowdown_mean"], m["speedup_mean"]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("mean background slowdown (lower is better)")
        # the curve runs fewer seeds than the points (runtime): a point need not sit on it
        ax.set_title(f"{p} (load {summary['points'][p]['load']:.3g}; points: seeds "
                     f"{seed_label(summary['points'][p]['seeds'])})", fontsize=9)
    axes[0].set_ylabel("mean DL speedup vs TensorFlow")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "figP_pareto.png", dpi=120)
    plt.close(fig)

    sweep = summary["load_sweep"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for k, pol in enumerate(pols):
        rows = [(r["load"], r["metrics"][pol]) for r in sweep if r["metrics"][pol]]
        axes[0].plot([a for a, _ in rows], [m["speedup_mean"] for _, m in rows], "o-", color=f"C{k}", label=pol)
        rows = [(a, m) for a, m in rows if m["bg_slowdown_mean"] is not None]
        axes[1].plot([a for a, _ in rows], [m["bg_slowdown_mean"] for _, m in rows], "o-", color=f"C{k}", label=pol)
    axes[0].set_ylabel("mean DL speedup vs TensorFlow")
    axes[1].set_ylabel("mean background slowdown")
    for ax in axes:
        ax.set_xlabel("offered load")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "figL_load_sweep.png", dpi=120)
    plt.close(fig)


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else ("-" if v is None else str(v))


_TABLE = (("speedup_mean", "speedup"), ("jct_mean_s", "JCT mean (s)"), ("jct_p95_slowdown", "JCT p95 slowdown"),
          ("bg_slowdown_mean", "bg slowdown"), ("remaining_bw_p5", "rem. bw p5"), ("remaining_bw_p25", "p25"),
          ("remaining_bw_median", "median"), ("remaining_bw_contended_p5", "contended p5"),
          ("remaining_bw_contended_median", "contended median"), ("inception_waiting_s", "Inception waiting (s)"))


def _metrics_table(ms: dict) -> list[str]:
    lines = ["| policy | " + " | ".join(h for _, h in _TABLE) + " |", "|---" * (len(_TABLE) + 1) + "|"]
    for pol, m in ms.items():
        if m:
            lines.append(f"| {pol} | " + " | ".join(_fmt(m[k]) for k, _ in _TABLE) + " |")
    return lines


def markdown(s: dict) -> str:
    p = s["paper"]
    sp = s["speedup"]
    pols = s["policies"]
    pp = s["paper_point"]
    extra_note = "" if s["extra_seeds"] == s["seeds"] else (
        f" The load sweep (except load 0.5), the {s['pareto_knob']['policy']} knob curve, the alpha sweep and "
        f"jit-smallest use seeds {s['extra_seeds']} only (runtime).")
    lines = [
        f"# jitsched vs the paper (scale {s['scale']}: {s['hosts']} hosts, {s['dl_jobs']} DL jobs/seed, "
        f"seeds {s['seeds']}, real model DAGs: {s['real_model_dags']})",
        "",
        f"Policies: {', '.join(pols)} (jit with its defaults)." + extra_note,
        "",
        f"**Paper point**: offered load {pp['load']:.4g}, files {pp['background_share']:g} of the jobs "
        f"({pp['source']}); tensorflow's mean background slowdown there: {_fmt(pp['tf_bg_slowdown'])} "
        f"(paper: {PAPER_TF_BG_SLOWDOWN}).",
    ]
    if pp.get("evaluations"):
        lines.append("Calibration (load, file share, tensorflow background slowdown): "
                     + "; ".join(f"({a:.4g}, {b:g}, {c:.3f})" for a, b, c in pp["evaluations"]) + ".")
    if pp["background_share"] != DEFAULT_SHARE:
        lines.append(f"The load alone did not reach {PAPER_TF_BG_SLOWDOWN} up to {CALIBRATION_LOADS[1]}: the file "
                     f"share was raised from {DEFAULT_SHARE} to {pp['background_share']:g}.")
    lines.append("")
    for pt in MAIN_POINTS:
        d = s["points"][pt]
        lines += [f"## Operating point `{pt}` (load {d['load']:.4g}, files {d['background_share']:g} of the jobs)",
                  "", *_metrics_table(d["metrics"]), ""]
        lines += [f"- {line}" for line in s["dominance"][pt].values()]
        lines.append("")
    lines += [
        "speedup: mean over models of the mean per-job JCT(tensorflow)/JCT; JCT p95 slowdown: p95 over jobs of "
        f"JCT / the job alone on the cluster; remaining bandwidth: per (host, {REMAINING_SLOT_S:g} s slot) in which the host sent "
        "DL bytes, 1 - DL bytes sent / (capacity x slot), pooled over seeds; contended: the slots in which the "
        "host's background egress was active too (what background got when it wanted the port). Dominance: "
        "speedup >=, JCT mean <=, background slowdown <, remaining bw p5 and median > every baseline "
        f"({', '.join(BASELINES)}).",
        "",
        f"## Load sweep (seeds {s['extra_seeds']}): mean speedup / mean background slowdown",
        "",
        "| load | " + " | ".join(pols) + " |",
        "|---" * (len(pols) + 1) + "|",
    ]
    for r in s["load_sweep"]:
        cells = [f"{_fmt(m['speedup_mean'])} / {_fmt(m['bg_slowdown_mean'])}" if m else "-"
                 for m in (r["metrics"][pol] for pol in pols)]
        lines.append(f"| {r['load']:g} | " + " | ".join(cells) + " |")
    knob = s["pareto_knob"]
    lines += ["", f"## {knob['policy']} over {knob['option']} (seeds {knob['seeds']}): "
              "speedup / background slowdown / remaining bw p5 / median", ""]
    if any(knob["points"].values()):
        for pt, curve in knob["points"].items():
            lines.append(f"- {pt}: " + "; ".join(
                f"{m['value']:g}: {_fmt(m.get('speedup_mean'))} / {_fmt(m.get('bg_slowdown_mean'))} / "
                f"{_fmt(m.get('remaining_bw_p5'))} / {_fmt(m.get('remaining_bw_median'))}" for m in curve))
    lines += [f"- {n}" for n in s["notes"]]
    lines += [
        "",
        "## Figures 5-11 against the paper (at the paper point)",
        "",
        "| Figure | metric | jitsched | paper |",
        "|---|---|---|---|",
    ]
    for m in MODELS:
        lines.append(f"| 5 | JIT speedup {DISPLAY[m]} | {_fmt(sp['jit'].get(m))} | {p['speedup']['jit'][m]} |")
    lines.append(f"| 5 | JIT mean speedup | {_fmt(sp['jit']['mean'])} | 1.55 |")
    if PAPER_POLICY in sp:
        lines.append(f"| 5 | {PAPER_POLICY} mean speedup | {_fmt(sp[PAPER_POLICY]['mean'])} | 1.55 |")
    lines.append(f"| 5 | TicTac mean speedup (LeNet) | {_fmt(sp['tictac']['mean'])} ({_fmt(sp['tictac'].get('lenet'))}) | 1.23 (1.40) |")
    lines.append(f"| 5 | Sincronia mean speedup | {_fmt(sp['sincronia']['mean'])} | < 1 |")
    w = s["waiting_time_s"]
    for pol in pols:
        lines.append(f"| 6 | Inception waiting time, {pol} (s) | {_fmt(w[pol].get('inception_v3'))} | "
                     f"{p['waiting_time_s'].get(pol, {}).get('inception_v3', '-')} |")
    for pol in pols:
        bw = s["remaining_bw"][pol]
        ppb = p["remaining_bw"].get(pol, {})
        lines.append(f"| 8 | remaining bw per slot p5 / median, {pol} | {_fmt(bw['slot_p5'])} / "
                     f"{_fmt(bw['slot_median'])} | {ppb.get('min', '-')} (min) / {ppb.get('median', '-')} |")
    for pol in pols:
        bw = s["remaining_bw"][pol]
        lines.append(f"| 8 | old per-host window average min / median, {pol} (same for all policies) | "
                     f"{_fmt(bw['min'])} / {_fmt(bw['median'])} | - |")
    for pol in pols:
        lines.append(f"| 9 | background slowdown mean, {pol} | "
                     f"{_fmt(s['background_slowdown'][pol]['mean'])} | {p['background_slowdown'].get(pol, '-')} |")
    by = s["background_slowdown"][JIT]["by_size_gbit"]
    lines.append(f"| 9 | JIT slowdown by size (Gbit) | {', '.join(f'{k}: {v:.2f}' for k, v in by.items())} | "
                 "5: 1.20, 10: 1.30, 20: 1.45, 30: 1.75, 40: 2.10 |")
    sw = s["alpha_sweep"]["rows"]
    if sw:
        apol = s["alpha_sweep"]["policy"]
        lines.append(f"| 10 | {apol} speedup alpha {sw[0]['alpha']} -> {sw[-1]['alpha']} | {sw[0]['speedup']:.3f} -> "
                     f"{sw[-1]['speedup']:.3f} | 1.09 -> 1.62 (0.1 -> 0.6) |")
        lines.append(f"| 10 | {apol} median remaining bw per slot alpha {sw[0]['alpha']} -> {sw[-1]['alpha']} | "
                     f"{_fmt(sw[0]['remaining_bw'])} -> {_fmt(sw[-1]['remaining_bw'])} | 0.482 -> 0.324 |")
    for key, v in s.get("jit_variants", {}).items():
        lines.append(f"| 5 | {key} ({', '.join(f'{k}={x}' for k, x in v['options'].items())}) mean speedup; "
                     f"bg slowdown | {_fmt(v['speedup']['mean'])} "
                     f"({', '.join(f'{DISPLAY[m]} {x:.2f}' for m, x in v['speedup'].items() if m in DISPLAY)}); "
                     f"{_fmt(v['background_slowdown'])} | not in the paper |")
    lp = s["lp_time_s"]
    lines.append(f"| 11 | LAT+LP time, {lp[0]['jobs']} -> {lp[-1]['jobs']} VGG16 jobs (s) | "
                 f"{lp[0]['seconds']:.3f} -> {lp[-1]['seconds']:.3f} | under 1 s up to 70 jobs (Gurobi) |")
    lines += [
        "",
        f"Simulator wall time per run at the paper point (s): "
        f"{', '.join(f'{k} {v:.1f}' for k, v in s['sim_wall_s'].items())}; "
        f"JIT planning inside the jit run: {s['jit_plan_s']:.1f} s; JIT LAT misses per seed: "
        f"{s['jit_lat_misses_scheduled']} of planned transfers (real misses: release slipped or a "
        f"plan fell behind), {s['jit_lat_misses']} counting unplanned ones (beyond alpha, no "
        f"deadline), of {s['jit_transfers']} transfers. Isolated JCT per model (s): "
        f"{', '.join(f'{DISPLAY[m]} {x:.3f}' for m, x in s['isolated_jct_s'].items())}. "
        f"Total bench runtime {s['runtime_s']:.0f} s.",
        "",
        "Figures: fig5_speedup.png, fig6_waiting.png, fig7_arrival_vs_use.png, fig8_remaining_bw_cdf.png, "
        "fig9_background_slowdown.png, fig10_alpha.png, fig11_lp_time.png, figP_pareto.png, figL_load_sweep.png; "
        "data: metrics.csv, jct.csv, remaining_bw.csv, background.csv, alpha_sweep.csv, lp_time.csv, "
        "summary.json, paper_load.json (calibration cache).",
        "",
        "## Where and why jitsched differs from the paper",
        "",
        "- TensorFlow here is an ideal per-flow max-min fair network: work-conserving with no TCP",
        "  inefficiency, the strongest honest reading of the baseline. Every DL job's transfers run",
        "  between one parameter server and one worker, and compute is short next to transfer time",
        "  (GPU-scaled op times), so a JCT is mostly bytes / share of the two hosts' ports. A scheduler",
        "  wins by (a) sending a job's transfers in need order, so compute overlaps the network, and",
        "  (b) sharing ports per job rather than per flow, which stops a 932-transfer ResNet152 from",
        "  starving a 8-transfer LeNet. The paper's TensorFlow 1.13 testbed also lost time to",
        "  sender contention that a fluid model does not have; expect smaller gains than 1.55.",
        "- jit's LAT pass uses the `ordered` estimate (jitsched/policies/jit.py: `ordered_trans`):",
        "  each job's transfers on a port form a queue in need order (earliest LAT first) served at",
        "  capacity / jobs on the port. With the earlier `fair` estimate (all transfers of all jobs",
        "  at once) the deadlines describe the fair-share timeline, so meeting them cannot beat",
        "  TensorFlow, and the balanced LP stretched transfers up to them: mean speedup 0.86 (quick)",
        "  and 0.81 (100 hosts, 150 jobs). The paper's Eq. 1 (`eq1`) is looser still.",
        "- jit backfills: port capacity that neither the plan nor the leftover sharers (background,",
        "  transfers beyond alpha) can use goes to released planned transfers, earliest LAT first.",
        "  A plan made from estimates is then a floor, not a cap (the paper holds a transfer to its",
        "  slots even on an idle port). Mean speedup at 100 hosts / 150 jobs, seed 0: fair 0.81,",
        "  fair + backfill 0.96, ordered alone 0.97, ordered + backfill 1.15 (the default). Each",
        "  half alone loses: tight deadlines without backfill leave ports idle between slots, and",
        "  backfill with fair-share deadlines orders the wrong transfers first.",
        "- Paper scale (100 hosts, 1000 DL jobs + 250 files, seed 0; tensorflow and jit only, measured",
        "  once): JIT mean speedup 1.25 (LeNet 1.65, AlexNet 1.34, VGG16 1.37, Inception 1.00,",
        "  ResNet152 0.90); simulator time tensorflow 154 s, jit 565 s of which 293 s LAT+LP planning.",
        "- Most LAT misses are transfers beyond alpha: they share the leftover and have no deadline.",
        "  Misses of planned transfers come from releases that slip behind compute estimates (the",
        "  plan's slots pass before the transfer may send), not from the LP (0 planned late).",
        "- Sincronia beats the paper's account of it here: BSSI approximates smallest-job-first across",
        "  jobs, which the per-model mean speedup rewards (LeNet gains most), and our Sincronia is",
        "  work-conserving with all of a job's flows on one pair, so ignoring the DAG order costs",
        "  little when compute is short. JIT's across-job priority is only EDF through the LP's",
        "  tardiness; it does not favour small jobs. The `jit-smallest` row is JIT with Sincronia's",
        "  insight in its LAT pass (jobs take each port one after another, smallest busiest-port",
        "  work first, `job_order=\"smallest\"`) and alpha 0.7: LAT order inside a job, small jobs",
        "  first across jobs. It gains on JIT but stays below Sincronia, because JIT paces planned",
        "  transfers to their deadlines and shares everything beyond alpha fairly.",
        f"- Remaining bandwidth (Fig. 8) is sampled per host egress and {REMAINING_SLOT_S:g} s slot while the host",
        "  sends DL bytes: 1 - DL bytes in the slot / (capacity x slot). The old figure, each host's",
        "  time average over the whole DL window, was the same for every policy by construction (all",
        "  send the same DL bytes in about the same window); it is kept in remaining_bw.csv. A",
        "  work-conserving policy that gives DL the port whenever it wants it scores low here; the",
        "  contended samples (background active on the host in the slot) show what it left to",
        "  background traffic that wanted the port.",
        "- The paper does not give its offered load: the `paper` point is the load at which",
        "  tensorflow's mean background slowdown matches the paper's 2.23 (calibrated on tensorflow",
        "  alone over loads 0.5-1.2, the file share raised only if 1.2 falls short).",
        "- TicTac orders only DL transfers; background flows compete TCP-fair with the DL aggregate.",
        "  Sincronia orders every coflow, background flows included (each is a one-flow coflow).",
        "- The paper's remaining-bandwidth sampling is not described; the slot is our choice.",
        "- The DL DAGs are the packaged real TensorFlow graphs when available, else Table-1-sized",
        "  layer-chain stand-ins (see bench/paper/workload.py) with assumed GPU-like compute times.",
    ]
    return "\n".join(lines) + "\n"
