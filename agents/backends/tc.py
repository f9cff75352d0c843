"""The ``tc`` enforcement backends: one HTB class per scheduled flow, changed over rtnetlink in batches.

:class:`TcBackend` keeps the HTB layout of :mod:`jitsched.agents.backends.htb`
on a device's egress (creating it, or adopting the link shaper the testbed
installed) and adds, changes and removes the flow classes ``1:m`` and their
u32 filters, one netlink batch (:mod:`jitsched.agents.backends.netlink`) per
slot. :class:`TcIngressBackend` does the same on an IFB device fed by a
link's ingress.
"""

# One module although past 500 lines: the ingress backend is the egress backend on an
# IFB device, with the redirect that feeds it; both keep one class layout.

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from jitsched.agents.backends.base import (
    FLOW_FLOOR,
    FLOW_FLOORS_SUM,
    FLOW_LEVELS,
    INGRESS_SHARE,
    MTU,
    Backend,
    FlowRate,
    check_background_floor,
    check_floor,
    payload_share,
    register_backend,
)
from jitsched.agents.backends.htb import (
    ACK_MINOR,
    ACK_RESERVE,
    BG_MINOR,
    CAP_FILTER_PRIO,
    DL_FILTER_PRIO,
    DL_LEAF_HANDLE,
    DL_MINOR,
    DL_RESERVE,
    FLOW_MINOR_BASE,
    FLOW_MINOR_MAX,
    LINK_CLASS,
    MIN_BURST_B,
    ROOT_HANDLE,
    burst_bytes,
    install_ack_class,
    install_root,
    leaf_class_msgs,
    reserve_Bps,
    tos_keys,
)
from jitsched.agents.backends.netlink import (
    ETH_P_IP,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    RTM_DELQDISC,
    RTM_DELTCLASS,
    RTM_DELTFILTER,
    RTM_GETQDISC,
    RTM_GETTCLASS,
    RTM_NEWTCLASS,
    RTM_NEWTFILTER,
    TC_H_ROOT,
    NetlinkError,
    TcSocket,
    htb_class_attrs,
    tcmsg,
    u32_dst_keys,
    u32_filter_attrs,
    u32_keys,
)
from jitsched.netns import ifindex_in, ns_command, run

FLOW_BORROW_PRIO = 2  # with borrow=True, flow classes borrow after the background class (prio 1)
SPARE_MODES = ("background", "shared")  # who borrows first with borrow=True (TcBackend's spare)
# Strict-priority levels (FlowRate.prio): HTB borrows by class prio 0..7, 0 first.
MAX_FLOW_PRIO = FLOW_LEVELS - 1
BG_LAST_PRIO = MAX_FLOW_PRIO + 1  # the background class's prio while the schedule ranks flows (HTB's last, 7)


@dataclass
class _Installed:
    minor: int
    rate_Bps: int
    keys: list[tuple[int, int, int]]
    prio: int | None = None


@register_backend
class TcBackend(Backend):
    """HTB classes per scheduled flow on one device's egress, changed in one netlink batch per slot.

    Parameters
    ----------
    line_rate_Bps : float
        Link rate, bytes/s: the ceiling of everything, and of background traffic.
    dev : str
        Egress device (default ``eth0``, the testbed hosts' link).
    netns : str or None
        Named network namespace of ``dev`` (None: the agent's own).
    flow_floor : float
        Floor of a scheduled flow's rate, a share of ``line_rate_Bps`` in
        [0, 1) (default :data:`jitsched.agents.backends.base.FLOW_FLOOR`): a
        class at rate zero would stall the TCP connection into exponential
        retransmission back-off, delaying it long after its rate comes back.
        0: two full frames' worth, the least HTB class.
    flow_floors_sum : float
        Share of ``line_rate_Bps``, in [0, 1), the floors of the flows ranked
        by level (``FlowRate.prio``) add up to at most: past it each gets an
        equal part (two full frames' worth at least). 0: no such bound.
    burst_s : float
        Token-bucket depth of each class in seconds of its rate.
    mtu : int
        Device MTU, bytes: scheduled rates count TCP payload while HTB counts
        whole frames, so each flow's class gets ``rate * (mtu + 14) / (mtu - 52)``
        (Ethernet header, and IPv4 + TCP with timestamps per segment).
    borrow : bool
        False (default): a flow's rate is also its ceiling. True: the plan is
        a floor, as the jit policy's backfill has it; flow classes may borrow
        up to the line rate what the background class (borrowing first) leaves
        idle, including flows held at the floor before their first slot.
    spare : {"background", "shared"}
        With ``borrow``, who gets capacity no class's rate holds:
        ``background`` (default) the background class first, flows after it,
        as the jit policy's backfill has it (it assumes jobs follow their
        plan); ``shared`` flows and the background class in turn (HTB's
        round robin by quantum), so a job running behind its plan is not held
        to floors made for a timeline it does not follow.
        A flow with a strict-priority level (``FlowRate.prio``) borrows up to
        the line rate at that level (capped at :data:`MAX_FLOW_PRIO`) whatever
        ``borrow`` and ``spare`` say, and while any flow has one the background
        class borrows last (:data:`BG_LAST_PRIO`).
    dl_tos : int, sequence of int, or None
        DL packets carry this TOS byte, or one of these (DSCP bits matched):
        those no flow class matches (transfers too small to register with the
        agent, and a registered flow's packets before its registration reaches
        the agent: a receiver learns a flow's name from its first bytes) go to a
        class of their own (1:5) guaranteed :data:`DL_RESERVE` of the line rate
        (the flows' rates are scaled to leave it) that borrows first, instead of
        queueing behind the background in class 1:2. None (default): no such class.
    background_floor : float
        Share of ``line_rate_Bps``, in [0, 1), the background class (traffic no
        flow class matches) is guaranteed while flows are scheduled, however
        they are ranked; the flows' rates are scaled to leave it, and they
        borrow it back while the background leaves it idle. 0 (default): two
        full frames' worth, the least HTB class; ``jitsched agent`` passes
        :data:`jitsched.agents.backends.base.BACKGROUND_FLOOR` unless told otherwise.
    """

    name = "tc"

    def __init__(self, line_rate_Bps: float, *, dev: str = "eth0", netns: str | None = None,
                 flow_floor: float = FLOW_FLOOR, flow_floors_sum: float = FLOW_FLOORS_SUM,
                 burst_s: float = 0.001, mtu: int = MTU,
                 borrow: bool = False, spare: str = "background", dl_tos: int | Sequence[int] | None = None,
                 background_floor: float = 0.0, **options) -> None:
        if spare not in SPARE_MODES:
            raise ValueError(f"tc backend: spare must be one of {SPARE_MODES}, got {spare!r}")
        check_background_floor(background_floor)
        check_floor(flow_floor, "flow_floor")
        check_floor(flow_floors_sum, "flow_floors_sum")
        super().__init__(line_rate_Bps, **options)
        self.dev, self.netns, self.burst_s = dev, netns, float(burst_s)
        self.borrow = bool(borrow)
        # the background class borrows at prio 1: flows after it, or beside it
        self.flow_prio = FLOW_BORROW_PRIO if spare == "background" else 1
        self.wire_factor = 1.0 / payload_share(mtu)
        self.flow_floor, self.flow_floors_sum = float(flow_floor), float(flow_floors_sum)
        self.min_rate_Bps = reserve_Bps(flow_floor, self.line_rate_Bps)
        self.ifindex = ifindex_in(netns, dev)
        self.nl = TcSocket(netns)
        self.flows: dict[str, _Installed] = {}
        self.free_minors: list[int] = []
        self.next_minor = FLOW_MINOR_BASE
        # classes left behind by a change of level, deleted one apply later (when drained)
        self.draining: list[int] = []
        self.relevels = 0  # flows moved to a class at a new level, since start
        self.bg_rate_Bps = int(self.line_rate_Bps)
        self.bg_prio = 1
        self.link_Bps = int(self.line_rate_Bps)  # link class 1:1's rate and ceiling now
        self.bg_ceil_Bps = self.link_Bps  # the background class's ceiling now
        self.dl_tos = None if dl_tos is None else (
            (int(dl_tos),) if isinstance(dl_tos, int) else tuple(int(t) for t in dl_tos) or None)
        self.dl_reserve_Bps = 0.0 if self.dl_tos is None else reserve_Bps(DL_RESERVE, self.line_rate_Bps)
        self.own_floor_Bps = self.bg_floor_Bps = reserve_Bps(background_floor, self.line_rate_Bps)
        self.held_share: float | None = None  # the lower floor a critical job holds here (hold_floor)
        # capped destinations: address -> its class's minor and (rate, ceil); wanted: address -> bytes/s
        self.caps: dict[str, tuple[int, tuple[int, int]]] = {}
        self.want_caps: dict[str, float] = {}
        self.cap_bytes_gone = 0  # what the capped classes deleted so far had sent (scheduled_bytes)
        self.last_apply_s = 0.0  # wall time of the last batch: send to last ack, seconds
        self.closed = False
        qdiscs = self.nl.dump(RTM_GETQDISC, self.ifindex)
        self.adopted = any(h == ROOT_HANDLE and p == TC_H_ROOT and k == "htb" for _, h, p, k in qdiscs)
        self.shaper_Bps = int(self.line_rate_Bps)  # the adopted shaper's link rate, put back on close
        if self.adopted:
            self._remove_stale_flows()
            self.shaper_Bps = self.nl.class_rates(self.ifindex).get(LINK_CLASS, (self.shaper_Bps,))[0]
        _install_or_adopt = self._adopt if self.adopted else self._create
        _install_or_adopt()
        # The background class starts last. HTB files a class under the prio it had
        # when it last became backlogged and a later change of prio only counts once
        # its queue has emptied, which a bulk file's never does: a background class
        # that became busy at prio 1 (with nothing ranked yet) stayed ahead of every
        # DL flow ranked 2 or lower for as long as the files ran (quick, seed 1: a
        # VGG16's pulls held at their 0.5 % floor for 25 s, "borrowed 0" in tc -s -d,
        # while the files took 80 Mbit/s past their class's 24 kbit/s).
        # Flows and the background class leave the ACK class its reserve (when the qdisc has one).
        has_ack = any(h == ROOT_HANDLE | ACK_MINOR for _, h, _, _ in self.nl.dump(RTM_GETTCLASS, self.ifindex))
        self.ack_reserve_Bps = reserve_Bps(ACK_RESERVE, self.line_rate_Bps) if has_ack else 0.0
        self.bg_rate_Bps = int(self._guaranteed_Bps())
        self.bg_prio = BG_LAST_PRIO
        self.nl.transact([(self._class(BG_MINOR, self.bg_rate_Bps, int(self.line_rate_Bps),
                                       NLM_F_REQUEST | NLM_F_ACK, prio=BG_LAST_PRIO), "background class last", False)])
        if self.dl_tos is not None:
            self._install_dl_class()

    def _guaranteed_Bps(self) -> float:
        """What the line rate leaves the flows, the capped destinations and the background
        class to guarantee, bytes/s: the ACK and unregistered-DL classes' reserves taken off.

        HTB serves a class under its own rate without asking its parent, so guarantees that
        add up past the link class's rate let the link send past it: with the reserves left
        in, a 10 Mbit/s link carrying a DL-marked flow, a file and an inbound flow's ACKs sent
        1.10-1.12x its rate, 0.97-1.00x with them taken off (the set-up of the test of this
        in tests/test_tc_backend.py, 1.5 s windows)."""
        return self.line_rate_Bps - self.ack_reserve_Bps - self.dl_reserve_Bps

    def scheduled_bytes(self) -> int | None:
        """Bytes so far through the link class less the background class (the HTB default,
        every packet no flow class, the DL class or the ACK class takes) and the capped
        destinations' classes (unscheduled traffic held to a cap), those of caps lifted
        included; None once closed."""
        if self.closed:
            return None
        try:
            got = self.nl.class_bytes(self.ifindex)
        except NetlinkError:
            return None
        if LINK_CLASS not in got:
            return None
        capped = sum(got.get(ROOT_HANDLE | minor, 0) for minor, _ in list(self.caps.values()))
        return got[LINK_CLASS] - got.get(ROOT_HANDLE | BG_MINOR, 0) - capped - self.cap_bytes_gone

    def _create(self) -> None:
        # with the ACK class: this host's planned egress must not starve the ACKs of what it receives
        install_root(self.nl, self.ifindex, self.line_rate_Bps, self.burst_s)
        install_ack_class(self.nl, self.ifindex, self.line_rate_Bps, self.burst_s)

    def _adopt(self) -> None:
        # The shaper's rates may differ from ours (another link speed): make them ours.
        line = self.line_rate_Bps
        b = burst_bytes(line, self.burst_s)
        self.nl.transact([
            self._link_class(line, False),
            (tcmsg(RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex, ROOT_HANDLE | BG_MINOR,
                   LINK_CLASS, attrs=htb_class_attrs(line, line, b, b, prio=1)), "background class 1:2", False),
        ])

    def _link_class(self, line_Bps: float, tolerate: bool) -> tuple[bytes, str, bool]:
        """The message that sets the link class 1:1 to ``line_Bps`` (rate and ceiling)."""
        b = burst_bytes(line_Bps, self.burst_s)
        return (tcmsg(RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex, LINK_CLASS,
                      ROOT_HANDLE, attrs=htb_class_attrs(line_Bps, line_Bps, b, b)), "link class 1:1", tolerate)

    def _install_dl_class(self) -> None:
        r = self.dl_reserve_Bps
        first, *more = self.dl_tos
        create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
        self.nl.transact([
            *leaf_class_msgs(self.nl, self.ifindex, DL_MINOR, DL_LEAF_HANDLE, r, burst_bytes(r, self.burst_s),
                             self.line_rate_Bps, self.burst_s, prio=0, filter_prio=DL_FILTER_PRIO,
                             keys=tos_keys(first), name="unregistered DL"),
            # the other marks' filters share the prio: one delete removes them all
            *((self._filter(DL_MINOR, tos_keys(tos), create, prio=DL_FILTER_PRIO),
               f"unregistered-DL filter of TOS {tos:#x}", False) for tos in more)])

    def _remove_dl_class(self) -> list[tuple[bytes, str, bool]]:
        return [(self._del_filter(DL_FILTER_PRIO), "delete unregistered-DL filter", True),
                (self._del_class(DL_MINOR), "delete unregistered-DL class", True)]

    def _remove_stale_flows(self) -> None:
        # A crashed agent leaves its flow classes behind; a new one starts from the bare shaper.
        classes = [h for _, h, _, _ in self.nl.dump(RTM_GETTCLASS, self.ifindex)]
        stale = [h & 0xFFFF for h in classes
                 if h >> 16 == ROOT_HANDLE >> 16 and (h & 0xFFFF) >= FLOW_MINOR_BASE]
        msgs = self._remove_dl_class() if ROOT_HANDLE | DL_MINOR in classes else []
        msgs.append((self._del_filter(CAP_FILTER_PRIO), "stale capped-destination filters", True))
        for m in stale:
            msgs.append((self._del_filter(m), f"stale filter prio {m}", True))
            msgs.append((self._del_class(m), f"stale class 1:{m:x}", True))
        self.nl.transact(msgs)

    @property
    def holds_floor(self) -> bool:
        """Whether :meth:`hold_floor` lowers the floor: only with ``dl_tos``. A registered
        flow's first packets reach the receiver before the receiver has registered it, and
        without the unregistered-DL class they wait in the background class: at its
        floor. With a critical job's marks out of that class, a floor of 0.01 on its
        ports made the job 1.283x its JCT alone on real TCP against 1.050x with them
        (classes scenario at commit d9f56ed, one run each)."""
        return self.dl_tos is not None

    def hold_floor(self, share: float | None) -> None:
        """From the next :meth:`apply` on, the background class (and the capped destinations'
        classes, which share it) is guaranteed ``share`` of the line rate where that is
        below ``background_floor`` and :attr:`holds_floor`; None: ``background_floor`` again.

        While that lower floor holds, it is also what the port gives the rest: the
        background class's ceiling is its guaranteed rate, and the floors of the ranked
        flows add up to ``share`` at most (``flow_floors_sum`` otherwise). On real TCP
        beside a critical job's transfers, whatever else the port carries fills every
        moment the job's own flows leave their queues empty: with the background class
        free to borrow, the files took 4-5 % of the port (classes scenario, a 1 % floor;
        tc class counters sampled every 0.5 s), and the held-back flows of the other
        jobs their floors, 2.5 % of it.
        """
        held = reserve_Bps(share, self.line_rate_Bps) if share is not None and self.holds_floor else None
        lower = held is not None and held < self.own_floor_Bps
        self.bg_floor_Bps = held if lower else self.own_floor_Bps
        self.held_share = float(share) if lower else None

    caps_destinations = True
    ipv4_only = True  # u32 on the IPv4 header

    def cap_destinations(self, caps: dict[str, float]) -> None:
        """Hold what no flow class takes towards each address of ``caps`` to its bytes/s.

        From the next :meth:`apply` on, each address gets a class of its own, at the
        background's last borrowing prio, whose ceiling is its cap (payload rate, two
        full frames' worth at least) and whose guaranteed rate is an equal share of the
        background floor (the background class keeps one share): traffic towards a
        host whose ingress a critical job holds meets the reserved flows in no switch
        queue, and is never starved. A cap is what the reservations leave of the
        receiver's port, so it is not raised to this host's own floor: raised to it,
        the other hosts of the classes scenario sent 5 % of the line each into a
        critical job's worker, whose switch port gave the job's pulls 95 % of it (tc
        class counters sampled every 0.5 s).
        """
        # u32 matches IPv4 destinations only: another address (a host named by its IPv6 address
        # or a name) is not held, and :attr:`caps_refused` says so (the agent reports it)
        self.want_caps = {a: float(r) for a, r in caps.items() if _ipv4(a)}
        self.caps_refused = tuple(sorted(a for a in caps if a not in self.want_caps))

    def _cap_msgs(self, change: int, create: int) -> tuple[list[tuple[bytes, str, bool]], int]:
        """The netlink messages that make the capped destinations' classes and filters
        :attr:`want_caps`, and the guaranteed rate they take together (bytes/s)."""
        want, msgs = self.want_caps, []
        n = len(want)
        share = self.bg_floor_Bps / (n + 1)
        rates = {}
        for addr, cap in want.items():
            ceil = int(max(cap * self.wire_factor, MIN_BURST_B))
            rates[addr] = (max(1, min(ceil, int(share))), ceil)
        if set(want) != set(self.caps):
            # the filters go together (one prio) and come back for the new set
            if self.caps:
                msgs.append((self._del_filter(CAP_FILTER_PRIO), "delete capped-destination filters", True))
            gone = [a for a in self.caps if a not in want]
            if gone:
                # their bytes stay unscheduled ones once the classes (and counters) go
                try:
                    sent = self.nl.class_bytes(self.ifindex)
                except NetlinkError:
                    sent = {}
                self.cap_bytes_gone += sum(sent.get(ROOT_HANDLE | self.caps[a][0], 0) for a in gone)
            for addr in gone:
                minor, _ = self.caps.pop(addr)
                msgs.append((self._del_class(minor), f"delete capped class of {addr}", False))
                self.free_minors.append(minor)
            for addr in want:
                if addr not in self.caps:
                    minor = self._alloc_minor()
                    r, c = rates[addr]
                    msgs.append((self._class(minor, r, c, create, prio=BG_LAST_PRIO), f"capped class of {addr}", False))
                    self.caps[addr] = (minor, (r, c))
            for addr in want:
                msgs.append((self._filter(self.caps[addr][0], u32_dst_keys(addr), create, prio=CAP_FILTER_PRIO),
                             f"capped-destination filter of {addr}", False))
        for addr, (minor, rc) in list(self.caps.items()):
            if rates[addr] != rc:
                msgs.append((self._class(minor, *rates[addr], change, prio=BG_LAST_PRIO),
                             f"change capped class of {addr}", False))
                self.caps[addr] = (minor, rates[addr])
        return msgs, sum(r for r, _ in rates.values())

    def _del_filter(self, prio: int) -> bytes:
        # a flow's filter has its class's minor as its prio
        return tcmsg(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex, 0,
                     ROOT_HANDLE, info=(prio << 16) | socket.htons(ETH_P_IP))

    def _del_class(self, minor: int) -> bytes:
        return tcmsg(RTM_DELTCLASS, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex,
                     ROOT_HANDLE | minor, LINK_CLASS)

    def _class(self, minor: int, rate: int, ceil: int, flags: int, prio: int = 0) -> bytes:
        return tcmsg(RTM_NEWTCLASS, flags, self.nl.next_seq(), self.ifindex, ROOT_HANDLE | minor, LINK_CLASS,
                     attrs=htb_class_attrs(rate, ceil, burst_bytes(rate, self.burst_s),
                                           burst_bytes(ceil, self.burst_s), prio=prio))

    def _flow_class(self, minor: int, rate: int, flags: int, prio: int | None = None) -> bytes:
        if prio is not None:
            return self._class(minor, rate, int(self.line_rate_Bps), flags, prio=prio)
        if self.borrow:
            return self._class(minor, rate, int(self.line_rate_Bps), flags, prio=self.flow_prio)
        return self._class(minor, rate, rate, flags)

    def _htb_prio(self, prio: int | None) -> int:
        """The HTB prio a flow class at strict-priority level ``prio`` (None: unranked) gets."""
        if prio is not None:
            return prio
        return self.flow_prio if self.borrow else 0

    def _filter(self, minor: int, keys: list[tuple[int, int, int]], flags: int, prio: int | None = None) -> bytes:
        # a flow's filter has its class's minor as its prio (None); the capped destinations' share one
        prio = minor if prio is None else prio
        return tcmsg(RTM_NEWTFILTER, flags, self.nl.next_seq(), self.ifindex, 0, ROOT_HANDLE,
                     info=(prio << 16) | socket.htons(ETH_P_IP), attrs=u32_filter_attrs(ROOT_HANDLE | minor, keys))

    def _link_rate(self, flows: list[FlowRate]) -> int:
        """The link class's rate (and the background class's ceiling) while ``flows`` are scheduled, bytes/s."""
        return int(self.line_rate_Bps)

    def _alloc_minor(self) -> int:
        if self.free_minors:
            return self.free_minors.pop()
        if self.next_minor > FLOW_MINOR_MAX:
            raise RuntimeError("tc backend: more than 65504 scheduled flows on one device")
        self.next_minor += 1
        return self.next_minor - 1

    def apply(self, flows: list[FlowRate], leftover_Bps: float) -> None:
        """Install, change and remove flow classes and set the background rate, in one netlink batch.

        Parameters
        ----------
        flows : list of FlowRate
            Every flow scheduled on this device for the slot; payload rates in
            bytes/s (floored at ``min_rate_Bps``). If their wire rates add up
            to more than the line rate they are scaled down together: HTB lets
            a class under its own rate send without asking its parent, so the
            link class alone would not hold the link to its rate.
        leftover_Bps : float
            Guaranteed rate of background traffic, bytes/s, at most what the
            flows leave of the line rate less the ACK and unregistered-DL
            classes' reserves; its ceiling is the line rate.
        """
        if self.closed:
            raise RuntimeError("tc backend is closed")
        change = NLM_F_REQUEST | NLM_F_ACK
        create = change | NLM_F_CREATE | NLM_F_EXCL
        msgs: list[tuple[bytes, str, bool]] = []
        wanted = {f.flow_id: f for f in flows}
        # classes flows left when re-levelled: their filters point elsewhere since
        if self.draining:
            # A class is deleted with what it holds. After a promotion the class the
            # flow left is still filed at its old prio and holds the flow's packets
            # sent before the move, which a deletion one slot later dropped (10 Mbit/s
            # veth, bench_relevel: 85 segments retransmitted per promotion, 22.5 per
            # demotion; kept until drained: 0 and 0). One class dump while any drains.
            qlen = self.nl.class_qlens(self.ifindex)
            still = []
            for minor in self.draining:
                if qlen.get(ROOT_HANDLE | minor, 0) > 0:
                    still.append(minor)
                    continue
                msgs.append((self._del_class(minor), f"delete re-levelled class 1:{minor:x}", False))
                self.free_minors.append(minor)
            self.draining = still
        for fid in [fid for fid in self.flows if fid not in wanted]:
            inst = self.flows.pop(fid)
            if inst.keys:  # a flow without endpoints has no filter
                msgs.append((self._del_filter(inst.minor), f"delete filter of {fid}", False))
            msgs.append((self._del_class(inst.minor), f"delete class of {fid}", False))
            self.free_minors.append(inst.minor)
        ranked = sum(1 for f in wanted.values() if f.prio is not None)
        ranked_floor = self.min_rate_Bps
        floors_sum = self.flow_floors_sum
        if self.held_share is not None:  # 0: two full frames' worth each, as the share is
            floors_sum = min(floors_sum, self.held_share) if floors_sum else self.held_share
        if ranked and (floors_sum or self.held_share is not None):
            # every ranked flow held behind higher ranks takes its floor from those above it
            ranked_floor = reserve_Bps(min(self.flow_floor, floors_sum / ranked), self.line_rate_Bps)
        wire = {fid: max(ranked_floor if f.prio is not None else self.min_rate_Bps, f.rate_Bps) * self.wire_factor
                for fid, f in wanted.items()}
        total = sum(wire.values())
        guaranteed = self._guaranteed_Bps()
        room = guaranteed - self.bg_floor_Bps
        scale = min(1.0, room / total) if total > 0 else 1.0
        for fid, f in wanted.items():
            rate = max(1, int(wire[fid] * scale))
            prio = None if f.prio is None else min(max(int(f.prio), 0), MAX_FLOW_PRIO)
            keys = u32_keys(f)
            inst = self.flows.get(fid)
            if inst is not None and inst.keys and keys and self._htb_prio(inst.prio) != self._htb_prio(prio):
                # HTB keeps a busy class under the prio it became busy with (see the
                # background class in __init__), and a running flow's queue need not
                # empty: move the flow to a new class at its new level, point a filter
                # there before the old one goes, and delete the old class at an apply
                # that finds it empty (what it held is the flow's own earlier packets).
                old = inst.minor
                inst.minor = self._alloc_minor()
                msgs.append((self._flow_class(inst.minor, rate, create, prio), f"re-level class of {fid}", False))
                msgs.append((self._filter(inst.minor, keys, create), f"filter of {fid}", False))
                msgs.append((self._del_filter(old), f"delete old filter of {fid}", False))
                inst.keys, inst.rate_Bps, inst.prio = keys, rate, prio
                self.draining.append(old)
                self.relevels += 1
            elif inst is not None and inst.keys != keys:
                # The connection is now known (ports arrived): re-point the filter.
                if inst.keys:
                    msgs.append((self._del_filter(inst.minor), f"delete filter of {fid}", False))
                inst.keys = []
            if inst is None:
                inst = _Installed(self._alloc_minor(), rate, [], prio)
                self.flows[fid] = inst
                msgs.append((self._flow_class(inst.minor, rate, create, prio), f"create class of {fid}", False))
            elif inst.rate_Bps != rate or inst.prio != prio:
                msgs.append((self._flow_class(inst.minor, rate, change, prio), f"change class of {fid}", False))
            inst.rate_Bps, inst.prio = rate, prio
            if not inst.keys and keys:
                inst.keys = keys
                msgs.append((self._filter(inst.minor, keys, create), f"filter of {fid}", False))
        cap_msgs, capped = self._cap_msgs(change, create)
        msgs += cap_msgs
        bg = int(max(self.bg_floor_Bps - capped, min(leftover_Bps, guaranteed - total * scale - capped)))
        # last while anything is ranked; first only beside planned flows that are not
        # (the paper's leftover); with no flow it keeps its prio: every change risks
        # the stale filing above, and ranked schedules must never move it off the last
        if any(f.prio is not None for f in flows):
            bg_prio = BG_LAST_PRIO
        else:
            bg_prio = 1 if flows else self.bg_prio
        link = self._link_rate(flows)
        if link != self.link_Bps:
            b = burst_bytes(link, self.burst_s)
            # before the flows' changes: a lower link rate is in place when they start
            msgs.insert(0, (tcmsg(RTM_NEWTCLASS, change, self.nl.next_seq(), self.ifindex, LINK_CLASS,
                                  ROOT_HANDLE, attrs=htb_class_attrs(link, link, b, b)), "link class 1:1", False))
        # under a critical job's lower floor the background takes that and no more (hold_floor)
        bg_ceil = link if self.held_share is None else max(bg, 1)
        if bg != self.bg_rate_Bps or bg_prio != self.bg_prio or link != self.link_Bps or bg_ceil != self.bg_ceil_Bps:
            msgs.append((self._class(BG_MINOR, bg, bg_ceil, change, prio=bg_prio), "background class", False))
            self.bg_rate_Bps, self.bg_prio, self.link_Bps, self.bg_ceil_Bps = bg, bg_prio, link, bg_ceil
        t0 = time.perf_counter()
        self.nl.transact(msgs)
        self.last_apply_s = time.perf_counter() - t0

    def close(self) -> None:
        """Remove every class and filter this backend installed (and its root qdisc if it created it)."""
        if self.closed:
            return
        self.closed = True
        try:
            if not self.adopted:
                self.nl.transact([(tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(),
                                         self.ifindex, ROOT_HANDLE, TC_H_ROOT), "delete root qdisc", True)])
                return
            msgs = self._remove_dl_class() if self.dl_tos is not None else []
            if self.caps:
                msgs.append((self._del_filter(CAP_FILTER_PRIO), "delete capped-destination filters", True))
            for minor, _ in self.caps.values():
                msgs.append((self._del_class(minor), f"delete capped class 1:{minor:x}", True))
            for fid, inst in self.flows.items():
                if inst.keys:
                    msgs.append((self._del_filter(inst.minor), f"delete filter of {fid}", True))
                msgs.append((self._del_class(inst.minor), f"delete class of {fid}", True))
            for minor in self.draining:
                msgs.append((self._del_class(minor), f"delete re-levelled class 1:{minor:x}", True))
            line = self.shaper_Bps  # the shaper's own rate, which _adopt changed to ours
            msgs.append(self._link_class(line, True))
            msgs.append((self._class(BG_MINOR, line, line, NLM_F_REQUEST | NLM_F_ACK, prio=1),
                         "background class", True))
            self.nl.transact(msgs)
            self.flows.clear()
        finally:
            self.nl.close()


def _ipv4(addr: str) -> bool:
    try:
        return socket.inet_pton(socket.AF_INET, addr) is not None
    except (OSError, TypeError):
        return False


IFB_PREFIX = "jsi-"  # IFB devices this backend creates: "jsi-" + the link's name (15 characters at most)


def ifb_name(dev: str) -> str:
    """Name of the IFB device that receives ``dev``'s ingress traffic."""
    return (IFB_PREFIX + dev)[:15]


def redirect_ingress(dev: str, ifb: str, netns: str | None = None) -> None:
    """Create IFB device ``ifb`` and redirect every packet arriving on ``dev`` to its egress.

    A qdisc on ``ifb``'s egress then schedules what ``dev`` receives. Runs the
    ``ip``/``tc`` tools once at set-up (not on the per-slot path); a ``ifb`` or
    ingress qdisc left by a crashed agent is replaced.
    """
    remove_ingress_redirect(dev, ifb, netns)
    run(ns_command(netns, ["ip", "link", "add", ifb, "type", "ifb"]))
    try:
        # The kernel's IFB queue length (32 packets, the length of HTB's pfifo flow
        # leaves) stays: it tail-drops the window of an inbound flow held at its floor,
        # but a 1000-packet queue (a veth's) removed those drops and not the time. Quick
        # scenario, alternating runs on a quiet machine, mean JCT 8.03/8.22/8.22/6.67 s
        # against 7.93/7.88/7.93/8.03 s; the agents' RTO cap bounds the stalls instead.
        run(ns_command(netns, ["ip", "link", "set", ifb, "up"]))
        run(ns_command(netns, ["tc", "qdisc", "add", "dev", dev, "handle", "ffff:", "ingress"]))
        run(ns_command(netns, ["tc", "filter", "add", "dev", dev, "parent", "ffff:", "protocol", "all",
                               "prio", "1", "u32", "match", "u32", "0", "0",
                               "action", "mirred", "egress", "redirect", "dev", ifb]))
    except BaseException:
        remove_ingress_redirect(dev, ifb, netns)
        raise


def remove_ingress_redirect(dev: str, ifb: str, netns: str | None = None) -> None:
    """Undo :func:`redirect_ingress` (whatever part of it exists)."""
    run(ns_command(netns, ["tc", "qdisc", "del", "dev", dev, "ingress"]), check=False)
    run(ns_command(netns, ["ip", "link", "del", ifb]), check=False)


@register_backend
class TcIngressBackend(TcBackend):
    """Receiver-side enforcement: :class:`TcBackend`'s layout on an IFB device fed by ``dev``'s ingress.

    Senders' agents pace their egress; into a host, the flows of several
    senders, the files and the flows borrowing above their plan meet in the
    switch port's FIFO, where TCP, not the plan, shares the port. Shaping what
    a host receives a little below the port's rate moves that queue into the
    host, where each inbound flow has its planned floor (the LP's ingress
    rows) and background traffic the ingress leftover; drops there slow the
    senders down as the switch's would. The ingress counterpart of Linux's
    usual "shape ingress through an IFB below the line rate".

    Parameters
    ----------
    line_rate_Bps : float
        The host's ingress rate, bytes/s (its link's; the daemon's cluster
        gives it to the agent).
    dev : str
        The link whose ingress is scheduled.
    netns : str or None
        Named network namespace of ``dev``.
    ifb : str, optional
        IFB device name (default :func:`ifb_name` of ``dev``).
    share : float
        While inbound flows are scheduled the IFB is shaped to this share of
        ``line_rate_Bps`` (default :data:`INGRESS_SHARE`, 98 %), so that the
        inbound queue forms here and not in the switch port; while none is,
        it runs at ``line_rate_Bps`` itself, and inbound traffic nobody orders
        (files between DL jobs) gets the whole port. 1.0: no headroom, ever.
        Planned inbound floors the daemon made for the whole rate are scaled
        down together to the shaped rate (:meth:`TcBackend.apply`).
    **options
        :class:`TcBackend`'s (``borrow``, ``spare``, ``flow_floor``, ``burst_s``, ``mtu``).
    """

    name = "tc-ingress"

    def __init__(self, line_rate_Bps: float, *, dev: str = "eth0", netns: str | None = None,
                 ifb: str | None = None, share: float = INGRESS_SHARE, **options) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"tc-ingress backend: share must be within (0, 1], got {share!r}")
        self.idle_rate_Bps = float(line_rate_Bps)
        self.link_dev = dev
        self.ifb = ifb or ifb_name(dev)
        redirect_ingress(dev, self.ifb, netns)
        try:
            super().__init__(line_rate_Bps * share, dev=self.ifb, netns=netns, **options)
            if share < 1.0:
                self.apply([], self.line_rate_Bps)  # nothing scheduled yet: the link's own rate
        except BaseException:
            remove_ingress_redirect(dev, self.ifb, netns)
            raise

    def _link_rate(self, flows: list[FlowRate]) -> int:
        if flows:
            return int(self.line_rate_Bps)
        return int(self.idle_rate_Bps)

    def close(self) -> None:
        """Remove the flow classes, the IFB device and the ingress redirect."""
        if self.closed:
            return
        try:
            super().close()
        finally:
            remove_ingress_redirect(self.link_dev, self.ifb, self.netns)
