"""The daemon's scheduler state: one owner of the job registry, agent table and plan book, no sockets."""

# One module although past 500 lines: SchedulerState is the one owner of the job
# registry, the agent table and the plan book, and each of its methods is one
# command of the wire protocol; the parts it owns live in modules of their own.

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from jitsched import tickets
from jitsched.config import ALLOW_LIST, DaemonConfig
from jitsched.daemon.agents import AgentState, AgentTable
from jitsched.daemon.background import BackgroundTable
from jitsched.daemon.bodies import host_bodies, restamp_frames, status_body
from jitsched.daemon.hosts import HostTable
from jitsched.daemon.jobs import JobRegistry, JobState, Prepared, bad_uid, scoped_id
from jitsched.daemon.journal import DONE, STARTED, JournalError, JournalFlow
from jitsched.daemon.logs import kv
from jitsched.daemon.plans import (
    MAX_EVENTS,
    PlanBook,
    PlanRequest,
    PlanResult,
    merge_schedules,
    prune_schedule,
)
from jitsched.daemon.reject import Reject
from jitsched.daemon.solver import build_view, run_increment, run_plan
from jitsched.daemon.store import Store, StoreError
from jitsched.daemon.templates import JOURNAL_EVERY, Template, TemplateBook
from jitsched.dag.model import Cluster, Host
from jitsched.errors import JitschedError
from jitsched.protocol import LEADER, SINGLE, ErrorCode, background_flow_id, report_bodies

log = logging.getLogger("jitsched.daemon")

# Progress reports of announced flows re-solve at most this often (seconds since the last
# full re-solve). Measured on the testbed with files reporting once a second: a re-solve
# on every report, 356 plans in a paper-mini run (7 s of solving) and quick's files 64.5
# Mbit/s; none on reports, 49 plans (2 s) but quick's files 59.4 (a file sending behind a
# VGG16 job never passed it).
PROGRESS_REPLAN_S = 1.0

# The journal's meta key that says its background rows are held by client-scoped names
# (scoped_id of owner and name); a journal without it may hold bare names.
BACKGROUND_NAMES = "background_names"


def _scoped_background_name(jf: JournalFlow) -> str:
    """The client-scoped name of a flow read from a journal that may hold bare names: a
    name that already starts with ``<owner>:`` is taken as scoped."""
    if jf.owner is None or jf.name.startswith(f"{jf.owner}:"):
        return jf.name
    return scoped_id(jf.owner, jf.name)


def _via(part: str, name: str) -> property:
    """An attribute of the facade that lives in one of its parts (read and write)."""
    return property(lambda self: getattr(getattr(self, part), name),
                    lambda self, value: setattr(getattr(self, part), name, value),
                    doc=f"``{part}.{name}``")


class SchedulerState:
    """Owns all daemon state. Methods take the daemon clock ``now`` (seconds) and return values.

    The facade the server dispatches to, composing three parts: the
    :class:`JobRegistry` (``job_registry``), the :class:`AgentTable`
    (``agent_table``) and the :class:`PlanBook` (``plan_book``, which says
    how planning works). Request handlers return a reply body (dict) or a
    :class:`Reject`; plans are asked for with :meth:`plan_requests` and
    adopted with :meth:`install`; agent-bound messages come from
    :meth:`outbox` and are acknowledged via :meth:`ack`.

    Handlers take the sender's name as ``peer``: the client or host whose key
    the message came with, or None when the daemon has no keys (then anyone
    may act on any job or host). A job answers only to the client that
    submitted it, and an agent registers only as its key's host.

    With a ``journal`` every submission, progress report and job end, and
    every announced background flow, is written to it before the handler
    returns, and the state starts from it: the daemon clock keeps the
    journal's origin, every job it holds as running is back, its progress
    with it, and every announced flow it holds, a full re-solve (``restart``)
    due at once. Each state draws a new random ``incarnation`` that every schedule
    body carries, so that agents tell its seqs from a previous daemon's.
    """

    def __init__(self, config: DaemonConfig, t0_wall_s: float | None = None,
                 journal: Store | None = None, epoch: int = 0) -> None:
        self.config = config
        self.cluster = config.cluster
        self.journal = journal
        self.journal_errors = 0  # writes that failed (a submission then fails; progress serves on)
        self.journal_last_error = ""
        self._next_lease_check_s = -math.inf  # daemon clock of the next scan for lapsed leases
        if journal is not None and t0_wall_s is None:
            # one daemon clock across restarts: journalled times stay valid as they are
            got = journal.get("t0_wall_s")
            t0_wall_s = float(got) if got is not None else None
        # the daemon clock counts seconds from here; agents get epochs in wall-clock ns
        self.t0_wall_s = time.time() if t0_wall_s is None else t0_wall_s
        self.incarnation = secrets.randbits(63) or 1  # fits sqlite's and msgpack's int64
        # signs attach tickets (jitsched.tickets); the server replaces it with one derived from
        # its CURVE key, which replicas and restarts sharing the key directory derive alike
        self.ticket_secret = tickets.daemon_secret()
        self.job_registry = JobRegistry(config)
        self.background = BackgroundTable(config)
        self.plan_book = PlanBook(config, self.job_registry, self.t0_wall_s, self.background)
        self.agent_table = AgentTable(config, self.t0_wall_s, self.plan_book.trigger)
        self.templates = TemplateBook(config)  # recurring jobs (daemon/templates.py)
        self.hosts = HostTable(config)  # hosts of the configuration, joined and left
        self._next_leave_check_s = -math.inf
        # called with the new config when hosts join (the server's own copy follows it)
        self.on_cluster: Callable[[DaemonConfig], None] = lambda cfg: None
        self.plan_book.incarnation = self.agent_table.incarnation = self.incarnation
        # the leader's epoch among daemon replicas (0: one daemon); every schedule carries it
        self.epoch = self.plan_book.epoch = self.agent_table.epoch = epoch
        self.restored: list[str] = []  # jobs resumed from the journal
        self.not_restored: list[tuple[str, str]] = []  # journalled jobs refused now, why
        # where full re-solves run, as the server last said: "process", "thread", or
        # "thread (child failed: why)"; status and metrics show it
        self.planner = "thread"
        self.quarantined: list[tuple[str, str]] = []  # jobs the last install marked failed, why
        # what the socket loop refused, dropped or closed, as the server last said (status
        # and metrics show it): counts by name
        self.loop: dict[str, int] = {}
        # each client's requests held and bytes in flight in the socket loop, as the server
        # last said: client name -> {"pending_requests", "bytes_in_flight"}
        self.client_inflight: dict[str, dict[str, int]] = {}
        if journal is not None:
            self._journal(journal.put, "t0_wall_s", repr(self.t0_wall_s))
            self._journal(journal.put, "incarnation", str(self.incarnation))
            self._restore(time.time() - self.t0_wall_s)

    jobs = _via("job_registry", "jobs")
    active = _via("job_registry", "active")
    lat_misses = _via("job_registry", "lat_misses")
    agents = _via("agent_table", "agents")
    host_seq = _via("agent_table", "host_seq")
    schedule = _via("plan_book", "schedule")
    schedule_seq = _via("plan_book", "schedule_seq")
    covered = _via("plan_book", "covered")
    plan_summary = _via("plan_book", "plan_summary")
    solve_times = _via("plan_book", "solve_times")
    n_plans = _via("plan_book", "n_plans")
    plans_by_mode = _via("plan_book", "plans_by_mode")
    incremental_ok = _via("plan_book", "incremental_ok")
    pending = _via("plan_book", "pending")
    removals = _via("plan_book", "removals")
    bulk = _via("plan_book", "bulk")
    reasons = _via("plan_book", "reasons")
    inflight = _via("plan_book", "inflight")
    plans_failed = _via("plan_book", "plans_failed")
    dirty_since = _via("plan_book", "dirty_since")

    @property
    def planning_seq(self) -> int:
        """The seq of a plan in flight (or of a full result awaiting its rebase), 0 if none."""
        return self.plan_book.planning_seq

    # ------------------------------------------------------------------ journal

    @property
    def journal_held(self) -> int:
        """Writes the store holds back until it can write them (etcd away): not yet durable."""
        return self.journal.held_writes if self.journal is not None else 0

    def _journal(self, write: Callable, *args) -> object:
        """One journal write, or None when it failed: logged, counted and shown in
        ``status`` and the metrics (``journal_errors``)."""
        try:
            return write(*args)
        except (sqlite3.Error, StoreError) as exc:
            self._journal_failed(exc)
            return None

    def _read(self, read: Callable, *args) -> object:
        """A read of the journal the restart's state is made from: a failure is raised (a
        :class:`StoreError` as it is, so that a replica resigns and tries again; sqlite's as
        :class:`JournalError`), never taken for an empty journal: a state built without the
        jobs, hosts or flows the read missed would serve without them, or end the jobs on
        hosts it forgot as failed."""
        try:
            return read(*args)
        except sqlite3.Error as exc:
            raise JournalError(f"the journal cannot be read back: {exc}") from None

    @contextlib.contextmanager
    def journal_turn(self) -> Iterator[None]:
        """A block whose progress events go to a store that holds batches
        (:attr:`jitsched.daemon.store.Store.holds_batches`) in one write as it ends; a write
        that fails is counted as :meth:`_journal` counts it."""
        if self.journal is None or not self.journal.holds_batches:
            yield
            return
        try:
            with self.journal.batch():
                yield
        except (sqlite3.Error, StoreError) as exc:
            self._journal_failed(exc)

    def _journal_failed(self, exc: BaseException) -> None:
        self.journal_errors += 1
        self.journal_last_error = str(exc)
        if self.journal_errors <= 10 or self.journal_errors % 1000 == 0:
            log.error(kv("journal_failed", error=str(exc), count=self.journal_errors))

    def _restore(self, now: float) -> None:
        """Take back every job the journal holds as running; a full re-solve is due at once."""
        assert self.journal is not None
        self._journal(self.journal.compact)
        self._restore_hosts(now)
        self._restore_shares()
        for jj in self._read(self.journal.unfinished):
            if jj.error:
                js = Reject(ErrorCode.INVALID_JOB, f"its journal row is unreadable: {jj.error}")
            else:
                try:
                    js = self.job_registry.restore(jj.job_map, jj.owner, jj.submitted_s)
                except JitschedError as exc:
                    js = Reject(ErrorCode.INVALID_JOB, str(exc))
            if isinstance(js, Reject):
                # the daemon's cluster or limits changed under it: it ends here, said why
                jid = str(jj.job_map.get("id", "?")) if isinstance(jj.job_map, dict) else "?"
                self.not_restored.append((jid, js.message))
                self._journal(self.journal.ended, jj.row, "failed", now, None,
                              f"not resumed after a restart: {js.message}")
                continue
            js.journal_row = jj.row
            jid = js.job.id
            js.started.update(jj.started)
            self.plan_book.policy_event("arrival", jid, "")
            for nid, t in sorted(jj.done.items(), key=lambda kv_: kv_[1]):
                if nid in js.index:
                    self.job_registry.mark_done(js, nid, t, jj.measured_s.get(nid))
                    self.plan_book.policy_event("node_done", jid, nid)
            js.heard_s = now  # its client had no daemon to talk to: a full lease from now
            self.restored.append(jid)
        rows = self._read(self.journal.templates)
        for jid in self.restored:
            js = self.job_registry.jobs[jid]
            got = rows.get(js.journal_row)
            if got is not None:
                self.templates.restore(js, got[0], got[1], now)
        gone = []
        scoped = self._read(self.journal.get, BACKGROUND_NAMES) == "scoped"
        for jf in self._read(self.journal.background):
            name = jf.name if scoped else _scoped_background_name(jf)
            body = {"flow": name, "src": jf.src, "dst": jf.dst, "bytes": jf.bytes, "left": jf.left}
            got = self.background.restore(body, jf.owner, jf.started_s, jf.seen_s)
            if isinstance(got, Reject):
                gone.append(jf.name)
                log.warning(kv("background_not_restored", flow=name, error=got.message))
            elif name != jf.name:
                # a flow held by the bare name it was announced with: its row moves to the
                # scoped name its owner's background_finished now finds
                gone.append(jf.name)
                self._journal(self.journal.background_held, replace(jf, name=name))
                log.info(kv("background_renamed", flow=jf.name, to=name))
        if gone:
            self._journal(self.journal.background_gone, gone)
        if not scoped:
            self._journal(self.journal.put, BACKGROUND_NAMES, "scoped")
        if self.restored or self.background.counts["restored"]:
            self.plan_book.trigger("restart", now)

    def _restore_hosts(self, now: float) -> None:
        """Take back the hosts that had joined: their jobs resume, and each leaves again if
        its agent does not register within ``host_leave_s``."""
        got = self._read(self.journal.get, "joined_hosts") if self.journal is not None else None
        try:
            rows = json.loads(got) if got else []
            hosts = [Host(str(r["name"]), float(r["egress_bps"]), float(r["ingress_bps"]), r.get("address"))
                     for r in rows]
        except (ValueError, TypeError, KeyError) as exc:
            log.error(kv("joined_hosts_unreadable", error=str(exc)))
            return
        cluster = self.cluster
        for h in hosts:
            if h.name not in self.hosts.initial and self.config.host_join != ALLOW_LIST:
                cluster = cluster.with_host(h)
                self.hosts.joined(h.name, now)
        if cluster is not self.cluster:
            self._set_cluster(cluster)

    def _restore_shares(self) -> None:
        """Take back the share of each port its agent last registered it could give reserved
        flows, and the share of the line a flow's payload takes there (the caps count the
        reserved rates on the wire with it)."""
        book = self.job_registry.reservations
        for key, into in (("reservable_shares", book.shares), ("payload_shares", book.payloads)):
            got = self._read(self.journal.get, key) if self.journal is not None else None
            try:
                rows = {str(h): float(v) for h, v in (json.loads(got) if got else {}).items()}
            except (ValueError, TypeError, AttributeError) as exc:
                log.error(kv(f"{key}_unreadable", error=str(exc)))
                continue
            into.update({h: v for h, v in rows.items() if 0.0 < v <= 1.0})

    def _set_cluster(self, cluster: Cluster) -> None:
        """Plan on ``cluster`` from now on: hosts joined or registered new capacities
        (appended, or in place; no host's index changes)."""
        cfg = self.config = self.config.with_(cluster=cluster)
        self.cluster = cluster
        for part in (self.job_registry, self.background, self.plan_book, self.agent_table, self.templates):
            part.config = cfg
            if hasattr(part, "cluster"):
                part.cluster = cluster
        self.hosts.config = cfg
        self.job_registry.reservations.cluster = cluster
        self.agent_table.capacity.fit(cluster)
        self.plan_book.fit_cluster()
        if self.journal is not None:
            joined = [h for h in cluster.to_dict()["hosts"] if h["name"] not in self.hosts.initial]
            self._journal(self.journal.put, "joined_hosts", json.dumps(joined))
        self.on_cluster(cfg)

    def _host_left(self, host: str, now: float, why: str) -> None:
        """``host`` leaves the cluster: its agent is forgotten, the running jobs with work left
        on it end failed, announced flows to or from it are dropped, the rest re-planned."""
        if not self.hosts.left(host, now, why):
            return
        log.warning(kv("host_left", host=host, why=why))
        self.job_registry.absent = self.hosts.absent
        self.agent_table.forget(host)
        for js in list(self.job_registry.active.values()):
            job, done = js.job, js.done
            if any(c.host == host and c.id not in done for c in job.computes) or \
                    any(host in (t.src, t.dst) and t.id not in done for t in job.transfers):
                self._end(js, "failed", now, f"host {host!r} left the cluster ({why})")
        gone = self.background.drop_host(self.cluster.index(host))
        if gone and self.journal is not None:
            self._journal(self.journal.background_gone, gone)
        self.plan_book.trigger("host_left", now)

    def _record(self, js: JobState, nid: str, kind: str, now: float, measured_s: float | None = None) -> None:
        if self.journal is not None and js.journal_row:
            self._journal(self.journal.event, js.journal_row, nid, kind, now, measured_s)

    # ------------------------------------------------------------------ jobs

    def submit_job(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Validate and store a job owned by ``peer``; returns ``{"job_id"}`` and triggers a plan.

        A resubmission may say which nodes are done and which transfers started
        (``progress``): a job runner whose daemon restarted without a journal.
        """
        js = self.job_registry.submit(body, now, peer)
        return js if isinstance(js, Reject) else self._submitted(js, body, now)

    def submit_prepared(self, prep: Prepared | Reject, body: dict, now: float,
                        peer: str | None = None) -> dict | Reject:
        """:meth:`submit_job` of a body already checked and parsed by
        :meth:`JobRegistry.prepare` (on a worker thread, for a big body)."""
        if isinstance(prep, Reject):
            return prep
        js = self.job_registry.admit(prep, now, peer)
        return js if isinstance(js, Reject) else self._submitted(js, body, now)

    def _submitted(self, js: JobState, body: dict, now: float) -> dict | Reject:
        if self.journal is not None:
            js.journal_row = self._journal(self.journal.submitted, js.job.id, body["job"], js.owner, now) or 0
            if not js.journal_row:
                # a job acknowledged is a job a restarted daemon resumes: not written, not taken
                self.job_registry.withdraw(js)
                return Reject(ErrorCode.UNAVAILABLE, f"the daemon's journal cannot be written "
                                                     f"({self.journal_last_error}); the job was not taken")
            for nid in js.started:
                self._record(js, nid, STARTED, now)
            for nid in js.done:
                self._record(js, nid, DONE, now)
        self.plan_book.arrived(js.job.id, now)
        for nid in js.done:
            self.plan_book.policy_event("node_done", js.job.id, nid)
        # the client names the job by its own id; with keys, its flows' ids (agents,
        # schedules) start with the scoped one (jobs.scoped_id), given as flow_job
        reply = {"job_id": js.name} | ({"flow_job": js.job.id} if js.job.id != js.name else {})
        if js.job.job_class != "normal" or body["job"].get("class", "normal") != "normal":
            # the class it runs in; a critical job admitted as normal (if_unguaranteed) learns so
            reply["class"] = js.job.job_class
        if js.unguaranteed is not None:  # why it is not critical: the port and the start it could have
            reply["unguaranteed"] = js.unguaranteed
        if "uid" in body:
            # the submitter owns the job: the tickets its runner registers the job's sockets
            # with, one per host of its transfers, come with this reply (no round trip more)
            hosts = {t.src for t in js.job.transfers} | {t.dst for t in js.job.transfers}
            reply["tickets"] = self._tickets(js.job.id, hosts, body["uid"], now)
            reply["ticket_s"] = self.config.attach_ticket_s
        return reply

    def _tickets(self, name: str, hosts, uid: int, now: float) -> dict[str, dict]:
        """``{host: ticket}`` letting local user ``uid`` name ``name`` (a job's id or a
        background flow's) to the agent of each of ``hosts`` until ``attach_ticket_s``
        from ``now``."""
        expires_ns = int((self.t0_wall_s + now + self.config.attach_ticket_s) * 1e9)
        return {h: tickets.issue(self.ticket_secret, name, h, uid, expires_ns) for h in sorted(hosts)}

    def transfer_started(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Record that a transfer started sending."""
        got = self.job_registry.node(body, "transfer", "transfer", peer, now)
        if isinstance(got, Reject):
            return got
        js, nid = got
        if nid not in js.started:
            js.started[nid] = now
            self._record(js, nid, STARTED, now)
        return {}

    def transfer_finished(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Record a transfer's arrival; checks it against its LAT and the plan (drift)."""
        got = self.job_registry.node(body, "transfer", "transfer", peer, now)
        if isinstance(got, Reject):
            return got
        js, nid = got
        if nid in js.done:
            return {"lat_hit": None}
        hit = self.job_registry.transfer_done(js, nid, now)
        self._record(js, nid, DONE, now)
        self.plan_book.transfer_done(js, nid, now)
        return {"lat_hit": hit}

    def compute_finished(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Record a compute's completion and its measured duration (seconds)."""
        got = self.job_registry.node(body, "compute", "compute", peer, now)
        if isinstance(got, Reject):
            return got
        js, nid = got
        if body["duration_s"] < 0:
            return Reject(ErrorCode.INVALID_BODY, "body.duration_s: must be >= 0")
        first = nid not in js.done
        self.job_registry.compute_done(js, nid, body["duration_s"], now)
        if first:
            self._record(js, nid, DONE, now, float(body["duration_s"]))
        self.plan_book.policy_event("node_done", js.job.id, nid)
        return {}

    def report(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """A job's progress reports in one message, applied in order (see ``report`` in the protocol).

        Returns ``{"results": [...]}``, each event's reply as its own message
        would have had it. The first event refused ends the batch with its
        rejection (``events[i]: ...``); those before it stay applied, and each
        report is idempotent, so the sender may send the whole batch again.
        """
        results: list = []
        refused = None
        # the events' journal writes go together as the batch ends, before the reply
        batch = self.journal.batch() if self.journal is not None else contextlib.nullcontext()
        try:
            with batch:
                for i, (type_, one) in enumerate(report_bodies(body)):
                    got = getattr(self, type_)(one, now, peer=peer)
                    if isinstance(got, Reject):
                        refused = Reject(got.code, f"events[{i}]: {got.message}")
                        break
                    results.append(got)
        except (sqlite3.Error, StoreError) as exc:
            self._journal_failed(exc)
        return refused if refused is not None else {"results": results}

    def job_finished(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Mark a job finished; its JCT is ``jct_s`` if given, else measured by the daemon. A
        critical job's reply says whether it finished within its guarantee (``guarantee``:
        ``met`` or ``missed``, :meth:`jitsched.daemon.jobs.JobState.guarantee`)."""
        js = self.job_registry.job(body["job_id"], peer, now)
        if isinstance(js, Reject):
            return js
        if js.active:
            js.jct_s = float(body.get("jct_s", now - js.submitted_s))
            self._end(js, "finished", now)
        verdict = js.guarantee(now, self.config.slot_s)
        return {"jct_s": js.jct_s} | ({"guarantee": verdict} if verdict is not None else {})

    def renew_lease(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Renew the leases of the sender's running jobs ``body["job_ids"]``; returns
        ``{"renewed": n, "not_running": [ids]}`` (unknown or ended: the client should stop)."""
        ids = body["job_ids"]
        if len(ids) > self.config.max_jobs or not all(isinstance(i, str) for i in ids):
            return Reject(ErrorCode.INVALID_BODY, f"body.job_ids: at most {self.config.max_jobs} job ids (strings)")
        renewed, gone = 0, []
        for jid in ids:
            js = self.job_registry.job(jid, peer, now)
            if isinstance(js, Reject) or not js.active:
                gone.append(jid)
            else:
                renewed += 1
        return {"renewed": renewed, "not_running": gone}

    def expire_leases(self, now: float) -> list[str]:
        """End as ``abandoned`` the running jobs whose lease lapsed at ``now``; returns their ids."""
        lease = self.config.job_lease_s
        # a scan of every running job, at most a tenth of a lease (and a second) apart: a
        # lease lapses that much late at most, and the 50-ms housekeeping tick stays cheap
        if not math.isfinite(lease) or now < self._next_lease_check_s:
            return []
        self._next_lease_check_s = now + min(1.0, lease / 10.0)
        out = []
        for js in self.job_registry.lapsed(now, lease):
            self._end(js, "abandoned", now, f"no request from its client for {lease:g} s ([daemon] job_lease_s)")
            out.append(js.job.id)
        return out

    def cancel_job(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Cancel a running job: its transfers leave the plan."""
        js = self.job_registry.job(body["job_id"], peer, now)
        if isinstance(js, Reject):
            return js
        if js.active:
            self._end(js, "cancelled", now)
        return {"state": js.state}

    def register_template(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Register a recurring job's DAG once: a job (admitted and journalled as a submission
        is) whose iterations :meth:`iteration` counts; returns ``{"job_id"}``."""
        js = self.job_registry.submit(body, now, peer)
        if isinstance(js, Reject):
            return js
        t = self.templates.register(js, now)
        reply = self._submitted(js, body, now)
        if isinstance(reply, Reject):  # not journalled: not taken
            self.templates.forget(js.job.id)
            return reply
        if self.journal is not None and js.journal_row:
            self._journal(self.journal.template, js.journal_row, 0, None)
            # each job's writes every JOURNAL_EVERY iterations at a phase of its own: jobs
            # started together do not all write at the same iteration
            t.journalled_at = -(js.journal_row % JOURNAL_EVERY)
        return reply

    def iteration(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Iteration ``n`` of a recurring job ended, with what it measured (see the protocol).

        O(1) when the plan depends on nothing that changed: the job's
        transfers stay ranked as they are; its per-node progress, if it
        reported any, is reset for the next iteration. Returns ``{"n",
        "counted", "ranked", "seq"}``: ``ranked`` says the schedule in force
        (``seq``) covers the job.
        """
        js = self.job_registry.job(body["job_id"], peer, now)
        if isinstance(js, Reject):
            if js.code == ErrorCode.UNKNOWN_JOB and scoped_id(peer, body["job_id"]) in self.templates.ended:
                return Reject(ErrorCode.JOB_ENDED, f"body.job_id: recurring job {body['job_id']!r} ended")
            return js
        t = self.templates.get(js.job.id)
        if t is None:
            return Reject(ErrorCode.UNKNOWN_JOB, f"body.job_id: job {js.job.id!r} is no recurring job "
                          "(register it with register_template)")
        if not js.active:
            return Reject(ErrorCode.JOB_ENDED, f"body.job_id: recurring job {js.job.id!r} {js.state}")
        got = self.templates.iteration(js, t, body, now)
        if isinstance(got, Reject):
            return got
        counted, replan = got
        if counted:
            if self.templates.reset_progress(js, t):
                replan = True
            if replan:
                self.plan_book.trigger("iteration", now)
            if self.journal is not None and js.journal_row and (
                    t.iterations - t.journalled_at >= JOURNAL_EVERY or replan):
                self._journal_template(js, t)
        return {"n": t.iterations, "counted": counted, "ranked": js.job.id in self.plan_book.covered,
                "seq": self.plan_book.schedule_seq}

    def flush_iterations(self) -> int:
        """Journal each recurring job's iteration count and learned statistics where they moved
        since they were last journalled (a clean stop: the next start resumes them exactly);
        returns how many jobs' were written (a failed write is a journal error, as any is)."""
        n = 0
        if self.journal is None:
            return n
        for jid, t in self.templates.templates.items():
            js = self.job_registry.jobs.get(jid)
            if js is not None and js.active and js.journal_row and t.iterations > t.journalled_at:
                self._journal_template(js, t)
                n += 1
        self.flush_journal()
        return n

    def _journal_template(self, js: JobState, t: Template) -> None:
        """Journal recurring job ``js``'s count and learned statistics as they are now; no
        reply promises them, so they may go with the loop turn's other writes."""
        t.journalled_at = t.iterations
        self._journal(functools.partial(self.journal.template, later=True), js.journal_row,
                      t.iterations, t.state())

    def flush_journal(self) -> None:
        """Write what the journal was allowed to hold back (once a loop turn)."""
        if self.journal is not None:
            self._journal(self.journal.flush)

    def _end(self, js: JobState, state: str, now: float, error: str = "") -> None:
        self.job_registry.end(js, state, now, error)
        if self.journal is not None and js.journal_row:
            jct = None if math.isnan(js.jct_s) else js.jct_s
            self._journal(self.journal.ended, js.journal_row, state, now, jct, error)
        self.plan_book.job_ended(js.job.id, state, now)

    # ------------------------------------------------------------------ background

    def background_started(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Hold an announced background flow, or take its progress report (journalled: a
        restarted daemon holds it again, with the bytes it last said it had left).

        With keys, the reply says ``flow_id``, the id its agents know it by
        (:func:`jitsched.protocol.background_flow_id` of the client-scoped name; without
        keys, of the name itself, and the reply leaves it out); with
        ``uid`` (the local user that will register its socket), also ``tickets``,
        ``{host: ticket}`` for its source and destination, each for that flow id
        (:func:`jitsched.tickets.issue` with ``job`` the flow id), valid ``ticket_s``."""
        if (bad := bad_uid(body)) is not None:
            return bad
        before = self.background.flows.get(scoped_id(peer, body["flow"]))
        got = self.background.start(body, now, peer)
        if isinstance(got, Reject):
            return got
        if self.journal is not None:
            self._journal(self.journal.background_held, JournalFlow(
                got.name, body["src"], body["dst"], got.bytes, got.left, got.owner, got.started_s, got.seen_s))
        if before is None or (before.src, before.dst, before.bytes) != (got.src, got.dst, got.bytes):
            self.plan_book.trigger("background", now)
        elif now - self.plan_book.last_plan_s >= PROGRESS_REPLAN_S:
            # a progress report (fewer bytes left): a flow that sends behind others (in what
            # they leave) shrinks its key past theirs, which only a re-solve shows
            self.plan_book.trigger("progress", now)
        fid = background_flow_id(got.name)
        # with keys the agents know it by its client-scoped name, given as flow_id (as a
        # submission's flow_job); without, by background_flow_id of the name it was given
        reply: dict = {"flows": len(self.background.flows)} | ({"flow_id": fid} if got.name != body["flow"] else {})
        if "uid" in body:
            # the announcer owns the flow: a ticket per host that registers its socket (the
            # sender's agent, and the receiver's if it registers the inbound side), for the
            # flow id itself ("/<client>:<name>" with keys, while a job's ids start with
            # "<client>:": one client's ticket names none of another's flows, nor any job)
            reply["tickets"] = self._tickets(fid, {body["src"], body["dst"]}, body["uid"], now)
            reply["ticket_s"] = self.config.attach_ticket_s
        return reply

    def background_finished(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """An announced background flow ended; ``held`` says whether the daemon still had it."""
        got = self.background.finish(body, peer)
        if isinstance(got, Reject):
            return got
        if got:
            if self.journal is not None:
                self._journal(self.journal.background_gone, [scoped_id(peer, body["flow"])])
            self.plan_book.trigger("background", now)
        return {"held": got}

    def attach_job(self, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Whether client ``peer`` may attach job ``job_id``'s connections on ``host``: the job
        is its own and running, the host is in the cluster. Returns the addresses the cluster
        gives the job's hosts, ``{"peers": {address: host}}``, for the agent to name peers by,
        and the job's hosts, ``"hosts"`` (sorted names). With ``uid`` (the local user that
        will ask the agent), also ``"ticket"``: the agent attaches nothing without it
        (:func:`jitsched.tickets.issue`, valid ``attach_ticket_s``)."""
        js = self.job_registry.job(body["job_id"], peer, now)
        if isinstance(js, Reject):
            return js
        if not js.active:
            return Reject(ErrorCode.UNKNOWN_JOB, f"job {js.job.id!r} is {js.state}: nothing to attach")
        cluster = self.config.cluster
        if body["host"] not in cluster:
            return Reject(ErrorCode.UNKNOWN_HOST, f"host {body['host']!r} is not in the cluster")
        names = {t.src for t in js.job.transfers} | {t.dst for t in js.job.transfers}
        peers = {h.address: h.name for h in cluster.hosts if h.name in names and h.address}
        reply = {"job_id": js.job.id, "host": body["host"], "peers": peers, "hosts": sorted(names)}
        if "uid" in body:
            if (bad := bad_uid(body)) is not None:
                return bad
            reply["ticket"] = self._tickets(js.job.id, {body["host"]}, body["uid"], now)[body["host"]]
        return reply

    def status(self, body: dict, now: float) -> dict | Reject:
        """Jobs, agents and a summary of the last plan; the jobs a page at a time.

        ``body["after"]`` (default 0) lists the jobs submitted after that
        ``seq``, at most ``body["limit"]`` of them (default and most:
        ``status_page_jobs``); the reply's ``next_after`` is the cursor of the
        next page, None on the last.
        """
        if body.get("replica"):
            return self.replica_status()
        after, limit = body.get("after", 0), body.get("limit", self.config.status_page_jobs)
        if after < 0 or limit < 1:
            return Reject(ErrorCode.INVALID_BODY, "body.after: must be >= 0, body.limit: must be >= 1")
        out = status_body(self.job_registry, self.agent_table, self.plan_book, self.background, self.config,
                          self.planner, now, after=after, limit=min(limit, self.config.status_page_jobs),
                          loop=self.loop, inflight=self.client_inflight)
        out["role"] = self.role
        # the hosts the critical jobs hold now (the agents cap traffic into them), and those of
        # them with no address in the cluster: no agent can match their traffic
        caps = [(self.cluster.hosts[h], cap) for h, _, cap in self.plan_book.held_hosts() if h < len(self.cluster)]
        held = [x for x, _ in caps]
        out["critical"] = {"epsilon": self.config.critical_epsilon, "reserved": len(self.job_registry.reservations.held),
                           "refused": self.job_registry.critical_refused,
                           "admitted_as_normal": self.job_registry.critical_demoted,
                           "met": self.job_registry.critical_met, "missed": self.job_registry.critical_missed,
                           "overdue": self.job_registry.overdue(now), "at_risk": self.job_registry.at_risk(),
                           "hosts_held": len(held), "hosts_unaddressed": [x.name for x in held if not x.address],
                           # what every other agent holds its unranked traffic into each held host to
                           "caps_Bps": {x.name: float(cap) for x, cap in caps if x.address}
                           if self.config.critical_caps else {},
                           # the share of a held host's ports its agent keeps for unranked traffic
                           # (None: each agent's own floor)
                           "floor": self.config.critical_floor}
        out["journal_errors"] = self.journal_errors
        out["journal_last_error"] = self.journal_last_error
        out["journal_held"] = self.journal_held
        out["jobs_not_resumed"] = dict(self.not_restored[:50])
        out["hosts"] = self.hosts.summary(self.cluster)
        for jid, entry in out["jobs"].items():
            t = self.templates.get(jid)
            if t is not None:
                entry["recurring"] = t.summary()
        return out

    @property
    def role(self) -> str:
        """``leader`` with an epoch (a replica elected on etcd), else ``single``."""
        return LEADER if self.epoch else SINGLE

    def replica_status(self) -> dict:
        """This process's role among replicas (``single`` without etcd) and its epoch, in the
        shape a follower's answer has (:meth:`jitsched.daemon.replica.Follower.status`)."""
        cfg = self.config
        return {"role": self.role, "epoch": self.epoch,
                "leader": {"job_endpoint": cfg.job_endpoint, "agent_endpoint": cfg.agent_endpoint,
                           "epoch": self.epoch},
                "etcd_error": "", "jobs_running": len(self.job_registry.active),
                "agents_up": sum(1 for a in self.agent_table.agents.values() if a.up)}

    def prune(self, now: float) -> int:
        """Forget the ended jobs past their retention (``ended_retention_s``, ``max_ended_jobs``)
        at ``now``, in the journal too; returns how many."""
        expired = self.background.expire(now)
        if expired:
            if self.journal is not None:
                self._journal(self.journal.background_gone, expired)
            self.plan_book.trigger("background", now)
        gone = self.job_registry.prune(now)
        for js in gone:
            if self.job_registry.jobs.get(js.job.id) is None:
                self.templates.forget(js.job.id, ended=True)
        if gone and self.journal is not None:
            rows = [js.journal_row for js in gone if js.journal_row]
            if rows:
                self._journal(self.journal.forget, rows)
        return len(gone)

    # ------------------------------------------------------------------ agents

    def register(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Register (or re-register) the agent of ``body["host"]``; it gets the current schedule.

        A host not in the cluster joins with the capacities it registers (unless
        ``host_join`` is ``allow-list``), and one that left comes back: a full re-solve
        is due (``host_joined``).
        """
        host = body["host"]
        got = self.hosts.admit(self.cluster, body, now, peer)
        if not isinstance(got, Reject):
            got = self.agent_table.admissible(identity, body, now, peer, joining=got is not None) or got
        if isinstance(got, Reject):
            self.agent_table.counts["registrations_refused"] += 1
            return got
        if got is not None:
            self._set_cluster(got)
        back = host in self.hosts.absent or host not in self.hosts.members
        reply = self.agent_table.register(identity, body, now, peer)
        # the key the agent checks attach tickets with (its host's only), on the channel only
        # that host's key may register on
        if isinstance(reply, dict):
            reply["ticket_key"] = tickets.host_key(self.ticket_secret, host).hex()
        # critical jobs admitted from now on are reserved on what the agent can give them;
        # the journal keeps it, so that a restarted daemon reserves its critical jobs again on
        # it before their agents register
        book = self.job_registry.reservations
        agent = self.agent_table.agents[host]
        if book.payloads.get(host) != agent.payload_share:
            book.payloads[host] = agent.payload_share  # reserved rates on the wire (the caps)
            if self.journal is not None:
                self._journal(self.journal.put, "payload_shares", json.dumps(book.payloads))
        share, was = agent.reservable_with(self.config.critical_floor), book.share(host)
        if share != was:
            book.shares[host] = share
            if self.journal is not None:
                self._journal(self.journal.put, "reservable_shares", json.dumps(book.shares))
            self._check_at_risk(host, share, was, now)
        if got is not None or back:
            self.hosts.joined(host, now)
            self.job_registry.absent = self.hosts.absent
            log.info(kv("host_joined", host=host, hosts=len(self.cluster) - len(self.hosts.absent)))
            self.plan_book.trigger("host_joined", now)
        return reply

    def _check_at_risk(self, host: str, share: float, was: float, now: float) -> None:
        """Host ``host``'s agent can now give reserved flows ``share`` of its ports, not ``was``.
        Each running critical job whose reservation there takes more than that is reserved
        again from now on what is free (the rest of its windows); one that does not fit
        keeps its reservation and is at risk (status, metrics). Those it had put at risk that
        fit now are not. The jobs admitted from now on are reserved on the new share."""
        book = self.job_registry.reservations
        over = book.overbooked(host, now)
        refitted = []
        for jid in over:
            js = self.job_registry.active.get(jid)
            if js is not None and book.refit(jid, now, js.done):
                refitted.append(jid)
        if refitted:
            log.info(kv("critical_reserved_again", jobs=",".join(refitted), host=host, share=share))
            self.plan_book.trigger("reserved", now)  # the agents get the new reserved rates
            over = book.overbooked(host, now)
        for jid, js in self.job_registry.active.items():
            if jid in over and host not in js.at_risk:
                js.at_risk[host] = (f"reserved on more than the {share:.3g} of host {host}'s ports its "
                                    f"agent can give (payload share less its background floor)")
                log.warning(kv("critical_at_risk", job=jid, host=host, share=share, was=was))
            elif jid not in over and js.at_risk.pop(host, None) is not None:
                log.info(kv("critical_not_at_risk", job=jid, host=host, share=share))

    def leave(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """The registered agent of ``body["host"]`` says its host leaves the cluster."""
        a = self.agent_table.registered(identity, body, peer)
        if isinstance(a, Reject):
            return a
        self._host_left(a.host, now, "its agent said it leaves")
        return {"left": True}

    def heartbeat(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """Liveness plus measured rates (bytes/s) from an agent."""
        return self.agent_table.heartbeat(identity, body, now, peer)

    def ack(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """An agent confirms it holds schedule ``seq``."""
        return self.agent_table.ack(identity, body, now, peer)

    def get_schedule(self, identity: bytes, body: dict, now: float, peer: str | None = None) -> dict | Reject:
        """The current schedule body of the asking agent's host (empty if none yet)."""
        return self.agent_table.get_schedule(identity, body, now, peer)

    def check_agents(self, now: float) -> list[str]:
        """Mark agents silent for longer than the heartbeat timeout as down; return them.

        Joined hosts whose agent has been silent ``host_leave_s`` leave the cluster
        (looked at once a second).
        """
        down = self.agent_table.check(now)
        if len(self.hosts.members) > len(self.hosts.initial) and now >= self._next_leave_check_s:
            self._next_leave_check_s = now + 1.0
            agents = self.agent_table.agents
            since = {h: a.last_seen_s for h, a in agents.items() if not a.up}
            since |= {h: m.joined_s for h, m in self.hosts.members.items() if h not in agents}
            for h in self.hosts.overdue(since, now):
                self._host_left(h, now, f"its agent was silent for {self.config.host_leave_s:g} s "
                                        "([daemon] host_leave_s)")
        return down

    def outbox(self, now: float) -> list[tuple[AgentState, bytes]]:
        """Packed schedule bodies to (re-)send: to every up agent whose ack of its body is overdue."""
        return self.agent_table.outbox(now)

    def host_body(self, host: str) -> dict:
        """The schedule message body for ``host`` (idempotent by ``seq``)."""
        return self.agent_table.host_body(host)

    # ------------------------------------------------------------------ planning

    def want_plan(self, now: float) -> bool:
        """Whether a full re-solve is due (a trigger fired, coalescing elapsed, none in flight)."""
        return self.plan_book.want_plan(now)

    def plan_requests(self, now: float) -> list[PlanRequest]:
        """The plans to start now: at most one incremental and one full re-solve in flight
        (recurring jobs with the estimates learned so far)."""
        return self._live(self._learned(self.plan_book.plan_requests(now)))

    def plan_request(self, now: float) -> PlanRequest:
        """Snapshot every active job and pending event for a full re-solve; clears its triggers."""
        return self._live(self._learned([self.plan_book.plan_request(now)]))[0]

    def _live(self, reqs: list[PlanRequest]) -> list[PlanRequest]:
        """``reqs`` planning on the ports' live capacity where it is below their line rate."""
        capacity = self.agent_table.capacity.arrays()
        return reqs if capacity is None else [replace(r, capacity=capacity) for r in reqs]

    def _learned(self, reqs: list[PlanRequest]) -> list[PlanRequest]:
        """``reqs`` with every recurring job whose estimates moved rebuilt with them."""
        stale = self.templates.stale
        if not reqs or not stale:
            return reqs
        for jid in list(stale):
            js = self.job_registry.active.get(jid)
            if js is None:
                stale.discard(jid)
            else:
                self.templates.refresh(js)
        fresh = self.job_registry.active
        return [replace(r, jobs=tuple((fresh[j.id].job if j.id in fresh else j, d, rem) for j, d, rem in r.jobs))
                for r in reqs]

    def install(self, res: PlanResult, now: float) -> bool:
        """Adopt a finished plan; returns False when it failed (the schedule in force stays).

        Jobs the plan shows cannot be planned leave planning first, marked
        ``failed`` (listed in :attr:`quarantined` until the next install).
        """
        self.quarantined = list(self.plan_book.culprits(res).items())
        for jid, why in self.quarantined:
            self._end(self.job_registry.jobs[jid], "failed", now, why)
        self.job_registry.record_lats(res.lat_s)
        return self.plan_book.install(res, now, self._adopt)

    def _adopt(self, res: PlanResult, now: float) -> None:
        """Make ``res`` the schedule in force and queue its changed bodies for their agents.

        A result requested before the schedule in force (a full re-solve that an
        incremental plan overtook) goes out under a new seq, above every seq sent:
        an agent installs rising seqs only, and acks of the newer body must stay
        valid.
        """
        if res.seq <= self.plan_book.schedule_seq:
            res.seq = self.plan_book.next_seq()
            res.frames = restamp_frames(res.frames, res.seq)
        sent = self.agent_table.publish(res.frames, res.seq)
        self.plan_book.adopt(res, now, self.agent_table.down())
        # hosts_changed counts the bodies the plan built; a joint re-solve of the default
        # jit builds every busy host's and sends only those whose ranks changed
        self.plan_book.plan_summary["hosts_sent"] = sent


# Importable from here as before the split (tests and benches use these names).
__all__ = ["MAX_EVENTS", "AgentState", "JobState", "PlanRequest", "PlanResult", "Reject",
           "SchedulerState", "build_view", "host_bodies", "merge_schedules", "prune_schedule",
           "run_increment", "run_plan"]
