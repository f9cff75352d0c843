"""The ``tc`` enforcement backend: one HTB class per scheduled flow, changed over rtnetlink in batches.

Layout on the device (egress)::

    root qdisc 1: htb default 2
      class 1:1   rate = ceil = line rate                (the link shaper)
        class 1:2     rate = leftover, ceil = line rate  (background: everything unmatched)
          qdisc 2: bfifo, 20 ms of the line rate       (short queue: bounded delay)
        class 1:m     rate = ceil = the flow's rate      (one per scheduled flow, m >= 0x10;
                                                        with borrow=True ceil = line rate)
      filter prio m   u32 match on the flow's addresses/ports -> class 1:m

Because class 1:1 caps everything at the line rate, this qdisc IS the egress
link shaper: the testbed installs the same layout with no flow classes
(:func:`install_shaper`), and a backend that finds it adopts it and, on
close, puts it back as it found it instead of deleting it.

Messages are packed here with :mod:`struct` rather than through pyroute2's
encoder: pyroute2 needs ~0.4 ms of Python to encode one HTB class message on
this machine, while a slot boundary may change dozens of classes and the
change must land within a few milliseconds. pyroute2 still decodes what the
kernel holds in the tests, an independent check of these bytes.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from dataclasses import dataclass

from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime

from jitsched.agents.backends.base import FLOW_LEVELS, Backend, FlowRate, register_backend

NETLINK_ROUTE = 0
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTCLASS, RTM_DELTCLASS, RTM_GETTCLASS = 40, 41, 42
RTM_NEWTFILTER, RTM_DELTFILTER = 44, 45
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 2, 6, 7
TCA_U32_CLASSID, TCA_U32_SEL = 1, 5
TC_U32_TERMINAL = 1
TC_H_ROOT = 0xFFFFFFFF
TC_LINKLAYER_ETHERNET = 1
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
ARP_FILTER_PRIO = 3  # after the priority band (1) and the ACK filter (2), before flows (>= 0x10)
NLA_F_NESTED = 0x8000

ROOT_HANDLE = 0x10000  # 1:
LINK_CLASS = 0x10001  # 1:1
BG_MINOR = 2  # 1:2, the HTB default class
BG_LEAF_HANDLE = 0x20000  # 2:
FLOW_MINOR_BASE = 0x10
FLOW_MINOR_MAX = 0xFFF0
QUANTUM_B = 65536  # >= the largest GSO packet, so one DRR round always sends a packet
MIN_BURST_B = 3028  # two full-size Ethernet frames
FLOW_BORROW_PRIO = 2  # with borrow=True, flow classes borrow after the background class (prio 1)
SPARE_MODES = ("background", "shared")  # who borrows first with borrow=True (TcBackend's spare)
PRIO_MINOR = 3  # 1:3, the scheduled-traffic band of a switch port (install_shaper(priority_tos=...))
PRIO_LEAF_HANDLE = 0x30000  # 3:
BG_RESERVE = 0.02  # with a priority band, background keeps this fraction of the line rate
DSCP_MASK = 0xFC  # the TOS byte's DSCP bits (ECN bits ignored)
ACK_MINOR = 4  # 1:4, pure TCP ACKs (install_shaper(ack_priority=True))
ACK_LEAF_HANDLE = 0x40000  # 4:
ACK_RESERVE = 0.03  # of the line rate; delayed ACKs of a full reverse link need ~1.7 %
ACK_MAX_LEN = 64  # IPv4 total length below this and TCP: a pure ACK (40-60 bytes with options)
# Strict-priority levels (FlowRate.prio): HTB borrows by class prio 0..7, 0 first.
MAX_FLOW_PRIO = FLOW_LEVELS - 1
BG_LAST_PRIO = MAX_FLOW_PRIO + 1  # the background class's prio while the schedule ranks flows (HTB's last, 7)
DL_MINOR = 5  # 1:5, marked DL packets no flow class matches (TcBackend(dl_tos=...))
DL_LEAF_HANDLE = 0x50000  # 5:
DL_FILTER_PRIO = 0xFFF8  # after every flow filter (whose prio is its minor, at most FLOW_MINOR_MAX)


def _nla(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((-n) % 4)


def _tcmsg(mtype: int, flags: int, seq: int, ifindex: int, handle: int, parent: int,
           info: int = 0, attrs: bytes = b"") -> bytes:
    body = struct.pack("=BxxxiIII", socket.AF_UNSPEC, ifindex, handle, parent, info) + attrs
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body


def _ratespec(rate_Bps: int) -> bytes:
    # linklayer=ethernet lets the kernel compute transmit times itself, so no rate table is sent.
    return struct.pack("=BBHhHI", 0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate_Bps, 0xFFFFFFFF))


def htb_class_attrs(rate_Bps: float, ceil_Bps: float, burst_B: float, cburst_B: float,
                    quantum_B: int = QUANTUM_B, prio: int = 0) -> bytes:
    """TCA_KIND + TCA_OPTIONS of an HTB class.

    Parameters
    ----------
    rate_Bps, ceil_Bps : float
        Guaranteed rate and ceiling, bytes/s (at least 1).
    burst_B, cburst_B : float
        Bytes the class may send at once at ``rate`` / ``ceil``.
    quantum_B : int
        Bytes per DRR round when borrowing.
    prio : int
        Borrowing priority (0 first).
    """
    rate = max(1, int(rate_Bps))
    ceil = max(rate, int(ceil_Bps))
    parms = (_ratespec(rate) + _ratespec(ceil)
             + struct.pack("=IIIII", calc_xmittime(rate, burst_B), calc_xmittime(ceil, cburst_B),
                           int(quantum_B), 0, int(prio)))
    opts = _nla(TCA_HTB_PARMS, parms)
    if rate > 0xFFFFFFFF:
        opts += _nla(TCA_HTB_RATE64, struct.pack("=Q", rate))
    if ceil > 0xFFFFFFFF:
        opts += _nla(TCA_HTB_CEIL64, struct.pack("=Q", ceil))
    return _nla(TCA_KIND, b"htb\0") + _nla(TCA_OPTIONS | NLA_F_NESTED, opts)


def htb_qdisc_attrs(default_minor: int) -> bytes:
    """TCA_KIND + TCA_OPTIONS of an HTB root qdisc whose unclassified traffic goes to ``default_minor``."""
    glob = struct.pack("=IIIII", 3, 10, default_minor, 0, 0)
    return _nla(TCA_KIND, b"htb\0") + _nla(TCA_OPTIONS | NLA_F_NESTED, _nla(TCA_HTB_INIT, glob))


def _ip4(addr: str) -> int:
    return struct.unpack("!I", socket.inet_aton(addr))[0]


def u32_keys(flow: FlowRate) -> list[tuple[int, int, int]]:
    """The u32 ``(value, mask, offset)`` keys matching ``flow``'s IPv4/TCP packets.

    Offsets count from the IPv4 header and assume no IP options (Linux TCP
    sends none), as ``tc``'s own ``match ip sport/dport`` does.
    """
    keys = []
    if flow.src_port or flow.dst_port:
        keys.append((socket.IPPROTO_TCP << 16, 0x00FF0000, 8))
    if flow.src_addr:
        keys.append((_ip4(flow.src_addr), 0xFFFFFFFF, 12))
    if flow.dst_addr:
        keys.append((_ip4(flow.dst_addr), 0xFFFFFFFF, 16))
    if flow.src_port or flow.dst_port:
        mask = (0xFFFF0000 if flow.src_port else 0) | (0xFFFF if flow.dst_port else 0)
        keys.append(((flow.src_port << 16) | flow.dst_port, mask, 20))
    return keys


def u32_filter_attrs(classid: int, keys: list[tuple[int, int, int]]) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a terminal u32 filter sending matches to ``classid``."""
    sel = struct.pack("!BBBxHHhhI", TC_U32_TERMINAL, 0, len(keys), 0, 0, 0, 0, 0)
    for value, mask, off in keys:
        sel += struct.pack("!II", mask, value & mask) + struct.pack("=ii", off, 0)
    opts = _nla(TCA_U32_CLASSID, struct.pack("=I", classid)) + _nla(TCA_U32_SEL, sel)
    return _nla(TCA_KIND, b"u32\0") + _nla(TCA_OPTIONS | NLA_F_NESTED, opts)


class NetlinkError(OSError):
    """The kernel refused a traffic-control request."""


class TcSocket:
    """An rtnetlink socket that sends requests in one batch and collects every ack.

    Parameters
    ----------
    netns : str or None
        Named network namespace to open the socket in (None: the caller's).
    """

    def __init__(self, netns: str | None = None) -> None:
        if netns is None:
            self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        else:
            from jitsched.testbed.netns import socket_in

            self.sock = socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
        self.seq = int(time.monotonic_ns()) & 0x3FFFFFFF

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0x7FFFFFFF
        return self.seq

    def transact(self, msgs: list[tuple[bytes, str, bool]]) -> None:
        """Send ``(message, description, tolerate_missing)`` in one ``send`` and wait for every ack.

        Raises
        ------
        NetlinkError
            For the first refused message that is not a tolerated ENOENT.
        """
        if not msgs:
            return
        pending = {}
        for data, what, tolerate in msgs:
            seq = struct.unpack_from("=I", data, 8)[0]
            pending[seq] = (what, tolerate)
        self.sock.send(b"".join(m[0] for m in msgs))
        first_err = None
        while pending:
            buf = self.sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", buf, off)
                if mtype == NLMSG_ERROR and seq in pending:
                    code = -struct.unpack_from("=i", buf, off + 16)[0]
                    what, tolerate = pending.pop(seq)
                    if code and not (tolerate and code in (errno.ENOENT, errno.EINVAL)) and first_err is None:
                        first_err = NetlinkError(code, f"{what}: {os.strerror(code)}")
                off += (length + 3) & ~3
        if first_err is not None:
            raise first_err

    def dump(self, mtype: int, ifindex: int) -> list[tuple[int, int, int, str]]:
        """``(msg type, handle, parent, kind)`` of the qdiscs or classes on ``ifindex``."""
        seq = self.next_seq()
        self.sock.send(_tcmsg(mtype, NLM_F_REQUEST | NLM_F_DUMP, seq, ifindex, 0, 0))
        out = []
        while True:
            buf = self.sock.recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                length, mt, _flags, s, _pid = struct.unpack_from("=IHHII", buf, off)
                if s == seq and mt == NLMSG_DONE:
                    return out
                if s == seq and mt == NLMSG_ERROR:
                    code = -struct.unpack_from("=i", buf, off + 16)[0]
                    raise NetlinkError(code, f"dump: {os.strerror(code)}")
                if s == seq:
                    _fam, idx, handle, parent, _info = struct.unpack_from("=BxxxiIII", buf, off + 16)
                    kind, a = "", off + 36
                    while a + 4 <= off + length:
                        alen, atype = struct.unpack_from("=HH", buf, a)
                        if alen < 4:
                            break
                        if atype == TCA_KIND:
                            kind = buf[a + 4:a + alen].rstrip(b"\0").decode()
                        a += (alen + 3) & ~3
                    if idx == ifindex:
                        out.append((mt, handle, parent, kind))
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


def _burst(rate_Bps: float, burst_s: float) -> float:
    return max(MIN_BURST_B, rate_Bps * burst_s)


def install_shaper(dev: str, line_rate_Bps: float, *, netns: str | None = None,
                   burst_s: float = 0.001, priority_tos: int | None = None,
                   ack_priority: bool = False) -> None:
    """Shape ``dev``'s egress to ``line_rate_Bps`` with the backend's HTB layout and no flow classes.

    Replaces whatever root qdisc ``dev`` had. Background class 1:2 gets the
    whole line rate and a short byte FIFO (fq_codel and sfq are not in every
    kernel; this one has HTB, TBF, the FIFOs and u32 only).

    Parameters
    ----------
    dev : str
        Interface name inside ``netns``.
    line_rate_Bps : float
        Link rate, bytes/s.
    netns : str or None
        Named network namespace of ``dev``.
    burst_s : float
        Token-bucket depth in seconds of the rate (at least two full frames).
    priority_tos : int or None
        A switch port's scheduled-traffic band: IPv4 packets whose TOS byte
        has these DSCP bits go to class 1:3 (rate = the line rate less
        :data:`BG_RESERVE`, borrowing first) with its own short FIFO, the rest
        to the background class, whose guaranteed rate drops to that reserve.
        HTB then serves the band like a switch's strict-priority queue while
        background keeps a trickle. None (default): one class, one FIFO.
    ack_priority : bool
        Pure TCP ACKs leaving ``dev`` go to class 1:4 (guaranteed
        :data:`ACK_RESERVE` of the line rate, borrowing first): a host whose
        egress is busy must not hold back the ACKs of the data it receives,
        or its inbound flows slow down with its outbound load.
    """
    from jitsched.testbed.netns import ifindex_in

    ifindex = ifindex_in(netns, dev)
    nl = TcSocket(netns)
    try:
        _install(nl, ifindex, line_rate_Bps, burst_s)
        if priority_tos is not None:
            _install_priority_band(nl, ifindex, line_rate_Bps, burst_s, int(priority_tos))
        if ack_priority:
            _install_ack_class(nl, ifindex, line_rate_Bps, burst_s)
    finally:
        nl.close()


def ack_keys() -> list[tuple[int, int, int]]:
    """u32 keys of a pure TCP ACK: protocol TCP and an IPv4 total length under :data:`ACK_MAX_LEN`."""
    assert ACK_MAX_LEN & (ACK_MAX_LEN - 1) == 0  # a power of two: "below" is a mask
    return [(socket.IPPROTO_TCP << 16, 0x00FF0000, 8), (0, 0xFFFF & ~(ACK_MAX_LEN - 1), 0)]


def tos_keys(tos: int) -> list[tuple[int, int, int]]:
    """u32 keys of IPv4 packets whose TOS byte (the header's second) has ``tos``'s DSCP bits (ECN ignored)."""
    return [((tos & DSCP_MASK) << 16, DSCP_MASK << 16, 0)]


def reserve_Bps(fraction: float, line: float) -> float:
    """A class's guaranteed share of the line rate, bytes/s (at least two full frames)."""
    return max(MIN_BURST_B, fraction * line)


def _leaf_class_msgs(nl: TcSocket, ifindex: int, minor: int, leaf: int, rate: float, burst_B: float,
                     line: float, burst_s: float, prio: int, filter_prio: int,
                     keys: list[tuple[int, int, int]], name: str) -> list[tuple[bytes, str, bool]]:
    # a class 1:minor (rate with burst_B, line-rate ceiling) with its own short
    # FIFO and the u32 filter that sends matching IPv4 packets to it
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    return [
        (_tcmsg(RTM_NEWTCLASS, create, nl.next_seq(), ifindex, ROOT_HANDLE | minor, LINK_CLASS,
                attrs=htb_class_attrs(rate, line, burst_B, _burst(line, burst_s), prio=prio)),
         f"{name} class 1:{minor}", False),
        (_tcmsg(RTM_NEWQDISC, create, nl.next_seq(), ifindex, leaf, ROOT_HANDLE | minor,
                attrs=bfifo_attrs(_queue_limit(line))), f"{name} bfifo", False),
        (_tcmsg(RTM_NEWTFILTER, create, nl.next_seq(), ifindex, 0, ROOT_HANDLE,
                info=(filter_prio << 16) | socket.htons(ETH_P_IP),
                attrs=u32_filter_attrs(ROOT_HANDLE | minor, keys)), f"{name} filter", False),
    ]


def _install_ack_class(nl: TcSocket, ifindex: int, line: float, burst_s: float) -> None:
    reserve = reserve_Bps(ACK_RESERVE, line)
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    nl.transact([
        *_leaf_class_msgs(nl, ifindex, ACK_MINOR, ACK_LEAF_HANDLE, reserve, _burst(reserve, burst_s), line,
                          burst_s, prio=0, filter_prio=2, keys=ack_keys(), name="ACK"),
        # ARP shares the ACK class: in the background class, which a ranked host
        # serves last, ARP went unanswered while DL held the port, and a file that
        # started then failed with "No route to host" (paper-mini, ingress ordered)
        (_tcmsg(RTM_NEWTFILTER, create, nl.next_seq(), ifindex, 0, ROOT_HANDLE,
                info=(ARP_FILTER_PRIO << 16) | socket.htons(ETH_P_ARP),
                attrs=u32_filter_attrs(ROOT_HANDLE | ACK_MINOR, [(0, 0, 0)])), "ARP filter", False),
    ])


def _install_priority_band(nl: TcSocket, ifindex: int, line: float, burst_s: float, tos: int) -> None:
    reserve = reserve_Bps(BG_RESERVE, line)
    nl.transact([
        (_tcmsg(RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, ROOT_HANDLE | BG_MINOR,
                LINK_CLASS, attrs=htb_class_attrs(reserve, line, _burst(reserve, burst_s), _burst(line, burst_s),
                                                  prio=1)),
         "background class 1:2 (reserve)", False),
        *_leaf_class_msgs(nl, ifindex, PRIO_MINOR, PRIO_LEAF_HANDLE, line - reserve, _burst(line, burst_s), line,
                          burst_s, prio=0, filter_prio=1, keys=tos_keys(tos), name="priority"),
    ])


def bfifo_attrs(limit_B: int) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a byte-limited FIFO (``limit_B`` bytes)."""
    return _nla(TCA_KIND, b"bfifo\0") + _nla(TCA_OPTIONS, struct.pack("=I", int(limit_B)))


def _queue_limit(line_Bps: float) -> int:
    # 20 ms of the line rate (at least two GSO packets): enough to keep the
    # link busy at testbed RTTs, short enough that a receiver's port queue
    # does not add the ~120 ms a default 1000-packet FIFO would at 100 Mbit/s.
    return int(max(2 * 65536, 0.02 * line_Bps))


def _install(nl: TcSocket, ifindex: int, line: float, burst_s: float) -> None:
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE
    b = _burst(line, burst_s)
    nl.transact([
        # Delete-then-create: an HTB root cannot be re-initialised in place.
        (_tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, 0, TC_H_ROOT),
         "delete old root qdisc", True),
        (_tcmsg(RTM_NEWQDISC, create | NLM_F_EXCL, nl.next_seq(), ifindex, ROOT_HANDLE, TC_H_ROOT,
                attrs=htb_qdisc_attrs(BG_MINOR)), "root htb qdisc", False),
        (_tcmsg(RTM_NEWTCLASS, create | NLM_F_EXCL, nl.next_seq(), ifindex, LINK_CLASS, ROOT_HANDLE,
                attrs=htb_class_attrs(line, line, b, b)), "link class 1:1", False),
        (_tcmsg(RTM_NEWTCLASS, create | NLM_F_EXCL, nl.next_seq(), ifindex, ROOT_HANDLE | BG_MINOR,
                LINK_CLASS, attrs=htb_class_attrs(line, line, b, b, prio=1)), "background class 1:2", False),
        (_tcmsg(RTM_NEWQDISC, create | NLM_F_EXCL, nl.next_seq(), ifindex, BG_LEAF_HANDLE,
                ROOT_HANDLE | BG_MINOR, attrs=bfifo_attrs(_queue_limit(line))), "background bfifo", False),
    ])


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
    min_rate_Bps : float or None
        Floor of a scheduled flow's rate, bytes/s (default 0.5 % of the line
        rate): a class at rate zero would stall the TCP connection into
        exponential retransmission back-off, delaying it long after its rate
        comes back.
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
    dl_tos : int or None
        DL packets carry this TOS byte (DSCP bits matched): those no flow class
        matches (transfers too small to register with the agent) go to a class
        of their own (1:5) that borrows first, instead of queueing behind the
        background in class 1:2. None (default): no such class.
    """

    name = "tc"

    def __init__(self, line_rate_Bps: float, *, dev: str = "eth0", netns: str | None = None,
                 min_rate_Bps: float | None = None, burst_s: float = 0.001, mtu: int = 1500,
                 borrow: bool = False, spare: str = "background", dl_tos: int | None = None,
                 **options) -> None:
        if spare not in SPARE_MODES:
            raise ValueError(f"tc backend: spare must be one of {SPARE_MODES}, got {spare!r}")
        super().__init__(line_rate_Bps, **options)
        from jitsched.testbed.netns import ifindex_in

        self.dev, self.netns, self.burst_s = dev, netns, float(burst_s)
        self.borrow = bool(borrow)
        # the background class borrows at prio 1: flows after it, or beside it
        self.flow_prio = FLOW_BORROW_PRIO if spare == "background" else 1
        self.wire_factor = (mtu + 14) / (mtu - 52)
        self.min_rate_Bps = float(min_rate_Bps if min_rate_Bps is not None else 0.005 * self.line_rate_Bps)
        self.ifindex = ifindex_in(netns, dev)
        self.nl = TcSocket(netns)
        self.flows: dict[str, _Installed] = {}
        self.free_minors: list[int] = []
        self.next_minor = FLOW_MINOR_BASE
        self.bg_rate_Bps = int(self.line_rate_Bps)
        self.bg_prio = 1
        self.dl_tos = None if dl_tos is None else int(dl_tos)
        self.last_apply_s = 0.0  # wall time of the last batch: send to last ack, seconds
        self.closed = False
        qdiscs = self.nl.dump(RTM_GETQDISC, self.ifindex)
        self.adopted = any(h == ROOT_HANDLE and p == TC_H_ROOT and k == "htb" for _, h, p, k in qdiscs)
        if self.adopted:
            self._remove_stale_flows()
        _install_or_adopt = self._adopt if self.adopted else self._create
        _install_or_adopt()
        if self.dl_tos is not None:
            self._install_dl_class()
        # Flow floors leave the ACK class its reserve (when the qdisc has one).
        has_ack = any(h == ROOT_HANDLE | ACK_MINOR for _, h, _, _ in self.nl.dump(RTM_GETTCLASS, self.ifindex))
        self.ack_reserve_Bps = reserve_Bps(ACK_RESERVE, self.line_rate_Bps) if has_ack else 0.0

    def _create(self) -> None:
        # with the ACK class: this host's planned egress must not starve the ACKs of what it receives
        _install(self.nl, self.ifindex, self.line_rate_Bps, self.burst_s)
        _install_ack_class(self.nl, self.ifindex, self.line_rate_Bps, self.burst_s)

    def _adopt(self) -> None:
        # The shaper's rates may differ from ours (another link speed): make them ours.
        line = self.line_rate_Bps
        b = _burst(line, self.burst_s)
        change = NLM_F_REQUEST | NLM_F_ACK
        self.nl.transact([
            (_tcmsg(RTM_NEWTCLASS, change, self.nl.next_seq(), self.ifindex, LINK_CLASS, ROOT_HANDLE,
                    attrs=htb_class_attrs(line, line, b, b)), "link class 1:1", False),
            (_tcmsg(RTM_NEWTCLASS, change, self.nl.next_seq(), self.ifindex, ROOT_HANDLE | BG_MINOR,
                     LINK_CLASS, attrs=htb_class_attrs(line, line, b, b, prio=1)), "background class 1:2", False),
        ])

    def _install_dl_class(self) -> None:
        self.nl.transact(_leaf_class_msgs(self.nl, self.ifindex, DL_MINOR, DL_LEAF_HANDLE, MIN_BURST_B,
                                          MIN_BURST_B, self.line_rate_Bps, self.burst_s, prio=0,
                                          filter_prio=DL_FILTER_PRIO, keys=tos_keys(self.dl_tos),
                                          name="unregistered DL"))

    def _remove_dl_class(self) -> list[tuple[bytes, str, bool]]:
        return [(self._del_filter(DL_FILTER_PRIO), "delete unregistered-DL filter", True),
                (self._del_class(DL_MINOR), "delete unregistered-DL class", True)]

    def _remove_stale_flows(self) -> None:
        # A crashed agent leaves its flow classes behind; a new one starts from the bare shaper.
        classes = [h for _, h, _, _ in self.nl.dump(RTM_GETTCLASS, self.ifindex)]
        stale = [h & 0xFFFF for h in classes
                 if h >> 16 == ROOT_HANDLE >> 16 and (h & 0xFFFF) >= FLOW_MINOR_BASE]
        msgs = self._remove_dl_class() if ROOT_HANDLE | DL_MINOR in classes else []
        for m in stale:
            msgs.append((self._del_filter(m), f"stale filter prio {m}", True))
            msgs.append((self._del_class(m), f"stale class 1:{m:x}", True))
        self.nl.transact(msgs)

    def _del_filter(self, prio: int) -> bytes:
        # a flow's filter has its class's minor as its prio
        return _tcmsg(RTM_DELTFILTER, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex, 0,
                      ROOT_HANDLE, info=(prio << 16) | socket.htons(ETH_P_IP))

    def _del_class(self, minor: int) -> bytes:
        return _tcmsg(RTM_DELTCLASS, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(), self.ifindex,
                      ROOT_HANDLE | minor, LINK_CLASS)

    def _class(self, minor: int, rate: int, ceil: int, flags: int, prio: int = 0) -> bytes:
        return _tcmsg(RTM_NEWTCLASS, flags, self.nl.next_seq(), self.ifindex, ROOT_HANDLE | minor, LINK_CLASS,
                      attrs=htb_class_attrs(rate, ceil, _burst(rate, self.burst_s),
                                            _burst(ceil, self.burst_s), prio=prio))

    def _flow_class(self, minor: int, rate: int, flags: int, prio: int | None = None) -> bytes:
        if prio is not None:
            return self._class(minor, rate, int(self.line_rate_Bps), flags, prio=prio)
        if self.borrow:
            return self._class(minor, rate, int(self.line_rate_Bps), flags, prio=self.flow_prio)
        return self._class(minor, rate, rate, flags)

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
            flows leave of the line rate; its ceiling is the line rate.
        """
        if self.closed:
            raise RuntimeError("tc backend is closed")
        line = int(self.line_rate_Bps)
        change = NLM_F_REQUEST | NLM_F_ACK
        create = change | NLM_F_CREATE | NLM_F_EXCL
        msgs: list[tuple[bytes, str, bool]] = []
        wanted = {f.flow_id: f for f in flows}
        for fid in [fid for fid in self.flows if fid not in wanted]:
            inst = self.flows.pop(fid)
            msgs.append((self._del_filter(inst.minor), f"delete filter of {fid}", False))
            msgs.append((self._del_class(inst.minor), f"delete class of {fid}", False))
            self.free_minors.append(inst.minor)
        wire = {fid: max(self.min_rate_Bps, f.rate_Bps) * self.wire_factor for fid, f in wanted.items()}
        total = sum(wire.values())
        scale = min(1.0, (line - MIN_BURST_B - self.ack_reserve_Bps) / total) if total > 0 else 1.0
        for fid, f in wanted.items():
            rate = max(1, int(wire[fid] * scale))
            prio = None if f.prio is None else min(max(int(f.prio), 0), MAX_FLOW_PRIO)
            keys = u32_keys(f)
            inst = self.flows.get(fid)
            if inst is not None and inst.keys != keys:
                # The connection is now known (ports arrived): re-point the filter.
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
                msgs.append((_tcmsg(RTM_NEWTFILTER, create, self.nl.next_seq(), self.ifindex, 0, ROOT_HANDLE,
                                    info=(inst.minor << 16) | socket.htons(ETH_P_IP),
                                    attrs=u32_filter_attrs(ROOT_HANDLE | inst.minor, keys)),
                             f"filter of {fid}", False))
        bg = int(max(MIN_BURST_B, min(leftover_Bps, line - total * scale)))
        bg_prio = BG_LAST_PRIO if any(f.prio is not None for f in flows) else 1
        if bg != self.bg_rate_Bps or bg_prio != self.bg_prio:
            msgs.append((self._class(BG_MINOR, bg, line, change, prio=bg_prio), "background class", False))
            self.bg_rate_Bps, self.bg_prio = bg, bg_prio
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
                self.nl.transact([(_tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, self.nl.next_seq(),
                                          self.ifindex, ROOT_HANDLE, TC_H_ROOT), "delete root qdisc", True)])
                return
            msgs = self._remove_dl_class() if self.dl_tos is not None else []
            for fid, inst in self.flows.items():
                msgs.append((self._del_filter(inst.minor), f"delete filter of {fid}", True))
                msgs.append((self._del_class(inst.minor), f"delete class of {fid}", True))
            line = int(self.line_rate_Bps)
            msgs.append((self._class(BG_MINOR, line, line, NLM_F_REQUEST | NLM_F_ACK, prio=1),
                         "background class", True))
            self.nl.transact(msgs)
            self.flows.clear()
        finally:
            self.nl.close()


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
    from jitsched.testbed.netns import ns_command, run

    remove_ingress_redirect(dev, ifb, netns)
    run(ns_command(netns, ["ip", "link", "add", ifb, "type", "ifb"]))
    try:
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
    from jitsched.testbed.netns import ns_command, run

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
        Rate the host's ingress is shaped to, bytes/s: below the link's rate
        (e.g. 98 %), or the switch port stays the bottleneck and this qdisc
        never queues; the daemon should plan ingress with the same rate.
    dev : str
        The link whose ingress is scheduled.
    netns : str or None
        Named network namespace of ``dev``.
    ifb : str, optional
        IFB device name (default :func:`ifb_name` of ``dev``).
    **options
        :class:`TcBackend`'s (``borrow``, ``spare``, ``min_rate_Bps``, ``burst_s``, ``mtu``).
    """

    name = "tc-ingress"

    def __init__(self, line_rate_Bps: float, *, dev: str = "eth0", netns: str | None = None,
                 ifb: str | None = None, **options) -> None:
        self.link_dev = dev
        self.ifb = ifb or ifb_name(dev)
        redirect_ingress(dev, self.ifb, netns)
        try:
            super().__init__(line_rate_Bps, dev=self.ifb, netns=netns, **options)
        except BaseException:
            remove_ingress_redirect(dev, self.ifb, netns)
            raise

    def close(self) -> None:
        """Remove the flow classes, the IFB device and the ingress redirect."""
        if self.closed:
            return
        try:
            super().close()
        finally:
            remove_ingress_redirect(self.link_dev, self.ifb, self.netns)
