"""Import the exported TensorFlow models of bench/workloads into the packaged native jobs and print their table.

No TensorFlow needed. Usage::

    python bench/tools/build_model_jobs.py [--workloads bench/workloads] [--out jitsched/data/models]

Writes ``<model>.json.gz`` (a native-format workload: hosts ``ps`` and
``worker`` at 1 Gbit/s and the one job) and prints the Markdown table of
bench/workloads/README.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from jitsched.dag.model import Cluster, Host, Workload
from jitsched.workloads.paper import MODELS, TEMPLATE_PS, TEMPLATE_WORKER, import_exported_model

ROOT = Path(__file__).resolve().parents[2]
# The paper's Table 1: transfers, total transfer MB, compute ops.
PAPER = {"lenet": (8, 12.5, 123), "alexnet": (16, 82.5, 161), "vgg16": (32, 512.3, 351),
         "inception_v3": (190, 83.1, 1384), "resnet152": (932, 226.5, 2641)}


def table_row(name: str, directory: Path, job) -> str:
    meta = json.loads((directory / f"{name}.meta.json").read_text())
    reads = [t for t in job.transfers if t.src == TEMPLATE_PS]
    pushes = [t for t in job.transfers if t.src == TEMPLATE_WORKER]
    mib = 2 ** 20
    p = PAPER[name]
    step_s = sum(c.duration_s for c in job.computes)
    return (f"| {name} | {p[0]} / {p[1]} / {p[2]} | {len(job.transfers)} | "
            f"{sum(t.bytes for t in job.transfers) / mib:.1f} | {len(reads)} / "
            f"{sum(t.bytes for t in reads) / mib:.1f} | {len(pushes)} / "
            f"{sum(t.bytes for t in pushes) / mib:.1f} | {len(job.computes)} | "
            f"{meta['step_nodes']} | {meta['tf_cross_task_sends']} | {step_s * 1e3:.1f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=Path, default=ROOT / "bench" / "workloads")
    ap.add_argument("--out", type=Path, default=ROOT / "jitsched" / "data" / "models")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print("| model | paper: transfers / MB / ops | transfers | MiB | reads ps→worker (n / MiB) "
          "| pushes worker→ps (n / MiB) | compute nodes | TF ops in step | TF cross-task sends "
          "| compute sum (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in MODELS:
        job = import_exported_model(name, args.workloads)
        hosts = tuple(Host(n, 1e9, 1e9) for n in (TEMPLATE_PS, TEMPLATE_WORKER))
        text = json.dumps(Workload(Cluster(hosts), (job,)).to_dict(), separators=(",", ":"))
        # mtime 0: rebuilding unchanged inputs gives byte-identical files.
        with gzip.GzipFile(args.out / f"{name}.json.gz", "wb", mtime=0) as fh:
            fh.write(text.encode("utf-8"))
        print(table_row(name, args.workloads, job))
    return 0


if __name__ == "__main__":
    sys.exit(main())
