"""Check the coflow-trace reader on the public FB2010 trace, which the project does not ship.

Usage::

    python bench/tools/check_fb_trace.py PATH/FB2010-1Hr-150-0.txt

Prints the trace's ports, coflows and flows; exits 1 if they are not the public trace's
(150 ports, 526 coflows, coflow 2 as its line says) or flows were lost.
"""

from __future__ import annotations

import argparse
import sys

from jitsched.plan.coflow import MB_BYTES, Flow, read_coflow_trace


def check(path: str) -> list[str]:
    """What differs between the trace at ``path`` as read and the public FB2010 trace."""
    tr = read_coflow_trace(path)
    bad = []
    if (tr.n_ports, len(tr.coflows)) != (150, 526):
        bad.append(f"{tr.n_ports} ports and {len(tr.coflows)} coflows, not 150 and 526")
    else:
        c = tr.coflows[1]  # its line: "2 10833 2 104 132 1 140:48.0"
        if abs(c.arrival_s - 10.833) > 1e-9:
            bad.append(f"coflow 2 arrives at {c.arrival_s} s, not 10.833")
        if c.flows != (Flow(104, 140, 24.0 * MB_BYTES), Flow(132, 140, 24.0 * MB_BYTES)):
            bad.append(f"coflow 2's flows are {c.flows}")
    n_flows = sum(len(c.mappers) * len(c.reducers) for c in tr.coflows)
    if sum(len(c.flows) for c in tr.coflows) + tr.local_flows != n_flows:
        bad.append("flows lost: network and local flows do not add up to mappers x reducers")
    print(f"{path}: {tr.n_ports} ports, {len(tr.coflows)} coflows, "
          f"{sum(len(c.flows) for c in tr.coflows)} network flows, {tr.local_flows} local")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="the public FB2010-1Hr-150-0.txt")
    args = ap.parse_args(argv)
    bad = check(args.trace)
    for line in bad:
        print(f"check_fb_trace: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
