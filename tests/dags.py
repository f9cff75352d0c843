"""Helpers for tests: small hand-written jobs and a hypothesis strategy for random DAG jobs."""

from __future__ import annotations

from hypothesis import strategies as st

from jitsched.dag.model import Cluster, Compute, Job, Transfer, parse_workload

GBIT = 1e9  # bits/s: 125e6 bytes/s


def cluster(n: int = 4, bps: float = 8e9) -> Cluster:
    """``n`` hosts at ``bps`` bits/s (8e9 bits/s = 1e9 bytes/s: 1 GB takes 1 s alone)."""
    return Cluster.uniform(n, bps)


def workload(jobs: list[dict], n_hosts: int = 4, bps: float = 8e9, background=()):
    return parse_workload({
        "cluster": {"hosts": [{"name": f"h{i}", "egress_bps": bps, "ingress_bps": bps}
                              for i in range(n_hosts)]},
        "jobs": jobs,
        "background": list(background),
    })


def job(id="j", computes=(), transfers=(), edges=(), arrival_s=0.0):
    """A native job map; computes ``(id, host, s)``, transfers ``(id, src, dst, bytes)``."""
    return {
        "id": id, "arrival_s": arrival_s,
        "computes": [{"id": c, "host": h, "duration_s": d} for c, h, d in computes],
        "transfers": [{"id": t, "src": s, "dst": d, "bytes": b} for t, s, d, b in transfers],
        "edges": [list(e) for e in edges],
    }


@st.composite
def random_jobs(draw, max_jobs: int = 3, max_nodes: int = 14, n_hosts: int = 4) -> list[Job]:
    """Random DAG jobs: nodes in a random order, edges only forward, random kinds."""
    n_jobs = draw(st.integers(1, max_jobs))
    jobs = []
    for k in range(n_jobs):
        n = draw(st.integers(1, max_nodes))
        kinds = draw(st.lists(st.booleans(), min_size=n, max_size=n))  # True: transfer
        computes, transfers, ids = [], [], []
        for i, is_t in enumerate(kinds):
            if is_t:
                src = draw(st.integers(0, n_hosts - 1))
                dst = (src + draw(st.integers(1, n_hosts - 1))) % n_hosts
                size = draw(st.floats(1e3, 5e9))
                transfers.append((f"t{i}", f"h{src}", f"h{dst}", size))
            else:
                computes.append((f"c{i}", f"h{draw(st.integers(0, n_hosts - 1))}",
                                 draw(st.floats(0.0, 3.0))))
            ids.append(f"t{i}" if is_t else f"c{i}")
        edges = []
        for j in range(n):
            for i in range(j):
                if draw(st.integers(0, 9)) < 3:
                    edges.append((ids[i], ids[j]))
        arrival = draw(st.floats(0.0, 5.0))
        jobs.append(job(f"job{k}", computes, transfers, edges, arrival))
    return list(workload(jobs, n_hosts).jobs)


def reversed_chain_job() -> Job:
    """Three reads h0 -> h1 of 3, 2 and 1 s at 1 Gbit/s, needed in that order by a chain of 1-s computes."""
    # c0 -> c1 -> c2, each consuming one read; the read needed first is the largest
    comps = tuple(Compute(f"c{i}", "h1", 1.0) for i in range(3))
    trs = tuple(Transfer(f"t{i}", "h0", "h1", s * 1.25e8) for i, s in enumerate((3.0, 2.0, 1.0)))
    edges = (("t0", "c0"), ("c0", "c1"), ("t1", "c1"), ("c1", "c2"), ("t2", "c2"))
    return Job("j", comps, trs, edges, 0.0, 0.0, "m")
