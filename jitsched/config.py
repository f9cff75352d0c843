"""The daemon's TOML configuration: cluster hosts, endpoints, slot length, alpha, objective, keys."""

# One module although past 500 lines: DaemonConfig declares every setting once (its TOML
# table, type and default beside its meaning), and the checks below read those same
# declarations; split, a setting's declaration and its check would drift apart.

from __future__ import annotations

import ipaddress
import math
import re
import sys
import types
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_type_hints

from jitsched.dag.model import Cluster, parse_cluster
from jitsched.errors import ValidationError
from jitsched.keys import is_local_endpoint
from jitsched.plan import DEFAULT_SLOT_S
from jitsched.protocol import MAX_MESSAGE_BYTES, endpoint_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


FULL = "full"
INCREMENTAL = "incremental"
# [daemon] host_join: who becomes a host. "open": the TOML's hosts are the initial set and
# an agent of any other host (with its host key, when the daemon has keys) joins with the
# capacities it registers; "allow-list": the TOML's hosts are the only ones.
OPEN = "open"
ALLOW_LIST = "allow-list"
HOST_JOIN_MODES = (OPEN, ALLOW_LIST)
PLANNING_MODES = (INCREMENTAL, FULL)
# The shortest heartbeat: each one is a message from every agent and a liveness check
# on the daemon's loop; 1 ns heartbeats would be the whole of its work.
MIN_HEARTBEAT_S = 0.01
HOST_LEAVE_S = 30.0  # a joined host's agent silent this long leaves, when the TOML does not say


def _in(section: str, default: Any = None, **kw: Any) -> Any:
    """A setting of the TOML table ``[section]``."""
    if "default_factory" in kw:
        return field(metadata={"section": section}, **kw)
    return field(default=default, metadata={"section": section}, **kw)


# Without keys every request is this one client's: plaintext is served on this machine
# only, where any process may act on any job anyway, and a routing id (one per
# connection, any number of them) would let one process take many quotas.
ANONYMOUS = "anonymous"


@dataclass(frozen=True, kw_only=True)
class ClientQuota:
    """What one client may hold at once: ``[limits.per_client]`` (every client's), and
    ``[limits.clients.NAME]`` (client NAME's, each setting it leaves out as per_client's).

    A client is a client key's name; without keys, every request is one client's,
    ``anonymous``. A request past a quota is refused ``overloaded`` naming it, and
    another client's quota is not touched: the daemon-wide ``[limits]`` hold besides.
    """

    max_jobs: int = 1000  # running jobs (the daemon-wide max_jobs is 10x: ten clients at their quota)
    max_background: int = 1000  # announced background flows held
    # requests waiting in the daemon for one of its own, over all its connections: held
    # behind a big request being decoded, or that big request itself
    max_pending_requests: int = 256
    # bytes of its requests being decoded or held, plus bytes of replies to it that
    # libzmq has not yet written out (replies of TRACK_BYTES and more)
    max_bytes_in_flight: int = 64 * 1024 * 1024
    # estimated memory (bytes) of its jobs the daemon holds, running and ended; a submission
    # past it first forgets the client's oldest ended jobs (1 GiB: ~40 jobs of max_job_nodes,
    # ~25k VGG16 iterations)
    max_job_bytes: int = 1024 ** 3


QUOTA_KEYS = tuple(f.name for f in fields(ClientQuota))


@dataclass(frozen=True, kw_only=True)
class SecurityOptions:
    """Who may talk to the daemon: the ``[security]`` table, merged into :class:`DaemonConfig`.

    ``keys_dir`` names a key directory as ``jitsched keys init`` writes it
    (relative to the TOML file's directory): both sockets then speak CURVE,
    and only the hosts' keys may register agents and only the clients' keys
    may submit. Without keys the daemon serves only endpoints on this machine
    (loopback TCP, ``ipc://``) unless ``insecure`` is set: anyone who reaches a
    plaintext socket may submit, cancel and register as any host.
    ``attach_ticket_s``: seconds an attach ticket (``attach_job``'s, which a
    host's agent wants before it attaches a job's processes) stays valid.
    """

    keys_dir: str = _in("security", "")  # "": no CURVE, plaintext
    insecure: bool = _in("security", False)  # serve network-facing endpoints without keys
    # a ticket is used at once (jitsched attach, the SDK): a few minutes cover clock error
    # and a slow agent, and bound how long a ticket outlives the client's right to it
    attach_ticket_s: float = _in("security", 300.0)


@dataclass(frozen=True, kw_only=True)
class HaOptions:
    """Daemon replicas on etcd: the ``[ha]`` table, merged into :class:`DaemonConfig`.

    With ``etcd_endpoints`` (``http://HOST:PORT`` of etcd's client URLs) the
    daemon is one of several replicas: the one holding the etcd lease of
    ``etcd_prefix`` leads, keeps jobs, templates, progress and announced flows
    in etcd instead of a sqlite journal, and every write it makes is a
    transaction that holds only while its lease (its epoch) does; the others
    answer ``not_leader`` naming the leader until its lease lapses
    (``lease_ttl_s`` after it last renewed it) and one of them takes over.
    Empty: one daemon, with the sqlite ``journal`` if set.
    """

    etcd_endpoints: list = _in("ha", default_factory=list)  # [] : no replicas (the single-node default)
    etcd_prefix: str = _in("ha", "/jitsched")  # one key space per fabric on a shared etcd
    # A dead leader's lease lapses this long after its last renewal (renewed every
    # lease_ttl_s / 4); then a replica takes over. etcd rounds it up to whole seconds.
    lease_ttl_s: float = _in("ha", 2.0)
    # seconds a follower waits between looks at the leader key
    campaign_s: float = _in("ha", 0.1)


@dataclass(frozen=True)
class DaemonConfig(HaOptions, SecurityOptions):
    """Everything the daemon needs; times in seconds, sizes in bytes.

    The TOML file holds the native cluster map at top level (``[[hosts]]``
    tables with ``name``, ``egress_bps``, ``ingress_bps``, ``address``), as the
    testbed writes it, plus optional ``[daemon]``, ``[scheduler]`` and
    ``[limits]`` tables whose keys are this class's fields (each field names
    its table).

    ``planning`` is ``incremental`` (default: an arriving job is planned alone
    against the capacity the schedule in force leaves, and only the agents whose
    schedules change are pushed; joint re-solves of all jobs run beside it on
    drift, the periodic timer, agent changes, planned LAT misses of an
    incremental plan, and at most ``joint_replan_s`` after the schedule stopped
    being a joint plan, 0: never for that reason) or ``full`` (every arrival
    re-solves all jobs). A batch of arrivals with more than
    ``max_increment_transfers`` transfers (a single job always qualifies) is no
    fast plan anyway and goes to a joint re-solve instead. ``max_planner_duty``
    bounds the share of time full re-solves keep the planner busy (1: no
    bound): a re-solve over DAGs of thousands of transfers can take seconds,
    and back-to-back ones take a core from the hosts' agents and jobs. A
    failed plan is retried ``plan_retry_s`` later, the wait doubling with each
    further failure up to ``plan_retry_max_s``.

    ``slot_s`` is at least 1 ms (:data:`jitsched.plan.MIN_SLOT_S`) and ``heartbeat_s``
    at least 10 ms (:data:`MIN_HEARTBEAT_S`).

    ``[limits]`` bound what a submitted job may ask for, so that every job the
    daemon accepts has a plan of bounded size; a job beyond one is refused
    (``invalid_job``, the message names the field and the limit).

    ``[security]`` holds :class:`SecurityOptions`' fields (keyword-only here), ``[ha]``
    :class:`HaOptions`'.

    ``journal`` names a sqlite file where the daemon records every submitted
    job, its progress and its end; a daemon started with the same file resumes
    the jobs that had not ended (docs/architecture.md §2.1).
    """

    cluster: Cluster
    job_endpoint: str = _in("daemon", "tcp://127.0.0.1:5555")
    agent_endpoint: str = _in("daemon", "tcp://127.0.0.1:5556")
    metrics_port: int = _in("daemon", 0)  # 0: no Prometheus endpoint
    # The address the Prometheus endpoint listens on: loopback by default, since the metrics
    # answer without keys; a pod's address (or 0.0.0.0) where a scraper must reach them.
    metrics_address: str = _in("daemon", "127.0.0.1")
    heartbeat_s: float = _in("daemon", 0.5)
    heartbeat_timeout_s: float = _in("daemon", 2.0)
    resend_s: float = _in("daemon", 0.2)
    # A running job none of whose client's requests named it for this long ends as
    # "abandoned" and its flows leave the plan (inf: never). Any request naming the job
    # renews it (reports, iterations, renew_lease); a restart renews every resumed job.
    job_lease_s: float = _in("daemon", 300.0)
    # who becomes a host: "open" (the TOML's hosts are the initial set, others join as their
    # agents register) or "allow-list" (the TOML's hosts only)
    host_join: str = _in("daemon", OPEN)
    # a joined host whose agent has been silent this long leaves the cluster: its running
    # jobs with work left on it end failed and the rest are re-planned (inf: only an
    # explicit leave). A host of the TOML leaves only explicitly (`jitsched agent --leave`).
    # Unset: HOST_LEAVE_S, or three heartbeat timeouts where that is longer.
    host_leave_s: float = _in("daemon", HOST_LEAVE_S)
    planner_process: bool = _in("daemon", True)  # full re-solves in a child process (False: a thread)
    # a planner process that answers no full re-solve within this many seconds (stopped, or
    # stuck) is killed and full re-solves run in a thread from then on (status says why);
    # inf: wait for ever. The joint re-solve of 1000 VGG16 jobs takes a few seconds.
    planner_timeout_s: float = _in("daemon", 300.0)
    # plan each port on its line rate less the smoothed unscheduled rate its agent measures
    # (jitsched.daemon.capacity); False: on the line rate
    live_capacity: bool = _in("daemon", True)
    # sqlite file of submitted jobs and their progress (relative: to the TOML file's
    # directory); a daemon restarted with it resumes every unfinished job. None: no journal
    journal: str | None = _in("daemon", None)
    # a critical job is admitted only with a reservation holding its JCT within
    # (1 + critical_epsilon) of its JCT alone in the cluster (jitsched.plan.reserve)
    critical_epsilon: float = _in("daemon", 0.05)
    # every agent holds its unranked traffic into a host whose ingress a critical job's
    # unfinished reserved transfers hold to what they leave of it on the wire
    # (ReservationBook.ingress_held), so that it meets them in no switch queue; False: only
    # the receiver orders it
    critical_caps: bool = _in("daemon", True)
    # while a critical job's unfinished reserved transfers go into or out of a host, its
    # agent keeps this share of the host's ports for the traffic it does not rank instead
    # of its own background floor (the smaller of the two), and gives that traffic no more
    # there; the job is reserved on what that leaves. None (or a share at or above the
    # agents' floors): each agent's own. Only agents that keep DL packets out of their
    # background class lower it (TcBackend.holds_floor). A network-bound critical VGG16 took
    # 1.037-1.047x its JCT alone on real TCP at 0.01 (ten runs) against 1.086x at the
    # agents' 0.05, and the files on its ports went at most 1.1-2.3 s without a byte against
    # 0.4 s (`jitsched testbed run --scenario classes --policy jit --seed 0`,
    # docs/results.md): the files are slowed, never stopped
    critical_floor: float | None = _in("daemon", 0.01)
    # a host whose agent has not registered (and that the journal has no share for) is
    # reserved on this share of its ports' line rate; once its agent registers, on what that
    # agent can give (its payload share less its background floor). 0.9 is at most what a
    # tc agent gives with its defaults (1448 of each 1514-byte frame, less its 5 % floor: 0.909)
    critical_assumed_share: float = _in("daemon", 0.9)
    policy: str = _in("scheduler", "jit")
    slot_s: float = _in("scheduler", DEFAULT_SLOT_S)
    # None: the policy's own default (jit: 0, no LP reservations; jit-paper: 0.4)
    alpha: float | None = _in("scheduler", None)
    objective: str = _in("scheduler", "balanced")
    replan_period_s: float = _in("scheduler", 0.0)  # 0: no periodic re-solve
    drift_s: float = _in("scheduler", 0.5)  # a transfer this much behind its plan triggers a re-solve
    # a transfer this much ahead of its LAT triggers a re-solve (inf: never): the plan
    # paced the job's later transfers for a later arrival, and they now hold the job up
    early_s: float = _in("scheduler", math.inf)
    coalesce_s: float = _in("scheduler", 0.0)  # wait this long for more arrivals before solving
    planning: str = _in("scheduler", INCREMENTAL)
    joint_replan_s: float = _in("scheduler", 1.0)
    max_increment_transfers: int = _in("scheduler", 256)
    # full re-solves may keep the planner busy at most this fraction of the time: after
    # one that took d seconds the next starts no sooner than d * (1 / duty - 1) later
    max_planner_duty: float = _in("scheduler", 1.0)
    plan_retry_s: float = _in("scheduler", 0.5)
    plan_retry_max_s: float = _in("scheduler", 30.0)
    policy_options: dict = _in("scheduler", default_factory=dict)
    # Limits: values no real DL job reaches, each keeping a job's plan bounded.
    # The socket drops messages over 4x this outright (zmq MAXMSGSIZE); those between
    # get a too_large reply. 8 MiB holds a ResNet152-sized native job (~1 MB).
    max_message_bytes: int = _in("limits", MAX_MESSAGE_BYTES)
    max_jobs: int = _in("limits", 10_000)  # running at once
    # 1 TB in one transfer: more than the fp32 parameters of a 175-billion-parameter
    # model; catches sizes given in bits or off by 1e3 long before they reach the LP.
    max_transfer_bytes: float = _in("limits", 1e12)
    # a day for one compute node: a DL iteration's kernels take milliseconds to seconds
    max_compute_s: float = _in("limits", 86_400.0)
    # the paper's largest DAG, ResNet152, has ~3.5k nodes; an 8 MiB message holds ~30k
    # such nodes, so this mostly stops bare synthetic maps
    max_job_nodes: int = _in("limits", 50_000)
    # job, compute and transfer ids; flow ids ("job/transfer") go into every agent's
    # schedule body. The bundled model DAGs' longest node id has 90 characters.
    max_id_chars: int = _in("limits", 256)
    # The planning horizon one job needs alone, in slots: the longer of its critical
    # path (transfers at their ports' line rate) and its busiest port's bytes at the
    # line rate. A plan's memory and solve time grow with it: one jit-paper transfer
    # over 10k slots took 1.5 s and 130 MB, over 20k 5 s and 220 MB, over 80k 1.2 GB.
    # 10k slots of the default DEFAULT_SLOT_S (0.1 s) are 1000 s, far beyond the network time of one
    # training iteration (VGG16's 550 MB of parameters: 4.4 s at 1 Gbit/s).
    max_plan_slots: int = _in("limits", 10_000)
    # Memory and the socket loop (docs/architecture.md §2.2). Ended jobs are listed by
    # status for this long, and at most this many (the oldest go first). An ended job
    # keeps its DAG and progress, ~200 bytes a node (a VGG16 iteration, 80 nodes: 17 kB
    # measured), so 2000 of them hold ~34 MB; never pruned, 50k submit+cancel grew
    # status past the 8 MiB message limit (~65k jobs) and RSS without bound.
    ended_retention_s: float = _in("limits", 600.0)
    max_ended_jobs: int = _in("limits", 2000)
    # jobs in one status reply (a client pages on with ``after``); ~200 bytes a job,
    # so a page stays near 200 kB, far under 1 MB
    status_page_jobs: int = _in("limits", 1000)
    # Bytes of replies (each over 4 KiB) a job client may leave unread before further
    # replies become small ``overloaded`` errors: 300 unread status replies grew the
    # daemon's RSS by 230 MB. At least max_message_bytes, so one reply always fits.
    max_peer_queued_bytes: int = _in("limits", 32 * 1024 * 1024)
    # Job-socket connections at once; each holds a descriptor. Beyond, the ones silent
    # longest (>= 1 s) are closed to make room, else the new one (counted, logged).
    # 1,100 idle ones once exhausted a 1024-descriptor limit and new clients got no answer. The agent socket takes one
    # per host of the cluster and a tenth more, at least 64 (reconnects overlap a moment).
    max_connections: int = _in("limits", 1000)
    # a connection on either socket that sent nothing for this long is closed (a zmq
    # client reconnects by itself when it next sends; agents heartbeat every heartbeat_s)
    idle_timeout_s: float = _in("limits", 300.0)
    # requests bigger than this are decoded and checked on a worker thread, not on the
    # socket loop: a 7 MB job (144k nodes) held the loop 3.3 s and two agents went down
    offload_bytes: int = _in("limits", 256 * 1024)
    # Announced background flows (``background_started``) held at once, and how long one
    # is held after its sender last reported (announced it or said what it has left) when
    # it never says it finished (a sender that died); past it the flow is background the
    # daemon does not know.
    max_background: int = _in("limits", 10_000)
    # Hosts in the cluster, configured and joined (a host that left keeps its place): each
    # is a row of every plan's per-slot arrays; twice the 10,000 agents the scale bench runs.
    max_hosts: int = _in("limits", 20_000)
    background_ttl_s: float = _in("limits", 3600.0)
    # Estimated bytes of ended jobs kept for status, all clients together; the oldest go
    # first (limits.job_bytes estimates a job; one of 50k nodes is ~30 MB, so max_ended_jobs
    # of those would be 60 GB).
    max_ended_bytes: int = _in("limits", 256 * 1024 * 1024)
    # The daemon's resident memory above which new submissions, background flows and big
    # requests are refused ``overloaded`` (ended jobs are forgotten first to make room).
    # 0: half of the machine's memory or of its cgroup's memory.max, whichever is less
    # (limits.memory_ceiling); status shows the value in force.
    max_memory_bytes: int = _in("limits", 0)
    # [limits.per_client] and [limits.clients.NAME]: each client's quota (ClientQuota)
    per_client: ClientQuota = field(default_factory=ClientQuota)
    clients: dict[str, ClientQuota] = field(default_factory=dict)

    def with_(self, **changes: Any) -> DaemonConfig:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)

    def quota(self, client: str | None) -> ClientQuota:
        """The quota of ``client`` (a key's name; None: the daemon has no keys, ``anonymous``)."""
        return self.clients.get(ANONYMOUS if client is None else client, self.per_client)


SECTIONS = ("daemon", "scheduler", "limits", "security", "ha")
# settings that moved to [limits] and are still read from their old table
_MOVED = {"daemon": ("max_message_bytes", "max_jobs")}


def _keys() -> dict[str, dict[str, type]]:
    """Per TOML table, its settings and their types, from :class:`DaemonConfig`'s fields."""
    hints = get_type_hints(DaemonConfig)
    out: dict[str, dict[str, type]] = {name: {} for name in SECTIONS}
    for f in fields(DaemonConfig):
        section = f.metadata.get("section")
        if section is None:
            continue
        kind = hints[f.name]
        if isinstance(kind, types.UnionType):  # X | None: TOML has no null, so X
            kind = next(k for k in kind.__args__ if k is not type(None))
        out[section][f.name] = kind
    return out


KEYS = _keys()


def _section(doc: dict, name: str, spec: dict) -> dict:
    sec = doc.get(name, {})
    if not isinstance(sec, dict):
        raise ValidationError(f"[{name}]: expected a table")
    out = {}
    for key, val in sec.items():
        if key not in spec:
            raise ValidationError(f"[{name}].{key}: unknown setting")
        kind = spec[key]
        if kind is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if not isinstance(val, kind) or (isinstance(val, bool) and kind is not bool):
            raise ValidationError(f"[{name}].{key}: expected {kind.__name__}, got {type(val).__name__}")
        out[key] = val
    return out


def _quota(table: object, where: str, base: ClientQuota) -> ClientQuota:
    """``base`` with the settings of the TOML table ``[where]`` applied."""
    if not isinstance(table, dict):
        raise ValidationError(f"[{where}]: expected a table")
    out = {}
    for key, val in table.items():
        if key not in QUOTA_KEYS:
            raise ValidationError(f"[{where}].{key}: unknown setting; expected one of {', '.join(QUOTA_KEYS)}")
        if not isinstance(val, int) or isinstance(val, bool):
            raise ValidationError(f"[{where}].{key}: expected int, got {type(val).__name__}")
        out[key] = val
    return replace(base, **out)


def _quotas(doc: dict) -> tuple[dict, dict[str, Any]]:
    """``doc`` without ``[limits.per_client]`` and ``[limits.clients.*]``, and those as fields."""
    lim = doc.get("limits")
    if not isinstance(lim, dict) or not ({"per_client", "clients"} & set(lim)):
        return doc, {}
    lim = dict(lim)
    per = _quota(lim.pop("per_client", {}), "limits.per_client", ClientQuota())
    named = lim.pop("clients", {})
    if not isinstance(named, dict):
        raise ValidationError("[limits.clients]: expected tables [limits.clients.NAME]")
    clients = {name: _quota(t, f"limits.clients.{name}", per) for name, t in named.items()}
    return doc | {"limits": lim}, {"per_client": per, "clients": clients}


def parse_config(doc: dict, **overrides: Any) -> DaemonConfig:
    """Validate a parsed TOML document and return a :class:`DaemonConfig`; ``overrides``
    (fields, e.g. from the command line) replace the document's settings before the checks."""
    extra = set(doc) - {"hosts", *SECTIONS}
    if extra:
        raise ValidationError(f"unknown top-level key(s) {sorted(extra)}; expected hosts, {', '.join(SECTIONS)}")
    dmn = doc.get("daemon")
    join = overrides.get("host_join", dmn.get("host_join", OPEN) if isinstance(dmn, dict) else OPEN)
    cluster = parse_cluster({"hosts": doc.get("hosts", [])}, "", empty_ok=join == OPEN)
    doc, quotas = _quotas(doc)
    opts: dict[str, Any] = dict(quotas)
    where: dict[str, str] = {}
    for name in SECTIONS:
        spec = KEYS[name] | {k: KEYS["limits"][k] for k in _MOVED.get(name, ())}
        for key, val in _section(doc, name, spec).items():
            if key in opts:
                raise ValidationError(f"[{name}].{key}: also set in [{where[key]}]; set it once, in [limits]")
            opts[key], where[key] = val, name
    opts |= overrides
    if "host_leave_s" not in opts and "heartbeat_timeout_s" in opts:
        opts["host_leave_s"] = max(HOST_LEAVE_S, 3 * opts["heartbeat_timeout_s"])
    cfg = DaemonConfig(cluster=cluster, **opts)
    check_config(cfg)
    return cfg


def check_config(cfg: DaemonConfig) -> None:
    """Raise ValidationError on out-of-range settings."""
    # the planning settings are checked where every planner checks them (imported here:
    # the LP's modules are not needed to read a configuration)
    from jitsched.plan.planner import PlanOptions

    PlanOptions(slot_s=cfg.slot_s, objective=cfg.objective,
                **({} if cfg.alpha is None else {"alpha": cfg.alpha}))
    if cfg.host_join not in HOST_JOIN_MODES:
        raise ValidationError(f"[daemon].host_join: expected open or allow-list, got {cfg.host_join!r}")
    if not cfg.host_leave_s > cfg.heartbeat_timeout_s:
        raise ValidationError(f"[daemon].host_leave_s: must exceed heartbeat_timeout_s "
                              f"({cfg.heartbeat_timeout_s:g}; inf: never), got {cfg.host_leave_s!r}")
    if not 0 <= cfg.critical_epsilon < math.inf:
        raise ValidationError(f"[daemon].critical_epsilon: must be a finite number >= 0 (a critical job's JCT "
                              f"bound over its isolated JCT, less 1), got {cfg.critical_epsilon!r}")
    if cfg.critical_floor is not None and (isinstance(cfg.critical_floor, bool) or not (
            isinstance(cfg.critical_floor, (int, float)) and 0 <= cfg.critical_floor < 1)):
        raise ValidationError(f"[daemon].critical_floor: must be within [0, 1) (the share of a critical job's "
                              f"ports kept for traffic the agents do not rank), got {cfg.critical_floor!r}")
    if not 0 < cfg.critical_assumed_share <= 1:
        raise ValidationError(f"[daemon].critical_assumed_share: must be within (0, 1] (the share of a port "
                              f"reserved on before its agent registers), got {cfg.critical_assumed_share!r}")
    if cfg.planning not in PLANNING_MODES:
        raise ValidationError(f"planning: expected incremental or full, got {cfg.planning!r}")
    if not cfg.joint_replan_s >= 0:
        raise ValidationError(f"joint_replan_s: must be >= 0, got {cfg.joint_replan_s!r}")
    if not 0.0 < cfg.max_planner_duty <= 1.0:
        raise ValidationError(f"max_planner_duty: must be within (0, 1], got {cfg.max_planner_duty!r}")
    if cfg.max_increment_transfers < 1:
        raise ValidationError(
            f"max_increment_transfers: must be >= 1, got {cfg.max_increment_transfers!r}")
    for name in ("drift_s", "early_s", "job_lease_s", "planner_timeout_s"):
        if not getattr(cfg, name) > 0:
            raise ValidationError(f"{name}: must be positive (inf: never), got {getattr(cfg, name)!r}")
    for name in ("heartbeat_s", "heartbeat_timeout_s", "resend_s"):
        if not getattr(cfg, name) > 0:
            raise ValidationError(f"{name}: must be positive, got {getattr(cfg, name)!r}")
    if not 0 < cfg.attach_ticket_s < math.inf:
        raise ValidationError(f"[security].attach_ticket_s: must be a finite number of seconds > 0, "
                              f"got {cfg.attach_ticket_s!r}")
    if not MIN_HEARTBEAT_S <= cfg.heartbeat_s < math.inf:
        raise ValidationError(f"heartbeat_s: must be a number of seconds of at least {MIN_HEARTBEAT_S:g} "
                              f"(10 ms), got {cfg.heartbeat_s!r}")
    for name in ("coalesce_s", "replan_period_s"):
        if not 0 <= getattr(cfg, name) < math.inf:
            raise ValidationError(f"{name}: must be a finite number of seconds >= 0 (0: off), "
                                  f"got {getattr(cfg, name)!r}")
    if cfg.heartbeat_timeout_s <= cfg.heartbeat_s:
        raise ValidationError("heartbeat_timeout_s: must exceed heartbeat_s")
    if not 0 <= cfg.metrics_port < 65536:
        raise ValidationError(f"metrics_port: out of range: {cfg.metrics_port}")
    try:
        ipaddress.ip_address(cfg.metrics_address)
    except ValueError:
        raise ValidationError(f"metrics_address: must be an IPv4 or IPv6 address (127.0.0.1, 0.0.0.0, ::), "
                              f"got {cfg.metrics_address!r}") from None
    if not 0 < cfg.plan_retry_s <= cfg.plan_retry_max_s:
        raise ValidationError("plan_retry_s: must be positive and at most plan_retry_max_s, "
                              f"got {cfg.plan_retry_s!r} and {cfg.plan_retry_max_s!r}")
    for name in KEYS["limits"]:
        if name != "max_memory_bytes" and not getattr(cfg, name) > 0:
            raise ValidationError(f"[limits].{name}: must be positive, got {getattr(cfg, name)!r}")
    if len(cfg.cluster) > cfg.max_hosts:
        raise ValidationError(f"[limits].max_hosts: the configuration has {len(cfg.cluster)} hosts, "
                              f"more than max_hosts ({cfg.max_hosts})")
    if cfg.max_memory_bytes < 0:
        raise ValidationError(f"[limits].max_memory_bytes: must be >= 0 (0: derived from the machine), "
                              f"got {cfg.max_memory_bytes!r}")
    for where, q in (("limits.per_client", cfg.per_client),
                     *((f"limits.clients.{n}", q) for n, q in cfg.clients.items())):
        for key in QUOTA_KEYS:
            if not getattr(q, key) > 0:
                raise ValidationError(f"[{where}].{key}: must be positive, got {getattr(q, key)!r}")
        if q.max_bytes_in_flight < cfg.max_message_bytes:
            raise ValidationError(f"[{where}].max_bytes_in_flight: must be at least max_message_bytes "
                                  f"({cfg.max_message_bytes}), got {q.max_bytes_in_flight!r}")
    if cfg.max_peer_queued_bytes < cfg.max_message_bytes:
        raise ValidationError("[limits].max_peer_queued_bytes: must be at least max_message_bytes "
                              f"({cfg.max_message_bytes}), got {cfg.max_peer_queued_bytes!r}")
    check_endpoints(cfg)
    check_ha(cfg)
    check_exposure(cfg)


def check_ha(cfg: DaemonConfig) -> None:
    """Refuse ``[ha]`` settings that cannot work: ValidationError naming the setting."""
    for i, ep in enumerate(cfg.etcd_endpoints):
        if not isinstance(ep, str) or not re.fullmatch(r"https?://[^/\s:]+:\d{1,5}/?", ep):
            raise ValidationError(f"[ha].etcd_endpoints[{i}]: expected http://HOST:PORT (an etcd client URL), "
                                  f"got {ep!r}")
    if not cfg.etcd_prefix.startswith("/") or len(cfg.etcd_prefix) < 2:
        raise ValidationError(f"[ha].etcd_prefix: expected a key prefix such as /jitsched, got {cfg.etcd_prefix!r}")
    if not 1.0 <= cfg.lease_ttl_s <= 600.0:
        raise ValidationError(f"[ha].lease_ttl_s: must be within 1..600 seconds, got {cfg.lease_ttl_s!r}")
    if not 0.01 <= cfg.campaign_s <= cfg.lease_ttl_s:
        raise ValidationError(f"[ha].campaign_s: must be within 0.01 s..lease_ttl_s, got {cfg.campaign_s!r}")
    for name in ("job_endpoint", "agent_endpoint"):
        if cfg.etcd_endpoints and getattr(cfg, name).endswith(":*"):
            raise ValidationError(f"[daemon].{name}: replicas name the leader's endpoints to agents and clients: "
                                  f"give a port, not {getattr(cfg, name)!r}")
    if cfg.etcd_endpoints and cfg.journal:
        raise ValidationError("[ha].etcd_endpoints and [daemon].journal: replicas keep their state in etcd; "
                              "set one of them")


def check_endpoints(cfg: DaemonConfig) -> None:
    """Refuse endpoints the daemon could not serve as written: ValidationError naming the setting."""
    for name in ("job_endpoint", "agent_endpoint"):
        why = endpoint_problem(getattr(cfg, name))
        if why:
            raise ValidationError(f"[daemon].{name} {getattr(cfg, name)!r}: {why}")
    # a port of * or 0 is a free one, picked for each socket on its own
    if cfg.job_endpoint == cfg.agent_endpoint and not cfg.job_endpoint.endswith((":*", ":0")):
        raise ValidationError(f"[daemon].job_endpoint and agent_endpoint: both {cfg.job_endpoint!r}; the job "
                              "and agent sockets need an endpoint each")


def check_exposure(cfg: DaemonConfig) -> None:
    """Refuse plaintext sockets that face the network: ValidationError naming ``--insecure``."""
    if cfg.keys_dir or cfg.insecure:
        return
    for name in ("job_endpoint", "agent_endpoint"):
        ep = getattr(cfg, name)
        if not is_local_endpoint(ep):
            raise ValidationError(
                f"{name} {ep!r} is not a loopback address and no keys are set: anyone who reaches "
                "it could submit and cancel jobs and register as any host. Set [security] keys_dir "
                "(`jitsched keys init DIR`, then `jitsched daemon --keys DIR`), or pass --insecure "
                "([security] insecure = true) to serve it in plaintext anyway")


def load_config(path: str | Path, **overrides: Any) -> DaemonConfig:
    """Read a TOML daemon configuration file; ``overrides`` as in :func:`parse_config`.

    Raises
    ------
    ValidationError
        If the file is missing, not TOML, or a setting is invalid (named in the message).
    """
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValidationError(f"{p}: no such file") from None
    except OSError as exc:
        raise ValidationError(f"{p}: cannot read ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{p}: not valid TOML ({exc})") from None
    dmn = doc.get("daemon")
    if isinstance(dmn, dict) and isinstance(dmn.get("journal"), str) and dmn["journal"]:
        doc["daemon"] = {**dmn, "journal": str(p.parent / Path(dmn["journal"]).expanduser())}
    sec = doc.get("security")
    if isinstance(sec, dict) and isinstance(sec.get("keys_dir"), str) and sec["keys_dir"]:
        # a relative key directory is the config file's neighbour, wherever the daemon starts
        doc["security"] = {**sec, "keys_dir": str(p.parent / Path(sec["keys_dir"]).expanduser())}
    return parse_config(doc, **overrides)


def config_doc(cfg: DaemonConfig) -> dict:
    """The TOML document of ``cfg`` (inverse of :func:`parse_config`)."""
    doc: dict[str, Any] = {"hosts": cfg.cluster.to_dict()["hosts"]}
    for name in SECTIONS:
        # TOML has no null: a setting left to the policy is left out
        doc[name] = {k: getattr(cfg, k) for k in KEYS[name] if getattr(cfg, k) is not None}
    doc["limits"]["per_client"] = asdict(cfg.per_client)
    if cfg.clients:
        doc["limits"]["clients"] = {n: asdict(q) for n, q in cfg.clients.items()}
    doc["scheduler"]["policy_options"] = dict(cfg.policy_options)
    if not cfg.policy_options:
        del doc["scheduler"]["policy_options"]
    return doc


__all__ = ["ALLOW_LIST", "ANONYMOUS", "FULL", "HOST_JOIN_MODES", "OPEN", "INCREMENTAL", "KEYS", "MIN_HEARTBEAT_S",
           "PLANNING_MODES", "QUOTA_KEYS", "SECTIONS", "ClientQuota", "DaemonConfig", "HaOptions", "SecurityOptions",
           "check_config", "check_endpoints", "check_exposure", "check_ha", "config_doc", "load_config", "parse_config"]
