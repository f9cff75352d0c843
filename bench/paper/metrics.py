"""Headline metrics of ``bench.paper`` per policy and point: speedups, JCTs, background, remaining bandwidth, dominance."""

from __future__ import annotations

import numpy as np

from jitsched.bench.paper.spec import BASELINES
from jitsched.bench.paper.workload import MODELS


def speedups(base: dict, other: dict) -> dict:
    """Per model mean of per-job JCT(tensorflow)/JCT(policy), same workload and seed."""
    tf = dict(zip(base["job_ids"], base["jct"], strict=True))
    per: dict[str, list[float]] = {}
    for j, m, x in zip(other["job_ids"], other["job_model"], other["jct"], strict=True):
        per.setdefault(m, []).append(tf[j] / x)
    return {m: float(np.mean(v)) for m, v in per.items()}


def speedup_table(results: dict, point: str, variant: str, seeds) -> dict:
    """Per model speedup of ``variant`` over tensorflow at ``point``, averaged over seeds, and their ``mean``."""
    per_model: dict[str, list[float]] = {}
    for s in seeds:
        for m, v in speedups(results[f"{point}/tensorflow/s{s}"], results[f"{point}/{variant}/s{s}"]).items():
            per_model.setdefault(m, []).append(v)
    out = {m: float(np.mean(per_model[m])) for m in MODELS if m in per_model}
    out["mean"] = float(np.mean([out[m] for m in MODELS if m in out]))
    return out


def pooled(runs: list[dict], key: str) -> np.ndarray:
    return np.concatenate([np.asarray(r[key], dtype=np.float64) for r in runs]) if runs else np.zeros(0)


def point_metrics(results: dict, point: str, variant: str, seeds, iso: dict[str, float]) -> dict | None:
    """Headline metrics of ``variant`` at ``point`` over ``seeds`` (None when a run is missing).

    Returns
    -------
    dict
        ``speedup_mean`` (mean over models of the per-model mean per-job
        JCT(tensorflow)/JCT), ``jct_mean_s``, ``jct_p95_slowdown`` (p95 over
        jobs of JCT / the model's isolated JCT), ``bg_slowdown_mean``,
        ``remaining_bw_{p5,p25,median,n}`` (per-slot samples pooled over
        seeds), ``remaining_bw_contended_{p5,median,n}``, ``inception_waiting_s``
        (mean data waiting time of Inception transfers, mean over seeds);
        None where there is nothing to measure.
    """
    from jitsched.sim.metrics import quantile_summary

    runs = [results.get(f"{point}/{variant}/s{s}") for s in seeds]
    if any(r is None for r in runs):
        return None
    sp = speedup_table(results, point, variant, seeds)
    jct = pooled(runs, "jct")
    alone = np.array([iso[m] for r in runs for m in r["job_model"]])
    bg = pooled(runs, "bg_slowdown")
    slots = quantile_summary(pooled(runs, "remaining_bw_slots")) or {}
    cont = quantile_summary(pooled(runs, "remaining_bw_contended")) or {}
    wait = [r["waiting"]["inception_v3"] for r in runs if "inception_v3" in r["waiting"]]
    return {
        "speedup_mean": sp["mean"],
        "speedup_by_model": {m: v for m, v in sp.items() if m != "mean"},
        "jct_mean_s": float(np.mean(jct)) if len(jct) else None,
        "jct_p95_slowdown": float(np.percentile(jct / alone, 95)) if len(jct) else None,
        "bg_slowdown_mean": float(np.mean(bg)) if len(bg) else None,
        "remaining_bw_p5": slots.get("p5"), "remaining_bw_p25": slots.get("p25"),
        "remaining_bw_median": slots.get("median"), "remaining_bw_n": slots.get("n", 0),
        "remaining_bw_contended_p5": cont.get("p5"), "remaining_bw_contended_median": cont.get("median"),
        "remaining_bw_contended_n": cont.get("n", 0),
        "inception_waiting_s": float(np.mean(wait)) if wait else None,
        "seeds": list(seeds),
    }


# (metric, how the candidate must compare with each baseline)
DOMINANCE = (("speedup_mean", ">="), ("jct_mean_s", "<="), ("bg_slowdown_mean", "<"),
             ("remaining_bw_p5", ">"), ("remaining_bw_median", ">"))
_CMP = {">=": (lambda x, y: x >= y, "<"), "<=": (lambda x, y: x <= y, ">"),
        "<": (lambda x, y: x < y, ">="), ">": (lambda x, y: x > y, "<=")}


def dominance_failures(metrics: dict[str, dict], candidate: str = "jit",
                       baselines: tuple[str, ...] = BASELINES) -> list[str]:
    """Where ``candidate`` fails to dominate: one entry per (metric, baseline) that breaks :data:`DOMINANCE`.

    Dominance: speedup_mean >= every baseline's, jct_mean_s <= every one's,
    bg_slowdown_mean < every one's, remaining_bw_p5 and remaining_bw_median >
    every one's. A metric missing on either side fails.
    """
    out = []
    c = metrics[candidate]
    for key, op in DOMINANCE:
        ok, neg = _CMP[op]
        for b in baselines:
            x, y = c.get(key), metrics[b].get(key)
            if x is None or y is None:
                out.append(f"{key} missing vs {b}")
            elif not ok(x, y):
                out.append(f"{key} {x:.3f} {neg} {b} {y:.3f}")
    return out


def dominance_line(point: str, metrics: dict[str, dict], candidate: str = "jit",
                   baselines: tuple[str, ...] = BASELINES) -> str:
    """``"<candidate> dominates at <point>: yes"`` or ``"...: no (<failures>)"``."""
    fails = dominance_failures(metrics, candidate, baselines)
    return f"{candidate} dominates at {point}: " + ("yes" if not fails else f"no ({'; '.join(fails)})")
