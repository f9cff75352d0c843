"""The daemon's plan book: re-solve triggers, plan requests, and the schedule in force."""

# One module although past 500 lines: the plan book is the one owner of the
# schedule in force; the snapshot and result types it exchanges with the
# planner threads and the pure schedule merges it applies sit beside it.
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from jitsched.config import FULL, INCREMENTAL, DaemonConfig
from jitsched.daemon.background import Announced, BackgroundTable
from jitsched.daemon.jobs import JobRegistry, JobState
from jitsched.dag.model import Cluster, Job
from jitsched.plan.planner import DEFAULT_SLOT_S
from jitsched.policies.base import SlotSchedule
from jitsched.protocol import BACKGROUND_JOB

# Policy events (arrivals, node completions) wait for the next full re-solve; in
# incremental mode that may be long in coming, so only the newest are kept.
MAX_EVENTS = 100_000
# solve times kept (10k to 20k of the newest): demo and testbed read them all, status the last 1000
MAX_SOLVE_TIMES = 10_000
# A joint re-solve that fails this many times in a row, with no job failing on its
# own and the planner passing its self-test, costs its newest job its place: the
# arrival that made the joint plan impossible is the likeliest cause, and every
# other job keeps being planned.
BLAME_AFTER = 3


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
    slot_s: float = DEFAULT_SLOT_S  # the configured slot length (for bodies when the policy plans none)
    incarnation: int = 0  # the daemon process's, for the bodies
    epoch: int = 0  # the leader's among daemon replicas, for the bodies
    # the announced background flows (full re-solves; increments keep the base's ranks)
    background: tuple[Announced, ...] = ()
    # the cluster to plan on once hosts joined since the planner started (None: its own)
    cluster: Cluster | None = None
    # (egress, ingress) bytes/s per host to plan on instead of the line rates: each port's
    # line rate less the traffic its agent measures outside every schedule (None: line rates)
    capacity: tuple[np.ndarray, np.ndarray] | None = None
    # the planned critical jobs' reserved rates (reserve.ReservationBook.flows): the
    # schedule's floor for their flows (reserve.with_reservations)
    reserved: dict = field(default_factory=dict)
    # the hosts unfinished reserved transfers hold and what they leave of their ingress
    # (reserve.ReservationBook.ingress_held): with send_caps every other host's body carries
    # it, and with held_floor (the share [daemon] critical_floor keeps) each held host's body
    # carries that floor from its first reserved slot on
    caps_into: tuple = ()
    send_caps: bool = True
    held_floor: float | None = None
    # caps_into may differ from what the agents hold: an increment sends every host's body
    caps_changed: bool = False


@dataclass
class PlanResult:
    """What a worker hands back: the schedule, packed agent bodies and the LATs planned against.

    ``jobs`` are the jobs ``schedule`` plans, ``added`` those an incremental
    plan added. ``frames`` holds the packed schedule body of every host whose
    schedule changed, ``flow_index`` maps (job, transfer) to (start slot,
    number of slots). ``ready_wall_s`` is the wall clock when the plan was
    computed, before the bodies were built; ``bodies_s`` how long building and
    packing them took, seconds. ``poisoned`` maps each job the
    worker found it cannot plan even alone to why (the plan is of the others);
    ``planner_broken`` says the planner failed its self-test too (no job is
    to blame).
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
    bodies_s: float = 0.0
    # when the plan's schedule changes with no event (daemon clock; a best-effort job aging
    # into the normal class; an incremental plan's: its added jobs'): a full re-solve is due then
    changes_at_s: float = math.inf
    poisoned: dict[str, str] = field(default_factory=dict)
    planner_broken: bool = False


def fit_schedule(sched: SlotSchedule | None, cluster: Cluster) -> SlotSchedule | None:
    """``sched`` with a row for every host of ``cluster``: hosts that joined after it was
    planned have nothing planned and their whole line left."""
    if sched is None or sched.leftover_egress.shape[0] >= len(cluster):
        return sched
    n, slots = sched.leftover_egress.shape
    more_e = np.repeat(cluster.egress_Bps[n:, None], slots, axis=1)
    more_i = np.repeat(cluster.ingress_Bps[n:, None], slots, axis=1)
    return replace(sched, leftover_egress=np.vstack([sched.leftover_egress, more_e]),
                   leftover_ingress=np.vstack([sched.leftover_ingress, more_i]))


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
    # by what went (a job's flows), not by what stays (every flow): at 1000 ranked jobs
    # (32k flows) a set and a dict of the kept ones made a removal 30-70 ms
    went = {(f[0], f[1]) for f in gone}
    late = [x for x in sched.late if (x.get("job"), x.get("transfer")) not in went]
    prio = sched.prio
    if prio and went:
        prio = dict(prio)
        for k in went:
            prio.pop(k, None)
    return (replace(sched, flows=keep, leftover_egress=left_e, leftover_ingress=left_i, late=late, prio=prio),
            {int(h) for f in gone for h in (f[2], f[3])})


def merge_schedules(base: SlotSchedule | None, inc: SlotSchedule) -> SlotSchedule:
    """``base`` plus an increment planned on its grid (whose leftover already counts both)."""
    if base is None:
        return inc
    return SlotSchedule(epoch_s=base.epoch_s, slot_s=base.slot_s, flows=base.flows + inc.flows,
                        leftover_egress=inc.leftover_egress, leftover_ingress=inc.leftover_ingress,
                        late=base.late + inc.late, solve_s=inc.solve_s, prio=base.prio | inc.prio)


class PlanBook:
    """When to plan, what to plan, and the schedule in force with the jobs it covers.

    Planning (``config.planning``): ``full`` re-solves every active job on every
    trigger, arrivals included. ``incremental`` plans an arriving job alone
    against the capacity the schedule in force leaves (its allocations frozen);
    full joint re-solves run beside it on the re-solve triggers of
    docs/architecture.md §7 (drift, the periodic timer, agents coming and
    going), when an incremental plan has planned LAT misses, and at most
    ``joint_replan_s`` after the schedule stopped being a joint plan. A full
    result that misses jobs added while it was solved is adopted together with
    an incremental plan of those jobs on top of it (a rebase), never without them.

    Parameters
    ----------
    config : DaemonConfig
    registry : JobRegistry
        The jobs; the book reads which are active.
    t0_wall_s : float
        The daemon clock's wall-clock origin.
    """

    def __init__(self, config: DaemonConfig, registry: JobRegistry, t0_wall_s: float,
                 background: BackgroundTable | None = None) -> None:
        self.config = config
        self.cluster = config.cluster
        self.registry = registry
        self.background = background if background is not None else BackgroundTable(config)
        self.t0_wall_s = t0_wall_s
        self.incremental = config.planning == INCREMENTAL
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
        self._flow_index: dict[tuple[str, str], tuple[int, int]] = {}
        # per job, for the schedule in force: its planned transfers, latest planned finish
        # first, and how many of those are known done (early_s checks, amortised O(1))
        self._paced: dict[str, tuple[list[tuple[int, str]], list[int]]] = {}
        self.plan_summary: dict[str, Any] = {}
        self._joined_cluster: Cluster | None = None  # set once hosts joined: requests carry it
        self.solve_times: list[float] = []
        self.n_plans = 0
        self.plans_by_mode = {FULL: 0, INCREMENTAL: 0}
        self.last_plan_s = -math.inf  # the last full re-solve
        # when the schedule in force changes with no event: the last full plan's instant, or
        # an incremental plan's if sooner (PlanResult.changes_at_s)
        self.changes_at_s = math.inf
        self.last_full_solve_s = 0.0  # how long it took (max_planner_duty)
        self.incremental_ok = True  # False once the policy said it cannot plan incrementally
        self.plans_failed = {FULL: 0, INCREMENTAL: 0}
        # per mode, failures in a row and when the next attempt may start (backoff)
        self.failures = {FULL: 0, INCREMENTAL: 0}
        self.retry_at_s = {FULL: -math.inf, INCREMENTAL: -math.inf}
        self.last_error = ""
        self._full_jobs: tuple[str, ...] = ()  # the jobs of the full re-solve in flight
        self.incarnation = 0  # the daemon process's (SchedulerState sets it), for the bodies
        self.epoch = 0  # the leader's among replicas (SchedulerState sets it), for the bodies
        self.caps_requested: tuple = ()  # the last request's caps_into
        self.caps_in_force: tuple = ()  # the caps_into of the bodies the agents were sent last
        self.caps_due = False  # a reserved transfer arrived: the caps may lift (an increment tells)
        self._caps_of: dict[int, tuple] = {}  # the caps_into of each request in flight, by seq

    def held_hosts(self) -> tuple:
        """The hosts critical jobs' unfinished reserved transfers hold now, with what they
        leave of each one's ingress (:meth:`~jitsched.plan.reserve.ReservationBook.ingress_held`)."""
        book, active = self.registry.reservations, self.registry.active
        # an ended job's transfers arrive no more: its reservation holds no host
        return book.ingress_held({jid: active[jid].done if jid in active else h.windows.ids
                                  for jid, h in book.held.items()})

    def _caps_now(self) -> tuple:
        cfg = self.config
        return self.held_hosts() if cfg.critical_caps or cfg.critical_floor is not None else ()

    def _caps(self) -> dict:
        """A request's ``caps_into`` and ``caps_changed`` (against the last request's)."""
        caps = self._caps_now()
        changed = caps != self.caps_requested or caps != self.caps_in_force
        self.caps_requested = caps
        self.caps_due = False
        self._caps_of[self.plan_seq] = caps
        return {"caps_into": caps, "caps_changed": changed, "send_caps": self.config.critical_caps,
                "held_floor": self.config.critical_floor}

    def _caps_installed(self, res: PlanResult) -> None:
        """``res`` is in force: if its bodies carry caps that changed since it was asked
        for (a full re-solve outrun by an increment), another increment puts them right."""
        sent = self._caps_of.pop(res.seq, None)
        for seq in [s for s in self._caps_of if s < res.seq and s != self.inflight[FULL]
                    and s != self.inflight[INCREMENTAL]]:
            del self._caps_of[seq]
        if sent is None:
            return
        self.caps_in_force = sent
        if sent != self._caps_now():
            self.caps_requested = sent  # what the agents hold now: the next increment sends all
            self.caps_due = True

    def _caps_failed(self, res: PlanResult) -> None:
        """``res`` failed: caps its request carried that the agents lack are asked for again."""
        if self._caps_of.pop(res.seq, None) is not None and self._caps_now() != self.caps_in_force:
            self.caps_requested = self.caps_in_force
            self.caps_due = True

    @property
    def active(self) -> dict[str, JobState]:
        """The running jobs, by id."""
        return self.registry.active

    @property
    def planning_seq(self) -> int:
        """The seq of a plan in flight (or of a full result awaiting its rebase), 0 if none."""
        held = self.held.seq if self.held is not None else 0
        return self.inflight[INCREMENTAL] or self.inflight[FULL] or held

    # ------------------------------------------------------------------ job events

    def arrived(self, jid: str, now: float) -> None:
        """Job ``jid`` was submitted: it waits for an incremental plan or triggers a re-solve."""
        self.policy_event("arrival", jid, "")
        if self.incremental and self.incremental_ok:
            self.pending[jid] = None
            self.first_pending_s = min(self.first_pending_s, now)
        else:
            self.trigger("arrival", now)

    def transfer_done(self, js: JobState, nid: str, now: float) -> None:
        """Transfer ``nid`` of ``js`` arrived: check it against the plan (drift, early)."""
        planned = self._planned_finish(js.job.id, nid)
        if planned is not None and now - planned > self.config.drift_s:
            self.trigger("drift", now)
        elif self.config.early_s < math.inf and js.in_left and self._holds_back(js, now):
            self.trigger("early", now)
        self.policy_event("node_done", js.job.id, nid)
        if js.job.id in self.registry.reservations.held and self._caps_now() != self.caps_requested:
            # the last reserved transfer through a host arrived: an increment (that plans no
            # job, whatever the planning mode) sends the bodies without its cap
            self.caps_due = True

    def job_ended(self, jid: str, state: str, now: float) -> None:
        """Job ``jid`` ended as ``state``: its flows leave the plan."""
        self.pending.pop(jid, None)
        self._paced.pop(jid, None)
        self.bulk.discard(jid)
        if not (self.incremental and self.incremental_ok):
            self.trigger(state, now)
            return
        # its flows leave the schedule at the next incremental step, no LP needed
        if jid in self.covered:
            self.removals.add(jid)
            self._released(jid, now)

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
            # ranked, not planned (the default jit's alpha 0; solver._attach_bodies does not
            # index those): no finish time to drift from; read as the schedule's epoch it
            # made every transfer over drift_s after a plan trigger a full re-solve
            return None
        return s.epoch_s + (start + n) * s.slot_s

    def policy_event(self, kind: str, job_id: str, node: str) -> None:
        """Queue a policy hook (``arrival`` or ``node_done``) for the next full re-solve."""
        self.events.append((kind, job_id, node))
        if len(self.events) > MAX_EVENTS:
            del self.events[:MAX_EVENTS // 2]

    def trigger(self, reason: str, now: float) -> None:
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

    # ------------------------------------------------------------------ requests

    def want_plan(self, now: float) -> bool:
        """Whether a full re-solve is due (a trigger fired, coalescing elapsed, none in flight)."""
        if self.inflight[FULL] or self.held is not None or now < self.retry_at_s[FULL]:
            return False  # a failed re-solve's retry waits out its backoff, its triggers kept
        duty = self.config.max_planner_duty
        if duty < 1.0 and now - self.last_plan_s < self.last_full_solve_s * (1.0 / duty - 1.0):
            return False  # cooling down: triggers wait, none is lost
        if (self.config.replan_period_s > 0 and self.active
                and now - self.last_plan_s >= self.config.replan_period_s):
            self.trigger("tick", now)
        if now >= self.changes_at_s:
            self.changes_at_s = math.inf
            self.trigger("ranks_due", now)
        if (self.incremental and self.config.joint_replan_s > 0
                and now - self.dirty_since >= self.config.joint_replan_s):
            self.trigger("joint", now)
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
            self.trigger("arrival", now)
        if not self.inflight[INCREMENTAL] and now >= self.retry_at_s[INCREMENTAL]:
            if self.held is not None:
                out.append(self._increment_request(now, rebase=True))
            elif self.removals or self.caps_due or (self.pending
                                                    and now - self.first_pending_s >= self.config.coalesce_s):
                out.append(self._increment_request(now))
        if self.want_plan(now):
            out.append(self.plan_request(now))
        return out

    def next_seq(self) -> int:
        """A seq above every one given so far: each plan request's, and a result's adopted out of order."""
        self.plan_seq += 1
        return self.plan_seq

    def plan_request(self, now: float) -> PlanRequest:
        """Snapshot every active job and pending event for a full re-solve; clears its triggers."""
        self.inflight[FULL] = self.next_seq()
        jobs = tuple((js.job, dict(js.done), {}) for js in self.active.values())
        self._full_jobs = tuple(self.active)
        req = PlanRequest(self.plan_seq, now, jobs, tuple(self.events), tuple(sorted(self.reasons)),
                          slot_s=self.config.slot_s, incarnation=self.incarnation,
                          epoch=self.epoch, background=self.background.snapshot(),
                          cluster=self._joined_cluster,
                          reserved=self.registry.reservations.flows(self.active), **self._caps())
        self.events.clear()
        self.reasons.clear()
        self.first_reason_s = math.inf
        return req

    def _increment_request(self, now: float, rebase: bool = False) -> PlanRequest:
        """The pending arrivals (and removals) on top of the schedule in force, or, for a
        rebase, every active job the held full result lacks on top of it."""
        self.inflight[INCREMENTAL] = self.next_seq()
        if rebase:
            # the jobs of the schedule in force that the held result lacks; arrivals not
            # planned yet stay pending
            base, covered = self.held.schedule, self.held.jobs
            new = [self.active[j] for j in self.covered if j in self.active and j not in covered]
            reasons = ("rebase",)
        else:
            base, covered = self.schedule, self.covered
            new = [self.active[j] for j in self.pending if j in self.active]
            reasons = ("arrival",) if new else ("removal",) if self.removals else ("caps",)
            self.pending.clear()
            self.first_pending_s = math.inf
        removed = frozenset(self.removals)
        self.removals.clear()
        live = None
        if base is not None:
            # done sets looked up once per job, not self.active once per flow: at 1000 ranked
            # jobs (32k flows) this mask was the daemon loop's busiest line under arrivals
            done = {jid: js.done for jid, js in self.active.items()}
            held = self.background.flows  # an announced background flow counts while held
            live = np.fromiter(((d := done.get(f[0])) is not None and f[1] not in d
                                if f[0] != BACKGROUND_JOB else f[1] in held
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
                           rebase=rebase, slot_s=self.config.slot_s, incarnation=self.incarnation,
                           cluster=self._joined_cluster, epoch=self.epoch,
                           reserved=self.registry.reservations.flows(new_ids), **self._caps())

    # ------------------------------------------------------------------ results

    def install(self, res: PlanResult, now: float,
                adopt: Callable[[PlanResult, float], None]) -> bool:
        """Take a finished plan, calling ``adopt(result, now)`` for each result to put in
        force; returns False when it failed (the schedule in force stays).

        A full result that lacks active jobs (added while it was solved) is held
        until an incremental plan puts them on top of it.
        """
        self.n_plans += 1
        self.plans_by_mode[res.mode] = self.plans_by_mode.get(res.mode, 0) + 1
        res.schedule = fit_schedule(res.schedule, self.cluster)  # planned before hosts joined
        if res.error:
            self._failed(res, now)
        elif not res.unsupported:
            self.solve_times.append(res.solve_s)  # successful plans only
            if len(self.solve_times) > 2 * MAX_SOLVE_TIMES:
                del self.solve_times[:-MAX_SOLVE_TIMES]  # bounded: a float a plan, for days
            self.failures[res.mode] = 0
            self.retry_at_s[res.mode] = -math.inf
        if res.mode == FULL:
            self.inflight[FULL] = 0
            self.last_plan_s = now
            self.last_full_solve_s = res.solve_s
            if res.error:
                self.plan_summary = {"seq": res.seq, "error": res.error, "solve_s": res.solve_s}
                self._caps_failed(res)
                return False
            self.changes_at_s = res.changes_at_s
            self.bulk.difference_update(res.jobs)
            # jobs planned meanwhile (in the schedule in force, or in an incremental plan
            # in flight) must not lose their flows: hold it until they are rebased on it.
            # An increment in flight (in any planning mode: one that only lifts caps, too)
            # was asked for on the schedule in force, not on this one: adopted after this,
            # it would put that older schedule back, so this waits for it and its rebase
            if self.inflight[INCREMENTAL] or (self.incremental and self.incremental_ok and any(
                    j in self.active and j not in res.jobs for j in self.covered)):
                self.held = res
                return True
            self._joint()
            self._caps_installed(res)
            adopt(res, now)
            return True
        self.inflight[INCREMENTAL] = 0
        if res.error or res.unsupported:
            if res.unsupported:
                self.incremental_ok = False
            self._caps_failed(res)
            self.removals |= res.removed
            for jid in res.added:  # a full re-solve plans them instead
                if jid in self.active:
                    self.trigger("arrival", now)
            if res.rebase:  # adopt the held full result as it is
                held, self.held = self.held, None
                if held is not None:
                    self._joint()
                    self._caps_installed(held)
                    adopt(held, now)
            if res.error:
                self.plan_summary = {"seq": res.seq, "error": res.error, "solve_s": res.solve_s}
            return False
        # A ranked increment (the default jit's) admits its jobs after every ranked job,
        # provisionally: the joint re-solve that puts them in their place is due at once.
        provisional = bool(res.added) and res.schedule is not None and bool(res.schedule.prio)
        if res.rebase:
            self.held = None
            self._joint(res.added)
        elif res.jobs == frozenset(res.added) and all(j in res.jobs for j in self.active):
            # planned alone on an empty schedule, with no other job about: that is a joint plan
            self._joint()
            provisional = False  # ranked from scratch, as a joint plan ranks them
        else:
            self.added_since_full.update(res.added)
        self._update_dirty(now)
        self.changes_at_s = min(self.changes_at_s, res.changes_at_s)
        if provisional:
            self.trigger("order", now)
        self._caps_installed(res)
        adopt(res, now)
        if res.added_late:
            self.trigger("late", now)  # a joint plan may meet what this one could not
        return True

    def _failed(self, res: PlanResult, now: float) -> None:
        """Count a failed plan and put off the next attempt of its mode: ``plan_retry_s``,
        doubling with each failure in a row up to ``plan_retry_max_s``."""
        self.plans_failed[res.mode] = self.plans_failed.get(res.mode, 0) + 1
        self.last_error = res.error
        k = self.failures[res.mode] = self.failures.get(res.mode, 0) + 1
        cfg = self.config
        self.retry_at_s[res.mode] = now + min(cfg.plan_retry_max_s, cfg.plan_retry_s * 2.0 ** min(k - 1, 60))
        if res.mode == FULL:
            self.trigger("retry", now)  # its triggers were taken with the request

    def culprits(self, res: PlanResult) -> dict[str, str]:
        """The running jobs to mark failed because of ``res``, each with why.

        Those the worker found it cannot plan even alone; else, once full
        re-solves have failed ``BLAME_AFTER`` times in a row (this one
        included) with the planner passing its self-test, the newest job the
        failed re-solve planned. Call before :meth:`install`.
        """
        out = {j: f"no plan for this job alone: {why}" for j, why in res.poisoned.items()
               if j in self.active}
        if (res.mode == FULL and res.error and not out and not res.planner_broken
                and self.failures[FULL] + 1 >= BLAME_AFTER):
            newest = [j for j in self._full_jobs if j in self.active]
            if newest:
                out[newest[-1]] = (f"no joint plan with this job in {self.failures[FULL] + 1} "
                                   f"attempts: {res.error}")
        return out

    def fit_cluster(self) -> None:
        """Hosts joined (``self.cluster`` has them): the schedules held get their rows, and
        plan requests carry the cluster from now on."""
        self._joined_cluster = self.cluster
        self.schedule = fit_schedule(self.schedule, self.cluster)
        if self.held is not None:
            self.held.schedule = fit_schedule(self.held.schedule, self.cluster)

    def adopt(self, res: PlanResult, now: float, down: set[str]) -> None:
        """Make ``res`` the schedule in force (``down``: hosts whose agent is down, for the
        summary's count of unenforced flows)."""
        sched = res.schedule
        self.schedule = sched
        self.schedule_seq = res.seq
        self.covered = res.jobs
        self._flow_index = res.flow_index
        self._paced.clear()
        if self.incremental and self.incremental_ok:
            for j in res.jobs:
                if j not in self.active:
                    # ended while this was planned: leaves at the next incremental step
                    self.removals.add(j)
                    self._released(j, now)
                else:
                    self.pending.pop(j, None)  # planned here already
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
            "hosts_changed": len(res.frames), "bodies_s": res.bodies_s, "unenforced_flows": unenforced,
            "planned_at_s": res.ready_wall_s - self.t0_wall_s, "installed_at_s": now,
        }


__all__ = ["BLAME_AFTER", "MAX_EVENTS", "PlanBook", "PlanRequest", "PlanResult", "fit_schedule", "merge_schedules",
           "prune_schedule"]
