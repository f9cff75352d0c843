"""Coflow-trace replay summary (traces are read by jitsched.plan.coflow)."""

from __future__ import annotations

import numpy as np


def cct_summary(result) -> dict:
    """``{"coflows", "avg_cct_s", "p95_cct_s"}`` of a simulation of a coflow workload (seconds)."""
    cct = np.asarray(result.jct_s, dtype=np.float64)
    return {"coflows": int(len(cct)), "avg_cct_s": float(np.mean(cct)),
            "p95_cct_s": float(np.percentile(cct, 95))}
