"""LAT pass speed on a ResNet152-sized DAG: Cython kernel vs the pure-Python reference."""

from __future__ import annotations

import argparse
import json

import numpy as np

from bench.common import median_time, resnet152_job
from jitsched import _lat
from jitsched.lat import latest_arrival_times, trans_times
from jitsched.model import Cluster, compile_jobs
from jitsched.reference import lat_exact_reference


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=200, help="kernel runs (median)")
    ap.add_argument("--ref-repeat", type=int, default=7, help="reference runs (median)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    cluster = Cluster.uniform(4, 1e9)
    job, label = resnet152_job("h0", "h1")
    dag = compile_jobs([job], cluster)
    n = dag.n_nodes
    trans = trans_times(dag, cluster)
    floor = dag.arrival.copy()
    known = np.full(n, np.nan)
    out = [np.empty(n), np.empty(n), np.empty(n), np.empty(1)]

    def kernel():
        _lat.lat_pass(dag.topo, dag.kind, dag.job_of, floor, dag.duration, trans, known,
                      dag.pred_ptr, dag.pred_idx, *out)

    def reference():
        lat_exact_reference(dag, trans, floor, dag.duration)

    kernel_s = median_time(kernel, args.repeat, warmup=5)
    wrapper_s = median_time(lambda: latest_arrival_times(dag, cluster), args.repeat, warmup=5)
    paper_s = median_time(lambda: latest_arrival_times(dag, cluster, estimator="paper"), 5)
    reference_s = median_time(reference, args.ref_repeat)
    ref = lat_exact_reference(dag, trans, floor, dag.duration)
    kernel()
    agree = bool(np.allclose(out[2][dag.kind == 1], np.asarray(ref[2])[dag.kind == 1], rtol=1e-9))
    result = {
        "dag": label,
        "transfers": int((dag.kind == 1).sum()),
        "computes": int((dag.kind == 0).sum()),
        "edges": int(len(dag.pred_idx)),
        "kernel_s": kernel_s,
        "wrapper_s": wrapper_s,
        "paper_estimator_s": paper_s,
        "reference_s": reference_s,
        "ratio": reference_s / kernel_s,
        "agree": agree,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{label}: {result['transfers']} transfers, {result['computes']} computes, "
              f"{result['edges']} edges")
        print(f"  kernel      {kernel_s * 1e6:9.1f} us  (median of {args.repeat}; goal <= 1000 us)")
        print(f"  with trans  {wrapper_s * 1e6:9.1f} us  (latest_arrival_times, Eq. 1 included)")
        print(f"  paper Alg.1 {paper_s * 1e3:9.2f} ms")
        print(f"  reference   {reference_s * 1e3:9.2f} ms  (pure Python, median of {args.ref_repeat})")
        print(f"  ratio       {result['ratio']:9.0f}x  (goal >= 100x); results agree: {agree}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
