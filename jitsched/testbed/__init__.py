"""An emulated cluster on one machine: hosts as network namespaces behind a Linux bridge, links shaped by HTB.

Topology for prefix ``js`` and N hosts::

    namespace js-sw:   bridge js-br0  <- ports js-p0 ... js-p{N-1}   (the non-blocking switch)
    namespace js-h{i}: eth0 = 198.18.0.{i+1}/24, the other end of js-p{i}

Shaping (docs/architecture.md §8): host ``i``'s egress is the HTB root on its ``eth0``
(class 1:1 at the link rate) and its ingress is the HTB root on ``js-p{i}``,
the bridge port that sends into it. Both use the tc backend's layout, so the
agent's tc backend adopts the host-side qdisc: its flow classes sit under
the link class and the link stays shaped whether or not an agent runs. The
switch itself is not shaped (a non-blocking switch), so a receiver's port
queue is where senders contend, as on a real top-of-rack switch.

Only 198.18.0.0/15 (RFC 2544 benchmarking) addresses are used, all inside
the namespaces; nothing is added to the root namespace, so the machine's own
routing is never touched. Inside the host namespaces TCP uses Reno and the
links carry at most two segments per GSO packet (see ``TCP_CC``, ``GSO_MAX_SEGS``). ``down`` finds everything by prefix, so it works
after a crash too.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import tomli_w

from jitsched import netns
from jitsched.errors import JitschedError
from jitsched.netns import list_netns


class TestbedError(JitschedError):
    """The emulated cluster cannot be built or driven on this machine."""


def run(argv, *, check: bool = True):
    """Run a set-up command; raise :class:`TestbedError` with its stderr when it fails."""
    try:
        return netns.run(argv, check=check)
    except netns.CommandError as exc:
        raise TestbedError(str(exc)) from None


def require_netns() -> None:
    """Raise :class:`TestbedError` unless this process can create network namespaces."""
    try:
        netns.require_netns()
    except netns.NetnsUnavailable as exc:
        raise TestbedError(str(exc)) from None

__all__ = ["Testbed", "TestbedError", "TestbedHost", "down", "up", "ADDRESS_NET", "DEFAULT_LINK_MBIT",
           "LINK_MBIT_RANGE"]

ADDRESS_NET = ipaddress.ip_network("198.18.0.0/24")
ALLOWED_NET = ipaddress.ip_network("198.18.0.0/15")
STATE_DIR = Path("/run/jitsched")
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,7}$")
MAX_HOSTS = 200
DEFAULT_LINK_MBIT = 100.0  # every link's rate each way when none is asked for, Mbit/s
LINK_MBIT_RANGE = (0.1, 10000.0)  # link rates up accepts, Mbit/s
# veth hands TCP 64 KB GSO packets; HTB then releases a slow class's bytes in
# 5 Mbit-per-100-ms lumps. Two segments per packet keeps per-slot rates exact
# to a few frames at a CPU cost that is small at testbed rates.
GSO_MAX_SEGS = 2
# The machine's default (BBR here) paces itself from its own bandwidth
# estimate and takes many round trips to follow an HTB rate increase; a
# loss-based sender keeps the class backlogged. Cubic is not permitted as a
# namespace default unless the machine-wide allowed list names it; Reno is.
TCP_CC = "reno"


@dataclass
class TestbedHost:
    """One emulated host: its namespace, address and both ends of its link."""

    name: str
    netns: str
    address: str
    dev: str
    switch_port: str


@dataclass
class Testbed:
    """A running emulated cluster (also its on-disk state, ``STATE_DIR/<prefix>.json``)."""

    prefix: str
    link_mbit: float
    switch_netns: str
    bridge: str
    hosts: list[TestbedHost] = field(default_factory=list)
    cluster_file: str = ""
    critical_tos: int | None = None  # the switch ports' critical band's TOS byte (None: no band)

    @property
    def link_Bps(self) -> float:
        """Link rate in bytes/s."""
        return self.link_mbit * 1e6 / 8.0

    def host(self, name: str) -> TestbedHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> Testbed:
        d = dict(d)
        d["hosts"] = [TestbedHost(**h) for h in d["hosts"]]
        return cls(**d)

    @classmethod
    def load(cls, prefix: str) -> Testbed:
        """The testbed ``up`` left for ``prefix``; raise TestbedError if none."""
        p = STATE_DIR / f"{prefix}.json"
        try:
            return cls.from_json(json.loads(p.read_text()))
        except FileNotFoundError:
            raise TestbedError(f"no testbed with prefix {prefix!r} is up ({p} missing)") from None


def check_prefix(prefix: str) -> None:
    """Raise TestbedError unless ``prefix`` keeps every interface name within 15 characters."""
    if not _PREFIX_RE.match(prefix):
        raise TestbedError(f"bad prefix {prefix!r}: 1-8 lowercase letters/digits, starting with a letter")


def cluster_doc(tb: Testbed) -> dict:
    """The daemon's cluster description (the native format's ``cluster`` map), capacities in bits/s."""
    bps = tb.link_mbit * 1e6
    return {"hosts": [{"name": h.name, "egress_bps": bps, "ingress_bps": bps, "address": h.address}
                      for h in tb.hosts]}


def up(n_hosts: int, link_mbit: float, *, prefix: str = "js", cluster_file: str | Path | None = None,
       burst_s: float = 0.001, priority_tos: int | None = None, critical_tos: int | None = None,
       ack_priority: bool = True) -> Testbed:
    """Build the emulated cluster, replacing any earlier one with the same prefix.

    Parameters
    ----------
    n_hosts : int
        Number of hosts (2..200).
    link_mbit : float
        Every host's link rate, Mbit/s, in each direction.
    prefix : str
        Names everything: namespaces ``<prefix>-h<i>``/``<prefix>-sw``, bridge ``<prefix>-br0``.
    cluster_file : path or None
        Where to write the TOML cluster file (default ``STATE_DIR/<prefix>-cluster.toml``).
    burst_s : float
        Shaper token-bucket depth, seconds of the link rate.
    priority_tos : int or None
        Give the switch ports a strict-priority band for packets with this
        TOS byte's DSCP bits (:func:`jitsched.agents.backends.htb.install_shaper`),
        as datacenter switches do for a scheduled traffic class. None: one FIFO.
    critical_tos : int or None
        Give the switch ports a band for critical jobs' packets (these DSCP
        bits), served before every other.
    ack_priority : bool
        Hosts send pure TCP ACKs ahead of their data (default True): without
        it, a host whose link is busy both ways delays the ACKs of its inbound
        flows behind its outbound data, and plain TCP lost ~40 % against the
        fluid model on two jobs sending to each other (AlexNet 7.29 s vs 5.24 s;
        5.11 s with it).

    Returns
    -------
    Testbed
    """
    # here, not at the top: pyroute2 takes ~0.4 s to import, and the CLI imports this
    # package (through the testbed's options) to build its parser for every command
    from jitsched.agents.backends.htb import install_shaper

    check_prefix(prefix)
    if not 2 <= n_hosts <= MAX_HOSTS:
        raise TestbedError(f"--hosts must be in 2..{MAX_HOSTS}, got {n_hosts}")
    lo, hi = LINK_MBIT_RANGE
    if not lo <= link_mbit <= hi:
        raise TestbedError(f"--link-mbit must be in {lo:g}..{hi:g}, got {link_mbit}")
    if cluster_file:
        # refused before any namespace exists, not after the whole testbed is built
        where = Path(cluster_file)
        if where.is_dir():
            raise TestbedError(f"--cluster-file {where}: a directory, not a file")
        if not where.parent.is_dir():
            raise TestbedError(f"--cluster-file {where}: directory {where.parent} does not exist")
    require_netns()
    down(prefix)
    sw = f"{prefix}-sw"
    tb = Testbed(prefix, float(link_mbit), sw, f"{prefix}-br0", critical_tos=critical_tos)
    for i in range(n_hosts):
        addr = ADDRESS_NET.network_address + i + 1
        assert addr in ALLOWED_NET
        tb.hosts.append(TestbedHost(f"h{i}", f"{prefix}-h{i}", str(addr), "eth0", f"{prefix}-p{i}"))
    # One `ip -batch` per namespace: batch lines cannot switch namespace themselves.
    batches: list[tuple[str | None, list[str]]] = [
        (None, [f"netns add {sw}"] + [f"netns add {h.netns}" for h in tb.hosts]),
        (sw, [f"link add {tb.bridge} type bridge stp_state 0", f"link set {tb.bridge} up", "link set lo up"]
         + [c for h in tb.hosts for c in (
             f"link add {h.switch_port} type veth peer name {h.dev} netns {h.netns}",
             f"link set {h.switch_port} gso_max_segs {GSO_MAX_SEGS}",
             f"link set {h.switch_port} master {tb.bridge} up")]),
    ] + [(h.netns, ["link set lo up", f"addr add {h.address}/{ADDRESS_NET.prefixlen} dev {h.dev}",
                    f"link set {h.dev} gso_max_segs {GSO_MAX_SEGS}", f"link set {h.dev} up"])
         for h in tb.hosts]
    try:
        for ns, cmds in batches:
            argv = ["ip"] + (["-n", ns] if ns else []) + ["-batch", "-"]
            r = subprocess.run(argv, input="\n".join(cmds) + "\n", capture_output=True, text=True)
            if r.returncode != 0:
                raise TestbedError(f"{' '.join(argv)} failed: {r.stderr.strip()}")
        for h in tb.hosts:
            run(["ip", "netns", "exec", h.netns, "sh", "-c",
                 f"printf {TCP_CC} > /proc/sys/net/ipv4/tcp_congestion_control"])
            install_shaper(h.dev, tb.link_Bps, netns=h.netns, burst_s=burst_s, ack_priority=ack_priority)
            install_shaper(h.switch_port, tb.link_Bps, netns=sw, burst_s=burst_s,
                           priority_tos=priority_tos, critical_tos=critical_tos)
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path = Path(cluster_file) if cluster_file else STATE_DIR / f"{prefix}-cluster.toml"
        try:
            path.write_text(f"# jitsched testbed {prefix!r}: {n_hosts} hosts, {link_mbit:g} Mbit/s links\n"
                            + tomli_w.dumps(cluster_doc(tb)))
        except OSError as exc:
            raise TestbedError(f"--cluster-file {path}: cannot write ({exc.strerror or exc})") from None
        tb.cluster_file = str(path)
        (STATE_DIR / f"{prefix}.json").write_text(json.dumps(tb.to_json(), indent=1))
    except BaseException:
        down(prefix)
        raise
    return tb


def _kill_netns_processes(names: list[str], timeout_s: float = 3.0) -> None:
    # A namespace outlives its name while a process is inside it: end those processes first.
    pids = set()
    for ns in names:
        r = run(["ip", "netns", "pids", ns], check=False)
        pids |= {int(p) for p in r.stdout.split() if p.isdigit()}
    pids.discard(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in list(pids):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pids.discard(pid)
        deadline = time.monotonic() + timeout_s
        while pids and time.monotonic() < deadline:
            pids = {p for p in pids if os.path.exists(f"/proc/{p}")}
            time.sleep(0.02)
        if not pids:
            return


def down(prefix: str = "js") -> list[str]:
    """Remove every namespace, process and file of testbed ``prefix``; safe to repeat.

    Returns
    -------
    list of str
        The namespaces removed.
    """
    check_prefix(prefix)
    pat = re.compile(rf"^{re.escape(prefix)}-(sw|h\d+)$")
    names = [n for n in list_netns(f"{prefix}-") if pat.match(n)]
    _kill_netns_processes(names)
    for ns in names:
        # Deleting the namespace destroys its veths (and so their peers) and the bridge.
        run(["ip", "netns", "del", ns], check=False)
    files = [STATE_DIR / f"{prefix}.json", STATE_DIR / f"{prefix}-cluster.toml"]
    try:
        files.append(Path(Testbed.load(prefix).cluster_file))
    except (TestbedError, ValueError, KeyError, TypeError):
        pass  # no state, or a corrupt one from a crash: the namespaces are what matters
    for p in files:
        p.unlink(missing_ok=True)
    left = [n for n in list_netns(f"{prefix}-") if pat.match(n)]
    if left:
        raise TestbedError(f"could not remove namespaces {left}")
    return names
