"""Options of a host agent: one dataclass, taken by :class:`jitsched.agents.agent.Agent` and the flags of ``jitsched agent`` built from it."""

from __future__ import annotations

from dataclasses import dataclass

from jitsched.agents.backends.base import (
    BACKGROUND_FLOOR,
    FLOW_FLOOR,
    FLOW_FLOORS_SUM,
    INGRESS_SHARE,
    check_background_floor,
    check_floor,
)
from jitsched.errors import ValidationError
from jitsched.optspec import check_choice, check_range, check_types, option

# The backends the command offers (tc-ingress comes with ``ingress``). Listed here
# rather than read from the registry: the tc backend loads pyroute2 (~0.4 s) and the
# CLI builds these flags for every command it runs.
CLI_BACKENDS = ("pacing", "tc", "record")

# A flow the schedule holds behind higher ranks has its window queued at its floor
# rate (FLOW_FLOOR); its retransmission timer fires, the retransmissions wait or are
# dropped too, and the timer doubles each time. On the quick testbed scenario with floors
# of 0.5 % of the line (ss -ti every 0.25 s) promoted flows then sat idle with cwnd 1 for
# 1.8 to 5.5 s, their timers at 1.8-9.6 s; capped at the kernel's floor of 1 s, a
# promoted flow resumes within a second. Quick scenario, quiet machine, runs
# alternating: mean JCT 7.88/8.28/7.90 s with the cap against 8.67/8.32/8.06 s without.
RTO_MAX_MS = 1000
# The least retransmission timeout (TCP_RTO_MIN_US; the kernel's default 200 ms, rounded
# to its tick). A DL transfer of a few MB that loses its last packets in a switch port's
# FIFO waits that long at 1-10 ms RTTs; the timeout stays above srtt + 4 rttvar, so flows
# held at their floor (seconds of RTT) keep theirs. Quick scenario, quiet machine, runs
# alternating with the 1 s cap on both sides: mean JCT 8.32/7.81/7.80/7.79/7.88/7.76 s
# with 10 ms, 8.25/8.30/7.99/7.70/8.13/7.84 s with the kernel's 200 ms (4 pairs of 6
# faster, means 7.89 vs 8.04 s).
RTO_MIN_MS = 10.0


@dataclass(frozen=True)
class AgentOptions:
    """How a host's agent enforces its schedules: the backend and its device, sockets' timers,
    ingress, reconnection and leaving; the defaults of :class:`jitsched.agents.agent.Agent`.

    The flag fields are those of ``jitsched agent`` (the help texts are
    theirs); the agent's identity and plumbing (``--host``, ``--daemon``,
    keys, the local socket) are the command's own and the agent's keywords.

    The backend defaults to ``pacing``, the one that enforces a schedule on
    any Linux host without privileges (``SO_MAX_PACING_RATE`` on the
    registered sockets): an agent made with the defaults shapes traffic, as
    ``jitsched agent`` does. ``record`` enforces nothing (it records the
    rates: tests, benches of the agent's own work) and is asked for by name.
    """

    backend: str = option("pacing", "enforcement backend (default %(default)s)", choices=CLI_BACKENDS)
    dev: str | None = option(None, "tc backend: the network device it shapes (required with --backend tc)")
    rto_max_ms: int | None = option(
        RTO_MAX_MS, "cap on the retransmission timeout of registered outbound sockets, 1000..120000 ms "
                    "(default %(default)s: a flow held behind higher ranks resumes within a second of its "
                    "promotion); 0: leave the sockets as they are", metavar="MS")
    rto_min_ms: float | None = option(
        RTO_MIN_MS, "least retransmission timeout of the same sockets, 1..200 ms (default %(default)s: a "
                    "transfer that loses its last packets does not wait the kernel's 200 ms); 0: the "
                    "kernel's", metavar="MS")
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
    flow_floor: float = option(
        FLOW_FLOOR, "tc backend: share of each port, in [0, 1), a ranked flow held behind higher ranks is "
                    "still guaranteed, so its connection keeps its ACK clock (the held flows' floors come out "
                    "of the flows ranked above them; default %(default)s)", metavar="SHARE")
    flow_floors_sum: float = option(
        FLOW_FLOORS_SUM, "tc backend: share of each port, in [0, 1), the ranked flows' floors add up to at "
                         "most: past it each gets an equal part (default %(default)s; 0: no bound)",
        metavar="SHARE")
    dl_dscp: str | None = option(
        None, "tc backend: the DSCP values (0-63, comma-separated) the jobs' DL packets carry (a job "
              "runner's tos): those no flow class takes yet -- small transfers, and a flow's first packets, "
              "which reach its receiver before the receiver registers it -- go ahead of the background, "
              "and the agent keeps [daemon] critical_floor on a critical job's ports; default: none",
        metavar="LIST")
    leave_on_exit: bool = option(
        False, "on exit, tell the daemon this host leaves the cluster (its jobs with work left here end failed)")
    port_dev: str | None = option(
        None, "the host's port whose traffic no schedule covers is measured and sent with every "
              "heartbeat (unscheduled_Bps), in the backend's netns; None: the backend's dev", flag=False)
    reconnect_s: float = option(
        3.0, "silence from the daemon, seconds, after which the agent reconnects and registers again "
             "(with several endpoints, at most three heartbeats: then it tries the next)", flag=False)

    def __post_init__(self) -> None:
        check_types(self)
        check_choice(self, "backend")
        if self.ingress and self.backend != "tc":
            raise ValidationError(f"ingress: needs backend tc (the ingress is ordered with tc), got {self.backend!r}")
        check_range(self, "ingress_share", 0.0, 1.0, open_lo=True)
        if self.rto_max_ms and not 1000 <= self.rto_max_ms <= 120_000:
            raise ValidationError(f"rto_max_ms: must be in 1000..120000 (the kernel's range), got {self.rto_max_ms}")
        if self.rto_min_ms and not 1.0 <= self.rto_min_ms <= 200.0:
            raise ValidationError(f"rto_min_ms: must be in 1..200 (at most the kernel's default), "
                                  f"got {self.rto_min_ms}")
        check_range(self, "reconnect_s", 0.0, open_lo=True)
        check_background_floor(self.background_floor)
        check_floor(self.flow_floor, "flow_floor")
        check_floor(self.flow_floors_sum, "flow_floors_sum")
        self.dl_tos()

    def dl_tos(self) -> tuple[int, ...]:
        """The TOS bytes of :attr:`dl_dscp` (each DSCP value shifted past the ECN bits)."""
        if self.dl_dscp is None:
            return ()
        try:
            values = [int(v) for v in self.dl_dscp.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or not all(0 <= v <= 63 for v in values):
            raise ValidationError(f"dl_dscp: expected DSCP values 0-63 separated by commas, got {self.dl_dscp!r}")
        return tuple(dict.fromkeys(v << 2 for v in values))

    @property
    def enforce_ingress(self) -> bool:
        """Whether the agent orders its host's ingress (``ingress``; None: with backend tc)."""
        return self.backend == "tc" if self.ingress is None else self.ingress

    def backend_options(self) -> dict:
        """Keywords of the backend's constructor these options set (the tc backend's ``dev``, ``borrow``,
        ``background_floor``, ``flow_floor``, ``flow_floors_sum``, ``dl_tos``)."""
        tc = {"dev": self.dev} if self.dev else {}
        if self.backend == "tc":
            # the plan is a floor and flows borrow what it leaves, as the policies' backfill
            # has it; ranked flows borrow by their level whatever this says
            tc["borrow"] = True
            tc["background_floor"] = self.background_floor
            tc["flow_floor"] = self.flow_floor
            tc["flow_floors_sum"] = self.flow_floors_sum
            if self.dl_dscp is not None:
                tc["dl_tos"] = self.dl_tos()
        return tc

    def ingress_options(self) -> dict | None:
        """Keywords of the ``tc-ingress`` backend's constructor, None if the ingress is not ordered."""
        return self.backend_options() | {"share": self.ingress_share} if self.enforce_ingress else None


__all__ = ["CLI_BACKENDS", "RTO_MAX_MS", "RTO_MIN_MS", "AgentOptions"]
