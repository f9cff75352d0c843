"""How tight the lower bound on mean JCT is: on random small workloads, the bound over the best schedule found by exhaustive search.

Why this bench: ``jitsched.plan.bound.lower_bound_mean_jct`` is what "jit is
1.06x the bound" is read against, and a bound is only worth as much as it is
tight. On workloads of 2-4 jobs (each a chain of 1-3 stages, a stage a
compute and one or two transfers) on 2-3 hosts at 1 Gbit/s, this bench finds
the best mean JCT among every strict job order (each simulated, work-conserving)
and every registered policy, and reports the bound over it: at most 1 on every
instance (the bound is valid there; an instance above 1 is listed and the exit
status is 1), and the closer to 1 the tighter.

Usage: ``python bench/bench_bound.py [--instances 200] [--first 0] [--json]``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import random
import sys
import time

import numpy as np

from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload

GBPS = 1e9  # the instances' link rate, bits/s


@functools.cache
def job_order_policy() -> type:
    """The policy class of a fixed strict job order (built on first use: the policies import SciPy)."""
    from jitsched.plan.alloc import priority_greedy
    from jitsched.policies.base import Allocation, Policy

    class JobOrder(Policy):
        """Strict priority by a fixed job order (``rank``: job index -> rank), work-conserving."""

        name = ""
        needs_dag = True

        def __init__(self, rank: dict[int, int]) -> None:
            self.rank = rank

        def allocate(self, view) -> Allocation:
            f = view.flows
            key = np.array([self.rank.get(int(j), len(self.rank)) for j in f.job])
            order = np.lexsort((f.node, key))
            return Allocation(priority_greedy(order, f.src, f.dst, view.cluster.egress_Bps,
                                              view.cluster.ingress_Bps))

    return JobOrder


def lower_bound_mean_jct(wl: Workload) -> float:
    """:func:`jitsched.plan.bound.lower_bound_mean_jct` of ``wl`` (seconds), imported on first use."""
    from jitsched.plan.bound import lower_bound_mean_jct as bound

    return bound(wl)


def random_workload(rng: random.Random, n_jobs: int, n_hosts: int) -> Workload:
    """``n_jobs`` jobs of 1-3 stages (a compute of up to 0.4 s, then one or two transfers of
    10-150 MB, which the next stage's compute waits for) on ``n_hosts`` hosts at 1 Gbit/s."""
    hosts = [f"h{i}" for i in range(n_hosts)]
    jobs = []
    for k in range(n_jobs):
        computes, transfers, edges = [], [], []
        prev = None
        for s in range(rng.randint(1, 3)):
            c = Compute(f"c{s}", rng.choice(hosts), rng.uniform(0.0, 0.4))
            computes.append(c)
            if prev:
                edges += [(t, c.id) for t in prev]
            prev = []
            for x in range(rng.randint(1, 2)):
                src, dst = rng.sample(hosts, 2)
                t = Transfer(f"t{s}{x}", src, dst, rng.uniform(10, 150) * 1e6)
                transfers.append(t)
                edges.append((c.id, t.id))
                prev.append(t.id)
        jobs.append(Job(f"j{k}", tuple(computes), tuple(transfers), tuple(edges),
                        arrival_s=rng.choice([0.0, 0.0, rng.uniform(0, 1.0)])))
    return Workload(Cluster.uniform(n_hosts, bps=GBPS), tuple(jobs))


def instance(seed: int) -> Workload:
    """The random workload of ``seed``: 2-4 jobs on 2-3 hosts."""
    rng = random.Random(seed)
    return random_workload(rng, rng.randint(2, 4), rng.randint(2, 3))


def best_found(wl: Workload) -> float:
    """The least mean JCT (seconds) of ``wl`` under every strict job order and every registered policy."""
    from jitsched.policies import POLICIES
    from jitsched.sim import simulate

    job_order = job_order_policy()
    found = [float(np.mean(simulate(wl, job_order({j: r for r, j in enumerate(p)})).jct_s))
             for p in itertools.permutations(range(len(wl.jobs)))]
    found += [float(np.mean(simulate(wl, name).jct_s)) for name in POLICIES]
    return min(found)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", type=int, default=200, help="random workloads (default 200)")
    ap.add_argument("--first", type=int, default=0, help="the first one's seed (default 0)")
    ap.add_argument("--json", action="store_true", help="one JSON line on stdout")
    args = ap.parse_args(argv)
    if args.instances < 1:
        ap.error("--instances: at least 1")
    t0 = time.perf_counter()
    ratios, above = [], []
    for k, seed in enumerate(range(args.first, args.first + args.instances)):
        wl = instance(seed)
        bound, best = lower_bound_mean_jct(wl), best_found(wl)
        ratios.append(bound / best)
        if bound > best * (1 + 1e-9):
            above.append({"seed": seed, "bound_s": bound, "best_s": best})
        if (k + 1) % 25 == 0 or k + 1 == args.instances:
            print(f"{k + 1}/{args.instances} instances ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    r = np.array(ratios)
    out = {"instances": len(r), "first_seed": args.first, "bound_over_best_min": float(r.min()),
           "bound_over_best_median": float(np.median(r)), "bound_over_best_max": float(r.max()),
           "exact": int(np.sum(r > 1 - 1e-9)), "above_best": above}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"bound over the best schedule found, {len(r)} instances: min {r.min():.3f}, median "
              f"{np.median(r):.3f}, max {r.max():.4f}; exact on {out['exact']}")
        for a in above:
            print(f"ABOVE THE BEST FOUND: seed {a['seed']}: bound {a['bound_s']:.4f} s, best {a['best_s']:.4f} s")
    return 1 if above else 0


if __name__ == "__main__":
    sys.exit(main())
