"""Fault benchmark of daemon replicas on etcd: kill -9 the leader under a job workload, measure failover and fencing."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.bench.bench_faults import HOSTS, _Workload, free_ports, log
from jitsched.daemon.ha import Election, Etcd, Leader, LocalEtcd

REPLICAS = 2
# a new leader's first schedule is waited for this long after a kill (else the cycle is censored)
FAILOVER_WAIT_S = 30.0


class WatchedAgent(Agent):
    """An agent that notes every schedule body it receives: when, of which epoch, whether it held it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.received: list[tuple[float, int, bool]] = []  # (monotonic time, epoch, installed)

    def _install(self, body: dict) -> bool:
        got = super()._install(body)
        self.received.append((time.monotonic(), int(body.get("epoch", 0)), got))
        return got


class Replicas:
    """``REPLICAS`` daemon replica processes (``jitsched daemon`` with ``[ha]``) on one etcd."""

    def __init__(self, workdir: Path, etcd: LocalEtcd, ttl_s: float) -> None:
        self.workdir = workdir
        ports = free_ports(2 * REPLICAS)
        self.jobs = [f"tcp://127.0.0.1:{ports[2 * i]}" for i in range(REPLICAS)]
        self.agents = [f"tcp://127.0.0.1:{ports[2 * i + 1]}" for i in range(REPLICAS)]
        self.procs: list[subprocess.Popen | None] = [None] * REPLICAS
        self.configs = []
        hosts = "".join(f"[[hosts]]\nname = \"{h}\"\negress_bps = 1e9\ningress_bps = 1e9\n" for h in HOSTS)
        for i in range(REPLICAS):
            cfg = workdir / f"replica{i}.toml"
            cfg.write_text(hosts + f"[daemon]\njob_endpoint = \"{self.jobs[i]}\"\n"
                           f"agent_endpoint = \"{self.agents[i]}\"\nplanner_process = false\n"
                           f"[ha]\netcd_endpoints = [\"{etcd.endpoint}\"]\netcd_prefix = \"/bench-faults\"\n"
                           f"lease_ttl_s = {ttl_s}\n")
            self.configs.append(cfg)
        self.election = Election(Etcd([etcd.endpoint]), "/bench-faults", ttl_s)

    def start(self, i: int) -> None:
        log_file = open(self.workdir / f"replica{i}.log", "ab")  # noqa: SIM115 - the child holds it
        self.procs[i] = subprocess.Popen([sys.executable, "-m", "jitsched", "daemon", "--config", str(self.configs[i]),
                                          "--quiet"], cwd=self.workdir, stdout=log_file, stderr=subprocess.STDOUT)
        log_file.close()

    def index_of(self, pid: int) -> int | None:
        return next((i for i, p in enumerate(self.procs) if p is not None and p.pid == pid), None)

    def leader(self, timeout_s: float, epoch_above: int = 0) -> Leader | None:
        return self.election.wait_leader(timeout_s, epoch_above)

    def stop(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def _reached(agents: dict, epoch: int, since: float) -> float | None:
    """When the last agent received its first body of ``epoch`` or later (None: one has not)."""
    times = []
    for a in agents.values():
        t = next((t for t, e, _ in a.received if e >= epoch and t >= since), None)
        if t is None:
            return None
        times.append(t)
    return max(times)


def _fenced_installed(agents: dict) -> int:
    """Bodies installed from an epoch below one the same agent installed before."""
    n = 0
    for a in agents.values():
        top = 0
        for _, e, installed in list(a.received):
            if installed:
                n += e < top
                top = max(top, e)
    return n


def leader_kills(n: int, seed: int, workdir: Path, *, runners: int = 3, ttl_s: float = 2.0,
                 gap_s: tuple[float, float] = (1.0, 4.0)) -> dict:
    """kill -9 the leading replica ``n`` times under a job workload (the killed one restarts as
    a follower). Failover: from the kill until every agent received a schedule body of the
    successor's epoch. ``fenced_schedules_installed``: bodies agents installed from an epoch
    below one they had installed."""
    rng = random.Random(seed)
    etcd = LocalEtcd(*free_ports(2))
    reps = Replicas(workdir, etcd, ttl_s)
    agents: dict = {}
    work = None
    failovers: list[float] = []
    censored = 0
    try:
        for i in range(REPLICAS):
            reps.start(i)
        leader = reps.leader(30.0)
        if leader is None:
            raise RuntimeError("no replica was elected within 30 s")
        agents = {h: WatchedAgent(h, ",".join(reps.agents), AgentOptions(backend="record"),
                                  local_namespace=f"ha{h}{id(reps)}").start() for h in HOSTS}
        work = _Workload(",".join(reps.jobs), agents, runners, seed).start()
        log(f"leader kills: {n}, {REPLICAS} replicas, lease {ttl_s} s, {runners} runner threads")
        for cycle in range(n):
            time.sleep(rng.uniform(*gap_s))
            leader = reps.leader(FAILOVER_WAIT_S)
            i = reps.index_of(leader.pid) if leader else None
            if i is None:
                raise RuntimeError("the leader is none of the replicas this bench started")
            reps.procs[i].kill()  # SIGKILL
            killed = time.monotonic()
            reps.procs[i].wait()
            reps.start(i)  # back as a follower
            nxt = reps.leader(FAILOVER_WAIT_S, epoch_above=leader.epoch)
            reached = None
            while nxt is not None and time.monotonic() - killed < FAILOVER_WAIT_S:
                reached = _reached(agents, nxt.epoch, killed)
                if reached is not None:
                    break
                time.sleep(0.01)
            if reached is None:
                censored += 1
            else:
                failovers.append(reached - killed)
            log(f"leader kill {cycle + 1}/{n}: epoch {leader.epoch} -> {nxt.epoch if nxt else '?'}, failover "
                f"{failovers[-1] if reached else float('nan'):.2f} s; jobs {work.completed}/{work.submitted} completed")
        time.sleep(3.0)  # the last jobs finish under the last leader
    finally:
        if work is not None:
            work.close()
        for a in agents.values():
            a.stop()
        reps.stop()
        etcd.stop()
    lost = work.submitted - work.completed if work else 0
    if work is not None and work.errors:
        work.log_errors("leader kills")
    return {"leader_kills": n, "ha_jobs_submitted": work.submitted if work else 0,
            "ha_jobs_completed": work.completed if work else 0, "ha_jobs_lost": lost,
            "failover_s_p50": statistics.median(failovers) if failovers else None,
            "failover_s_max": max(failovers) if failovers else None, "failover_censored": censored,
            "fenced_schedules_installed": _fenced_installed(agents)}

