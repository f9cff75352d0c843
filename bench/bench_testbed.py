"""Real enforcement on the emulated cluster: tc rate accuracy and rate-change latency, medians of repeated runs.

Needs root and network namespaces. Each repeat builds a fresh 2-host testbed,
drives the tc backend with a random per-slot schedule (3 scheduled flows +
1 unscheduled background flow, host 0 -> host 1) and tears it down.

Then the JIT vs ``none`` comparison: ``jitsched testbed run`` of the same
scenario and seed under both policies (real daemon with the ``jit`` policy
and tc agents, or no scheduling at all), mean JCT, LAT hit rate and
background throughput; JCT ratio = none / jit (> 1: JIT faster).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from jitsched import testbed
from jitsched.testbed.measure import measure_enforcement, summarize
from jitsched.testbed.scenario import SCENARIOS, require_daemon_side

GOALS = {"rate_accuracy_p50": "within ±3 %", "rate_accuracy_p5": "within ±10 %",
         "rate_change_latency_ms_p50": "< 5 ms after the slot boundary"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--link-mbit", type=float, default=100.0)
    p.add_argument("--slot-s", type=float, default=0.1)
    p.add_argument("--slots", type=int, default=40)
    p.add_argument("--prefix", default="jsb")
    p.add_argument("--scenario", choices=tuple(SCENARIOS), default="quick")
    p.add_argument("--seed", type=int, default=0)
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
    except testbed.TestbedError as exc:
        jct = f"unavailable: {exc}"
    else:
        from jitsched.testbed.e2e import run_scenario

        res = {pol: run_scenario(a.scenario, pol, seed=a.seed, prefix=a.prefix) for pol in ("jit", "none")}
        j, n = res["jit"]["mean_jct_s"], res["none"]["mean_jct_s"]
        jct = {"scenario": a.scenario, "seed": a.seed,
               "jct_ratio_none_over_jit": n / j if j and n else None,
               **{pol: {k: v for k, v in r.items() if k != "details"} | {"jct_s": r["details"]["jct_s"]}
                  for pol, r in res.items()}}
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
