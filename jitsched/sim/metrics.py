"""Per-run metrics of a simulation: JCTs, data waiting times, remaining bandwidth, background slowdown."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jitsched.dag.model import COMPUTE, TRANSFER
from jitsched.plan import DEFAULT_SLOT_S

# Width of the remaining-bandwidth sampling slots, seconds: the schedules' default slot.
REMAINING_SLOT_S = DEFAULT_SLOT_S
# The most samples a SlotLog holds, and the most per-host values of each of its two
# integrals (samples x hosts, 128 MiB at 8 bytes each): past either, its grid's step
# doubles. A run of ~9 days of simulated time (one 1e14-byte transfer at 1 Gbit/s) took
# 3.7 GB and 250 s in per-slot samples at a fixed 0.1 s step.
MAX_SLOT_SAMPLES = 1 << 16
MAX_SLOT_VALUES = 1 << 24


class SlotLog:
    """Per-host cumulative DAG and background egress bytes, sampled on the remaining-bandwidth grid.

    The simulator samples the integrals at the first DL arrival
    (:attr:`origin`), every ``slot_s`` after it, and at the last DL finish:
    a few thousand samples per run instead of a log of the per-host rates at
    each of the ~10^6 allocations of a paper-scale run. The rates are
    piecewise constant, so the difference of two samples is the exact bytes
    sent in between.

    Idle stretches (no host sends DAG bytes) keep three samples, however
    long: their first and their last two (:meth:`add`). The slots between
    identical DAG integrals are idle for every host, and
    :func:`remaining_slots` keeps only slots in which a host sent DAG bytes,
    so one long idle slot in place of many changes none of its samples; the
    last two stay as they were for the window's end, where a grid instant a
    float crumb before the last DL finish is dropped.

    A long run's log stays bounded: once it holds more than ``max_samples``
    samples, the step doubles and the samples on odd instants of the old grid
    go (:meth:`coarsen`; the newest stays), so the slots of
    :func:`remaining_slots` get longer, each still exact.

    Parameters
    ----------
    slot_s : float
        Grid step, seconds (the first one).
    max_samples : int, optional
        Default: :data:`MAX_SLOT_SAMPLES`, or fewer where the hosts are so many
        that each integral would hold more than :data:`MAX_SLOT_VALUES` values.
    """

    def __init__(self, slot_s: float = REMAINING_SLOT_S, max_samples: int | None = None) -> None:
        self.slot_s = float(slot_s)
        self.origin: float | None = None
        self.times: list[float] = []
        self.dag: list[np.ndarray] = []
        self.background: list[np.ndarray] = []
        self.max_samples = max_samples
        self.coarsened = 0  # times the step doubled

    def add(self, t: float, dag: np.ndarray, background: np.ndarray) -> None:
        """Bytes each host egress sent up to time ``t`` (s): DAG transfers and background flows.

        When the last three samples hold the same DAG integrals as this one,
        the middle one of them goes: it only splits an idle stretch.
        """
        d = self.dag
        if len(d) >= 3 and np.array_equal(d[-1], dag) and np.array_equal(d[-2], dag) \
                and np.array_equal(d[-3], dag):
            del self.times[-2], self.dag[-2], self.background[-2]
        self.times.append(float(t))
        self.dag.append(dag)
        self.background.append(background)
        if self.max_samples is None:
            self.max_samples = max(16, min(MAX_SLOT_SAMPLES, MAX_SLOT_VALUES // max(len(dag), 1)))
        if len(self.times) > self.max_samples:
            self.coarsen()

    def coarsen(self) -> None:
        """Double the grid's step: the samples off the new grid go, but for the newest."""
        step = 2.0 * self.slot_s
        origin = self.times[0] if self.origin is None else self.origin
        last = len(self.times) - 1
        keep = []
        for i, t in enumerate(self.times):
            x = (t - origin) / step
            if i == last or abs(x - round(x)) <= 1e-6:
                keep.append(i)
        self.times = [self.times[i] for i in keep]
        self.dag = [self.dag[i] for i in keep]
        self.background = [self.background[i] for i in keep]
        self.slot_s = step
        self.coarsened += 1


@dataclass
class SimResult:
    """Everything one simulation run measured.

    Times are seconds, sizes bytes. Arrays over jobs have shape (n_jobs,),
    over transfers shape (n_transfers,) (DAG transfer nodes in node order),
    over background flows shape (n_background,), over hosts shape (n_hosts,).

    Attributes
    ----------
    job_ids, job_model : list of str
    job_arrival_s, job_finish_s, jct_s : ndarray
    transfer_job : ndarray of int, job index of each transfer
    transfer_size : ndarray, bytes
    transfer_release_s, transfer_arrival_s : ndarray
        When each transfer could start sending and when its last byte arrived.
    consumer_start_s : ndarray
        Start of the earliest compute consuming it (NaN: no compute consumer).
    waiting_s : ndarray
        ``consumer_start_s - transfer_arrival_s`` (NaN without a consumer).
    transfer_sent : ndarray
        Bytes the simulator delivered per transfer (conservation check).
    remaining_bw : ndarray
        Per host egress, ``1 - DAG bytes sent / (capacity * window)`` over the
        window from the first job arrival to the last job finish. Every policy
        sends the same DAG bytes in about the same window, so this hardly
        tells policies apart; see ``remaining_bw_slots``.
    remaining_bw_slots : ndarray
        One sample ``1 - DAG bytes sent in the slot / (capacity * slot length)``
        per (host egress, slot) in which the host sent DAG bytes, host-major.
        Slots are ``remaining_bw_slot_s`` long from the first job arrival; the
        last one ends at the last job finish (it may be shorter). A long run
        has longer slots (:class:`SlotLog`).
    remaining_bw_contended : ndarray
        The samples of ``remaining_bw_slots`` whose host also had background
        egress in the slot: what the background got when it wanted the port.
    remaining_bw_slot_s : float
        Slot length, seconds: :data:`REMAINING_SLOT_S`, doubled as often as
        the run's length needed to keep its samples bounded.
    end_s : float
        The last completion of a job or background flow, seconds (0 with
        neither): ``makespan_s`` of :meth:`summary`. A policy's wake-up or
        tick may have moved the simulator's clock past it.
    window_s : tuple of float
        The first job arrival and the last job finish, seconds: the window of
        ``remaining_bw``.
    bg_ids, bg_size, bg_arrival_s, bg_finish_s, bg_jct_s, bg_alone_s, bg_slowdown, bg_sent : ndarray
        ``bg_alone_s`` is the flow's time alone in an empty cluster.
    stats : dict
        The policy's own figures (LP solve times, LAT misses...).
    wall_s, policy_s, lp_s : float
        Wall time of the run, of policy calls, and of LP planning inside them.
    """

    policy: str
    seed: int
    job_ids: list[str]
    job_model: list[str]
    job_arrival_s: np.ndarray
    job_finish_s: np.ndarray
    jct_s: np.ndarray
    transfer_job: np.ndarray
    transfer_size: np.ndarray
    transfer_release_s: np.ndarray
    transfer_arrival_s: np.ndarray
    consumer_start_s: np.ndarray
    waiting_s: np.ndarray
    transfer_sent: np.ndarray
    remaining_bw: np.ndarray
    bg_ids: list[str]
    bg_size: np.ndarray
    bg_arrival_s: np.ndarray
    bg_finish_s: np.ndarray
    bg_jct_s: np.ndarray
    bg_alone_s: np.ndarray
    bg_slowdown: np.ndarray
    bg_sent: np.ndarray
    node_start_s: np.ndarray
    node_finish_s: np.ndarray
    stats: dict
    wall_s: float
    policy_s: float
    lp_s: float
    n_allocations: int
    max_port_utilization: float
    end_s: float
    window_s: tuple[float, float]
    remaining_bw_slots: np.ndarray = field(default_factory=lambda: np.zeros(0))
    remaining_bw_contended: np.ndarray = field(default_factory=lambda: np.zeros(0))
    remaining_bw_slot_s: float = REMAINING_SLOT_S
    extra: dict = field(default_factory=dict)

    def waiting_by_model(self) -> dict[str, float]:
        """Mean data waiting time per job model, seconds (transfers with a consumer)."""
        out: dict[str, float] = {}
        models = np.asarray(self.job_model, dtype=object)[self.transfer_job] if len(self.transfer_job) else []
        for m in sorted(set(self.job_model)):
            sel = (models == m) & ~np.isnan(self.waiting_s)
            if np.any(sel):
                out[m] = float(np.mean(self.waiting_s[sel]))
        return out

    def jct_by_model(self) -> dict[str, float]:
        """Mean JCT per job model, seconds."""
        models = np.asarray(self.job_model, dtype=object)
        return {m: float(np.mean(self.jct_s[models == m])) for m in sorted(set(self.job_model))}

    def summary(self) -> dict:
        """Headline figures of the run (JSON-ready)."""
        by_size: dict[str, float] = {}
        for s in np.unique(self.bg_size):
            gbit = float(s) * 8 / 1e9
            by_size[f"{gbit:g}"] = float(np.mean(self.bg_slowdown[self.bg_size == s]))
        st = self.stats
        return {
            "policy": self.policy,
            "seed": self.seed,
            "jobs": len(self.job_ids),
            "background_flows": len(self.bg_ids),
            "mean_jct_s": float(np.mean(self.jct_s)) if len(self.jct_s) else None,
            "jct_by_model_s": self.jct_by_model(),
            "waiting_time_by_model_s": self.waiting_by_model(),
            "mean_waiting_time_s": float(np.nanmean(self.waiting_s))
            if np.any(~np.isnan(self.waiting_s)) else None,
            "remaining_bw": {
                "min": float(np.min(self.remaining_bw)) if len(self.remaining_bw) else None,
                "median": float(np.median(self.remaining_bw)) if len(self.remaining_bw) else None,
            },
            "remaining_bw_slots": quantile_summary(self.remaining_bw_slots),
            "remaining_bw_contended": quantile_summary(self.remaining_bw_contended),
            "remaining_bw_slot_s": self.remaining_bw_slot_s,
            "background_slowdown": {
                "mean": float(np.mean(self.bg_slowdown)) if len(self.bg_slowdown) else None,
                "by_size_gbit": by_size,
            },
            "lp_solves": st.get("solves", 0),
            "lp_time_s_total": self.lp_s,
            "lat_misses": st.get("lat_misses"),
            "wall_s": self.wall_s,
            "sim_s_excluding_lp": self.wall_s - self.lp_s,
            "makespan_s": self.end_s,
        }

    def to_json(self, per_job: bool = True) -> dict:
        """The summary plus, if ``per_job``, every job's and background flow's JCT."""
        out = self.summary()
        if per_job:
            out["job_jct_s"] = {j: float(x) for j, x in zip(self.job_ids, self.jct_s, strict=True)}
            out["background_jct_s"] = {b: float(x) for b, x in zip(self.bg_ids, self.bg_jct_s, strict=True)}
        out["stats"] = {k: v for k, v in self.stats.items() if not isinstance(v, list)}
        return out


def quantile_summary(x: np.ndarray) -> dict | None:
    """``{p5, p25, median, n}`` of the samples ``x`` (None when there are none)."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return None
    p5, p25, p50 = np.percentile(x, [5, 25, 50])
    return {"p5": float(p5), "p25": float(p25), "median": float(p50), "n": int(len(x))}


def remaining_slots(log: SlotLog, cap_Bps: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-slot remaining-bandwidth samples from a :class:`SlotLog`.

    A host counts as sending DAG (background) bytes in a slot when it sent
    more than 1e-9 of the slot's capacity: integrals sampled at instants
    between allocations carry float dust (~1e-6 bytes) where a flow stopped
    exactly on a grid instant. Ratios within 1e-9 of 0 are 0 (a port at
    capacity), and ratios are clipped to [0, 1].

    Parameters
    ----------
    log : SlotLog
        Sampled on its grid from ``lo`` and at ``hi``.
    cap_Bps : ndarray, shape (n_hosts,)
        Egress capacities, bytes/s.
    lo, hi : float
        First job arrival and last job finish, seconds.

    Returns
    -------
    slots, contended : ndarray
        As :attr:`SimResult.remaining_bw_slots` and :attr:`SimResult.remaining_bw_contended`.
    """
    if not hi > lo or len(log.times) < 2:
        return np.zeros(0), np.zeros(0)
    qt = np.asarray(log.times)
    keep = (qt >= lo) & (qt <= hi)
    # a grid instant may coincide with hi: the later sample (the window's end) wins
    b, last = np.unique(qt[keep][::-1], return_index=True)
    rows = np.flatnonzero(keep)[::-1][last]
    dag, bg = np.asarray(log.dag)[rows], np.asarray(log.background)[rows]
    if len(b) >= 2 and b[-1] - b[-2] <= 1e-9 * log.slot_s:
        # hi a float crumb past a grid instant: no sliver slot of ~0 s (its ratio is noise)
        b, dag, bg = np.delete(b, -2), np.delete(dag, -2, axis=0), np.delete(bg, -2, axis=0)
    if len(b) < 2:
        return np.zeros(0), np.zeros(0)
    full = cap_Bps[None, :] * np.diff(b)[:, None]  # bytes each port could send per slot
    sent = np.diff(dag, axis=0)
    ratio = (1.0 - sent / full).T  # (host, slot)
    # a port sending at capacity gives 1 - (1 +- a few ulp): float dust, not a
    # difference between policies that comparisons of p5s should see
    ratio = np.where(np.abs(ratio) < 1e-9, 0.0, np.clip(ratio, 0.0, 1.0))
    active = (sent > 1e-9 * full).T
    contended = active & (np.diff(bg, axis=0) > 1e-9 * full).T
    return ratio[active], ratio[contended]


def consumer_starts(dag, start: np.ndarray) -> np.ndarray:
    """Per node: the earliest start among its compute successors (NaN if none), seconds."""
    rows = np.repeat(np.arange(dag.n_nodes), np.diff(dag.succ_ptr))
    cols = dag.succ_idx.astype(np.int64)
    keep = dag.kind[cols] == COMPUTE
    out = np.full(dag.n_nodes, np.inf)
    np.minimum.at(out, rows[keep], start[cols[keep]])
    out[np.isinf(out)] = np.nan
    return out


def collect(sim, raw: dict) -> SimResult:
    """Turn a finished simulator's raw arrays into a :class:`SimResult`."""
    dag, wl, cl = sim.dag, sim.workload, sim.cluster
    tr = np.flatnonzero(dag.kind == TRANSFER)
    cons = consumer_starts(dag, raw["start"])[tr]
    arrival = raw["finish"][tr]
    lo, hi = raw["dag_window"]
    window = max(hi - lo, 0.0)
    cap = cl.egress_Bps
    if window > 0:
        remaining_bw = 1.0 - raw["dag_egress_int"] / (cap * window)
    else:
        remaining_bw = np.ones(len(cl))
    if raw.get("slots") is not None:
        slots, contended = remaining_slots(raw["slots"], cap, lo, hi)
        slot_s = raw["slots"].slot_s
    else:
        slots, contended, slot_s = np.zeros(0), np.zeros(0), REMAINING_SLOT_S
    alone = raw["bg_bytes"] / np.minimum(cl.egress_Bps[raw["bg_src"]], cl.ingress_Bps[raw["bg_dst"]]) \
        if len(raw["bg_bytes"]) else np.zeros(0)
    bg_jct = raw["bg_finish"] - raw["bg_arr"]
    stats = sim.policy.stats()
    lp_s = float(stats.get("plan_wall_s_total", 0.0))
    jobs = wl.jobs
    return SimResult(
        policy=sim.policy.name, seed=sim.seed,
        job_ids=list(dag.job_ids),
        job_model=[j.model or j.id.rsplit("-", 1)[0] for j in jobs],
        job_arrival_s=dag.arrival.copy(), job_finish_s=raw["job_finish"],
        jct_s=raw["job_finish"] - dag.arrival,
        transfer_job=dag.job_of[tr].astype(np.int64), transfer_size=dag.size[tr],
        transfer_release_s=raw["start"][tr], transfer_arrival_s=arrival,
        consumer_start_s=cons, waiting_s=cons - arrival, transfer_sent=raw["sent"][tr],
        remaining_bw=remaining_bw,
        bg_ids=[b.id for b in wl.background], bg_size=raw["bg_bytes"], bg_arrival_s=raw["bg_arr"],
        bg_finish_s=raw["bg_finish"], bg_jct_s=bg_jct, bg_alone_s=alone,
        bg_slowdown=bg_jct / alone if len(alone) else np.zeros(0), bg_sent=raw["bg_sent"],
        node_start_s=raw["start"], node_finish_s=raw["finish"],
        stats=stats, wall_s=raw["wall_s"], policy_s=raw["policy_s"], lp_s=lp_s,
        n_allocations=raw["n_alloc"], max_port_utilization=raw["max_util"], end_s=raw["end_s"],
        window_s=(lo, hi), remaining_bw_slots=slots, remaining_bw_contended=contended,
        remaining_bw_slot_s=slot_s, extra={"events": raw.get("n_events", 0)},
    )
