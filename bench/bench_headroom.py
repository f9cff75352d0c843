"""How far a better job order could take jit on the regime workloads: a search, with hindsight, over a weight per job in jit's keys.

Why this bench: at 10 Gbit/s jit's mean JCT is a few per cent under Sincronia's,
and the lower bound (``jitsched.plan.bound``) leaves more room than that, but
cannot say whether any schedule reaches it. This bench asks a narrower question
that can be answered: how much lower could jit's mean JCT be on a workload if
its job order were changed, job by job, knowing the whole workload in advance?

For each workload it runs coordinate descent over one factor per DL job on that
job's size in jit's Smith's-rule key (``JitOptions.job_exp``): each job in turn
tries each of ``--factors`` (a factor under 1 ranks it earlier), keeping the
first that lowers the mean JCT of the whole simulated run, for ``--passes``
passes. Every other part of jit stays as it is (its order inside a job, the
files' keys, work conservation). What it finds is a schedule jit's order can
produce, so it is an upper bound on what is left to any online job-ranking rule
built on jit's keys, not a lower bound on the best schedule.

Usage: ``python bench/bench_headroom.py [--bps 1e10] [--seeds 10] [--passes 1]
[--factors 0.25,4,0.5,2] [--n-jobs 60] [--workers 2] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from jitsched.bench.paper.regimes import LOAD, N_HOSTS, N_JOBS, ci95
from jitsched.policies.jit import JitPolicy
from jitsched.sim import simulate
from jitsched.workloads.paper import generate_workload

FACTORS = (0.25, 4.0, 0.5, 2.0)


class WeightedJit(JitPolicy):
    """The default jit with each job's size in its keys times a fixed factor (``factor``, per job index)."""

    factor: np.ndarray | None = None

    def _job_scales(self, dag, n_hosts: int) -> np.ndarray:
        base = super()._job_scales(dag, n_hosts)
        return base if self.factor is None else base * self.factor


def weighted_mean_jct(workload, factor: np.ndarray | None, seed: int) -> float:
    """Mean JCT (seconds) of ``workload``'s jobs under jit with per-job ``factor`` (None: jit itself)."""
    p = WeightedJit()
    p.factor = factor
    return float(np.mean(simulate(workload, p, seed=seed).jct_s))


def search(task: tuple[float, int, int, int, tuple[float, ...]]) -> dict:
    """One workload (rate, seed, jobs): Sincronia's and jit's mean JCT and the best the search found."""
    bps, seed, n_jobs, passes, factors = task
    t0 = time.perf_counter()
    wl = generate_workload(LOAD, n_jobs=n_jobs, n_hosts=N_HOSTS, bps=bps, seed=seed)
    n = len(wl.jobs)
    sinc = float(np.mean(simulate(wl, "sincronia", seed=seed).jct_s))
    factor = np.ones(n)
    jit = best = weighted_mean_jct(wl, factor, seed)
    runs = 2
    for _ in range(passes):
        improved = False
        for j in range(n):
            for f in factors:
                trial = factor.copy()
                trial[j] *= f
                v = weighted_mean_jct(wl, trial, seed)
                runs += 1
                if v < best - 1e-12:
                    best, factor, improved = v, trial, True
                    break
        if not improved:
            break
    moved = {wl.jobs[j].id: float(factor[j]) for j in np.flatnonzero(factor != 1.0)}
    return {"bps": bps, "seed": seed, "dl_jobs": n, "sincronia_s": sinc, "jit_s": jit, "searched_s": best,
            "factors": moved, "simulations": runs, "wall_s": time.perf_counter() - t0}


def summarize(rows: list[dict]) -> dict:
    """Means over the workloads, and Sincronia's mean JCT over jit's and over the searched order's,
    less 1, with the 95 % confidence half-width over the seeds (positive: under Sincronia)."""
    sinc = np.array([r["sincronia_s"] for r in rows])
    out = {"seeds": [r["seed"] for r in rows]}
    for key in ("jit", "searched"):
        x = np.array([r[f"{key}_s"] for r in rows])
        d, h = ci95(sinc / x - 1.0)
        out[key] = {"jct_mean_s": float(x.mean()), "sincronia_over": d, "sincronia_over_ci95": h}
    jit = np.array([r["jit_s"] for r in rows])
    out["searched_gain_over_jit"] = float(np.mean(1.0 - np.array([r["searched_s"] for r in rows]) / jit))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bps", type=float, default=1e10, help="link rate, bits/s (default 1e10)")
    ap.add_argument("--seeds", type=int, default=10, help="workloads, seeds 0..N-1 (default 10)")
    ap.add_argument("--passes", type=int, default=1, help="passes over the jobs (default 1)")
    ap.add_argument("--factors", default=",".join(f"{f:g}" for f in FACTORS),
                    help="factors each job tries on its size, in order (default 0.25,4,0.5,2)")
    ap.add_argument("--n-jobs", type=int, default=N_JOBS,
                    help=f"jobs per workload, files included (default {N_JOBS}, the regime sweep's)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = ap.parse_args(argv)
    try:
        factors = tuple(float(x) for x in args.factors.split(","))
    except ValueError:
        ap.error(f"--factors: expected numbers separated by commas, got {args.factors!r}")
    if not factors or any(not (f > 0 and f != 1 and np.isfinite(f)) for f in factors):
        ap.error("--factors: each must be positive, finite and not 1")
    for name in ("seeds", "passes", "n_jobs", "workers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: at least 1")
    if args.bps <= 0:
        ap.error("--bps: must be positive")
    tasks = [(args.bps, s, args.n_jobs, args.passes, factors) for s in range(args.seeds)]
    rows = []
    with ProcessPoolExecutor(args.workers) as ex:
        for r in ex.map(search, tasks):
            rows.append(r)
            print(f"seed {r['seed']}: Sincronia {r['sincronia_s']:.4f} s, jit {r['jit_s']:.4f} s, searched "
                  f"{r['searched_s']:.4f} s ({r['simulations']} simulations, {r['wall_s']:.0f} s)",
                  file=sys.stderr, flush=True)
    summary = summarize(rows)
    if args.json:
        print(json.dumps({"bps": args.bps, "passes": args.passes, "factors": factors, "runs": rows,
                          "summary": summary}))
    else:
        for key in ("jit", "searched"):
            s = summary[key]
            print(f"{key:9s} mean JCT {s['jct_mean_s']:.4f} s; Sincronia's over it "
                  f"{s['sincronia_over']:+.2%} ± {s['sincronia_over_ci95']:.2%}")
        print(f"the search's gain over jit: {summary['searched_gain_over_jit']:.2%} of its mean JCT")
    return 0


if __name__ == "__main__":
    sys.exit(main())
