"""Attached jobs: the TCP connections of a job's processes, cgroup or ports on this host, found by sock_diag, and their rates."""

# A job attached here names what is its own (process ids, a cgroup v2 directory,
# or TCP ports); every SCAN_S the table lists the host's TCP connections over
# netlink sock_diag, keeps those whose socket inode one of the job's processes
# holds (or whose port is one of the job's), names each connection's peer host
# by its remote address, and gives it the rate and rank of the job's (this host,
# peer) group in the schedule, as a FlowRate with the connection's endpoints:
# the same path a socket handed over with register_flow takes.
# One module although past 500 lines: the request checks, the scan and the rates share
# one table of attachments and connections, and the agent's loop calls it at three
# points only.
from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from jitsched.agents.backends.base import FlowRate
from jitsched.errors import ProtocolError
from jitsched.netns import in_netns
from jitsched.protocol import ErrorCode

log = logging.getLogger("jitsched.agent.attach")

# Seconds between two scans: a connection is classified within one scan (and one
# slot tick) of appearing, under the 1 s a job's first transfers can wait.
SCAN_S = 0.25
CGROUP_ROOT = Path("/sys/fs/cgroup")
MAX_ATTACHMENTS = 256  # per agent: each costs /proc reads every scan
MAX_PEERS = 4096  # entries of one attach request's peer map
MAX_JOB_CHARS = 256
# TCP states whose connections are classified: established, and closing from the
# peer's side (this end may still send)
SS_ESTABLISHED, SS_CLOSE_WAIT = 1, 8
STATES = (1 << SS_ESTABLISHED) | (1 << SS_CLOSE_WAIT)
INET_DIAG_INFO_EXT = 1 << (2 - 1)  # idiag_ext bit of INET_DIAG_INFO (tcp_info)
V4_MAPPED = "::ffff:"


@dataclass(frozen=True)
class Conn:
    """One TCP connection of this host as sock_diag lists it (IPv4 addresses)."""

    laddr: str
    lport: int
    raddr: str
    rport: int
    inode: int
    uid: int
    bytes_acked: int
    bytes_received: int

    @property
    def key(self) -> tuple[str, int, str, int]:
        """The connection's local and remote address and port."""
        return self.laddr, self.lport, self.raddr, self.rport


@dataclass
class Tracked:
    """A connection of an attached job: its peer host (None: unknown) and byte counts seen."""

    conn: Conn
    peer: str | None
    flow_id: str
    acked: int  # tcpi_bytes_acked when last counted
    received: int


@dataclass
class Attachment:
    """What one attach request named: pids (with their descendants), a cgroup or ports."""

    job: str
    uid: int  # of the requester (SO_PEERCRED); 0: root, every process and socket
    peers: dict[str, str]
    pids: dict[int, int] = field(default_factory=dict)  # pid -> start time (clock ticks): reuse shows
    cgroup: Path | None = None
    ports: frozenset[int] = frozenset()
    scanned: bool = False  # a scan ran since it was made: later connections count all their bytes

    @property
    def kind(self) -> str:
        """``pid``, ``cgroup`` or ``port``."""
        return "cgroup" if self.cgroup is not None else "port" if self.ports else "pid"


@dataclass
class JobAccount:
    """Per attached job on this host: its connections and what they carried since attached."""

    conns: dict[tuple[str, int, str, int], Tracked] = field(default_factory=dict)
    bytes_sent: int = 0  # acknowledged by the peers, on every connection of the job
    bytes_received: int = 0
    bytes_classified: int = 0  # ... of bytes_sent, while the connection had a scheduled group
    rank: int | None = None  # the best rank among its groups at the last apply (None: none ranked)
    scheduled: int = 0  # connections given to the backend at the last apply


def proc_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(b")", 1)[-1].split()
    if fields[:1] == [b"Z"]:
        return None  # exited, not yet reaped: its sockets are closed
    try:
        return int(fields[19])  # field 22 of proc(5); fields here start at field 3
    except (IndexError, ValueError):
        return None


def proc_uid(pid: int) -> int | None:
    """The owner of process ``pid`` (its /proc directory's, the effective uid), None if gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def parents() -> dict[int, int]:
    """Every process's parent: ``{pid: ppid}``, from /proc/PID/stat."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            out[int(name)] = int(stat.rsplit(b")", 1)[-1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process ``pid`` holds open (empty if it is gone or hidden)."""
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def cgroup_pids(path: Path) -> set[int]:
    """The processes in cgroup ``path`` and in every cgroup below it."""
    out = set()
    for d, _dirs, files in os.walk(path):
        if "cgroup.procs" not in files:
            continue
        try:
            text = Path(d, "cgroup.procs").read_text()
        except OSError:
            continue
        out.update(int(x) for x in text.split())
    return out


def ipv4_of(addr: str) -> str | None:
    """The IPv4 address ``addr`` names: itself, or the IPv4 one in a v4-mapped IPv6 address
    (``::ffff:a.b.c.d``, as a dual-stack socket names an IPv4 peer); None for any other
    IPv6 address. sock_diag and the u32 filters name an IPv4 connection's ends this way."""
    if ":" not in addr:
        return addr
    return addr[len(V4_MAPPED):] if addr.startswith(V4_MAPPED) and "." in addr else None


class Diag:
    """A sock_diag netlink socket in network namespace ``netns`` (None: the agent's own)."""

    def __init__(self, netns: str | None = None) -> None:
        from pyroute2 import DiagSocket  # loaded once something is attached

        with in_netns(netns):
            self.ds = DiagSocket()
            self.ds.bind()

    def conns(self) -> list[Conn]:
        """The host's established TCP connections over IPv4 (and v4-mapped IPv6)."""
        out = []
        for family in (socket.AF_INET, socket.AF_INET6):
            for m in self.ds.get_sock_stats(family=family, states=STATES, extensions=INET_DIAG_INFO_EXT):
                src, dst = ipv4_of(m["idiag_src"]), ipv4_of(m["idiag_dst"])
                if src is None or dst is None:
                    continue
                info = m.get_attr("INET_DIAG_INFO") or {}
                out.append(Conn(src, m["idiag_sport"], dst, m["idiag_dport"], m["idiag_inode"], m["idiag_uid"],
                                int(info.get("tcpi_bytes_acked", 0) or 0),
                                int(info.get("tcpi_bytes_received", 0) or 0)))
        return out

    def close(self) -> None:
        """Close the netlink socket."""
        self.ds.close()


def _refuse(code: str, message: str) -> ProtocolError:
    return ProtocolError(code, message)


def _peer_map(peers: dict) -> dict[str, str]:
    if len(peers) > MAX_PEERS:
        raise _refuse(ErrorCode.INVALID_BODY, f"{len(peers)} peers, more than {MAX_PEERS}")
    out = {}
    for k, v in peers.items():
        if not isinstance(k, str) or not isinstance(v, str) or not v:
            raise _refuse(ErrorCode.INVALID_BODY, "peers: expected {\"address\" or \"address:port\": host}")
        addr, colon, port = k.partition(":")
        try:
            # dotted quads only, as sock_diag names the connections ("127.1" would never match)
            socket.inet_pton(socket.AF_INET, addr)
            if colon and not (port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(port)
        except (OSError, ValueError):
            raise _refuse(ErrorCode.INVALID_BODY, f"peers: {k!r} is not an IPv4 address[:port]") from None
        out[k] = v
    return out


class AttachTable:
    """The jobs attached on this host, their connections, and the FlowRates those get.

    Parameters
    ----------
    netns : str or None
        Network namespace whose connections are listed (the tc backend's
        ``netns``; None: the agent's own).
    scan_s : float
        Seconds between two scans (:data:`SCAN_S`).
    """

    def __init__(self, netns: str | None = None, scan_s: float = SCAN_S) -> None:
        self.netns = netns
        self.scan_s = float(scan_s)
        self.attachments: list[Attachment] = []
        self.jobs: dict[str, JobAccount] = {}
        self.scans = 0
        self.scan_errors = 0  # scans that failed (sock_diag or /proc unreadable), since start
        self.ended = 0  # attachments whose processes or cgroup are all gone, since start
        self._diag: Diag | None = None
        self._next_s = 0.0
        self._groups: tuple[object, frozenset[str], dict] | None = None  # (schedule, jobs, groups)

    # ------------------------------------------------------------------ requests

    def attach(self, body: dict, uid: int) -> dict:
        """Attach what ``body`` (an ``attach`` request) names for user ``uid``; scan at once.

        Raises
        ------
        ProtocolError
            ``invalid_body``: not exactly one of pids, cgroup and ports, a pid
            that does not exist, a cgroup path outside /sys/fs/cgroup or not a
            cgroup, a port out of range, too many attachments;
            ``forbidden``: a process or cgroup of another user (unless ``uid`` is root).
        """
        job = body["job"]
        if not job or len(job) > MAX_JOB_CHARS:
            raise _refuse(ErrorCode.INVALID_BODY, f"job: 1..{MAX_JOB_CHARS} characters")
        named = [k for k in ("pids", "cgroup", "ports") if body.get(k)]
        if len(named) != 1:
            raise _refuse(ErrorCode.INVALID_BODY, "name exactly one of pids, cgroup and ports")
        if len(self.attachments) >= MAX_ATTACHMENTS:
            raise _refuse(ErrorCode.INVALID_BODY, f"{MAX_ATTACHMENTS} attachments on this host already")
        a = Attachment(job, uid, _peer_map(body.get("peers") or {}))
        if named[0] == "pids":
            a.pids = self._owned_pids(body["pids"], uid)
        elif named[0] == "cgroup":
            a.cgroup = self._owned_cgroup(body["cgroup"], uid)
        else:
            ports = body["ports"]
            if not all(type(p) is int and 0 < p < 65536 for p in ports):
                raise _refuse(ErrorCode.INVALID_BODY, "ports: integers in 1..65535")
            a.ports = frozenset(ports)
        self.attachments.append(a)
        self.jobs.setdefault(job, JobAccount())
        self._groups = None
        log.info("event=agent_attached job=%r kind=%s uid=%d", job, a.kind, uid)
        self.scan()
        # the scan ends an attachment whose processes already exited, and forgets a job left with none
        acct = self.jobs.get(job)
        return {"job": job, "attachments": sum(x.job == job for x in self.attachments),
                "conns": len(acct.conns) if acct else 0}

    def detach(self, job: str, uid: int) -> dict:
        """Forget job ``job``'s attachments made by ``uid`` (root: anyone's); returns how many went."""
        gone = [a for a in self.attachments if a.job == job and (uid == 0 or a.uid == uid)]
        self.attachments = [a for a in self.attachments if a not in gone]
        if not any(a.job == job for a in self.attachments):
            self.jobs.pop(job, None)
        self._groups = None
        return {"job": job, "detached": len(gone)}

    @staticmethod
    def _owned_pids(pids: list, uid: int) -> dict[int, int]:
        out = {}
        for pid in pids:
            if type(pid) is not int or pid <= 0:
                raise _refuse(ErrorCode.INVALID_BODY, f"pids: {pid!r} is not a process id")
            start, owner = proc_start(pid), proc_uid(pid)
            if start is None or owner is None:
                raise _refuse(ErrorCode.INVALID_BODY, f"pid {pid} does not exist")
            if uid != 0 and owner != uid:
                raise _refuse(ErrorCode.FORBIDDEN, f"pid {pid} belongs to uid {owner}, not to uid {uid}")
            out[pid] = start
        return out

    @staticmethod
    def _owned_cgroup(path: str, uid: int) -> Path:
        try:
            p = Path(os.path.realpath(path))
        except (OSError, ValueError):  # a NUL byte, a path too long
            raise _refuse(ErrorCode.INVALID_BODY, f"cgroup path {path!r} is not a path") from None
        if p == CGROUP_ROOT:
            raise _refuse(ErrorCode.INVALID_BODY, f"cgroup path {path!r} is the root cgroup, every process "
                                                  "of the host: name the job's own cgroup")
        if CGROUP_ROOT not in p.parents:
            raise _refuse(ErrorCode.INVALID_BODY, f"cgroup path {path!r} is outside {CGROUP_ROOT}")
        if not (p / "cgroup.procs").is_file():
            raise _refuse(ErrorCode.INVALID_BODY, f"cgroup path {path!r} is not a cgroup directory "
                                                  "(no cgroup.procs)")
        try:
            owner = p.stat().st_uid
        except OSError:  # removed since
            raise _refuse(ErrorCode.INVALID_BODY, f"cgroup path {path!r} is not a cgroup directory") from None
        if uid != 0 and owner != uid:
            raise _refuse(ErrorCode.FORBIDDEN, f"cgroup {path!r} belongs to uid {owner}, not to uid {uid}")
        return p

    # ------------------------------------------------------------------ scanning

    def due(self, now: float) -> bool:
        """Whether a scan is due at monotonic time ``now`` (never with nothing attached)."""
        return bool(self.attachments) and now >= self._next_s

    def scan(self) -> bool:
        """List the host's connections and match them to the attached jobs; returns whether
        any job's connections (or their peers) changed. A failure is counted, not raised."""
        self._next_s = time.monotonic() + self.scan_s
        try:
            if self._diag is None:
                self._diag = Diag(self.netns)
            conns = self._diag.conns()
        except Exception as exc:  # noqa: BLE001 - pyroute2 raises its own types too (NetlinkError)
            self.scan_errors += 1
            if self.scan_errors <= 3 or self.scan_errors % 1000 == 0:
                log.warning("event=agent_attach_scan_failed errors=%d error=%r", self.scan_errors, str(exc))
            if self._diag is not None:
                self._diag.close()
                self._diag = None
            return False
        self.scans += 1
        by_inode = {c.inode: c for c in conns if c.inode}
        ppid = parents() if any(a.pids for a in self.attachments) else {}
        found: dict[str, dict[tuple, tuple[Conn, Attachment]]] = {j: {} for j in self.jobs}
        for a in list(self.attachments):
            for c in self._matches(a, conns, by_inode, ppid):
                found[a.job].setdefault(c.key, (c, a))
        changed = False
        for job, acct in self.jobs.items():
            now_conns = found.get(job, {})
            for key in [k for k in acct.conns if k not in now_conns]:
                del acct.conns[key]
                changed = True
            for key, (c, a) in now_conns.items():
                t = acct.conns.get(key)
                if t is None:
                    # a connection open before its job was attached: its earlier bytes are not counted
                    base = (c.bytes_acked, c.bytes_received) if not a.scanned else (0, 0)
                    t = Tracked(c, self._peer_of(c, a), f"{job}/@{c.laddr}:{c.lport}>{c.raddr}:{c.rport}", *base)
                    acct.conns[key] = t
                    changed = True
                sent = max(c.bytes_acked - t.acked, 0)
                acct.bytes_sent += sent
                if key in self._classified:
                    acct.bytes_classified += sent
                acct.bytes_received += max(c.bytes_received - t.received, 0)
                t.acked, t.received, t.conn = c.bytes_acked, c.bytes_received, c
        for a in self.attachments:
            a.scanned = True
        attached = {a.job for a in self.attachments}
        for job in [j for j, acct in self.jobs.items() if j not in attached and not acct.conns]:
            del self.jobs[job]  # its processes are gone and so are its connections
            self._groups = None
        return changed

    _classified: frozenset = frozenset()  # connection keys the last egress rates() gave the backend

    def _matches(self, a: Attachment, conns: list[Conn], by_inode: dict[int, Conn],
                 ppid: dict[int, int]) -> list[Conn]:
        if a.ports:
            return [c for c in conns if (c.lport in a.ports or c.rport in a.ports) and (a.uid in (0, c.uid))]
        if a.pids:
            pids = self._follow(a, ppid)
        else:
            if not a.cgroup.is_dir():
                self._end(a, "its cgroup is gone")
                return []
            pids = {p for p in cgroup_pids(a.cgroup) if a.uid == 0 or proc_uid(p) == a.uid}
        out = []
        for pid in pids:
            for ino in socket_inodes(pid):
                c = by_inode.get(ino)
                if c is not None and a.uid in (0, c.uid):
                    out.append(c)
        return out

    def _follow(self, a: Attachment, ppid: dict[int, int]) -> set[int]:
        """``a``'s live processes, its children forked since included (those of its user)."""
        for pid, start in list(a.pids.items()):
            if proc_start(pid) != start:
                del a.pids[pid]  # exited (or its pid was reused)
        kids = {}
        for pid, parent in ppid.items():
            if parent in a.pids and pid not in a.pids:
                kids[pid] = parent
        while kids:  # grandchildren whose parent joined in this pass
            for pid in kids:
                start = proc_start(pid)
                if start is not None and (a.uid == 0 or proc_uid(pid) == a.uid):
                    a.pids[pid] = start
            kids = {p: q for p, q in ppid.items() if q in kids and p not in a.pids}
        if not a.pids:
            self._end(a, "its processes exited")
        return set(a.pids)

    def _end(self, a: Attachment, why: str) -> None:
        if a in self.attachments:
            self.attachments.remove(a)
            self.ended += 1
            self._groups = None
            log.info("event=agent_attachment_ended job=%r kind=%s reason=%r", a.job, a.kind, why)

    @staticmethod
    def _peer_of(c: Conn, a: Attachment) -> str | None:
        return a.peers.get(f"{c.raddr}:{c.rport}") or a.peers.get(c.raddr)

    # ------------------------------------------------------------------ rates

    def _job_groups(self, s: dict) -> dict[tuple[str, str, bool], list[dict]]:
        """The schedule's entries of each attached job by (job, peer host, inbound)."""
        jobs = frozenset(self.jobs)
        if self._groups is not None and self._groups[0] is s and self._groups[1] == jobs:
            return self._groups[2]
        groups: dict[tuple[str, str, bool], list[dict]] = {}
        prefixes = sorted(((j + "/", j) for j in jobs), key=lambda x: -len(x[0]))
        for inbound, key, end in ((False, "flows", "dst"), (True, "in_flows", "src")):
            for e in s.get(key, []):
                fid = e["flow"]
                for pre, job in prefixes:
                    if fid.startswith(pre):
                        groups.setdefault((job, e.get(end, ""), inbound), []).append(e)
                        break
        self._groups = (s, jobs, groups)
        return groups

    def rates(self, s: dict, k: int, inbound: bool, levels: dict[int, int] | None = None,
              skip: frozenset | set = frozenset()) -> list[FlowRate]:
        """A FlowRate per attached connection whose (job, peer) group the schedule ``s``
        carries in slot ``k``: the group's rate shared by its connections, its best rank.

        ``levels`` maps ranks to the backend's levels when the caller's flows have them
        already; ``skip``: connection keys (local then remote address and port) handed
        over with ``register_flow``, which keep that registration.
        """
        if not self.jobs:
            return []
        groups = self._job_groups(s)
        by_group: dict[tuple[str, str, bool], list[Tracked]] = {}
        for job, acct in self.jobs.items():
            for t in acct.conns.values():
                if t.peer is not None and t.conn.key not in skip:
                    by_group.setdefault((job, t.peer, inbound), []).append(t)
        out: list[FlowRate] = []
        best: dict[str, int] = {}
        for g, tracked in by_group.items():
            entries = groups.get(g)
            if not entries:
                continue
            rate, prio, carried = 0.0, None, False
            for e in entries:
                j = k - e["start_slot"]
                r, p = e["rates_Bps"], e.get("prio")
                if j >= len(r) and p is None:
                    continue  # over, unranked: shares the leftover
                carried = True
                rate += float(r[j]) if 0 <= j < len(r) else 0.0
                if p is not None and (prio is None or p < prio):
                    prio = p
            if not carried:
                continue
            if prio is not None and (best.get(g[0]) is None or prio < best[g[0]]):
                best[g[0]] = prio
            level = prio if levels is None or prio is None else levels.get(prio, max(levels.values(), default=0))
            for t in tracked:
                c = t.conn
                ends = (c.raddr, c.rport, c.laddr, c.lport) if inbound else (c.laddr, c.lport, c.raddr, c.rport)
                out.append(FlowRate(t.flow_id, rate / len(tracked), *ends, prio=level))
        if not inbound:
            keys = set()
            given = {f.flow_id for f in out}
            for job, acct in self.jobs.items():
                acct.rank = best.get(job)
                mine = [t.conn.key for t in acct.conns.values() if t.flow_id in given]
                acct.scheduled = len(mine)
                keys.update(mine)
            self._classified = frozenset(keys)
        return out

    # ------------------------------------------------------------------ accounting

    def summary(self) -> dict:
        """Per attached job: connections, processes, bytes sent / classified / received and
        rank; with the scans and failed scans since start (an agent's heartbeat carries it)."""
        jobs = {}
        for job, acct in self.jobs.items():
            mine = [a for a in self.attachments if a.job == job]
            jobs[job] = {"conns": len(acct.conns), "scheduled": acct.scheduled,
                         "unmapped": sum(t.peer is None for t in acct.conns.values()),
                         "pids": sum(len(a.pids) for a in mine), "attachments": len(mine),
                         "bytes_sent": acct.bytes_sent, "bytes_classified": acct.bytes_classified,
                         "bytes_received": acct.bytes_received, "rank": acct.rank}
        return {"jobs": jobs, "scans": self.scans, "scan_errors": self.scan_errors, "ended": self.ended}

    def close(self) -> None:
        """Close the netlink socket."""
        if self._diag is not None:
            self._diag.close()
            self._diag = None


__all__ = ["AttachTable", "Attachment", "CGROUP_ROOT", "Conn", "Diag", "SCAN_S", "cgroup_pids", "parents",
           "proc_start", "proc_uid", "socket_inodes"]
