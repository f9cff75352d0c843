"""Enforcement measured on the testbed: per-slot rate accuracy and rate-change latency of the tc backend."""

from __future__ import annotations

import threading
import time

import numpy as np

from jitsched.agents.backends.base import FlowRate, payload_share
from jitsched.plan import DEFAULT_SLOT_S
from jitsched.testbed import Testbed
from jitsched.testbed.bgtraffic import Receiver, connect, send_bytes

GOODPUT = payload_share()  # TCP payload per wire byte at MTU 1500 with timestamps
WINDOW_S = 0.005  # window for "the new rate shows on the wire"


def _sleep_until(t: float) -> None:
    # Sleep most of the way, then spin: time.sleep alone overshoots by up to a millisecond.
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        if left > 0.002:
            time.sleep(left - 0.0015)


def measure_enforcement(tb: Testbed, *, n_flows: int = 3, slot_s: float = DEFAULT_SLOT_S, n_slots: int = 30,
                        seed: int = 0, rate_range: tuple[float, float] = (0.05, 0.4),
                        background: bool = True, warmup_s: float = 0.5, port: int = 5301) -> dict:
    """Drive the tc backend with a random per-slot schedule and measure what arrives.

    Host 0 sends ``n_flows`` scheduled TCP flows (and, if ``background``, one
    unscheduled flow) to host 1; every slot the backend gets new payload
    rates drawn uniformly from ``rate_range`` (fractions of the link) and the
    leftover for background. The receiver timestamps every read.

    Parameters
    ----------
    tb : Testbed
        A running testbed with at least two hosts.
    slot_s : float
        Slot length, seconds.
    n_slots : int
        Slots measured (after ``warmup_s`` seconds at a fixed schedule).

    Returns
    -------
    dict
        ``ratio`` (achieved/target payload rate per flow and slot, list),
        ``apply_ms`` (slot boundary to the kernel's last ack, per slot),
        ``wire_ms`` (boundary to the first 5 ms window whose rate is nearer the
        new target than the old, per changed flow-slot), ``background_mbit``
        (background goodput over the measured slots, Mbit/s) and
        ``leftover_mbit`` (mean leftover the schedule gave background).
    """
    # imported here: pyroute2 takes ~0.4 s, and the CLI imports this module (for GOODPUT,
    # through the scenarios) to build its parser
    from jitsched.agents.backends.tc import TcBackend

    src, dst = tb.hosts[0], tb.hosts[1]
    line = tb.link_Bps
    rng = np.random.default_rng(seed)
    rx = Receiver(dst.address, port, netns=dst.netns)
    stop = threading.Event()
    backend = TcBackend(line, dev=src.dev, netns=src.netns)
    threads = []
    try:
        socks = [connect(dst.address, port, f"f{k}", netns=src.netns) for k in range(n_flows)]
        base = [FlowRate(f"f{k}", 0.0, *s.getsockname()[:2], dst.address, port) for k, s in enumerate(socks)]
        if background:
            socks.append(connect(dst.address, port, "bg", netns=src.netns))
        rates = rng.uniform(*rate_range, size=(n_slots + 1, n_flows)) * line * GOODPUT
        backend.apply([_with_rate(f, r) for f, r in zip(base, rates[0], strict=True)], line * GOODPUT - rates[0].sum())
        for s in socks:
            th = threading.Thread(target=send_bytes, args=(s, float("inf"), stop), daemon=True)
            th.start()
            threads.append(th)
        t0 = time.monotonic() + warmup_s
        apply_ms = []
        for i in range(n_slots):
            r = rates[i + 1]
            _sleep_until(t0 + i * slot_s)
            backend.apply([_with_rate(f, x) for f, x in zip(base, r, strict=True)], line * GOODPUT - r.sum())
            apply_ms.append((time.monotonic() - (t0 + i * slot_s)) * 1e3)
        _sleep_until(t0 + n_slots * slot_s)
    finally:
        stop.set()
        for th in threads:
            th.join(5.0)
        backend.close()
        rx.close()
    ratio, wire_ms = [], []
    for i in range(n_slots):
        b = t0 + i * slot_s
        for k in range(n_flows):
            rec = rx.flows[f"f{k}"]
            ratio.append(rec.bytes_between(b, b + slot_s) / slot_s / rates[i + 1, k])
            old, new = rates[i, k], rates[i + 1, k]
            if abs(new - old) > 0.3 * old:
                for d in np.arange(0.0, slot_s - WINDOW_S, 0.0005):
                    got = rec.bytes_between(b + d, b + d + WINDOW_S) / WINDOW_S
                    if abs(got - new) < abs(got - old):
                        wire_ms.append(d * 1e3)
                        break
    bg_mbit = float("nan")
    if background:
        bg_mbit = rx.flows["bg"].bytes_between(t0, t0 + n_slots * slot_s) / (n_slots * slot_s) * 8 / 1e6
    leftover = (line * GOODPUT - rates[1:].sum(axis=1)).mean() * 8 / 1e6
    return {"ratio": ratio, "apply_ms": apply_ms, "wire_ms": wire_ms, "background_mbit": bg_mbit,
            "leftover_mbit": float(leftover)}


def _with_rate(f: FlowRate, rate: float) -> FlowRate:
    return FlowRate(f.flow_id, float(rate), f.src_addr, f.src_port, f.dst_addr, f.dst_port)


def summarize(m: dict) -> dict:
    """Percentiles of :func:`measure_enforcement`'s output (ratios as fractions, latencies in ms)."""
    r = np.asarray(m["ratio"])
    return {
        "rate_accuracy_p50": float(np.median(r)),
        "rate_accuracy_p5": float(np.percentile(r, 5)),
        "rate_accuracy_p95": float(np.percentile(r, 95)),
        "rate_change_latency_ms_p50": float(np.median(m["apply_ms"])),
        "rate_change_latency_ms_max": float(np.max(m["apply_ms"])),
        "wire_latency_ms_p50": float(np.median(m["wire_ms"])) if m["wire_ms"] else float("nan"),
        "background_mbit": m["background_mbit"],
        "leftover_mbit": m["leftover_mbit"],
    }
