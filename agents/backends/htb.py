"""The HTB layout the tc backends keep on a device's egress, and the testbed's link shaper built from it.

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
close, puts it back as it found it instead of deleting it
(:class:`jitsched.agents.backends.tc.TcBackend`, which adds and changes the
flow classes ``1:m``).
"""

from __future__ import annotations

import socket

from jitsched.agents.backends.netlink import (
    ETH_P_ARP,
    ETH_P_IP,
    NLM_F_ACK,
    NLM_F_CREATE,
    NLM_F_EXCL,
    NLM_F_REQUEST,
    RTM_DELQDISC,
    RTM_NEWQDISC,
    RTM_NEWTCLASS,
    RTM_NEWTFILTER,
    TC_H_ROOT,
    TcSocket,
    bfifo_attrs,
    htb_class_attrs,
    htb_qdisc_attrs,
    tcmsg,
    u32_filter_attrs,
)
from jitsched.netns import ifindex_in

ARP_FILTER_PRIO = 3  # after the priority band (1) and the ACK filter (2), before flows (>= 0x10)
ROOT_HANDLE = 0x10000  # 1:
LINK_CLASS = 0x10001  # 1:1
BG_MINOR = 2  # 1:2, the HTB default class
BG_LEAF_HANDLE = 0x20000  # 2:
FLOW_MINOR_BASE = 0x10
FLOW_MINOR_MAX = 0xFFF0
MIN_BURST_B = 3028  # two full-size Ethernet frames
PRIO_MINOR = 3  # 1:3, the scheduled-traffic band of a switch port (install_shaper(priority_tos=...))
PRIO_LEAF_HANDLE = 0x30000  # 3:
BG_RESERVE = 0.02  # with a priority band, background keeps this fraction of the line rate
CRIT_MINOR = 6  # 1:6, a switch port's critical band (install_shaper(critical_tos=...))
CRIT_LEAF_HANDLE = 0x60000  # 6:
CRIT_FILTER_PRIO = 4  # its filter: after the scheduled band's (1), the ACK (2) and ARP (3) filters
DSCP_MASK = 0xFC  # the TOS byte's DSCP bits (ECN bits ignored)
ACK_MINOR = 4  # 1:4, pure TCP ACKs (install_shaper(ack_priority=True))
ACK_LEAF_HANDLE = 0x40000  # 4:
ACK_RESERVE = 0.03  # of the line rate; delayed ACKs of a full reverse link need ~1.7 %
# IPv4 total length below this and TCP: a pure ACK. TCP options reach 40 bytes, so a pure
# ACK is 40-80 bytes: 52 with timestamps, 64-80 with one to three SACK blocks. The limit was
# 64, which sent every ACK carrying SACK blocks -- the ACKs of a flow recovering from a loss
# -- to the background class, behind a file's 250 kB backlog at its 24 kbit/s floor while
# ranked flows filled the port: on the quick scenario a VGG16's pull stalled 1.75 s with both
# of its ports idle, its sender at cwnd 1 and RTO back-off 5, its retransmissions reaching
# the receiver and no ACK coming back (tc and ss sampled every 0.25 s). Data segments under
# 128 bytes (88 of payload at most) ride with the ACKs: control messages, harmless.
ACK_MAX_LEN = 128
DL_MINOR = 5  # 1:5, marked DL packets no flow class matches (TcBackend(dl_tos=...))
DL_LEAF_HANDLE = 0x50000  # 5:
DL_FILTER_PRIO = 0xFFF8  # after every flow filter (whose prio is its minor, at most FLOW_MINOR_MAX)
# The filters of the capped destinations (TcBackend.cap_destinations), one per address, all
# at this prio: after the flows' and the unregistered-DL filter, so only traffic no other
# class takes is held.
CAP_FILTER_PRIO = 0xFFF9
# The unregistered-DL class's guaranteed share of the line rate (TcBackend(dl_tos=...)).
# HTB serves every class under its own rate before any borrowing, and ranked flows hold
# rates up to the line: with two frames' worth the class only borrowed what they left.
# paper-mini under jit, transfers of one packet (7278 of 8958), p50: connect 14 -> 8.6 ms,
# the confirmation's way back 25 -> 19 ms, the whole transfer 90 -> 75 ms (plain TCP 62).
DL_RESERVE = 0.10


def burst_bytes(rate_Bps: float, burst_s: float) -> float:
    """Token-bucket depth of a class: ``burst_s`` seconds of ``rate_Bps``, at least two full frames."""
    return max(MIN_BURST_B, rate_Bps * burst_s)


def reserve_Bps(fraction: float, line: float) -> float:
    """A class's guaranteed share of the line rate, bytes/s (at least two full frames)."""
    return max(MIN_BURST_B, fraction * line)


def ack_keys() -> list[tuple[int, int, int]]:
    """u32 keys of a pure TCP ACK: protocol TCP and an IPv4 total length under :data:`ACK_MAX_LEN`."""
    assert ACK_MAX_LEN & (ACK_MAX_LEN - 1) == 0  # a power of two: "below" is a mask
    return [(socket.IPPROTO_TCP << 16, 0x00FF0000, 8), (0, 0xFFFF & ~(ACK_MAX_LEN - 1), 0)]


def tos_keys(tos: int) -> list[tuple[int, int, int]]:
    """u32 keys of IPv4 packets whose TOS byte (the header's second) has ``tos``'s DSCP bits (ECN ignored)."""
    return [((tos & DSCP_MASK) << 16, DSCP_MASK << 16, 0)]


def _queue_limit(line_Bps: float) -> int:
    # 20 ms of the line rate (at least two GSO packets): enough to keep the
    # link busy at testbed RTTs, short enough that a receiver's port queue
    # does not add the ~120 ms a default 1000-packet FIFO would at 100 Mbit/s.
    return int(max(2 * 65536, 0.02 * line_Bps))


def leaf_class_msgs(nl: TcSocket, ifindex: int, minor: int, leaf: int, rate: float, burst_B: float,
                    line: float, burst_s: float, prio: int, filter_prio: int,
                    keys: list[tuple[int, int, int]], name: str) -> list[tuple[bytes, str, bool]]:
    # a class 1:minor (rate with burst_B, line-rate ceiling) with its own short
    # FIFO and the u32 filter that sends matching IPv4 packets to it
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    return [
        (tcmsg(RTM_NEWTCLASS, create, nl.next_seq(), ifindex, ROOT_HANDLE | minor, LINK_CLASS,
               attrs=htb_class_attrs(rate, line, burst_B, burst_bytes(line, burst_s), prio=prio)),
         f"{name} class 1:{minor}", False),
        (tcmsg(RTM_NEWQDISC, create, nl.next_seq(), ifindex, leaf, ROOT_HANDLE | minor,
               attrs=bfifo_attrs(_queue_limit(line))), f"{name} bfifo", False),
        (tcmsg(RTM_NEWTFILTER, create, nl.next_seq(), ifindex, 0, ROOT_HANDLE,
               info=(filter_prio << 16) | socket.htons(ETH_P_IP),
               attrs=u32_filter_attrs(ROOT_HANDLE | minor, keys)), f"{name} filter", False),
    ]


def install_root(nl: TcSocket, ifindex: int, line: float, burst_s: float, bg_rate: float | None = None) -> None:
    """Replace ``ifindex``'s root qdisc with the layout's root, link class 1:1 and background class 1:2
    (guaranteed ``bg_rate`` bytes/s, default the line rate; its ceiling is the line rate)."""
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE
    b = burst_bytes(line, burst_s)
    bg = line if bg_rate is None else bg_rate
    nl.transact([
        # Delete-then-create: an HTB root cannot be re-initialised in place.
        (tcmsg(RTM_DELQDISC, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, 0, TC_H_ROOT),
         "delete old root qdisc", True),
        (tcmsg(RTM_NEWQDISC, create | NLM_F_EXCL, nl.next_seq(), ifindex, ROOT_HANDLE, TC_H_ROOT,
               attrs=htb_qdisc_attrs(BG_MINOR)), "root htb qdisc", False),
        (tcmsg(RTM_NEWTCLASS, create | NLM_F_EXCL, nl.next_seq(), ifindex, LINK_CLASS, ROOT_HANDLE,
               attrs=htb_class_attrs(line, line, b, b)), "link class 1:1", False),
        (tcmsg(RTM_NEWTCLASS, create | NLM_F_EXCL, nl.next_seq(), ifindex, ROOT_HANDLE | BG_MINOR,
               LINK_CLASS, attrs=htb_class_attrs(bg, line, burst_bytes(bg, burst_s), b, prio=1)),
         "background class 1:2", False),
        (tcmsg(RTM_NEWQDISC, create | NLM_F_EXCL, nl.next_seq(), ifindex, BG_LEAF_HANDLE,
               ROOT_HANDLE | BG_MINOR, attrs=bfifo_attrs(_queue_limit(line))), "background bfifo", False),
    ])


def install_ack_class(nl: TcSocket, ifindex: int, line: float, burst_s: float) -> None:
    """Add the ACK class 1:4 (its reserve, borrowing first) for pure TCP ACKs and ARP."""
    reserve = reserve_Bps(ACK_RESERVE, line)
    create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL
    nl.transact([
        *leaf_class_msgs(nl, ifindex, ACK_MINOR, ACK_LEAF_HANDLE, reserve, burst_bytes(reserve, burst_s),
                         line, burst_s, prio=0, filter_prio=2, keys=ack_keys(), name="ACK"),
        # ARP shares the ACK class: in the background class, which a ranked host
        # serves last, ARP went unanswered while DL held the port, and a file that
        # started then failed with "No route to host" (paper-mini, ingress ordered)
        (tcmsg(RTM_NEWTFILTER, create, nl.next_seq(), ifindex, 0, ROOT_HANDLE,
               info=(ARP_FILTER_PRIO << 16) | socket.htons(ETH_P_ARP),
               attrs=u32_filter_attrs(ROOT_HANDLE | ACK_MINOR, [(0, 0, 0)])), "ARP filter", False),
    ])


def _install_priority_bands(nl: TcSocket, ifindex: int, line: float, burst_s: float,
                            bands: list[tuple[int, int, int, int, str]], guaranteed: float) -> None:
    # bands: (tos, minor, leaf handle, filter prio, name), first served first; background after them all.
    # The guaranteed rates add up to ``guaranteed`` (the line less the ACK class's reserve, if any):
    # HTB serves a class under its own rate without asking its parent, so two bands each
    # guaranteed the line sent 1.87x a 10 Mbit/s port's rate with both busy. The first band
    # holds what the background's reserve leaves, every later one two full frames' worth, and
    # all borrow up to the line in prio order: a strict-priority queue of the port's rate.
    reserve = reserve_Bps(BG_RESERVE, line)
    b_reserve, b_line = burst_bytes(reserve, burst_s), burst_bytes(line, burst_s)
    msgs = [(tcmsg(RTM_NEWTCLASS, NLM_F_REQUEST | NLM_F_ACK, nl.next_seq(), ifindex, ROOT_HANDLE | BG_MINOR,
                   LINK_CLASS, attrs=htb_class_attrs(reserve, line, b_reserve, b_line, prio=len(bands))),
             "background class 1:2 (reserve)", False)]
    first = guaranteed - reserve - (len(bands) - 1) * MIN_BURST_B
    for level, (tos, minor, leaf, filter_prio, name) in enumerate(bands):
        rate = first if level == 0 else MIN_BURST_B
        msgs += leaf_class_msgs(nl, ifindex, minor, leaf, rate, burst_bytes(rate, burst_s), line, burst_s,
                                prio=level, filter_prio=filter_prio, keys=tos_keys(tos), name=name)
    nl.transact(msgs)


def install_shaper(dev: str, line_rate_Bps: float, *, netns: str | None = None,
                   burst_s: float = 0.001, priority_tos: int | None = None,
                   critical_tos: int | None = None, ack_priority: bool = False) -> None:
    """Shape ``dev``'s egress to ``line_rate_Bps`` with the backend's HTB layout and no flow classes.

    Replaces whatever root qdisc ``dev`` had. Background class 1:2 gets the
    line rate (less the ACK class's reserve, with ``ack_priority``) and a short
    byte FIFO (fq_codel and sfq are not in every kernel; this one has HTB, TBF,
    the FIFOs and u32 only). The classes' guaranteed rates add up to the line
    rate at most, so the link never sends past it.

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
    critical_tos : int or None
        A switch port's band for critical jobs' packets (these DSCP bits): class
        1:6, laid out as the scheduled-traffic band and served before it. With
        both bands the critical band is guaranteed the rate and the scheduled
        band two full frames' worth, and both borrow up to the line rate by
        priority: critical, then scheduled, then background.
    ack_priority : bool
        Pure TCP ACKs leaving ``dev`` go to class 1:4 (guaranteed
        :data:`ACK_RESERVE` of the line rate, borrowing first; the other
        classes' guaranteed rates leave it that reserve): a host whose
        egress is busy must not hold back the ACKs of the data it receives,
        or its inbound flows slow down with its outbound load.
    """
    ifindex = ifindex_in(netns, dev)
    nl = TcSocket(netns)
    try:
        bands = [(int(tos), minor, leaf, fprio, name) for tos, minor, leaf, fprio, name in (
            (critical_tos, CRIT_MINOR, CRIT_LEAF_HANDLE, CRIT_FILTER_PRIO, "critical"),
            (priority_tos, PRIO_MINOR, PRIO_LEAF_HANDLE, 1, "priority")) if tos is not None]
        # the classes' guaranteed rates add up to the line rate at most, the ACK class's reserve included
        guaranteed = line_rate_Bps - (reserve_Bps(ACK_RESERVE, line_rate_Bps) if ack_priority else 0.0)
        install_root(nl, ifindex, line_rate_Bps, burst_s, bg_rate=None if bands else guaranteed)
        if bands:
            _install_priority_bands(nl, ifindex, line_rate_Bps, burst_s, bands, guaranteed)
        if ack_priority:
            install_ack_class(nl, ifindex, line_rate_Bps, burst_s)
    finally:
        nl.close()
