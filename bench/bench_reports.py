"""Progress reports per second a daemon process takes, alone and as one replica on etcd: one event per report, many clients.

Each of ``--jobs`` jobs (a VGG16 layer chain with its pushes, 64 transfers) is
submitted, then reports every transfer started and then finished, one event per
``report`` message, over a DEALER socket of its own with one report in flight:
the shape of a runner that reports each transfer as it goes. Both daemons run in
the same invocation, alternating, ``--repeats`` times each; the figures are the
medians, and the ratio is of the medians.

Usage: ``python bench/bench_reports.py [--jobs 50] [--repeats 3] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

from jitsched.bench.bench_faults import free_ports
from jitsched.bench.bench_recurring import _DaemonProcess
from jitsched.client import Client
from jitsched.protocol import MsgType, decode_reply, encode_request
from jitsched.workloads.synth import layer_chain_job

MODES = ("alone", "etcd")


def one_run(n_jobs: int, etcd: bool, timeout_s: float = 120.0) -> dict:
    """Every job's reports against a fresh daemon (``etcd``: one replica on a one-member
    etcd of its own); returns reports/s, the reply latency's p50 and p99 (ms), the
    daemon's CPU per report (ms) and the replies that were errors."""
    from jitsched.daemon.ha import LocalEtcd

    with tempfile.TemporaryDirectory(prefix="bench-reports-") as tmp, contextlib.ExitStack() as stack:
        store = LocalEtcd(*free_ports(2)) if etcd else None
        if store is not None:
            stack.callback(store.stop)
        d = _DaemonProcess(Path(tmp), 2 * n_jobs, "jit", store.endpoint if store else None).start()
        stack.callback(d.stop)
        jobs = [layer_chain_job(f"j{k}", f"h{2 * k}", f"h{2 * k + 1}", pushes=True) for k in range(n_jobs)]
        with Client(d.job_endpoint, timeout_s=60.0) as c:
            for j in jobs:
                c.submit_job(j)
        todo = [[["started", t.id, None] for t in j.transfers] + [["finished", t.id, t.bytes] for t in j.transfers]
                for j in jobs]
        ctx = zmq.Context()
        stack.callback(ctx.term)
        socks = []
        for _ in jobs:
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.job_endpoint)
            stack.callback(s.close, 0)
            socks.append(s)
        poller = zmq.Poller()
        for s in socks:
            poller.register(s, zmq.POLLIN)
        index = {s: k for k, s in enumerate(socks)}
        nxt, sent_at, lat, errors = [0] * n_jobs, [0.0] * n_jobs, [], 0

        def send(k: int) -> bool:
            if nxt[k] >= len(todo[k]):
                return False
            socks[k].send(encode_request(MsgType.REPORT, {"job_id": jobs[k].id, "events": [todo[k][nxt[k]]]}))
            sent_at[k] = time.perf_counter()
            nxt[k] += 1
            return True

        cpu0 = d.cpu_s()
        t0 = time.perf_counter()
        inflight = sum(send(k) for k in range(n_jobs))
        while inflight:
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"{inflight} reports unanswered after {timeout_s:g} s")
            for s, _ in poller.poll(100):
                k = index[s]
                reply = decode_reply(s.recv())
                lat.append(time.perf_counter() - sent_at[k])
                errors += not reply.ok
                if not send(k):
                    inflight -= 1
        elapsed = time.perf_counter() - t0
        cpu = d.cpu_s() - cpu0
        ms = np.array(lat) * 1e3
        return {"reports": len(lat), "reports_per_s": len(lat) / elapsed, "p50_ms": float(np.median(ms)),
                "p99_ms": float(np.percentile(ms, 99)), "daemon_cpu_per_report_ms": cpu / len(lat) * 1e3,
                "errors": errors}


def run(n_jobs: int, repeats: int, progress=None) -> dict:
    """``repeats`` runs of each mode, alternating; per mode the medians (and ranges) of the figures."""
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(repeats):
        for m in MODES:
            got = one_run(n_jobs, etcd=m == "etcd")
            runs[m].append(got)
            if progress is not None:
                progress(f"run {r + 1}/{repeats} {m}: {got['reports_per_s']:.0f} reports/s, "
                         f"p50 {got['p50_ms']:.1f} ms")
    out: dict = {"jobs": n_jobs, "repeats": repeats}
    for m in MODES:
        rows = runs[m]
        out[m] = {k: statistics.median(x[k] for x in rows) for k in
                  ("reports_per_s", "p50_ms", "p99_ms", "daemon_cpu_per_report_ms")}
        out[m]["reports_per_s_range"] = [min(x["reports_per_s"] for x in rows), max(x["reports_per_s"] for x in rows)]
        out[m]["errors"] = sum(x["errors"] for x in rows)
        out[m]["reports"] = rows[0]["reports"]
    out["etcd_over_alone_rate"] = out["etcd"]["reports_per_s"] / out["alone"]["reports_per_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_reports", description=__doc__)
    ap.add_argument("--jobs", type=int, default=50, help="jobs, each a client with one report in flight (default 50)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each daemon (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON line")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.repeats < 1:
        print("bench_reports: --jobs and --repeats must be >= 1", file=sys.stderr)
        return 2
    out = run(args.jobs, args.repeats, progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        print(json.dumps(out))
        return 0
    for m in MODES:
        r = out[m]
        print(f"{m:<6} {r['reports_per_s']:8.0f} reports/s (runs {r['reports_per_s_range'][0]:.0f}-"
              f"{r['reports_per_s_range'][1]:.0f}), p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
              f"daemon CPU {r['daemon_cpu_per_report_ms']:.3f} ms per report, {r['errors']} errors")
    print(f"etcd / alone: {out['etcd_over_alone_rate']:.2f} of the rate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
