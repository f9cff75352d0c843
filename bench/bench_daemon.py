"""Daemon benchmarks: submit-to-ack latency at 70 VGG16 jobs, submissions per second, schedule fan-out."""

# One module although past 500 lines: its four measurements (submit to ack, submissions
# per second, fan-out, the daemon at scale) drive the same harness -- a daemon thread,
# bare acking or receiving agent sockets in child processes, the plan book's sequence
# numbers as the clock of a round -- and print into the one --json line; split, each
# would import the harness from the others.

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import select
import statistics
import sys
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
import zmq

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.dag.model import Cluster, Compute, Job, Transfer
from jitsched.protocol import MsgType, decode_any, encode_request
from jitsched.workloads.synth import layer_chain_job

if TYPE_CHECKING:
    from jitsched.config import DaemonConfig
    from jitsched.daemon import Daemon

# 1000 agents in one process could not keep heartbeating (30 s timeout) while each full
# re-solve pushed all of them a body on this 2-core machine: they went down by the
# hundred, each agent_down triggered another full re-solve, and the run never settled
AGENTS_PER_PROCESS = 250
GOALS = {"submit_to_ack_p99_s": 0.050, "submissions_per_s": 500.0, "fanout_1000_s": 0.100}


def _cfg(n_hosts: int, **kw) -> DaemonConfig:
    from jitsched.config import DaemonConfig

    base = dict(cluster=Cluster.uniform(n_hosts), job_endpoint="tcp://127.0.0.1:*",
                agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=1.0, heartbeat_timeout_s=30.0,
                resend_s=0.5)
    return DaemonConfig(**(base | kw))


def _start(cfg: DaemonConfig) -> Daemon:
    """A daemon, warm: its planner process (if any) has started and takes plans."""
    from jitsched.daemon import Daemon
    from jitsched.daemon.server import wait_until

    d = Daemon(cfg).start()
    assert wait_until(lambda: d.planner is None or d.planner.started, 60)
    return d


def _acking_main(names: list[str], endpoint: str, conn) -> None:
    """Child process: a bare agent socket per host that acks every schedule as it comes,
    until the parent says stop (no heartbeats, no enforcement)."""
    ctx = zmq.Context()
    ctx.set(zmq.MAX_SOCKETS, len(names) + 16)
    socks = _open_receivers(ctx, names, endpoint)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    host = {s: h for s, h in zip(socks, names, strict=True)}
    poller.register(conn.fileno(), zmq.POLLIN)
    conn.send(True)
    try:
        while True:
            events = poller.poll(1000)
            for s, _ in events:
                if s == conn.fileno():
                    return
                while True:
                    try:
                        data = s.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    m = decode_any(data)
                    if getattr(m, "type", None) == MsgType.SCHEDULE:
                        s.send(encode_request(MsgType.ACK, {"host": host[s], "seq": m.body["seq"]}))
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def _agents_main(names: list[str], endpoint: str, conn) -> None:
    """Child process: one record-backend agent per host until the parent says stop."""
    from jitsched.daemon.server import wait_until

    agents = [Agent(h, endpoint, AgentOptions(backend="record"),
                    local_namespace=f"bench{id(conn)}").start() for h in names]
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

    def __init__(self, names: list[str], endpoint: str, in_process: bool, bare: int = 0) -> None:
        from jitsched.daemon.server import wait_until

        self.local: list[Agent] = []
        self.procs: list = []
        self.conns: list = []
        if bare:  # bare acking sockets (_acking_main) in ``bare`` processes
            target, per = _acking_main, -(-len(names) // bare)
        else:
            target, per = _agents_main, AGENTS_PER_PROCESS
        if in_process and not bare:
            self.local = [Agent(h, endpoint, AgentOptions(backend="record"),
                                local_namespace=f"b{id(self)}").start() for h in names]
            assert wait_until(lambda: all(a.registered.is_set() for a in self.local), 30)
            return
        ctx = mp.get_context("spawn")
        for k in range(0, len(names), per):
            conn, theirs = ctx.Pipe()
            p = ctx.Process(target=target, args=(names[k:k + per], endpoint, theirs), daemon=True)
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
                  agents_in_process: bool = False, bare: int = 0, policy: str | None = None
                  ) -> list[float]:
    """Seconds from submitting one more VGG16 job (``n_jobs - 1`` already planned) until
    the agents of its two hosts acked their current schedules, the sender's including it.

    Ack times are the daemon's (when it received them), so polling for completion
    does not add to the figure. Incremental planning pushes only the agents whose
    schedules change, here the parameter server's; full planning pushes every
    agent. With ``churn``, each probe stays and a jointly planned job leaves
    instead, so joint re-solves of all jobs run while later probes are planned.
    ``bare``: the agents are bare sockets acking each schedule as it comes, in
    that many processes (see :func:`_acking_main`), and the daemon never takes
    them for down. ``policy``: the daemon's (default: its default, jit, which
    admits an arrival by a ranked increment and ranks it in place by the joint
    re-solve that increment triggers).
    """
    from jitsched.daemon.server import wait_until

    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(n_hosts)]
    extra = {} if policy is None else {"policy": policy}
    if bare:
        # Agent threads, 250 to a process, missed their heartbeats at 1000 hosts on 2 cores
        # and flapped (each flip a full re-solve): bare sockets do not heartbeat at all
        extra["heartbeat_timeout_s"] = 3600.0
    d = _start(_cfg(n_hosts, planning=planning, **extra))
    agents = None
    out = []
    try:
        agents = _Agents(names, d.agent_endpoint, agents_in_process, bare)
        st = d.state
        with Client(d.job_endpoint) as c:
            for j in range(n_jobs - 1):
                ps, wk = rng.choice(n_hosts, 2, replace=False)
                c.submit_job(layer_chain_job(f"bg{j}", names[ps], names[wk]))
            # quiescent: every job planned, nothing in flight or due (--churn measures overlap),
            # and every agent acked its body: the last joint plan of the set-up burst (1000
            # bodies out, 1000 acks in) was still being sent when the first probe came, which
            # made that probe 0.09-0.12 s against 18-41 ms for the others (the daemon's log:
            # the probe's job_submitted 22 ms after its submit, 2 ms for the next)
            def quiet():
                return (st.plan_summary.get("jobs") == n_jobs - 1 and st.planning_seq == 0
                        and not st.reasons and st.dirty_since == float("inf")
                        and all(st.agents[h].acked_seq >= st.host_seq.get(h, 0) for h in names
                                if h in st.agents))

            assert wait_until(quiet, 60 + n_jobs * 0.2), (
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


def _receive_round(socks: list[zmq.Socket], after_seq: int, hosts: list[str],
                   targets: list[int] | None = None, conn=None, timeout_s: float = 60.0
                   ) -> dict[int, float]:
    """Receive until every socket of ``targets`` got a schedule newer than ``after_seq``; ack
    everything.

    Returns the wall-clock reception time per socket index. ``targets``: the
    sockets of the hosts sent a new body (None: all); with ``conn`` (a pipe
    also watched) they come from the parent once the plan is installed, so
    receiving starts before the plan exists. Each wake-up's batch is taken off
    the sockets first and decoded afterwards, and acks go out once the round
    is over: decoding and acking as messages come would make this one
    process, not the daemon, the bottleneck.
    """
    # epoll over the sockets' ZMQ_FDs, not zmq.Poller: a zmq poll rebuilds its item list
    # of every socket on each call, and with 2,500 sockets per receiver process and a few
    # messages per wake-up the four receivers of the 10,000-agent fan-out spent 2.1-2.6
    # CPU-s per round there, on the same two cores as the daemon whose fan-out they time.
    ep = select.epoll()
    fd_index = {}
    for k, s in enumerate(socks):
        fd = s.getsockopt(zmq.FD)
        fd_index[fd] = k
        ep.register(fd, select.EPOLLIN)
    pipe = conn.fileno() if conn is not None else None
    if pipe is not None:
        ep.register(pipe, select.EPOLLIN)
    got: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    inbox: list[tuple[int, float, int]] = []
    want = set(range(len(socks)) if targets is None else targets) if conn is None else None
    # a ZMQ_FD says "look again", not "a message": drain every socket once before the
    # first wait, as one may hold messages that arrived before the epoll existed
    ready = list(range(len(socks)))
    try:
        while time.monotonic() < deadline and (want is None or not want <= got.keys()):
            batch = []
            for k in ready:
                s = socks[k]
                while s.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    batch.append((k, time.time(), s.recv(zmq.NOBLOCK)))
            for k, t, data in batch:
                m = decode_any(data)
                if getattr(m, "type", None) != MsgType.SCHEDULE:
                    continue
                seq = m.body["seq"]
                inbox.append((k, t, seq))
                if seq > after_seq:
                    got.setdefault(k, t)
            ready = []
            for fd, _ in ep.poll(0.1):
                if fd == pipe:
                    want = set(conn.recv())
                else:
                    ready.append(fd_index[fd])
    finally:
        ep.close()
    for k, _, seq in inbox:
        socks[k].send(encode_request(MsgType.ACK, {"host": hosts[k], "seq": seq}))
    return got if want is None else {k: t for k, t in got.items() if k in want}


def _open_receivers(ctx: zmq.Context, names: list[str], endpoint: str) -> list[zmq.Socket]:
    """A registered bare agent socket per host name."""
    socks = []
    for h in names:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        s.send(encode_request(MsgType.REGISTER, {"host": h}))
        socks.append(s)
    return socks


def _await_registered(socks: list[zmq.Socket], names: list[str], timeout_s: float,
                      resend_s: float = 10.0) -> int:
    """Wait for the reply to each socket's registration, registering again those not
    answered within ``resend_s`` (a daemon busy registering thousands of agents on a
    loaded machine answered 9,773 of 10,000 within the bench's 130 s once). Returns the
    number of sockets still unanswered (0: all registered)."""
    waiting = set(range(len(socks)))
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    index = {s: k for k, s in enumerate(socks)}
    end = time.monotonic() + timeout_s
    again = time.monotonic() + resend_s
    while waiting and time.monotonic() < end:
        for s, _ in poller.poll(200):
            while True:
                try:
                    data = s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if getattr(decode_any(data), "type", None) != MsgType.SCHEDULE:
                    waiting.discard(index[s])
        if waiting and time.monotonic() >= again:
            for k in waiting:
                socks[k].send(encode_request(MsgType.REGISTER, {"host": names[k]}))
            again = time.monotonic() + resend_s
    return len(waiting)


def _receivers_main(hosts: range, endpoint: str, conn) -> None:
    """Child process: bare agent sockets of ``hosts``; for each ("after", seq) from the
    parent, then the list of its sockets sent a new body, reports the reception time of
    the first newer schedule on each of those and the CPU seconds the round took here."""
    ctx = zmq.Context()
    # a context holds 1023 sockets by default: 2500 receivers failed with "Too many open files"
    ctx.set(zmq.MAX_SOCKETS, len(hosts) + 16)
    names = [f"h{i}" for i in hosts]
    socks = _open_receivers(ctx, names, endpoint)
    missing = _await_registered(socks, names, 60 + len(names) / 20)
    conn.send("ready" if not missing else f"{missing} of {len(names)} sockets not registered")
    try:
        while True:
            msg = conn.recv()
            if msg == "stop":
                return
            cpu = time.process_time()  # this process's, its zmq I/O thread included
            got = _receive_round(socks, msg[1], names, conn=conn)
            conn.send((got, time.process_time() - cpu))
    finally:
        for s in socks:
            s.close(0)
        ctx.term()


def _one_transfer_job(jid: str, src: str, dst: str, nbytes: float = 50e6) -> Job:
    return Job(jid, (Compute("c0", src, 0.01), Compute("c1", dst, 0.01)),
               (Transfer("t", src, dst, nbytes),), (("c0", "t"), ("t", "c1")))


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def fanout(n_agents: int, repeats: int, agents_in_process: bool = False, receivers: int = 1,
           parts: tuple[str, ...] = ("changed", "all")) -> dict:
    """Seconds until the last agent sent a new schedule received it, per part.

    ``changed``: a job arrives on h0 -> h1 (and leaves) with every other host
    idle: full planning rebuilds every body (a new slot grid), the daemon sends
    only those of hosts that are not idle before and after (h0, h1).
    ``all``, the worst case: first ``n_agents // 2`` one-transfer jobs spread
    over every host (h2i -> h2i+1), then the same rounds: every host has a
    flow, so every re-solve sends every agent a body of its own.

    Returns, per part: ``from_plan`` (from the planner finishing the plan,
    building and packing the bodies included; the figure), ``from_install``,
    ``send`` (the daemon's send loop, the round's outbox scan and sends),
    ``after_send`` (from the send loop's end to the last reception: the
    daemon's zmq I/O thread, loopback TCP and the receivers), ``receivers_cpu``
    (CPU seconds of the receiver processes in the round, summed), ``hosts``
    (agents sent a body) and ``rounds_of_two_plans`` (rounds left out: two plans
    were installed in them, and the receivers timed the first one's bodies). The receiving sockets live in ``receivers`` child
    processes unless ``agents_in_process``.
    """
    from jitsched.config import ClientQuota
    from jitsched.daemon.server import wait_until

    # The receivers are bare sockets that never heartbeat: at 10,000 they take longer to
    # register than the 30 s timeout, and all went down before the first round. They ack
    # once a round is over (so that they are not the bottleneck), later than the 0.5 s
    # re-send: each round at 10,000 then sent every body twice.
    # jit-paper: its bodies carry planned rates on the slot grid, which every full re-solve
    # moves, so every busy host is sent a new body (the worst case this measures); the
    # default jit's rank-only bodies are kept where a host's flows and ranks did not change.
    # the "all" part submits n_agents // 2 jobs as one client: past the per-client default
    d = _start(_cfg(n_agents, planning="full", coalesce_s=0.2, policy="jit-paper",
                    per_client=ClientQuota(max_jobs=max(n_agents, 1000))).with_(
        heartbeat_timeout_s=3600.0, resend_s=60.0))
    ctx = None
    procs: list = []
    conns: list = []
    socks: list = []
    parts_of: list[range] = []
    names = [f"h{i}" for i in range(n_agents)]
    out: dict = {}
    st = d.state
    # the daemon's send loop, timed from the bench (the daemon is a thread of this process)
    sends: list[list] = []
    outbox, flush = st.outbox, d._flush_outbox

    def timed_outbox(now):
        got = outbox(now)
        if got:
            sends.append([time.time(), None, len(got)])
        return got

    def timed_flush(sock, now):
        k = len(sends)
        flush(sock, now)
        if len(sends) > k:
            sends[-1][1] = time.time()

    st.outbox, d._flush_outbox = timed_outbox, timed_flush
    try:
        if agents_in_process:
            ctx = zmq.Context()
            ctx.set(zmq.MAX_SOCKETS, n_agents + 16)
            socks = _open_receivers(ctx, names, d.agent_endpoint)
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
                parts_of.append(hosts)
            for conn in conns:
                assert conn.poll(180 + n_agents / 20), "a receiver process did not answer"
                said = conn.recv()
                assert said == "ready", (said, len(st.agents), {k: (c.refused, c.evicted, len(c.open))
                                                                  for k, c in d.conns.items()})
        assert wait_until(lambda: len(st.agents) == n_agents, 30 + n_agents / 100), len(st.agents)

        def plan_round(act) -> tuple[dict, float, list[int]]:
            """Run ``act``, wait for its plan; reception times of the agents sent a body."""
            before = st.schedule_seq
            for conn in conns:
                conn.send(("after", before))
            act()
            assert wait_until(lambda: st.schedule_seq > before and st.planning_seq == 0, 600, 0.002)
            targets = [i for i, h in enumerate(names) if st.host_seq.get(h, 0) > before]
            if agents_in_process:
                return _receive_round(socks, before, names, targets), 0.0, targets
            got, cpu = {}, 0.0
            for conn, hosts in zip(conns, parts_of, strict=True):
                conn.send([i - hosts.start for i in targets if i in hosts])
            for conn, hosts in zip(conns, parts_of, strict=True):
                assert conn.poll(120)
                theirs, c = conn.recv()
                got.update({hosts.start + k: t for k, t in theirs.items()})
                cpu += c
            assert len(got) == len(targets), (len(got), len(targets))
            return got, cpu, targets

        def measure(part: str) -> dict:
            res: dict = {k: [] for k in ("from_plan", "bodies", "from_install", "send", "after_send",
                                         "receivers_cpu", "hosts", "n_slots")}
            two_plans = 0
            with Client(d.job_endpoint, timeout_s=60.0) as c:
                # the first round warms up connections; a round that installed two plans is
                # left out and run again (3 * repeats + 2 rounds at most): its receivers timed
                # the first plan's bodies, its summary is the second's
                r = tries = 0
                while r <= repeats and tries <= 3 * repeats + 1:
                    jid = f"f{part}{tries}"
                    tries += 1
                    k, seq0 = len(sends), st.schedule_seq
                    got, cpu, targets = plan_round(lambda jid=jid: c.submit_job(_one_transfer_job(jid, "h0", "h1")))
                    summary = dict(st.plan_summary)
                    one_plan = st.schedule_seq == seq0 + 1
                    if not one_plan:
                        two_plans += 1
                    elif r and got:
                        last = max(got.values())
                        installed = st.t0_wall_s + summary["installed_at_s"]
                        sent = [x for x in sends[k:] if x[0] >= installed - 0.001 and x[1] is not None]
                        res["from_plan"].append(last - (st.t0_wall_s + summary["planned_at_s"]))
                        res["bodies"].append(summary["bodies_s"])
                        res["n_slots"].append(summary["n_slots"])
                        res["from_install"].append(last - installed)
                        if sent:
                            res["send"].append(sent[0][1] - sent[0][0])
                            res["after_send"].append(last - sent[0][1])
                        res["receivers_cpu"].append(cpu)
                        res["hosts"].append(len(targets))
                    r += one_plan
                    plan_round(lambda jid=jid: c.job_finished(jid))
            summary = {k: _median(v) for k, v in res.items()} | {"rounds_of_two_plans": two_plans}
            print(f"fan-out to {n_agents} ({part}): " + ", ".join(
                f"{k} {[round(x, 4) for x in v]}" for k, v in res.items()), file=sys.stderr)
            return summary

        if "changed" in parts:
            out["changed"] = measure("changed")
        if "all" in parts:
            with Client(d.job_endpoint, timeout_s=60.0) as c:
                for i in range(0, n_agents - 1, 2):
                    c.submit_job(_one_transfer_job(f"spread{i}", names[i], names[i + 1]))
            n_spread = n_agents // 2
            assert wait_until(lambda: st.plan_summary.get("jobs") == n_spread and st.planning_seq == 0
                              and not st.reasons, 600, 0.05), st.plan_summary
            # the spread plans' bodies wait in the receivers' sockets: the warm-up round
            # takes (and acks) them
            out["all"] = measure("all")
    finally:
        st.outbox, d._flush_outbox = outbox, flush
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
    return out


def joint_resolve(n_jobs: int, n_hosts: int, repeats: int, seed: int = 0, policy: str | None = None,
                  policy_options: dict | None = None) -> tuple[list[float], dict]:
    """Seconds of full joint re-solves of ``n_jobs`` VGG16 jobs on ``n_hosts`` hosts (the
    planner's ``solve_s``, building and packing the bodies included), each after one job
    left and another arrived; and the load's figures (time to submit, RSS).

    Full planning, no agents (a plan's cost does not depend on them); the first plan
    of all jobs is not counted. ``policy``, ``policy_options``: the daemon's (default:
    its default policy).
    """
    import resource

    from jitsched.config import ClientQuota
    from jitsched.daemon.server import wait_until

    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(n_hosts)]
    extra = {} if policy is None else {"policy": policy}
    # the submissions coalesce into one first plan (2 s at 1000 jobs), and a re-solve's
    # cancel and submit into one re-solve; each plan waits that long first
    coalesce_s = min(2.0, 0.25 + n_jobs / 500)
    d = _start(_cfg(n_hosts, planning="full", coalesce_s=coalesce_s, policy_options=dict(policy_options or {}),
                    per_client=ClientQuota(max_jobs=max(n_jobs + 1, 1000)), **extra))
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
        "fanout_1000_s", "fanout_1000_from_install_s", "fanout_1000_changed_s")
# the daemon at scale (--scale): 1000 hosts, 1000 jobs, fan-out to 10,000 agents.
# scale_fanout_* is the worst case, every agent sent a body of its own (every host has a
# flow); scale_fanout_changed_* a plan where all but two hosts stay idle, whose agents the
# daemon sends nothing (their bodies would only say "idle" again).
SCALE_KEYS = ("scale_submit_to_ack_p50_s", "scale_submit_to_ack_p99_s", "scale_joint_resolve_s",
              "scale_fanout_s", "scale_fanout_from_install_s", "scale_fanout_send_s",
              "scale_fanout_after_send_s", "scale_fanout_receivers_cpu_s", "scale_fanout_hosts",
              "scale_fanout_bodies_s", "scale_fanout_n_slots", "scale_fanout_changed_s", "scale_fanout_changed_hosts", "scale_rss_peak_mib",
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
                    help="also the daemon at scale: --scale-jobs jobs on --scale-hosts hosts "
                         "(submit to ack, joint re-solve, peak RSS) and fan-out to --scale-agents agents")
    ap.add_argument("--scale-jobs", type=int, default=1000)
    ap.add_argument("--scale-hosts", type=int, default=1000)
    ap.add_argument("--scale-agents", type=int, default=10_000)
    ap.add_argument("--scale-repeats", type=int, default=5)
    ap.add_argument("--scale-bare-agents", type=int, default=2, metavar="N",
                    help="scale submit to ack: the agents are bare sockets acking each schedule as it "
                         "comes, in N processes, and never taken for down (0: agent threads, 250 a "
                         "process, which flapped at 1000 hosts on 2 cores; default 2)")
    ap.add_argument("--scale-policy", default=None,
                    help="scale submit to ack: the daemon's policy (default jit: ranked increments, "
                         "each followed by a joint re-solve; jit-paper: LP increments)")
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
            # every agent sent a body of its own (the worst case), and the changed ones only
            out["fanout_100_s"] = fanout(100, 5, args.agents_in_process, args.receivers,
                                         ("all",))["all"]["from_plan"]
            f1000 = fanout(1000, 5, args.agents_in_process, args.receivers)
            out["fanout_1000_s"] = f1000["all"]["from_plan"]
            out["fanout_1000_from_install_s"] = f1000["all"]["from_install"]
            out["fanout_1000_changed_s"] = f1000["changed"]["from_plan"]
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
    """The daemon-at-scale figures (null where not measured)."""
    import resource

    out: dict = dict.fromkeys(SCALE_KEYS)
    parts = set(args.scale_parts.split(","))
    if "latency" in parts:
        lat = submit_to_ack(args.scale_jobs, args.scale_repeats, args.scale_hosts, seed=seed,
                            agents_in_process=args.agents_in_process, bare=args.scale_bare_agents,
                            policy=args.scale_policy)
        out["scale_submit_to_ack_p50_s"] = float(np.percentile(lat, 50))
        out["scale_submit_to_ack_p99_s"] = float(np.percentile(lat, 99))
        print(f"scale: submit to ack at {args.scale_jobs} jobs, {args.scale_hosts} hosts: "
              f"{[round(x, 4) for x in lat]}", file=sys.stderr)
    if "resolve" in parts:
        res, info = joint_resolve(args.scale_jobs, args.scale_hosts, args.scale_repeats, seed)
        out["scale_joint_resolve_s"] = statistics.median(res)
        print(f"scale: joint re-solves {[round(x, 3) for x in res]}; {info}", file=sys.stderr)
    if "fanout" in parts:
        f = fanout(args.scale_agents, args.scale_repeats, args.agents_in_process,
                   max(args.receivers, args.scale_agents // 2500))
        names = {"from_plan": "scale_fanout_s", "from_install": "scale_fanout_from_install_s",
                 "send": "scale_fanout_send_s", "after_send": "scale_fanout_after_send_s",
                 "receivers_cpu": "scale_fanout_receivers_cpu_s", "hosts": "scale_fanout_hosts",
                 "bodies": "scale_fanout_bodies_s", "n_slots": "scale_fanout_n_slots"}
        for key, value in f["all"].items():
            out[names[key]] = value
        out["scale_fanout_changed_s"] = f["changed"]["from_plan"]
        out["scale_fanout_changed_hosts"] = f["changed"]["hosts"]
        print(f"scale: fan-out to {args.scale_agents}: {f}", file=sys.stderr)
    out["scale_rss_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the largest of every child waited for so far: the daemons' planner processes, but after
    # the fan-out also its receiver processes (the key keeps its name for existing results)
    out["scale_planner_rss_peak_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return out


if __name__ == "__main__":
    sys.exit(main())
