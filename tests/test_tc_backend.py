"""The tc backend's netlink requests, checked against what a real network namespace's kernel holds.

Needs root and network namespaces (CI has both). Without them these tests
fail with the reason rather than skip, so a broken CI machine cannot pass
silently; set JITSCHED_NO_NETNS=1 to skip them on a workstation that lacks them.
"""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest
from pyroute2 import IPRoute

from jitsched.agents.agent import Agent, load_backend
from jitsched.agents.backends.base import (
    BACKENDS,
    FLOW_FLOOR,
    FLOW_FLOORS_SUM,
    FlowRate,
    payload_share,
)
from jitsched.agents.backends.htb import (
    BG_MINOR,
    FLOW_MINOR_BASE,
    LINK_CLASS,
    MIN_BURST_B,
    ROOT_HANDLE,
    ack_keys,
    install_shaper,
)
from jitsched.agents.backends.netlink import u32_keys
from jitsched.agents.backends.tc import TcBackend, TcIngressBackend, ifb_name
from jitsched.agents.options import AgentOptions
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.netns import BULK_SINK, BULK_SOURCE, veth_pair

LINE = 12.5e6  # 100 Mbit/s in bytes/s


@pytest.fixture
def ns(netns_available):
    """A scratch namespace holding a veth pair a0/a1 (a0 up); removed even if the test fails."""
    name = f"jst-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(["ip", "netns", "add", name], check=True)
        subprocess.run(["ip", "-n", name, "link", "add", "a0", "type", "veth", "peer", "name", "a1"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "a0", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def classes(ns: str, dev: str = "a0") -> dict[int, tuple[int, int, int]]:
    """``{handle: (parent, rate, ceil)}`` of ``dev``'s HTB classes, decoded by pyroute2 (bytes/s)."""
    with IPRoute(netns=ns) as ip:
        idx = ip.link_lookup(ifname=dev)[0]
        out = {}
        for c in ip.get_classes(idx):
            p = c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
            out[c["handle"]] = (c["parent"], p["rate"], p["ceil"])
        return out


def qdisc_kinds(ns: str) -> dict[int, str]:
    with IPRoute(netns=ns) as ip:
        idx = ip.link_lookup(ifname="a0")[0]
        return {q["handle"]: q.get_attr("TCA_KIND") for q in ip.get_qdiscs(idx)}


def filters_text(ns: str) -> str:
    # iproute2 is the reference decoder of u32 selectors.
    return subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", "a0"],
                          capture_output=True, text=True, check=True).stdout


def flow(fid: str, rate: float, sport: int = 40000) -> FlowRate:
    return FlowRate(fid, rate, "198.18.0.1", sport, "198.18.0.2", 5201)


def test_registered_as_tc():
    assert BACKENDS["tc"] is TcBackend


def test_u32_keys_cover_protocol_addresses_and_ports():
    keys = u32_keys(flow("j/t", 1.0, sport=40000))
    assert (6 << 16, 0x00FF0000, 8) in keys
    assert (0xC6120001, 0xFFFFFFFF, 12) in keys
    assert (0xC6120002, 0xFFFFFFFF, 16) in keys
    assert ((40000 << 16) | 5201, 0xFFFFFFFF, 20) in keys
    only_dst = u32_keys(FlowRate("x", 1.0, dst_addr="198.18.0.9", dst_port=80))
    assert only_dst == [(6 << 16, 0x00FF0000, 8), (0xC6120009, 0xFFFFFFFF, 16), (80, 0xFFFF, 20)]


def _u32_matches(keys, header: bytes) -> bool:
    # the kernel's u32 match: every key's 32-bit word at its offset, masked, equals its value
    return all(int.from_bytes(header[off:off + 4], "big") & mask == value for value, mask, off in keys)


def _ipv4(total_len: int, proto: int = 6) -> bytes:
    return struct.pack("!BBHHHBBH4s4s", 0x45, 0, total_len, 0, 0, 64, proto, 0,
                       bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2]))


@pytest.mark.parametrize(("total_len", "proto", "is_ack"), [
    (40, 6, True),     # bare ACK
    (52, 6, True),     # with timestamps
    (64, 6, True),     # timestamps + one SACK block (missed by the old 64-byte limit)
    (80, 6, True),     # timestamps + three SACK blocks: 40 bytes of options, the most TCP has
    (1500, 6, False),  # a full data segment
    (576, 6, False),
    (60, 17, False),   # UDP
])
def test_ack_keys_match_every_pure_ack_size_and_no_data_segment(total_len, proto, is_ack):
    assert _u32_matches(ack_keys(), _ipv4(total_len, proto)) is is_ack


def test_creates_layout_classes_filters_and_removes_everything(ns):
    b = TcBackend(LINE, dev="a0", netns=ns, mtu=1500)
    try:
        assert qdisc_kinds(ns)[ROOT_HANDLE] == "htb"
        b.apply([flow("j/a", 1e6, 40000), flow("j/b", 2e6, 40001)], 5e6)
        cl = classes(ns)
        f = (1500 + 14) / (1500 - 52)
        assert cl[LINK_CLASS][1:] == (int(LINE), int(LINE))
        assert cl[ROOT_HANDLE | BG_MINOR] == (LINK_CLASS, 5_000_000, int(LINE))
        a, bb = ROOT_HANDLE | FLOW_MINOR_BASE, ROOT_HANDLE | (FLOW_MINOR_BASE + 1)
        assert cl[a] == (LINK_CLASS, int(1e6 * f), int(1e6 * f))
        assert cl[bb] == (LINK_CLASS, int(2e6 * f), int(2e6 * f))
        txt = filters_text(ns)
        assert "flowid 1:10" in txt and "flowid 1:11" in txt
        assert "match 9c401451/ffffffff at 20" in txt  # 40000 -> 5201
        assert "match 9c411451/ffffffff at 20" in txt  # 40001 -> 5201
        assert "match c6120002/ffffffff at 16" in txt

        # Change one rate, drop the other flow: one class changes, the other goes with its filter.
        b.apply([flow("j/a", 3e6, 40000)], 4e6)
        cl = classes(ns)
        assert cl[a][1] == int(3e6 * f)
        assert bb not in cl
        assert cl[ROOT_HANDLE | BG_MINOR][1] == 4_000_000
        txt = filters_text(ns)
        assert "flowid 1:10" in txt and "flowid 1:11" not in txt
        assert b.last_apply_s > 0
    finally:
        b.close()
    assert ROOT_HANDLE not in qdisc_kinds(ns)


def test_zero_rate_is_floored_and_oversubscription_scaled_to_line(ns):
    b = TcBackend(LINE, dev="a0", netns=ns, flow_floor=0.004)
    try:
        b.apply([flow("j/a", 0.0, 40000), flow("j/b", LINE, 40001), flow("j/c", LINE, 40002)], 0.0)
        cl = classes(ns)
        rates = [cl[ROOT_HANDLE | m][1] for m in (0x10, 0x11, 0x12)]
        assert rates[0] > 0
        # HTB lets classes under their own rate ignore the parent: the sum must fit the link.
        assert sum(rates) + cl[ROOT_HANDLE | BG_MINOR][1] <= LINE * 1.001
        assert rates[1] == rates[2] > 40 * rates[0]
    finally:
        b.close()


@pytest.mark.parametrize("floor", [None, 0.002, 0.0])
def test_a_held_flow_gets_its_flow_floor(ns, floor):
    # ranked flows (rate zero: they borrow by level) keep classes at their floor, in whole frames
    b = TcBackend(LINE, dev="a0", netns=ns, **({} if floor is None else {"flow_floor": floor}))
    try:
        b.apply([FlowRate("j/a", 0.0, "198.18.0.1", 40000, "198.18.0.2", 5001, prio=0),
                 FlowRate("j/b", 0.0, "198.18.0.1", 40001, "198.18.0.2", 5001, prio=1)], 0.0)
        held = classes(ns)[ROOT_HANDLE | 0x11][1]
        share = FLOW_FLOOR if floor is None else floor
        assert held == int(max(MIN_BURST_B, share * LINE) / payload_share())
    finally:
        b.close()


@pytest.mark.parametrize("n, floors_sum", [(3, None), (10, None), (10, 0.0), (10, 0.01)])
def test_ranked_flows_floors_add_up_to_their_sum_at_most(ns, n, floors_sum):
    # past FLOW_FLOORS_SUM / FLOW_FLOOR ranked flows each gets an equal part of the sum;
    # a planned flow (no level) keeps the whole floor
    kw = {} if floors_sum is None else {"flow_floors_sum": floors_sum}
    b = TcBackend(LINE, dev="a0", netns=ns, borrow=True, **kw)
    try:
        ranked = [FlowRate(f"j/{k}", 0.0, "198.18.0.1", 40000 + k, "198.18.0.2", 5001, prio=k % 7)
                  for k in range(n)]
        b.apply([*ranked, FlowRate("j/planned", 0.0, "198.18.0.1", 39999, "198.18.0.2", 5001)], 0.0)
        cl = classes(ns)
        rates = [cl[ROOT_HANDLE | (FLOW_MINOR_BASE + k)][1] for k in range(n + 1)]
        total = FLOW_FLOORS_SUM if floors_sum is None else floors_sum
        each = FLOW_FLOOR * LINE if not total else max(MIN_BURST_B, min(FLOW_FLOOR * LINE, total * LINE / n))
        assert rates[:n] == [int(each / payload_share())] * n
        assert rates[n] == int(FLOW_FLOOR * LINE / payload_share())
    finally:
        b.close()


def test_adopts_testbed_shaper_and_restores_it(ns):
    install_shaper("a0", LINE, netns=ns)
    # A crashed agent's leftover flow class must not survive a new backend.
    b0 = TcBackend(LINE, dev="a0", netns=ns)
    b0.apply([flow("old/x", 1e6)], 1e6)
    b0.nl.close()  # "crash": no close()
    b = TcBackend(LINE, dev="a0", netns=ns)
    try:
        assert b.adopted
        assert set(classes(ns)) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR}
        b.apply([flow("j/a", 1e6)], 2e6)
        assert ROOT_HANDLE | FLOW_MINOR_BASE in classes(ns)
    finally:
        b.close()
    cl = classes(ns)
    assert set(cl) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR}
    assert cl[ROOT_HANDLE | BG_MINOR][1] == int(LINE)  # background gets the whole link back
    assert qdisc_kinds(ns)[ROOT_HANDLE] == "htb"
    assert "flowid" not in filters_text(ns)


def test_shaper_priority_band_for_a_dscp_class(ns):
    from jitsched.agents.backends.htb import BG_RESERVE, PRIO_LEAF_HANDLE, PRIO_MINOR

    install_shaper("a0", LINE, netns=ns, priority_tos=0x88)
    cl = classes(ns)
    assert set(cl) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR, ROOT_HANDLE | PRIO_MINOR}
    # the band may take the whole link; background keeps its reserve and borrows after it
    assert cl[ROOT_HANDLE | PRIO_MINOR][1:] == (int(LINE * (1 - BG_RESERVE)), int(LINE))
    assert cl[ROOT_HANDLE | BG_MINOR][1:] == (int(LINE * BG_RESERVE), int(LINE))
    assert qdisc_kinds(ns)[PRIO_LEAF_HANDLE] == "bfifo"
    text = filters_text(ns)
    # the TOS byte (second of the IPv4 header), DSCP bits only, sent to 1:3
    assert "match 00880000/00fc0000 at 0" in text
    assert "flowid 1:3" in text
    # without a band the shaper is the plain two-class layout
    install_shaper("a0", LINE, netns=ns)
    assert set(classes(ns)) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR}
    assert "flowid" not in filters_text(ns)


def test_ack_class_on_the_shaper_and_in_a_backend_of_its_own(ns):
    from jitsched.agents.backends.htb import ACK_MINOR, ACK_RESERVE

    install_shaper("a0", LINE, netns=ns, ack_priority=True)
    cl = classes(ns)
    assert cl[ROOT_HANDLE | ACK_MINOR][1:] == (int(LINE * ACK_RESERVE), int(LINE))
    # the background class leaves the ACK class its reserve and borrows the rest
    assert cl[ROOT_HANDLE | BG_MINOR][1:] == (int(LINE * (1 - ACK_RESERVE)), int(LINE))
    text = filters_text(ns)
    # TCP, and an IPv4 total length under 128 bytes (the low half of the header's first word)
    assert "match 00060000/00ff0000 at 8" in text
    assert "match 00000000/0000ff80 at 0" in text
    assert "flowid 1:4" in text
    subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "a0", "root"], check=True)
    # a backend that builds its own qdisc adds the class, and flow floors leave its reserve
    b = TcBackend(LINE, dev="a0", netns=ns)
    try:
        assert ROOT_HANDLE | ACK_MINOR in classes(ns)
        b.apply([flow("j/a", LINE), flow("j/b", LINE, sport=40001)], 0.0)
        cl = classes(ns)
        flows = [r for h, (_, r, _) in cl.items() if h & 0xFFFF >= FLOW_MINOR_BASE]
        assert sum(flows) + cl[ROOT_HANDLE | ACK_MINOR][1] <= LINE * 1.001
    finally:
        b.close()


def test_refused_request_raises_with_the_flow(ns):
    b = TcBackend(LINE, dev="a0", netns=ns)
    try:
        # Remove the qdisc behind the backend's back: its next change must fail loudly.
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "a0", "root"], check=True)
        with pytest.raises(OSError, match="j/a"):
            b.apply([flow("j/a", 1e6)], 1e6)
    finally:
        b.close()


def test_ingress_backend_schedules_a0s_ingress_on_an_ifb_and_removes_it(ns):
    assert BACKENDS["tc-ingress"] is TcIngressBackend and ifb_name("a0") == "jsi-a0"
    assert len(ifb_name("a-very-long-interface")) == 15
    b = TcIngressBackend(LINE, dev="a0", netns=ns)
    try:
        with IPRoute(netns=ns) as ip:
            ifb = ip.link_lookup(ifname="jsi-a0")[0]
            a0 = ip.link_lookup(ifname="a0")[0]
            assert ip.get_links(ifb)[0].get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") == "ifb"
            # the kernel's IFB queue length is kept (a longer one measured no better)
            assert ip.get_links(ifb)[0].get_attr("IFLA_TXQLEN") == 32
            assert {q.get_attr("TCA_KIND") for q in ip.get_qdiscs(a0)} >= {"ingress"}
            ifb_qdiscs = {q["handle"]: q.get_attr("TCA_KIND") for q in ip.get_qdiscs(ifb)}
        assert ifb_qdiscs[ROOT_HANDLE] == "htb"
        redirect = subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", "a0", "ingress"],
                                  capture_output=True, text=True, check=True).stdout
        assert "mirred" in redirect and "jsi-a0" in redirect
        # inbound flows are matched on the IFB exactly as outbound ones on a link
        b.apply([FlowRate("j/in", 1e6, "198.18.0.2", 5201, "198.18.0.1", 40000)], 5e6)
        shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "filter", "show", "dev", "jsi-a0"],
                               capture_output=True, text=True, check=True).stdout
        assert "flowid 1:10" in shown and "match c6120002/ffffffff at 12" in shown
        # a second backend (an agent restarted after a crash) replaces the leftovers
        b.closed = True
        b.nl.close()
        b = TcIngressBackend(LINE, dev="a0", netns=ns)
    finally:
        b.close()
    with IPRoute(netns=ns) as ip:
        assert not ip.link_lookup(ifname="jsi-a0")
        assert "ingress" not in {q.get_attr("TCA_KIND") for q in ip.get_qdiscs(ip.link_lookup(ifname="a0")[0])}


def test_ingress_backend_runs_at_the_link_rate_while_no_flow_is_scheduled(ns):
    from jitsched.agents.backends.base import INGRESS_SHARE
    from jitsched.agents.backends.htb import BG_MINOR, LINK_CLASS

    for share in (0.0, 1.5, math.nan):
        with pytest.raises(ValueError, match="share must be within"):
            TcIngressBackend(LINE, dev="a0", netns=ns, share=share)
    assert INGRESS_SHARE == 0.98
    shaped = int(0.98 * LINE)  # the default share, by hand
    b = TcIngressBackend(LINE, dev="a0", netns=ns, borrow=True)
    try:
        def link_and_bg_ceil():
            cl = classes(ns, "jsi-a0")
            return cl[LINK_CLASS][1:], cl[ROOT_HANDLE | BG_MINOR][2]

        # nothing to order: the files get the whole port
        assert link_and_bg_ceil() == ((int(LINE), int(LINE)), int(LINE))
        b.apply([FlowRate("j/in", 1e6, "198.18.0.2", 5201, "198.18.0.1", 40000, prio=0)], 0.0)
        assert link_and_bg_ceil() == ((shaped, shaped), shaped)
        # the leftover the daemon gives for the whole link is held to the shaped rate
        b.apply([], LINE)
        assert link_and_bg_ceil() == ((int(LINE), int(LINE)), int(LINE))
    finally:
        b.close()
    # share 1: no headroom, with or without flows
    b = TcIngressBackend(LINE, dev="a0", netns=ns, share=1.0)
    try:
        b.apply([FlowRate("j/in", 1e6, "198.18.0.2", 5201, "198.18.0.1", 40000, prio=0)], 0.0)
        assert classes(ns, "jsi-a0")[LINK_CLASS][1:] == (int(LINE), int(LINE))
    finally:
        b.close()


def class_prios(ns: str) -> dict[int, int]:
    """``{handle: HTB borrowing prio}`` of a0's classes, decoded by pyroute2."""
    with IPRoute(netns=ns) as ip:
        idx = ip.link_lookup(ifname="a0")[0]
        return {c["handle"]: c.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["prio"]
                for c in ip.get_classes(idx)}


def test_priority_levels_borrow_by_level_and_background_last(ns):
    from jitsched.agents.backends.htb import DL_MINOR, MIN_BURST_B
    from jitsched.agents.backends.tc import BG_LAST_PRIO, MAX_FLOW_PRIO

    install_shaper("a0", LINE, netns=ns)
    b = TcBackend(LINE, dev="a0", netns=ns, dl_tos=0x88)  # borrow=False: levels borrow anyway
    try:
        # background starts last and an empty schedule leaves it there: HTB keeps a busy
        # class under the prio it became busy with, so a file that starts while nothing
        # is ranked must not be filed ahead of the DL flows ranked later
        assert class_prios(ns)[ROOT_HANDLE | BG_MINOR] == BG_LAST_PRIO
        b.apply([], LINE)
        assert class_prios(ns)[ROOT_HANDLE | BG_MINOR] == BG_LAST_PRIO
        # the unregistered-DL class borrows first, matched on the TOS after every flow filter
        assert class_prios(ns)[ROOT_HANDLE | DL_MINOR] == 0
        text = filters_text(ns)
        assert "match 00880000/00fc0000 at 0" in text and "flowid 1:5" in text and "pref 65528" in text
        ranked = [FlowRate("j/a", 0.0, "198.18.0.1", 40000, "198.18.0.2", 5201, prio=0),
                  FlowRate("j/b", 0.0, "198.18.0.1", 40001, "198.18.0.2", 5201, prio=9)]
        b.apply(ranked, 0.0)
        cl, pr = classes(ns), class_prios(ns)
        minors = {fid: inst.minor for fid, inst in b.flows.items()}
        assert pr[ROOT_HANDLE | minors["j/a"]] == 0
        assert pr[ROOT_HANDLE | minors["j/b"]] == MAX_FLOW_PRIO  # capped at the last DL level
        assert all(cl[ROOT_HANDLE | m][2] == int(LINE) for m in minors.values())  # ceiling: the line
        assert pr[ROOT_HANDLE | BG_MINOR] == BG_LAST_PRIO
        assert cl[ROOT_HANDLE | BG_MINOR][1] == MIN_BURST_B  # nothing guaranteed to background
        # rates only again: background borrows first, as before; no flow: it stays first
        b.apply([flow("j/c", 1e6)], 5e6)
        assert class_prios(ns)[ROOT_HANDLE | BG_MINOR] == 1
        assert classes(ns)[ROOT_HANDLE | BG_MINOR][1] == int(5e6)
        b.apply([], LINE)
        assert class_prios(ns)[ROOT_HANDLE | BG_MINOR] == 1
        # the unregistered-DL class keeps its reserve: HTB serves classes under their own
        # rate before any borrowing, so flows asking for the whole line are scaled to
        # leave it (12.5e6 - 3028 - 1.25e6 = 11 246 972 bytes/s between them)
        assert classes(ns)[ROOT_HANDLE | DL_MINOR][1] == 1_250_000
        b.apply([flow("j/x", LINE), flow("j/y", LINE)], 0.0)
        cl = classes(ns)
        got = sum(cl[ROOT_HANDLE | inst.minor][1] for inst in b.flows.values())
        assert 11_246_972 - 2 <= got <= 11_246_972
    finally:
        b.close()
    # adopted shaper: closing puts it back as it was, without the DL class
    assert set(classes(ns)) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR}
    assert "flowid" not in filters_text(ns)


def class_packets(ns: str, minor: int) -> int:
    """Packets class 1:minor of a0 has sent, decoded by pyroute2."""
    with IPRoute(netns=ns) as ip:
        idx = ip.link_lookup(ifname="a0")[0]
        for c in ip.get_classes(idx):
            if c["handle"] == ROOT_HANDLE | minor:
                return int(c.get_attr("TCA_STATS")["packets"])
    raise AssertionError(f"no class 1:{minor:x}")


def test_every_dl_mark_goes_to_the_unregistered_dl_class(ns):
    # A receiver registers an inbound flow once it has read the flow's name from its
    # first bytes, so those bytes cross the receiver's ingress before any flow class
    # matches them; a critical job's carry the critical mark, not the common one. In the
    # background class at a floor of 0 they waited behind the files and the flow stalled
    # for 13 s (classes scenario); in the unregistered-DL class they go first.
    from jitsched.agents.backends.htb import DL_MINOR

    install_shaper("a0", LINE, netns=ns)
    subprocess.run(["ip", "-n", ns, "addr", "add", "198.18.250.1/24", "dev", "a0"], check=True)
    subprocess.run(["ip", "-n", ns, "neigh", "add", "198.18.250.2", "lladdr", "02:00:00:00:00:02",
                    "dev", "a0"], check=True)
    # no IPv6 chatter (router solicitations land in the background class), then a0 gets its carrier
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1", "net.ipv6.conf.a0.disable_ipv6=1"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "a1", "up"], check=True)
    b = TcBackend(LINE, dev="a0", netns=ns, dl_tos=(0x88, 0xB8))
    try:
        text = filters_text(ns)
        assert text.count("flowid 1:5") == 2
        assert "match 00880000/00fc0000 at 0" in text and "match 00b80000/00fc0000 at 0" in text

        def sent(tos: int) -> tuple[int, int]:
            before = class_packets(ns, DL_MINOR), class_packets(ns, BG_MINOR)
            poke = ("import socket\n"
                    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                    f"s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, {tos})\n"
                    "for _ in range(20): s.sendto(b'x' * 200, ('198.18.250.2', 9))")
            subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", poke], check=True)
            return class_packets(ns, DL_MINOR) - before[0], class_packets(ns, BG_MINOR) - before[1]

        assert sent(0xB8) == (20, 0)  # the critical mark
        assert sent(0x88) == (20, 0)  # the common one
        assert sent(0x00)[0] == 0  # unmarked: not DL
    finally:
        b.close()
    assert "flowid" not in filters_text(ns)  # closing removed both filters


def test_no_dl_marks_is_no_dl_class_and_no_reserve_for_one(ns):
    # an empty list of marks (the testbed's dl_marks with none set) is no DL class at all:
    # the flows are not scaled to leave a reserve to a class that is not there
    from jitsched.agents.backends.htb import DL_MINOR

    install_shaper("a0", LINE, netns=ns)
    b = TcBackend(LINE, dev="a0", netns=ns, dl_tos=())
    try:
        assert b.dl_tos is None and b.dl_reserve_Bps == 0.0 and not b.holds_floor
        b.apply([flow("j/x", LINE)], 0.0)
        assert ROOT_HANDLE | DL_MINOR not in classes(ns)
        assert classes(ns)[ROOT_HANDLE | b.flows["j/x"].minor][1] > 0.99 * LINE
    finally:
        b.close()


def test_arp_goes_through_the_ack_class_not_the_background(ns):
    # A ranked host serves its background class last; ARP left there went
    # unanswered behind DL and a new file failed with "No route to host".
    from jitsched.agents.backends.htb import ACK_MINOR, BG_MINOR

    install_shaper("a0", LINE, netns=ns, ack_priority=True)
    assert "protocol arp" in filters_text(ns)
    subprocess.run(["ip", "-n", ns, "addr", "add", "198.18.250.1/24", "dev", "a0"], check=True)
    # no IPv6 chatter (router solicitations land in the background class), then a0 gets its carrier
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1"], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "a1", "up"], check=True)
    before = class_packets(ns, ACK_MINOR), class_packets(ns, BG_MINOR)
    # nobody answers on a1's side: the kernel sends ARP requests for .2, nothing else
    poke = ("import socket, time\n"
            "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.sendto(b'x', ('198.18.250.2', 9)); time.sleep(1.5)")
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", poke], check=True)
    after = class_packets(ns, ACK_MINOR), class_packets(ns, BG_MINOR)
    assert after[0] - before[0] >= 1  # the ARP requests
    assert after[1] == before[1]  # and nothing in the background class


@pytest.fixture
def ns_pair(netns_available):
    """Namespaces src (a0, 198.18.200.1) and dst (a1, 198.18.200.2) joined by a veth pair."""
    from jitsched.netns import veth_pair

    with veth_pair() as pair:
        yield pair


def _kill(*procs) -> None:
    """Stop the test's traffic processes (those it started: None for one it did not)."""
    for p in procs:
        if p is not None:
            p.kill()
            p.wait()


def class_bytes(ns: str) -> dict[int, int]:
    """``{minor: bytes sent}`` of a0's HTB classes, decoded by pyroute2."""
    with IPRoute(netns=ns) as ip:
        idx = ip.link_lookup(ifname="a0")[0]
        return {c["handle"] & 0xFFFF: int(c.get_attr("TCA_STATS")["bytes"]) for c in ip.get_classes(idx)}


def test_shaper_critical_band_is_served_before_the_scheduled_band(ns):
    from jitsched.agents.backends.htb import BG_RESERVE, CRIT_LEAF_HANDLE, CRIT_MINOR, PRIO_MINOR

    install_shaper("a0", LINE, netns=ns, priority_tos=0x88, critical_tos=0xB8)
    cl = classes(ns)
    assert set(cl) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR, ROOT_HANDLE | PRIO_MINOR, ROOT_HANDLE | CRIT_MINOR}
    # the critical band holds what the background's reserve leaves, the scheduled band two
    # frames' worth: the guaranteed rates add up to the line, and both bands borrow up to it
    assert cl[ROOT_HANDLE | CRIT_MINOR][1:] == (int(LINE * (1 - BG_RESERVE) - MIN_BURST_B), int(LINE))
    assert cl[ROOT_HANDLE | PRIO_MINOR][1:] == (MIN_BURST_B, int(LINE))
    assert cl[ROOT_HANDLE | BG_MINOR][1:] == (int(LINE * BG_RESERVE), int(LINE))
    assert sum(r for h, (_, r, _) in cl.items() if h != LINK_CLASS) <= LINE
    assert qdisc_kinds(ns)[CRIT_LEAF_HANDLE] == "bfifo"
    text = filters_text(ns)
    assert "match 00b80000/00fc0000 at 0" in text and "flowid 1:6" in text
    assert "match 00880000/00fc0000 at 0" in text and "flowid 1:3" in text
    # HTB serves the classes under their rates by prio: critical, scheduled, background
    shown = subprocess.run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev", "a0"],
                           capture_output=True, text=True, check=True).stdout
    prio = {line.split()[2]: int(line.split("prio ")[1].split()[0]) for line in shown.splitlines() if "prio " in line}
    assert (prio["1:6"], prio["1:3"], prio["1:2"]) == (0, 1, 2)
    # the critical band alone: background right after it
    install_shaper("a0", LINE, netns=ns, critical_tos=0xB8)
    assert set(classes(ns)) == {LINK_CLASS, ROOT_HANDLE | BG_MINOR, ROOT_HANDLE | CRIT_MINOR}


def test_the_critical_band_takes_the_port_from_unmarked_traffic(ns_pair):
    import time

    from jitsched.agents.backends.htb import CRIT_MINOR

    src, dst = ns_pair
    line = 1.25e6  # 10 Mbit/s
    install_shaper("a0", line, netns=src, critical_tos=0xB8)
    sink = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SINK, "198.18.200.2"])
    source = None
    try:
        time.sleep(0.3)  # the sink listens
        # two bulk flows, the one from port 40000 marked DSCP EF
        source = subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE,
                                   "198.18.200.1", "198.18.200.2", "4", "0xB8"])
        time.sleep(1.0)
        before = class_bytes(src)
        time.sleep(1.5)
        after = class_bytes(src)
        crit, bg = (after[m] - before[m] for m in (CRIT_MINOR, BG_MINOR))
        # the marked flow takes what the background's 2 % reserve leaves; unmarked, they share
        assert crit / (1.5 * line) > 0.85 and bg / (1.5 * line) < 0.1, (crit, bg)
    finally:
        _kill(source, sink)


def _testbed_segments(*pairs: tuple[str, str]) -> None:
    """Two segments per GSO packet at most on each (namespace, device), as the testbed's links have:
    a 64 KB one is 52 ms of a 10 Mbit/s link, 3.5 % of a 1.5 s window at either end."""
    from jitsched.testbed import GSO_MAX_SEGS

    for ns, dev in pairs:
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "gso_max_segs", str(GSO_MAX_SEGS)], check=True)


def _link_share(src: str, line: float, seconds: float = 1.5) -> float:
    """The link class's rate over about ``seconds`` as a share of ``line`` (bytes/s).

    A read of the counters takes a while on a loaded machine (pyroute2 enters the
    namespace): the window runs from the middle of one read to the middle of the next."""
    def read() -> tuple[int, float]:
        t0 = time.monotonic()
        sent = class_bytes(src)[LINK_CLASS & 0xFFFF]
        return sent, (t0 + time.monotonic()) / 2
    b0, t0 = read()
    time.sleep(seconds)
    b1, t1 = read()
    return (b1 - b0) / (line * (t1 - t0))


def test_two_busy_bands_send_no_more_than_the_port(ns_pair):
    # every band under its own guaranteed rate is served without asking the link class:
    # two bands each guaranteed the line sent 1.87x the port's rate with both busy
    from jitsched.agents.backends.htb import CRIT_MINOR, PRIO_MINOR

    src, dst = ns_pair
    line = 1.25e6  # 10 Mbit/s
    _testbed_segments((src, "a0"))
    install_shaper("a0", line, netns=src, priority_tos=0x88, critical_tos=0xB8)
    sink = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SINK, "198.18.200.2"])
    source = None
    try:
        time.sleep(0.3)  # the sink listens
        source = subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE,
                                   "198.18.200.1", "198.18.200.2", "30", "0xB8", "0x88"])
        time.sleep(1.0)
        before = class_bytes(src)
        share = _link_share(src, line)
        after = class_bytes(src)
        assert share < 1.03, share
        # strict priority within the port's rate: the critical band first
        crit, prio = (after[m] - before[m] for m in (CRIT_MINOR, PRIO_MINOR))
        assert crit > 0.85 * (crit + prio), (crit, prio)
    finally:
        _kill(source, sink)


def test_the_agents_classes_guarantee_no_more_than_the_link(ns_pair):
    # the unregistered-DL class, the ACK class and the background class all busy: their
    # guaranteed rates are served without asking the link class, so the background's
    # leaves the other two their reserves or the link sends past its rate
    src, dst = ns_pair
    line = 1.25e6  # 10 Mbit/s
    _testbed_segments((src, "a0"), (dst, "a1"))
    install_shaper("a0", line, netns=src, ack_priority=True)
    install_shaper("a1", line, netns=dst)  # the reverse flow's data: src's egress carries its ACKs
    b = TcBackend(line, dev="a0", netns=src, dl_tos=0xB8, background_floor=0.05)
    procs = []
    try:
        cl = classes(src)
        assert sum(r for h, (_, r, _) in cl.items() if h != LINK_CLASS) <= line
        b.apply([], line)  # nothing scheduled: the background class takes what the reserves leave
        cl = classes(src)
        assert sum(r for h, (_, r, _) in cl.items() if h != LINK_CLASS) <= line
        for ns, addr in ((dst, "198.18.200.2"), (src, "198.18.200.1")):
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", BULK_SINK, addr]))
        time.sleep(0.3)  # the sinks listen
        # one flow marked DL (the unregistered-DL class), one not (background), and one back
        procs.append(subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE,
                                       "198.18.200.1", "198.18.200.2", "30", "0xB8"]))
        procs.append(subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SOURCE,
                                       "198.18.200.2", "198.18.200.1", "30"]))
        time.sleep(1.0)
        share = _link_share(src, line)
        assert share < 1.03, share
        # a scheduled flow and its floor: the same sum
        b.apply([FlowRate("j/x", 0.5 * line, "198.18.200.1", 40001, "198.18.200.2", 5201)], 0.5 * line)
        time.sleep(1.0)
        share = _link_share(src, line)
        assert share < 1.03, share
    finally:
        _kill(*procs)
        b.close()


def test_a_running_flow_moved_to_a_higher_level_gets_the_link(ns_pair):
    # HTB files a busy class under the prio it became busy with; a prio changed in
    # place counts only once the class's queue empties, which a bulk TCP flow's
    # does not. A flow promoted while running must get a class at its new level.
    import time

    src, dst = ns_pair
    line = 1.25e6  # 10 Mbit/s
    install_shaper("a0", line, netns=src)
    sink = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SINK, "198.18.200.2"])
    b = TcBackend(line, dev="a0", netns=src)
    source = None
    try:
        def ranked(prio_a: int, prio_b: int) -> list[FlowRate]:
            # b is guaranteed 30 % throughout: a flow held at its floor stalls in TCP's
            # retransmission back-off, which would hide what HTB does
            return [FlowRate("j/a", 0.0, "198.18.200.1", 40000, "198.18.200.2", 5201, prio=prio_a),
                    FlowRate("j/b", 0.3 * line, "198.18.200.1", 40001, "198.18.200.2", 5201, prio=prio_b)]

        def shares(window_s: float = 1.0) -> tuple[float, float]:
            ma, mb = b.flows["j/a"].minor, b.flows["j/b"].minor
            before = class_bytes(src)
            time.sleep(window_s)
            after = class_bytes(src)
            da, db = after[ma] - before[ma], after[mb] - before[mb]
            return da / (line * window_s), db / (line * window_s)

        b.apply(ranked(3, 5), 0.0)
        time.sleep(0.3)  # the sink listens
        source = subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE, "198.18.200.1",
                                   "198.18.200.2", "5"])
        time.sleep(1.0)
        a_share, b_share = shares()
        # level 3 borrows ahead of 5: a takes what b's guarantee leaves (TCP payload vs wire bytes)
        assert a_share > 0.6 and b_share < 0.4, (a_share, b_share)
        minor_b = b.flows["j/b"].minor
        b.apply(ranked(3, 1), 0.0)  # b promoted past a while both run
        time.sleep(0.3)
        a_share, b_share = shares()
        assert b_share > 0.7 and a_share < 0.15, (a_share, b_share)
        assert b.flows["j/b"].minor != minor_b and b.relevels == 1
        # the class b left has drained; it goes at the next apply, and its minor is reused
        assert minor_b in class_bytes(src)
        b.apply(ranked(3, 1), 0.0)
        assert minor_b not in class_bytes(src) and minor_b in b.free_minors
        # a rate change at the same level stays in place
        b.apply([FlowRate("j/a", 2e5, "198.18.200.1", 40000, "198.18.200.2", 5201, prio=3),
                 FlowRate("j/b", 0.2 * line, "198.18.200.1", 40001, "198.18.200.2", 5201, prio=1)], 0.0)
        assert b.relevels == 1
    finally:
        _kill(source, sink)
        b.close()
    assert set(class_bytes(src)) == {LINK_CLASS & 0xFFFF, BG_MINOR}


def test_a_relevelled_class_goes_only_once_it_has_drained(ns, monkeypatch):
    # the class a flow left holds the flow's earlier packets; deleting it dropped them
    # (bench_relevel: 85 segments retransmitted per promotion), so it waits until empty
    b = TcBackend(LINE, dev="a0", netns=ns)
    try:
        def ranked(level: int) -> list[FlowRate]:
            return [FlowRate("j/b", 1e5, "198.18.0.1", 40001, "198.18.0.2", 5201, prio=level)]

        b.apply(ranked(5), 0.0)
        old = b.flows["j/b"].minor
        b.apply(ranked(1), 0.0)
        new = b.flows["j/b"].minor
        assert new != old and b.draining == [old] and b.relevels == 1
        # the kernel's own counters: a dummy link's classes never queue, so fake a backlog
        real = b.nl.class_qlens
        assert real(b.ifindex)[ROOT_HANDLE | old] == 0  # read back from the kernel: there, idle
        monkeypatch.setattr(b.nl, "class_qlens", lambda ifindex: {ROOT_HANDLE | old: 3, ROOT_HANDLE | new: 0})
        b.apply(ranked(1), 0.0)
        assert b.draining == [old] and ROOT_HANDLE | old in classes(ns)
        monkeypatch.setattr(b.nl, "class_qlens", real)
        b.apply(ranked(1), 0.0)
        assert b.draining == [] and ROOT_HANDLE | old not in classes(ns) and old in b.free_minors
    finally:
        b.close()


def tc_class_rates(ns: str, dev: str = "a0") -> dict[str, str]:
    """``{"1:2": "10Mbit", ...}``: each class's rate as ``tc class show`` prints it (iproute2 decodes)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    rates = {}
    for line in out.splitlines():
        words = line.split()
        if "htb" in words and "rate" in words:
            rates[words[2]] = words[words.index("rate") + 1]
    return rates


def test_background_floor_reaches_the_kernel_while_ranked_flows_hold_the_port(ns):
    from jitsched.agents.backends.htb import MIN_BURST_B

    install_shaper("a0", LINE, netns=ns)
    b = TcBackend(LINE, dev="a0", netns=ns, background_floor=0.2, borrow=True)
    try:
        # ranked flows asking for the whole line: background keeps a fifth of the port
        ranked = [FlowRate("j/a", LINE, "198.18.0.1", 40000, "198.18.0.2", 5201, prio=0),
                  FlowRate("j/b", LINE, "198.18.0.1", 40001, "198.18.0.2", 5201, prio=1)]
        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "20Mbit"  # 0.2 of 100 Mbit/s
        cl = classes(ns)
        flows = sum(cl[ROOT_HANDLE | inst.minor][1] for inst in b.flows.values())
        # HTB serves every class under its rate first: the flows' rates leave the floor
        assert flows + cl[ROOT_HANDLE | BG_MINOR][1] <= LINE
        # planned rates leaving more than the floor: background gets what they leave
        b.apply([flow("j/c", 1e6)], 5e6)
        assert classes(ns)[ROOT_HANDLE | BG_MINOR][1] == 5_000_000
    finally:
        b.close()
    # floor 0: the least class, two frames' worth, as without a floor
    b = TcBackend(LINE, dev="a0", netns=ns, background_floor=0.0, borrow=True)
    try:
        b.apply([FlowRate("j/a", LINE, "198.18.0.1", 40000, "198.18.0.2", 5201, prio=0)], 0.0)
        assert classes(ns)[ROOT_HANDLE | BG_MINOR][1] == MIN_BURST_B
    finally:
        b.close()
    with pytest.raises(ValueError, match=r"background_floor: must be within \[0, 1\), got 1.0"):
        TcBackend(LINE, dev="a0", netns=ns, background_floor=1.0)


def test_a_held_floor_replaces_the_background_floor_where_lower_and_goes_when_lifted(ns):
    install_shaper("a0", LINE, netns=ns)
    ranked = [FlowRate("j/a", LINE, "198.18.0.1", 40000, "198.18.0.2", 5201, prio=0)]
    # without the DL marks a flow's first packets would wait in the background class: no lower floor
    b = TcBackend(LINE, dev="a0", netns=ns, background_floor=0.05, borrow=True)
    try:
        assert not b.holds_floor
        b.hold_floor(0.01)
        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "5Mbit"
    finally:
        b.close()
    b = TcBackend(LINE, dev="a0", netns=ns, background_floor=0.05, borrow=True, dl_tos=0x88)
    try:
        assert b.holds_floor

        def flows_Bps() -> int:
            cl = classes(ns)
            return sum(cl[ROOT_HANDLE | i.minor][1] for i in b.flows.values())

        def bg_ceil() -> int:
            return classes(ns)[ROOT_HANDLE | BG_MINOR][2]

        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "5Mbit" and bg_ceil() == int(LINE)
        before = flows_Bps()
        b.hold_floor(0.01)  # a critical job holds the port: the background keeps 1 %, and no more
        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "1Mbit" and bg_ceil() == int(0.01 * LINE)
        # the flows take what the lower floor leaves: 4 % of the line more
        assert flows_Bps() - before == pytest.approx(0.04 * LINE, abs=2)
        b.hold_floor(0.2)  # above its own floor: its own holds, borrowing as before
        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "5Mbit" and bg_ceil() == int(LINE)
        b.hold_floor(0.0)
        b.apply(ranked, 0.0)
        assert bg_ceil() == MIN_BURST_B
        b.hold_floor(None)  # lifted
        b.apply(ranked, 0.0)
        assert tc_class_rates(ns)["1:2"] == "5Mbit" and bg_ceil() == int(LINE)
    finally:
        b.close()


def test_under_a_held_floor_the_ranked_flows_floors_add_up_to_it_at_most(ns):
    # ten flows held back behind the first: the eleven ranked flows' floors share
    # flow_floors_sum (2.5 %), and a critical job's lower floor (1 %) while it holds the port
    install_shaper("a0", LINE, netns=ns)
    ranked = [FlowRate("j/a", 0.5 * LINE, "198.18.0.1", 40000, "198.18.0.2", 5201, prio=0)] + [
        FlowRate(f"k/{i}", 0.0, "198.18.0.1", 40001 + i, "198.18.0.3", 5201, prio=1) for i in range(10)]
    b = TcBackend(LINE, dev="a0", netns=ns, background_floor=0.05, borrow=True, dl_tos=0x88)
    wire = 1 / payload_share()

    def held_back() -> list[int]:
        cl = classes(ns)
        return [cl[ROOT_HANDLE | b.flows[f"k/{i}"].minor][1] for i in range(10)]

    try:
        b.apply(ranked, 0.0)
        assert held_back() == [int(0.025 / 11 * LINE * wire)] * 10
        b.hold_floor(0.01)
        b.apply(ranked, 0.0)
        assert held_back() == [int(0.01 / 11 * LINE * wire)] * 10
        b.hold_floor(0.0)  # nothing for the rest: two full frames' worth each, not flow_floor
        b.apply(ranked, 0.0)
        assert held_back() == [int(MIN_BURST_B * wire)] * 10
        b.hold_floor(None)
        b.apply(ranked, 0.0)
        assert held_back() == [int(0.025 / 11 * LINE * wire)] * 10
    finally:
        b.close()


def test_capped_destination_holds_unranked_traffic_to_its_cap_and_goes_when_lifted(ns_pair):
    # traffic no flow class takes, towards a host whose ingress a critical job holds,
    # goes to a class of its own whose ceiling is what the reservation leaves
    import time

    src, dst = ns_pair
    line = 1.25e6  # 10 Mbit/s
    install_shaper("a0", line, netns=src)
    sink = subprocess.Popen(["ip", "netns", "exec", dst, sys.executable, "-c", BULK_SINK, "198.18.200.2"])
    b = TcBackend(line, dev="a0", netns=src, background_floor=0.05)
    source = None
    try:
        b.cap_destinations({"198.18.200.2": 0.2 * line, "198.18.200.9": 0.0})
        b.apply([], 0.0)  # as when ranked flows take the port: background is guaranteed its floor
        minor = b.caps["198.18.200.2"][0]
        other = b.caps["198.18.200.9"][0]
        cl = classes(src)
        wire = (1500 + 14) / (1500 - 52)
        assert cl[ROOT_HANDLE | minor][2] == int(0.2 * line * wire)
        # a cap is the receiver's part for this sender: not raised to this host's floor,
        # only to two full frames' worth; the floor is shared three ways
        assert cl[ROOT_HANDLE | other][2] == MIN_BURST_B
        assert cl[ROOT_HANDLE | BG_MINOR][1] + cl[ROOT_HANDLE | minor][1] + cl[ROOT_HANDLE | other][1] \
            <= 0.05 * line + 2
        txt = filters_text(src)
        assert txt.count("match c612c802/ffffffff at 16") == 1  # 198.18.200.2
        assert txt.count("match c612c809/ffffffff at 16") == 1  # 198.18.200.9
        time.sleep(0.3)  # the sink listens
        # the source outlasts both windows on a loaded machine (it is killed at the end): one
        # that stops sending inside the second window reads as a flow that did not take the line
        source = subprocess.Popen(["ip", "netns", "exec", src, sys.executable, "-c", BULK_SOURCE, "198.18.200.1",
                                   "198.18.200.2", "30"])
        time.sleep(1.0)
        before, scheduled_before = class_bytes(src), b.scheduled_bytes()
        time.sleep(1.0)
        after, scheduled_after = class_bytes(src), b.scheduled_bytes()
        # class bytes count whole frames (x1.046 of the payload cap) and HTB's bursts
        capped = (after[minor] - before[minor]) / line
        assert 0.12 < capped < 0.3, capped
        assert after[BG_MINOR] - before[BG_MINOR] < 0.02 * line
        # held to a cap it is still traffic jitsched does not schedule (the capacity meter's count)
        assert 0 <= scheduled_after - scheduled_before < 0.01 * line
        # the cap lifted: its class and filters go, the file takes the link through the background
        b.cap_destinations({})
        b.apply([], line)
        # and what the capped class sent is not taken back from the scheduled count with it
        assert 0 <= b.scheduled_bytes() - scheduled_after < 0.01 * line
        assert minor not in class_bytes(src) and other not in class_bytes(src)
        assert "c612c802" not in filters_text(src)
        # TCP regrows its window from the capped rate: on a loaded machine the first second
        # after the lift read 0.71 of the line, so it gets up to four one-second windows
        rates = []
        for _ in range(4):
            before = class_bytes(src)
            time.sleep(1.0)
            after = class_bytes(src)
            rates.append((after[BG_MINOR] - before[BG_MINOR]) / line)
            if rates[-1] > 0.8:
                break
        assert max(rates) > 0.8, rates
    finally:
        _kill(source, sink)
        b.close()
    assert set(class_bytes(src)) == {LINK_CLASS & 0xFFFF, BG_MINOR}
    assert "c612c802" not in filters_text(src)


@pytest.mark.alone
def test_a_cap_into_a_host_with_a_non_ipv4_address_is_reported_not_fatal(netns_available):
    with veth_pair() as (ns0, _ns1):
        a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="tc", dev="a0", ingress=False),
                  backend_options={"netns": ns0})
        a.backend = load_backend("tc", 12.5e6, **a.backend_options)
        a.line_rate_Bps = 12.5e6
        try:
            now = time.time_ns()
            caps = [{"host": h, "addr": addr, "epoch_ns": now - 10**8, "slot_s": 30.0, "left_Bps": [1e5]}
                    for h, addr in (("h1", "198.18.200.2"), ("h2", "fd00::2"))]
            a._install({"seq": 1, "slot_s": 0.1, "epoch_ns": now, "line_Bps": 12.5e6, "leftover_Bps": [],
                        "flows": [], "caps_into": caps})
            a._tick()  # the agent's loop: an exception here ends the agent
            # the IPv4 destination is held; the other one is said to be unenforced (status shows it)
            out = subprocess.run(["tc", "-n", ns0, "filter", "show", "dev", "a0"], capture_output=True,
                                 text=True, check=True).stdout
            assert "c612c802/ffffffff at 16" in out, out
            assert a.caps_unenforced
        finally:
            a.backend.close()


def _links(ns: str) -> str:
    return subprocess.run(["ip", "-n", ns, "-br", "link"], capture_output=True, text=True, check=True).stdout


@pytest.mark.alone
def test_a_failed_egress_close_still_removes_the_ingress_ifb_and_says_so(netns_available):
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e8), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=2.0,
                       resend_s=0.1, slot_s=0.1, policy="jit")
    d = Daemon(cfg)
    crashed = []
    hook = threading.excepthook
    threading.excepthook = lambda args: crashed.append(args.exc_value)
    try:
        with veth_pair() as (ns0, _ns1):
            d.start()
            a = Agent("h0", d.agent_endpoint, AgentOptions(backend="tc", dev="a0"),
                      backend_options={"netns": ns0}, local_namespace=f"cl{uuid.uuid4().hex[:8]}").start()
            try:
                assert wait_until(lambda: a.in_backend is not None, 5.0)
                assert "jsi-a0" in _links(ns0)
                # the link goes away under the agent (its egress root qdisc with it)
                subprocess.run(["ip", "-n", ns0, "link", "del", "a0"], check=True)
            finally:
                a.stop()
            assert not a.running
            # the IFB device and its redirect are the agent's own: removed whatever the egress said
            assert "jsi-a0" not in _links(ns0), _links(ns0)
            # and the failed cleanup is not lost in a thread's traceback: the agent says it
            assert not crashed, crashed
            assert a.failure is not None
    finally:
        threading.excepthook = hook
        d.stop()


def test_a_slot_of_a_thousand_and_more_new_flows_is_applied_and_removed(ns):
    b = TcBackend(LINE, dev="a0", netns=ns)
    b.nl.sock.settimeout(20.0)  # an ack that never comes fails the test instead of hanging it
    try:
        flows = [FlowRate(f"j/{i}", 1000.0, "198.18.0.1", 10000 + i, "198.18.0.2", 5201) for i in range(1500)]
        b.apply(flows, 1e6)
        assert len(classes(ns)) == 3 + 1500  # link, background, ACK and one per flow
        b.apply([], 1e6)
        assert len(classes(ns)) == 3
    finally:
        b.close()


def test_a_flow_known_by_name_only_gets_its_filter_once_its_endpoints_are(ns):
    # a flow with no endpoints yet has a class and no filter (it would match every packet)
    b = TcBackend(LINE, dev="a0", netns=ns)
    try:
        b.apply([FlowRate("j/a", 1e6), FlowRate("j/b", 1e6)], 1e6)
        assert "flowid 1:1" not in filters_text(ns)
        b.apply([flow("j/a", 1e6, 40000), FlowRate("j/b", 1e6)], 1e6)
        assert "flowid 1:10" in filters_text(ns)
        b.apply([flow("j/a", 1e6, 40000)], 1e6)  # j/b goes, with no filter to remove
        assert ROOT_HANDLE | (FLOW_MINOR_BASE + 1) not in classes(ns)
    finally:
        b.close()


def test_closing_an_adopted_shaper_of_another_rate_puts_its_rate_back(ns):
    install_shaper("a0", LINE, netns=ns)
    b = TcBackend(LINE / 2, dev="a0", netns=ns)  # the agent's line rate is not the shaper's
    try:
        assert b.adopted
        b.apply([flow("j/a", 1e6)], 1e6)
    finally:
        b.close()
    cl = classes(ns)
    assert cl[LINK_CLASS][1:] == (int(LINE), int(LINE))
    assert cl[ROOT_HANDLE | BG_MINOR][1:] == (int(LINE), int(LINE))
