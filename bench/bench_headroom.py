"""How far a better job order could take jit on the regime workloads: a search, with hindsight, over a weight per job in jit's keys, or weights read off the bound's LP relaxation.

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

With ``--lp-order`` it asks instead whether the time-indexed LP relaxation of
the lower bound (``jitsched.plan.bound.lp_job_jcts``), solved with the whole
workload known, holds a better order: each job's factor is its JCT in the
LP's solution over its least JCT alone, to each of ``--lp-exponents`` (the
jobs the LP delays rank later), or ``S ** (rank / n)`` for each of
``--lp-spreads`` S, ranks by completion time in the LP (a spread of 1000
nearly imposes that order).

Usage: ``python bench/bench_headroom.py [--bps 1e10] [--seeds 10] [--passes 1]
[--factors 0.25,4,0.5,2] [--lp-order [--lp-exponents 1,4,16,64] [--lp-spreads 10,1000]]
[--n-jobs 60] [--workers 2] [--json]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from jitsched.bench.paper.regimes import LOAD, N_HOSTS, N_JOBS, ci95
from jitsched.workloads.paper import generate_workload

FACTORS = (0.25, 4.0, 0.5, 2.0)
LP_EXPONENTS = (1.0, 4.0, 16.0, 64.0)
LP_SPREADS = (10.0, 1000.0)


@functools.cache
def weighted_jit() -> type:
    """The class of jit with per-job size factors (built on first use: the policies import SciPy)."""
    from jitsched.policies.jit import JitPolicy

    class WeightedJit(JitPolicy):
        """The default jit with each job's size in its keys times a fixed factor (``factor``, per job index)."""

        factor: np.ndarray | None = None

        def _job_scales(self, dag, n_hosts: int) -> np.ndarray:
            base = super()._job_scales(dag, n_hosts)
            return base if self.factor is None else base * self.factor

    return WeightedJit


def weighted_mean_jct(workload, factor: np.ndarray | None, seed: int) -> float:
    """Mean JCT (seconds) of ``workload``'s jobs under jit with per-job ``factor`` (None: jit itself)."""
    from jitsched.sim import simulate

    p = weighted_jit()()
    p.factor = factor
    return float(np.mean(simulate(workload, p, seed=seed).jct_s))


def search(task: tuple[float, int, int, int, tuple[float, ...]]) -> dict:
    """One workload (rate, seed, jobs): Sincronia's and jit's mean JCT and the best the search found."""
    from jitsched.sim import simulate

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


def lp_orders(task: tuple[float, int, int, tuple[float, ...], tuple[float, ...]]) -> dict:
    """One workload (rate, seed, jobs): jit's mean JCT, and jit's with per-job factors read off
    the LP relaxation's solution (``--lp-order``), seconds."""
    from jitsched.plan.bound import lp_job_jcts

    bps, seed, n_jobs, exponents, spreads = task
    t0 = time.perf_counter()
    wl = generate_workload(LOAD, n_jobs=n_jobs, n_hosts=N_HOSTS, bps=bps, seed=seed)
    lp, alone = lp_job_jcts(wl)
    n = len(lp)
    stretch = np.where(alone > 0, lp / np.where(alone > 0, alone, 1.0), 1.0)
    done = np.array([j.arrival_s for j in wl.jobs]) + lp
    rank = np.argsort(np.argsort(done, kind="stable"), kind="stable")
    variants = {f"stretch^{k:g}": stretch ** k for k in exponents}
    variants |= {f"rank {s:g}": s ** (rank / max(n, 1)) for s in spreads}
    return {"bps": bps, "seed": seed, "dl_jobs": n, "jit_s": weighted_mean_jct(wl, None, seed),
            "lp_stretch_max": float(stretch.max()) if n else 1.0,
            "variants": {name: weighted_mean_jct(wl, f, seed) for name, f in variants.items()},
            "wall_s": time.perf_counter() - t0}


def summarize_lp(rows: list[dict]) -> dict:
    """Per variant: the mean JCT and its paired relative difference from jit's (positive:
    slower) with the 95 % confidence half-width over the seeds."""
    jit = np.array([r["jit_s"] for r in rows])
    out = {"seeds": [r["seed"] for r in rows], "jit": {"jct_mean_s": float(jit.mean())}}
    for name in rows[0]["variants"]:
        x = np.array([r["variants"][name] for r in rows])
        d, h = ci95(x / jit - 1.0)
        out[name] = {"jct_mean_s": float(x.mean()), "over_jit": d, "over_jit_ci95": h}
    return out


def _numbers(ap, flag: str, text: str) -> tuple[float, ...]:
    """``text`` as positive finite numbers separated by commas, or ``ap.error`` naming ``flag``."""
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError:
        ap.error(f"{flag}: expected numbers separated by commas, got {text!r}")
    if not out or any(not (f > 0 and np.isfinite(f)) for f in out):
        ap.error(f"{flag}: each must be positive and finite")
    return out


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
    ap.add_argument("--lp-order", action="store_true",
                    help="instead of the search: factors read off the bound's LP relaxation")
    ap.add_argument("--lp-exponents", default=",".join(f"{f:g}" for f in LP_EXPONENTS),
                    help="--lp-order: powers of each job's LP JCT over its JCT alone (default 1,4,16,64)")
    ap.add_argument("--lp-spreads", default=",".join(f"{f:g}" for f in LP_SPREADS),
                    help="--lp-order: S in S ** (rank of LP completion / n) (default 10,1000)")
    ap.add_argument("--n-jobs", type=int, default=N_JOBS,
                    help=f"jobs per workload, files included (default {N_JOBS}, the regime sweep's)")
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = ap.parse_args(argv)
    factors = _numbers(ap, "--factors", args.factors)
    if 1.0 in factors:
        ap.error("--factors: each must be positive, finite and not 1")
    for name in ("seeds", "passes", "n_jobs", "workers"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: at least 1")
    if args.bps <= 0:
        ap.error("--bps: must be positive")
    if args.lp_order:
        return _main_lp(args, _numbers(ap, "--lp-exponents", args.lp_exponents),
                        _numbers(ap, "--lp-spreads", args.lp_spreads))
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



def _main_lp(args, exponents: tuple[float, ...], spreads: tuple[float, ...]) -> int:
    """``--lp-order``: jit with each variant's factors on every workload; progress on stderr."""
    tasks = [(args.bps, s, args.n_jobs, exponents, spreads) for s in range(args.seeds)]
    rows = []
    with ProcessPoolExecutor(args.workers) as ex:
        for r in ex.map(lp_orders, tasks):
            rows.append(r)
            print(f"seed {r['seed']}: jit {r['jit_s']:.4f} s, " + ", ".join(
                f"{k} {v:.4f} s" for k, v in r["variants"].items()) + f" ({r['wall_s']:.0f} s)",
                file=sys.stderr, flush=True)
    summary = summarize_lp(rows)
    if args.json:
        print(json.dumps({"bps": args.bps, "lp_exponents": exponents, "lp_spreads": spreads, "runs": rows,
                          "summary": summary}))
    else:
        print(f"jit{'':15s} mean JCT {summary['jit']['jct_mean_s']:.4f} s")
        for name, v in summary.items():
            if name not in ("seeds", "jit"):
                print(f"{name:18s} mean JCT {v['jct_mean_s']:.4f} s; over jit's "
                      f"{v['over_jit']:+.2%} ± {v['over_jit_ci95']:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
