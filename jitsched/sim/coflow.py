"""Coflow-trace replay: a coflow benchmark trace as a workload of transfer-only jobs, and its CCT summary."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jitsched.errors import ValidationError
from jitsched.model import Cluster, Job, Transfer, Workload

# Trace sizes are in MB; the coflow literature's simulators use 10^6 bytes.
MB = 1e6


def read_coflow_trace(path: str | Path, bps: float = 1e9) -> Workload:
    """Read a coflow trace (``<ports> <coflows>`` then one coflow per line) as a workload.

    Each coflow ``<id> <arrival ms> <M> <mapper port>xM <R> <reducer port>:<MB>xR``
    becomes a job of transfers only: one flow per (mapper, reducer), reducer-major,
    each carrying the reducer's MB divided by the number of mappers. Ports
    are hosts with ``bps`` bits/s each way. A mapper on the reducer's own port
    moves no data over the network and gives no flow.

    Parameters
    ----------
    path : str or Path
    bps : float
        Port capacity, bits per second.

    Returns
    -------
    Workload
        Jobs named ``coflow-<id>`` with ``model="coflow"``.

    Raises
    ------
    ValidationError
        On a malformed line (with its line number).
    """
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as exc:
        raise ValidationError(f"{p}: cannot read coflow trace ({exc})") from None
    if not lines:
        raise ValidationError(f"{p}: empty coflow trace")
    try:
        n_ports, n_coflows = (int(x) for x in lines[0].split()[:2])
    except ValueError:
        raise ValidationError(f"{p}:1: expected '<ports> <coflows>'") from None
    if n_ports < 2:
        raise ValidationError(f"{p}:1: need at least 2 ports, got {n_ports}")
    cluster = Cluster.uniform(n_ports, bps)
    names = cluster.names
    jobs = []
    for lineno, line in enumerate(lines[1:], start=2):
        tok = line.split()
        if not tok:
            continue
        try:
            cid, arr_ms, m = tok[0], float(tok[1]), int(tok[2])
            mappers = [int(x) for x in tok[3:3 + m]]
            r = int(tok[3 + m])
            reducers = []
            for x in tok[4 + m:4 + m + r]:
                port, mb = x.split(":")
                reducers.append((int(port), float(mb)))
        except (ValueError, IndexError):
            raise ValidationError(f"{p}:{lineno}: malformed coflow line") from None
        if len(mappers) != m or len(reducers) != r or m == 0:
            raise ValidationError(f"{p}:{lineno}: expected {m} mappers and {r} reducers")
        for port in mappers + [q for q, _ in reducers]:
            if not 0 <= port < n_ports:
                raise ValidationError(f"{p}:{lineno}: port {port} outside 0..{n_ports - 1}")
        transfers = []
        for q, mb in reducers:
            share = mb * MB / m
            for k, s in enumerate(mappers):
                if s == q or share <= 0:
                    continue
                transfers.append(Transfer(f"r{q}m{k}", names[s], names[q], share))
        if not transfers:
            continue  # all-local coflow: nothing crosses the network
        jobs.append(Job(f"coflow-{cid}", (), tuple(transfers), (), arr_ms / 1e3, 0.0, "coflow"))
    if not jobs:
        raise ValidationError(f"{p}: no coflow moves data over the network")
    return Workload(cluster, tuple(jobs), ())


def cct_summary(result) -> dict:
    """``{"coflows", "avg_cct_s", "p95_cct_s"}`` of a simulation of a coflow workload (seconds)."""
    cct = np.asarray(result.jct_s, dtype=np.float64)
    return {"coflows": int(len(cct)), "avg_cct_s": float(np.mean(cct)),
            "p95_cct_s": float(np.percentile(cct, 95))}
