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

# 1000 agents in one process could not keep heartbeating (30 s timeout) while each full
# re-solve pushed all of them a body on this 2-core machine: they went down by the
# hundred, each agent_down triggered another full re-solve, and the run never settled
AGENTS_PER_PROCESS = 250
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
        ok = wait_until(lambda: all(a.registered.is_set() for a in agents), 30 + len(names) / 10)
        conn.send(ok)
        conn.recv()
    finally:
        for a in agents:
            a.stop()


class _Agents:
    """One agent per host, in this process (threads) or, as on a cluster, in child
    processes of at most ``AGENTS_PER_PROCESS`` agents each."""

    def __init__(self, names: list[str], endpoint: str, in_process: bool) -> None:
        self.local: list[Agent] = []
        self.procs: list = []
        self.conns: list = []
        if in_process:
            self.local = [Agent(h, endpoint, local_namespace=f"b{id(self)}").start() for h in names]
            assert wait_until(lambda: all(a.registered.is_set() for a in self.local), 30)
            return
        ctx = mp.get_context("spawn")
        for k in range(0, len(names), AGENTS_PER_PROCESS):
            conn, theirs = ctx.Pipe()
            p = ctx.Process(target=_agents_main, args=(names[k:k + AGENTS_PER_PROCESS], endpoint, theirs),
                            daemon=True)
            p.start()
            self.procs.append(p)
            self.conns.append(conn)
        for conn in self.conns:
            assert conn.poll(60 + len(names) / 10) and conn.recv(), "agents did not register"

    def stop(self) -> None:
        for a in self.local:
            a.stop()
        for conn in self.conns:
            conn.send("stop")
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()


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
                              and st.dirty_since == float("inf"), 60 + n_jobs * 0.2), (
                st.plan_summary, st.planning_seq, st.reasons, st.dirty_since, st.plans_by_mode)
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
    # a context holds 1023 sockets by default: 2500 receivers failed with "Too many open files"
    ctx.set(zmq.MAX_SOCKETS, len(hosts) + 16)
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
    # the receivers are bare sockets that never heartbeat: at 10,000 they take longer to
    # register than the 30 s timeout, and all went down before the first round
    d = _start(_cfg(n_agents, planning="full").with_(heartbeat_timeout_s=3600.0))
    ctx = None
    procs: list = []
    conns: list = []
    socks: list = []
    names = [f"h{i}" for i in range(n_agents)]
    from_plan, from_install = [], []
    try:
        if agents_in_process:
            ctx = zmq.Context()
            ctx.set(zmq.MAX_SOCKETS, n_agents + 16)
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

        assert wait_until(lambda: len(d.state.agents) == n_agents, 30 + n_agents / 100), len(d.state.agents)
        st = d.state
        with Client(d.job_endpoint, timeout_s=60.0) as c:
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


def joint_resolve(n_jobs: int, n_hosts: int, repeats: int, seed: int = 0) -> tuple[list[float], dict]:
    """Seconds of full joint re-solves of ``n_jobs`` VGG16 jobs on ``n_hosts`` hosts (the
    planner's ``solve_s``, building and packing the bodies included), each after one job
    left and another arrived; and the load's figures (time to submit, RSS).

    Full planning, no agents (a plan's cost does not depend on them); the first plan
    of all jobs is not counted.
    """
    import resource

    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(n_hosts)]
    d = _start(_cfg(n_hosts, planning="full", coalesce_s=2.0))
    st = d.state
    out: list[float] = []
    info: dict = {}
    try:
        with Client(d.job_endpoint, timeout_s=60.0) as c:
            t0 = time.perf_counter()
            for j in range(n_jobs):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                c.submit_job(layer_chain_job(f"bg{j}", names[ps], names[wk]))
            info["submit_s"] = time.perf_counter() - t0
            assert wait_until(lambda: st.plan_summary.get("jobs") == n_jobs and st.planning_seq == 0
                              and not st.reasons, 600, 0.05), st.plan_summary
            info["first_plan_s"] = st.plan_summary.get("solve_s")
            for r in range(repeats):
                seq = st.schedule_seq
                c.cancel_job(f"bg{r}")
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                c.submit_job(layer_chain_job(f"new{r}", names[ps], names[wk]))
                assert wait_until(lambda seq=seq: st.schedule_seq > seq and st.planning_seq == 0
                                  and not st.reasons, 600, 0.01)
                out.append(st.plan_summary["solve_s"])
                print(f"joint re-solve {r + 1}/{repeats}: {n_jobs} jobs, {n_hosts} hosts: "
                      f"{out[-1]:.3f} s ({st.plan_summary.get('flows')} flows)", file=sys.stderr)
        info["rss_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        info["planner_rss_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    finally:
        d.stop()
    return out, info


KEYS = ("submit_to_ack_p50_s", "submit_to_ack_p99_s", "submissions_per_s", "fanout_100_s",
        "fanout_1000_s", "fanout_1000_from_install_s")
# issue 17's daemon at scale (--scale): 1000 hosts, 1000 jobs, fan-out to 10,000 agents
SCALE_KEYS = ("scale_submit_to_ack_p50_s", "scale_submit_to_ack_p99_s", "scale_joint_resolve_s",
              "scale_fanout_s", "scale_fanout_from_install_s", "scale_rss_peak_mib",
              "scale_planner_rss_peak_mib")


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
    ap.add_argument("--only", choices=("latency", "rate", "fanout", "scale"), default=None,
                    help="run one measurement only (the others print null)")
    ap.add_argument("--scale", action="store_true",
                    help="also issue 17's daemon at scale: --scale-jobs jobs on --scale-hosts hosts "
                         "(submit to ack, joint re-solve, peak RSS) and fan-out to --scale-agents agents")
    ap.add_argument("--scale-jobs", type=int, default=1000)
    ap.add_argument("--scale-hosts", type=int, default=1000)
    ap.add_argument("--scale-agents", type=int, default=10_000)
    ap.add_argument("--scale-repeats", type=int, default=5)
    ap.add_argument("--scale-parts", default="latency,resolve,fanout",
                    help="which scale measurements (comma-separated: latency, resolve, fanout)")
    args = ap.parse_args(argv)
    if args.only == "scale":
        args.scale = True
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
        if args.scale:
            out |= _scale(args, k)
        runs.append(out)
        if args.rounds > 1:
            print(json.dumps(out), file=sys.stderr)
    keys = KEYS + (SCALE_KEYS if args.scale else ())
    out = {key: (statistics.median(r[key] for r in runs) if runs[0].get(key) is not None else None)
           for key in keys}
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            goal = GOALS.get(k)
            shown = "       n/a" if v is None else f"{v:10.4f}"
            print(f"{k:<28} {shown}" + (f"   goal {goal}" if goal else ""))
    return 0


def _scale(args: argparse.Namespace, seed: int) -> dict:
    """Issue 17's daemon-at-scale figures (null where not measured)."""
    import resource

    out: dict = dict.fromkeys(SCALE_KEYS)
    parts = set(args.scale_parts.split(","))
    if "latency" in parts:
        lat = submit_to_ack(args.scale_jobs, args.scale_repeats, args.scale_hosts, seed=seed,
                            agents_in_process=args.agents_in_process)
        out["scale_submit_to_ack_p50_s"] = float(np.percentile(lat, 50))
        out["scale_submit_to_ack_p99_s"] = float(np.percentile(lat, 99))
        print(f"scale: submit to ack at {args.scale_jobs} jobs, {args.scale_hosts} hosts: "
              f"{[round(x, 4) for x in lat]}", file=sys.stderr)
    if "resolve" in parts:
        res, info = joint_resolve(args.scale_jobs, args.scale_hosts, args.scale_repeats, seed)
        out["scale_joint_resolve_s"] = statistics.median(res)
        print(f"scale: joint re-solves {[round(x, 3) for x in res]}; {info}", file=sys.stderr)
    if "fanout" in parts:
        f, f_inst = fanout(args.scale_agents, args.scale_repeats, args.agents_in_process,
                           max(args.receivers, args.scale_agents // 2500))
        out["scale_fanout_s"] = statistics.median(f)
        out["scale_fanout_from_install_s"] = statistics.median(f_inst)
        print(f"scale: fan-out to {args.scale_agents}: {[round(x, 3) for x in f]}", file=sys.stderr)
    out["scale_rss_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["scale_planner_rss_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return out


if __name__ == "__main__":
    sys.exit(main())
