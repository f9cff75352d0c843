"""Options of a host agent as ``jitsched agent`` runs it: one dataclass, the command's flags built from it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jitsched.errors import ValidationError
from jitsched.optspec import check_choice, check_types, option

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
    ingress: bool = option(
        False, "tc backend: order what this host receives too (tc-ingress on an IFB fed by --dev), at "
               "the ingress rate the daemon's cluster gives this host: set it a little below the link "
               "(98 %%), or the switch port stays the queue; receivers register inbound sockets")
    link_mbit: float | None = option(
        None, "with --ingress: the link's own rate, Mbit/s; while no inbound flow is scheduled the IFB "
              "runs at it, so unscheduled traffic gets the whole port (default: always the ingress rate)",
        metavar="MBIT")

    def __post_init__(self) -> None:
        check_types(self)
        check_choice(self, "backend")
        if self.ingress and (self.backend != "tc" or not self.dev):
            raise ValidationError("ingress: needs backend tc and a dev (the link whose ingress to order)")
        if self.link_mbit is not None and not (self.ingress and math.isfinite(self.link_mbit)
                                               and self.link_mbit > 0):
            raise ValidationError(f"link_mbit: must be a positive rate, with ingress, got {self.link_mbit!r}")

    def agent_kwargs(self) -> dict:
        """Keywords of :class:`jitsched.agents.agent.Agent` for these options (those left None omitted)."""
        dev = {"dev": self.dev} if self.dev else {}
        out: dict = {"backend": self.backend, "backend_options": dev}
        if self.ingress:
            out["ingress"] = dev | ({"idle_rate_Bps": self.link_mbit * 1e6 / 8} if self.link_mbit else {})
        out |= {k: getattr(self, k) for k in ("rto_max_ms", "rto_min_ms") if getattr(self, k) is not None}
        return out


__all__ = ["CLI_BACKENDS", "AgentOptions"]
