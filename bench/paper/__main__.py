"""Reproduce the paper's Figures 5-11 and compare the policies at two operating points: ``python -m bench.paper [--quick] [--out DIR] [--json]``.

Operating points: ``load0.5`` (offered load 0.5, files 20 % of the jobs) and
``paper``, the load at which tensorflow's mean background slowdown is the
paper's 2.23 (calibrated, cached in ``paper_load.json``), plus a load sweep.
Figures 5-7 and 9-10 are drawn at the paper point, Figure 8 at both.
``--regimes`` runs only the link-rate sweep, ``--mixed`` only the
mixed-shape point (parameter-server, sharded and all-reduce jobs of many
workers).
"""

# One module although past 500 lines: the command line of every bench.paper run
# (figures, points, calibration, regimes, mixed point), dispatching to the package's
# modules, which hold the workloads, metrics and reports.

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from jitsched.bench.common import require_matplotlib
from jitsched.bench.paper.metrics import dominance_line, point_metrics, pooled
from jitsched.bench.paper.regimes import REGIME_SEEDS
from jitsched.bench.paper.report import figures, legacy_summary, markdown, write_csv
from jitsched.bench.paper.spec import (
    BASELINES,
    CALIBRATION_EVALS,
    CALIBRATION_LOADS,
    CALIBRATION_SHARES,
    COST,
    DEFAULT_SHARE,
    JIT,
    JIT_SMALLEST,
    MAIN_POINTS,
    PAPER,
    PAPER_POLICY,
    PAPER_TF_BG_SLOWDOWN,
    PARETO_KNOB,
    POLICIES,
    REFERENCE,
    SCALES,
)
from jitsched.bench.paper.workload import MODELS, model_job, paper_workload, real_models_available
from jitsched.workloads.paper import MODELS as MIXED_MODELS


def log(msg: str) -> None:
    """Progress notes go to stderr: stdout carries the --json line."""
    print(msg, file=sys.stderr, flush=True)


def run_policies() -> tuple[str, ...]:
    """:data:`POLICIES`, plus the paper policy (``jit-paper``) when one is registered."""
    return POLICIES + ((PAPER_POLICY,) if PAPER_POLICY is not None else ())


def options_error(policy: str, options: dict) -> str | None:
    """Why ``policy`` cannot be made with ``options`` (None: it can)."""
    from jitsched.errors import ValidationError
    from jitsched.policies import make_policy

    try:
        make_policy(policy, **options)
    except (TypeError, ValueError, ValidationError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def point_name(load: float) -> str:
    """Name of the operating point at offered ``load`` with the default file share."""
    return f"load{load:g}"


def variant_name(policy: str, options: dict) -> str:
    """Result label of ``policy`` with ``options`` (the bare name without options)."""
    if not options:
        return policy
    return f"{policy}[{','.join(f'{k}={v:g}' if isinstance(v, float) else f'{k}={v}' for k, v in options.items())}]"


def run_one(task: dict) -> dict:
    """One simulation in a worker process; returns compact, picklable results."""
    from jitsched.sim import simulate

    wl = paper_workload(task["jobs"], n_hosts=task["hosts"], load=task["load"],
                        background_share=task["share"], seed=task["seed"], real=task["real"])
    res = simulate(wl, task["policy"], seed=task["seed"], policy_options=task["options"])
    if task.get("brief"):  # calibration: the background slowdown is all it needs
        return {"key": task["key"], "bg_slowdown": res.bg_slowdown.tolist()}
    models = np.asarray(res.job_model, dtype=object)
    fig7 = None
    inc = np.flatnonzero(models == "inception_v3")
    if len(inc):
        sel = res.transfer_job == inc[0]
        fig7 = {"arrival": (res.transfer_arrival_s[sel] - res.job_arrival_s[inc[0]]).tolist(),
                "use": (res.consumer_start_s[sel] - res.job_arrival_s[inc[0]]).tolist()}
    st = res.stats
    return {
        "key": task["key"], "point": task["point"], "variant": task["variant"], "policy": task["policy"],
        "options": task["options"], "seed": task["seed"],
        "job_ids": res.job_ids, "job_model": res.job_model, "jct": res.jct_s.tolist(),
        "waiting": res.waiting_by_model(), "remaining_bw": res.remaining_bw.tolist(),
        "remaining_bw_slots": res.remaining_bw_slots.tolist(),
        "remaining_bw_contended": res.remaining_bw_contended.tolist(),
        "bg_size": res.bg_size.tolist(), "bg_slowdown": res.bg_slowdown.tolist(),
        "wall_s": res.wall_s, "lp_s": res.lp_s, "lat_misses": st.get("lat_misses"),
        "lat_misses_scheduled": st.get("lat_misses_scheduled"), "transfers_done": st.get("transfers_done"),
        "solves": st.get("solves", 0), "fig7": fig7,
    }


def lp_time(n_jobs: int, seed: int = 0) -> float:
    """Wall time of one JIT plan (LAT + LP) of ``n_jobs`` VGG16 jobs arriving together, seconds."""
    from jitsched.dag.model import Cluster
    from jitsched.plan.planner import plan_jobs
    from jitsched.workloads.synth import random_vgg16_jobs

    cl = Cluster.uniform(100)
    jobs = random_vgg16_jobs(n_jobs, cl.names, seed=seed)
    t0 = time.perf_counter()
    plan_jobs(jobs, cl)
    return time.perf_counter() - t0


# ---------------------------------------------------------------- calibration

def _scale(scale: str | dict) -> dict:
    return SCALES[scale] if isinstance(scale, str) else scale


def tf_bg_slowdown(scale: str | dict, load: float, share: float, *, executor=None,
                   real: bool | None = None) -> float:
    """The reference's mean background slowdown at ``load`` and file ``share``, mean over the scale's calibration seeds."""
    sc = _scale(scale)
    real = real_models_available() if real is None else real
    tasks = [{"key": f"cal/s{s}", "policy": REFERENCE, "options": {}, "seed": s, "jobs": sc["jobs"],
              "hosts": sc["hosts"], "load": load, "share": share, "real": real, "brief": True}
             for s in sc["calibration_seeds"]]
    runs = list(executor.map(run_one, tasks)) if executor is not None else [run_one(t) for t in tasks]
    per_seed = [np.mean(r["bg_slowdown"]) for r in runs if r["bg_slowdown"]]
    return float(np.mean(per_seed)) if per_seed else 1.0  # no file at all: nothing slowed down


def calibrate_paper_point(scale: str | dict, *, slowdown=None, target: float = PAPER_TF_BG_SLOWDOWN,
                          loads: tuple[float, float] = CALIBRATION_LOADS,
                          shares: tuple[float, ...] = CALIBRATION_SHARES,
                          evals: int = CALIBRATION_EVALS, executor=None) -> dict:
    """The offered load (and file share) at which tensorflow's background slowdown is closest to ``target``.

    Bisection on the load over ``loads`` at the default file share, assuming
    the slowdown grows with the load (noise is tolerated: the answer is the
    evaluated point closest to the target, not the last bisection step). When
    even the top load falls short, the file share is raised through
    ``shares`` at the top load, then the load is bisected at the first share
    that reaches the target.

    Parameters
    ----------
    scale : str or dict
        A :data:`SCALES` name or entry (hosts, jobs, seeds).
    slowdown : callable, optional
        ``slowdown(load, share) -> float``, the mean background slowdown
        (default: simulate tensorflow, :func:`tf_bg_slowdown`). Injectable for tests.
    target : float
        Wanted mean background slowdown (the paper's tensorflow: 2.23).
    loads : (float, float)
        Offered-load bracket (fraction of the cluster's egress).
    shares : tuple of float
        File shares (by count) tried when the top load falls short.
    evals : int
        Evaluations of ``slowdown`` at most (the share escalation included).
    executor : Executor, optional
        Runs the default ``slowdown``'s seeds in parallel.

    Returns
    -------
    dict
        ``load``, ``background_share``, ``tf_bg_slowdown`` of the chosen point,
        ``target`` and every evaluation as ``[load, share, slowdown]``.
    """
    if slowdown is None:
        def slowdown(load, share):
            return tf_bg_slowdown(scale, load, share, executor=executor)
    seen: list[tuple[float, float, float]] = []

    def f(load: float, share: float) -> float:
        y = float(slowdown(load, share))
        seen.append((float(load), float(share), y))
        log(f"calibration: load {load:.4g}, file share {share:g}: tensorflow background slowdown {y:.3f}")
        return y

    lo, hi = loads
    share = DEFAULT_SHARE
    y_hi = f(hi, share)
    for s in shares:
        if y_hi >= target or len(seen) >= evals - 1:
            break
        share = s
        y_hi = f(hi, share)
    if y_hi >= target and len(seen) < evals:
        y_lo = f(lo, share)
        if y_lo < target:
            a, b = lo, hi
            while len(seen) < evals:
                mid = 0.5 * (a + b)
                if f(mid, share) < target:
                    a = mid
                else:
                    b = mid
    return {**select_calibration(seen, target), "target": target, "evaluations": [list(e) for e in seen]}


def select_calibration(evaluations, target: float = PAPER_TF_BG_SLOWDOWN) -> dict:
    """The evaluation ``(load, share, slowdown)`` closest to ``target``; ties: the lower share, then load."""
    load, share, y = min(evaluations, key=lambda e: (abs(e[2] - target), e[1], e[0]))
    return {"load": float(load), "background_share": float(share), "tf_bg_slowdown": float(y)}


def calibrate_paper_load(scale: str | dict, **kwargs) -> float:
    """The paper point's offered load: :func:`calibrate_paper_point`'s ``load`` (same arguments)."""
    return calibrate_paper_point(scale, **kwargs)["load"]


def _calibration_key(scale_name: str, sc: dict, real: bool) -> str:
    return (f"{scale_name}|hosts={sc['hosts']}|jobs={sc['jobs']}|seeds={','.join(map(str, sc['calibration_seeds']))}"
            f"|real={real}|target={PAPER_TF_BG_SLOWDOWN}")


def paper_point(args, scale_name: str, sc: dict, real: bool, out: Path, executor) -> dict:
    """The paper point: from ``--paper-load``, the cache in ``out``, or a calibration (then cached)."""
    if args.paper_load is not None:
        return {"load": float(args.paper_load), "background_share": float(args.paper_share),
                "tf_bg_slowdown": None, "source": "--paper-load"}
    path = out / "paper_load.json"
    key = _calibration_key(scale_name, sc, real)
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        log(f"paper point from {path}: load {cache[key]['load']:.4g}")
        return {**cache[key], "source": f"cached ({path.name})"}
    t0 = time.perf_counter()
    cal = calibrate_paper_point(sc, slowdown=lambda load, share: tf_bg_slowdown(
        sc, load, share, executor=executor, real=real))
    cal["calibration_s"] = time.perf_counter() - t0
    cache[key] = cal
    path.write_text(json.dumps(cache, indent=1))
    return {**cal, "source": "calibrated"}


# ---------------------------------------------------------------- runs

def isolated_jcts(n_hosts: int, real: bool) -> tuple[dict[str, float], float]:
    """Per model, the JCT of one job alone on the cluster under the reference (tensorflow), seconds.

    A job alone gets the same JCT under any work-conserving policy, and all
    jobs of a model have the same DAG (only the two hosts differ), so one run
    per model serves every job. Checked with a second job on other hosts
    arriving later.

    Returns
    -------
    iso : dict
        Model -> isolated JCT, seconds.
    check : float
        Largest relative difference between the two jobs of a model.
    """
    from jitsched.dag.model import Cluster, Workload
    from jitsched.sim import simulate

    cl = Cluster.uniform(n_hosts)
    names = cl.names
    iso, worst = {}, 0.0
    for m in MODELS:
        jcts = []
        for k, (a, b, arrival) in enumerate(((0, 1, 0.0), (n_hosts - 1, n_hosts - 2, 1.0))):
            job = model_job(m, names[a], names[b], f"{m}-alone{k}", arrival, real=real)
            jcts.append(float(simulate(Workload(cl, (job,), ()), REFERENCE).jct_s[0]))
        iso[m] = jcts[0]
        worst = max(worst, abs(jcts[1] - jcts[0]) / jcts[0])
    return iso, worst


def plan_runs(sc: dict, points: dict, pols: tuple[str, ...]) -> tuple[list[tuple], list[str]]:
    """Every (point, variant, policy, options, seeds) to simulate, and notes on the variants skipped."""
    from jitsched.policies import POLICIES as REGISTRY

    runs, notes = [], []
    for pt in MAIN_POINTS:
        runs += [(pt, pol, pol, {}, sc["seeds"]) for pol in pols]
    for load in sc["loads"]:
        if point_name(load) not in MAIN_POINTS:
            runs += [(point_name(load), pol, pol, {}, sc["extra_seeds"]) for pol in pols]
    def valid(pol: str, opt: str, values, what: str) -> list:
        # the values the policy accepts; a note for the others (an option
        # another branch has not added yet must not stop the bench)
        if pol not in REGISTRY:
            notes.append(f"{what} skipped: policy {pol!r} not registered")
            return []
        ok = []
        for v in values:
            err = options_error(pol, {opt: v})
            if err is None:
                ok.append(v)
            else:
                notes.append(f"{what}: {opt}={v} skipped: {err}")
        return ok

    kpol, opt, values = PARETO_KNOB
    for v in valid(kpol, opt, values, f"Pareto curve of {kpol} over {opt}"):
        runs += [(pt, variant_name(kpol, {opt: v}), kpol, {opt: v}, sc["extra_seeds"]) for pt in MAIN_POINTS]
    apol = PAPER_POLICY if PAPER_POLICY in pols else JIT
    for a in valid(apol, "alpha", sc["alphas"], f"alpha sweep of {apol}"):
        runs.append(("paper", variant_name(apol, {"alpha": a}), apol, {"alpha": a}, sc["extra_seeds"]))
    err = options_error(JIT, JIT_SMALLEST)
    if err is None:
        runs.append(("paper", "jit-smallest", JIT, dict(JIT_SMALLEST), sc["extra_seeds"]))
    else:
        notes.append(f"jit-smallest variant skipped: {err}")
    for n in notes:
        log("note: " + n)
    return runs, notes


def make_tasks(sc: dict, points: dict, runs: list[tuple], real: bool) -> list[dict]:
    """One task per run and seed, the most expensive first (the pool then ends with short runs)."""
    tasks = {}
    for pt, variant, pol, opts, seeds in runs:
        for s in seeds:
            key = f"{pt}/{variant}/s{s}"
            tasks[key] = {"key": key, "point": pt, "variant": variant, "policy": pol, "options": dict(opts),
                          "seed": s, "jobs": sc["jobs"], "hosts": sc["hosts"], "real": real,
                          "load": points[pt]["load"], "share": points[pt]["share"]}
    # busier networks mean more concurrent flows per allocation
    return sorted(tasks.values(), reverse=True,
                  key=lambda t: COST.get(t["policy"], 13.0) * (0.5 + t["load"]) * (1 + t["share"]))


# ---------------------------------------------------------------- metrics

# ---------------------------------------------------------------- main

def regime_sweep(args: argparse.Namespace, out: Path) -> int:
    """``--regimes``: the sweep, its table (stderr, or stdout without --json), figure and JSON line."""
    from tqdm import tqdm

    from jitsched.bench.paper import regimes

    pols = run_policies()
    seeds = list(range(args.regime_first_seed, args.regime_first_seed + args.regime_seeds))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as ex, \
            tqdm(total=len(regimes.RATES_BPS) * len(seeds), desc="regime workloads", unit="run") as bar:
        runs = regimes.sweep(ex, seeds, pols, progress=bar.update)
    summary = regimes.summarize(runs, pols, REFERENCE, JIT)
    (out / "regimes.json").write_text(json.dumps(regimes.document(summary), indent=1))
    regimes.figure(summary, pols, out / "regimes.png")
    text = regimes.table(summary, pols, JIT)
    log(f"regime sweep: {time.perf_counter() - t0:.0f} s; wrote {out / 'regimes.json'} and {out / 'regimes.png'}")
    if args.json:
        log(text)
        print(json.dumps(regimes.document(summary)))
    else:
        print(text)
    return 0


def mixed_point(args: argparse.Namespace, out: Path) -> int:
    """``--mixed``: the mixed-shape point, its table (stderr, or stdout without --json) and JSON line."""
    from tqdm import tqdm

    from jitsched.bench.paper import mixed

    pols = run_policies()
    point = mixed.MixedPoint(n_jobs=args.mixed_jobs,
                             models=tuple(m for m in args.mixed_models.split(",") if m))
    seeds = list(range(args.mixed_seeds))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as ex, \
            tqdm(total=len(seeds), desc="mixed-shape workloads", unit="run") as bar:
        runs = mixed.sweep(ex, point, seeds, pols, progress=bar.update)
    summary = mixed.summarize(runs, pols, REFERENCE) | {"workload": point.command(seeds[0])}
    (out / "mixed.json").write_text(json.dumps({"mixed": summary}, indent=1))
    text = mixed.table(summary, pols)
    log(f"mixed-shape point: {time.perf_counter() - t0:.0f} s; wrote {out / 'mixed.json'}")
    if args.json:
        log(text)
        print(json.dumps({"mixed": summary}))
    else:
        print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.paper", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small scale for CI (under 2 minutes)")
    ap.add_argument("--scale", choices=tuple(SCALES), default=None, metavar="{quick,default,paper}",
                    help="quick, default or paper")
    ap.add_argument("--out", default="bench/paper/out", help="output directory")
    ap.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    ap.add_argument("--paper-load", type=float, default=None,
                    help="offered load of the paper point (skips the calibration)")
    ap.add_argument("--paper-share", type=float, default=DEFAULT_SHARE,
                    help=f"file share of the jobs at the paper point with --paper-load (default {DEFAULT_SHARE})")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line of the headline metrics per point and policy on stdout")
    ap.add_argument("--regimes", action="store_true",
                    help="only the regime sweep: every policy at 1, 10, 40 and 100 Gbit/s links (load 0.5, "
                         "60 jobs, 20 hosts) against the lower bound, with 95 %% confidence intervals")
    ap.add_argument("--regime-seeds", type=int, default=REGIME_SEEDS, metavar="N",
                    help=f"seeds per link rate in the regime sweep (default {REGIME_SEEDS})")
    ap.add_argument("--regime-first-seed", type=int, default=0, metavar="S",
                    help="the regime sweep's first seed (default 0): seeds S .. S+N-1, so that other "
                         "workloads than the default's can be checked")
    ap.add_argument("--mixed", action="store_true",
                    help="only the mixed-shape point: parameter-server (4 workers), sharded (2 servers) and "
                         "ring all-reduce jobs in one stream (load 0.5, 20 hosts, 10 Gbit/s), every policy, "
                         "against the lower bound")
    ap.add_argument("--mixed-seeds", type=int, default=3, metavar="N",
                    help="seeds of the mixed-shape point (default 3)")
    ap.add_argument("--mixed-jobs", type=int, default=40, metavar="N",
                    help="jobs per seed of the mixed-shape point, files included (default 40)")
    ap.add_argument("--mixed-models", default=",".join(MIXED_MODELS), metavar="M,M",
                    help="models of the mixed-shape point's jobs (default all five)")
    args = ap.parse_args(argv)
    if args.mixed and (args.mixed_seeds < 1 or args.mixed_jobs < 1):
        ap.error("--mixed-seeds and --mixed-jobs: at least 1")
    if args.regimes and args.regime_seeds < 2:
        ap.error("--regime-seeds: at least 2 (confidence intervals)")
    if args.regime_first_seed < 0:
        ap.error("--regime-first-seed: at least 0")
    try:
        require_matplotlib()  # the run ends with figures: say now, not after it, if it cannot draw them
    except ImportError as exc:
        ap.error(str(exc))
    scale_name = args.scale or ("quick" if args.quick else "default")
    sc = SCALES[scale_name]
    if not set(sc["extra_seeds"]) <= set(sc["seeds"]):
        raise ValueError("extra_seeds must be among seeds (speedups need the reference on the same seed)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.regimes:
        return regime_sweep(args, out)
    if args.mixed:
        return mixed_point(args, out)
    t_start = time.perf_counter()
    # decided once, so every run of a comparison sees the same DAGs
    real = real_models_available()
    pols = run_policies()
    from tqdm import tqdm

    results: dict[str, dict] = {}
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as ex:
        paper = paper_point(args, scale_name, sc, real, out, ex)
        points = {"load0.5": {"load": 0.5, "share": DEFAULT_SHARE},
                  "paper": {"load": paper["load"], "share": paper["background_share"]}}
        for load in sc["loads"]:
            points.setdefault(point_name(load), {"load": load, "share": DEFAULT_SHARE})
        runs, notes = plan_runs(sc, points, pols)
        tasks = make_tasks(sc, points, runs, real)
        futs = [ex.submit(run_one, t) for t in tasks]
        # while the pool works: one job of each model alone (cheap)
        iso, iso_check = isolated_jcts(sc["hosts"], real)
        if iso_check > 1e-9:
            log(f"warning: isolated JCT depends on the hosts (relative difference {iso_check:.2e})")
        for fut in tqdm(as_completed(futs), total=len(futs), desc="simulations", unit="run"):
            r = fut.result()
            results[r["key"]] = r
    lp_rows = []
    for n in tqdm(sc["lp_jobs"], desc="LP solve times", unit="size"):
        lp_rows.append({"jobs": n, "seconds": float(np.median([lp_time(n, s) for s in range(3)]))})
    if paper["tf_bg_slowdown"] is None:  # given by --paper-load: report what it gave
        slow = pooled([results[f"paper/{REFERENCE}/s{s}"] for s in sc["seeds"]], "bg_slowdown")
        paper["tf_bg_slowdown"] = float(np.mean(slow)) if len(slow) else None

    seeds, extra = sc["seeds"], sc["extra_seeds"]
    summary: dict = {"scale": scale_name, "hosts": sc["hosts"], "dl_jobs": sc["jobs"], "seeds": list(seeds),
                     "extra_seeds": list(extra), "real_model_dags": real, "policies": list(pols),
                     "paper_point": paper, "notes": notes, "isolated_jct_s": iso,
                     "isolated_jct_host_check": iso_check}
    summary["points"] = {
        pt: {"load": points[pt]["load"], "background_share": points[pt]["share"], "seeds": list(seeds),
             "metrics": {pol: point_metrics(results, pt, pol, seeds, iso) for pol in pols}}
        for pt in MAIN_POINTS}
    summary["dominance"] = {pt: {c: dominance_line(pt, summary["points"][pt]["metrics"], c)
                                 for c in pols if c not in BASELINES} for pt in MAIN_POINTS}
    summary["load_sweep"] = [
        {"point": point_name(load), "load": load, "seeds": list(extra),
         "metrics": {pol: point_metrics(results, point_name(load), pol, extra, iso) for pol in pols}}
        for load in sc["loads"]]
    kpol, opt, values = PARETO_KNOB
    summary["pareto_knob"] = {"policy": kpol, "option": opt, "seeds": list(extra), "points": {
        pt: [{"value": v, **(point_metrics(results, pt, variant_name(kpol, {opt: v}), extra, iso) or {})}
             for v in values if f"{pt}/{variant_name(kpol, {opt: v})}/s{extra[0]}" in results]
        for pt in MAIN_POINTS}}
    legacy_summary(summary, results, pols, seeds, extra, lp_rows)
    summary["paper"] = PAPER
    summary["runtime_s"] = time.perf_counter() - t_start
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    write_csv(out, summary, results, pols, seeds)
    figures(out, summary, results, pols, seeds)
    (out / "summary.md").write_text(markdown(summary))
    log(f"wrote {out / 'summary.md'} and the figures in {out} ({summary['runtime_s']:.0f} s)")
    if args.json:
        line = {"scale": scale_name, "paper_load": paper["load"],
                "points": {pt: {pol: summary["points"][pt]["metrics"][pol] for pol in pols}
                           for pt in MAIN_POINTS}}
        print(json.dumps(line))
    else:
        print((out / "summary.md").read_text())
    return 0

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
