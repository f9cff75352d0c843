"""What a level change costs a running TCP flow under the tc backend: retransmissions and RTOs per move."""

# Why this bench: a DL flow's strict-priority level changes while it runs whenever a
# group ranked above it on its host finishes (dense per-host ranks) or a job arrives.
# Since f5ea1aa the tc backend moves such a flow to a new HTB class at its new level
# (HTB keeps a busy class under the prio it became busy with) and deletes the old class
# one apply later. This bench measures what TCP sees of that, against a control run
# that applies the same schedule with no level change: two bulk flows on one veth pair
# shaped to --link-mbit, ``a`` ranked 3, ``b`` ranked 5 with a small guaranteed rate,
# then ``b`` promoted to 1 and demoted back, --moves times; the kernel's TcpRetransSegs
# and TcpExtTCPTimeouts in the sender's namespace over each move's window, and the
# backlog (packets) the old class still held when it was deleted.

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from jitsched.netns import BULK_SINK, BULK_SOURCE, PAIR_ADDRS, veth_pair
from jitsched.testbed import TestbedError, require_netns

COUNTERS = ("TcpRetransSegs", "TcpExtTCPTimeouts")


def tcp_counters(netns: str) -> dict[str, int]:
    """The kernel's TCP counters of :data:`COUNTERS` in ``netns`` (``nstat -az``), absolute."""
    out = subprocess.run(["ip", "netns", "exec", netns, "nstat", "-az", *COUNTERS],
                         capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in COUNTERS:
            got[parts[0]] = int(parts[1])
    return {k: got.get(k, 0) for k in COUNTERS}


def class_qlen(netns: str, minor: int) -> int | None:
    """Packets queued in a0's HTB class ``1:minor`` (None: no such class)."""
    from pyroute2 import IPRoute

    with IPRoute(netns=netns) as ip:
        idx = ip.link_lookup(ifname="a0")[0]
        for c in ip.get_classes(idx):
            if c["handle"] & 0xFFFF == minor:
                return int(c.get_attr("TCA_STATS")["qlen"])
    return None


def one_run(link_Bps: float, moves: int, window_s: float, change: bool) -> list[dict]:
    """One pair of flows, ``moves`` level changes of ``b`` (or the same schedule re-applied); per move."""
    from jitsched.agents.backends.base import FlowRate
    from jitsched.agents.backends.htb import install_shaper
    from jitsched.agents.backends.tc import TcBackend

    src_addr, dst_addr = PAIR_ADDRS
    with veth_pair("jsr") as (src, dst):
        install_shaper("a0", link_Bps, netns=src)
        sink = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SINK, dst_addr])
        backend = TcBackend(link_Bps, dev="a0", netns=src)
        source = None

        def ranked(level_b: int) -> list[FlowRate]:
            # b keeps 5 % guaranteed: a flow held at its floor would stall in TCP's
            # back-off, which is the agents' RTO cap's business, not this bench's
            return [FlowRate("j/a", 0.0, src_addr, 40000, dst_addr, 5201, prio=3),
                    FlowRate("j/b", 0.05 * link_Bps, src_addr, 40001, dst_addr, 5201, prio=level_b)]

        try:
            backend.apply(ranked(5), 0.0)
            time.sleep(0.3)  # the sink listens
            source = subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE, src_addr,
                                       dst_addr, str(1.5 + moves * (window_s + 0.1) + 1.0)])
            time.sleep(1.5)  # both flows at their shares
            out = []
            for k in range(moves):
                level = (1 if k % 2 == 0 else 5) if change else 5
                before, old = tcp_counters(src), backend.flows["j/b"].minor
                backend.apply(ranked(level), 0.0)
                time.sleep(0.1)  # one slot: the old class goes at the next apply
                left = class_qlen(src, old) if backend.flows["j/b"].minor != old else 0
                backend.apply(ranked(level), 0.0)
                time.sleep(window_s)
                after = tcp_counters(src)
                out.append({"promotion": change and k % 2 == 0, "old_class_qlen": left,
                            **{c: after[c] - before[c] for c in COUNTERS}})
            return out
        finally:
            for p in (source, sink):
                if p is not None:
                    p.kill()
                    p.wait()
            backend.close()


def summarize(moves: list[dict]) -> dict:
    """Medians and totals of per-move counters."""
    out: dict = {"moves": len(moves)}
    for c in (*COUNTERS, "old_class_qlen"):
        vals = [m[c] for m in moves if m[c] is not None]
        out[f"{c}_median"] = statistics.median(vals) if vals else None
        out[f"{c}_total"] = sum(vals)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--link-mbit", type=float, default=10.0, help="the pair's shaped rate, Mbit/s (default 10)")
    ap.add_argument("--moves", type=int, default=4, help="level changes per run, promotions and demotions alternating")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each kind (default 3)")
    ap.add_argument("--window-s", type=float, default=1.4, help="counted after each move, s (default 1.4)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.moves < 1 or a.repeat < 1 or not a.link_mbit > 0 or not a.window_s > 0:
        ap.error("--moves and --repeat must be >= 1, --link-mbit and --window-s positive")
    try:
        require_netns()
    except TestbedError as exc:
        print(f"bench_relevel: {exc}", file=sys.stderr)
        return 2
    say = (lambda m: print(m, file=sys.stderr, flush=True)) if a.json else print
    link_Bps = a.link_mbit * 1e6 / 8
    runs: dict[str, list[dict]] = {"relevel": [], "control": []}
    for r in range(a.repeat):
        for kind in ("relevel", "control") if r % 2 == 0 else ("control", "relevel"):
            got = one_run(link_Bps, a.moves, a.window_s, kind == "relevel")
            runs[kind] += got
            say(f"run {r} {kind}: " + ", ".join(f"{m['TcpRetransSegs']} rtx/{m['TcpExtTCPTimeouts']} rto"
                                                  + (f" (old class held {m['old_class_qlen']})"
                                                     if m["promotion"] else "") for m in got))
    out = {"link_mbit": a.link_mbit, "repeat": a.repeat,
           "promotions": summarize([m for m in runs["relevel"] if m["promotion"]]),
           "demotions": summarize([m for m in runs["relevel"] if not m["promotion"]]),
           "control": summarize(runs["control"]), "runs": runs}
    if a.json:
        print(json.dumps(out))
        return 0
    for kind in ("promotions", "demotions", "control"):
        s = out[kind]
        print(f"{kind:<10} {s['moves']:3d} moves: retransmitted segments median {s['TcpRetransSegs_median']}, "
              f"RTOs median {s['TcpExtTCPTimeouts_median']}, old class backlog median {s['old_class_qlen_median']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
