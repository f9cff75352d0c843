"""The daemon's scheduler state: jobs, agents and plans, with no sockets and no policy logic."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from jitsched.config import FULL, INCREMENTAL, DaemonConfig
from jitsched.lat import latest_arrival_times
from jitsched.model import TRANSFER, Cluster, DagArrays, Job, compile_jobs, parse_cluster, parse_job
from jitsched.planner import shared_cluster
from jitsched.policies.base import (
    DONE,
    RUNNING,
    WAITING,
    FlowSet,
    Policy,
    SchedulerView,
    SlotSchedule,
)
from jitsched.protocol import ErrorCode, flow_id, pack_body, unpack_body

# Policy events (arrivals, node completions) wait for the next full re-solve; in
# incremental mode that may be long in coming, so only the newest are kept.
MAX_EVENTS = 100_000


@dataclass(frozen=True)
class Reject:
    """An expected rejection, returned (not raised) by state methods; becomes an error reply."""

    code: str
    message: str


@dataclass
class JobState:
    """One submitted job and what the daemon knows of its progress (times on the daemon clock).

    ``ports`` maps each transfer to its (source, destination) host indices;
    ``out_left``/``in_left`` count the unfinished transfers leaving / entering
    each host (hosts with none are absent).
    """

    job: Job  # arrival_s is the submission instant on the daemon clock
    index: dict[str, int]
    submitted_s: float
    ports: dict[str, tuple[int, int]] = field(default_factory=dict)
    out_left: dict[int, int] = field(default_factory=dict)
    in_left: dict[int, int] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    measured_s: dict[str, float] = field(default_factory=dict)
    lat_s: dict[str, float] = field(default_factory=dict)  # LAT of each transfer at first plan
    state: str = "running"  # running | finished | cancelled
    finished_s: float = math.nan
    jct_s: float = math.nan
    lat_hits: int = 0
    lat_misses: int = 0

    @property
    def active(self) -> bool:
        return self.state == "running"


def _count_down(counts: dict[int, int], host: int) -> None:
    left = counts.get(host, 0) - 1
    if left > 0:
        counts[host] = left
    else:
        counts.pop(host, None)


@dataclass
class AgentState:
    """A registered host agent and the schedule delivery state for it."""

    host: str
    identity: bytes
    backend: str
    last_seen_s: float
    up: bool = True
    acked_seq: int = 0
    acked_at_s: float = -math.inf  # when acked_seq last advanced (daemon clock)
    sent_seq: int = 0
    sent_at_s: float = -math.inf
    applied_seq: int = 0
    flow_rates_Bps: dict = field(default_factory=dict)
    total_Bps: float = 0.0


@dataclass(frozen=True)
class PlanRequest:
    """An immutable snapshot handed to a planning worker.

    ``jobs`` are (job, done-times, remaining-bytes) triples: every active job
    for a full re-solve, the jobs to add for an incremental plan. ``events``
    are the policy hooks to deliver first, as ``(kind, job_id, node_id)``.

    Incremental requests also carry ``base``, the schedule to add to (never
    mutated), ``live`` (which of its flows still count: job active, transfer
    unfinished), ``covered`` (the jobs it plans), ``removed`` (jobs whose flows
    must go) and ``busy_egress``/``busy_ingress`` (per host, the other active
    jobs with unfinished transfers leaving / entering it).
    """

    seq: int
    now_s: float
    jobs: tuple[tuple[Job, dict[str, float], dict[str, float]], ...]
    events: tuple[tuple[str, str, str], ...]
    reasons: tuple[str, ...]
    mode: str = FULL
    base: SlotSchedule | None = None
    live: np.ndarray | None = None
    covered: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()
    busy_egress: np.ndarray | None = None
    busy_ingress: np.ndarray | None = None
    rebase: bool = False
    slot_s: float = 0.1  # the configured slot length (for bodies when the policy plans none)


@dataclass
class PlanResult:
    """What a worker hands back: the schedule, packed agent bodies and the LATs planned against.

    ``jobs`` are the jobs ``schedule`` plans, ``added`` those an incremental
    plan added. ``frames`` holds the packed schedule body of every host whose
    schedule changed, ``flow_index`` maps (job, transfer) to (start slot,
    number of slots). ``ready_wall_s`` is the wall clock when the plan was
    computed, before the bodies were built.
    """

    seq: int
    schedule: SlotSchedule | None
    lat_s: dict[tuple[str, str], float]
    solve_s: float
    reasons: tuple[str, ...]
    error: str = ""
    mode: str = FULL
    jobs: frozenset[str] = frozenset()
    added: tuple[str, ...] = ()
    removed: frozenset[str] = frozenset()
    rebase: bool = False
    unsupported: bool = False
    added_late: int = 0
    frames: dict[str, bytes] = field(default_factory=dict)
    flow_index: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    ready_wall_s: float = math.nan


def build_view(req: PlanRequest, cluster: Cluster) -> tuple[SchedulerView, dict[str, int]]:
    """The policy's view of ``req``: its jobs compiled, node states derived from done times.

    Returns the view and a map job id -> job index in ``view.dag``.
    """
    jobs = [j for j, _, _ in req.jobs]
    dag = compile_jobs(jobs, cluster)
    n = dag.n_nodes
    finish = np.full(n, np.nan)
    remaining = np.where(dag.kind == TRANSFER, dag.size, 0.0)
    for k, (job, done, rem) in enumerate(req.jobs):
        base = int(dag.job_ptr[k])
        pos = {nid: base + i for i, nid in enumerate(job.node_ids())}
        for nid, t in done.items():
            finish[pos[nid]] = t
        for nid, b in rem.items():
            remaining[pos[nid]] = b
    done_mask = ~np.isnan(finish)
    remaining[done_mask] = 0.0
    # a node is released when none of its predecessors is unfinished
    owner = np.repeat(np.arange(n), np.diff(dag.pred_ptr))
    blocked = np.bincount(owner[~done_mask[dag.pred_idx]], minlength=n) if n else np.zeros(0, int)
    state = np.where(done_mask, DONE, np.where(blocked > 0, WAITING, RUNNING)).astype(np.int8)
    flows_idx = np.flatnonzero((state == RUNNING) & (dag.kind == TRANSFER))
    neg = np.full(len(flows_idx), -1, dtype=np.int64)
    flows = FlowSet(
        src=dag.src[flows_idx].astype(np.int64), dst=dag.dst[flows_idx].astype(np.int64),
        remaining=remaining[flows_idx], node=flows_idx.astype(np.int64),
        job=dag.job_of[flows_idx].astype(np.int64), bg=neg,
        release_s=np.full(len(flows_idx), req.now_s),
    )
    view = SchedulerView(
        cluster=cluster, now=req.now_s, dag=dag, job_arrived=np.ones(dag.n_jobs, dtype=bool),
        job_done=np.zeros(dag.n_jobs, dtype=bool), node_state=state, node_finish=finish,
        remaining=remaining, flows=flows,
    )
    return view, {j.id: k for k, j in enumerate(jobs)}


def run_plan(policy: Policy, req: PlanRequest, cluster: Cluster, t0_wall_s: float = 0.0) -> PlanResult:
    """Full re-solve (worker thread): deliver ``req``'s events to ``policy``, ask it for a schedule.

    Every host's body changes (the plan has a new epoch).
    """
    t0 = time.perf_counter()
    try:
        view, kidx = build_view(req, cluster)
        for kind, job_id, node_id in req.events:
            k = kidx.get(job_id)
            if k is None:
                continue
            if kind == "arrival":
                policy.on_job_arrival(view, k)
            elif kind == "node_done":
                policy.on_node_done(view, _node_index(view.dag, k, node_id))
        if "tick" in req.reasons:
            policy.on_tick(view)
        sched = policy.schedule(view) if view.dag.n_jobs else None
        new = {job_id for kind, job_id, _ in req.events if kind == "arrival"}
        lats = _lats(view, new, cluster)
        solve_s = time.perf_counter() - t0
        ready = time.time()
        res = PlanResult(req.seq, sched, lats, solve_s, req.reasons, mode=FULL,
                         jobs=frozenset(kidx), ready_wall_s=ready)
        _attach_bodies(res, None, cluster, t0_wall_s, req)
    except Exception as exc:  # noqa: BLE001 - a failed plan must not kill the daemon
        return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                          f"{type(exc).__name__}: {exc}", mode=FULL)
    return res


def run_increment(policy: Policy, req: PlanRequest, cluster: Cluster,
                  t0_wall_s: float = 0.0) -> PlanResult:
    """Incremental plan (worker thread): ``req.jobs`` alone on top of ``req.base``, frozen.

    Flows of ``req.base`` that no longer count (``req.live``) go first and give
    their capacity back. Only the hosts whose flows or leftover changed get new
    bodies, unless the slot grid moved (no base before), when every host does.
    """
    t0 = time.perf_counter()
    added = tuple(j.id for j, _, _ in req.jobs)
    kw = dict(mode=INCREMENTAL, added=added, removed=req.removed, rebase=req.rebase)
    try:
        base, gone_hosts = prune_schedule(req.base, req.live, cluster)
        sched, changed, lats, late = base, set(gone_hosts), {}, 0
        if req.jobs:
            view, _ = build_view(req, cluster)
            inc = policy.schedule_increment(view, base, req.busy_egress, req.busy_ingress)
            if inc is None:
                return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                                  unsupported=True, **kw)
            sched = merge_schedules(base, inc)
            changed.update(h for f in inc.flows for h in (f[2], f[3]))
            late = len(inc.late)
            lats = _lats(view, set(added), shared_cluster(cluster, req.busy_egress, req.busy_ingress))
        solve_s = time.perf_counter() - t0
        ready = time.time()
        jobs = (req.covered - req.removed) | frozenset(added)
        res = PlanResult(req.seq, sched, lats, solve_s, req.reasons, jobs=jobs, added_late=late,
                         ready_wall_s=ready, **kw)
        regrid = sched is not None and (req.base is None or sched.epoch_s != req.base.epoch_s)
        _attach_bodies(res, None if regrid else changed, cluster, t0_wall_s, req)
    except Exception as exc:  # noqa: BLE001 - a failed plan must not kill the daemon
        return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                          f"{type(exc).__name__}: {exc}", **kw)
    return res


def _attach_bodies(res: PlanResult, hosts: Iterable[int] | None, cluster: Cluster,
                   t0_wall_s: float, req: PlanRequest) -> None:
    """Pack the bodies of ``hosts`` (None: all) and build the flow index into ``res``."""
    sched = res.schedule
    slot_s = sched.slot_s if sched is not None else req.slot_s
    bodies = host_bodies(sched, hosts, res.seq, t0_wall_s, cluster, slot_s)
    # Idle hosts (most of a big cluster) have the same body: pack it once, share the bytes.
    idle: dict[float, bytes] = {}
    frames = {}
    for h, b in bodies.items():
        if b["flows"] or b["leftover_Bps"]:
            frames[h] = pack_body(b)
        else:
            frame = idle.get(b["line_Bps"])
            frames[h] = idle[b["line_Bps"]] = frame if frame is not None else pack_body(b)
    res.frames = frames
    if sched is not None:
        res.flow_index = {(f[0], f[1]): (int(f[4]), len(f[5])) for f in sched.flows}


def prune_schedule(sched: SlotSchedule | None, live: np.ndarray | None,
                   cluster: Cluster) -> tuple[SlotSchedule | None, set[int]]:
    """``sched`` without the flows ``live`` marks False, their rates back in the leftover.

    Returns the pruned schedule (``sched`` itself when nothing goes; never
    mutated) and the hosts (sources and destinations) of the flows that went.
    """
    if sched is None or live is None or bool(np.all(live)):
        return sched, set()
    keep, gone = [], []
    for f, ok in zip(sched.flows, live.tolist(), strict=True):
        (keep if ok else gone).append(f)
    left_e = sched.leftover_egress.copy()
    left_i = sched.leftover_ingress.copy()
    for _, _, src, dst, start, rates in gone:
        r = np.asarray(rates, dtype=np.float64)
        end = min(int(start) + len(r), left_e.shape[1])
        left_e[src, start:end] += r[:end - start]
        left_i[dst, start:end] += r[:end - start]
    np.minimum(left_e, cluster.egress_Bps[:, None], out=left_e)
    np.minimum(left_i, cluster.ingress_Bps[:, None], out=left_i)
    kept = {(f[0], f[1]) for f in keep}
    late = [x for x in sched.late if (x.get("job"), x.get("transfer")) in kept]
    prio = {k: v for k, v in sched.prio.items() if k in kept}
    return (replace(sched, flows=keep, leftover_egress=left_e, leftover_ingress=left_i, late=late, prio=prio),
            {int(h) for f in gone for h in (f[2], f[3])})


def merge_schedules(base: SlotSchedule | None, inc: SlotSchedule) -> SlotSchedule:
    """``base`` plus an increment planned on its grid (whose leftover already counts both)."""
    if base is None:
        return inc
    return SlotSchedule(epoch_s=base.epoch_s, slot_s=base.slot_s, flows=base.flows + inc.flows,
                        leftover_egress=inc.leftover_egress, leftover_ingress=inc.leftover_ingress,
                        late=base.late + inc.late, solve_s=inc.solve_s, prio=base.prio | inc.prio)


def host_bodies(sched: SlotSchedule | None, hosts: Iterable[int] | None, seq: int,
                t0_wall_s: float, cluster: Cluster, slot_s: float) -> dict[str, dict]:
    """Schedule message bodies (idempotent by ``seq``) of ``hosts`` (indices; None: all).

    A host's body holds the flows it sends and its egress leftover, bytes/s,
    and the flows it receives and its ingress leftover (``in_*``, for agents
    that enforce their ingress too), each without the trailing slots at the
    line rate: agents take slots past the list as the line rate, and an idle
    host's body gets short (and shared). A flow with a strict-priority level
    (``sched.prio``) carries it as ``prio``.
    """
    names = cluster.names
    idx = range(len(names)) if hosts is None else sorted(hosts)
    if sched is None:
        epoch_ns = int(t0_wall_s * 1e9)
        return {names[h]: {"seq": seq, "slot_s": slot_s, "epoch_ns": epoch_ns, "flows": [],
                           "leftover_Bps": [], "line_Bps": cluster.hosts[h].egress_Bps,
                           "in_flows": [], "in_leftover_Bps": [], "in_line_Bps": cluster.hosts[h].ingress_Bps}
                for h in idx}
    out_of: dict[int, list] = {h: [] for h in idx}
    into: dict[int, list] = {h: [] for h in idx}
    for job, tid, src, dst, start, rates in sched.flows:
        lo, li = out_of.get(src), into.get(dst)
        if lo is None and li is None:
            continue
        fid, r = flow_id(job, tid), np.asarray(rates, dtype=float).tolist()
        level = sched.prio.get((job, tid))
        extra = {} if level is None else {"prio": level}
        if lo is not None:
            lo.append({"flow": fid, "dst": names[dst], "start_slot": int(start), "rates_Bps": r} | extra)
        if li is not None:
            li.append({"flow": fid, "src": names[src], "start_slot": int(start), "rates_Bps": r} | extra)
    epoch_ns = int((t0_wall_s + sched.epoch_s) * 1e9)
    left_e, keep_e = _trimmed_leftover(sched.leftover_egress, cluster.egress_Bps)
    left_i, keep_i = _trimmed_leftover(sched.leftover_ingress, cluster.ingress_Bps)
    return {names[h]: {"seq": seq, "slot_s": float(sched.slot_s), "epoch_ns": epoch_ns,
                       "flows": out_of[h], "leftover_Bps": left_e[h, :keep_e[h]].tolist(),
                       "line_Bps": cluster.hosts[h].egress_Bps,
                       "in_flows": into[h], "in_leftover_Bps": left_i[h, :keep_i[h]].tolist(),
                       "in_line_Bps": cluster.hosts[h].ingress_Bps}
            for h in idx}


def _trimmed_leftover(leftover: np.ndarray, line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # per host, the number of slots up to the last one below the line rate
    left = np.asarray(leftover, dtype=float)
    if not left.size:
        return left, np.zeros(len(line), dtype=np.int64)
    below = left < line[:, None] * (1.0 - 1e-12)
    return left, np.where(below.any(axis=1), left.shape[1] - np.argmax(below[:, ::-1], axis=1), 0)


def _node_index(dag: DagArrays, k: int, node_id: str) -> int:
    lo, hi = int(dag.job_ptr[k]), int(dag.job_ptr[k + 1])
    return lo + dag.node_ids[lo:hi].index(node_id)


def _lats(view: SchedulerView, new: set[str], cluster: Cluster) -> dict[tuple[str, str], float]:
    """LATs (Eq. 1 estimate on ``cluster``) of the transfers of the jobs ``new``, for the LAT hit rate."""
    if not new:
        return {}
    dag = view.dag
    res = latest_arrival_times(dag, cluster, now=view.now, known_done=view.node_finish,
                               remaining=view.remaining)
    out = {}
    for node in np.flatnonzero(dag.kind == TRANSFER):
        job = dag.job_ids[dag.job_of[node]]
        if job in new:
            out[(job, dag.node_ids[node])] = float(res.lat[node])
    return out


class SchedulerState:
    """Owns all daemon state. Methods take the daemon clock ``now`` (seconds) and return values.

    Request handlers return a reply body (dict) or a :class:`Reject`; plans are
    asked for with :meth:`plan_requests` and adopted with :meth:`install`;
    agent-bound messages come from :meth:`outbox` and are acknowledged via :meth:`ack`.

    Planning (``config.planning``): ``full`` re-solves every active job on every
    trigger, arrivals included. ``incremental`` plans an arriving job alone
    against the capacity the schedule in force leaves (its allocations frozen)
    and pushes only the agents whose schedules changed; full joint re-solves run
    beside it on the re-solve triggers of docs/architecture.md §7 (drift, the periodic timer, agents
    coming and going), when an incremental plan has planned LAT misses, and at
    most ``joint_replan_s`` after the schedule stopped being a joint plan. A full
    result that misses jobs added while it was solved is adopted together with
    an incremental plan of those jobs on top of it (a rebase), never without them.
    """

    def __init__(self, config: DaemonConfig, t0_wall_s: float | None = None) -> None:
        self.config = config
        self.cluster = config.cluster
        self.incremental = config.planning == INCREMENTAL
        # the daemon clock counts seconds from here; agents get epochs in wall-clock ns
        self.t0_wall_s = time.time() if t0_wall_s is None else t0_wall_s
        self.jobs: dict[str, JobState] = {}
        self.active: dict[str, JobState] = {}
        self.agents: dict[str, AgentState] = {}
        self.by_identity: dict[bytes, str] = {}
        self.events: list[tuple[str, str, str]] = []
        self.reasons: set[str] = set()  # triggers of the next full re-solve
        self.first_reason_s = math.inf
        self.pending: dict[str, None] = {}  # arrivals awaiting an incremental plan, in order
        self.first_pending_s = math.inf
        self.bulk: set[str] = set()  # arrivals left to the next joint re-solve (a big batch)
        self.removals: set[str] = set()  # ended jobs whose flows may still be in the schedule
        self.plan_seq = 0
        self.inflight = {FULL: 0, INCREMENTAL: 0}  # seq of the request in flight, 0 if none
        self.held: PlanResult | None = None  # a full result waiting to be rebased
        self.schedule: SlotSchedule | None = None
        self.schedule_seq = 0
        self.covered: frozenset[str] = frozenset()  # jobs the schedule plans
        # The schedule is a joint plan of its jobs unless some were added on top of
        # one (incrementally) or capacity a joint plan gave to ended jobs is free.
        self.added_since_full: set[str] = set()
        self.freed_since_full = False
        self.dirty_since = math.inf  # since when the schedule is no joint plan of its jobs
        self.host_frames: dict[str, bytes] = {}  # packed body per host
        self._bodies: dict[str, dict] = {}  # decoded on demand
        self.host_seq: dict[str, int] = {}
        self.unacked: set[str] = set()  # hosts whose agent has not acked its current body
        self._outbox_changed = False  # bodies or agents changed since the last outbox scan
        self._next_resend_s = math.inf
        self._flow_index: dict[tuple[str, str], tuple[int, int]] = {}
        # per job, for the schedule in force: its planned transfers, latest planned finish
        # first, and how many of those are known done (early_s checks, amortised O(1))
        self._paced: dict[str, tuple[list[tuple[int, str]], list[int]]] = {}
        self.plan_summary: dict[str, Any] = {}
        self.solve_times: list[float] = []
        self.n_plans = 0
        self.plans_by_mode = {FULL: 0, INCREMENTAL: 0}
        self.lat_misses = 0
        self.last_plan_s = -math.inf  # the last full re-solve
        self.last_full_solve_s = 0.0  # how long it took (max_planner_duty)
        self.incremental_ok = True  # False once the policy said it cannot plan incrementally

    @property
    def planning_seq(self) -> int:
        """The seq of a plan in flight (or of a full result awaiting its rebase), 0 if none."""
        held = self.held.seq if self.held is not None else 0
        return self.inflight[INCREMENTAL] or self.inflight[FULL] or held

    # ------------------------------------------------------------------ jobs

    def submit_job(self, body: dict, now: float) -> dict | Reject:
        """Validate and store a job; returns ``{"job_id"}`` and triggers a plan."""
        if len(self.active) >= self.config.max_jobs:
            return Reject(ErrorCode.OVERLOADED, f"the daemon already runs {self.config.max_jobs} jobs")
        if "cluster" in body:
            other = parse_cluster(body["cluster"], "body.cluster")
            for h in other.hosts:
                if h.name not in self.cluster:
                    return Reject(ErrorCode.UNKNOWN_HOST,
                                  f"body.cluster: host {h.name!r} is not in the daemon's cluster")
        job = parse_job(body["job"], self.cluster, "body.job")
        if job.id in self.active:
            return Reject(ErrorCode.DUPLICATE_JOB, f"job {job.id!r} is already running")
        job = replace(job, arrival_s=now)
        js = JobState(job, {n: i for i, n in enumerate(job.node_ids())}, now)
        index = self.cluster.index
        for t in job.transfers:
            s, d = index(t.src), index(t.dst)
            js.ports[t.id] = (s, d)
            js.out_left[s] = js.out_left.get(s, 0) + 1
            js.in_left[d] = js.in_left.get(d, 0) + 1
        self.jobs[job.id] = js
        self.active[job.id] = js
        self._policy_event("arrival", job.id, "")
        if self.incremental and self.incremental_ok:
            self.pending[job.id] = None
            self.first_pending_s = min(self.first_pending_s, now)
        else:
            self._trigger("arrival", now)
        return {"job_id": job.id}

    def _job(self, job_id: str) -> JobState | Reject:
        js = self.jobs.get(job_id)
        if js is None:
            return Reject(ErrorCode.UNKNOWN_JOB, f"no job {job_id!r}")
        return js

    def _node(self, body: dict, key: str, kind: str) -> tuple[JobState, str] | Reject:
        js = self._job(body["job_id"])
        if isinstance(js, Reject):
            return js
        nid = body[key]
        i = js.index.get(nid)
        n_comp = len(js.job.computes)
        if i is None or (kind == "transfer") != (i >= n_comp):
            return Reject(ErrorCode.UNKNOWN_NODE, f"job {js.job.id!r} has no {kind} {nid!r}")
        return js, nid

    def transfer_started(self, body: dict, now: float) -> dict | Reject:
        """Record that a transfer started sending."""
        got = self._node(body, "transfer", "transfer")
        if isinstance(got, Reject):
            return got
        js, nid = got
        js.started.setdefault(nid, now)
        return {}

    def transfer_finished(self, body: dict, now: float) -> dict | Reject:
        """Record a transfer's arrival; checks it against its LAT and the plan (drift)."""
        got = self._node(body, "transfer", "transfer")
        if isinstance(got, Reject):
            return got
        js, nid = got
        if nid in js.done:
            return {"lat_hit": None}
        js.done[nid] = now
        src, dst = js.ports[nid]
        _count_down(js.out_left, src)
        _count_down(js.in_left, dst)
        hit = None
        lat = js.lat_s.get(nid)
        if lat is not None:
            hit = now <= lat + self.config.slot_s  # the LP grid rounds deadlines up by < 1 slot
            if hit:
                js.lat_hits += 1
            else:
                js.lat_misses += 1
                self.lat_misses += 1
        planned = self._planned_finish(js.job.id, nid)
        if planned is not None and now - planned > self.config.drift_s:
            self._trigger("drift", now)
        elif self.config.early_s < math.inf and js.in_left and self._holds_back(js, now):
            self._trigger("early", now)
        self._policy_event("node_done", js.job.id, nid)
        return {"lat_hit": hit}

    def _holds_back(self, js: JobState, now: float) -> bool:
        """Whether the schedule paces one of ``js``'s unfinished transfers to finish more than
        ``early_s`` from now: planned for the job's progress as estimated, not as it went."""
        s = self.schedule
        if s is None:
            return False
        got = self._paced.get(js.job.id)
        if got is None:
            ends = []
            for t in js.job.transfers:
                x = self._flow_index.get((js.job.id, t.id))
                if x is not None:
                    ends.append((x[0] + x[1], t.id))
            ends.sort(reverse=True)
            got = self._paced[js.job.id] = (ends, [0])
        ends, skip = got
        # done only grows, so transfers skipped once stay skipped until the next schedule
        while skip[0] < len(ends) and ends[skip[0]][1] in js.done:
            skip[0] += 1
        return skip[0] < len(ends) and ends[skip[0]][0] * s.slot_s > now + self.config.early_s - s.epoch_s

    def _planned_finish(self, job_id: str, nid: str) -> float | None:
        s = self.schedule
        got = self._flow_index.get((job_id, nid))
        if s is None or got is None:
            return None
        start, n = got
        if n == 0:
            # ranked, not planned (the default jit's alpha 0): no finish time to drift from;
            # read as the schedule's epoch it made every transfer over drift_s after a plan
            # trigger a full re-solve
            return None
        return s.epoch_s + (start + n) * s.slot_s

    def compute_finished(self, body: dict, now: float) -> dict | Reject:
        """Record a compute's completion and its measured duration (seconds)."""
        got = self._node(body, "compute", "compute")
        if isinstance(got, Reject):
            return got
        js, nid = got
        if body["duration_s"] < 0:
            return Reject(ErrorCode.INVALID_BODY, "body.duration_s: must be >= 0")
        js.done.setdefault(nid, now)
        js.measured_s[nid] = float(body["duration_s"])
        self._policy_event("node_done", js.job.id, nid)
        return {}

    def job_finished(self, body: dict, now: float) -> dict | Reject:
        """Mark a job finished; its JCT is ``jct_s`` if given, else measured by the daemon."""
        js = self._job(body["job_id"])
        if isinstance(js, Reject):
            return js
        if js.active:
            js.jct_s = float(body.get("jct_s", now - js.submitted_s))
            self._end(js, "finished", now)
        return {"jct_s": js.jct_s}

    def cancel_job(self, body: dict, now: float) -> dict | Reject:
        """Cancel a running job: its transfers leave the plan."""
        js = self._job(body["job_id"])
        if isinstance(js, Reject):
            return js
        if js.active:
            self._end(js, "cancelled", now)
        return {"state": js.state}

    def _end(self, js: JobState, state: str, now: float) -> None:
        jid = js.job.id
        js.state = state
        js.finished_s = now
        del self.active[jid]
        self.pending.pop(jid, None)
        self._paced.pop(jid, None)
        self.bulk.discard(jid)
        if not (self.incremental and self.incremental_ok):
            self._trigger(state, now)
            return
        # its flows leave the schedule at the next incremental step, no LP needed
        if jid in self.covered:
            self.removals.add(jid)
            self._released(jid, now)

    def _policy_event(self, kind: str, job_id: str, node: str) -> None:
        self.events.append((kind, job_id, node))
        if len(self.events) > MAX_EVENTS:
            del self.events[:MAX_EVENTS // 2]

    def _trigger(self, reason: str, now: float) -> None:
        """A full re-solve is due for ``reason``."""
        self.reasons.add(reason)
        self.first_reason_s = min(self.first_reason_s, now)

    def _released(self, jid: str, now: float) -> None:
        """Job ``jid`` leaves the schedule: a joint re-solve could use what it frees."""
        if jid in self.added_since_full:
            self.added_since_full.discard(jid)
        else:
            self.freed_since_full = True
        self._update_dirty(now)

    def _joint(self, added: Iterable[str] = ()) -> None:
        """The schedule is a joint plan again (plus ``added`` on top of it)."""
        self.added_since_full = set(added)
        self.freed_since_full = False
        self.dirty_since = math.inf

    def _update_dirty(self, now: float) -> None:
        if self.added_since_full or self.freed_since_full:
            self.dirty_since = min(self.dirty_since, now)
        else:
            self.dirty_since = math.inf

    def status(self, body: dict, now: float) -> dict:
        """Jobs, agents and a summary of the last plan."""
        jobs = {}
        for jid, js in self.jobs.items():
            n_t = len(js.job.transfers)
            jobs[jid] = {
                "state": js.state, "submitted_s": js.submitted_s,
                "transfers_done": sum(1 for t in js.job.transfers if t.id in js.done),
                "transfers": n_t, "computes_done": len(js.measured_s),
                "computes": len(js.job.computes),
                "jct_s": None if math.isnan(js.jct_s) else js.jct_s,
                "lat_hits": js.lat_hits, "lat_misses": js.lat_misses,
            }
        agents = {h: {"up": a.up, "backend": a.backend, "acked_seq": a.acked_seq,
                      "sent_seq": a.sent_seq, "applied_seq": a.applied_seq,
                      "seq": self.host_seq.get(h, 0),
                      "last_seen_age_s": now - a.last_seen_s, "total_Bps": a.total_Bps}
                  for h, a in self.agents.items()}
        return {"now_s": now, "jobs": jobs, "agents": agents, "plan": dict(self.plan_summary),
                "planning": self.config.planning, "plans": dict(self.plans_by_mode),
                "solve_s": list(self.solve_times[-1000:])}

    # ------------------------------------------------------------------ agents

    def register(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """Register (or re-register) the agent of ``body["host"]``; it gets the current schedule."""
        host = body["host"]
        if host not in self.cluster:
            return Reject(ErrorCode.UNKNOWN_HOST, f"host {host!r} is not in the cluster")
        old = self.agents.get(host)
        if old is not None:
            self.by_identity.pop(old.identity, None)
        a = AgentState(host, identity, str(body.get("backend", "")), now,
                       applied_seq=int(body.get("applied_seq", 0)))
        self.agents[host] = a
        self.by_identity[identity] = host
        if self.host_seq.get(host, 0):
            self.unacked.add(host)
            self._outbox_changed = True
        if old is not None and not old.up:
            self._trigger("agent_up", now)
        idx = self.cluster.index(host)
        h = self.cluster.hosts[idx]
        return {"host": host, "seq": self.host_seq.get(host, 0), "heartbeat_s": self.config.heartbeat_s,
                "line_Bps": h.egress_Bps, "ingress_Bps": h.ingress_Bps,
                "t0_wall_ns": int(self.t0_wall_s * 1e9)}

    def _agent(self, identity: bytes, body: dict, now: float) -> AgentState | Reject:
        host = self.by_identity.get(identity)
        a = self.agents.get(host) if host is not None else None
        if a is None or a.host != body["host"]:
            return Reject(ErrorCode.NOT_REGISTERED,
                          f"agent for host {body['host']!r} must register first")
        a.last_seen_s = now
        if not a.up:
            a.up = True
            self._outbox_changed = True  # it missed what was sent while it was down
            self._trigger("agent_up", now)
        return a

    def heartbeat(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """Liveness plus measured rates (bytes/s) from an agent."""
        a = self._agent(identity, body, now)
        if isinstance(a, Reject):
            return a
        a.applied_seq = int(body.get("applied_seq", a.applied_seq))
        a.flow_rates_Bps = dict(body.get("flow_rates_Bps", {}))
        a.total_Bps = float(body.get("total_Bps", 0.0))
        return {"seq": self.host_seq.get(a.host, 0)}

    def ack(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """An agent confirms it holds schedule ``seq``."""
        a = self._agent(identity, body, now)
        if isinstance(a, Reject):
            return a
        seq = int(body["seq"])
        if seq > a.acked_seq:
            a.acked_seq = seq
            a.acked_at_s = now
        if a.acked_seq >= self.host_seq.get(a.host, 0):
            self.unacked.discard(a.host)
        return {}

    def get_schedule(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """The current schedule body of the asking agent's host (empty if none yet)."""
        a = self._agent(identity, body, now)
        if isinstance(a, Reject):
            return a
        return self.host_body(a.host)

    def check_agents(self, now: float) -> list[str]:
        """Mark agents silent for longer than the heartbeat timeout as down; return them."""
        down = []
        for a in self.agents.values():
            if a.up and now - a.last_seen_s > self.config.heartbeat_timeout_s:
                a.up = False
                down.append(a.host)
        if down:
            self._trigger("agent_down", now)
        return down

    def outbox(self, now: float) -> list[tuple[AgentState, bytes]]:
        """Packed schedule bodies to (re-)send: to every up agent whose ack of its body is overdue.

        Only hosts whose body changed since their agent's last ack are looked at.
        """
        # Nothing new to send and no re-send due: skip the scan (the loop asks every turn).
        if not self._outbox_changed and now < self._next_resend_s:
            return []
        self._outbox_changed = False
        out = []
        resend = self.config.resend_s
        next_resend = math.inf
        for h in list(self.unacked):
            a = self.agents.get(h)
            if a is None or not a.up:
                continue  # pushed once it registers or comes back
            seq = self.host_seq[h]
            if a.acked_seq >= seq:
                self.unacked.discard(h)
                continue
            if a.sent_seq < seq or now - a.sent_at_s >= resend:
                a.sent_seq = seq
                a.sent_at_s = now
                out.append((a, self.host_frames[h]))
            next_resend = min(next_resend, a.sent_at_s + resend)
        self._next_resend_s = next_resend
        return out

    def host_body(self, host: str) -> dict:
        """The schedule message body for ``host`` (idempotent by ``seq``)."""
        body = self._bodies.get(host)
        if body is None and host in self.host_frames:
            body = self._bodies[host] = unpack_body(self.host_frames[host])
        if body is None:  # nothing planned for it yet: the empty body of seq 0
            body = host_bodies(None, [self.cluster.index(host)], 0, self.t0_wall_s, self.cluster,
                               self.config.slot_s)[host]
        return body

    # ------------------------------------------------------------------ planning

    def want_plan(self, now: float) -> bool:
        """Whether a full re-solve is due (a trigger fired, coalescing elapsed, none in flight)."""
        if self.inflight[FULL] or self.held is not None:
            return False
        duty = self.config.max_planner_duty
        if duty < 1.0 and now - self.last_plan_s < self.last_full_solve_s * (1.0 / duty - 1.0):
            return False  # cooling down: triggers wait, none is lost
        if (self.config.replan_period_s > 0 and self.active
                and now - self.last_plan_s >= self.config.replan_period_s):
            self._trigger("tick", now)
        if (self.incremental and self.config.joint_replan_s > 0
                and now - self.dirty_since >= self.config.joint_replan_s):
            self._trigger("joint", now)
        return bool(self.reasons) and now - self.first_reason_s >= self.config.coalesce_s

    def plan_requests(self, now: float) -> list[PlanRequest]:
        """The plans to start now: at most one incremental and one full re-solve in flight."""
        out = []
        if (self.pending and not self.inflight[INCREMENTAL] and self.held is None
                and now - self.first_pending_s >= self.config.coalesce_s and len(self.pending) > 1
                and sum(len(self.active[j].job.transfers) for j in self.pending)
                > self.config.max_increment_transfers):
            # a big batch is no fast plan: a joint re-solve, in the planner process, takes it
            self.bulk.update(self.pending)
            self.pending.clear()
            self.first_pending_s = math.inf
            self._trigger("arrival", now)
        if not self.inflight[INCREMENTAL]:
            if self.held is not None:
                out.append(self._increment_request(now, rebase=True))
            elif self.removals or (self.pending and now - self.first_pending_s >= self.config.coalesce_s):
                out.append(self._increment_request(now))
        if self.want_plan(now):
            out.append(self.plan_request(now))
        return out

    def plan_request(self, now: float) -> PlanRequest:
        """Snapshot every active job and pending event for a full re-solve; clears its triggers."""
        self.plan_seq += 1
        self.inflight[FULL] = self.plan_seq
        jobs = tuple((js.job, dict(js.done), {}) for js in self.active.values())
        req = PlanRequest(self.plan_seq, now, jobs, tuple(self.events), tuple(sorted(self.reasons)),
                          slot_s=self.config.slot_s)
        self.events.clear()
        self.reasons.clear()
        self.first_reason_s = math.inf
        return req

    def _increment_request(self, now: float, rebase: bool = False) -> PlanRequest:
        """The pending arrivals (and removals) on top of the schedule in force, or, for a
        rebase, every active job the held full result lacks on top of it."""
        self.plan_seq += 1
        self.inflight[INCREMENTAL] = self.plan_seq
        if rebase:
            # the jobs of the schedule in force that the held result lacks; arrivals not
            # planned yet stay pending
            base, covered = self.held.schedule, self.held.jobs
            new = [self.active[j] for j in self.covered if j in self.active and j not in covered]
            reasons = ("rebase",)
        else:
            base, covered = self.schedule, self.covered
            new = [self.active[j] for j in self.pending if j in self.active]
            reasons = ("arrival",) if new else ("removal",)
            self.pending.clear()
            self.first_pending_s = math.inf
        removed = frozenset(self.removals)
        self.removals.clear()
        live = None
        if base is not None:
            live = np.fromiter(((js := self.active.get(f[0])) is not None and f[1] not in js.done
                                for f in base.flows), dtype=bool, count=len(base.flows))
        new_ids = {js.job.id for js in new}
        out_hosts: list[int] = []
        in_hosts: list[int] = []
        for jid, js in self.active.items():
            if jid not in new_ids:
                out_hosts.extend(js.out_left)
                in_hosts.extend(js.in_left)
        nh = len(self.cluster)
        return PlanRequest(self.plan_seq, now, tuple((js.job, dict(js.done), {}) for js in new), (),
                           reasons, mode=INCREMENTAL, base=base, live=live, covered=covered,
                           removed=removed,
                           busy_egress=np.bincount(np.asarray(out_hosts, dtype=np.int64), minlength=nh),
                           busy_ingress=np.bincount(np.asarray(in_hosts, dtype=np.int64), minlength=nh),
                           rebase=rebase, slot_s=self.config.slot_s)

    def install(self, res: PlanResult, now: float) -> bool:
        """Adopt a finished plan; returns False when it failed (the schedule in force stays).

        A full result that lacks active jobs (added while it was solved) is held
        until an incremental plan puts them on top of it.
        """
        self.n_plans += 1
        self.plans_by_mode[res.mode] = self.plans_by_mode.get(res.mode, 0) + 1
        self.solve_times.append(res.solve_s)
        for (job, tid), lat in res.lat_s.items():
            js = self.jobs.get(job)
            if js is not None:
                js.lat_s.setdefault(tid, lat)
        if res.mode == FULL:
            self.inflight[FULL] = 0
            self.last_plan_s = now
            self.last_full_solve_s = res.solve_s
            if res.error:
                self.plan_summary = {"seq": res.seq, "error": res.error, "solve_s": res.solve_s}
                return False
            self.bulk.difference_update(res.jobs)
            # jobs planned meanwhile (in the schedule in force, or in an incremental plan
            # in flight) must not lose their flows: hold it until they are rebased on it
            if self.incremental and self.incremental_ok and (
                    self.inflight[INCREMENTAL]
                    or any(j in self.active and j not in res.jobs for j in self.covered)):
                self.held = res
                return True
            self._joint()
            self._adopt(res, now)
            return True
        self.inflight[INCREMENTAL] = 0
        if res.error or res.unsupported:
            if res.unsupported:
                self.incremental_ok = False
            self.removals |= res.removed
            for jid in res.added:  # a full re-solve plans them instead
                if jid in self.active:
                    self._trigger("arrival", now)
            if res.rebase:  # adopt the held full result as it is
                held, self.held = self.held, None
                if held is not None:
                    self._joint()
                    self._adopt(held, now)
            if res.error:
                self.plan_summary = {"seq": res.seq, "error": res.error, "solve_s": res.solve_s}
            return False
        if res.rebase:
            self.held = None
            self._joint(res.added)
        elif res.jobs == frozenset(res.added) and all(j in res.jobs for j in self.active):
            # planned alone on an empty schedule, with no other job about: that is a joint plan
            self._joint()
        else:
            self.added_since_full.update(res.added)
        self._update_dirty(now)
        self._adopt(res, now)
        if res.added_late:
            self._trigger("late", now)  # a joint plan may meet what this one could not
        return True

    def _adopt(self, res: PlanResult, now: float) -> None:
        """Make ``res`` the schedule in force and queue its changed bodies for their agents."""
        sched = res.schedule
        self.schedule = sched
        self.schedule_seq = res.seq
        self.covered = res.jobs
        self._flow_index = res.flow_index
        self._paced.clear()
        for h, frame in res.frames.items():
            self.host_frames[h] = frame
            self._bodies.pop(h, None)
            self.host_seq[h] = res.seq
            self.unacked.add(h)
        self._outbox_changed = True
        if self.incremental and self.incremental_ok:
            for j in res.jobs:
                if j not in self.active:
                    # ended while this was planned: leaves at the next incremental step
                    self.removals.add(j)
                    self._released(j, now)
                else:
                    self.pending.pop(j, None)  # planned here already
        down = {h for h, a in self.agents.items() if not a.up}
        unenforced = 0
        if down and sched is not None:
            names = self.cluster.names
            unenforced = sum(1 for f in sched.flows if names[f[2]] in down)
        self.plan_summary = {
            "seq": res.seq, "mode": res.mode, "reasons": list(res.reasons), "solve_s": res.solve_s,
            "jobs": sum(1 for j in res.jobs if j in self.active),
            "flows": len(sched.flows) if sched else 0, "late": len(sched.late) if sched else 0,
            "n_slots": int(sched.leftover_egress.shape[1]) if sched else 0,
            "slot_s": sched.slot_s if sched else self.config.slot_s,
            "hosts_changed": len(res.frames), "unenforced_flows": unenforced,
            "planned_at_s": res.ready_wall_s - self.t0_wall_s, "installed_at_s": now,
        }
