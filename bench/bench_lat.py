"""LAT pass speed on a ResNet152-sized DAG: Cython kernel vs the pure-Python reference."""

from __future__ import annotations

import argparse
import json

import numpy as np

from jitsched import _lat
from jitsched.bench.common import median_time, resnet152_jobs
from jitsched.dag.lat import latest_arrival_times
from jitsched.dag.model import TRANSFER, Cluster, compile_jobs
from jitsched.plan.estimate import trans_times
from jitsched.reference import lat_exact_reference


def measure(job, label: str, cluster: Cluster, repeat: int, ref_repeat: int) -> dict:
    """Kernel, wrapper, paper-estimator and reference times on one job, seconds (medians)."""
    dag = compile_jobs([job], cluster)
    n = dag.n_nodes
    trans = trans_times(dag, cluster)
    floor = dag.arrival.copy()
    known = np.full(n, np.nan)
    out = [np.empty(n), np.empty(n), np.empty(n), np.empty(1)]

    def kernel():
        _lat.lat_pass(dag.topo, dag.kind, dag.job_of, floor, dag.duration, trans, known,
                      dag.pred_ptr, dag.pred_idx, *out)

    kernel_s = median_time(kernel, repeat, warmup=5)
    wrapper_s = median_time(lambda: latest_arrival_times(dag, cluster), repeat, warmup=5)
    paper_s = median_time(lambda: latest_arrival_times(dag, cluster, estimator="paper"), 5)
    reference_s = median_time(lambda: lat_exact_reference(dag, trans, floor, dag.duration), ref_repeat)
    ref = lat_exact_reference(dag, trans, floor, dag.duration)
    kernel()
    t = dag.kind == TRANSFER
    return {
        "dag": label,
        "transfers": int(t.sum()),
        "computes": int((~t).sum()),
        "edges": int(len(dag.pred_idx)),
        "kernel_s": kernel_s,
        "wrapper_s": wrapper_s,
        "paper_estimator_s": paper_s,
        "reference_s": reference_s,
        "ratio": reference_s / kernel_s,
        "agree": bool(np.allclose(out[2][t], np.asarray(ref[2])[t], rtol=1e-9)),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=200, help="kernel runs (median)")
    ap.add_argument("--ref-repeat", type=int, default=7, help="reference runs (median)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    cluster = Cluster.uniform(4, 1e9)
    results = [measure(job, label, cluster, args.repeat, args.ref_repeat)
               for job, label in resnet152_jobs("h0", "h1")]
    if args.json:
        # the first DAG has the size (>= 900 transfers, >= 2600 computes)
        print(json.dumps({**results[0], "dags": results}))
        return 0
    for r in results:
        print(f"{r['dag']}: {r['transfers']} transfers, {r['computes']} computes, {r['edges']} edges")
        print(f"  kernel      {r['kernel_s'] * 1e6:9.1f} us  (median of {args.repeat}; goal <= 1000 us)")
        print(f"  with trans  {r['wrapper_s'] * 1e6:9.1f} us  (latest_arrival_times, Eq. 1 included)")
        print(f"  paper Alg.1 {r['paper_estimator_s'] * 1e3:9.2f} ms")
        print(f"  reference   {r['reference_s'] * 1e3:9.2f} ms  (pure Python, median of {args.ref_repeat})")
        print(f"  ratio       {r['ratio']:9.0f}x  (goal >= 100x); results agree: {r['agree']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
