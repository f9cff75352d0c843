"""Real enforcement on the emulated cluster: tc rate accuracy and rate-change latency, medians of repeated runs.

Needs root and network namespaces. Each repeat builds a fresh 2-host testbed,
drives the tc backend with a random per-slot schedule (3 scheduled flows +
1 unscheduled background flow, host 0 -> host 1) and tears it down.

The JIT vs ``none`` job-completion comparison needs the daemon, agents and
job runners (``jitsched testbed run``); the bench reports it as unavailable
until they are installed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from jitsched import testbed
from jitsched.testbed.measure import measure_enforcement, summarize
from jitsched.testbed.scenario import require_daemon_side

GOALS = {"rate_accuracy_p50": "within ±3 %", "rate_accuracy_p5": "within ±10 %",
         "rate_change_latency_ms_p50": "< 5 ms after the slot boundary"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--link-mbit", type=float, default=100.0)
    p.add_argument("--slot-s", type=float, default=0.1)
    p.add_argument("--slots", type=int, default=40)
    p.add_argument("--prefix", default="jsb")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    runs = []
    for r in range(a.repeat):
        tb = testbed.up(2, a.link_mbit, prefix=a.prefix)
        try:
            runs.append(summarize(measure_enforcement(tb, slot_s=a.slot_s, n_slots=a.slots, seed=r)))
        finally:
            testbed.down(a.prefix)
    med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
    try:
        require_daemon_side()
        jct = "run `jitsched testbed run --policy jit|none --json` (not wired into this bench yet)"
    except testbed.TestbedError as exc:
        jct = f"unavailable: {exc}"
    out = {"link_mbit": a.link_mbit, "slot_s": a.slot_s, "slots": a.slots, "repeat": a.repeat,
           "median": med, "jct_jit_vs_none": jct}
    if a.json:
        json.dump(out, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"tc enforcement, {a.link_mbit:g} Mbit/s links, {a.slots} slots of {a.slot_s * 1e3:g} ms, "
          f"median of {a.repeat} runs")
    for k, v in med.items():
        print(f"  {k:<30} {v:10.4f}   {GOALS.get(k, '')}")
    print(f"  JCT jit vs none: {jct}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
