"""The testbed's class scenarios: a critical job run alone for its isolated JCT, alone beside the files on its ports, then among normal jobs and those files."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from jitsched import testbed
from jitsched.testbed.options import TestbedOptions

# A flow carried its reservation when the agents gave it at least this share of its
# largest reserved rate in some slot (the body's rates are the reservation's floats).
CARRIED_SHARE = 1.0 - 1e-6


def run_classes(sc, scenario: str, options: TestbedOptions) -> dict:
    """Run a scenario with a critical job (``Scenario.critical_model``) on one testbed:
    the critical job alone, the critical job beside the files, then the whole
    workload, all under ``options.policy``.

    Each run has a daemon and agents of its own (an earlier run's reservation is
    gone when the next daemon admits the job again). The first is the job's
    isolated JCT on these links under this policy; the last its JCT among the
    normal jobs and the files that take its ports. The run beside the files
    alone tells the files' background floor (a share of each port the agents
    keep for traffic they do not rank) apart from what the other jobs cost it.

    Parameters
    ----------
    sc : Scenario
    scenario : str
    options : TestbedOptions

    Returns
    -------
    dict
        The second run's result (:func:`jitsched.testbed.e2e.run_scenario`), with
        ``jobs`` and ``completed`` counting the run alone too, ``agents_failed``
        of both, and ``critical_job``; ``critical_jct_s`` and
        ``critical_isolated_jct_s`` (on the testbed, alone) and
        ``critical_over_isolated``; ``critical_with_files_jct_s`` (alone beside the
        files) with ``files_over_isolated`` (its ratio to the isolated JCT: the
        files' share) and ``critical_over_with_files`` (the whole run's ratio to
        it: the other jobs' share); ``critical_runner_lag_s`` (per run: the job
        runner's own lag, what its JCT has beyond the one its transfers' times
        allow) and ``critical_ideal_over_isolated`` (``critical_over_isolated``
        without the lags: the network's share); ``normal_mean_jct_s``; ``admission``: the
        daemon's decision in the second run (``admitted``, ``admitted as
        normal``, ``refused``), its ``epsilon`` and the isolated JCT and target
        it reserved for (the simulator's, on the payload rate the agents can give it);
        ``critical_reserved``:
        the job's transfers with reserved rates, those the agents scheduled
        (``registered``: a transfer under 10 ms at the line rate rides
        unregistered) and those the agents gave at least their largest reserved
        rate (``carried``). ``details.isolated`` and ``details.with_files`` hold the
        figures of the run alone and of the run beside the files.
    """
    from jitsched.testbed.children import failed_agents
    from jitsched.testbed.e2e import run_workload, scenario_testbed
    from jitsched.testbed.scenario import build_workload

    tb = scenario_testbed(sc, options)
    try:
        wl, bg = build_workload(tb, options.link_mbit or sc.link_mbit, scenario, options.seed)
        [crit] = [j for j in wl.jobs if j.job_class == "critical"]
        watch = (f"{crit.id}/",)
        alone_wl = replace(wl, jobs=(replace(crit, arrival_s=0.0),))

        def solo(files: list) -> dict:  # the critical job without the normal jobs, beside ``files``
            return run_workload(replace(sc, bulk_share=0.0), scenario, replace(options, measure_slots=0), tb=tb,
                                workload=(alone_wl, files), watch=watch)

        alone, beside = solo([]), solo(bg)
        out = run_workload(sc, scenario, options, tb=tb, workload=(wl, bg), watch=watch)
    finally:
        testbed.down(options.prefix)
    jct = _jct(out, crit.id)
    iso = _jct(alone, crit.id)
    with_files = _jct(beside, crit.id)
    normal = [x for j in wl.jobs if j.job_class == "normal" for x in (_jct(out, j.id),) if x is not None]
    daemon = out["details"]["daemon"].get("critical") or {}
    out |= {
        "jobs": out["jobs"] + alone["jobs"] + beside["jobs"],
        "completed": out["completed"] + alone["completed"] + beside["completed"],
        "agents_failed": {**failed_agents(alone["details"]["agents"]), **failed_agents(beside["details"]["agents"]),
                          **out["agents_failed"]},
        "critical_job": crit.id, "critical_jct_s": jct, "critical_isolated_jct_s": iso,
        "critical_over_isolated": _ratio(jct, iso),
        "critical_with_files_jct_s": with_files, "files_over_isolated": _ratio(with_files, iso),
        "critical_over_with_files": _ratio(jct, with_files),
        # the runner's own lag in each run (JobResult.ideal_jct_s): on a busy machine the
        # emulated framework starts nodes late, which no schedule causes or can undo
        "critical_runner_lag_s": {"isolated": _lag(alone, crit.id), "with_files": _lag(beside, crit.id),
                                  "whole": _lag(out, crit.id)},
        "critical_ideal_over_isolated": _ratio(_ideal(out, crit.id), _ideal(alone, crit.id)),
        "normal_mean_jct_s": statistics.fmean(normal) if normal else None,
        "admission": admission(daemon, crit.id),
        "critical_reserved": carried(daemon, out["details"]["agents"], crit.id),
    }
    out["details"]["isolated"] = _run_details(alone, crit.id)
    out["details"]["with_files"] = _run_details(beside, crit.id) | {
        k: beside[k] for k in ("background_mbit_mean", "background_completed") if k in beside}
    return out


def _run_details(run: dict, job_id: str) -> dict:
    """The figures of a run of critical job ``job_id`` without the normal jobs."""
    critical = run["details"]["daemon"].get("critical") or {}
    return {k: run[k] for k in ("completed", "mean_jct_s", "lat_hit_rate", "agents_failed")} | {
        k: run["details"][k] for k in ("jct_s", "errors", "daemon", "wall_s", "transfers")} | {
        "admission": admission(critical, job_id), "critical_reserved": carried(critical, run["details"]["agents"], job_id)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _lag(run: dict, job_id: str) -> float | None:
    """``job_id``'s runner lag in ``run`` (its JCT less the one its transfers' times allow)."""
    x = run["details"].get("runner_lag_s", {}).get(job_id)
    return None if x is None or math.isnan(x) else float(x)


def _ideal(run: dict, job_id: str) -> float | None:
    """``job_id``'s JCT in ``run`` less the runner's lag: the one its transfers' times allow."""
    jct, lag = _jct(run, job_id), _lag(run, job_id)
    return None if jct is None or lag is None else jct - lag


def _jct(run: dict, job_id: str) -> float | None:
    """``job_id``'s JCT in ``run``; None if it did not complete."""
    if job_id in run["details"]["errors"]:
        return None
    x = run["details"]["jct_s"].get(job_id)
    return None if x is None or math.isnan(x) else float(x)


def admission(critical: dict, job_id: str) -> dict:
    """What the daemon decided for critical job ``job_id`` (its stats' ``critical`` block:
    :func:`jitsched.testbed.children.critical_stats`).

    Returns
    -------
    dict
        ``decision`` (``admitted``, ``admitted as normal``, ``refused``; None
        when the daemon sent no stats), ``epsilon``, and when reserved for
        ``isolated_jct_s`` and ``target_jct_s`` (the daemon's, simulated on the payload
        rate the agents can give it) and ``start_s`` (daemon clock); ``guarantee``: ``met`` or ``missed`` as the
        daemon judged the job's finish against its target (None: it did not finish as critical).
    """
    if not critical:
        return {"decision": None}
    cls = critical.get("classes", {}).get(job_id)
    decision = {"critical": "admitted", None: "refused" if critical.get("refused") else None}.get(
        cls, "admitted as normal")
    res = critical.get("reservations", {}).get(job_id) or {}
    return {"decision": decision, "epsilon": critical.get("epsilon"),
            "guarantee": critical.get("verdicts", {}).get(job_id)} | {
        k: res[k] for k in ("isolated_jct_s", "target_jct_s", "start_s") if k in res}


def carried(critical: dict, agents: dict, job_id: str) -> dict:
    """How many of ``job_id``'s reserved transfers the agents gave their reserved rate.

    Parameters
    ----------
    critical : dict
        The daemon's ``critical`` stats.
    agents : dict
        Per agent process, its stats (``watched_max_Bps``: each watched flow's largest rate).
    job_id : str

    Returns
    -------
    dict
        ``transfers`` (with a reserved rate above 0), ``registered`` (of those, the
        ones an agent scheduled) and ``carried`` (of those, the ones an agent gave at
        least their largest reserved rate).
    """
    res = (critical.get("reservations") or {}).get(job_id) or {}
    seen: dict[str, float] = {}
    for st in agents.values():
        for fid, r in (st.get("watched_max_Bps") or {}).items():
            seen[fid] = max(seen.get(fid, 0.0), r)
    want = {f"{job_id}/{tid}": r for tid, r in (res.get("max_rate_Bps") or {}).items() if r > 0}
    got = {fid: seen[fid] for fid in want if fid in seen}
    return {"transfers": len(want), "registered": len(got),
            "carried": sum(got[fid] >= CARRIED_SHARE * want[fid] for fid in got)}


__all__ = ["admission", "carried", "run_classes"]
