"""Tests of the daemon's incremental planning on loopback sockets: pushes, removals, joint re-solves, rebases."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import numpy as np
import pytest
import zmq

from jitsched.client import Client
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Compute, Job, Transfer
from jitsched.policies.jit import JitPolicy
from jitsched.protocol import MsgType, decode_request, encode_request
from jitsched.workloads.synth import layer_chain_job
from tests.test_daemon import HOSTS, config, system

LINE = 1e9 / 8


def settled(d) -> bool:
    """No plan in flight and every agent holds (and acked) its current schedule."""
    st = d.state
    return st.planning_seq == 0 and not st.pending and not st.removals and all(
        a.acked_seq >= st.host_seq.get(h, 0) for h, a in st.agents.items())


def flows_of(body: dict, job: str) -> list[dict]:
    return [f for f in body["flows"] if f["flow"].startswith(job + "/")]


def used_per_slot(body: dict) -> np.ndarray:
    n = max([f["start_slot"] + len(f["rates_Bps"]) for f in body["flows"]] + [len(body["leftover_Bps"])])
    used = np.zeros(n)
    for f in body["flows"]:
        used[f["start_slot"]:f["start_slot"] + len(f["rates_Bps"])] += f["rates_Bps"]
    return used


def record_adoptions(d, results: list | None = None) -> list[tuple[str, tuple, frozenset]]:
    """Wrap the state's adoption of plans: (mode, reasons, jobs with flows) of each
    (and the results themselves into ``results``)."""
    seen = []
    adopt = d.state._adopt

    def spy(res, now):
        jobs = frozenset(f[0] for f in res.schedule.flows) if res.schedule else frozenset()
        seen.append((res.mode, res.reasons, jobs))
        if results is not None:
            results.append(res)
        adopt(res, now)

    d.state._adopt = spy
    return seen


def test_arrival_pushes_only_the_agents_whose_schedule_changed():
    with system(joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        # the first plan sets the slot grid: every agent gets it
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        first = d.state.schedule_seq
        assert all(a.seq == first for a in agents.values())
        c.submit_job(layer_chain_job("b", "h2", "h3"))
        assert wait_until(lambda: d.state.schedule_seq > first and settled(d), 5.0)
        second = d.state.schedule_seq
        summary = d.state.plan_summary
        assert summary["mode"] == "incremental" and summary["reasons"] == ["arrival"], (summary["reasons"], d.state.schedule.late)
        # b's sender and its receiver (whose ingress side changed), nobody else
        assert summary["hosts_changed"] == 2 and summary["jobs"] == 2 and summary["late"] == 0
        assert agents["h2"].seq == second and len(flows_of(agents["h2"].schedule, "b")) == 13
        assert agents["h3"].seq == second and len(agents["h3"].schedule["in_flows"]) == 13
        assert agents["h3"].schedule["in_flows"][0]["src"] == "h2"
        assert [agents[h].seq for h in ("h0", "h1")] == [first] * 2
        assert d.state.plans_by_mode == {"full": 0, "incremental": 2}


def test_added_job_fits_in_what_the_frozen_plan_leaves():
    with system(joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        results = []
        record_adoptions(d, results)
        alone = d.state.schedule
        c.submit_job(layer_chain_job("b", "h0", "h2"))
        assert wait_until(lambda: len(flows_of(agents["h0"].schedule, "b")) == 13 and settled(d), 5.0)
        # the incremental step kept a's allocations as they were; b took what they left
        inc = results[0]
        assert inc.mode == "incremental" and inc.added == ("b",)
        assert inc.schedule.epoch_s == alone.epoch_s
        a_flows = [f for f in inc.schedule.flows if f[0] == "a"]
        assert [(f[1], f[4], list(f[5])) for f in a_flows] == [
            (f[1], f[4], list(f[5])) for f in alone.flows]
        # whatever the agent holds now (a later joint re-solve, if b was planned late):
        # within the line rate, and the leftover is what the flows leave
        body = agents["h0"].schedule
        used = used_per_slot(body)
        assert np.all(used <= LINE * (1 + 1e-6))
        left = np.asarray(body["leftover_Bps"])
        np.testing.assert_allclose(left, np.maximum(LINE - used[:len(left)], 0), atol=1.0)


def test_cancel_takes_the_flows_out_without_a_solve():
    with system(joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        alone = agents["h0"].schedule
        c.submit_job(layer_chain_job("b", "h0", "h2"))
        assert wait_until(lambda: flows_of(agents["h0"].schedule, "b") and settled(d), 5.0)
        c.cancel_job("b")
        assert wait_until(lambda: not flows_of(agents["h0"].schedule, "b") and settled(d), 5.0)
        body = agents["h0"].schedule
        assert d.state.plan_summary["reasons"] == ["removal"]
        assert d.state.plan_summary["jobs"] == 1
        assert body["flows"] == alone["flows"]
        n = len(alone["leftover_Bps"])
        np.testing.assert_allclose(body["leftover_Bps"][:n], alone["leftover_Bps"], atol=1.0)
        assert d.state.plans_by_mode["full"] == 0  # no LP for a removal, and no joint re-solve:
        assert d.state.dirty_since == float("inf")  # a and its frozen plan are a joint plan still


def test_joint_replan_follows_incremental_additions():
    with system(joint_replan_s=0.3) as (d, agents), Client(d.job_endpoint) as c:
        seen = record_adoptions(d)
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        # a alone on an empty schedule: that plan is a joint plan already
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        assert d.state.dirty_since == float("inf")
        c.submit_job(layer_chain_job("b", "h0", "h2"))
        assert wait_until(lambda: any(m == "full" for m, _, _ in seen) and settled(d), 10.0)
        mode, reasons, jobs = next(x for x in seen if x[0] == "full")
        assert "joint" in reasons and jobs == {"a", "b"}
        # a full re-solve has a new slot grid: every agent with a flow gets it; idle h3
        # keeps the idle body it holds (test_daemon_idle.py)
        seq = d.state.schedule_seq
        assert all(agents[h].seq == seq for h in ("h0", "h1", "h2"))
        assert agents["h3"].seq == d.state.host_seq["h3"] < seq
        assert d.state.dirty_since == float("inf")


class SlowFullJit(JitPolicy):
    """The paper's JIT formulation (LP, fair leftover) with a full re-solve that takes at least ``delay_s``."""

    delay_s = 1.0

    def schedule(self, view):
        time.sleep(self.delay_s)
        return super().schedule(view)


def slow_full_jit(cfg, delay_s: float) -> SlowFullJit:
    """The daemon's JIT policy for ``cfg``, its full re-solves taking at least ``delay_s``."""
    from jitsched.daemon.server import create_policy

    base = create_policy(cfg)
    pol = SlowFullJit(base.options)
    pol.delay_s = delay_s
    pol.reset(cfg.cluster)
    return pol


def test_job_added_during_a_full_solve_is_rebased_never_dropped():
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.daemon import Daemon

    cfg = config(replan_period_s=5.0, joint_replan_s=60.0, planner_process=False)
    d = Daemon(cfg, policy=slow_full_jit(cfg, 1.0))
    agents = []
    try:
        d.start()
        agents = [Agent(h, d.agent_endpoint, AgentOptions(backend="record"),
                        local_namespace=f"rb{id(d)}").start() for h in HOSTS]
        seen = record_adoptions(d)
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            # the periodic re-solve starts with the first active job and takes 1 s
            assert wait_until(lambda: d.state.inflight["full"] != 0, 5.0)
            c.submit_job(layer_chain_job("b", "h2", "h3"))
            assert wait_until(lambda: any("b" in jobs for _, _, jobs in seen), 5.0)
            assert d.state.inflight["full"] != 0  # b went in while the full solve ran
            assert wait_until(lambda: d.state.plans_by_mode["full"] >= 1 and settled(d), 10.0)
        first_b = next(k for k, (_, _, jobs) in enumerate(seen) if "b" in jobs)
        assert all("b" in jobs for _, _, jobs in seen[first_b:])  # never dropped
        modes = [(m, r) for m, r, _ in seen[first_b + 1:]]
        assert ("incremental", ("rebase",)) in modes  # the full plan arrived with b on top
        assert d.state.covered == {"a", "b"}
    finally:
        for a in agents:
            a.stop()
        d.stop()


def test_full_result_overtaken_by_a_removal_goes_out_under_a_newer_seq():
    # A full re-solve (a and b) is in flight when b is cancelled: the removal's plan,
    # requested after it, is adopted first. The full result must go out under a seq
    # above the removal's, or the agents of b's hosts, holding the newer seq, never
    # install it (nor ack it), and their acks of the removal's body are refused.
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.daemon import Daemon

    cfg = config(replan_period_s=5.0, joint_replan_s=60.0, planner_process=False)
    d = Daemon(cfg, policy=slow_full_jit(cfg, 1.0))
    agents = {}
    try:
        d.start()
        agents = {h: Agent(h, d.agent_endpoint, AgentOptions(backend="record"),
                           local_namespace=f"ov{id(d)}").start() for h in HOSTS}
        results = []
        seen = record_adoptions(d, results)
        sent = {h: [] for h in HOSTS}
        publish = d.state.agent_table.publish

        def spy(frames, seq):
            for h in frames:
                sent[h].append(seq)
            return publish(frames, seq)

        d.state.agent_table.publish = spy
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
            c.submit_job(layer_chain_job("b", "h0", "h2"))
            assert wait_until(lambda: flows_of(agents["h0"].schedule, "b") and settled(d), 5.0)
            assert wait_until(lambda: d.state.inflight["full"] != 0, 8.0)
            c.cancel_job("b")
            assert wait_until(lambda: d.state.plans_by_mode["full"] >= 2 and settled(d), 10.0)
        # the removal was adopted before the full result that still had b
        late = seen.index(("full", ("tick",), frozenset({"a", "b"})))
        assert ("incremental", ("removal",), frozenset({"a"})) in seen[:late]
        for h in HOSTS:
            assert sent[h] == sorted(set(sent[h])), (h, sent[h])  # each host's seqs rise
            assert agents[h].seq == d.state.host_seq[h]
        assert all(results[k].seq < results[k + 1].seq for k in range(len(results) - 1))
        counts = d.state.agent_table.counts
        assert counts["acks_refused"] == 0 and counts["schedule_resends_stopped"] == 0
        assert not flows_of(agents["h0"].schedule, "b")  # b left again after the late result
    finally:
        for a in agents.values():
            a.stop()
        d.stop()


def test_big_arrival_batch_goes_to_a_joint_resolve():
    # 12 VGG16 jobs arrive within the coalescing window: 384 transfers, more than the
    # 256 an incremental plan takes; a joint re-solve (planner process) plans them all
    with system(coalesce_s=0.3, max_increment_transfers=256) as (d, _), Client(d.job_endpoint) as c:
        seen = record_adoptions(d)
        for k in range(12):
            c.submit_job(layer_chain_job(f"j{k}", HOSTS[k % 4], HOSTS[(k + 1) % 4]))
        assert wait_until(lambda: d.state.plan_summary.get("jobs") == 12 and settled(d), 20.0)
        assert seen[0][:2] == ("full", ("arrival",)) and len(seen[0][2]) == 12
        assert d.state.plans_by_mode["incremental"] == 0 and not d.state.bulk
        # one more job alone is planned incrementally again
        c.submit_job(layer_chain_job("one", "h0", "h2"))
        assert wait_until(lambda: "one" in d.state.covered and settled(d), 5.0)
        assert d.state.plans_by_mode["incremental"] == 1


def one_transfer(jid: str, size: float, src: str = "h0", dst: str = "h1") -> Job:
    return Job(jid, (Compute("c", dst, 0.01),), (Transfer("t", src, dst, size),),
               (("t", "c"),), 0.0)


def test_planned_lat_miss_of_an_increment_triggers_a_joint_resolve():
    with system(hosts=("h0", "h1"), joint_replan_s=60.0) as (d, _), Client(d.job_endpoint) as c:
        seen = record_adoptions(d)
        # a keeps h0's port busy for 2 s (due at 2 s); b, due at ~0.2 s, cannot fit around it
        c.submit_job(one_transfer("a", 2 * LINE))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        n = len(seen)
        c.submit_job(one_transfer("b", 0.1 * LINE))
        assert wait_until(lambda: any(m == "full" for m, _, _ in seen[n:]) and settled(d), 10.0)
        assert seen[n][0] == "incremental" and "b" in seen[n][2]
        mode, reasons, jobs = next(x for x in seen[n:] if x[0] == "full")
        assert "late" in reasons and jobs == {"a", "b"}


def test_default_policy_admits_arrivals_last_then_reorders_jointly():
    # the default jit ranks jobs smallest-first; an arrival is admitted by an increment,
    # ranked after every job already ranked, and the joint re-solve it triggers at once
    # puts it first (joint_replan_s is long: only the "order" trigger can be the cause)
    with system(policy="jit", joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        results: list = []
        seen = record_adoptions(d, results)
        c.submit_job(layer_chain_job("big", "h1", "h2"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        n = len(seen)
        c.submit_job(one_transfer("small", 0.01 * LINE, src="h1", dst="h3"))
        assert wait_until(lambda: any(m == "full" for m, _, _ in seen[n:]) and settled(d), 10.0)
        inc = results[n]
        assert inc.mode == "incremental" and inc.added == ("small",)
        big_ranks = {v for (j, _), v in inc.schedule.prio.items() if j == "big"}
        assert inc.schedule.prio[("small", "t")] == max(big_ranks) + 1 == 1
        full = next(r for r in results[n:] if r.mode == "full")
        assert "order" in full.reasons
        assert full.schedule.prio[("small", "t")] == 0 and {
            v for (j, _), v in full.schedule.prio.items() if j == "big"} == {1}
        body = agents["h1"].schedule
        assert {f["prio"] for f in flows_of(body, "small")} == {0}


def test_policy_without_increments_falls_back_to_full_plans():
    with system(policy="fifo") as (d, _), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: d.state.plans_by_mode["full"] >= 1 and settled(d), 5.0)
        assert d.state.incremental_ok is False
        c.submit_job(layer_chain_job("b", "h0", "h2"))
        assert wait_until(lambda: d.state.plan_summary.get("jobs") == 2, 5.0)
        assert d.state.plan_summary["mode"] == "full"
        # no slot schedule from this policy: agents get empty ones on the configured grid
        body = d.state.host_body("h0")
        assert body["flows"] == [] and body["slot_s"] == d.config.slot_s > 0


def test_tictac_ranks_reach_the_agents_first_come_first_served():
    # no increments either: every arrival is a full re-solve, ranks and no rates
    with system(policy="tictac") as (d, _), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: d.state.plans_by_mode["full"] >= 1 and settled(d), 5.0)
        c.submit_job(layer_chain_job("b", "h0", "h2"))
        assert wait_until(lambda: d.state.plan_summary.get("jobs") == 2 and settled(d), 5.0)
        assert d.state.plans_by_mode["incremental"] == 0
        flows = d.state.host_body("h0")["flows"]
        assert flows and all(f["rates_Bps"] == [] for f in flows)
        ranks = {job: [f["prio"] for f in flows if f["flow"].startswith(job + "/")] for job in ("a", "b")}
        # a came first: every one of its transfers ranks ahead of every one of b's
        assert ranks["a"] and ranks["b"] and max(ranks["a"]) < min(ranks["b"])


def test_full_planning_mode_replans_everything_on_arrival():
    with system(planning="full") as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        c.submit_job(layer_chain_job("b", "h2", "h3"))
        assert wait_until(lambda: d.state.plan_summary.get("jobs") == 2 and settled(d), 5.0)
        assert d.state.plan_summary["mode"] == "full"
        assert d.state.plans_by_mode["incremental"] == 0
        seq = d.state.schedule_seq
        assert all(a.seq == seq for a in agents.values())


def test_dead_planner_process_falls_back_to_the_thread():
    with system(planning="full") as (d, _), Client(d.job_endpoint) as c:
        child = d.planner
        assert child is not None and child.pid
        # until the child has imported everything the thread plans; each job here is
        # a full re-solve, which looks whether the child is ready
        k, end = 0, time.monotonic() + 60.0
        while not child.started and time.monotonic() < end:
            c.submit_job(layer_chain_job(f"w{k}", "h0", "h1"))
            assert wait_until(lambda: settled(d), 10.0)
            time.sleep(0.2)
            k += 1
        assert child.started
        c.submit_job(layer_chain_job("by-child", "h0", "h1"))
        assert wait_until(lambda: "by-child" in d.state.covered and settled(d), 10.0)
        pid = child.pid
        os.kill(pid, signal.SIGKILL)
        c.submit_job(layer_chain_job("after", "h2", "h3"))
        assert wait_until(lambda: "after" in d.state.covered and settled(d), 10.0)
        assert d.planner is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped, not a zombie


def test_planner_process_ends_with_the_daemon():
    with system(planning="full") as (d, _), Client(d.job_endpoint) as c:
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: settled(d) and d.state.schedule_seq, 5.0)
        pid = d.planner.pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_fanout_reaches_every_agent_once_in_one_pass():
    n = 300
    from jitsched.daemon import Daemon
    from jitsched.dag.model import Cluster

    cfg = config(cluster=Cluster.uniform(n), planning="full", resend_s=5.0, heartbeat_s=1.0,
                 heartbeat_timeout_s=30.0)
    d = Daemon(cfg).start()
    ctx = zmq.Context()
    socks = []
    try:
        for i in range(n):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.agent_endpoint)
            s.send(encode_request(MsgType.REGISTER, {"host": f"h{i}"}))
            socks.append(s)
        assert wait_until(lambda: len(d.state.agents) == n, 10.0)
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("f", "h0", "h1"))
        got = {}
        end = time.monotonic() + 10.0
        while len(got) < n and time.monotonic() < end:
            for i, s in enumerate(socks):
                while s.poll(0):
                    msg = s.recv()
                    if b"schedule" in msg:
                        got.setdefault(i, []).append(decode_request(msg))
        assert len(got) == n
        seq = d.state.schedule_seq
        for i, msgs in got.items():
            [req] = msgs  # exactly one push each, no re-send within resend_s
            assert req.type == MsgType.SCHEDULE and req.body["seq"] == seq
            assert bool(req.body["flows"]) == (i == 0)
        # one envelope per distinct body: hosts with the same body (the idle ones) share it
        ids_of: dict = {}
        for msgs in got.values():
            ids_of.setdefault(repr(sorted(msgs[0].body.items(), key=str)), set()).add(msgs[0].id)
        assert all(len(ids) == 1 for ids in ids_of.values())
        assert len({i for ids in ids_of.values() for i in ids}) == len(ids_of) < n
    finally:
        for s in socks:
            s.close(0)
        ctx.term()
        d.stop()


def paced_job(jid: str) -> Job:
    """t1 is needed only after t0 (2 s at line rate) and c0 (1 s): the plan paces it to ~3 s."""
    return Job(jid, (Compute("c0", "h1", 1.0), Compute("c1", "h1", 0.01)),
               (Transfer("t0", "h0", "h1", 2 * LINE), Transfer("t1", "h0", "h1", 0.1 * LINE)),
               (("t0", "c0"), ("c0", "c1"), ("t1", "c1")), 0.0)


@contextlib.contextmanager
def paced_run(**cfg):
    """Two hosts with :func:`paced_job` submitted and its plan settled: (daemon, client, the
    adoptions seen after that one)."""
    with system(hosts=("h0", "h1"), planning="full", **cfg) as (d, _), Client(d.job_endpoint) as c:
        seen = record_adoptions(d)
        c.submit_job(paced_job("p"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        del seen[:]
        yield d, c, seen


@pytest.mark.parametrize("early_s, replans", [(0.3, True), (float("inf"), False)])
def test_transfer_far_ahead_of_the_plan_triggers_an_early_resolve(early_s, replans):
    with paced_run(alpha=1.0, early_s=early_s) as (d, c, seen):
        # t0 arrives at once, ~2 s before the plan expected it: t1 is still paced for ~3 s
        c.transfer_started("p", "t0")
        c.transfer_finished("p", "t0", 2 * LINE)
        if replans:
            assert wait_until(lambda: any("early" in r for _, r, _ in seen) and settled(d), 5.0)
            # once t1 is done too nothing is held back: no further early re-solve
            m = len(seen)
            c.transfer_started("p", "t1")
            c.transfer_finished("p", "t1", 0.1 * LINE)
            time.sleep(0.5)
            assert not any("early" in r for _, r, _ in seen[m:])
        else:
            time.sleep(0.5)
            assert not any("early" in r for _, r, _ in seen)


@pytest.mark.parametrize("policy, alpha, drifts", [("jit", None, False), ("jit-paper", 1.0, True)])
def test_drift_counts_only_against_planned_rates(policy, alpha, drifts):
    # The default jit (alpha 0) ranks transfers without planned rates: a transfer that
    # ends 0.8 s after the plan is not late against anything. A planned one (t0 of
    # paced_job is planned to end ~2 s after the plan) arriving 1 s late is.
    with paced_run(policy=policy, alpha=alpha, drift_s=0.5) as (_, c, seen):
        c.transfer_started("p", "t0")
        time.sleep(3.0 if drifts else 0.8)
        c.transfer_finished("p", "t0", 2 * LINE)
        if drifts:
            assert wait_until(lambda: any("drift" in r for _, r, _ in seen), 5.0)
        else:
            time.sleep(0.5)
            assert not any("drift" in r for _, r, _ in seen)


@pytest.mark.parametrize("duty", [1.0, 0.25])
def test_planner_duty_spaces_full_resolves_by_their_duration(duty):
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.daemon import Daemon

    # every arrival is a full re-solve of at least 0.4 s; with duty 0.25 the next may
    # start only 3 x its duration after it ended
    cfg = config(planning="full", planner_process=False, max_planner_duty=duty)
    d = Daemon(cfg, policy=slow_full_jit(cfg, 0.4))
    agents = []
    try:
        d.start()
        agents = [Agent(h, d.agent_endpoint, AgentOptions(backend="record"),
                        local_namespace=f"du{id(d)}").start() for h in HOSTS]
        results: list = []
        record_adoptions(d, results)
        ended = []
        adopt = d.state._adopt

        def stamp(res, now):
            ended.append(time.monotonic())
            adopt(res, now)

        d.state._adopt = stamp
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("a", "h0", "h1"))
            assert wait_until(lambda: len(ended) >= 1, 5.0)
            c.submit_job(layer_chain_job("b", "h2", "h3"))  # a trigger during the cool-down
            assert wait_until(lambda: len(ended) >= 2 and settled(d), 10.0)
        first, second = results[0], results[1]
        assert "b" not in first.jobs and "b" in second.jobs  # the trigger waited, it was not lost
        gap = (ended[1] - second.solve_s) - ended[0]  # from the first's end to the second's start
        if duty < 1.0:
            assert gap >= first.solve_s * (1 / duty - 1) - 0.05
        else:
            assert gap < first.solve_s  # back to back as soon as asked
    finally:
        for a in agents:
            a.stop()
        d.stop()
