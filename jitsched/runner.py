"""The job runner: executes a native-format job for real (sleeping computes, paced TCP transfers)."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from jitsched.client import Client, send_bytes
from jitsched.keys import CLIENTS, DEFAULT_CLIENT, CurveKeys, curve_keys
from jitsched.model import Job
from jitsched.protocol import flow_id

log = logging.getLogger("jitsched.runner")


@dataclass
class JobResult:
    """What one run of a job measured (seconds, bytes).

    ``transfer_s`` is each transfer's duration as its sender saw it (connect
    to the receiver's confirmation), ``transfer_start_s`` when it started,
    seconds after the job's submission began.
    """

    job_id: str
    jct_s: float
    transfers: int
    bytes: float
    lat_hits: int = 0
    lat_known: int = 0
    transfer_s: dict[str, float] = field(default_factory=dict)
    transfer_start_s: dict[str, float] = field(default_factory=dict)
    error: str = ""

    @property
    def lat_hit_rate(self) -> float:
        """Fraction of transfers with a known LAT that arrived by it (NaN if none)."""
        return self.lat_hits / self.lat_known if self.lat_known else float("nan")


class JobRunner:
    """Runs one job: submits it, then starts every node once its predecessors finished.

    Parameters
    ----------
    job : Job
        Native job; transfer ``src``/``dst`` and compute ``host`` name cluster hosts.
    endpoint : str
        The daemon's job endpoint.
    sinks : dict
        ``host -> (address, port)`` of a :class:`jitsched.client.TransferSink` per host.
    agents : dict, optional
        ``host -> local agent socket name``; transfers from a host register with its agent.
    compute_scale : float
        Computes sleep ``duration_s * compute_scale`` seconds.
    max_threads : int
        Nodes running at once (transfers block in ``send``; computes sleep).
    on_event : callable, optional
        ``on_event(kind, job_id, node_id)`` after each node (progress display).
    send : callable, optional
        ``send(src_host, addr, nbytes, flow, agent=...)`` replacing
        :func:`jitsched.client.send_bytes` (the testbed opens each transfer's
        socket inside its source host's network namespace).
    async_reports : bool
        False (default): each node waits for the daemon's reply to its
        reports before its successors start. True: one reporter thread sends
        the reports in order while the DAG runs on, as a training runtime
        would not stall its ops on the scheduler (thousands of round trips
        otherwise put the daemon's latency on every node of a 2000-transfer
        ResNet152); the job's JCT ends with its last node, and the run
        returns once the daemon has every report.
    keys : CurveKeys or path, optional
        The client's CURVE keys (see :class:`jitsched.client.Client`), or a key
        directory holding those of client ``key_name``. None: plaintext.
    key_name : str
        The client's name in the key directory.
    """

    def __init__(self, job: Job, endpoint: str, sinks: dict[str, tuple[str, int]], *,
                 agents: dict[str, str] | None = None, compute_scale: float = 1.0,
                 max_threads: int = 64,
                 on_event: Callable[[str, str, str], None] | None = None,
                 send: Callable[..., float] | None = None, async_reports: bool = False,
                 keys: CurveKeys | str | Path | None = None, key_name: str = DEFAULT_CLIENT) -> None:
        self.job = job
        self.keys = curve_keys(keys, CLIENTS, key_name)  # read once, not per run
        self.endpoint = endpoint
        self.sinks = sinks
        self.agents = agents or {}
        self.compute_scale = compute_scale
        self.max_threads = max_threads
        self.on_event = on_event
        self.send = send
        self.async_reports = async_reports
        self._lock = threading.Lock()

    def run(self, timeout_s: float = 600.0) -> JobResult:
        """Submit and execute the job; returns when every node finished (or on failure)."""
        job = self.job
        computes = {c.id: c for c in job.computes}
        transfers = {t.id: t for t in job.transfers}
        preds: dict[str, int] = {n: 0 for n in job.node_ids()}
        succs: dict[str, list[str]] = {n: [] for n in preds}
        for a, b in job.edges:
            preds[b] += 1
            succs[a].append(b)
        result = JobResult(job.id, float("nan"), len(transfers), sum(t.bytes for t in job.transfers))
        all_done = threading.Event()
        left = [len(preds)]
        failure: list[str] = []
        client = Client(self.endpoint, keys=self.keys)
        reports: queue.SimpleQueue | None = queue.SimpleQueue() if self.async_reports else None
        reporter = None
        try:
            t0 = time.perf_counter()
            client.submit_job(job)
            if reports is not None:
                # the only user of the client until it has sent everything (sockets are per thread)
                reporter = threading.Thread(target=self._report_loop, args=(reports, failure, all_done),
                                            name=f"report-{job.id}", daemon=True)
                reporter.start()
            with ThreadPoolExecutor(max_workers=self.max_threads,
                                    thread_name_prefix=f"run-{job.id}") as pool:

                def finish(nid: str) -> None:
                    ready = []
                    with self._lock:
                        left[0] -= 1
                        for s in succs[nid]:
                            preds[s] -= 1
                            if preds[s] == 0:
                                ready.append(s)
                        if left[0] == 0:
                            all_done.set()
                    for s in ready:
                        pool.submit(run_node, s)

                def report(fn, *args, then=None):
                    if reports is not None:
                        reports.put((fn, args, then))
                        return
                    with self._lock:
                        rep = fn(*args)
                    if then is not None:
                        then(rep)

                def lat_hit(rep: dict) -> None:
                    if rep.get("lat_hit") is not None:
                        with self._lock:
                            result.lat_known += 1
                            result.lat_hits += int(rep["lat_hit"])

                def run_node(nid: str) -> None:
                    try:
                        if nid in computes:
                            c = computes[nid]
                            s0 = time.perf_counter()
                            time.sleep(c.duration_s * self.compute_scale)
                            report(client.compute_finished, job.id, nid, time.perf_counter() - s0)
                        else:
                            t = transfers[nid]
                            result.transfer_start_s[nid] = time.perf_counter() - t0
                            report(client.transfer_started, job.id, nid)
                            if self.send is not None:
                                secs = self.send(t.src, self.sinks[t.dst], int(t.bytes),
                                                 flow_id(job.id, nid), agent=self.agents.get(t.src))
                            else:
                                secs = send_bytes(self.sinks[t.dst], int(t.bytes), flow_id(job.id, nid),
                                                  agent=self.agents.get(t.src))
                            result.transfer_s[nid] = secs
                            report(client.transfer_finished, job.id, nid, t.bytes, then=lat_hit)
                        if self.on_event is not None:
                            self.on_event("compute" if nid in computes else "transfer", job.id, nid)
                    except Exception as exc:  # noqa: BLE001 - reported, and the run ends
                        failure.append(f"{nid}: {type(exc).__name__}: {exc}")
                        all_done.set()
                        return
                    finish(nid)

                for nid, k in list(preds.items()):
                    if k == 0:
                        pool.submit(run_node, nid)
                if not all_done.wait(timeout_s):
                    failure.append(f"timed out after {timeout_s} s")
            result.jct_s = time.perf_counter() - t0
            if reporter is not None:
                reports.put(None)
                reporter.join()
            if failure:
                result.error = failure[0]
                client.cancel_job(job.id)
            else:
                client.job_finished(job.id, result.jct_s)
        finally:
            if reporter is not None and reporter.is_alive():
                reports.put(None)
                reporter.join(30.0)
            client.close()
        if result.error:
            log.warning("event=job_failed job=%s error=%r", job.id, result.error)
        return result

    @staticmethod
    def _report_loop(reports: queue.SimpleQueue, failure: list[str], all_done: threading.Event) -> None:
        # Sends queued reports in order until None; the first failure ends the run, as a
        # failed synchronous report would, and later reports are dropped.
        while True:
            item = reports.get()
            if item is None:
                return
            if failure:
                continue
            fn, args, then = item
            try:
                rep = fn(*args)
                if then is not None:
                    then(rep)
            except Exception as exc:  # noqa: BLE001 - reported, and the run ends
                failure.append(f"report {fn.__name__}{args[1:2]}: {type(exc).__name__}: {exc}")
                all_done.set()


__all__ = ["JobResult", "JobRunner"]
