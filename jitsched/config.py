"""The daemon's TOML configuration: cluster hosts, endpoints, slot length, alpha, objective."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jitsched.errors import ValidationError
from jitsched.model import Cluster, parse_cluster
from jitsched.planner import PlanOptions
from jitsched.protocol import MAX_MESSAGE_BYTES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


FULL = "full"
INCREMENTAL = "incremental"
PLANNING_MODES = (INCREMENTAL, FULL)


@dataclass(frozen=True)
class DaemonConfig:
    """Everything the daemon needs; times in seconds, sizes in bytes.

    The TOML file holds the native cluster map at top level (``[[hosts]]``
    tables with ``name``, ``egress_bps``, ``ingress_bps``, ``address``), as the
    testbed writes it, plus optional ``[daemon]`` and ``[scheduler]`` tables
    whose keys are this class's fields.

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
    and back-to-back ones take a core from the hosts' agents and jobs.
    """

    cluster: Cluster
    job_endpoint: str = "tcp://127.0.0.1:5555"
    agent_endpoint: str = "tcp://127.0.0.1:5556"
    metrics_port: int = 0  # 0: no Prometheus endpoint
    policy: str = "jit"
    slot_s: float = 0.1
    # None: the policy's own default (jit: 0, no LP reservations; jit-paper: 0.4)
    alpha: float | None = None
    objective: str = "balanced"
    heartbeat_s: float = 0.5
    heartbeat_timeout_s: float = 2.0
    resend_s: float = 0.2
    replan_period_s: float = 0.0  # 0: no periodic re-solve
    drift_s: float = 0.5  # a transfer this much behind its plan triggers a re-solve
    # a transfer this much ahead of its LAT triggers a re-solve (inf: never): the plan
    # paced the job's later transfers for a later arrival, and they now hold the job up
    early_s: float = math.inf
    coalesce_s: float = 0.0  # wait this long for more arrivals before solving
    planning: str = INCREMENTAL
    joint_replan_s: float = 1.0
    max_increment_transfers: int = 256
    # full re-solves may keep the planner busy at most this fraction of the time: after
    # one that took d seconds the next starts no sooner than d * (1 / duty - 1) later
    max_planner_duty: float = 1.0
    max_message_bytes: int = MAX_MESSAGE_BYTES
    max_jobs: int = 10_000
    planner_process: bool = True  # full re-solves in a child process (False: a thread)
    policy_options: dict = field(default_factory=dict)

    def with_(self, **changes: Any) -> DaemonConfig:
        """A copy with ``changes`` applied."""
        return replace(self, **changes)


_DAEMON_KEYS = {"job_endpoint": str, "agent_endpoint": str, "metrics_port": int,
                "heartbeat_s": float, "heartbeat_timeout_s": float, "resend_s": float,
                "max_message_bytes": int, "max_jobs": int, "planner_process": bool}
_SCHED_KEYS = {"policy": str, "slot_s": float, "alpha": float, "objective": str,
               "replan_period_s": float, "drift_s": float, "early_s": float, "coalesce_s": float,
               "planning": str, "joint_replan_s": float, "max_increment_transfers": int,
               "max_planner_duty": float, "policy_options": dict}


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


def parse_config(doc: dict) -> DaemonConfig:
    """Validate a parsed TOML document and return a :class:`DaemonConfig`."""
    extra = set(doc) - {"hosts", "daemon", "scheduler"}
    if extra:
        raise ValidationError(f"unknown top-level key(s) {sorted(extra)}; expected hosts, daemon, scheduler")
    cluster = parse_cluster({"hosts": doc.get("hosts", [])}, "hosts")
    opts = _section(doc, "daemon", _DAEMON_KEYS) | _section(doc, "scheduler", _SCHED_KEYS)
    cfg = DaemonConfig(cluster=cluster, **opts)
    check_config(cfg)
    return cfg


def check_config(cfg: DaemonConfig) -> None:
    """Raise ValidationError on out-of-range settings."""
    # the planning settings are checked where every planner checks them
    PlanOptions(slot_s=cfg.slot_s, objective=cfg.objective,
                **({} if cfg.alpha is None else {"alpha": cfg.alpha}))
    if cfg.planning not in PLANNING_MODES:
        raise ValidationError(f"planning: expected incremental or full, got {cfg.planning!r}")
    if not cfg.joint_replan_s >= 0:
        raise ValidationError(f"joint_replan_s: must be >= 0, got {cfg.joint_replan_s!r}")
    if not 0.0 < cfg.max_planner_duty <= 1.0:
        raise ValidationError(f"max_planner_duty: must be within (0, 1], got {cfg.max_planner_duty!r}")
    if cfg.max_increment_transfers < 1:
        raise ValidationError(
            f"max_increment_transfers: must be >= 1, got {cfg.max_increment_transfers!r}")
    for name in ("drift_s", "early_s"):
        if not getattr(cfg, name) > 0:
            raise ValidationError(f"{name}: must be positive (inf: never), got {getattr(cfg, name)!r}")
    for name in ("heartbeat_s", "heartbeat_timeout_s", "resend_s"):
        if not getattr(cfg, name) > 0:
            raise ValidationError(f"{name}: must be positive")
    if cfg.heartbeat_timeout_s <= cfg.heartbeat_s:
        raise ValidationError("heartbeat_timeout_s: must exceed heartbeat_s")
    if not 0 <= cfg.metrics_port < 65536:
        raise ValidationError(f"metrics_port: out of range: {cfg.metrics_port}")


def load_config(path: str | Path) -> DaemonConfig:
    """Read a TOML daemon configuration file.

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
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{p}: not valid TOML ({exc})") from None
    return parse_config(doc)


def config_doc(cfg: DaemonConfig) -> dict:
    """The TOML document of ``cfg`` (inverse of :func:`parse_config`)."""
    daemon = {k: getattr(cfg, k) for k in _DAEMON_KEYS}
    # TOML has no null: a setting left to the policy is left out
    sched = {k: getattr(cfg, k) for k in _SCHED_KEYS
             if k != "policy_options" and getattr(cfg, k) is not None}
    if cfg.policy_options:
        sched["policy_options"] = dict(cfg.policy_options)
    return {"hosts": cfg.cluster.to_dict()["hosts"], "daemon": daemon, "scheduler": sched}


__all__ = ["FULL", "INCREMENTAL", "PLANNING_MODES", "DaemonConfig", "check_config", "config_doc",
           "load_config", "parse_config"]
