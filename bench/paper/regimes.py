"""The regime sweep: every policy at 1, 10, 40 and 100 Gbit/s links, the same offered load, against the lower bound."""

from __future__ import annotations

import math
from concurrent.futures import Executor

import numpy as np

from jitsched.workloads.paper import generate_workload

RATES_BPS = (1e9, 1e10, 4e10, 1e11)
LOAD = 0.5
N_JOBS = 60
N_HOSTS = 20
# Seeds per rate: at 10 Gbit/s the paired difference between jit and Sincronia is +5.1 +- 1.6 %
# (95 %) over 40 seeds, +3.9 +- 3.5 % over the first 10: ten cannot tell a 4 % lead from a 5 % one.
REGIME_SEEDS = 40


def rate_key(bps: float) -> str:
    """The JSON key of a link rate: ``1e9``, ``1e10``, ``4e10``, ``1e11``."""
    mant, exp = f"{bps:e}".split("e")
    return f"{float(mant):g}e{int(exp)}"


def regime_workload(bps: float, seed: int):
    """``jitsched gen-workload --load 0.5 --n-jobs 60 --hosts 20 --bps BPS --seed SEED``."""
    return generate_workload(LOAD, n_jobs=N_JOBS, n_hosts=N_HOSTS, bps=bps, seed=seed)


def run_regime(task: tuple[float, int, tuple[str, ...]]) -> dict:
    """One workload (rate, seed) under every policy: per-job JCTs and the bound, seconds."""
    from jitsched.plan.bound import lower_bound_mean_jct
    from jitsched.sim import simulate

    bps, seed, policies = task
    wl = regime_workload(bps, seed)
    out = {"bps": bps, "seed": seed, "bound": lower_bound_mean_jct(wl), "jct": {}}
    for pol in policies:
        out["jct"][pol] = simulate(wl, pol, seed=seed).jct_s.tolist()
    return out


def ci95(x: np.ndarray) -> tuple[float, float]:
    """Mean of ``x`` and the half-width of its 95 % confidence interval (Student's t)."""
    from scipy import stats

    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float(x.mean()) if len(x) else math.nan, math.nan
    return float(x.mean()), float(stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x)))


def summarize(runs: list[dict], policies: tuple[str, ...], reference: str, candidate: str) -> dict:
    """Per rate and policy, over the seeds: mean JCT, mean per-job speedup over ``reference``,
    ``over_bound`` (the mean of each seed's mean JCT over that seed's bound: every workload
    weighs alike), and the paired relative difference of its mean JCT from ``candidate``'s
    with its 95 % confidence half-width (positive: slower than the candidate)."""
    out: dict = {}
    for bps in sorted({r["bps"] for r in runs}):
        rs = sorted((r for r in runs if r["bps"] == bps), key=lambda r: r["seed"])
        mean = {p: np.array([np.mean(r["jct"][p]) for r in rs]) for p in policies}
        bound = np.array([r["bound"] for r in rs])
        row = {}
        for p in policies:
            speed = [float(np.mean(np.array(r["jct"][reference]) / np.array(r["jct"][p]))) for r in rs]
            diff, half = ci95(mean[p] / mean[candidate] - 1.0)
            row[p] = {"jct_mean_s": float(mean[p].mean()), "speedup_mean": float(np.mean(speed)),
                      "over_bound": float(np.mean(mean[p] / bound)),
                      f"vs_{candidate}": diff, f"vs_{candidate}_ci95": half}
        out[rate_key(bps)] = row | {"bound_mean_jct_s": float(bound.mean()), "seeds": [r["seed"] for r in rs]}
    return out


def document(summary: dict) -> dict:
    """The sweep's JSON: ``{"regimes": {rate: {policy: metrics}}, "bound_mean_jct_s": {rate: s},
    "seeds": [...]}``, each rate's row holding its policies only (:func:`summarize` keeps the
    bound and the seeds in the row, for the table and the figure)."""
    extra = ("bound_mean_jct_s", "seeds")
    rates = {rate: {k: v for k, v in row.items() if k not in extra} for rate, row in summary.items()}
    seeds = next(iter(summary.values()))["seeds"] if summary else []
    return {"regimes": rates, "bound_mean_jct_s": {rate: row["bound_mean_jct_s"] for rate, row in summary.items()},
            "seeds": seeds}


def gather(ex: Executor, fn, args: list, progress=None) -> list:
    """``fn(a)`` for every ``a`` of ``args`` in ``ex``'s processes, in order; ``progress()`` after each."""
    futs = [ex.submit(fn, a) for a in args]
    runs = []
    for f in futs:
        runs.append(f.result())
        if progress is not None:
            progress()
    return runs


def sweep(ex: Executor, seeds: list[int], policies: tuple[str, ...], progress=None) -> list[dict]:
    """Every (rate, seed) workload under every policy, in ``ex``'s processes."""
    return gather(ex, run_regime, [(bps, s, policies) for bps in RATES_BPS for s in seeds], progress)


def table(summary: dict, policies: tuple[str, ...], candidate: str) -> str:
    """A markdown table: mean JCT over the bound and the difference from ``candidate`` per rate."""
    head = "| link | bound s | " + " | ".join(policies) + " |"
    lines = [head, "|" + "---|" * (len(policies) + 2)]
    for rate, row in summary.items():
        cells = []
        for p in policies:
            r = row[p]
            d = "" if p == candidate else (f" ({100 * r[f'vs_{candidate}']:+.1f} "
                                           f"± {100 * r[f'vs_{candidate}_ci95']:.1f} %)")
            cells.append(f"{r['jct_mean_s']:.4g} s, {r['over_bound']:.3f}x{d}")
        lines.append(f"| {float(rate) / 1e9:g} Gbit/s | {row['bound_mean_jct_s']:.4g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def figure(summary: dict, policies: tuple[str, ...], path) -> None:
    """Per link rate and policy, how far the mean JCT is above the lower bound, in % (lower is
    better; 0 is the bound), each bar labelled with its value."""
    from jitsched.bench.common import pyplot, seed_label

    plt = pyplot()

    rates = list(summary)
    x = np.arange(len(rates))
    w = 0.8 / len(policies)
    fig, ax = plt.subplots(figsize=(9, 4))
    for k, p in enumerate(policies):
        above = [100.0 * (summary[r][p]["over_bound"] - 1.0) for r in rates]
        bars = ax.bar(x + k * w, above, w, label=p)
        ax.bar_label(bars, [f"{v:.1f}" for v in above], fontsize=6, rotation=90, padding=2)
    ax.set_xticks(x + w * (len(policies) - 1) / 2, [f"{float(r) / 1e9:g} Gbit/s" for r in rates])
    ax.set_ylabel("mean JCT above the lower bound, %")
    ax.margins(y=0.15)
    seeds = summary[rates[0]]["seeds"]
    ax.set_title(f"load {LOAD}, {N_JOBS} jobs, {N_HOSTS} hosts, seeds {seed_label(seeds)} ({len(seeds)} per rate)")
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["LOAD", "N_HOSTS", "N_JOBS", "RATES_BPS", "ci95", "document", "figure", "rate_key", "regime_workload", "run_regime",
           "summarize", "sweep", "table"]
