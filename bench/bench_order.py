"""Job-order variants of the priority jit beside Sincronia and the default jit, at bench.paper's two operating points.

Why this bench: at the paper point Sincronia kept a better mean DL speed-up and
JCT than jit ranking a job's transfers by the bytes the job has left on their
host pair alone (``job_exp`` 0, the default until the ``jit job_exp`` rows here
made 1 the default), which kept the files better; Sincronia ranks whole jobs
(coflows) with BSSI over every port. This bench measures whether a job-level order inside jit moves it
past that frontier, with the variants defined here (not registered: they use
the numpy reference of the priority greedy, not the kernel, so they are slow):

- ``bssi``: jobs and files ordered by BSSI as Sincronia does, files weighted by
  Smith's rule for slowdown (``8 s`` of their source's line rate over their
  size, divided by ``file_w``; ``file_w`` None: unit weights, i.e. Sincronia's
  order), inside a job jit's need order;
- ``busiest``: jit's per-pair (job_exp 0) order, but a job's key is the bytes it has
  left on its busiest port over all its unfinished transfers;
- ``remap``: jit's per-pair (job_exp 0) keys, handed out to the jobs again in BSSI order
  of the jobs alone (BSSI picks which job goes first, files meet jit's keys);
- ``smith``: jit's per-pair (job_exp 0) key of a job's group times the job's size (all
  its bytes over ``8 s`` of the line rate) to the power ``gamma``: Smith's rule,
  which the files already follow, for the jobs too (the speed-up is a mean of
  JCT ratios, which a job-size weight serves; SRPT on bytes serves mean JCT);
- ``cap``: the default jit, but its DL flows never take more than ``cap`` of a
  port (scaled down where they would), the files max-min fair on the rest: the
  price of Fig. 8's per-slot remaining bandwidth, which a work-conserving order
  leaves at 0 wherever DL bytes fill a port (``--only cap``).

``--files-alone`` runs each point's files with every DL job taken out, under
the reference (fair sharing), jit and Sincronia: the files' mean slowdown
that their contention for ports alone costs under each order, against which
their slowdown beside the jobs shows what the DL traffic adds.

Usage: ``python bench/bench_order.py [--quick] [--points paper,load0.5] [--only WORDS | --files-alone] [--json]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from dataclasses import dataclass, field, replace
from multiprocessing import Pool

import numpy as np

from jitsched.bench.paper.spec import SCALES
from jitsched.bench.paper.workload import paper_workload
from jitsched.dag.model import TRANSFER
from jitsched.plan.alloc import priority_greedy_reference
from jitsched.plan.priority import background_key
from jitsched.policies import reference_policy
from jitsched.policies.base import DONE, Allocation
from jitsched.policies.common import background_shares
from jitsched.policies.jit import BG_REF_S, DRIFT_RTOL, JitOptions, JitPolicy
from jitsched.policies.sincronia import bssi_order

# bench.paper's operating points: (offered load, files' share of the jobs); the paper
# point's values are the calibration bench.paper caches in paper_load.json at the
# default scale (tensorflow's background slowdown 2.22 there, the paper's 2.23).
POINTS = {"load0.5": (0.5, 0.2), "paper": (0.85, 0.5)}


def _order_rates(view, key: np.ndarray, need_of: np.ndarray) -> np.ndarray:
    """Strict priority over ``view.flows`` by (key, job or file, need, node), bytes/s."""
    f, dag, cl = view.flows, view.dag, view.cluster
    is_job = f.job >= 0
    node = np.maximum(f.node, 0)
    key = key.copy()
    key[is_job & (f.remaining <= DRIFT_RTOL * dag.size[node])] = -1.0  # crumbs first, as jit
    need = np.where(is_job, need_of[node], 0.0)
    ident = np.where(is_job, f.job, dag.n_jobs + f.bg)
    order = np.lexsort((f.bg, f.node, need, ident, key))
    return priority_greedy_reference(order, f.src, f.dst, cl.egress_Bps.copy(), cl.ingress_Bps.copy())


def _smith_key(view, bg_weight: float) -> np.ndarray:
    """jit's key of each flow as a background flow (bytes; Smith's rule), shape (F,): see GroupPriority."""
    f = view.flows
    bsize = view.bg_bytes[np.maximum(f.bg, 0)]
    return background_key(f.remaining, bsize, view.cluster.egress_Bps[f.src], BG_REF_S, bg_weight)


def _live_transfers(view) -> np.ndarray:
    dag = view.dag
    return np.flatnonzero((dag.kind == TRANSFER) & view.job_arrived[dag.job_of]
                          & ~view.job_done[dag.job_of] & (view.node_state != DONE))


def _job_loads(view, jobs: np.ndarray, n_rows: int) -> np.ndarray:
    """Seconds of port time each of ``jobs`` has left, shape (n_rows, 2H): egress, then ingress; row i is jobs[i]."""
    dag, cl = view.dag, view.cluster
    h = len(cl)
    tr = _live_transfers(view)
    pos = np.full(dag.n_jobs, -1, dtype=np.int64)
    pos[jobs] = np.arange(len(jobs))
    load = np.zeros((n_rows, 2 * h))
    rem = view.remaining[tr]
    np.add.at(load, (pos[dag.job_of[tr]], dag.src[tr]), rem / cl.egress_Bps[dag.src[tr]])
    np.add.at(load, (pos[dag.job_of[tr]], h + dag.dst[tr]), rem / cl.ingress_Bps[dag.dst[tr]])
    return load


@dataclass(frozen=True)
class BssiOptions(JitOptions):
    """:class:`BssiJit`'s options: jit's, and the files' Smith weight ``file_w`` (None: unit weights)."""

    file_w: float | None = 1.5


class BssiJit(JitPolicy):
    """jit with jobs and files in BSSI order (Sincronia's), files Smith-weighted (see the module)."""

    name = "jit-bssi"
    role = ""
    Options = BssiOptions

    def __init__(self, options: BssiOptions | None = None) -> None:
        super().__init__(options)
        self.file_w = self.options.file_w
        self._stale = True
        self._jr = self._br = np.zeros(0)

    def reset(self, cluster) -> None:
        super().reset(cluster)
        self._stale = True

    def on_job_arrival(self, view, job: int) -> None:
        super().on_job_arrival(view, job)
        self._stale = True

    def on_flow_arrival(self, view, bg: int) -> None:
        self._stale = True

    def on_flow_done(self, view, bg: int) -> None:
        self._stale = True

    def on_node_done(self, view, node: int) -> None:
        super().on_node_done(view, node)
        if view.dag.kind[node] == TRANSFER and view.job_done[view.dag.job_of[node]]:
            self._stale = True

    def _reorder(self, view) -> None:
        # Sincronia's recompute at coflow arrivals and completions, on the same loads
        dag, cl = view.dag, view.cluster
        h = len(cl)
        jobs = np.flatnonzero(view.job_arrived & ~view.job_done)
        f = view.flows
        bgs = np.unique(f.bg[f.bg >= 0])
        nc = len(jobs) + len(bgs)
        load = _job_loads(view, jobs, nc)
        w = np.ones(nc)
        if len(bgs):
            sel = f.bg >= 0
            bpos = np.searchsorted(bgs, f.bg[sel])
            np.add.at(load, (bpos + len(jobs), f.src[sel]), f.remaining[sel] / cl.egress_Bps[f.src[sel]])
            np.add.at(load, (bpos + len(jobs), h + f.dst[sel]), f.remaining[sel] / cl.ingress_Bps[f.dst[sel]])
            if self.file_w is not None:
                src = np.zeros(len(bgs), dtype=np.int64)
                src[bpos] = f.src[sel]
                w[len(jobs):] = BG_REF_S * cl.egress_Bps[src] / view.bg_bytes[bgs] / self.file_w
        rank = np.empty(nc)
        rank[bssi_order(load, w)] = np.arange(nc)
        self._jr = np.full(dag.n_jobs, float(nc))
        self._jr[jobs] = rank[:len(jobs)]
        self._br = np.full(len(view.bg_bytes), float(nc))
        self._br[bgs] = rank[len(jobs):]
        self._stale = False

    def allocate(self, view) -> Allocation:
        self._sync_priority(view)
        if self._stale or len(self._jr) != view.dag.n_jobs or len(self._br) != len(view.bg_bytes):
            self._reorder(view)
        f = view.flows
        if len(f) == 0:
            return Allocation(np.zeros(0))
        key = np.where(f.job >= 0, self._jr[np.maximum(f.job, 0)], self._br[np.maximum(f.bg, 0)])
        return Allocation(_order_rates(view, key, self._need))


class BusiestJit(JitPolicy):
    """jit with a job's key the bytes it has left on its busiest port (every unfinished transfer)."""

    name = "jit-busiest"
    role = ""

    def allocate(self, view) -> Allocation:
        self._sync_priority(view)
        f, dag, cl = view.flows, view.dag, view.cluster
        if len(f) == 0:
            return Allocation(np.zeros(0))
        h = len(cl)
        tr = _live_transfers(view)
        load = np.zeros(dag.n_jobs * 2 * h)
        rem, j = view.remaining[tr], dag.job_of[tr]
        np.add.at(load, j * 2 * h + dag.src[tr], rem)
        np.add.at(load, j * 2 * h + h + dag.dst[tr], rem)
        job_key = load.reshape(dag.n_jobs, 2 * h).max(axis=1)
        key = np.where(f.job >= 0, job_key[np.maximum(f.job, 0)], _smith_key(view, self.bg_weight))
        return Allocation(_order_rates(view, key, self._need))


@dataclass(frozen=True)
class RemapOptions(BssiOptions):
    """:class:`RemapJit`'s options: jit's (the files keep jit's keys: no ``file_w``)."""

    file_w: float | None = field(default=None, init=False)


class RemapJit(BssiJit):
    """jit's keys (a job's bytes left on the flow's host pair, Smith's rule for files), but the
    jobs' keys handed out again in BSSI order of the jobs alone: BSSI decides which job goes
    first, and files meet the same set of job keys as under jit."""

    name = "jit-remap"
    Options = RemapOptions

    def _reorder(self, view) -> None:
        dag = view.dag
        jobs = np.flatnonzero(view.job_arrived & ~view.job_done)
        load = _job_loads(view, jobs, len(jobs))
        self._jr = np.full(dag.n_jobs, float(len(jobs)))
        if len(jobs):
            rank = np.empty(len(jobs))
            rank[bssi_order(load)] = np.arange(len(jobs))
            self._jr[jobs] = rank
        self._br = np.zeros(len(view.bg_bytes))
        self._stale = False

    def allocate(self, view) -> Allocation:
        self._sync_priority(view)
        if self._stale or len(self._jr) != view.dag.n_jobs:
            self._reorder(view)
        f, dag = view.flows, view.dag
        if len(f) == 0:
            return Allocation(np.zeros(0))
        is_job = f.job >= 0
        node = np.maximum(f.node, 0)
        grp = self._group[node]
        sent = np.where(is_job, dag.size[node] - f.remaining, 0.0)
        left = self._pair_left - np.bincount(grp[is_job], weights=sent[is_job], minlength=len(self._pair_left))
        job_key = np.full(dag.n_jobs, np.inf)  # a job's smallest key among its flows now
        np.minimum.at(job_key, f.job[is_job], left[grp[is_job]])
        act = np.flatnonzero(np.isfinite(job_key))
        remapped = job_key.copy()
        remapped[act[np.argsort(self._jr[act], kind="stable")]] = np.sort(job_key[act])
        key = np.where(is_job, remapped[np.maximum(f.job, 0)], _smith_key(view, self.bg_weight))
        return Allocation(_order_rates(view, key, self._need))


@dataclass(frozen=True)
class SmithOptions(JitOptions):
    """:class:`SmithJit`'s options: jit's, the exponent ``gamma`` and the job's ``size``
    ("total": all its bytes; "left": those it has not sent yet)."""

    gamma: float = 1.0
    size: str = "total"


class SmithJit(JitPolicy):
    """jit with Smith's rule for DL jobs as well as files: a group's key is the bytes its job has
    left on the flow's host pair times the job's size (all its transfers' bytes) over ``8 s`` of
    the source's line rate, to the power ``gamma`` (0: jit's per-pair key; 1: the files' rule)."""

    name = "jit-smith"
    role = ""
    Options = SmithOptions

    def __init__(self, options: SmithOptions | None = None) -> None:
        super().__init__(options)
        self.gamma = self.options.gamma
        self.size = self.options.size
        self._job_bytes = None

    def allocate(self, view) -> Allocation:
        self._sync_priority(view)
        f, dag, cl = view.flows, view.dag, view.cluster
        if len(f) == 0:
            return Allocation(np.zeros(0))
        if self.size == "left":
            tr = _live_transfers(view)
            self._job_bytes = np.bincount(dag.job_of[tr], weights=view.remaining[tr], minlength=dag.n_jobs)
        elif self._job_bytes is None or len(self._job_bytes) != dag.n_jobs:
            tr = dag.kind == TRANSFER
            self._job_bytes = np.bincount(dag.job_of[tr], weights=dag.size[tr], minlength=dag.n_jobs)
        is_job = f.job >= 0
        node = np.maximum(f.node, 0)
        grp = self._group[node]
        sent = np.where(is_job, dag.size[node] - f.remaining, 0.0)
        left = self._group_left(grp[is_job], sent[is_job])
        size = self._job_bytes[np.maximum(f.job, 0)] / (BG_REF_S * cl.egress_Bps[f.src])
        job_key = np.zeros(len(f))
        job_key[is_job] = left[grp[is_job]] * size[is_job] ** self.gamma
        key = np.where(is_job, job_key, _smith_key(view, self.bg_weight))
        return Allocation(_order_rates(view, key, self._need))


@dataclass(frozen=True)
class CapOptions(JitOptions):
    """:class:`CapJit`'s options: jit's and the DL flows' ``cap`` of every port."""

    cap: float = 1.0


class CapJit(JitPolicy):
    """The default jit with its DL flows held to ``cap`` of every port; the files share the rest (see the module)."""

    name = "jit-cap"
    Options = CapOptions

    def __init__(self, options: CapOptions | None = None) -> None:
        super().__init__(options)
        self.cap = float(self.options.cap)

    def allocate(self, view) -> Allocation:
        rates = np.array(super().allocate(view).rates, dtype=np.float64)
        f, cl = view.flows, view.cluster
        dl = f.job >= 0
        if self.cap >= 1.0 or not dl.any():
            return Allocation(rates)
        h = len(cl)
        cap_e, cap_i = cl.egress_Bps, cl.ingress_Bps
        load_e = np.bincount(f.src[dl], weights=rates[dl], minlength=h)
        load_i = np.bincount(f.dst[dl], weights=rates[dl], minlength=h)
        # every DL flow of a port over its cap scaled by the same factor: the order's shares kept
        fe = np.minimum(1.0, self.cap * cap_e / np.maximum(load_e, 1e-300))
        fi = np.minimum(1.0, self.cap * cap_i / np.maximum(load_i, 1e-300))
        rates[dl] *= np.minimum(fe[f.src[dl]], fi[f.dst[dl]])
        return Allocation(background_shares(rates, f, cap_e, cap_i))


VARIANTS = {"bssi": BssiJit, "busiest": BusiestJit, "remap": RemapJit, "smith": SmithJit, "cap": CapJit}
# (label, registered policy or variant, options): the grid the default run measures
GRID = (("sincronia", "sincronia", {}), ("jit", "jit", {}),
        ("bssi unit (= Sincronia's order)", "bssi", {"file_w": None}),
        ("bssi files x1/0.7", "bssi", {"file_w": 0.7}), ("bssi files x1/1", "bssi", {"file_w": 1.0}),
        ("bssi files x1/1.5", "bssi", {"file_w": 1.5}), ("bssi files x1/3", "bssi", {"file_w": 3.0}),
        ("busiest bg_weight 0.7", "busiest", {"bg_weight": 0.7}),
        ("busiest bg_weight 1", "busiest", {"bg_weight": 1.0}),
        ("remap bg_weight 0.7", "remap", {"bg_weight": 0.7}), ("remap bg_weight 1", "remap", {"bg_weight": 1.0}),
        ("smith jobs^0.5", "smith", {"gamma": 0.5, "bg_weight": 0.7}),
        ("smith jobs^1", "smith", {"gamma": 1.0, "bg_weight": 0.7}),
        # smith with the job's bytes left is JitPolicy's job_exp (a test checks they give the
        # same runs), measured here through the kernel: seconds per run, not minutes
        *((f"jit job_exp 1 (x job's bytes left), bg_weight {w:g}", "jit", {"job_exp": 1.0, "bg_weight": w})
          for w in (0.7, 0.5, 0.35)),
        ("jit job_exp 2", "jit", {"job_exp": 2.0}),
        *((f"jit DL cap {c:g}", "cap", {"cap": c}) for c in (0.9, 0.75, 0.5)))


FILES_ALONE = ("jit", "sincronia")  # beside the reference, under --files-alone


def run_one(task: tuple) -> tuple:
    """One simulation: (task, model per job, JCTs s, file slowdowns, wall s); ``task``'s optional seventh
    item True takes the DL jobs out of the workload (the files alone)."""
    from jitsched.sim import simulate

    point, seed, policy, options, hosts, jobs = task[:6]
    load, share = POINTS[point]
    wl = paper_workload(jobs, n_hosts=hosts, load=load, background_share=share, seed=seed, real=True)
    if len(task) > 6 and task[6]:
        wl = replace(wl, jobs=())
    pol = VARIANTS[policy](VARIANTS[policy].Options(**options)) if policy in VARIANTS else policy
    t0 = time.perf_counter()
    res = simulate(wl, pol, seed=seed, policy_options=None if policy in VARIANTS else options)
    return (task, list(res.job_model), res.jct_s.tolist(), res.bg_slowdown.tolist(),
            res.remaining_bw_slots.tolist(), time.perf_counter() - t0)


def summarise(results: dict, points, seeds, grid) -> dict:
    """Per point and label: mean per-model speed-up vs the reference (mean over seeds), mean JCT, files' mean
    slowdown, and the p5 and median of the per-slot remaining bandwidth (Fig. 8; samples pooled over seeds)."""
    ref = reference_policy()
    out: dict = {}
    for point in points:
        out[point] = {}
        for label, policy, options in ((ref, ref, {}), *grid):
            sps, jcts, bgs, rem = [], [], [], []
            for s in seeds:
                _, base_jct, _, _ = results[(point, s, ref, "{}")]
                models, jct, bg, slots = results[(point, s, policy, json.dumps(options, sort_keys=True))]
                rem += slots
                per = collections.defaultdict(list)
                for m, a, b in zip(models, base_jct, jct, strict=True):
                    per[m].append(a / b)
                sps.append(float(np.mean([np.mean(v) for v in per.values()])))
                jcts += jct
                bgs += bg
            out[point][label] = {"speedup_mean": float(np.mean(sps)), "speedup_per_seed": sps,
                                 "jct_mean_s": float(np.mean(jcts)), "bg_slowdown_mean": float(np.mean(bgs)),
                                 "remaining_bw_p5": float(np.percentile(rem, 5)) if rem else None,
                                 "remaining_bw_median": float(np.median(rem)) if rem else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="bench.paper's quick scale (20 hosts, 25 jobs, seed 0)")
    ap.add_argument("--points", default="paper,load0.5", help="operating points, comma-separated")
    ap.add_argument("--workers", type=int, default=2, help="parallel processes (default 2)")
    ap.add_argument("--only", default="", help="run only the grid rows whose label contains one of these "
                                               "comma-separated words (default: all)")
    ap.add_argument("--seeds", default="", help="workload seeds, comma-separated (default: the scale's, six at "
                                                "default scale; the numpy variants take ~100 s a run there, "
                                                "so narrow the grid with --only)")
    ap.add_argument("--files-alone", action="store_true",
                    help=f"the files with every DL job taken out, under the reference, {' and '.join(FILES_ALONE)}: "
                         "their mean slowdown from their own contention under each order")
    ap.add_argument("--json", action="store_true", help="one JSON line of the table on stdout")
    args = ap.parse_args(argv)
    if args.files_alone and args.only:
        ap.error("--files-alone runs its own three policies; leave out --only")
    points = [p for p in args.points.split(",") if p]
    bad = [p for p in points if p not in POINTS]
    if bad or not points:
        ap.error(f"--points: expected some of {', '.join(POINTS)}, got {args.points!r}")
    sc = SCALES["quick" if args.quick else "default"]
    seeds = [int(x) for x in args.seeds.split(",") if x] or list(sc["seeds"])
    ref = reference_policy()
    words = [w for w in args.only.split(",") if w]
    grid = tuple(g for g in GRID if not words or any(w in g[0] for w in words))
    if args.files_alone:
        grid = tuple((p, p, {}) for p in FILES_ALONE)
    runs = [(ref, {}), *((p, o) for _, p, o in grid)]
    tasks = [(pt, s, p, o, sc["hosts"], sc["jobs"], args.files_alone) for pt in points for s in seeds
             for p, o in runs]
    results = {}
    t0 = time.perf_counter()
    with Pool(args.workers) as pool:
        for i, (task, models, jct, bg, slots, wall) in enumerate(pool.imap_unordered(run_one, tasks), 1):
            point, seed, policy, options = task[:4]
            results[(point, seed, policy, json.dumps(options, sort_keys=True))] = (models, jct, bg, slots)
            print(f"[{i}/{len(tasks)}] {point} seed {seed} {policy} {options or ''} {wall:.0f} s "
                  f"(elapsed {time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    if args.files_alone:
        table = {pt: {label: {"bg_slowdown_mean": float(np.mean([x for s in seeds for x in
                                                                results[(pt, s, p, "{}")][2]]))}
                      for label, p in ((ref, ref), *((g[0], g[1]) for g in grid))} for pt in points}
    else:
        table = summarise(results, points, seeds, grid)
    if args.json:
        print(json.dumps({"hosts": sc["hosts"], "jobs": sc["jobs"], "seeds": seeds, "files_alone": args.files_alone,
                          "points": table}))
    elif args.files_alone:
        for point, rows in table.items():
            print(f"{point} (load, files' share {POINTS[point]}), the files alone: files' mean slowdown")
            for label, m in rows.items():
                print(f"  {label:34s} {m['bg_slowdown_mean']:.3f}")
    else:
        for point, rows in table.items():
            print(f"{point} (load, files' share {POINTS[point]}): speed-up vs {ref} / mean JCT s / files' slowdown"
                  " / remaining bandwidth per slot p5, median")
            for label, m in rows.items():
                print(f"  {label:34s} {m['speedup_mean']:.3f} / {m['jct_mean_s']:.3f} / {m['bg_slowdown_mean']:.3f}"
                      f" / {m['remaining_bw_p5']:.3f}, {m['remaining_bw_median']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
