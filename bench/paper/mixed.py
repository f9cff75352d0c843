"""The mixed-shape point: parameter-server, sharded and all-reduce jobs of many workers in one stream, every policy against the lower bound."""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from jitsched.bench.paper.regimes import gather
from jitsched.workloads.paper import MODELS, generate_workload
from jitsched.workloads.shapes import MIXED, SHAPES, ShapeOptions, shape_of


@dataclass(frozen=True)
class MixedPoint:
    """The workload of the point: ``jitsched gen-workload --shape mixed`` with these options."""

    load: float = 0.5
    n_jobs: int = 40
    n_hosts: int = 20
    bps: float = 1e10
    workers: int = 4
    servers: int = 2
    models: tuple[str, ...] = MODELS

    def command(self, seed: int) -> str:
        """The ``jitsched gen-workload`` command that writes this point's workload for ``seed``."""
        return (f"jitsched gen-workload --load {self.load:g} --n-jobs {self.n_jobs} --hosts {self.n_hosts} "
                f"--bps {self.bps:g} --models {','.join(self.models)} --shape {MIXED} "
                f"--workers {self.workers} --servers {self.servers} --seed {seed}")


def mixed_workload(point: MixedPoint, seed: int):
    """The point's workload for ``seed`` (:meth:`MixedPoint.command`)."""
    return generate_workload(point.load, n_jobs=point.n_jobs, n_hosts=point.n_hosts, bps=point.bps,
                             models=point.models, seed=seed,
                             shapes=ShapeOptions(MIXED, point.workers, point.servers))


def run_mixed(task: tuple[MixedPoint, int, tuple[str, ...]]) -> dict:
    """One seed of the point under every policy: per-job JCTs (seconds), shapes and the bound."""
    from jitsched.plan.bound import lower_bound_mean_jct
    from jitsched.sim import simulate

    point, seed, policies = task
    wl = mixed_workload(point, seed)
    out = {"seed": seed, "bound": lower_bound_mean_jct(wl), "shape": [shape_of(j.id) for j in wl.jobs],
           "jct": {}}
    for pol in policies:
        out["jct"][pol] = simulate(wl, pol, seed=seed).jct_s.tolist()
    return out


def summarize(runs: list[dict], policies: tuple[str, ...], reference: str) -> dict:
    """Per policy, over the seeds: mean JCT, mean per-job speedup over ``reference``,
    ``over_bound`` (the mean of each seed's mean JCT over that seed's bound), and the mean JCT
    of each shape's jobs."""
    runs = sorted(runs, key=lambda r: r["seed"])
    out: dict = {}
    for p in policies:
        by_shape = {}
        for sh in SHAPES:
            x = [j for r in runs for j, s in zip(r["jct"][p], r["shape"], strict=True) if s == sh]
            by_shape[sh] = float(np.mean(x)) if x else None
        out[p] = {"jct_mean_s": float(np.mean([np.mean(r["jct"][p]) for r in runs])),
                  "speedup_mean": float(np.mean([np.mean(np.array(r["jct"][reference]) / np.array(r["jct"][p]))
                                                 for r in runs])),
                  "over_bound": float(np.mean([np.mean(r["jct"][p]) / r["bound"] for r in runs])),
                  "jct_mean_s_by_shape": by_shape}
    out["bound_mean_jct_s"] = float(np.mean([r["bound"] for r in runs]))
    out["jobs_by_shape"] = {sh: sum(r["shape"].count(sh) for r in runs) for sh in SHAPES}
    out["seeds"] = [r["seed"] for r in runs]
    return out


def sweep(ex: Executor, point: MixedPoint, seeds: list[int], policies: tuple[str, ...],
          progress=None) -> list[dict]:
    """Every seed of the point under every policy, in ``ex``'s processes."""
    return gather(ex, run_mixed, [(point, s, policies) for s in seeds], progress)


def table(summary: dict, policies: tuple[str, ...]) -> str:
    """A markdown table: mean JCT, over the bound, speed-up and per-shape mean JCT per policy."""
    lines = ["| policy | mean JCT s | over bound | speed-up | " + " | ".join(SHAPES) + " |",
             "|" + "---|" * (4 + len(SHAPES))]
    for p in policies:
        r = summary[p]
        shapes = " | ".join("-" if r["jct_mean_s_by_shape"][sh] is None else f"{r['jct_mean_s_by_shape'][sh]:.4g}"
                            for sh in SHAPES)
        lines.append(f"| {p} | {r['jct_mean_s']:.4g} | {r['over_bound']:.3f} | {r['speedup_mean']:.3f} | {shapes} |")
    lines.append(f"\nbound {summary['bound_mean_jct_s']:.4g} s; jobs by shape {summary['jobs_by_shape']}; "
                 f"seeds {summary['seeds']}")
    return "\n".join(lines)


__all__ = ["MixedPoint", "mixed_workload", "run_mixed", "summarize", "sweep", "table"]
