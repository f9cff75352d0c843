"""The daemon's scheduler state: jobs, agents and plans, with no sockets and no policy logic."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from jitsched.config import DaemonConfig
from jitsched.errors import ValidationError
from jitsched.lat import latest_arrival_times
from jitsched.model import TRANSFER, Cluster, DagArrays, Job, compile_jobs, parse_cluster, parse_job
from jitsched.policies.base import (
    DONE,
    RUNNING,
    WAITING,
    FlowSet,
    Policy,
    SchedulerView,
    SlotSchedule,
)
from jitsched.protocol import ErrorCode, flow_id


@dataclass(frozen=True)
class Reject:
    """An expected rejection, returned (not raised) by state methods; becomes an error reply."""

    code: str
    message: str


@dataclass
class JobState:
    """One submitted job and what the daemon knows of its progress (times on the daemon clock)."""

    job: Job  # arrival_s is the submission instant on the daemon clock
    index: dict[str, int]
    submitted_s: float
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


@dataclass
class AgentState:
    """A registered host agent and the schedule delivery state for it."""

    host: str
    identity: bytes
    backend: str
    last_seen_s: float
    up: bool = True
    acked_seq: int = 0
    sent_seq: int = 0
    sent_at_s: float = -math.inf
    applied_seq: int = 0
    flow_rates_Bps: dict = field(default_factory=dict)
    total_Bps: float = 0.0


@dataclass(frozen=True)
class PlanRequest:
    """An immutable snapshot handed to the planning worker.

    ``jobs`` are (job, done-times, remaining-bytes) triples of the active jobs;
    ``events`` the policy hooks to deliver first, as ``(kind, job_id, node_id)``.
    """

    seq: int
    now_s: float
    jobs: tuple[tuple[Job, dict[str, float], dict[str, float]], ...]
    events: tuple[tuple[str, str, str], ...]
    reasons: tuple[str, ...]


@dataclass
class PlanResult:
    """What the worker hands back: the policy's schedule and the LATs it planned against."""

    seq: int
    schedule: SlotSchedule | None
    lat_s: dict[tuple[str, str], float]
    solve_s: float
    reasons: tuple[str, ...]
    error: str = ""


def build_view(req: PlanRequest, cluster: Cluster) -> tuple[SchedulerView, dict[str, int]]:
    """The policy's view of ``req``: active jobs compiled, node states derived from done times.

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


def run_plan(policy: Policy, req: PlanRequest, cluster: Cluster) -> PlanResult:
    """Deliver ``req``'s events to ``policy`` and ask it for a schedule (worker thread)."""
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
        lats = _lats(view, req)
    except Exception as exc:  # noqa: BLE001 - a failed plan must not kill the daemon
        return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                          f"{type(exc).__name__}: {exc}")
    return PlanResult(req.seq, sched, lats, time.perf_counter() - t0, req.reasons)


def _node_index(dag: DagArrays, k: int, node_id: str) -> int:
    lo, hi = int(dag.job_ptr[k]), int(dag.job_ptr[k + 1])
    return lo + dag.node_ids[lo:hi].index(node_id)


def _lats(view: SchedulerView, req: PlanRequest) -> dict[tuple[str, str], float]:
    """LATs of the transfers of newly arrived jobs, for the LAT hit rate."""
    new = {job_id for kind, job_id, _ in req.events if kind == "arrival"}
    if not new:
        return {}
    dag = view.dag
    res = latest_arrival_times(dag, view.cluster, now=view.now,
                               known_done=view.node_finish, remaining=view.remaining)
    out = {}
    for node in np.flatnonzero(dag.kind == TRANSFER):
        job = dag.job_ids[dag.job_of[node]]
        if job in new:
            out[(job, dag.node_ids[node])] = float(res.lat[node])
    return out


class SchedulerState:
    """Owns all daemon state. Methods take the daemon clock ``now`` (seconds) and return values.

    Request handlers return a reply body (dict) or a :class:`Reject`; agent-bound
    messages are produced by :meth:`outbox` and acknowledged via :meth:`ack`.
    """

    def __init__(self, config: DaemonConfig, t0_wall_s: float | None = None) -> None:
        self.config = config
        self.cluster = config.cluster
        # the daemon clock counts seconds from here; agents get epochs in wall-clock ns
        self.t0_wall_s = time.time() if t0_wall_s is None else t0_wall_s
        self.jobs: dict[str, JobState] = {}
        self.agents: dict[str, AgentState] = {}
        self.by_identity: dict[bytes, str] = {}
        self.events: list[tuple[str, str, str]] = []
        self.reasons: set[str] = set()
        self.plan_seq = 0
        self.planning_seq = 0  # seq of the request in flight, 0 if none
        self.schedule: SlotSchedule | None = None
        self.schedule_seq = 0
        self.host_bodies: dict[str, dict] = {}
        self.plan_summary: dict[str, Any] = {}
        self.solve_times: list[float] = []
        self.n_plans = 0
        self.lat_misses = 0
        self.last_plan_s = -math.inf
        self.first_reason_s = math.inf

    # ------------------------------------------------------------------ jobs

    def submit_job(self, body: dict, now: float) -> dict | Reject:
        """Validate and store a job; returns ``{"job_id"}`` and triggers a plan."""
        if sum(1 for j in self.jobs.values() if j.active) >= self.config.max_jobs:
            return Reject(ErrorCode.OVERLOADED, f"the daemon already runs {self.config.max_jobs} jobs")
        if "cluster" in body:
            other = parse_cluster(body["cluster"], "body.cluster")
            for h in other.hosts:
                if h.name not in self.cluster:
                    return Reject(ErrorCode.UNKNOWN_HOST,
                                  f"body.cluster: host {h.name!r} is not in the daemon's cluster")
        job = parse_job(body["job"], self.cluster, "body.job")
        if job.id in self.jobs and self.jobs[job.id].active:
            return Reject(ErrorCode.DUPLICATE_JOB, f"job {job.id!r} is already running")
        job = replace(job, arrival_s=now)
        self.jobs[job.id] = JobState(job, {n: i for i, n in enumerate(job.node_ids())}, now)
        self._event("arrival", job.id, "", now)
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
            self.reasons.add("drift")
            self.first_reason_s = min(self.first_reason_s, now)
        self.events.append(("node_done", js.job.id, nid))
        return {"lat_hit": hit}

    def _planned_finish(self, job_id: str, nid: str) -> float | None:
        s = self.schedule
        if s is None:
            return None
        for j, t, _, _, start, rates in s.flows:
            if j == job_id and t == nid:
                return s.epoch_s + (start + len(rates)) * s.slot_s
        return None

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
        self.events.append(("node_done", js.job.id, nid))
        return {}

    def job_finished(self, body: dict, now: float) -> dict | Reject:
        """Mark a job finished; its JCT is ``jct_s`` if given, else measured by the daemon."""
        js = self._job(body["job_id"])
        if isinstance(js, Reject):
            return js
        if js.active:
            js.state = "finished"
            js.finished_s = now
            js.jct_s = float(body.get("jct_s", now - js.submitted_s))
            self._event("finished", js.job.id, "", now)
        return {"jct_s": js.jct_s}

    def cancel_job(self, body: dict, now: float) -> dict | Reject:
        """Cancel a running job: its transfers leave the plan."""
        js = self._job(body["job_id"])
        if isinstance(js, Reject):
            return js
        if js.active:
            js.state = "cancelled"
            js.finished_s = now
            self._event("cancelled", js.job.id, "", now)
        return {"state": js.state}

    def _event(self, kind: str, job_id: str, node: str, now: float) -> None:
        if kind == "arrival":
            self.events.append((kind, job_id, node))
        self.reasons.add(kind)
        self.first_reason_s = min(self.first_reason_s, now)

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
                      "last_seen_age_s": now - a.last_seen_s, "total_Bps": a.total_Bps}
                  for h, a in self.agents.items()}
        return {"now_s": now, "jobs": jobs, "agents": agents, "plan": dict(self.plan_summary),
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
        if old is not None and not old.up:
            self._event("agent_up", "", host, now)
        idx = self.cluster.index(host)
        h = self.cluster.hosts[idx]
        return {"host": host, "seq": self.schedule_seq, "heartbeat_s": self.config.heartbeat_s,
                "line_Bps": h.egress_Bps, "t0_wall_ns": int(self.t0_wall_s * 1e9)}

    def _agent(self, identity: bytes, body: dict, now: float) -> AgentState | Reject:
        host = self.by_identity.get(identity)
        a = self.agents.get(host) if host is not None else None
        if a is None or a.host != body["host"]:
            return Reject(ErrorCode.NOT_REGISTERED,
                          f"agent for host {body['host']!r} must register first")
        a.last_seen_s = now
        if not a.up:
            a.up = True
            self._event("agent_up", "", a.host, now)
        return a

    def heartbeat(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """Liveness plus measured rates (bytes/s) from an agent."""
        a = self._agent(identity, body, now)
        if isinstance(a, Reject):
            return a
        a.applied_seq = int(body.get("applied_seq", a.applied_seq))
        a.flow_rates_Bps = dict(body.get("flow_rates_Bps", {}))
        a.total_Bps = float(body.get("total_Bps", 0.0))
        return {"seq": self.schedule_seq}

    def ack(self, identity: bytes, body: dict, now: float) -> dict | Reject:
        """An agent confirms it holds schedule ``seq``."""
        a = self._agent(identity, body, now)
        if isinstance(a, Reject):
            return a
        a.acked_seq = max(a.acked_seq, int(body["seq"]))
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
            self._event("agent_down", "", ",".join(down), now)
        return down

    def outbox(self, now: float) -> list[tuple[AgentState, dict]]:
        """Schedules to (re-)send: every up agent whose ack of the current seq is overdue."""
        out = []
        if self.schedule_seq == 0:
            return out
        for a in self.agents.values():
            if not a.up or a.acked_seq >= self.schedule_seq:
                continue
            if a.sent_seq < self.schedule_seq or now - a.sent_at_s >= self.config.resend_s:
                a.sent_seq = self.schedule_seq
                a.sent_at_s = now
                out.append((a, self.host_body(a.host)))
        return out

    def host_body(self, host: str) -> dict:
        """The schedule message body for ``host`` (idempotent by ``seq``)."""
        body = self.host_bodies.get(host)
        if body is None:
            line = self.cluster.hosts[self.cluster.index(host)].egress_Bps
            body = {"seq": self.schedule_seq, "slot_s": self.config.slot_s,
                    "epoch_ns": int(self.t0_wall_s * 1e9), "flows": [], "leftover_Bps": [],
                    "line_Bps": line}
        return body

    # ------------------------------------------------------------------ planning

    def want_plan(self, now: float) -> bool:
        """Whether a re-solve is due (a trigger fired, coalescing elapsed, none in flight)."""
        if self.planning_seq:
            return False
        if (self.config.replan_period_s > 0 and any(j.active for j in self.jobs.values())
                and now - self.last_plan_s >= self.config.replan_period_s):
            self.reasons.add("tick")
            self.first_reason_s = min(self.first_reason_s, now)
        return bool(self.reasons) and now - self.first_reason_s >= self.config.coalesce_s

    def plan_request(self, now: float) -> PlanRequest:
        """Snapshot the active jobs and pending events for the worker; clears the triggers."""
        self.plan_seq += 1
        self.planning_seq = self.plan_seq
        jobs = tuple((js.job, dict(js.done), {}) for js in self.jobs.values() if js.active)
        req = PlanRequest(self.plan_seq, now, jobs, tuple(self.events), tuple(sorted(self.reasons)))
        self.events.clear()
        self.reasons.clear()
        self.first_reason_s = math.inf
        return req

    def install(self, res: PlanResult, now: float) -> bool:
        """Adopt a finished plan; returns False when the plan failed (the old one stays)."""
        self.planning_seq = 0
        self.last_plan_s = now
        self.n_plans += 1
        self.solve_times.append(res.solve_s)
        for (job, tid), lat in res.lat_s.items():
            js = self.jobs.get(job)
            if js is not None:
                js.lat_s.setdefault(tid, lat)
        if res.error:
            self.plan_summary = {"seq": res.seq, "error": res.error, "solve_s": res.solve_s}
            return False
        active = {j for j, js in self.jobs.items() if js.active}
        sched = res.schedule
        self.schedule = sched
        self.schedule_seq = res.seq
        self.host_bodies = self._host_bodies(sched, active, res.seq)
        n_flows = sum(1 for f in sched.flows if f[0] in active) if sched else 0
        down = {h for h, a in self.agents.items() if not a.up}
        unenforced = sum(1 for f in sched.flows
                         if self.cluster.hosts[f[2]].name in down) if sched else 0
        self.plan_summary = {
            "seq": res.seq, "reasons": list(res.reasons), "solve_s": res.solve_s,
            "jobs": len(active), "flows": n_flows, "late": len(sched.late) if sched else 0,
            "n_slots": int(sched.leftover_egress.shape[1]) if sched else 0,
            "slot_s": sched.slot_s if sched else self.config.slot_s,
            "unenforced_flows": unenforced, "planned_at_s": now,
        }
        return True

    def _host_bodies(self, sched: SlotSchedule | None, active: Iterable[str], seq: int) -> dict:
        names = self.cluster.names
        if sched is None:
            epoch_ns = int(self.t0_wall_s * 1e9)
            return {h: {"seq": seq, "slot_s": self.config.slot_s, "epoch_ns": epoch_ns, "flows": [],
                        "leftover_Bps": [], "line_Bps": self.cluster.hosts[i].egress_Bps}
                    for i, h in enumerate(names)}
        active = set(active)
        per_host: list[list] = [[] for _ in names]
        for job, tid, src, dst, start, rates in sched.flows:
            if job in active:
                per_host[src].append({"flow": flow_id(job, tid), "dst": names[dst],
                                      "start_slot": int(start),
                                      "rates_Bps": np.asarray(rates, dtype=float).tolist()})
        epoch_ns = int((self.t0_wall_s + sched.epoch_s) * 1e9)
        left = np.asarray(sched.leftover_egress, dtype=float)
        return {h: {"seq": seq, "slot_s": float(sched.slot_s), "epoch_ns": epoch_ns,
                    "flows": per_host[i], "leftover_Bps": left[i].tolist() if left.size else [],
                    "line_Bps": self.cluster.hosts[i].egress_Bps}
                for i, h in enumerate(names)}


def validate_policy_name(name: str) -> None:
    """Raise ValidationError if no policy ``name`` is registered (after importing the built-ins)."""
    from jitsched.policies.base import POLICIES

    if name not in POLICIES:
        raise ValidationError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
