"""The bodies of the daemon's messages: per-host schedule bodies and the status reply."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from jitsched.config import ANONYMOUS, KEYS, DaemonConfig
from jitsched.dag.model import Cluster
from jitsched.policies.base import SlotSchedule
from jitsched.protocol import cap_entry, floor_entry, flow_entry, flow_id, pack_body, unpack_body

# A status page stops adding jobs past about this many bytes of them (a page of
# status_page_jobs jobs with 256-character ids would be ~400 kB): the whole reply,
# agents and solve times included, stays under 1 MB for clusters up to ~2000 hosts.
STATUS_PAGE_BYTES = 512 * 1024
STATUS_SOLVE_TIMES = 1000  # the newest solve times a status reply carries
# A cap on traffic into a critical job's host holds from the first slot its reserved
# transfers into or out of that host start until they have all arrived: the daemon then
# sends bodies without it. The job may run behind its reservation, so the cap has no end of
# its own; this one-slot length only bounds it should no body ever lift it.
CAP_HOLD_S = 3600.0

if TYPE_CHECKING:
    from jitsched.daemon.agents import AgentTable
    from jitsched.daemon.background import BackgroundTable
    from jitsched.daemon.jobs import JobRegistry, JobState
    from jitsched.daemon.plans import PlanBook


def host_bodies(sched: SlotSchedule | None, hosts: Iterable[int] | None, seq: int,
                t0_wall_s: float, cluster: Cluster, slot_s: float,
                incarnation: int = 0, epoch: int = 0, caps_into: tuple = (), floors_at: tuple = (),
                held_floor: float | None = None) -> dict[str, dict]:
    """Schedule message bodies (idempotent by ``seq``) of ``hosts`` (indices; None: all).

    A host's body holds the flows it sends and its egress leftover, bytes/s,
    and the flows it receives and its ingress leftover (``in_*``, for agents
    that enforce their ingress too), each leftover without the trailing slots
    at the line rate: agents take slots past the list as the line rate, and
    an idle host's body gets short (and shared). Each flow is an entry of the
    schema ``jitsched.protocol`` declares (:func:`~jitsched.protocol.flow_entry`);
    a flow with a strict-priority level (``sched.prio``) carries it as ``prio``. ``incarnation`` names the daemon
    process (seqs restart with each): agents reset their seq when it changes.
    ``epoch`` is the leader's among daemon replicas (0: one daemon): agents drop a body
    of an epoch lower than one they have seen. ``caps_into``
    (:meth:`~jitsched.plan.reserve.ReservationBook.ingress_held`): every other host's
    body lists what the unfinished reserved transfers leave of each ingress they hold
    (``caps_into``, entries of :func:`~jitsched.protocol.cap_entry`; a host with no
    address cannot be matched and is left out). ``floors_at``, entries of the same form:
    each of those hosts' own body carries ``held_floor`` from the first slot the
    reservations hold it (``floor_from``, entries of :func:`~jitsched.protocol.floor_entry`).
    """
    names = cluster.names
    idx = range(len(names)) if hosts is None else sorted(hosts)
    caps = cap_entries(caps_into, cluster, t0_wall_s)
    floors = {} if held_floor is None else {
        names[h]: {"floor_from": [floor_entry(int((t0_wall_s + start_s) * 1e9), held_floor)]}
        for h, start_s, _ in floors_at if h < len(names)}
    if sched is None:
        epoch_ns = int(t0_wall_s * 1e9)
        return {names[h]: {"seq": seq, "slot_s": slot_s, "epoch_ns": epoch_ns, "flows": [],
                           "leftover_Bps": [], "line_Bps": cluster.hosts[h].egress_Bps,
                           "in_flows": [], "in_leftover_Bps": [], "in_line_Bps": cluster.hosts[h].ingress_Bps,
                           "incarnation": incarnation, "epoch": epoch} | _caps_of(caps, names[h]) | floors.get(names[h], {})
                for h in idx}
    out_of: dict[int, list] = {h: [] for h in idx}
    into: dict[int, list] = {h: [] for h in idx}
    # One pass over every flow of every job, two dicts each: 32k flows at 1000 VGG16 jobs
    # on 1000 hosts. Written out (no np.asarray, no dict merge per flow) it took 0.11 s
    # there, from 0.22 s: a fifth of a full re-solve outside the planner's own work.
    prio = sched.prio
    for job, tid, src, dst, start, rates in sched.flows:
        lo, li = out_of.get(src), into.get(dst)
        if lo is None and li is None:
            continue
        fid = flow_id(job, tid)
        r = rates.astype(float, copy=False).tolist() if type(rates) is np.ndarray else [float(x) for x in rates]
        start = int(start)
        level = prio.get((job, tid)) if prio else None
        if lo is not None:
            lo.append(flow_entry(fid, names[dst], start, r, level))
        if li is not None:
            li.append(flow_entry(fid, names[src], start, r, level, inbound=True))
    if prio:
        _dense_ranks(out_of, into)
    epoch_ns = int((t0_wall_s + sched.epoch_s) * 1e9)
    left_e, keep_e = _trimmed_leftover(sched.leftover_egress, cluster.egress_Bps)
    left_i, keep_i = _trimmed_leftover(sched.leftover_ingress, cluster.ingress_Bps)
    return {names[h]: {"seq": seq, "slot_s": float(sched.slot_s), "epoch_ns": epoch_ns,
                       "flows": out_of[h], "leftover_Bps": left_e[h, :keep_e[h]].tolist(),
                       "line_Bps": cluster.hosts[h].egress_Bps,
                       "in_flows": into[h], "in_leftover_Bps": left_i[h, :keep_i[h]].tolist(),
                       "in_line_Bps": cluster.hosts[h].ingress_Bps, "incarnation": incarnation,
                       "epoch": epoch} | _caps_of(caps, names[h]) | floors.get(names[h], {})
            for h in idx}


def cap_entries(caps_into: tuple, cluster: Cluster, t0_wall_s: float) -> list[dict]:
    """The cap entries of ``caps_into`` (:meth:`ReservationBook.ingress_held`) whose host has
    an address, times on the wall clock of a daemon started at ``t0_wall_s``; each holds
    for :data:`CAP_HOLD_S` unless a later body lifts it."""
    out = []
    for h, start_s, left in caps_into:
        if h >= len(cluster) or not cluster.hosts[h].address:
            continue
        host = cluster.hosts[h]
        out.append(cap_entry(host.name, host.address, int((t0_wall_s + start_s) * 1e9), CAP_HOLD_S, [left]))
    return out


def _caps_of(caps: list[dict], host: str) -> dict:
    # a host's body: the caps on its traffic into the other held hosts (none: no key)
    mine = [c for c in caps if c["host"] != host]
    return {"caps_into": mine} if mine else {}


def _dense_ranks(out_of: dict[int, list], into: dict[int, list]) -> None:
    """Renumber each host's ranks 0, 1, ... over the flows it sends and receives, in order.

    An agent compares the ranks of the flows in its own body only (its egress
    among themselves, its ingress among themselves), so per-host dense ranks
    order it exactly as the global ones do; but a job ranked in between others
    no longer renumbers the bodies of hosts it does not touch, and those keep
    the body they have (see :class:`RankFrame`).
    """
    for h, out in out_of.items():
        es = out + into[h]
        ranks = sorted({e["prio"] for e in es if "prio" in e})
        if ranks and ranks[-1] != len(ranks) - 1:
            new = {r: k for k, r in enumerate(ranks)}
            for e in es:
                if "prio" in e:
                    e["prio"] = new[e["prio"]]


def _trimmed_leftover(leftover: np.ndarray, line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # per host, the number of slots up to the last one below the line rate
    left = np.asarray(leftover, dtype=float)
    if not left.size:
        return left, np.zeros(len(line), dtype=np.int64)
    below = left < line[:, None] * (1.0 - 1e-12)
    return left, np.where(below.any(axis=1), left.shape[1] - np.argmax(below[:, ::-1], axis=1), 0)


class IdleFrame(bytes):
    """The packed body of a host idle both ways (:func:`is_idle`).

    It tells the agent table (:meth:`AgentTable.publish`) that the body says
    nothing but "the line rate, both ways", so an agent that holds such a body
    already need not be sent another. A marker type rather than a set beside
    the frames: it travels with each frame, pickled back from the planner
    process, and needs no change where results are installed.
    """

    __slots__ = ()


class RankFrame(bytes):
    """The packed body of a busy host whose body does not depend on the slot grid.

    Its flows carry ranks and no rates, and both its leftovers are the line
    rate (the default jit's bodies): only the flows and their ranks matter to
    the agent, not the seq or the epoch of the plan. ``content`` is the body
    packed with those two zeroed; a host whose current body has the same
    content keeps it (:meth:`AgentTable.publish`).
    """

    content: bytes = b""


def is_idle(body: dict) -> bool:
    """Whether a host's body plans nothing for it: no flow out or in, both leftovers
    the line rate (empty lists), no cap on its traffic into another host and no floor to hold."""
    return not (body["flows"] or body["leftover_Bps"] or body.get("in_flows") or body.get("in_leftover_Bps")
                or body.get("caps_into") or body.get("floor_from"))


def pack_frames(bodies: dict[str, dict]) -> dict[str, bytes]:
    """Each host's body packed; idle hosts with the same line rates share one frame.

    A host is idle (:func:`is_idle`) when it neither sends nor receives a
    scheduled flow and both its leftovers are the line rate (empty lists);
    its frame is an :class:`IdleFrame`.
    """
    # Idle hosts (most of a big cluster) have the same body: pack it once, share the bytes.
    # Idle means both directions: a receiver whose sends are over still has its
    # ingress plan (a parameter server taking gradients); sharing an egress-idle
    # host's frame handed it another host's in_flows, and its agent dropped the
    # inbound classes of flows still running (paper-mini, jit: a VGG16's 41 MB
    # gradient into its parameter server lost its rank for its last 14 s and
    # shared the port with two files; that job took 36-41 s in those runs).
    idle: dict[tuple[float, float], bytes] = {}
    frames = {}
    for h, b in bodies.items():
        if not is_idle(b):
            if _grid_free(b):
                frames[h] = frame = RankFrame(pack_body(b))
                frame.content = pack_body(b | {"seq": 0, "epoch_ns": 0})
            else:
                frames[h] = pack_body(b)
        else:
            key = (b["line_Bps"], b.get("in_line_Bps", 0.0))
            frame = idle.get(key)
            frames[h] = idle[key] = frame if frame is not None else IdleFrame(pack_body(b))
    return frames


def restamp_frames(frames: dict[str, bytes], seq: int) -> dict[str, bytes]:
    """``frames`` (:func:`pack_frames`) with their bodies' seq set to ``seq``.

    Each frame keeps its type (and a :class:`RankFrame` its content, which
    holds no seq); hosts that shared a frame share its new one.
    """
    new: dict[int, bytes] = {}
    out = {}
    for h, frame in frames.items():
        got = new.get(id(frame))
        if got is None:
            packed = pack_body(unpack_body(frame) | {"seq": seq})
            if isinstance(frame, RankFrame):
                got = RankFrame(packed)
                got.content = frame.content
            else:
                got = IdleFrame(packed) if isinstance(frame, IdleFrame) else packed
            new[id(frame)] = got
        out[h] = got
    return out


def _grid_free(body: dict) -> bool:
    """Whether a body means the same on any slot grid: no flow has rates, no leftover below the line."""
    return not (body["leftover_Bps"] or body.get("in_leftover_Bps")
                or any(f["rates_Bps"] for f in body["flows"])
                or any(f["rates_Bps"] for f in body.get("in_flows", ())))


def job_summary(js: JobState, now: float, slot_s: float) -> dict:
    """One job's entry in the status reply at ``now`` (times in seconds); a critical job's
    also has its ``deadline_s`` (daemon clock) and where it stands against it
    (:meth:`JobState.guarantee`)."""
    verdict = js.guarantee(now, slot_s)
    return {
        "seq": js.seq, "state": js.state, "submitted_s": js.submitted_s,
        "transfers_done": sum(1 for t in js.job.transfers if t.id in js.done),
        "transfers": len(js.job.transfers), "computes_done": sum(1 for c in js.job.computes if c.id in js.done),
        "computes": len(js.job.computes),
        "jct_s": None if math.isnan(js.jct_s) else js.jct_s,
        "lat_hits": js.lat_hits, "lat_misses": js.lat_misses,
    } | ({"error": js.error} if js.error else {}) | (
        {"deadline_s": js.guard_until_s, "guarantee": verdict} if verdict is not None else {}) | (
        {"at_risk": "; ".join(js.at_risk[h] for h in sorted(js.at_risk))} if js.at_risk and js.active else {}) | (
        {"owner": js.owner, "id": js.name} if js.owner is not None else {})


def client_usage(registry: JobRegistry, background: BackgroundTable, config: DaemonConfig,
                 inflight: dict | None = None) -> dict:
    """Each client's use of its quota (``[limits.per_client]``, ``[limits.clients.NAME]``):
    for every client that holds something or has a quota of its own, ``{setting: [used,
    quota]}``; ``inflight`` (client -> pending requests and bytes in flight) is the socket
    loop's share. Without keys the one client is ``anonymous``."""
    inflight = inflight or {}
    names = ({o for o, u in registry.usage.items() if u.running or u.bytes} | set(background.by_owner)
             | {None if n == ANONYMOUS else n for n in inflight} | set(config.clients))
    out = {}
    for owner in sorted(names, key=lambda n: n or ""):
        name = owner or ANONYMOUS
        q = config.quota(owner)
        u = registry.usage.get(owner)
        loop = inflight.get(name, {})
        out[name] = {"max_jobs": [u.running if u else 0, q.max_jobs],
                     "max_job_bytes": [u.bytes if u else 0, q.max_job_bytes],
                     "max_background": [background.by_owner.get(owner, 0), q.max_background],
                     "max_pending_requests": [loop.get("pending_requests", 0), q.max_pending_requests],
                     "max_bytes_in_flight": [loop.get("bytes_in_flight", 0), q.max_bytes_in_flight]}
    return out


def status_body(registry: JobRegistry, table: AgentTable, book: PlanBook, background: BackgroundTable,
                config: DaemonConfig, planner: str, now: float, *, after: int = 0, limit: int | None = None,
                loop: dict | None = None, inflight: dict | None = None) -> dict:
    """The ``status`` reply: a page of jobs, agents, the last plan, plan failures, where full
    re-solves run (``planner``), the input limits, the socket loop's counts (``loop``) and
    the announced background flows held and counted (``background``), each client's use
    of its quota (``clients``, :func:`client_usage`) and the daemon's memory against its
    ceiling (``memory``), times in seconds.

    Jobs are listed in submission order, those after seq ``after``, at most
    ``limit`` (default ``status_page_jobs``) and no more than fit in
    ``STATUS_PAGE_BYTES``; ``next_after`` is the ``after`` of the next page
    (None: this is the last). The registry holds every running job and the
    ended ones within their retention (``jobs_pruned`` counts the others).
    """
    limit = config.status_page_jobs if limit is None else limit
    page, more = registry.page(after, limit)
    jobs = {}
    size = 0
    last = after
    for js in page:
        entry = job_summary(js, now, config.slot_s)
        # ids are at most max_id_chars long, errors are clipped: ~100 bytes besides them
        size += 100 + len(js.job.id) + len(js.error) + len(js.owner or "")
        if jobs and size > STATUS_PAGE_BYTES:
            more = True
            break
        jobs[js.job.id] = entry
        last = js.seq
    # clock_offset_s: the agent's clock minus the daemon's as it measured it (None until it
    # did); clock_off: over a slot (the agent takes slot times on the daemon's clock)
    agents = {h: {"up": a.up, "backend": a.backend, "acked_seq": a.acked_seq,
                  "sent_seq": a.sent_seq, "applied_seq": a.applied_seq,
                  "seq": table.host_seq.get(h, 0), "resends": a.resends, "resends_stopped": a.resends_stopped,
                  "last_seen_age_s": now - a.last_seen_s, "total_Bps": a.total_Bps,
                  "clock_offset_s": a.clock_offset_s, "clock_rtt_s": a.clock_rtt_s, "clock_off": a.clock_off,
                  "attached": a.attached, "caps_held": a.caps_held, "caps_unenforced": a.caps_unenforced,
                  # and the share of its ports critical jobs' reservations are planned on
                  "background_floor": a.background_floor, "payload_share": a.payload_share,
                  "reservable": a.reservable_with(config.critical_floor), "holds_floor": a.holds_floor,
                  # the floor it keeps for a critical job on its ports now ([daemon] critical_floor)
                  "floor_held": a.floor_held,
                  # what the agent refused or dropped since it started, the non-zero
                  # jitsched.protocol.AGENT_COUNTS
                  "counts": a.counts,
                  # the port's unscheduled traffic as the agent measured it, bytes/s per direction,
                  # its smoothed mean and the capacity plans use (jitsched.daemon.capacity)
                  "unscheduled_Bps": a.unscheduled_Bps, **table.capacity.host_view(h)}
              for h, a in table.agents.items()}
    return {"now_s": now, "jobs": jobs, "next_after": last if more else None,
            "jobs_total": len(registry.jobs), "jobs_running": len(registry.active),
            "jobs_omitted": len(registry.jobs) - len(jobs), "jobs_pruned": registry.pruned,
            "agents": agents, "agent_counts": dict(table.counts), "loop": dict(loop or {}),
            "plan": dict(book.plan_summary), "planning": config.planning,
            "plans": dict(book.plans_by_mode), "plans_failed": sum(book.plans_failed.values()),
            "last_plan_error": book.last_error, "planner": planner, "curve": bool(config.keys_dir),
            "limits": {k: getattr(config, k) for k in KEYS["limits"]} | {
                "max_memory_bytes": registry.memory_ceiling, "per_client": asdict(config.per_client)},
            "clients": client_usage(registry, background, config, inflight),
            "memory": {"rss_bytes": registry.rss(), "ceiling_bytes": registry.memory_ceiling,
                       "ended_job_bytes": registry.ended_bytes, "refused": registry.refused_memory},
            "incarnation": table.incarnation, "epoch": table.epoch, "journal": config.journal or "",
            "solve_s": list(book.solve_times[-STATUS_SOLVE_TIMES:]),
            "background": {"held": len(background.flows), **background.counts}}


__all__ = ["CAP_HOLD_S", "STATUS_PAGE_BYTES", "STATUS_SOLVE_TIMES", "IdleFrame", "RankFrame", "cap_entries", "client_usage",
           "host_bodies", "is_idle", "job_summary", "pack_frames", "status_body"]
