"""Priority classes in the simulator: critical jobs' JCT over their isolated JCT, normal and best-effort p99 slowdown, per load and policy; with ``--shared``, critical jobs that share ports admitted by LP reservations against port exclusivity."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace

import numpy as np

from jitsched.dag.model import Workload
from jitsched.errors import ValidationError
from jitsched.workloads.paper import generate_workload

POLICIES = ("jit", "sincronia")


@dataclass(frozen=True)
class ClassesOptions:
    """One run of the bench: the workload's shape, the classes' shares and what to run.

    Attributes
    ----------
    loads : tuple of float
        Offered loads (``generate_workload``'s ``load``).
    seeds : tuple of int
        Workload seeds; the classes are drawn with the same seed.
    n_jobs, n_hosts : int
        Jobs, DL jobs and background files together (``generate_workload``'s
        ``n_jobs``; about half are files), and hosts (``bps`` each).
    critical, best_effort : float
        Shares of the DL jobs marked critical and best-effort (the rest normal).
    policies : tuple of str
    eps, slot_s : float
        The reservations' JCT target over isolated and slot (``--shared``).
    bps : float
        Hosts' line rate, bits/s.
    critical_gap_s : float or None
        ``--shared``: the critical jobs arrive this far apart from the first one's
        arrival, so that they overlap in time on the ports they share (None: as drawn).
    """

    loads: tuple[float, ...] = (0.5, 0.7, 0.9)
    seeds: tuple[int, ...] = (0,)
    n_jobs: int = 60
    n_hosts: int = 20
    critical: float = 0.1
    best_effort: float = 0.2
    policies: tuple[str, ...] = POLICIES
    eps: float = 0.05
    slot_s: float = 0.01
    bps: float = 1e9
    critical_gap_s: float | None = None


def classed_workload(wl: Workload, critical: float, best_effort: float, seed: int) -> Workload:
    """``wl`` with ``round(critical * J)`` of its J DL jobs, drawn at random, critical and
    ``round(best_effort * J)`` others best-effort."""
    rng = np.random.default_rng(seed)
    n = len(wl.jobs)
    order = rng.permutation(n)
    n_crit, n_be = round(critical * n), round(best_effort * n)
    cls = ["normal"] * n
    for i in order[:n_crit]:
        cls[i] = "critical"
    for i in order[n_crit:n_crit + n_be]:
        cls[i] = "best-effort"
    return replace(wl, jobs=tuple(replace(j, job_class=c) for j, c in zip(wl.jobs, cls, strict=True)))


def isolated_jcts(wl: Workload) -> np.ndarray:
    """Each DL job's JCT alone in the cluster (simulated under the default jit, no background), seconds."""
    from jitsched.sim.isolated import isolated_run

    return np.array([isolated_run(j, wl.cluster).jct_s for j in wl.jobs])


def measure(opts: ClassesOptions) -> list[dict]:
    """One row per (load, seed, policy): critical JCT over isolated (mean, max), p99 slowdowns.

    Returns
    -------
    list of dict
        Keys ``load``, ``seed``, ``policy``, ``n_critical``, ``critical_over_isolated_mean``,
        ``critical_over_isolated_max``, ``normal_p99_slowdown``, ``best_effort_p99_slowdown``,
        ``best_effort_max_slowdown``, ``files_mean_slowdown``.
    """
    from jitsched.sim import Simulator

    rows = []
    for load in opts.loads:
        for seed in opts.seeds:
            wl = classed_workload(generate_workload(load, n_jobs=opts.n_jobs, n_hosts=opts.n_hosts, bps=opts.bps,
                                                    seed=seed),
                                  opts.critical, opts.best_effort, seed)
            iso = isolated_jcts(wl)
            cls = np.array([j.job_class for j in wl.jobs])
            for pol in opts.policies:
                res = Simulator(wl, pol, seed=seed).run()
                slow = res.jct_s / iso
                crit, norm, be = (slow[cls == c] for c in ("critical", "normal", "best-effort"))
                rows.append({
                    "load": load, "seed": seed, "policy": pol, "n_critical": int(len(crit)),
                    "critical_over_isolated_mean": float(crit.mean()) if len(crit) else float("nan"),
                    "critical_over_isolated_max": float(crit.max()) if len(crit) else float("nan"),
                    "normal_p99_slowdown": float(np.percentile(norm, 99)) if len(norm) else float("nan"),
                    "best_effort_p99_slowdown": float(np.percentile(be, 99)) if len(be) else float("nan"),
                    "best_effort_max_slowdown": float(be.max()) if len(be) else float("nan"),
                    "files_mean_slowdown": float(np.mean(res.bg_slowdown)) if len(res.bg_slowdown) else float("nan"),
                })
    return rows


def bunched(wl: Workload, gap_s: float) -> Workload:
    """``wl`` with its critical jobs arriving ``gap_s`` apart, in their order, from the first one's arrival."""
    crit = sorted((j.arrival_s, k) for k, j in enumerate(wl.jobs) if j.job_class == "critical")
    if not crit:
        return wl
    at = {k: crit[0][0] + i * gap_s for i, (_, k) in enumerate(crit)}
    return replace(wl, jobs=tuple(replace(j, arrival_s=at[k]) if k in at else j for k, j in enumerate(wl.jobs)))


def exclusive_admits(wl: Workload) -> np.ndarray:
    """Which critical jobs port exclusivity admits, in arrival order: a job none of whose
    ports an admitted critical job holds (for its isolated JCT lower bound after its arrival)."""
    from jitsched.daemon.jobs import isolated_jct_s

    cl = wl.cluster
    held: dict[tuple[int, int], float] = {}
    ok = np.zeros(len(wl.jobs), dtype=bool)
    for k in np.argsort([j.arrival_s for j in wl.jobs], kind="stable"):
        j = wl.jobs[k]
        if j.job_class != "critical":
            continue
        ports = {p for t in j.transfers for p in ((cl.index(t.src), 0), (cl.index(t.dst), 1))}
        if all(held.get(p, -np.inf) <= j.arrival_s for p in ports):
            ok[k] = True
            until = j.arrival_s + isolated_jct_s(j, cl)
            held.update(dict.fromkeys(ports, until))
    return ok


def measure_shared(opts: ClassesOptions) -> list[dict]:
    """One row per (load, seed): critical jobs admitted by port exclusivity and by LP
    reservations (the others run as normal), and the slowdowns with the reservations enforced.

    Returns
    -------
    list of dict
        Keys ``load``, ``seed``, ``n_critical``, ``admitted_exclusive``, ``admitted_lp``,
        ``critical_over_isolated_mean``, ``critical_over_isolated_max`` (admitted by the LP,
        simulated with their reserved rates and the default jit on what is left),
        ``normal_p99_slowdown``, ``best_effort_p99_slowdown``, ``exclusive_critical_over_isolated_max``
        (admitted by exclusivity, the default jit alone), ``refused_bottlenecks``.
    """
    from jitsched.plan.reserve import ReservationBook, ReserveOptions, job_windows
    from jitsched.policies.base import make_policy
    from jitsched.policies.reserved import Reserved
    from jitsched.sim import Simulator
    from jitsched.sim.isolated import isolated_run

    rows = []
    ropts = ReserveOptions(eps=opts.eps, slot_s=opts.slot_s)
    for load in opts.loads:
        for seed in opts.seeds:
            wl = classed_workload(generate_workload(load, n_jobs=opts.n_jobs, n_hosts=opts.n_hosts, bps=opts.bps,
                                                    seed=seed),
                                  opts.critical, opts.best_effort, seed)
            if opts.critical_gap_s is not None:
                wl = bunched(wl, opts.critical_gap_s)
            alone = [isolated_run(j, wl.cluster) for j in wl.jobs]  # JCTs, and critical jobs' windows
            iso = np.array([r.jct_s for r in alone])
            cls = np.array([j.job_class for j in wl.jobs])
            excl = exclusive_admits(wl)
            book = ReservationBook(wl.cluster, ropts)
            admitted: dict[int, str] = {}
            refused = []
            for k in np.argsort([j.arrival_s for j in wl.jobs], kind="stable"):
                j = wl.jobs[k]
                if j.job_class == "critical":
                    d = book.admit(j.id, job_windows(j, wl.cluster, alone[k], ropts), j.arrival_s)
                    if d.admitted:
                        admitted[int(k)] = j.id
                    else:
                        refused.append(d.bottleneck)
            lp_cls = np.where((cls == "critical") & ~np.isin(np.arange(len(cls)), list(admitted)), "normal", cls)
            lp_wl = replace(wl, jobs=tuple(replace(j, job_class=str(c)) for j, c in zip(wl.jobs, lp_cls, strict=True)))
            res = Simulator(lp_wl, Reserved(make_policy("jit"), book, admitted), seed=seed).run()
            slow = res.jct_s / iso
            crit = slow[list(admitted)]
            ex_cls = np.where((cls == "critical") & ~excl, "normal", cls)
            ex_wl = replace(wl, jobs=tuple(replace(j, job_class=str(c)) for j, c in zip(wl.jobs, ex_cls, strict=True)))
            ex_slow = Simulator(ex_wl, "jit", seed=seed).run().jct_s / iso
            norm, be = slow[lp_cls == "normal"], slow[lp_cls == "best-effort"]
            rows.append({
                "load": load, "seed": seed, "n_critical": int((cls == "critical").sum()),
                "admitted_exclusive": int(excl.sum()), "admitted_lp": len(admitted),
                "critical_over_isolated_mean": float(crit.mean()) if len(crit) else float("nan"),
                "critical_over_isolated_max": float(crit.max()) if len(crit) else float("nan"),
                "normal_p99_slowdown": float(np.percentile(norm, 99)) if len(norm) else float("nan"),
                "best_effort_p99_slowdown": float(np.percentile(be, 99)) if len(be) else float("nan"),
                "exclusive_critical_over_isolated_max": float(ex_slow[excl].max()) if excl.any() else float("nan"),
                "refused_bottlenecks": refused,
            })
    return rows


def _floats(text: str, name: str, kind=float) -> tuple:
    try:
        return tuple(kind(x) for x in text.split(","))
    except ValueError:
        raise ValidationError(f"--{name}: expected comma-separated numbers, got {text!r}") from None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--loads", default="0.5,0.7,0.9")
    ap.add_argument("--seeds", default="0", help="comma-separated workload seeds")
    ap.add_argument("--jobs", type=int, default=60, help="jobs, DL jobs and files together")
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--critical", type=float, default=0.1, help="share of DL jobs marked critical")
    ap.add_argument("--best-effort", type=float, default=0.2, help="share of DL jobs marked best-effort")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--bps", type=float, default=1e9, help="hosts' line rate, bits/s")
    ap.add_argument("--shared", action="store_true",
                    help="critical jobs sharing ports: admitted by LP reservations against port exclusivity, "
                         "then simulated with the reservations enforced (--policies unused)")
    ap.add_argument("--critical-gap", type=float, default=None,
                    help="--shared: critical jobs arrive this many seconds apart (default: as drawn)")
    ap.add_argument("--eps", type=float, default=0.05, help="reservations' JCT target over isolated, minus 1")
    ap.add_argument("--slot", type=float, default=0.01, help="reservations' slot, seconds")
    ap.add_argument("--json", action="store_true", help="one JSON line: {\"rows\": [...]}")
    args = ap.parse_args(argv)
    try:
        opts = ClassesOptions(loads=_floats(args.loads, "loads"), seeds=_floats(args.seeds, "seeds", int),
                              n_jobs=args.jobs, n_hosts=args.hosts, critical=args.critical,
                              best_effort=args.best_effort, policies=tuple(args.policies.split(",")),
                              eps=args.eps, slot_s=args.slot, bps=args.bps, critical_gap_s=args.critical_gap)
        if not (0 <= opts.critical and 0 <= opts.best_effort and opts.critical + opts.best_effort <= 1):
            raise ValidationError("--critical, --best-effort: shares >= 0 that sum to at most 1")
        if not (opts.bps > 0 and opts.slot_s > 0 and opts.eps >= 0):
            raise ValidationError("--bps, --slot: must be positive; --eps: must be >= 0")
        rows = measure_shared(opts) if args.shared else measure(opts)
    except (ValidationError, KeyError) as exc:
        print(f"bench_classes: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"rows": rows}))
        return 0
    if args.shared:
        print(f"{opts.n_jobs} jobs (DL and files) on {opts.n_hosts} hosts at {opts.bps:g} bit/s, DL jobs "
              f"{opts.critical:.0%} critical; reservations eps {opts.eps:g}, slot {opts.slot_s:g} s")
        print(f"{'load':>5} {'seed':>4} {'critical':>8} {'excl':>5} {'lp':>4} {'crit mean':>9} {'crit max':>9} "
              f"{'normal p99':>10} {'be p99':>8}  refused at")
        for r in rows:
            print(f"{r['load']:5.2f} {r['seed']:4d} {r['n_critical']:8d} {r['admitted_exclusive']:5d} "
                  f"{r['admitted_lp']:4d} {r['critical_over_isolated_mean']:9.3f} "
                  f"{r['critical_over_isolated_max']:9.3f} {r['normal_p99_slowdown']:10.3f} "
                  f"{r['best_effort_p99_slowdown']:8.3f}  {', '.join(r['refused_bottlenecks'])}")
        return 0
    print(f"{opts.n_jobs} jobs (DL and files) on {opts.n_hosts} hosts, DL jobs {opts.critical:.0%} critical, "
          f"{opts.best_effort:.0%} best-effort; slowdown = JCT / isolated JCT")
    print(f"{'load':>5} {'seed':>4} {'policy':>10} {'crit mean':>9} {'crit max':>9} {'normal p99':>10} "
          f"{'be p99':>8} {'be max':>8} {'files':>7}")
    for r in rows:
        print(f"{r['load']:5.2f} {r['seed']:4d} {r['policy']:>10} {r['critical_over_isolated_mean']:9.3f} "
              f"{r['critical_over_isolated_max']:9.3f} {r['normal_p99_slowdown']:10.3f} "
              f"{r['best_effort_p99_slowdown']:8.3f} {r['best_effort_max_slowdown']:8.3f} "
              f"{r['files_mean_slowdown']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
