"""Coflow-trace replay summary (traces are read by jitsched.plan.coflow)."""

from __future__ import annotations

import numpy as np


def cct_summary(result) -> dict:
    """``{"coflows", "avg_cct_s", "p95_cct_s"}`` of a simulation of a coflow workload (seconds).

    A trace none of whose flows crosses the network replays as no coflow at
    all: ``coflows`` is 0 and the two figures are None.
    """
    cct = np.asarray(result.jct_s, dtype=np.float64)
    if not len(cct):
        return {"coflows": 0, "avg_cct_s": None, "p95_cct_s": None}
    return {"coflows": int(len(cct)), "avg_cct_s": float(np.mean(cct)),
            "p95_cct_s": float(np.percentile(cct, 95))}
