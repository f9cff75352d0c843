"""Fault benchmarks of the daemon's bounds: ended jobs' memory, and keyed status under connection churn."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

from jitsched import protocol
from jitsched.bench.bench_faults import (
    HOSTS,
    ZMTP_GREETING,
    DaemonProc,
    _percentile,
    big_job,
    log,
    rss_bytes,
)
from jitsched.protocol import MsgType

MIB = 1024 * 1024


def ended_job_memory(workdir: Path, n_nodes: int = 49_800, loops: int = 40,
                     max_ended_bytes: int | None = None) -> dict:
    """Submit and cancel a job of ``n_nodes`` nodes ``loops`` times (a new id each time)
    and the daemon's RSS after each; ``ended_job_memory_growth_mb`` is its growth over
    the second half of the loop, once the ended jobs kept have filled ``max_ended_bytes``
    (None: the daemon's default; the loop should be long enough to fill it by half-way).
    """
    from jitsched.client import Client
    from jitsched.protocol import encode_request

    limits = {"max_job_nodes": max(n_nodes, 50_000)}
    if max_ended_bytes is not None:
        limits["max_ended_bytes"] = max_ended_bytes
    d = DaemonProc(workdir, limits=limits)
    rss: list[int] = []
    try:
        d.start()
        rss0 = rss_bytes(d.pid)
        with Client(d.job_endpoint, timeout_s=120.0) as c:
            for k in range(loops):
                data = encode_request(MsgType.SUBMIT_JOB, {"job": big_job(n_nodes, f"mem{k}")})
                c.request_raw(data, protocol.decode_request(data, max_bytes=len(data)).id)
                c.cancel_job(f"mem{k}")
                time.sleep(0.1)  # a housekeeping tick (50 ms) prunes past the budget
                rss.append(rss_bytes(d.pid))
            st = c.status(limit=1)
        half = rss[len(rss) // 2 - 1] if len(rss) > 1 else rss0
        growth = (rss[-1] - half) / MIB
        log(f"ended memory: {loops} x submit+cancel of {n_nodes} nodes ({len(data) / 1e6:.1f} MB): rss "
            f"{rss0 / MIB:.0f} MiB at start, {half / MIB:.0f} half-way, {rss[-1] / MIB:.0f} at the end "
            f"(+{growth:.1f} MiB over the second half); ended jobs kept ~{st['memory']['ended_job_bytes'] / MIB:.0f}"
            f" MiB, listed {st['jobs_total']}, pruned {st['jobs_pruned']}")
        return {"ended_job_memory_growth_mb": round(growth, 1), "ended_job_loops": loops,
                "ended_job_nodes": n_nodes, "ended_job_rss_start": rss0, "ended_job_rss_half": half,
                "ended_job_rss_end": rss[-1], "ended_job_bytes_kept": st["memory"]["ended_job_bytes"],
                "ended_job_rss_curve_mb": [round(r / MIB) for r in rss]}
    finally:
        d.stop()


class _Churn:
    """Raw TCP connections to ``endpoint`` at ``rate_per_s``: every other one sends a ZMTP
    greeting (CURVE mechanism, as a client) and nothing after, the others send nothing.
    Each is held open up to ``hold`` connections, then the oldest is closed."""

    def __init__(self, endpoint: str, rate_per_s: float, hold: int = 800) -> None:
        host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
        self.addr = (host, int(port))
        self.rate, self.hold = rate_per_s, hold
        self.made = self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="churn", daemon=True)

    def start(self) -> _Churn:
        self._thread.start()
        return self

    def _run(self) -> None:
        held: list[socket.socket] = []
        greeting = ZMTP_GREETING[:12] + b"CURVE".ljust(20, b"\x00") + ZMTP_GREETING[32:]
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                due = t0 + self.made / self.rate
                wait = due - time.monotonic()
                if wait > 0:
                    self._stop.wait(wait)
                try:
                    s = socket.create_connection(self.addr, timeout=1.0)
                    if self.made % 2:
                        s.sendall(greeting)
                    held.append(s)
                except OSError:
                    self.failed += 1
                self.made += 1
                while len(held) > self.hold:
                    held.pop(0).close()
        finally:
            for s in held:
                s.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def churn_status(workdir: Path, rate_per_s: float = 400.0, seconds: float = 20.0, max_connections: int = 50,
                 interval_s: float = 0.1) -> dict:
    """A keyed client's ``status`` latency while ``rate_per_s`` raw TCP connections a second
    reach the job socket of a daemon with keys and ``max_connections`` connections at most.

    Every ``interval_s`` a new keyed client connects (as ``jitsched status`` does) and asks
    ``status``, timed from its connect to the reply (a timeout counts as its 2 s); a second
    client holds its connection and asks on it. ``churn_status_p99_s`` pools both.
    """
    from jitsched.client import Client
    from jitsched.keys import init_keys

    keys = workdir / "keys"
    init_keys(keys, list(HOSTS), ["alice"])
    d = DaemonProc(workdir, limits={"max_connections": max_connections})
    with open(d.config, "a") as f:
        f.write(f'\n[security]\nkeys_dir = "{keys}"\n')
    fresh: list[float] = []
    held: list[float] = []
    timeouts = 0
    churn = None
    try:
        _start_keyed(d, keys)
        churn = _Churn(d.job_endpoint, rate_per_s).start()
        time.sleep(1.0)
        end = time.monotonic() + seconds
        with Client(d.job_endpoint, timeout_s=2.0, keys=keys, key_name="alice") as kept:
            while time.monotonic() < end:
                t0 = time.perf_counter()
                try:
                    with Client(d.job_endpoint, timeout_s=2.0, keys=keys, key_name="alice") as c:
                        c.status(limit=1)
                    fresh.append(time.perf_counter() - t0)
                except TimeoutError:
                    timeouts += 1
                    fresh.append(2.0)
                t0 = time.perf_counter()
                try:
                    kept.status(limit=1)
                    held.append(time.perf_counter() - t0)
                except TimeoutError:
                    timeouts += 1
                    held.append(2.0)
                time.sleep(interval_s)
        st = _status_keyed(d, keys)
    finally:
        if churn is not None:
            churn.stop()
        d.stop()
    both = fresh + held
    loop = (st or {}).get("loop", {})
    log(f"churn: {churn.made if churn else 0} raw connects in {seconds:.0f} s (+1 s before) at {rate_per_s:g}/s, "
        f"max_connections {max_connections}: keyed status p50 {_percentile(both, 0.5) * 1e3:.1f} ms, "
        f"p99 {_percentile(both, 0.99) * 1e3:.1f} ms (new connection p99 {_percentile(fresh, 0.99) * 1e3:.1f} ms, "
        f"held {_percentile(held, 0.99) * 1e3:.1f} ms), {timeouts} timeouts of {len(both)}; "
        f"evicted {loop.get('jobs_connections_evicted')}, refused {loop.get('jobs_connections_refused')}")
    return {"churn_status_p99_s": _percentile(both, 0.99), "churn_status_p50_s": _percentile(both, 0.5),
            "churn_status_new_p99_s": _percentile(fresh, 0.99), "churn_status_held_p99_s": _percentile(held, 0.99),
            "churn_status_timeouts": timeouts, "churn_status_n": len(both),
            "churn_connects": churn.made if churn else 0, "churn_connects_per_s": rate_per_s,
            "churn_max_connections": max_connections,
            "churn_evicted": loop.get("jobs_connections_evicted"),
            "churn_refused": loop.get("jobs_connections_refused")}


def _status_keyed(d: DaemonProc, keys: Path) -> dict | None:
    from jitsched.client import Client

    with Client(d.job_endpoint, timeout_s=5.0, keys=keys, key_name="alice") as c, \
            contextlib.suppress(TimeoutError):
        return c.status(limit=1)
    return None


def _start_keyed(d: DaemonProc, keys: Path, timeout_s: float = 60.0) -> None:
    """Start ``d`` (its TOML names ``keys``) and wait until a keyed ``status`` is answered."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "jitsched", "daemon", "--config", str(d.config), "--quiet"]
    with open(d.log_path, "ab") as logf:
        d.proc = subprocess.Popen(cmd, stdout=logf, stderr=logf, start_new_session=True)
    d.incarnations += 1
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not d.alive():
            break
        if _status_keyed(d, keys) is not None:
            return
    raise RuntimeError(f"daemon with keys did not answer within {timeout_s} s (log {d.log_path})")


__all__ = ["churn_status", "ended_job_memory"]
