"""The agents' background floor swept on the testbed and in the simulator: DL JCT, files' goodput and stalls per floor."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from jitsched.agents.backends.base import BACKGROUND_FLOOR, check_background_floor
from jitsched.bench.common import pyplot, require_matplotlib
from jitsched.errors import ValidationError
from jitsched.testbed.options import DAEMON_POLICY, TestbedOptions

FLOORS = (0.0, 0.05, 0.1, 0.2, 0.3)
SCENARIOS = ("quick", "paper-mini")
# relative to the working directory, as bench.paper's --out: the checkout root when run from it
OUT = Path("docs") / "figures" / "floor"
# What a floor must give the unannounced files on every scenario to be chosen
# (medians over the runs): no file without progress for this long, and at least
# this share of the files' goodput under plain TCP on the same workload.
MAX_STALL_S = 1.0
MIN_GOODPUT_SHARE = 0.9
# jit's mean JCT must stay at least this much below plain TCP's (the testbed's goal)
MIN_JCT_RATIO = 1.5
RUN_KEYS = ("mean_jct_s", "background_mbit_mean", "background_max_stall_s", "completed", "jobs",
            "background_completed", "agents_failed")
SIM_JIT, SIM_NONE = DAEMON_POLICY["jit"], DAEMON_POLICY["none"]


def _median(values) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def testbed_runs(scenario: str, options: TestbedOptions, runs: int, say) -> list[dict]:
    """``runs`` testbed runs of ``scenario`` under ``options``: each run's figures (:data:`RUN_KEYS`) and CPU load."""
    from jitsched.testbed.e2e import run_scenario

    out = []
    for r in range(runs):
        t = time.perf_counter()
        res = run_scenario(scenario, options)
        row = {k: res[k] for k in RUN_KEYS} | {"cpu_busy_during_jobs": res["details"]["cpu_busy_during_jobs"],
                                                "errors": res["details"]["errors"],
                                                # per file: goodput, longest stall, life (s from the start)
                                                "files": {f: {k: r.get(k) for k in ("mbit", "max_stall_s", "start_s",
                                                                                     "end_s", "complete")}
                                                          for f, r in res["details"]["background"].items()}}
        what = f"floor {options.background_floor:g}" if options.enforced else "(plain TCP)"
        say(f"{scenario} {options.policy} {what} run {r}: JCT {row['mean_jct_s']}, "
            f"files {row['background_mbit_mean']} Mbit/s, max stall {row['background_max_stall_s']} s, "
            f"{row['completed']}/{row['jobs']} jobs, files {row['background_completed']} "
            f"({time.perf_counter() - t:.0f} s)")
        out.append(row)
    return out


def summarize_point(jit_runs: list[dict], none_runs: list[dict]) -> dict:
    """Medians of jit's runs at one floor against plain TCP's runs of the same scenario."""
    jct = _median(r["mean_jct_s"] for r in jit_runs)
    mbit = _median(r["background_mbit_mean"] for r in jit_runs)
    none_jct = _median(r["mean_jct_s"] for r in none_runs)
    none_mbit = _median(r["background_mbit_mean"] for r in none_runs)
    return {"mean_jct_s": jct, "background_mbit_mean": mbit,
            "background_max_stall_s": _median(r["background_max_stall_s"] for r in jit_runs),
            "jct_ratio_none_over_jit": _ratio(none_jct, jct), "goodput_share_of_none": _ratio(mbit, none_mbit),
            "cpu_busy_during_jobs": _median(r["cpu_busy_during_jobs"] for r in jit_runs),
            "failed_runs": sum(1 for r in jit_runs if r["agents_failed"] or r["completed"] != r["jobs"])}


def goals(point: dict) -> dict:
    """Which of the testbed's goals a floor's point meets: jit's JCT ratio, the files' goodput share, the stalls."""
    ratio = point.get("jct_ratio_none_over_jit")
    return {"jct_ratio": ratio is not None and ratio >= MIN_JCT_RATIO,
            "goodput_share": (point.get("goodput_share_of_none") or 0.0) >= MIN_GOODPUT_SHARE,
            "max_stall": (point.get("background_max_stall_s") if point.get("background_max_stall_s") is not None
                          else float("inf")) < MAX_STALL_S}


def meets(point: dict) -> bool:
    """Whether a floor's testbed point meets the files' goals (stall under :data:`MAX_STALL_S`, goodput share)."""
    met = goals(point)
    return met["goodput_share"] and met["max_stall"]


def choose_floor(result: dict, goals_of=meets) -> float | None:
    """The smallest floor meeting the files' goals on every scenario swept (None: none does).

    The DL JCT grows with the floor (the files take that share of the
    ports the jobs share with them), so the smallest floor that meets the
    goals is also the one that costs the jobs least. ``goals_of(point)``:
    whether a testbed point meets them (default :func:`meets`).
    """
    ok = [f for f in result["floors"]
          if all(f"{f:g}" in s["testbed"] and goals_of(s["testbed"][f"{f:g}"]) for s in result["scenarios"].values())]
    return min(ok) if ok else None


def no_stall(point: dict) -> bool:
    """Whether no file of a floor's testbed point went :data:`MAX_STALL_S` without progress."""
    return goals(point)["max_stall"]


def sweep(scenarios, floors, runs: int, seed: int, prefix: str, say, sim_only: bool = False,
          extend: dict | None = None) -> dict:
    """Testbed and simulator at each floor on each scenario; plain TCP (``none``) once per scenario.

    ``extend``: a saved result of the same seed to add these floors to; its
    scenarios' plain-TCP runs are reused (their points' reference) and its
    points kept.

    Returns
    -------
    dict
        ``floors``, ``runs``, ``seed`` and per scenario ``none`` (its runs and
        medians), ``testbed`` and ``simulator`` per floor (``f"{floor:g}"``),
        the testbed's with ``runs`` (every run's figures).
    """
    from jitsched.testbed.scenario import predict

    out: dict = extend or {"floors": [], "runs": runs, "seed": seed, "scenarios": {}}
    out["floors"] = sorted(set(out["floors"]) | set(floors))
    for sc in scenarios:
        entry: dict = out["scenarios"].setdefault(sc, {"testbed": {}, "simulator": {}})
        need_none = "none" not in entry or (not entry["none"]["runs"] and not sim_only)
        none_opts = TestbedOptions(policy="none", seed=seed, prefix=prefix)
        paired: dict[float, list[dict]] = {}
        if need_none and not sim_only and len(floors) == 1:
            # one floor (the goal table): jit and plain TCP alternate run by run, so that a
            # change of the machine's load during the runs falls on both
            jit_opts = TestbedOptions(seed=seed, prefix=prefix, background_floor=floors[0])
            none_runs, paired[floors[0]] = [], []
            for r in range(runs):
                for o in ((none_opts, jit_opts) if r % 2 == 0 else (jit_opts, none_opts)):
                    (none_runs if o is none_opts else paired[floors[0]]).extend(testbed_runs(sc, o, 1, say))
        elif need_none:
            none_runs = [] if sim_only else testbed_runs(sc, none_opts, runs, say)
        if need_none:
            entry["none"] = {"runs": none_runs, "mean_jct_s": _median(r["mean_jct_s"] for r in none_runs),
                             "background_mbit_mean": _median(r["background_mbit_mean"] for r in none_runs),
                             "background_max_stall_s": _median(r["background_max_stall_s"] for r in none_runs)}
        none_runs = entry["none"]["runs"]
        for f in floors:
            opts = TestbedOptions(seed=seed, prefix=prefix, background_floor=f)
            t = time.perf_counter()
            pred = predict(sc, seed, **opts.prediction_options())
            jit, tf = pred[SIM_JIT], pred[SIM_NONE]
            entry["simulator"][f"{f:g}"] = {
                "mean_jct_s": jit["mean_jct_s"], "background_mbit_mean": jit["background_mbit_mean"],
                "jct_ratio_none_over_jit": pred["jct_ratio_tf_over_jit"],
                "goodput_share_of_none": _ratio(jit["background_mbit_mean"], tf["background_mbit_mean"]),
                "none_mean_jct_s": tf["mean_jct_s"], "none_background_mbit_mean": tf["background_mbit_mean"]}
            say(f"{sc} simulator floor {f:g}: JCT {jit['mean_jct_s']:.2f} s (tensorflow {tf['mean_jct_s']:.2f}), "
                f"files {jit['background_mbit_mean']:.1f} Mbit/s (tensorflow {tf['background_mbit_mean']:.1f}) "
                f"({time.perf_counter() - t:.0f} s)")
            if sim_only:
                continue
            jit_runs = paired.get(f) or testbed_runs(sc, opts, runs, say)
            point = summarize_point(jit_runs, none_runs)
            entry["testbed"][f"{f:g}"] = point | {"goals_met": goals(point), "runs": jit_runs}
        out["scenarios"][sc] = entry
    if not sim_only:
        out["chosen_floor"] = choose_floor(out)
        # the stalls alone: the files' goodput share may not reach its goal at any floor swept
        out["no_stall_floor"] = choose_floor(out, no_stall)
        out["default_floor"] = BACKGROUND_FLOOR
    return out


def draw(result: dict, path: Path) -> None:
    """Per scenario, against the floor: DL mean JCT, the files' goodput share of plain TCP's, the longest stall."""
    plt = pyplot()
    scs = list(result["scenarios"])
    fig, axes = plt.subplots(len(scs), 3, figsize=(15, 3.4 * len(scs)), squeeze=False)
    floors = result["floors"]
    for row, sc in zip(axes, scs, strict=True):
        s = result["scenarios"][sc]
        for src, style in (("testbed", "o-"), ("simulator", "s--")):
            pts = [s[src].get(f"{f:g}") for f in floors]
            xs = [f for f, p in zip(floors, pts, strict=True) if p]
            if not xs:
                continue
            row[0].plot(xs, [p["mean_jct_s"] for p in pts if p], style, label=f"jit, {src}")
            row[1].plot(xs, [100 * (p["goodput_share_of_none"] or 0) for p in pts if p], style, label=src)
            if src == "testbed":  # the fluid simulator has no stalls
                row[2].plot(xs, [p["background_max_stall_s"] for p in pts if p], style, label="jit, testbed")
        if s["none"]["mean_jct_s"]:
            row[0].axhline(s["none"]["mean_jct_s"], color="grey", ls=":", label="plain TCP, testbed")
        row[1].axhline(100 * MIN_GOODPUT_SHARE, color="grey", ls=":", label=f"{MIN_GOODPUT_SHARE:.0%} goal")
        if s["none"]["background_max_stall_s"] is not None:
            row[2].axhline(s["none"]["background_max_stall_s"], color="grey", ls=":", label="plain TCP, testbed")
        row[2].axhline(MAX_STALL_S, color="red", ls=":", label=f"{MAX_STALL_S:g} s goal")
        row[2].set(title=f"{sc}: longest time a file made no progress", xlabel="background floor (share of each port)",
                   ylabel="s")
        row[0].set(title=f"{sc}: DL mean JCT", xlabel="background floor (share of each port)", ylabel="s")
        row[1].set(title=f"{sc}: files' goodput, % of plain TCP's", xlabel="background floor (share of each port)",
                   ylabel="%")
        for ax in row:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(result: dict) -> list[str]:
    """One line per scenario and floor: testbed and simulator side by side."""
    lines = [f"{'scenario':<11} {'floor':>5} {'JCT s':>7} {'none/jit':>8} {'files %':>7} {'stall s':>7}   "
             f"{'sim JCT':>7} {'sim none/jit':>12} {'sim files %':>11}"]

    def f(v, fmt):
        return format(v, fmt) if v is not None else "-"

    for sc, s in result["scenarios"].items():
        for fl in result["floors"]:
            tb, sim = s["testbed"].get(f"{fl:g}", {}), s["simulator"].get(f"{fl:g}")
            if sim is None:
                continue
            share = tb.get("goodput_share_of_none")
            lines.append(f"{sc:<11} {fl:>5g} {f(tb.get('mean_jct_s'), '7.2f')} "
                         f"{f(tb.get('jct_ratio_none_over_jit'), '8.3f')} "
                         f"{f(share * 100 if share is not None else None, '7.1f')} "
                         f"{f(tb.get('background_max_stall_s'), '7.2f')}   {sim['mean_jct_s']:7.2f} "
                         f"{sim['jct_ratio_none_over_jit']:12.3f} {100 * sim['goodput_share_of_none']:11.1f}")
        n = s["none"]
        if n["mean_jct_s"] is not None:
            lines.append(f"{sc:<11} {'none':>5} {n['mean_jct_s']:7.2f} {'':>8} {'':>7} "
                         f"{f(n['background_max_stall_s'], '7.2f')}   (plain TCP, "
                         f"files {f(n['background_mbit_mean'], '.1f')} Mbit/s)")
    return lines


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_floor", description=__doc__,
        epilog="Needs root and network namespaces (the testbed) unless --sim-only. A floor is chosen when, "
               f"on every scenario, no file stalls {MAX_STALL_S:g} s or more and the files get at least "
               f"{MIN_GOODPUT_SHARE:.0%} of their goodput under plain TCP (medians over the runs).")
    p.add_argument("--floors", type=float, nargs="+", default=list(FLOORS), metavar="SHARE",
                   help="background floors to sweep (default %(default)s)")
    p.add_argument("--scenario", nargs="+", default=list(SCENARIOS), help="testbed scenarios (default %(default)s)")
    p.add_argument("--runs", type=int, default=1, help="testbed runs per point, medians (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default %(default)s)")
    p.add_argument("--prefix", default="floor", help="testbed namespace prefix (default %(default)s)")
    p.add_argument("--sim-only", action="store_true", help="the simulator's side only (no testbed, no root)")
    p.add_argument("--out", type=Path, default=OUT,
                   help="writes OUT.json and OUT.png (default docs/figures/floor); '-': neither")
    p.add_argument("--extend", type=Path, metavar="FILE",
                   help="add the floors to a saved result (its plain-TCP runs reused) and write it as --out")
    p.add_argument("--note", default="", help="a note stored with the results (the machine's load, say)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        for f in a.floors:
            check_background_floor(f)
        if a.runs < 1:
            raise ValidationError(f"--runs: at least 1, got {a.runs}")
        TestbedOptions(seed=a.seed, prefix=a.prefix)
        from jitsched.testbed.scenario import get_scenario

        for sc in a.scenario:
            get_scenario(sc)
    except Exception as exc:  # noqa: BLE001 - every bad flag: one line, exit 2
        p.error(str(exc))
    write = str(a.out) != "-"
    if write:
        try:
            require_matplotlib()  # drawn after the runs: say now, not after them, if it cannot be
        except ImportError as exc:
            p.error(str(exc))

    def say(msg: str) -> None:
        print(msg, file=sys.stderr if a.json else sys.stdout, flush=True)

    extend = None
    if a.extend:
        try:
            extend = json.loads(a.extend.read_text())
            if extend["seed"] != a.seed or not isinstance(extend["scenarios"], dict):
                raise ValueError(f"seed {extend['seed']}, not {a.seed}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            p.error(f"--extend {a.extend}: not a bench_floor result to extend ({exc})")
    floors = sorted(set(a.floors))
    result = sweep(a.scenario, floors, a.runs, a.seed, a.prefix, say, a.sim_only, extend)
    note = " ".join(x for x in ((extend or {}).get("note", ""), a.note) if x)
    result |= {"note": note, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "goals": {"max_stall_s": MAX_STALL_S, "min_goodput_share": MIN_GOODPUT_SHARE,
                         "min_jct_ratio": MIN_JCT_RATIO}}
    if write:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        draw(result, a.out.with_suffix(".png"))
        say(f"wrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.png')}")
    if a.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
        return 0
    for line in table(result):
        print(line)
    if "chosen_floor" in result:
        print(f"chosen floor: {result['chosen_floor']}; the smallest without a stall of {MAX_STALL_S:g} s: "
              f"{result['no_stall_floor']} (the agents' default: {result['default_floor']:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
