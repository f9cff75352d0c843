"""Options of a host agent as ``jitsched agent`` runs it: one dataclass, the command's flags built from it."""

from __future__ import annotations

from dataclasses import dataclass

from jitsched.agents.backends.base import BACKGROUND_FLOOR, INGRESS_SHARE, check_background_floor
from jitsched.errors import ValidationError
from jitsched.optspec import check_choice, check_range, check_types, option

# The backends the command offers (tc-ingress comes with ``ingress``). Listed here
# rather than read from the registry: the tc backend loads pyroute2 (~0.4 s) and the
# CLI builds these flags for every command it runs.
CLI_BACKENDS = ("pacing", "tc", "record")


@dataclass(frozen=True)
class AgentOptions:
    """How a host's agent enforces its schedules: the backend and its device, sockets' timers, ingress.

    Every field is a flag of ``jitsched agent`` (the help texts are theirs);
    the agent's identity and plumbing (``--host``, ``--daemon``, keys, the
    local socket) are the command's own. None means the agent's default.
    ``rto_max_ms`` and ``rto_min_ms`` are checked by
    :class:`jitsched.agents.agent.Agent`, which Python callers use directly.
    """

    backend: str = option("pacing", "enforcement backend (default %(default)s)", choices=CLI_BACKENDS)
    dev: str | None = option(None, "tc backend: network device")
    rto_max_ms: int | None = option(
        None, "cap on the retransmission timeout of registered outbound sockets, 1000..120000 ms "
              "(default 1000: a flow held behind higher ranks resumes within a second of its "
              "promotion); 0: leave the sockets as they are", metavar="MS")
    rto_min_ms: float | None = option(
        None, "least retransmission timeout of the same sockets, 1..200 ms (default 10: a transfer "
              "that loses its last packets does not wait the kernel's 200 ms); 0: the kernel's", metavar="MS")
    ingress: bool | None = option(
        None, "tc backend: order what this host receives too (tc-ingress on an IFB fed by --dev; "
              "receivers register inbound sockets), or not (--no-ingress); default: on with --backend tc, "
              "where the flows of several senders into one host would otherwise meet in the switch "
              "port's FIFO and TCP, not the ranks, would share the port")
    ingress_share: float = option(
        INGRESS_SHARE, "with ingress: while inbound flows are scheduled the IFB is shaped to this share of "
                       "the ingress rate the daemon's cluster gives this host, so the queue forms in the host "
                       "(the link's own rate otherwise; default %(default)s)", metavar="SHARE")
    background_floor: float = option(
        BACKGROUND_FLOOR, "tc backend: share of each port, in [0, 1), guaranteed to traffic jitsched does not "
                          "rank while ranked flows are backlogged (they borrow it back when that traffic "
                          "leaves it idle; default %(default)s)", metavar="SHARE")

    def __post_init__(self) -> None:
        check_types(self)
        check_choice(self, "backend")
        if self.ingress and self.backend != "tc":
            raise ValidationError(f"ingress: needs backend tc (the ingress is ordered with tc), got {self.backend!r}")
        check_range(self, "ingress_share", 0.0, 1.0, open_lo=True)
        check_background_floor(self.background_floor)

    @property
    def enforce_ingress(self) -> bool:
        """Whether the agent orders its host's ingress (``ingress``; None: with backend tc)."""
        return self.backend == "tc" if self.ingress is None else self.ingress

    def agent_kwargs(self) -> dict:
        """Keywords of :class:`jitsched.agents.agent.Agent` for these options (those left None omitted)."""
        tc = {"dev": self.dev} if self.dev else {}
        if self.backend == "tc":
            # the plan is a floor and flows borrow what it leaves, as the policies' backfill
            # has it (the testbed's agents, since the first tc runs); ranked flows borrow
            # by their level whatever this says
            tc["borrow"] = True
            tc["background_floor"] = self.background_floor
        out: dict = {"backend": self.backend, "backend_options": dict(tc)}
        if self.enforce_ingress:
            out["ingress"] = tc | {"share": self.ingress_share}
        out |= {k: getattr(self, k) for k in ("rto_max_ms", "rto_min_ms") if getattr(self, k) is not None}
        return out


__all__ = ["CLI_BACKENDS", "AgentOptions"]
