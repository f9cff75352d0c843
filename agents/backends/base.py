"""The enforcement-backend interface: apply one slot's rates on this host."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from jitsched.errors import ValidationError

# Strict-priority levels a backend gives ranked flows (FlowRate.prio): HTB has 8
# borrowing priorities, and the last is the background's.
FLOW_LEVELS = 7
# Share of a host's ingress rate its tc-ingress IFB is shaped to while inbound flows
# are scheduled (the link's own rate otherwise): low enough that inbound traffic
# queues in the host's IFB, where the ranks apply, rather than in the switch port's
# FIFO, where TCP shares it; high enough to cost little. Testbed: a file alone on two
# hosts (31 MB, 100 Mbit/s links) got 89.7, 89.9 Mbit/s with this 2 % held throughout
# against 91.7, 91.7 under plain TCP, which is why it is lifted while nothing inbound
# is scheduled; 0.995 did not give the files more (quick, ABBA: 45.2, 45.2 Mbit/s
# against 45.8, 44.4 at 0.98; jobs 6.19, 6.25 s against 5.99, 6.14 s).
INGRESS_SHARE = 0.98
# Share of each port (egress, and the shaped ingress) guaranteed to traffic no flow
# class matches -- everything the daemon does not rank -- while ranked flows are
# backlogged; the ranked flows borrow it back whenever that traffic leaves it idle.
# The smallest share swept with which no unannounced file went 1 s without progress
# on the testbed (`python -m bench.bench_floor --json`, one run per floor on a loaded
# machine; docs/figures/floor.json): with none, a file stalled 2.1 s on quick and 4.8 s
# on paper-mini; with 0.05, 0.38 s and 0.78 s (plain TCP's own: 0.44 s, 0.79 s). The
# files' mean goodput barely moved with the share (quick 44.9-46.3 Mbit/s from 0 to 0.3)
# while the jobs paid for it (the simulator's mean JCT, quick: 5.58 s at 0, 5.74 at
# 0.05, 5.97 at 0.1, 8.23 at 0.3).
BACKGROUND_FLOOR = 0.05
# Share of each port a ranked flow held behind higher ranks is still guaranteed (its HTB
# class's rate), so its connection keeps an ACK clock and a bounded retransmission
# timer. Every held flow takes its floor from the flows ranked above it, so the floors
# of many held flows add up. Testbed, jit, runs alternating by floor, mean JCT (`jitsched
# testbed run --scenario S --flow-floor F --json`), at 0.005 / 0.001 / 0.0002:
#   mixed seed 0: 19.17, 19.43 s / 18.91, 18.86 s / 18.50, 18.61 s
#   mixed seed 1: 16.30, 16.30 s / 16.04, 16.09 s / 15.84, 16.08 s
#   sharded:      12.35, 12.43 s / 11.81, 11.99 s / 12.01 s
#   rings:        11.55, 11.96 s / 11.37, 11.19 s / 10.67, 11.81 s
#   paper-mini:   5.98, 5.98 s   / 6.08, 5.94 s   / 6.33, 5.99 s
#   classes, the normal jobs: 11.48, 11.45 s / 10.26, 10.45 s; the critical job over its
#   JCT alone 1.108, 1.112 / 1.126, 1.126
# but on quick 0.001 is bimodal: in 3 runs of 6 (5.90-5.91 s in the others) a VGG16
# job's last forward bytes end up held for 5 s behind the other VGG16 job's gradients
# (17.8 s in the run looked into, against 12.4-12.5 s; mean JCT 6.49-6.83 s), in none of
# 7 runs at 0.005 (5.89-5.96 s). The lower floor helps many-flow workloads by 2-10 % and costs
# quick 6 % in expectation, so the default stays at 0.005.
FLOW_FLOOR = 0.005
# Share of each port the ranked flows' floors add up to at most: with more ranked flows
# than FLOW_FLOORS_SUM / FLOW_FLOOR on a port, each gets an equal part of it. Testbed, jit,
# runs alternating (`jitsched testbed run --scenario S --policy jit --seed 0
# [--flow-floors-sum 0] --json`), mean JCT with this sum / without one: quick 5.90, 5.94,
# 5.90, 5.93 s / 5.95, 5.92, 5.90 s (no 5-s hold, as at 0.005 alone); sharded 11.84, 11.67,
# 11.90, 12.18 s / 12.26, 12.50, 12.33, 12.38 s; mixed seed 0 19.28, 18.91, 19.43 s /
# 19.21, 19.68 s, seed 1 15.99, 15.91 s / 16.19, 16.57 s.
FLOW_FLOORS_SUM = 0.025


# The device MTU the tc backend assumes (bytes).
MTU = 1500


def payload_share(mtu: int = MTU) -> float:
    """The share of a link's bytes a bulk TCP flow's payload takes: per MTU-sized segment,
    ``mtu - 52`` bytes of payload (IPv4 and TCP with timestamps) in ``mtu + 14`` bytes of
    frame (Ethernet header). 0.956 at MTU 1500."""
    return (mtu - 52) / (mtu + 14)


def check_floor(share: float, name: str) -> None:
    """Raise ValidationError naming ``name`` unless ``share`` is a floor: a number in [0, 1)."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0.0 <= share < 1.0:
        raise ValidationError(f"{name}: must be within [0, 1), got {share!r}")


def check_background_floor(share: float) -> None:
    """Raise ValidationError unless ``share`` is a background floor: a number in [0, 1)."""
    check_floor(share, "background_floor")


@dataclass(frozen=True)
class FlowRate:
    """One scheduled flow leaving this host and its rate for the current slot.

    ``flow_id`` is ``"<job_id>/<transfer_id>"``; addresses and ports identify
    the flow's TCP connection when known (0 / "" otherwise); ``rate_Bps`` is
    in bytes/s. ``prio`` is the flow's strict-priority level (0 first) when
    the schedule ranks flows: it borrows spare capacity by that level, ahead
    of background traffic; None: the backend's own borrowing rule.
    """

    flow_id: str
    rate_Bps: float
    src_addr: str = ""
    src_port: int = 0
    dst_addr: str = ""
    dst_port: int = 0
    prio: int | None = None


class Backend(ABC):
    """Applies per-slot rates; one instance per agent."""

    name: ClassVar[str] = ""

    def __init__(self, line_rate_Bps: float, **options) -> None:
        self.line_rate_Bps = float(line_rate_Bps)

    @abstractmethod
    def apply(self, flows: list[FlowRate], leftover_Bps: float) -> None:
        """Enforce ``flows``' rates and give ``leftover_Bps`` (guaranteed) to background traffic.

        Flows absent from ``flows`` are no longer scheduled (their limits go).
        """

    def close(self) -> None:
        """Remove everything this backend installed."""

    # Optional, added for socket-level backends (backwards-compatible: defaults do nothing).
    # Whether ``apply`` should only see flows whose TCP endpoints are known, i.e. those
    # registered here (a backend that matches packets must never get an empty match, which
    # would catch every packet; one that acts on registered sockets needs no other flow).
    # False: every flow the schedule lists, which costs a walk of the schedule per slot.
    needs_endpoints: ClassVar[bool] = True

    # Whether cap_destinations holds anything back (False: the caps are not enforced here).
    caps_destinations: ClassVar[bool] = False
    # The addresses of the last cap_destinations call that are not held (an address the
    # backend cannot match); the agent reports its caps unenforced when there are any.
    caps_refused: tuple[str, ...] = ()
    # Whether only IPv4 connections can be shaped (packet filters on the IPv4 header): the
    # agent refuses to register a connection of another family.
    ipv4_only: ClassVar[bool] = False

    def cap_destinations(self, caps: dict[str, float]) -> None:
        """From the next :meth:`apply` on, hold the traffic no flow class takes towards each
        address of ``caps`` to its bytes/s (two full frames' worth at least); traffic to
        other addresses is not held. Default: nothing is held."""

    # Whether hold_floor changes anything (False: the backend keeps no background floor,
    # or cannot keep DL packets out of it; a property where it depends on the instance).
    holds_floor: ClassVar[bool] = False

    def hold_floor(self, share: float | None) -> None:
        """From the next :meth:`apply` on, keep ``share`` of the line rate for the traffic no
        flow class takes, where that is below the backend's own background floor; None:
        its own floor again. Default: nothing changes."""

    def attach(self, flow_id: str, sock) -> None:
        """A local process registered ``sock`` (a connected TCP socket) as flow ``flow_id``."""

    def detach(self, flow_id: str) -> None:
        """Flow ``flow_id``'s socket is gone; forget it."""

    def scheduled_bytes(self) -> int | None:
        """Bytes so far through this backend's classes of scheduled traffic; None: it has none.

        The agent then counts the payload of the flows it schedules instead
        (:class:`jitsched.agents.capacity.UnscheduledMeter`).
        """
        return None


BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make ``cls`` available by ``cls.name``.

    Raises
    ------
    ValueError
        ``cls`` has no name, or another class is registered by it (as
        :func:`jitsched.policies.base.register_policy` refuses).
    """
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in BACKENDS and BACKENDS[cls.name] is not cls:
        raise ValueError(f"backend {cls.name!r} registered twice")
    BACKENDS[cls.name] = cls
    return cls
