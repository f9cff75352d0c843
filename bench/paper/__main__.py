"""Reproduce the paper's Figures 5-11 with one command: ``python -m bench.paper [--quick] [--out DIR]``."""

from __future__ import annotations

import argparse
import csv
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from bench.paper.workload import DISPLAY, MODELS, paper_workload, real_models_available

POLICIES = ("tensorflow", "tictac", "sincronia", "jit")
JIT_SMALLEST = {"job_order": "smallest", "alpha": 0.7}  # the jit variant of summary["jit_variants"]
ALPHAS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)
PAPER = {
    "speedup": {"jit": {"lenet": 1.34, "alexnet": 1.53, "vgg16": 1.70, "inception_v3": 1.81,
                        "resnet152": 1.39, "mean": 1.55},
                "tictac": {"lenet": 1.40, "mean": 1.23}, "sincronia": {"mean": "< 1"}},
    "waiting_time_s": {"tensorflow": {"inception_v3": 2.1}, "jit": {"inception_v3": 0.12}},
    "remaining_bw": {"tensorflow": {"min": 0.173, "median": 0.556}, "tictac": {"min": 0.175},
                     "sincronia": {"min": 0.173}, "jit": {"min": 0.334, "median": 0.665}},
    "background_slowdown": {"tensorflow": 2.23, "tictac": 2.05, "sincronia": 2.23, "jit": 1.56,
                            "jit_by_size_gbit": {"5": 1.20, "10": 1.30, "20": 1.45, "30": 1.75,
                                                 "40": 2.10}},
    "alpha_sweep": {"speedup": [1.09, 1.62], "remaining_bw": [0.482, 0.324]},
    "lp_time_s": "under 1 s up to 70 VGG16 jobs (Gurobi)",
}
SCALES = {
    # hosts, DL jobs, seeds, alphas, LP-time job counts
    "quick": dict(hosts=20, jobs=25, seeds=(0,), alphas=(0.2, 0.4, 0.6), lp_jobs=(10, 20)),
    "default": dict(hosts=100, jobs=150, seeds=(0, 1), alphas=ALPHAS,
                    lp_jobs=(10, 20, 30, 40, 50, 60, 70, 80)),
    "paper": dict(hosts=100, jobs=1000, seeds=(0,), alphas=ALPHAS,
                  lp_jobs=(10, 20, 30, 40, 50, 60, 70, 80)),
}


def run_one(task: dict) -> dict:
    """One simulation in a worker process; returns compact, picklable results."""
    from jitsched.sim import simulate

    wl = paper_workload(task["jobs"], n_hosts=task["hosts"], seed=task["seed"], real=task["real"])
    res = simulate(wl, task["policy"], seed=task["seed"], policy_options=task["options"])
    models = np.asarray(res.job_model, dtype=object)
    fig7 = None
    inc = np.flatnonzero(models == "inception_v3")
    if len(inc):
        sel = res.transfer_job == inc[0]
        fig7 = {"arrival": (res.transfer_arrival_s[sel] - res.job_arrival_s[inc[0]]).tolist(),
                "use": (res.consumer_start_s[sel] - res.job_arrival_s[inc[0]]).tolist()}
    st = res.stats
    return {
        "key": task["key"], "policy": task["policy"], "seed": task["seed"], "alpha": task.get("alpha"),
        "job_ids": res.job_ids, "job_model": res.job_model, "jct": res.jct_s.tolist(),
        "waiting": res.waiting_by_model(), "remaining_bw": res.remaining_bw.tolist(),
        "bg_size": res.bg_size.tolist(), "bg_slowdown": res.bg_slowdown.tolist(),
        "wall_s": res.wall_s, "lp_s": res.lp_s, "lat_misses": st.get("lat_misses"),
        "lat_misses_scheduled": st.get("lat_misses_scheduled"), "transfers_done": st.get("transfers_done"),
        "solves": st.get("solves", 0), "fig7": fig7,
    }


def lp_time(n_jobs: int, seed: int = 0) -> float:
    """Wall time of one JIT plan (LAT + LP) of ``n_jobs`` VGG16 jobs arriving together, seconds."""
    from jitsched.model import Cluster
    from jitsched.planner import plan_jobs
    from jitsched.synth import random_vgg16_jobs

    cl = Cluster.uniform(100)
    jobs = random_vgg16_jobs(n_jobs, cl.names, seed=seed)
    t0 = time.perf_counter()
    plan_jobs(jobs, cl)
    return time.perf_counter() - t0


def _speedups(base: dict, other: dict) -> dict:
    """Per model mean of per-job JCT(tensorflow)/JCT(policy), same workload and seed."""
    tf = dict(zip(base["job_ids"], base["jct"], strict=True))
    per: dict[str, list[float]] = {}
    for j, m, x in zip(other["job_ids"], other["job_model"], other["jct"], strict=True):
        per.setdefault(m, []).append(tf[j] / x)
    return {m: float(np.mean(v)) for m, v in per.items()}


def _speedup_table(results: dict, key: str, seeds) -> dict:
    """Per model speedup of run ``key`` over tensorflow, averaged over seeds, and their ``mean``."""
    per_model: dict[str, list[float]] = {}
    for s in seeds:
        for m, v in _speedups(results[f"tensorflow/s{s}"], results[f"{key}/s{s}"]).items():
            per_model.setdefault(m, []).append(v)
    out = {m: float(np.mean(per_model[m])) for m in MODELS if m in per_model}
    out["mean"] = float(np.mean([out[m] for m in MODELS if m in out]))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paper", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="small scale for CI (under 2 minutes)")
    ap.add_argument("--scale", choices=tuple(SCALES), default=None, help="quick, default or paper")
    ap.add_argument("--out", default="bench/paper/out", help="output directory")
    ap.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    args = ap.parse_args(argv)
    scale_name = args.scale or ("quick" if args.quick else "default")
    sc = SCALES[scale_name]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    # decided once, so every run of a comparison sees the same DAGs
    real = real_models_available()
    tasks = []
    for seed in sc["seeds"]:
        for pol in POLICIES:
            tasks.append({"key": f"{pol}/s{seed}", "policy": pol, "seed": seed, "options": {},
                          "jobs": sc["jobs"], "hosts": sc["hosts"], "real": real})
        # beyond the paper: jobs take ports smallest busiest-port work first in the LAT pass
        tasks.append({"key": f"jit-smallest/s{seed}", "policy": "jit", "seed": seed,
                      "options": dict(JIT_SMALLEST), "jobs": sc["jobs"], "hosts": sc["hosts"],
                      "real": real})
        for a in sc["alphas"]:
            if a == 0.4:
                continue  # the main jit run is alpha 0.4
            tasks.append({"key": f"jit-a{a}/s{seed}", "policy": "jit", "seed": seed,
                          "options": {"alpha": a}, "alpha": a, "jobs": sc["jobs"], "hosts": sc["hosts"],
                          "real": real})
    from tqdm import tqdm

    results: dict[str, dict] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as ex:
        futs = [ex.submit(run_one, t) for t in tasks]
        for fut in tqdm(as_completed(futs), total=len(futs), desc="simulations", unit="run"):
            r = fut.result()
            results[r["key"]] = r
    lp_rows = []
    for n in tqdm(sc["lp_jobs"], desc="LP solve times", unit="size"):
        lp_rows.append({"jobs": n, "seconds": float(np.median([lp_time(n, s) for s in range(3)]))})

    seeds = sc["seeds"]
    summary: dict = {"scale": scale_name, "hosts": sc["hosts"], "dl_jobs": sc["jobs"],
                     "seeds": list(seeds), "real_model_dags": real}
    summary["speedup"] = {pol: _speedup_table(results, pol, seeds) for pol in POLICIES}
    summary["waiting_time_s"] = {
        pol: {m: float(np.mean([results[f"{pol}/s{s}"]["waiting"][m] for s in seeds
                                if m in results[f"{pol}/s{s}"]["waiting"]]))
              for m in MODELS if any(m in results[f"{pol}/s{s}"]["waiting"] for s in seeds)}
        for pol in POLICIES}
    summary["remaining_bw"] = {}
    for pol in POLICIES:
        bw = np.concatenate([results[f"{pol}/s{s}"]["remaining_bw"] for s in seeds])
        summary["remaining_bw"][pol] = {"min": float(bw.min()), "median": float(np.median(bw))}
    summary["background_slowdown"] = {}
    for pol in POLICIES:
        size = np.concatenate([results[f"{pol}/s{s}"]["bg_size"] for s in seeds])
        slow = np.concatenate([results[f"{pol}/s{s}"]["bg_slowdown"] for s in seeds])
        by = {f"{v * 8 / 1e9:g}": float(slow[size == v].mean()) for v in np.unique(size)}
        summary["background_slowdown"][pol] = {"mean": float(slow.mean()) if len(slow) else None,
                                               "by_size_gbit": by}
    sweep = []
    for a in sc["alphas"]:
        key = "jit" if a == 0.4 else f"jit-a{a}"
        sp, bw = [], []
        for s in seeds:
            r = results[f"{key}/s{s}"]
            d = _speedups(results[f"tensorflow/s{s}"], r)
            sp.append(np.mean(list(d.values())))
            bw.append(np.median(r["remaining_bw"]))
        sweep.append({"alpha": a, "speedup": float(np.mean(sp)), "remaining_bw": float(np.mean(bw))})
    summary["alpha_sweep"] = sweep
    slow = np.concatenate([results[f"jit-smallest/s{s}"]["bg_slowdown"] for s in seeds])
    summary["jit_variants"] = {"jit-smallest": {
        "options": JIT_SMALLEST, "speedup": _speedup_table(results, "jit-smallest", seeds),
        "background_slowdown": float(slow.mean()) if len(slow) else None}}
    summary["lp_time_s"] = lp_rows
    summary["sim_wall_s"] = {pol: float(np.median([results[f"{pol}/s{s}"]["wall_s"] for s in seeds]))
                             for pol in POLICIES}
    summary["jit_plan_s"] = float(np.median([results[f"jit/s{s}"]["lp_s"] for s in seeds]))
    summary["jit_lat_misses"] = [results[f"jit/s{s}"]["lat_misses"] for s in seeds]
    # Only planned transfers had a deadline JIT tried to meet; the others (beyond
    # alpha) share the leftover and their LAT is an estimate, not a commitment.
    summary["jit_lat_misses_scheduled"] = [results[f"jit/s{s}"]["lat_misses_scheduled"] for s in seeds]
    summary["jit_transfers"] = [results[f"jit/s{s}"]["transfers_done"] for s in seeds]
    summary["paper"] = PAPER
    summary["runtime_s"] = time.perf_counter() - t_start
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    _write_csv(out, summary, results, seeds)
    _figures(out, summary, results, seeds)
    (out / "summary.md").write_text(_markdown(summary))
    print((out / "summary.md").read_text())
    return 0


def _write_csv(out: Path, summary: dict, results: dict, seeds) -> None:
    with open(out / "jct.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "seed", "job", "model", "jct_s"])
        for pol in POLICIES:
            for s in seeds:
                r = results[f"{pol}/s{s}"]
                for j, m, x in zip(r["job_ids"], r["job_model"], r["jct"], strict=True):
                    w.writerow([pol, s, j, m, f"{x:.6f}"])
    with open(out / "remaining_bw.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "seed", "host", "remaining_ratio"])
        for pol in POLICIES:
            for s in seeds:
                for h, x in enumerate(results[f"{pol}/s{s}"]["remaining_bw"]):
                    w.writerow([pol, s, h, f"{x:.6f}"])
    with open(out / "background.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["policy", "seed", "size_gbit", "slowdown"])
        for pol in POLICIES:
            for s in seeds:
                r = results[f"{pol}/s{s}"]
                for b, x in zip(r["bg_size"], r["bg_slowdown"], strict=True):
                    w.writerow([pol, s, f"{b * 8 / 1e9:g}", f"{x:.6f}"])
    with open(out / "alpha_sweep.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["alpha", "speedup", "remaining_bw_median"])
        for row in summary["alpha_sweep"]:
            w.writerow([row["alpha"], f"{row['speedup']:.4f}", f"{row['remaining_bw']:.4f}"])
    with open(out / "lp_time.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["jobs", "seconds"])
        for row in summary["lp_time_s"]:
            w.writerow([row["jobs"], f"{row['seconds']:.4f}"])


def _figures(out: Path, summary: dict, results: dict, seeds) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(MODELS))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for k, pol in enumerate(POLICIES[1:]):
        ax.bar(x + (k - 1) * 0.25, [summary["speedup"][pol].get(m, np.nan) for m in MODELS], 0.25, label=pol)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, [DISPLAY[m] for m in MODELS])
    ax.set_ylabel("speedup vs TensorFlow")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig5_speedup.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for k, pol in enumerate(POLICIES):
        ax.bar(x + (k - 1.5) * 0.2, [summary["waiting_time_s"][pol].get(m, np.nan) for m in MODELS], 0.2, label=pol)
    ax.set_xticks(x, [DISPLAY[m] for m in MODELS])
    ax.set_ylabel("mean data waiting time (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig6_waiting.png", dpi=120)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=True)
    for ax, pol in zip(axes, ("tensorflow", "jit"), strict=True):
        f7 = results[f"{pol}/s{seeds[0]}"]["fig7"]
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

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for pol in POLICIES:
        bw = np.sort(np.concatenate([results[f"{pol}/s{s}"]["remaining_bw"] for s in seeds]))
        ax.plot(bw, np.arange(1, len(bw) + 1) / len(bw), label=pol)
    ax.set_xlabel("remaining egress bandwidth ratio")
    ax.set_ylabel("CDF over hosts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig8_remaining_bw_cdf.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 3.5))
    sizes = sorted({k for pol in POLICIES for k in summary["background_slowdown"][pol]["by_size_gbit"]}, key=float)
    xs = np.arange(len(sizes))
    for k, pol in enumerate(POLICIES):
        by = summary["background_slowdown"][pol]["by_size_gbit"]
        ax.bar(xs + (k - 1.5) * 0.2, [by.get(s, np.nan) for s in sizes], 0.2, label=pol)
    ax.set_xticks(xs, [f"{s} Gbit" for s in sizes])
    ax.set_ylabel("background slowdown")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "fig9_background_slowdown.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    sw = summary["alpha_sweep"]
    ax.plot([r["alpha"] for r in sw], [r["speedup"] for r in sw], "o-", label="speedup")
    ax2 = ax.twinx()
    ax2.plot([r["alpha"] for r in sw], [r["remaining_bw"] for r in sw], "s--", color="C1",
             label="median remaining bw")
    ax.set_xlabel("alpha")
    ax.set_ylabel("speedup")
    ax2.set_ylabel("median remaining bandwidth ratio")
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


def _fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _markdown(s: dict) -> str:
    p = s["paper"]
    sp = s["speedup"]
    lines = [
        f"# jitsched vs the paper (scale {s['scale']}: {s['hosts']} hosts, {s['dl_jobs']} DL jobs/seed, "
        f"seeds {s['seeds']}, real model DAGs: {s['real_model_dags']})",
        "",
        "| Figure | metric | jitsched | paper |",
        "|---|---|---|---|",
    ]
    for m in MODELS:
        lines.append(f"| 5 | JIT speedup {DISPLAY[m]} | {_fmt(sp['jit'].get(m))} | {p['speedup']['jit'][m]} |")
    lines.append(f"| 5 | JIT mean speedup | {_fmt(sp['jit']['mean'])} | 1.55 |")
    lines.append(f"| 5 | TicTac mean speedup (LeNet) | {_fmt(sp['tictac']['mean'])} ({_fmt(sp['tictac'].get('lenet'))}) | 1.23 (1.40) |")
    lines.append(f"| 5 | Sincronia mean speedup | {_fmt(sp['sincronia']['mean'])} | < 1 |")
    w = s["waiting_time_s"]
    for pol in POLICIES:
        lines.append(f"| 6 | Inception waiting time, {pol} (s) | {_fmt(w[pol].get('inception_v3'))} | "
                     f"{p['waiting_time_s'].get(pol, {}).get('inception_v3', '-')} |")
    for pol in POLICIES:
        bw = s["remaining_bw"][pol]
        pp = p["remaining_bw"].get(pol, {})
        lines.append(f"| 8 | remaining bw min / median, {pol} | {_fmt(bw['min'])} / {_fmt(bw['median'])} | "
                     f"{pp.get('min', '-')} / {pp.get('median', '-')} |")
    for pol in POLICIES:
        lines.append(f"| 9 | background slowdown mean, {pol} | "
                     f"{_fmt(s['background_slowdown'][pol]['mean'])} | {p['background_slowdown'][pol]} |")
    by = s["background_slowdown"]["jit"]["by_size_gbit"]
    lines.append(f"| 9 | JIT slowdown by size (Gbit) | {', '.join(f'{k}: {v:.2f}' for k, v in by.items())} | "
                 "5: 1.20, 10: 1.30, 20: 1.45, 30: 1.75, 40: 2.10 |")
    sw = s["alpha_sweep"]
    lines.append(f"| 10 | speedup alpha {sw[0]['alpha']} -> {sw[-1]['alpha']} | {sw[0]['speedup']:.3f} -> "
                 f"{sw[-1]['speedup']:.3f} | 1.09 -> 1.62 (0.1 -> 0.6) |")
    lines.append(f"| 10 | median remaining bw alpha {sw[0]['alpha']} -> {sw[-1]['alpha']} | "
                 f"{sw[0]['remaining_bw']:.3f} -> {sw[-1]['remaining_bw']:.3f} | 0.482 -> 0.324 |")
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
        f"Simulator wall time per run (s): {', '.join(f'{k} {v:.1f}' for k, v in s['sim_wall_s'].items())}; "
        f"JIT planning inside the jit run: {s['jit_plan_s']:.1f} s; JIT LAT misses per seed: "
        f"{s['jit_lat_misses_scheduled']} of planned transfers (real misses: release slipped or a "
        f"plan fell behind), {s['jit_lat_misses']} counting unplanned ones (beyond alpha, no "
        f"deadline), of {s['jit_transfers']} transfers. "
        f"Total bench runtime {s['runtime_s']:.0f} s.",
        "",
        "Figures: fig5_speedup.png, fig6_waiting.png, fig7_arrival_vs_use.png, fig8_remaining_bw_cdf.png, "
        "fig9_background_slowdown.png, fig10_alpha.png, fig11_lp_time.png; data: jct.csv, remaining_bw.csv, "
        "background.csv, alpha_sweep.csv, lp_time.csv, summary.json.",
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
        "- Remaining bandwidth is much higher here than in the paper for every policy (Fig. 8): the",
        "  generator offers load 0.5 on random host pairs, so most ports idle most of the time; the",
        "  paper does not give its offered load. The policies differ little on this metric.",
        "- TicTac orders only DL transfers; background flows compete TCP-fair with the DL aggregate.",
        "  Sincronia orders every coflow, background flows included (each is a one-flow coflow).",
        "- Remaining bandwidth is each host egress's time average over the window from the first",
        "  DL arrival to the last DL finish; the paper's sampling is not described.",
        "- The DL DAGs are the packaged real TensorFlow graphs when available, else Table-1-sized",
        "  layer-chain stand-ins (see bench/paper/workload.py) with assumed GPU-like compute times.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
