"""Daemon benchmarks: submit-to-ack latency at 70 VGG16 jobs, submissions per second, schedule fan-out."""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
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


def _start(cfg: DaemonConfig) -> Daemon:
    """A daemon, warm: its planner process (if any) has started and takes plans."""
    d = Daemon(cfg).start()
    assert wait_until(lambda: d.planner is None or d.planner.started, 60)
    return d


def _agents_main(names: list[str], endpoint: str, conn) -> None:
    """Child process: one record-backend agent per host until the parent says stop."""
    agents = [Agent(h, endpoint, local_namespace=f"bench{id(conn)}").start() for h in names]
    try:
        ok = wait_until(lambda: all(a.registered.is_set() for a in agents), 30)
        conn.send(ok)
        conn.recv()
    finally:
        for a in agents:
            a.stop()


class _Agents:
    """One agent per host, in this process (threads) or, as on a cluster, in a child process."""

    def __init__(self, names: list[str], endpoint: str, in_process: bool) -> None:
        self.local: list[Agent] = []
        self.proc = None
        if in_process:
            self.local = [Agent(h, endpoint, local_namespace=f"b{id(self)}").start() for h in names]
            assert wait_until(lambda: all(a.registered.is_set() for a in self.local), 30)
            return
        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=_agents_main, args=(names, endpoint, theirs), daemon=True)
        self.proc.start()
        assert self.conn.poll(60) and self.conn.recv(), "agents did not register"

    def stop(self) -> None:
        for a in self.local:
            a.stop()
        if self.proc is not None:
            self.conn.send("stop")
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()


def submit_to_ack(n_jobs: int, repeats: int, n_hosts: int, seed: int = 0,
                  planning: str = "incremental", churn: bool = False,
                  agents_in_process: bool = False) -> list[float]:
    """Seconds from submitting one more VGG16 job (``n_jobs - 1`` already planned) until
    the agents of its two hosts acked their current schedules, the sender's including it.

    Ack times are the daemon's (when it received them), so polling for completion
    does not add to the figure. Incremental planning pushes only the agents whose
    schedules change, here the parameter server's; full planning pushes every
    agent. With ``churn``, each probe stays and a jointly planned job leaves
    instead, so joint re-solves of all jobs run while later probes are planned.
    """
    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(n_hosts)]
    d = _start(_cfg(n_hosts, planning=planning))
    agents = None
    out = []
    try:
        agents = _Agents(names, d.agent_endpoint, agents_in_process)
        st = d.state
        with Client(d.job_endpoint) as c:
            for j in range(n_jobs - 1):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                c.submit_job(layer_chain_job(f"bg{j}", names[ps], names[wk]))
            # quiescent: every job planned, nothing in flight or due (--churn measures overlap)
            assert wait_until(lambda: st.plan_summary.get("jobs") == n_jobs - 1
                              and st.planning_seq == 0 and not st.reasons
                              and st.dirty_since == float("inf"), 60)
            for r in range(repeats):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                jid = f"probe{r}"
                t0 = time.time()
                c.submit_job(layer_chain_job(jid, names[ps], names[wk]))
                p, w = names[ps], names[wk]

                def acked(p=p, w=w, jid=jid):
                    body = st.host_body(p)
                    return (st.agents[p].acked_seq >= body["seq"] > 0
                            and any(f["flow"].startswith(jid + "/") for f in body["flows"])
                            and st.agents[w].acked_seq >= st.host_seq.get(w, 0))

                assert wait_until(acked, 30, 0.002)
                last = max(st.agents[p].acked_at_s, st.agents[w].acked_at_s)
                out.append(st.t0_wall_s + last - t0)
                if churn:  # a jointly planned job leaves instead: back to n_jobs - 1
                    c.cancel_job(f"bg{r % (n_jobs - 1)}" if r < n_jobs - 1 else f"probe{r - n_jobs + 1}")
                    continue
                c.cancel_job(jid)  # back to n_jobs - 1
                assert wait_until(lambda: st.planning_seq == 0
                                  and st.plan_summary.get("jobs") == n_jobs - 1, 30)
    finally:
        if agents is not None:
            agents.stop()
        d.stop()
    return out


def submissions_per_s(n: int, n_clients: int = 4) -> float:
    """Accepted submissions per second from ``n_clients`` concurrent clients (replies counted)."""
    d = _start(_cfg(8, coalesce_s=0.5))
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


def _receive_round(socks: list[zmq.Socket], poller: zmq.Poller, after_seq: int,
                   hosts: list[str], timeout_s: float = 30.0) -> dict[int, float]:
    """Receive until every socket got a schedule newer than ``after_seq``; ack everything.

    Returns the wall-clock reception time per socket index. Each poll's batch is
    taken off the sockets first and decoded afterwards, and acks go out once the
    round is over: decoding and acking as messages come would make this one
    process, not the daemon, the bottleneck.
    """
    got: dict[int, float] = {}
    index = {s: k for k, s in enumerate(socks)}
    deadline = time.monotonic() + timeout_s
    inbox: list[tuple[int, float, int]] = []
    while len(got) < len(socks) and time.monotonic() < deadline:
        batch = []
        for s, _ in poller.poll(100):
            while True:
                try:
                    batch.append((index[s], time.time(), s.recv(zmq.NOBLOCK)))
                except zmq.Again:
                    break
        for k, t, data in batch:
            m = decode_any(data)
            if getattr(m, "type", None) != MsgType.SCHEDULE:
                continue
            seq = m.body["seq"]
            inbox.append((k, t, seq))
            if seq > after_seq:
                got.setdefault(k, t)
    for k, _, seq in inbox:
        socks[k].send(encode_request(MsgType.ACK, {"host": hosts[k], "seq": seq}))
    return got


def _open_receivers(ctx: zmq.Context, hosts: range, endpoint: str) -> tuple[list, zmq.Poller]:
    poller = zmq.Poller()
    socks = []
    for i in hosts:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send(encode_request(MsgType.REGISTER, {"host": f"h{i}"}))
        poller.register(s, zmq.POLLIN)
        socks.append(s)
    return socks, poller


def _receivers_main(hosts: range, endpoint: str, conn) -> None:
    """Child process: bare agent sockets of ``hosts``; for each ("after", seq) from the
    parent, reports the reception time of the first newer schedule on every socket."""
    ctx = zmq.Context()
    socks, poller = _open_receivers(ctx, hosts, endpoint)
    conn.send("ready")
    try:
        while True:
            msg = conn.recv()
            if msg == "stop":
                return
            conn.send(_receive_round(socks, poller, msg[1], [f"h{i}" for i in hosts]))
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def fanout(n_agents: int, repeats: int, agents_in_process: bool = False, receivers: int = 1
           ) -> tuple[list[float], list[float]]:
    """Seconds until the last of ``n_agents`` agents received a new plan.

    Measured from the planner finishing the plan (building and packing the
    agents' bodies included) and, second list, from the daemon installing it.
    Full planning: every plan has a new slot grid, so every agent gets a new
    schedule (the worst case; an incremental plan changes only the senders').
    The receiving sockets live in ``receivers`` child processes unless
    ``agents_in_process``.
    """
    d = _start(_cfg(n_agents, planning="full"))
    ctx = None
    procs: list = []
    conns: list = []
    socks: list = []
    names = [f"h{i}" for i in range(n_agents)]
    from_plan, from_install = [], []
    try:
        if agents_in_process:
            ctx = zmq.Context()
            socks, poller = _open_receivers(ctx, range(n_agents), d.agent_endpoint)
        else:
            mctx = mp.get_context("spawn")
            for part in np.array_split(np.arange(n_agents), receivers):
                conn, theirs = mctx.Pipe()
                hosts = range(int(part[0]), int(part[-1]) + 1)
                p = mctx.Process(target=_receivers_main, args=(hosts, d.agent_endpoint, theirs),
                                 daemon=True)
                p.start()
                procs.append(p)
                conns.append(conn)
            for conn in conns:
                assert conn.poll(60) and conn.recv() == "ready"

        def start_round(after):
            for conn in conns:
                conn.send(("after", after))

        def finish_round(after):
            if agents_in_process:
                return _receive_round(socks, poller, after, names)
            got: dict[int, float] = {}
            for conn in conns:
                assert conn.poll(60)
                got.update({(id(conn), k): t for k, t in conn.recv().items()})
            return got

        assert wait_until(lambda: len(d.state.agents) == n_agents, 30)
        st = d.state
        with Client(d.job_endpoint) as c:
            for r in range(repeats + 1):
                before = st.schedule_seq
                start_round(before)
                c.submit_job(layer_chain_job(f"f{r}", "h0", "h1"))
                got = finish_round(before)
                assert len(got) == n_agents
                summary = dict(st.plan_summary)
                if r:  # the first round warms up connections
                    last = max(got.values())
                    from_plan.append(last - (st.t0_wall_s + summary["planned_at_s"]))
                    from_install.append(last - (st.t0_wall_s + summary["installed_at_s"]))
                seq = st.schedule_seq
                c.job_finished(f"f{r}")
                assert wait_until(lambda seq=seq: st.schedule_seq > seq and st.planning_seq == 0, 30)
                start_round(seq)  # take (and ack) the job_finished plan too
                assert len(finish_round(seq)) == n_agents
    finally:
        for conn in conns:
            conn.send("stop")
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
        for s in socks:
            s.close(0)
        if ctx is not None:
            ctx.term()
        d.stop()
    return from_plan, from_install


KEYS = ("submit_to_ack_p50_s", "submit_to_ack_p99_s", "submissions_per_s", "fanout_100_s",
        "fanout_1000_s", "fanout_1000_from_install_s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    ap.add_argument("--repeats", type=int, default=30, help="latency probes (default 30)")
    ap.add_argument("--hosts", type=int, default=100, help="hosts for the 70-job latency run")
    ap.add_argument("--planning", choices=("incremental", "full"), default="incremental",
                    help="the daemon's planning mode for the latency run (default incremental)")
    ap.add_argument("--churn", action="store_true",
                    help="latency run: probes stay and planned jobs leave, so joint re-solves overlap them")
    ap.add_argument("--agents-in-process", action="store_true",
                    help="run agents and fan-out receivers as threads of the daemon's process "
                         "(they then compete with it for the GIL)")
    ap.add_argument("--receivers", type=int, default=1,
                    help="fan-out: child processes sharing the receiving sockets (default 1)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat every measurement this often and report medians (default 1)")
    ap.add_argument("--only", choices=("latency", "rate", "fanout"), default=None,
                    help="run one measurement only (the others print null)")
    args = ap.parse_args(argv)
    runs = []
    for k in range(args.rounds):
        out = dict.fromkeys(KEYS)
        if args.only in (None, "latency"):
            lat = submit_to_ack(70, args.repeats, args.hosts, seed=k, planning=args.planning,
                                churn=args.churn, agents_in_process=args.agents_in_process)
            out["submit_to_ack_p50_s"] = float(np.percentile(lat, 50))
            out["submit_to_ack_p99_s"] = float(np.percentile(lat, 99))
        if args.only in (None, "rate"):
            out["submissions_per_s"] = statistics.median(submissions_per_s(2000) for _ in range(3))
        if args.only in (None, "fanout"):
            out["fanout_100_s"] = statistics.median(
                fanout(100, 5, args.agents_in_process, args.receivers)[0])
            f1000, f1000_inst = fanout(1000, 5, args.agents_in_process, args.receivers)
            out["fanout_1000_s"] = statistics.median(f1000)
            out["fanout_1000_from_install_s"] = statistics.median(f1000_inst)
        runs.append(out)
        if args.rounds > 1:
            print(json.dumps(out), file=sys.stderr)
    out = {key: (statistics.median(r[key] for r in runs) if runs[0][key] is not None else None)
           for key in KEYS}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            goal = GOALS.get(k)
            shown = "       n/a" if v is None else f"{v:10.4f}"
            print(f"{k:<28} {shown}" + (f"   goal {goal}" if goal else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
