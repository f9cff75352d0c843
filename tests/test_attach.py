"""Tests of attached jobs: real processes' connections found by sock_diag, classified within 1 s, dropped at exit."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from jitsched.agents.agent import Agent
from jitsched.agents.attach import CGROUP_ROOT
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster, Host
from jitsched.localreg import attach, detach, register_flow
from jitsched.netns import PAIR_ADDRS, veth_pair
from jitsched.protocol import RemoteError
from jitsched.workloads.synth import layer_chain_job
from tests.flowtickets import flow_ticket

# A job's process: connects, forks a child that connects, closes, on commands from stdin;
# prints each new connection's "pid local_port".
CHILD = r"""
import os, socket, sys, time
socks = []
for line in sys.stdin:
    cmd, *a = line.split()
    if cmd == "connect":
        s = socket.create_connection((a[0], int(a[1])))
        s.sendall(b"x" * 65536)
        socks.append(s)
        print(os.getpid(), s.getsockname()[1], flush=True)
    elif cmd == "fork":
        r, w = os.pipe()
        if os.fork() == 0:
            s = socket.create_connection((a[0], int(a[1])))
            s.sendall(b"x" * 65536)
            os.write(w, f"{os.getpid()} {s.getsockname()[1]}\n".encode())
            sys.stdin.close()
            time.sleep(float(a[2]))
            os._exit(0)
        print(os.read(r, 100).decode().strip(), flush=True)
    elif cmd == "send":
        socks[-1].sendall(b"y" * int(a[0]))
        print("sent", flush=True)
    elif cmd == "close":
        socks.pop().close()
        print("closed", flush=True)
"""

# A sink that reads every connection until it closes (run in a namespace for the tc test).
SINK = r"""
import socket, sys, threading
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
def drain(c):
    while c.recv(1 << 16):
        pass
while True:
    c, _ = srv.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
"""


def as_user(uid: int, fn) -> str:
    """``str(fn())`` (or the agent's refusal, "code message") run in a forked process of user ``uid``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # only socket calls here: the parent's threads are not in this process
        try:
            os.close(r)
            os.setgid(uid)
            os.setuid(uid)
            try:
                out = str(fn())
            except RemoteError as exc:
                out = f"{exc.code} {exc.message}"
            except BaseException as exc:  # noqa: BLE001 - the parent's assertion shows it
                out = f"{type(exc).__name__}: {exc}"
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    os.waitpid(pid, 0)
    return out


class Child:
    """A job process running :data:`CHILD` (``prefix``: e.g. ``ip netns exec NS``), stopped by :meth:`stop`."""

    def __init__(self, prefix: list[str] | None = None, user: int | None = None) -> None:
        self.p = subprocess.Popen([*(prefix or []), sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, user=user)

    def cmd(self, line: str) -> str:
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()

    def connect(self, addr: str, port: int) -> tuple[int, int]:
        pid, lport = self.cmd(f"connect {addr} {port}").split()
        return int(pid), int(lport)

    def fork(self, addr: str, port: int, live_s: float) -> tuple[int, int]:
        pid, lport = self.cmd(f"fork {addr} {port} {live_s}").split()
        return int(pid), int(lport)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(5)
        self.p.stdin.close()
        self.p.stdout.close()


@contextlib.contextmanager
def loopback_sink():
    """A TCP server on loopback draining every connection; yields its port."""
    srv = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            threading.Thread(target=lambda c=c: _drain(c), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()
        for c in conns:
            c.close()


def _drain(c: socket.socket) -> None:
    try:
        while c.recv(1 << 16):
            pass
    except OSError:
        pass


@contextlib.contextmanager
def system(backend: str = "record", backend_options: dict | None = None, allowed_uids=()):
    """A daemon (default jit policy) of hosts h0, h1, a job sending h0 -> h1, and h0's agent."""
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e8), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=2.0,
                       resend_s=0.1, slot_s=0.1, policy="jit")
    d = Daemon(cfg)
    a = None
    try:
        d.start()
        # the egress alone: these tests read the egress classes
        a = Agent("h0", d.agent_endpoint, AgentOptions(backend=backend, ingress=False),
                  backend_options=backend_options, local_namespace=f"a{uuid.uuid4().hex[:8]}",
                  allowed_uids=allowed_uids).start()
        assert wait_until(a.registered.is_set, 5.0)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("j", "h0", "h1"))
            assert wait_until(lambda: a.schedule is not None and a.schedule["flows"], 5.0)
            yield d, a, c
    finally:
        if a is not None:
            a.stop()
        d.stop()


def _ticket(c: Client, job: str = "j", host: str = "h0", uid: int | None = None) -> dict:
    """The daemon's attach ticket for ``job`` on ``host`` and local user ``uid`` (default: this one)."""
    return c.attach_job(job, host, uid=os.geteuid() if uid is None else uid)["ticket"]


def _given(a: Agent) -> dict[str, object]:
    """The attached connections the record backend was last given, by flow id."""
    return {f.flow_id: f for f in a.backend.last if "/@" in f.flow_id}


def _fid(lport: int, port: int) -> str:
    return f"j/@127.0.0.1:{lport}>127.0.0.1:{port}"


@pytest.mark.alone
def test_a_jobs_processes_connections_are_ranked_within_a_second_and_dropped_at_exit():
    with loopback_sink() as port, system() as (d, a, c):
        peers = {f"127.0.0.1:{port}": "h1"}
        assert c.attach_job("j", "h0") == {"job_id": "j", "host": "h0", "peers": {}, "hosts": ["h0", "h1"]}
        assert set(c.attach_job("j", "h0", uid=os.geteuid())) == {"job_id", "host", "peers", "hosts", "ticket"}
        child = Child()
        try:
            got = attach(a.local_name, "j", pids=[child.p.pid], peers=peers, ticket=_ticket(c))
            assert got == {"job": "j", "attachments": 1, "conns": 0}
            # a connection opened after the attach: classified within 1 s, at the job's level
            t0 = time.monotonic()
            _, lport = child.connect("127.0.0.1", port)
            assert wait_until(lambda: _fid(lport, port) in _given(a), 1.0)
            assert time.monotonic() - t0 < 1.0
            f = _given(a)[_fid(lport, port)]
            assert (f.src_addr, f.src_port, f.dst_addr, f.dst_port) == ("127.0.0.1", lport, "127.0.0.1", port)
            # the job's own transfers are ranked 0 (the only job): the connection gets level 0 too
            ranks = {x.prio for x in a.backend.last if x.flow_id.startswith("j/") and "/@" not in x.flow_id}
            assert ranks == {0} and f.prio == 0
            # a forked child's connection is the job's too, and goes when the child exits
            kid, kport = child.fork("127.0.0.1", port, 1.5)
            assert wait_until(lambda: _fid(kport, port) in _given(a), 1.0)
            assert wait_until(lambda: _fid(kport, port) not in _given(a), 3.0)
            assert _fid(lport, port) in _given(a)
            # per-job accounting reaches the daemon's status under the agent: bytes sent
            # since the connection was classified count as classified
            child.cmd("send 1000000")
            def acct():
                return (c.status()["agents"]["h0"].get("attached") or {}).get("jobs", {}).get("j", {})
            assert wait_until(lambda: acct().get("bytes_classified", 0) >= 1_000_000, 3.0), acct()
            got = acct()
            assert got["rank"] == 0 and got["conns"] == 1 and got["bytes_sent"] >= got["bytes_classified"]
            # a closed connection goes within a second
            child.cmd("close")
            assert wait_until(lambda: _fid(lport, port) not in _given(a), 1.0)
            # and when the process exits its attachment ends
            _, lport2 = child.connect("127.0.0.1", port)
            assert wait_until(lambda: _fid(lport2, port) in _given(a), 1.0)
            child.stop()
            assert wait_until(lambda: not _given(a) and not a.attached.attachments, 1.0)
            assert a.attached.ended == 1 and a.running
        finally:
            child.stop()


def test_a_connection_to_an_unknown_peer_is_counted_not_classified_and_detach_forgets_the_job():
    with loopback_sink() as port, system() as (d, a, c):
        child = Child()
        try:
            attach(a.local_name, "j", pids=[child.p.pid], ticket=_ticket(c))  # no peer map: h1 unknown
            _, lport = child.connect("127.0.0.1", port)
            assert wait_until(lambda: a.attached.summary()["jobs"]["j"]["unmapped"] == 1, 1.0)
            time.sleep(0.3)
            assert not _given(a)
            assert detach(a.local_name, "j") == {"job": "j", "detached": 1}
            assert "j" not in a.attached.jobs
        finally:
            child.stop()


def test_attach_by_port_and_by_cgroup():
    cg = CGROUP_ROOT / "unified" if (CGROUP_ROOT / "unified" / "cgroup.procs").exists() else CGROUP_ROOT
    path = cg / f"jst-{uuid.uuid4().hex[:8]}"
    with loopback_sink() as port, system() as (d, a, c):
        peers = {"127.0.0.1": "h1"}
        child = Child()
        try:
            # by the server's port: every connection to it (the sink's accepted ends too)
            attach(a.local_name, "j", ports=[port], peers=peers, ticket=_ticket(c))
            _, lport = child.connect("127.0.0.1", port)
            assert wait_until(lambda: _fid(lport, port) in _given(a), 1.0)
            detach(a.local_name, "j")
            assert wait_until(lambda: not _given(a), 1.0)
            # by a cgroup the process is moved into
            path.mkdir()
            (path / "cgroup.procs").write_text(str(child.p.pid))
            attach(a.local_name, "j", cgroup=str(path), peers=peers, ticket=_ticket(c))
            assert wait_until(lambda: _fid(lport, port) in _given(a), 1.0)
            _, lport2 = child.connect("127.0.0.1", port)
            assert wait_until(lambda: _fid(lport2, port) in _given(a), 1.0)
            child.stop()
            assert wait_until(lambda: not _given(a), 1.0)
        finally:
            child.stop()
            if path.exists():
                path.rmdir()


def test_bad_attach_requests_are_refused_with_their_reason_and_the_agent_keeps_running():
    nobody = 65534
    with loopback_sink() as port, system(allowed_uids=(nobody,)) as (d, a, c):
        theirs = subprocess.Popen(["sleep", "30"], user=nobody)
        dead = subprocess.Popen(["true"])
        dead.wait()
        try:
            cases = [
                ({"pids": [dead.pid]}, "invalid_body", f"pid {dead.pid} does not exist"),
                ({"cgroup": "/tmp"}, "invalid_body", "is outside /sys/fs/cgroup"),
                ({"cgroup": "/sys/fs/cgroup/../../tmp"}, "invalid_body", "is outside /sys/fs/cgroup"),
                ({"cgroup": "/sys/fs/cgroup"}, "invalid_body", "is the root cgroup, every process of the host"),
                ({"pids": [1], "ports": [80]}, "invalid_body", "exactly one of"),
                ({"ports": [70000]}, "invalid_body", "1..65535"),
                # dotted quads only: sock_diag names a peer so, and "127.1" would never match
                ({"ports": [80], "peers": {"127.1": "h1"}}, "invalid_body", "'127.1' is not an IPv4"),
                ({"ports": [80], "peers": {"127.0.0.1: 80": "h1"}}, "invalid_body", "is not an IPv4"),
                ({"ports": [80], "peers": {"127.0.0.1:": "h1"}}, "invalid_body", "is not an IPv4"),
            ]
            for kw, code, words in cases:
                with pytest.raises(RemoteError) as e:
                    attach(a.local_name, "j", **kw, ticket=_ticket(c))
                assert e.value.code == code and words in e.value.message, e.value
            # another user's process, asked by that user: the agent serves it (an allowed
            # uid) but refuses it a process of root's; its own it may attach
            mine = os.getpid()
            theirs_ticket = _ticket(c, uid=nobody)  # asked in this process: the child only talks to the agent
            assert as_user(nobody, lambda: attach(a.local_name, "j", pids=[mine], ticket=theirs_ticket)) == (
                f"forbidden pid {mine} belongs to uid 0, not to uid {nobody}")
            assert as_user(nobody, lambda: attach(a.local_name, "j", pids=[theirs.pid], ticket=theirs_ticket)) == str(
                {"job": "j", "attachments": 1, "conns": 0})
            # a job this client does not own, or that does not exist: the daemon refuses
            with pytest.raises(RemoteError) as e:
                c.attach_job("nope", "h0")
            assert e.value.code == "unknown_job"
            with pytest.raises(RemoteError) as e:
                c.attach_job("j", "h9")
            assert e.value.code == "unknown_host"
            assert a.running
            # and a good request still works
            child = Child()
            try:
                attach(a.local_name, "j", pids=[child.p.pid], peers={f"127.0.0.1:{port}": "h1"}, ticket=_ticket(c))
                _, lport = child.connect("127.0.0.1", port)
                assert wait_until(lambda: _fid(lport, port) in _given(a), 1.0)
            finally:
                child.stop()
        finally:
            theirs.kill()
            theirs.wait()


def test_a_job_owned_by_another_clients_key_is_refused():
    from jitsched.daemon.state import SchedulerState

    hosts = tuple(Host(f"h{i}", 1e8, 1e8, f"198.18.0.{i + 1}") for i in range(3))
    st = SchedulerState(DaemonConfig(cluster=Cluster(hosts), policy="jit"))
    assert "job_id" in st.submit_job({"job": layer_chain_job("j", "h0", "h1").to_dict()}, 0.0, peer="alice")
    # job ids are the client's own: bob's "j" is no job of alice's
    got = st.attach_job({"job_id": "j", "host": "h0"}, 0.0, peer="bob")
    assert got.code == "unknown_job"
    # its owner gets the addresses of the job's hosts (not h2's)
    assert st.attach_job({"job_id": "j", "host": "h0"}, 0.0, peer="alice") == {
        "job_id": "alice:j", "host": "h0", "peers": {"198.18.0.1": "h0", "198.18.0.2": "h1"}, "hosts": ["h0", "h1"]}


def test_tc_backend_installs_and_removes_the_u32_filter_of_an_attached_connection(netns_available):
    with veth_pair() as (ns0, ns1), system("tc", {"dev": "a0", "netns": ns0, "borrow": True}) as (d, a, c):
        sink = subprocess.Popen(["ip", "netns", "exec", ns1, sys.executable, "-c", SINK, PAIR_ADDRS[1], "5301"],
                                stdout=subprocess.PIPE, text=True)
        child = Child(["ip", "netns", "exec", ns0])
        try:
            assert sink.stdout.readline().strip() == "ready"
            attach(a.local_name, "j", pids=[child.p.pid], peers={PAIR_ADDRS[1]: "h1"}, ticket=_ticket(c))
            _, lport = child.connect(PAIR_ADDRS[1], 5301)
            ports = f"{lport:04x}{5301:04x}/ffffffff at 20"

            def filters() -> str:
                return subprocess.run(["tc", "-n", ns0, "filter", "show", "dev", "a0"], capture_output=True,
                                      text=True, check=True).stdout

            t0 = time.monotonic()
            assert wait_until(lambda: ports in filters(), 1.0), filters()
            assert time.monotonic() - t0 < 1.0
            child.stop()
            assert wait_until(lambda: ports not in filters(), 1.0), filters()
        finally:
            child.stop()
            sink.kill()
            sink.wait()
            sink.stdout.close()


def test_attaching_a_process_that_exits_during_the_first_scan_answers_with_no_connections(monkeypatch):
    from jitsched.agents import attach as attach_mod

    table = attach_mod.AttachTable()
    real = attach_mod.proc_start
    calls = []

    def exits_after_the_check(pid):  # the ownership check sees the process, the scan finds it gone
        calls.append(pid)
        return real(pid) if len(calls) == 1 else None

    monkeypatch.setattr(attach_mod, "proc_start", exits_after_the_check)
    reply = table.attach({"job": "j", "pids": [os.getpid()]}, os.getuid())
    assert reply == {"job": "j", "attachments": 0, "conns": 0}
    assert "j" not in table.jobs and table.ended == 1


def _v6_connect(port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.connect(("::ffff:127.0.0.1", port))
    return s


def _scheduled_flow(a) -> str:
    return a.schedule["flows"][0]["flow"]


@pytest.mark.alone
def test_a_registered_v4_mapped_socket_keeps_its_registration_and_is_not_attached_again():
    with loopback_sink() as port, system() as (d, a, c):
        s = _v6_connect(port)
        try:
            fid = _scheduled_flow(a)
            ctrl = register_flow(a.local_name, fid, s, ticket=flow_ticket(a, fid, secret=d.state.ticket_secret))
            assert ctrl is not None
            lport = s.getsockname()[1]
            assert wait_until(lambda: fid in a.flows, 2.0)
            lf = a.flows[fid]
            # the flow's endpoints are the IPv4 connection's, as sock_diag and u32 name them
            assert (lf.src_addr, lf.dst_addr) == ("127.0.0.1", "127.0.0.1"), (lf.src_addr, lf.dst_addr)
            # attached by port too: the registered connection keeps its registration
            attach(a.local_name, "j", ports=[port], peers={"127.0.0.1": "h1"}, ticket=_ticket(c))
            time.sleep(0.8)
            assert _fid(lport, port) not in _given(a), sorted(_given(a))
            ctrl.close()
        finally:
            s.close()


@pytest.mark.alone
def test_a_registered_v4_mapped_socket_does_not_end_a_tc_agent(netns_available):
    with veth_pair() as (ns0, _ns1), loopback_sink() as port, \
            system("tc", {"dev": "a0", "netns": ns0, "borrow": True}) as (d, a, c):
        s = _v6_connect(port)
        try:
            fid = _scheduled_flow(a)
            ctrl = register_flow(a.local_name, fid, s, ticket=flow_ticket(a, fid, secret=d.state.ticket_secret))
            time.sleep(0.5)
            assert a.running and a.failure is None, a.failure
            assert ctrl is not None
            lport = s.getsockname()[1]
            out = subprocess.run(["tc", "-n", ns0, "filter", "show", "dev", "a0"], capture_output=True,
                                 text=True, check=True).stdout
            assert f"{lport:04x}{port:04x}/ffffffff at 20" in out, out
            ctrl.close()
        finally:
            s.close()


@pytest.mark.alone
def test_a_registered_ipv6_socket_does_not_end_a_tc_agent(netns_available):
    srv = socket.create_server(("::1", 0), family=socket.AF_INET6)
    with veth_pair() as (ns0, _ns1), system("tc", {"dev": "a0", "netns": ns0, "borrow": True}) as (d, a, c):
        s = socket.create_connection(("::1", srv.getsockname()[1]))
        try:
            fid = _scheduled_flow(a)
            # u32 matches IPv4 headers: the registration is refused, and the agent runs on
            assert register_flow(a.local_name, fid, s, ticket=flow_ticket(a, fid, secret=d.state.ticket_secret)) is None
            time.sleep(0.5)
            assert a.running and a.failure is None, a.failure
        finally:
            s.close()
            srv.close()
