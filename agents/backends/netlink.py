"""rtnetlink traffic-control messages packed with :mod:`struct`, and a socket that sends them in batches.

Messages are packed here rather than through pyroute2's encoder: pyroute2
needs ~0.4 ms of Python to encode one HTB class message on this machine,
while a slot boundary may change dozens of classes and the change must land
within a few milliseconds. pyroute2 still decodes what the kernel holds in
the tests, an independent check of these bytes.

The HTB layout built from these messages is :mod:`jitsched.agents.backends.htb`;
the backends that change it per slot are :mod:`jitsched.agents.backends.tc`.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time

from pyroute2.netlink.rtnl.tcmsg.common import calc_xmittime

from jitsched.agents.backends.base import FlowRate
from jitsched.netns import socket_in

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
TCA_KIND, TCA_OPTIONS, TCA_STATS = 1, 2, 3
TCA_HTB_PARMS, TCA_HTB_INIT, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 1, 2, 6, 7
TCA_U32_CLASSID, TCA_U32_SEL = 1, 5
TC_U32_TERMINAL = 1
TC_H_ROOT = 0xFFFFFFFF
TC_LINKLAYER_ETHERNET = 1
ETH_P_IP = 0x0800
ETH_P_ARP = 0x0806
NLA_F_NESTED = 0x8000
QUANTUM_B = 65536  # >= the largest GSO packet, so one DRR round always sends a packet
MAX_BATCH = 256  # messages per send: their acks (an error's echoes the request) fit any receive buffer


def _nla(kind: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return struct.pack("=HH", n, kind) + payload + b"\0" * ((-n) % 4)


def tcmsg(mtype: int, flags: int, seq: int, ifindex: int, handle: int, parent: int,
          info: int = 0, attrs: bytes = b"") -> bytes:
    """One rtnetlink message: header, ``struct tcmsg`` (``handle`` under ``parent``) and ``attrs``."""
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


def u32_dst_keys(addr: str) -> list[tuple[int, int, int]]:
    """The u32 keys matching IPv4 packets to ``addr``."""
    return [(_ip4(addr), 0xFFFFFFFF, 16)]


def u32_filter_attrs(classid: int, keys: list[tuple[int, int, int]]) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a terminal u32 filter sending matches to ``classid``."""
    sel = struct.pack("!BBBxHHhhI", TC_U32_TERMINAL, 0, len(keys), 0, 0, 0, 0, 0)
    for value, mask, off in keys:
        sel += struct.pack("!II", mask, value & mask) + struct.pack("=ii", off, 0)
    opts = _nla(TCA_U32_CLASSID, struct.pack("=I", classid)) + _nla(TCA_U32_SEL, sel)
    return _nla(TCA_KIND, b"u32\0") + _nla(TCA_OPTIONS | NLA_F_NESTED, opts)


def bfifo_attrs(limit_B: int) -> bytes:
    """TCA_KIND + TCA_OPTIONS of a byte-limited FIFO (``limit_B`` bytes)."""
    return _nla(TCA_KIND, b"bfifo\0") + _nla(TCA_OPTIONS, struct.pack("=I", int(limit_B)))


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
            self.sock = socket_in(netns, socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind((0, 0))
        self.seq = int(time.monotonic_ns()) & 0x3FFFFFFF

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0x7FFFFFFF
        return self.seq

    def transact(self, msgs: list[tuple[bytes, str, bool]]) -> None:
        """Send ``(message, description, tolerate_missing)`` in batches of :data:`MAX_BATCH` and wait for every ack.

        Raises
        ------
        NetlinkError
            For the first refused message that is not a tolerated ENOENT.
        """
        first_err = None
        # The kernel handles a whole send before the acks are read: more acks than the
        # receive buffer holds are dropped and the socket reports ENOBUFS.
        for i in range(0, len(msgs), MAX_BATCH):
            err = self._transact(msgs[i:i + MAX_BATCH])
            if first_err is None:
                first_err = err
        if first_err is not None:
            raise first_err

    def _transact(self, msgs: list[tuple[bytes, str, bool]]) -> NetlinkError | None:
        if not msgs:
            return None
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
        return first_err

    def dump(self, mtype: int, ifindex: int) -> list[tuple[int, int, int, str]]:
        """``(msg type, handle, parent, kind)`` of the qdiscs or classes on ``ifindex``."""
        return [(mt, handle, parent, attrs.get(TCA_KIND, b"").rstrip(b"\0").decode())
                for mt, handle, parent, attrs in self._dump(mtype, ifindex)]

    def class_qlens(self, ifindex: int) -> dict[int, int]:
        """``{handle: packets queued}`` of the classes on ``ifindex`` (their ``tc_stats.qlen``)."""
        out = {}
        for _mt, handle, _parent, attrs in self._dump(RTM_GETTCLASS, ifindex):
            stats = attrs.get(TCA_STATS, b"")
            # struct tc_stats: bytes (u64), then packets, drops, overlimits, bps, pps, qlen, backlog (u32)
            out[handle] = struct.unpack_from("=I", stats, 28)[0] if len(stats) >= 32 else 0
        return out

    def class_rates(self, ifindex: int) -> dict[int, tuple[int, int]]:
        """``{handle: (rate, ceil)}`` of the HTB classes on ``ifindex``, bytes/s."""
        out = {}
        for _mt, handle, _parent, attrs in self._dump(RTM_GETTCLASS, ifindex):
            opts, a, got = attrs.get(TCA_OPTIONS, b""), 0, {}
            while a + 4 <= len(opts):
                alen, atype = struct.unpack_from("=HH", opts, a)
                if alen < 4:
                    break
                got[atype & 0x3FFF] = opts[a + 4:a + alen]
                a += (alen + 3) & ~3
            parms = got.get(TCA_HTB_PARMS, b"")
            if len(parms) < 24:
                continue
            rate, ceil = struct.unpack_from("=I", parms, 8)[0], struct.unpack_from("=I", parms, 20)[0]
            if len(got.get(TCA_HTB_RATE64, b"")) >= 8:
                rate = struct.unpack_from("=Q", got[TCA_HTB_RATE64])[0]
            if len(got.get(TCA_HTB_CEIL64, b"")) >= 8:
                ceil = struct.unpack_from("=Q", got[TCA_HTB_CEIL64])[0]
            out[handle] = (rate, ceil)
        return out

    def class_bytes(self, ifindex: int) -> dict[int, int]:
        """``{handle: bytes sent}`` of the classes on ``ifindex`` (their ``tc_stats.bytes``)."""
        return {handle: struct.unpack_from("=Q", attrs[TCA_STATS], 0)[0]
                for _mt, handle, _parent, attrs in self._dump(RTM_GETTCLASS, ifindex)
                if len(attrs.get(TCA_STATS, b"")) >= 8}

    def _dump(self, mtype: int, ifindex: int) -> list[tuple[int, int, int, dict[int, bytes]]]:
        # (msg type, handle, parent, {attribute type: payload}) of each object on ifindex
        seq = self.next_seq()
        self.sock.send(tcmsg(mtype, NLM_F_REQUEST | NLM_F_DUMP, seq, ifindex, 0, 0))
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
                    attrs, a = {}, off + 36
                    while a + 4 <= off + length:
                        alen, atype = struct.unpack_from("=HH", buf, a)
                        if alen < 4:
                            break
                        attrs[atype & 0x3FFF] = bytes(buf[a + 4:a + alen])
                        a += (alen + 3) & ~3
                    if idx == ifindex:
                        out.append((mt, handle, parent, attrs))
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()
