"""Daemon benchmarks: submit-to-ack latency at 70 VGG16 jobs, submissions per second, schedule fan-out."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time

import numpy as np
import zmq

from jitsched.agents.agent import Agent
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.model import Cluster
from jitsched.protocol import MsgType, decode_any, encode_request
from jitsched.synth import layer_chain_job

GOALS = {"submit_to_ack_p99_s": 0.050, "submissions_per_s": 500.0, "fanout_1000_s": 0.100}


def _cfg(n_hosts: int, **kw) -> DaemonConfig:
    return DaemonConfig(cluster=Cluster.uniform(n_hosts), job_endpoint="tcp://127.0.0.1:*",
                        agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=1.0,
                        heartbeat_timeout_s=30.0, resend_s=0.5, **kw)


def submit_to_ack(n_jobs: int, repeats: int, n_hosts: int, seed: int = 0) -> list[float]:
    """Seconds from submitting one more VGG16 job (``n_jobs - 1`` already planned) until
    the agents of its two hosts acked a schedule that includes it."""
    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(n_hosts)]
    d = Daemon(_cfg(n_hosts)).start()
    agents = []
    out = []
    try:
        agents = [Agent(h, d.agent_endpoint, local_namespace=f"b{id(d)}").start() for h in names]
        assert wait_until(lambda: all(a.registered.is_set() for a in agents), 10)
        with Client(d.job_endpoint) as c:
            for j in range(n_jobs - 1):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                c.submit_job(layer_chain_job(f"bg{j}", names[ps], names[wk]))
            assert wait_until(lambda: d.state.plan_summary.get("jobs") == n_jobs - 1
                              and d.state.planning_seq == 0, 60)
            for r in range(repeats):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                jid = f"probe{r}"
                t0 = time.perf_counter()
                c.submit_job(layer_chain_job(jid, names[ps], names[wk]))
                src = agents[ps]

                def has(a=src, jid=jid):
                    s = a.schedule
                    return s is not None and any(f["flow"].startswith(jid + "/") for f in s["flows"])

                def acked(a=src, p=names[ps], w=names[wk]):
                    return (has() and d.state.agents[p].acked_seq >= a.seq
                            and d.state.agents[w].acked_seq >= a.seq)

                assert wait_until(acked, 30, 0.0005)
                out.append(time.perf_counter() - t0)
                c.cancel_job(jid)  # back to n_jobs - 1
                assert wait_until(lambda: d.state.planning_seq == 0
                                  and d.state.plan_summary.get("jobs") == n_jobs - 1, 30)
    finally:
        for a in agents:
            a.stop()
        d.stop()
    return out


def submissions_per_s(n: int, n_clients: int = 4) -> float:
    """Accepted submissions per second from ``n_clients`` concurrent clients (replies counted)."""
    d = Daemon(_cfg(8, coalesce_s=0.5)).start()
    try:
        jobs = [layer_chain_job(f"s{i}", f"h{i % 8}", f"h{(i + 1) % 8}").to_dict() for i in range(n)]
        per = [jobs[k::n_clients] for k in range(n_clients)]
        barrier = threading.Barrier(n_clients + 1)
        done = []

        def run(batch):
            with Client(d.job_endpoint) as c:
                barrier.wait()
                for j in batch:
                    c.submit_job(j)
                done.append(len(batch))

        ts = [threading.Thread(target=run, args=(b,)) for b in per]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
        assert sum(done) == n
        return n / dt
    finally:
        d.stop()


def fanout(n_agents: int, repeats: int) -> list[float]:
    """Seconds from the daemon installing a plan to the last of ``n_agents`` agents receiving it."""
    d = Daemon(_cfg(n_agents)).start()
    ctx = zmq.Context()
    socks = []
    out = []
    try:
        poller = zmq.Poller()
        for i in range(n_agents):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.agent_endpoint)
            s.send(encode_request(MsgType.REGISTER, {"host": f"h{i}"}))
            poller.register(s, zmq.POLLIN)
            socks.append(s)
        assert wait_until(lambda: len(d.state.agents) == n_agents, 30)
        with Client(d.job_endpoint) as c:
            for r in range(repeats + 1):
                c.submit_job(layer_chain_job(f"f{r}", "h0", "h1"))
                got: dict[int, float] = {}
                want = r + 1
                deadline = time.monotonic() + 30
                while len(got) < n_agents and time.monotonic() < deadline:
                    for s, _ in poller.poll(100):
                        while True:
                            try:
                                m = decode_any(s.recv(zmq.NOBLOCK))
                            except zmq.Again:
                                break
                            if getattr(m, "type", None) == MsgType.SCHEDULE and m.body["seq"] >= want:
                                got.setdefault(id(s), time.time())
                                s.send(encode_request(MsgType.ACK, {"host": "h0", "seq": m.body["seq"]}))
                assert len(got) == n_agents
                planned_at = d.state.t0_wall_s + d.state.plan_summary["planned_at_s"]
                if r:  # the first round warms up connections
                    out.append(max(got.values()) - planned_at)
                c.job_finished(f"f{r}")
                wait_until(lambda: d.state.planning_seq == 0, 10)
                want = d.state.schedule_seq
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
        d.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    ap.add_argument("--repeats", type=int, default=30, help="latency probes (default 30)")
    ap.add_argument("--hosts", type=int, default=100, help="hosts for the 70-job latency run")
    args = ap.parse_args(argv)
    lat = submit_to_ack(70, args.repeats, args.hosts)
    rates = [submissions_per_s(2000) for _ in range(3)]
    f100 = fanout(100, 5)
    f1000 = fanout(1000, 5)
    out = {
        "submit_to_ack_p50_s": float(np.percentile(lat, 50)),
        "submit_to_ack_p99_s": float(np.percentile(lat, 99)),
        "submissions_per_s": statistics.median(rates),
        "fanout_100_s": statistics.median(f100),
        "fanout_1000_s": statistics.median(f1000),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            goal = GOALS.get(k)
            print(f"{k:<22} {v:10.4f}" + (f"   goal {goal}" if goal else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
