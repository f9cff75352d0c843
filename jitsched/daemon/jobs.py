"""The daemon's job registry: submitted jobs, their progress and how each ended."""

# One module although past 500 lines: JobRegistry is the one owner of the jobs, their
# progress counts, per-owner usage and reservations; the small records it keeps
# (JobState, Usage, Prepared) have no life outside it.

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace

from jitsched.config import ANONYMOUS, DaemonConfig
from jitsched.daemon.limits import check_job, check_job_map, job_bytes, memory_ceiling, rss_bytes
from jitsched.daemon.reject import Reject
from jitsched.dag.model import Cluster, Job, critical_path_s, parse_cluster, parse_job
from jitsched.plan.reserve import ReservationBook, ReserveOptions, Windows
from jitsched.protocol import ErrorCode
from jitsched.sim.isolated import isolated_windows


def scoped_id(owner: str | None, job_id: str) -> str:
    """The id the daemon holds client ``owner``'s job ``job_id`` by, in plans and in its
    agents' flow ids: ``"<owner>:<job_id>"`` (key names have no ``:``), ``job_id``
    itself without keys. A client names its jobs by its own ids; no two clients' meet."""
    return job_id if owner is None else f"{owner}:{job_id}"


# What a critical job that cannot be guaranteed becomes, as its client asks in the
# submit_job body's "if_unguaranteed": refused (the default) or admitted as normal.
UNGUARANTEED = ("refuse", "normal")


def bad_uid(body: dict) -> Reject | None:
    """The refusal of a body whose ``uid`` (the local user tickets are issued to) is negative."""
    if body.get("uid", 0) < 0:
        return Reject(ErrorCode.INVALID_BODY, f"body.uid: a user id is >= 0, got {body['uid']}")
    return None


def isolated_jct_s(job: Job, cluster: Cluster) -> float:
    """A lower bound of ``job``'s JCT alone in ``cluster``, seconds: the longer of its DAG's
    longest path (each transfer at its host pair's line rate) and its busiest port's bytes
    over that port's line rate."""
    took = {c.id: c.duration_s for c in job.computes}
    out: dict[int, float] = {}
    into: dict[int, float] = {}
    for t in job.transfers:
        s, d = cluster.index(t.src), cluster.index(t.dst)
        took[t.id] = t.bytes / min(cluster.hosts[s].egress_Bps, cluster.hosts[d].ingress_Bps)
        out[s] = out.get(s, 0.0) + t.bytes / cluster.hosts[s].egress_Bps
        into[d] = into.get(d, 0.0) + t.bytes / cluster.hosts[d].ingress_Bps
    return max(critical_path_s(took, job.edges), *out.values(), *into.values(), 0.0)


@dataclass
class Usage:
    """What one client holds in the registry: running jobs, and the estimated bytes of its
    jobs running and ended (:func:`jitsched.daemon.limits.job_bytes`)."""

    running: int = 0
    bytes: int = 0
    ended: deque = field(default_factory=deque)  # its ended jobs, oldest first (some forgotten)


@dataclass
class JobState:
    """One submitted job and what the daemon knows of its progress (times on the daemon clock).

    ``job.id`` is the scoped id (:func:`scoped_id`), ``name`` the id its client chose.

    ``ports`` maps each transfer to its (source, destination) host indices;
    ``out_left``/``in_left`` count the unfinished transfers leaving / entering
    each host (hosts with none are absent).
    """

    job: Job  # arrival_s is the submission instant on the daemon clock
    index: dict[str, int]
    submitted_s: float
    # the client whose key submitted it (None: the daemon has no keys); only that key
    # may report on, finish or cancel it
    owner: str | None = None
    ports: dict[str, tuple[int, int]] = field(default_factory=dict)
    out_left: dict[int, int] = field(default_factory=dict)
    in_left: dict[int, int] = field(default_factory=dict)
    done: dict[str, float] = field(default_factory=dict)
    started: dict[str, float] = field(default_factory=dict)
    measured_s: dict[str, float] = field(default_factory=dict)
    lat_s: dict[str, float] = field(default_factory=dict)  # LAT of each transfer at first plan
    state: str = "running"  # running | finished | cancelled | failed (no plan could be made) | abandoned
    error: str = ""  # why it failed
    finished_s: float = math.nan
    jct_s: float = math.nan
    lat_hits: int = 0
    lat_misses: int = 0
    journal_row: int = 0  # its row in the daemon's journal (0: no journal)
    seq: int = 0  # submission order in this daemon (status pages by it)
    name: str = ""  # the id its client chose ("": job.id)
    bytes: int = 0  # estimated bytes held for it (limits.job_bytes)
    forgotten: bool = False  # ended and dropped from the registry
    heard_s: float = math.nan  # when a request of its client last named it (NaN: at submission)
    # a critical job's reservation holds its JCT target until then (daemon clock; -inf: not critical)
    guard_until_s: float = -math.inf
    # a critical job admitted as normal: the bottleneck port and earliest guaranteed start
    unguaranteed: dict | None = None
    # a critical job that finished: whether it did so by guard_until_s (None: not yet, or never)
    met: bool | None = None
    # a critical job whose reservation takes more of a host than its agent now says it can
    # give: per such host, why
    at_risk: dict[str, str] = field(default_factory=dict)

    def guarantee(self, now: float, slot_s: float) -> str | None:
        """Where a critical job stands against its guarantee at ``now``: ``met`` or ``missed``
        once finished, ``on time`` or ``overdue`` while running, None if it holds no guarantee
        (not critical, or ended otherwise than finished). A finish within ``slot_s`` of the
        deadline meets it: the reservation's grid rounds it up by less than a slot."""
        if self.met is not None:
            return self.verdict
        if self.guard_until_s == -math.inf or not self.active:
            return None
        return "on time" if now <= self.guard_until_s + slot_s else "overdue"

    @property
    def verdict(self) -> str | None:
        """``met`` or ``missed`` for a critical job that finished, else None."""
        return None if self.met is None else "met" if self.met else "missed"

    @property
    def active(self) -> bool:
        return self.state == "running"


def _count_down(counts: dict[int, int], host: int) -> None:
    left = counts.get(host, 0) - 1
    if left > 0:
        counts[host] = left
    else:
        counts.pop(host, None)


@dataclass(frozen=True)
class Prepared:
    """A ``submit_job`` body checked and parsed without the registry (any thread may make
    it): the job, its node index, ports and per-host counts, and the progress it claims."""

    job: Job
    index: dict[str, int]
    ports: dict[str, tuple[int, int]]
    out_left: dict[int, int]
    in_left: dict[int, int]
    done: list[str]
    started: list[str]
    if_unguaranteed: str = "refuse"  # a critical job that cannot be guaranteed: UNGUARANTEED
    windows: Windows | None = None  # a critical job's reservation windows (sim.isolated.isolated_windows)


class JobRegistry:
    """Every job submitted since start (ended ones kept for a while, for status), the
    running ones apart.

    Knows nothing of plans: the caller tells the plan book what changed. An
    ended job is kept ``ended_retention_s`` seconds, at most ``max_ended_jobs``
    of them and ``max_ended_bytes`` of their estimated size (the oldest go
    first); :meth:`prune` drops the others and counts them in :attr:`pruned`.

    Jobs are held by their scoped id (:func:`scoped_id`): a client names only
    its own. Each client (``owner``; None without keys: ``anonymous``) runs at
    most its quota's ``max_jobs`` and holds at most ``max_job_bytes`` of jobs
    (its oldest ended ones are forgotten first to make room); and while the
    daemon's RSS is over its ceiling (``max_memory_bytes``), ended jobs are
    forgotten, oldest first, to make room for a submission, else it is refused.

    Parameters
    ----------
    config : DaemonConfig
    """

    def __init__(self, config: DaemonConfig) -> None:
        self.config = config
        self.cluster = config.cluster
        self.absent: frozenset[str] = frozenset()  # hosts that left the cluster: no new jobs on them
        self.jobs: dict[str, JobState] = {}
        self.active: dict[str, JobState] = {}  # in submission order
        self.ended: deque[JobState] = deque()  # in the order they ended (prune's queue)
        self.lat_misses = 0
        self.pruned = 0  # ended jobs dropped since start (retention, count, bytes)
        self._seq = 0
        self.usage: dict[str | None, Usage] = {}  # by owner
        self.ended_bytes = 0  # estimated bytes of the ended jobs held
        self.memory_ceiling = memory_ceiling(config)
        self.rss = rss_bytes  # this process's RSS now (bytes); tests stand in for it
        self.refused_memory = 0  # submissions refused for the memory ceiling
        self._forgotten: list[JobState] = []  # dropped outside prune: the next prune returns them
        self.critical_refused = 0  # critical submissions refused: no reservation could hold them
        self.critical_demoted = 0  # critical submissions admitted as normal, as their clients asked
        # admitted critical jobs that finished within their guarantee, and those that did not
        self.critical_met = 0
        self.critical_missed = 0
        # the critical jobs' reservations, on the daemon's clock and slot, each holding its
        # job within (1 + [daemon] critical_epsilon) of its isolated JCT
        self.reservations = ReservationBook(
            self.cluster, ReserveOptions(eps=config.critical_epsilon, slot_s=config.slot_s),
            default_share=config.critical_assumed_share)

    def submit(self, body: dict, now: float, owner: str | None = None) -> JobState | Reject:
        """Validate the ``submit_job`` body and store its job, arriving ``now`` (seconds),
        submitted by client ``owner`` (None: the daemon has no keys).

        :meth:`prepare` then :meth:`admit`.

        Raises
        ------
        ValidationError
            If the job map does not describe a valid job on the daemon's cluster.
        """
        full = self._full(owner)
        if full is not None:
            return full  # before parsing: a full daemon refuses cheaply
        prep = self.prepare(body)
        return prep if isinstance(prep, Reject) else self.admit(prep, now, owner)

    def _full(self, owner: str | None) -> Reject | None:
        quota = self.config.quota(owner).max_jobs
        u = self.usage.get(owner)
        if u is not None and u.running >= quota:
            return Reject(ErrorCode.OVERLOADED, f"client {owner or ANONYMOUS!r} already runs {quota} jobs "
                          "([limits.per_client] max_jobs)")
        if len(self.active) >= self.config.max_jobs:
            return Reject(ErrorCode.OVERLOADED, f"the daemon already runs {self.config.max_jobs} jobs "
                          "([limits] max_jobs)")
        return None

    def _room(self, owner: str | None, need: int) -> Reject | None:
        """Make room for ``need`` more bytes of client ``owner``'s jobs: over its
        ``max_job_bytes``, or with the daemon's RSS over its ceiling, its (then
        anyone's) oldest ended jobs are forgotten; a Reject if that is not enough."""
        quota = self.config.quota(owner).max_job_bytes
        u = self.usage.setdefault(owner, Usage())
        while u.bytes + need > quota and u.ended:
            js = u.ended.popleft()
            if not js.forgotten:
                self._forget(js)
        if u.bytes + need > quota:
            return Reject(ErrorCode.OVERLOADED, f"client {owner or ANONYMOUS!r} holds jobs of ~{u.bytes} bytes; "
                          f"this one of ~{need} would pass its {quota} ([limits.per_client] max_job_bytes)")
        over = self.rss() + need - self.memory_ceiling
        while over > 0 and self.ended:
            js = self.ended.popleft()
            if not js.forgotten:
                self._forget(js)
                over -= js.bytes  # its memory is free for the new job to use
        if over > 0:
            self.refused_memory += 1
            return Reject(ErrorCode.OVERLOADED, f"the daemon's memory ({self.rss()} bytes resident) with this "
                          f"job (~{need} bytes) would pass {self.memory_ceiling} bytes ([limits] max_memory_bytes)")
        return None

    def prepare(self, body: dict) -> Prepared | Reject:
        """Check and parse a ``submit_job`` body against the cluster and the limits only.

        Reads no registry state, so a worker thread may run it for a big body
        while the loop serves others (a 144k-node job takes ~2 s of parsing
        and checking); :meth:`admit` then stores the result.

        Raises
        ------
        ValidationError
            If the job map does not describe a valid job on the daemon's cluster.
        """
        if "cluster" in body:
            other = parse_cluster(body["cluster"], "body.cluster")
            for h in other.hosts:
                if h.name not in self.cluster:
                    return Reject(ErrorCode.UNKNOWN_HOST,
                                  f"body.cluster: host {h.name!r} is not in the daemon's cluster")
        bad = check_job_map(body["job"], self.config)
        if bad is not None:
            return bad
        job = parse_job(body["job"], self.cluster, "body.job")
        absent = self.absent
        if absent:
            gone = sorted(({c.host for c in job.computes} | {t.src for t in job.transfers}
                           | {t.dst for t in job.transfers}) & absent)
            if gone:
                return Reject(ErrorCode.UNKNOWN_HOST, f"body.job: host {gone[0]!r} left the cluster")
        bad = check_job(job, self.config)
        if bad is not None:
            return bad
        progress = self._progress(job, body.get("progress"))
        if isinstance(progress, Reject):
            return progress
        if (bad := bad_uid(body)) is not None:
            return bad
        fallback = body.get("if_unguaranteed", "refuse")
        if fallback not in UNGUARANTEED:
            return Reject(ErrorCode.INVALID_BODY, f"body.if_unguaranteed: expected one of "
                          f"{', '.join(UNGUARANTEED)}, got {self._clip(str(fallback))!r}")
        index = {n: i for i, n in enumerate(job.node_ids())}
        ports: dict[str, tuple[int, int]] = {}
        out_left: dict[int, int] = {}
        in_left: dict[int, int] = {}
        where = self.cluster.index
        for t in job.transfers:
            s, d = where(t.src), where(t.dst)
            ports[t.id] = (s, d)
            out_left[s] = out_left.get(s, 0) + 1
            in_left[d] = in_left.get(d, 0) + 1
        # a critical job's isolated schedule is simulated here, off the daemon's loop
        book = self.reservations
        win = isolated_windows(job, book.planning_cluster(), book.options) if job.job_class == "critical" else None
        return Prepared(job, index, ports, out_left, in_left, progress[0], progress[1], fallback, win)

    def admit(self, prep: Prepared, now: float, owner: str | None = None) -> JobState | Reject:
        """Store a job from :meth:`prepare`, arriving ``now``, owned by ``owner``: refused if
        the daemon or ``owner`` runs its ``max_jobs`` jobs, ``owner`` runs one of the same
        id, or there is no room for it in ``owner``'s quota or the daemon's memory.

        A critical job is reserved for (:class:`jitsched.plan.reserve.ReservationBook`): per-slot
        rates for its transfers on the capacity other critical jobs' reservations leave,
        holding its JCT within ``(1 + eps)`` of its isolated JCT from ``now``. One that no
        reservation can hold is refused, naming the port whose capacity binds and the
        earliest start (daemon clock) at which it could be guaranteed (the reply's
        ``detail``), or with ``if_unguaranteed`` "normal" admitted as a normal job (its
        JobState's ``unguaranteed`` holds the same).
        """
        full = self._full(owner)
        if full is not None:
            return full
        jid = scoped_id(owner, prep.job.id)
        if jid in self.active:
            return Reject(ErrorCode.DUPLICATE_JOB, f"job {prep.job.id!r} is already running")
        job, guard, why = prep.job, -math.inf, None
        if job.job_class == "critical":
            d = self.reservations.admit(jid, prep.windows, now)
            if d.admitted:
                guard = d.start_s + d.target_s
            else:
                why = {"bottleneck": d.bottleneck, "earliest_start_s": d.earliest_start_s,
                       "isolated_jct_s": d.isolated_s, "target_jct_s": d.target_s}
                if prep.if_unguaranteed == "normal":
                    job = replace(job, job_class="normal")
                else:
                    self.critical_refused += 1
                    return Reject(ErrorCode.OVERLOADED, f"critical job {job.id!r} cannot be guaranteed: "
                                  f"{d.bottleneck} binds; it could be from {d.earliest_start_s:.3f} s "
                                  "(daemon clock)", why)
        size = job_bytes(prep.job)
        no_room = self._room(owner, size)
        if no_room is not None:
            self.reservations.release(jid)
            return no_room
        if job is not prep.job:
            self.critical_demoted += 1
        js = self._insert(JobState(replace(job, id=jid, arrival_s=now), prep.index, now, owner=owner,
                                   ports=prep.ports, out_left=dict(prep.out_left),
                                   in_left=dict(prep.in_left), name=prep.job.id, bytes=size,
                                   guard_until_s=guard, unguaranteed=why))
        js.started.update(dict.fromkeys(prep.started, now))
        for nid in prep.done:
            self.mark_done(js, nid, now)
        return js

    def restore(self, job_map: dict, owner: str | None, submitted_s: float) -> JobState | Reject:
        """A journalled job back in the registry as submitted at ``submitted_s`` (daemon clock),
        checked against this daemon's cluster and limits as a submission would be.

        Raises
        ------
        ValidationError
            If the job map no longer describes a valid job on the cluster.
        """
        bad = check_job_map(job_map, self.config)
        if bad is not None:
            return bad
        job = parse_job(job_map, self.cluster, "journal.job")
        bad = check_job(job, self.config)
        if bad is not None:
            return bad
        if scoped_id(owner, job.id) in self.active:
            return Reject(ErrorCode.DUPLICATE_JOB, f"job {job.id!r} is journalled twice as running")
        return self._store(job, submitted_s, owner)

    def _store(self, job: Job, now: float, owner: str | None) -> JobState:
        # a journalled job comes back whatever the quotas say now: it was accepted
        name = job.id
        job = replace(job, id=scoped_id(owner, name), arrival_s=now)
        js = JobState(job, {n: i for i, n in enumerate(job.node_ids())}, now, owner=owner, name=name,
                      bytes=job_bytes(job))
        index = self.cluster.index
        for t in job.transfers:
            s, d = index(t.src), index(t.dst)
            js.ports[t.id] = (s, d)
            js.out_left[s] = js.out_left.get(s, 0) + 1
            js.in_left[d] = js.in_left.get(d, 0) + 1
        if job.job_class == "critical":  # admitted before: reserved again if its ports allow
            book = self.reservations
            d = book.admit(job.id, isolated_windows(job, book.planning_cluster(), book.options), now)
            if d.admitted:
                js.guard_until_s = d.start_s + d.target_s
        return self._insert(js)

    def _insert(self, js: JobState) -> JobState:
        jid = js.job.id
        # an ended job of the same id (the same client's) makes way: the new one is listed
        # at the end, in submission order (prune skips the old one's entry in ``ended``)
        old = self.jobs.pop(jid, None)
        if old is not None:
            self._forget(old)
        self._seq += 1
        js.seq = self._seq
        self.jobs[jid] = js
        self.active[jid] = js
        u = self.usage.setdefault(js.owner, Usage())
        u.running += 1
        u.bytes += js.bytes
        return js

    def withdraw(self, js: JobState) -> None:
        """Take back the job just admitted as ``js`` (its submission could not be recorded)."""
        jid = js.job.id
        self.active.pop(jid, None)
        if self.jobs.get(jid) is js:
            del self.jobs[jid]
        self.reservations.release(jid)  # a critical job taken back holds no capacity
        u = self.usage[js.owner]
        u.running -= 1
        u.bytes -= js.bytes

    def _forget(self, js: JobState) -> None:
        """Drop the ended job ``js`` (its entries in the ended queues are skipped later)."""
        js.forgotten = True
        if self.jobs.get(js.job.id) is js:
            del self.jobs[js.job.id]
        self.ended_bytes -= js.bytes
        self.usage[js.owner].bytes -= js.bytes
        self._forgotten.append(js)

    def _progress(self, job: Job, progress: object) -> tuple[list[str], list[str]] | Reject:
        """The nodes a resubmission says are done and the transfers it says started (a job
        runner whose daemon restarted without a journal sends them)."""
        if progress is None:
            return [], []
        if not isinstance(progress, dict) or set(progress) - {"done", "started"}:
            return Reject(ErrorCode.INVALID_BODY, "body.progress: expected a map of done and started")
        ids = set(job.node_ids())
        out = []
        for key in ("done", "started"):
            val = progress.get(key, [])
            if not isinstance(val, list) or not all(isinstance(n, str) for n in val):
                return Reject(ErrorCode.INVALID_BODY, f"body.progress.{key}: expected a list of node ids")
            for n in val:
                if n not in ids:
                    return Reject(ErrorCode.UNKNOWN_NODE, f"job {job.id!r} has no node {self._clip(n)!r}")
            out.append(list(dict.fromkeys(val)))
        return out[0], out[1]

    def is_transfer(self, js: JobState, nid: str) -> bool:
        """Whether node ``nid`` of ``js`` is a transfer (else a compute)."""
        return js.index[nid] >= len(js.job.computes)

    def mark_done(self, js: JobState, nid: str, t_s: float, measured_s: float | None = None) -> None:
        """Node ``nid`` ended at ``t_s`` (a resubmission's or the journal's progress); a
        compute's measured duration is ``measured_s`` if known."""
        if nid in js.done:
            return
        if self.is_transfer(js, nid):
            self.transfer_done(js, nid, t_s)
        else:
            js.done[nid] = t_s
            if measured_s is not None:
                js.measured_s[nid] = float(measured_s)

    def job(self, job_id: str, peer: str | None = None, now: float | None = None) -> JobState | Reject:
        """Client ``peer``'s job ``job_id`` (the id it chose), running or ended; another
        client's job of that id is not its (``peer`` None: the daemon has no keys, and
        every job is one anonymous client's). With ``now``, the request renews its lease."""
        js = self.jobs.get(scoped_id(peer, job_id))
        if js is None:
            return Reject(ErrorCode.UNKNOWN_JOB, f"no job {self._clip(job_id)!r}"
                          + (f" of client {peer!r}" if peer is not None else ""))
        if now is not None:
            js.heard_s = now
        return js

    def lapsed(self, now: float, lease_s: float) -> list[JobState]:
        """The running jobs whose client has not named them for more than ``lease_s`` at ``now``."""
        return [js for js in self.active.values()
                if now - (js.submitted_s if math.isnan(js.heard_s) else js.heard_s) > lease_s]

    def node(self, body: dict, key: str, kind: str, peer: str | None = None,
             now: float | None = None) -> tuple[JobState, str] | Reject:
        """The job of ``body["job_id"]`` (if ``peer`` may act on it) and its node
        ``body[key]``, which must be a ``kind`` (``"transfer"`` or ``"compute"``)."""
        js = self.job(body["job_id"], peer, now)
        if isinstance(js, Reject):
            return js
        nid = body[key]
        i = js.index.get(nid)
        n_comp = len(js.job.computes)
        if i is None or (kind == "transfer") != (i >= n_comp):
            return Reject(ErrorCode.UNKNOWN_NODE, f"job {js.name!r} has no {kind} {self._clip(nid)!r}")
        return js, nid

    def _clip(self, text: str) -> str:
        # an id that cannot exist is quoted only in part: the reply stays small
        n = self.config.max_id_chars
        return text if len(text) <= n else f"{text[:n]}...({len(text)} characters)"

    def transfer_done(self, js: JobState, nid: str, now: float) -> bool | None:
        """Record that transfer ``nid`` (not done before) arrived ``now``; returns whether it
        met its LAT (None: no LAT known)."""
        js.done[nid] = now
        src, dst = js.ports[nid]
        _count_down(js.out_left, src)
        _count_down(js.in_left, dst)
        lat = js.lat_s.get(nid)
        if lat is None:
            return None
        hit = now <= lat + self.config.slot_s  # the LP grid rounds deadlines up by < 1 slot
        if hit:
            js.lat_hits += 1
        else:
            js.lat_misses += 1
            self.lat_misses += 1
        return hit

    def compute_done(self, js: JobState, nid: str, duration_s: float, now: float) -> None:
        """Record that compute ``nid`` ended ``now`` after running ``duration_s`` seconds."""
        js.done.setdefault(nid, now)
        js.measured_s[nid] = float(duration_s)

    def end(self, js: JobState, state: str, now: float, error: str = "") -> None:
        """The running job ``js`` ends ``now`` as ``state`` (``finished``, ``cancelled``, or
        ``failed`` for ``error``)."""
        if state == "finished" and js.guard_until_s != -math.inf:
            js.met = js.guarantee(now, self.config.slot_s) == "on time"
            if js.met:
                self.critical_met += 1
            else:
                self.critical_missed += 1
        js.state = state
        js.error = error
        js.finished_s = now
        del self.active[js.job.id]
        self.reservations.release(js.job.id, now)
        self.ended.append(js)
        self.ended_bytes += js.bytes
        u = self.usage[js.owner]
        u.running -= 1
        u.ended.append(js)

    def at_risk(self) -> list[str]:
        """The running critical jobs reserved on more of a host than its agent can give, sorted ids."""
        return sorted(jid for jid, js in self.active.items() if js.at_risk)

    def overdue(self, now: float) -> list[str]:
        """The running critical jobs past their guarantee's deadline at ``now``, sorted ids."""
        return sorted(jid for jid, js in self.active.items()
                      if js.guarantee(now, self.config.slot_s) == "overdue")

    def prune(self, now: float) -> list[JobState]:
        """Drop the ended jobs older than ``ended_retention_s`` at ``now``, the oldest
        beyond ``max_ended_jobs`` and beyond ``max_ended_bytes``; returns them and those
        dropped since the last call to make room (the caller forgets their journal rows)."""
        keep_s, keep_n, keep_b = self.config.ended_retention_s, self.config.max_ended_jobs, self.config.max_ended_bytes
        ended = self.ended
        while ended and (ended[0].forgotten or len(ended) > keep_n or self.ended_bytes > keep_b
                         or ended[0].finished_s + keep_s <= now):
            js = ended.popleft()
            if not js.forgotten:
                self._forget(js)
        for u in self.usage.values():
            while u.ended and u.ended[0].forgotten:
                u.ended.popleft()
        out, self._forgotten = self._forgotten, []
        self.pruned += len(out)
        # the reservations of the jobs pruned here, once past (a job still listed keeps its
        # own: status and a run's figures read it)
        self.reservations.prune(now, keep=self.jobs)
        return out

    def page(self, after: int, limit: int) -> tuple[list[JobState], bool]:
        """Up to ``limit`` jobs submitted after seq ``after``, in submission order, and
        whether more follow."""
        out: list[JobState] = []
        jobs = self.jobs.values()
        if after > 0:
            # ids are in seq order; most pages start near the end of a short walk anyway
            it = (js for js in jobs if js.seq > after)
        else:
            it = iter(jobs)
        for js in it:
            if len(out) == limit:
                return out, True
            out.append(js)
        return out, False

    def record_lats(self, lat_s: dict[tuple[str, str], float]) -> None:
        """Keep the first planned LAT (seconds, daemon clock) of each (job, transfer)."""
        for (job, tid), lat in lat_s.items():
            js = self.jobs.get(job)
            if js is not None:
                js.lat_s.setdefault(tid, lat)


__all__ = ["JobRegistry", "JobState", "Prepared", "Usage", "bad_uid", "scoped_id"]
