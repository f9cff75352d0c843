"""Daemon replicas as real processes on a real etcd: election, failover, a deposed leader fenced, clients and agents following."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.bench.bench_faults import free_ports
from jitsched.cli import main
from jitsched.client import Client
from jitsched.daemon.ha import Etcd, EtcdStore, LocalEtcd
from jitsched.daemon.replica import Election
from jitsched.protocol import ErrorCode, RemoteError, leader_named

ROOT = Path(__file__).resolve().parent.parent
TTL_S = 2


def _job(jid: str) -> dict:
    # a transfer nobody reports: the job runs until cancelled
    return {"id": jid, "computes": [], "transfers": [{"id": "t", "src": "h1", "dst": "h2", "bytes": 1e9}]}


class Fabric:
    """etcd, two replica processes and their endpoints; stops and removes all of it."""

    def __init__(self, tmp: Path, prefix: str) -> None:
        self.etcd = LocalEtcd(*free_ports(2))
        self.procs: list[subprocess.Popen] = []
        self.jobs: list[str] = []
        self.agents: list[str] = []
        self.metrics: list[int] = []
        ports = free_ports(6)
        for i in range(2):
            job_ep, agent_ep = f"tcp://127.0.0.1:{ports[2 * i]}", f"tcp://127.0.0.1:{ports[2 * i + 1]}"
            cfg = tmp / f"replica{i}.toml"
            cfg.write_text(
                "[[hosts]]\nname = \"h1\"\negress_bps = 1e9\ningress_bps = 1e9\n"
                "[[hosts]]\nname = \"h2\"\negress_bps = 1e9\ningress_bps = 1e9\n"
                f"[daemon]\njob_endpoint = \"{job_ep}\"\nagent_endpoint = \"{agent_ep}\"\n"
                f"planner_process = false\nmetrics_port = {ports[4 + i]}\n"
                f"[ha]\netcd_endpoints = [\"{self.etcd.endpoint}\"]\netcd_prefix = \"/{prefix}\"\n"
                f"lease_ttl_s = {TTL_S}\n")
            self.jobs.append(job_ep)
            self.agents.append(agent_ep)
            self.metrics.append(ports[4 + i])
            self.procs.append(subprocess.Popen([sys.executable, "-m", "jitsched", "daemon", "--config", str(cfg),
                                                "--quiet"], cwd=ROOT, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL))
        self.election = Election(Etcd([self.etcd.endpoint]), f"/{prefix}", TTL_S)

    def leader(self, timeout_s: float = 10.0, epoch_above: int = 0):
        got = self.election.wait_leader(timeout_s, epoch_above, poll_s=0.05)
        assert got is not None, "no leader elected"
        return got

    def proc_of(self, leader) -> subprocess.Popen:
        return next(p for p in self.procs if p.pid == leader.pid)

    def client(self, timeout_s: float = 10.0) -> Client:
        return Client(",".join(self.jobs), timeout_s=timeout_s)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
        for p in self.procs:
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.etcd.stop()


@pytest.fixture
def fabric(tmp_path, request):
    f = Fabric(tmp_path, "t-" + request.node.name.replace("_", "-")[:30])
    try:
        yield f
    finally:
        f.stop()


def test_one_leader_and_a_follower_that_names_it(fabric):
    leader = fabric.leader()
    assert leader.epoch == 1 and leader.job_endpoint in fabric.jobs
    follower = next(ep for ep in fabric.jobs if ep != leader.job_endpoint)
    deadline = time.monotonic() + 10
    while True:  # the leader binds its sockets once it has read its state
        try:
            with Client(leader.job_endpoint, timeout_s=2) as c:
                assert c.status()["epoch"] == 1
            break
        except TimeoutError:
            assert time.monotonic() < deadline
    # the follower names the leader once it has read the leader key (it polls etcd)
    while True:
        with Client(follower, timeout_s=5) as c, pytest.raises(RemoteError) as err:
            c.status()
        assert err.value.code == ErrorCode.NOT_LEADER
        if leader_named(err.value.message) is not None or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leader_named(err.value.message) == (leader.job_endpoint, leader.agent_endpoint, 1)
    # a client given both endpoints, the follower first, follows the leader
    with Client(f"{follower},{leader.job_endpoint}", timeout_s=10) as c:
        assert c.submit_job(_job("j1")) == "j1"
        assert c.leader_moves == 1 and c.endpoint == leader.job_endpoint


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def _replicas(capsys, fabric, timeout_s: float = 5.0) -> tuple[int, dict]:
    rc = main(["status", "--replicas", "--daemon", ",".join(fabric.jobs), "--timeout-s", str(timeout_s), "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_each_replica_tells_its_role_and_exports_it(fabric, capsys):
    leader = fabric.leader()
    i_lead = fabric.jobs.index(leader.job_endpoint)
    i_follow = 1 - i_lead
    deadline = time.monotonic() + 10
    while True:  # the leader binds once it has read its state; the follower polls etcd
        rc, out = _replicas(capsys, fabric)
        f = out[fabric.jobs[i_follow]]
        if rc == 0 and f["leader"] is not None:
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.1)
    assert out[leader.job_endpoint]["role"] == "leader" and out[leader.job_endpoint]["epoch"] == 1
    assert f["role"] == "follower" and f["etcd_error"] == ""
    assert f["leader"] == {"job_endpoint": leader.job_endpoint, "agent_endpoint": leader.agent_endpoint, "epoch": 1}
    # each exports its role on its own metrics port
    assert "jitsched_replica_leader 0.0" in _metrics(fabric.metrics[i_follow])
    assert "jitsched_replica_etcd_up 1.0" in _metrics(fabric.metrics[i_follow])
    lead_metrics = _metrics(fabric.metrics[i_lead])
    assert "jitsched_replica_leader 1.0" in lead_metrics and "jitsched_epoch 1.0" in lead_metrics
    # the text form, a line each
    assert main(["status", "--replicas", "--daemon", ",".join(fabric.jobs)]) == 0
    text = capsys.readouterr().out
    assert f"{leader.job_endpoint}: leader, epoch 1" in text
    assert f"{fabric.jobs[i_follow]}: follower, epoch 1, sees leader {leader.job_endpoint} epoch 1" in text
    # the follower takes over: the same metrics port now serves the daemon it became
    os.kill(leader.pid, signal.SIGKILL)
    fabric.leader(epoch_above=1)
    while True:
        try:
            if "jitsched_epoch 2.0" in _metrics(fabric.metrics[i_follow]):
                break
        except OSError:
            pass  # between the follower's endpoint and the daemon's
        assert time.monotonic() < deadline + 15
        time.sleep(0.1)
    rc, out = _replicas(capsys, fabric, timeout_s=1.0)
    assert rc == 1
    assert out[fabric.jobs[i_lead]]["role"] == "unreachable"
    assert out[fabric.jobs[i_follow]]["role"] == "leader" and out[fabric.jobs[i_follow]]["epoch"] == 2


def test_failover_after_kill_loses_no_job_and_agents_follow(fabric):
    first = fabric.leader()
    agents = [Agent(h, ",".join(fabric.agents), AgentOptions(backend="record"),
                    local_namespace=f"replica-{os.getpid()}") for h in ("h1", "h2")]
    for a in agents:
        a.start()
    try:
        with fabric.client() as c:
            ids = [c.submit_job(_job(f"j{i}")) for i in range(20)]
        deadline = time.monotonic() + 10
        while not all(a.schedule and a.epoch == first.epoch for a in agents):
            assert time.monotonic() < deadline, "agents got no schedule from the first leader"
            time.sleep(0.05)
        os.kill(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        second = fabric.leader(epoch_above=first.epoch)
        assert second.pid != first.pid
        while not all(a.schedule and a.schedule.get("epoch") == second.epoch for a in agents):
            assert time.monotonic() - killed < 10, "agents got no schedule from the new leader"
            time.sleep(0.02)
        failover_s = time.monotonic() - killed
        with fabric.client() as c:
            st = c.status()
        assert st["epoch"] == second.epoch
        running = {j for j, e in st["jobs"].items() if e["state"] == "running"}
        assert set(ids) <= running, f"jobs lost: {sorted(set(ids) - running)}"
        assert failover_s < 3 * TTL_S + 2, failover_s
        assert all(a.fenced == 0 for a in agents)
    finally:
        for a in agents:
            a.stop()


def test_deposed_leader_cannot_write_and_its_schedules_are_dropped(fabric):
    first = fabric.leader()
    with fabric.client() as c:
        c.submit_job(_job("before"))
    proc = fabric.proc_of(first)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        second = fabric.leader(timeout_s=3 * TTL_S + 5, epoch_above=first.epoch)
        # a request to the stopped leader waits in its socket until it goes on
        stale = Client(first.job_endpoint, timeout_s=8)
        with fabric.client() as c:
            assert c.status()["epoch"] == second.epoch
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    try:
        stale.submit_job(_job("after"))
        pytest.fail("a deposed leader acknowledged a job")
    except RemoteError as exc:
        # refused: its write fenced (unavailable), or already stepped down (not_leader)
        assert exc.code in (ErrorCode.UNAVAILABLE, ErrorCode.NOT_LEADER), exc
    except TimeoutError:
        pass  # it stepped down (closing its sockets) before it read the request
    finally:
        stale.close()
    with fabric.client() as c:
        jobs = c.status()["jobs"]
    assert "before" in jobs and "after" not in jobs
    # nothing of the deposed epoch's reached etcd after the successor took over
    st = EtcdStore(Etcd([fabric.etcd.endpoint]), fabric.election)
    assert all(jj.job_map.get("id") != "after" for jj in st.unfinished())
    # the deposed replica went back to following: it names the new leader
    deadline = time.monotonic() + 10
    while True:
        try:
            with Client(first.job_endpoint, timeout_s=1) as c:
                c.status()
        except RemoteError as exc:
            assert exc.code == ErrorCode.NOT_LEADER
            if leader_named(exc.message) == (second.job_endpoint, second.agent_endpoint, second.epoch):
                break
        except TimeoutError:
            pass
        assert time.monotonic() < deadline, "the deposed leader did not follow the new one"


def test_agent_drops_a_schedule_of_a_lower_epoch():
    a = Agent("h1", "tcp://127.0.0.1:1,tcp://127.0.0.1:2", AgentOptions(backend="record"))
    assert a.endpoints == ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2"]
    body = {"seq": 1, "slot_s": 0.1, "epoch_ns": 0, "flows": [], "leftover_Bps": [], "incarnation": 7, "epoch": 3}
    assert a._install(body) and a.epoch == 3
    assert not a._install({**body, "seq": 5, "incarnation": 8, "epoch": 2})
    assert a.fenced == 1 and a.seq == 1 and a.schedule["epoch"] == 3
    assert a._install({**body, "seq": 1, "incarnation": 9, "epoch": 4}) and a.schedule["epoch"] == 4
    a.stop()


def test_agent_leaves_a_daemon_of_a_lower_epoch():
    from jitsched.bench.faults_ha import WatchedAgent
    from jitsched.config import DaemonConfig
    from jitsched.daemon.server import Daemon
    from jitsched.dag.model import parse_cluster

    cluster = parse_cluster({"hosts": [{"name": h, "egress_bps": 1e9, "ingress_bps": 1e9} for h in ("h1", "h2")]})
    ports = free_ports(4)
    # the same fabric under two leaders: the successor (epoch 2) and a deposed one (epoch 1)
    # that still runs and has a plan for h1
    new, old = (Daemon(DaemonConfig(cluster=cluster, job_endpoint=f"tcp://127.0.0.1:{ports[i]}",
                                    agent_endpoint=f"tcp://127.0.0.1:{ports[i + 1]}", planner_process=False),
                       epoch=epoch).start() for i, epoch in ((0, 2), (2, 1)))
    a = WatchedAgent("h1", f"{new.agent_endpoint},{old.agent_endpoint}", AgentOptions(backend="record"),
                     local_namespace=f"lower{os.getpid()}")
    try:
        for d in (new, old):
            with Client(d.job_endpoint, timeout_s=5) as c:
                c.submit_job(_job("j"))
        a.start()
        deadline = time.monotonic() + 10
        while not (a.schedule and a.schedule["epoch"] == 2 and a.schedule["flows"]):
            assert time.monotonic() < deadline, "no schedule from the epoch-2 daemon"
            time.sleep(0.02)
        new.stop()  # the agent goes on to the next endpoint: the deposed daemon
        while a.fenced < 2:
            assert time.monotonic() < deadline + 10, "the agent did not meet the deposed daemon"
            time.sleep(0.02)
        assert a.epoch == 2 and all(e == 2 for _, e, installed in a.received if installed)
        with Client(old.job_endpoint, timeout_s=5) as c:
            assert c.status()["agents"].get("h1", {}).get("acked_seq", 0) == 0
    finally:
        a.stop()
        new.stop()
        old.stop()
