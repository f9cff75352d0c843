"""The job registry's bounds: job ids scoped by client, per-client quotas, ended jobs and memory by bytes."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import pytest

from jitsched.config import ClientQuota, check_config
from jitsched.daemon.limits import job_bytes
from jitsched.daemon.state import Reject, SchedulerState
from jitsched.dag.model import parse_job
from jitsched.protocol import ErrorCode
from tests.test_daemon import config
from tests.test_daemon_limits import tiny_job


def submit(st: SchedulerState, job_id: str, peer: str | None, now: float = 0.0):
    return st.submit_job({"job": tiny_job(job_id)}, now, peer=peer)


def quota(**kw) -> ClientQuota:
    return replace(ClientQuota(), **kw)


def test_one_client_filling_its_quota_leaves_anothers_untouched():
    st = SchedulerState(config(per_client=quota(max_jobs=2, max_background=1)))
    assert submit(st, "a0", "alice") == {"job_id": "a0", "flow_job": "alice:a0"}
    assert "job_id" in submit(st, "a1", "alice")
    full = submit(st, "a2", "alice")
    assert isinstance(full, Reject) and full.code == ErrorCode.OVERLOADED
    assert "client 'alice' already runs 2 jobs ([limits.per_client] max_jobs)" in full.message
    # bob's quota is his own
    assert "job_id" in submit(st, "b0", "bob") and "job_id" in submit(st, "b1", "bob")
    flow = {"flow": "f", "src": "h0", "dst": "h1", "bytes": 1e6}
    assert "flows" in st.background_started(flow, 0.0, peer="alice")
    got = st.background_started(flow | {"flow": "g"}, 0.0, peer="alice")
    assert isinstance(got, Reject) and got.code == ErrorCode.OVERLOADED and "max_background" in got.message
    assert "flows" in st.background_started(flow | {"flow": "h"}, 0.0, peer="bob")
    # an ended job frees its place in the quota
    st.cancel_job({"job_id": "a0"}, 1.0, peer="alice")
    assert "job_id" in submit(st, "a2", "alice", 1.0)
    use = st.status({}, 1.0)["clients"]
    assert use["alice"]["max_jobs"] == [2, 2] and use["bob"]["max_jobs"] == [2, 2]
    assert use["alice"]["max_background"] == [1, 1] and use["bob"]["max_background"] == [1, 1]
    assert use["alice"]["max_job_bytes"][0] == 3 * job_bytes(parse_job(tiny_job("a0"), st.cluster))


def test_a_client_cannot_name_squat_or_take_over_another_clients_job():
    st = SchedulerState(config())
    assert "job_id" in submit(st, "j", "alice")
    # bob's "j" is another job: no duplicate, nothing of alice's touched
    assert submit(st, "j", "bob") == {"job_id": "j", "flow_job": "bob:j"}
    assert st.cancel_job({"job_id": "j"}, 1.0, peer="bob") == {"state": "cancelled"}
    assert st.jobs["alice:j"].active and st.jobs["bob:j"].state == "cancelled"
    # alice's ended job cannot be replaced by bob's submission of the same id
    st.cancel_job({"job_id": "j"}, 2.0, peer="alice")
    assert "job_id" in submit(st, "j", "bob", 3.0)
    assert st.jobs["alice:j"].state == "cancelled" and st.jobs["bob:j"].active
    got = st.transfer_finished({"job_id": "alice:j", "transfer": "t"}, 3.0, peer="bob")
    assert isinstance(got, Reject) and got.code == ErrorCode.UNKNOWN_JOB
    # the plans hold both clients' jobs apart
    assert set(st.active) == {"bob:j"}
    # without keys, every job is the one anonymous client's, named as submitted
    anon = SchedulerState(config())
    assert submit(anon, "j", None) == {"job_id": "j"}
    assert "anonymous" in anon.status({}, 0.0)["clients"]


def test_a_named_clients_override_holds_and_the_others_keep_the_default():
    st = SchedulerState(config(per_client=quota(max_jobs=1),
                               clients={"alice": quota(max_jobs=3)}))
    for k in range(3):
        assert "job_id" in submit(st, f"a{k}", "alice")
    assert isinstance(submit(st, "a3", "alice"), Reject)
    assert "job_id" in submit(st, "b0", "bob")
    got = submit(st, "b1", "bob")
    assert isinstance(got, Reject) and "already runs 1 jobs" in got.message
    assert st.status({}, 0.0)["clients"]["alice"]["max_jobs"] == [3, 3]


def test_ended_jobs_are_bounded_by_their_bytes():
    one = job_bytes(parse_job(tiny_job("x"), config().cluster))
    st = SchedulerState(config(max_ended_bytes=3 * one + 10))
    for k in range(10):
        submit(st, f"j{k}", None, float(k))
        st.cancel_job({"job_id": f"j{k}"}, float(k))
    st.prune(10.0)
    assert list(st.jobs) == ["j7", "j8", "j9"]  # the oldest went first
    assert st.job_registry.ended_bytes == 3 * one and st.job_registry.pruned == 7
    assert st.status({}, 10.0)["memory"]["ended_job_bytes"] == 3 * one


def test_a_clients_job_bytes_make_room_from_its_own_ended_jobs_first():
    one = job_bytes(parse_job(tiny_job("x"), config().cluster))
    st = SchedulerState(config(per_client=quota(max_job_bytes=2 * one)))
    submit(st, "b0", "bob")
    st.cancel_job({"job_id": "b0"}, 0.0, peer="bob")
    for k in range(4):
        assert "job_id" in submit(st, f"a{k}", "alice", float(k))
        st.cancel_job({"job_id": f"a{k}"}, float(k), peer="alice")
    # alice's oldest ended jobs made way; bob's stayed
    assert sorted(st.jobs) == ["alice:a2", "alice:a3", "bob:b0"]
    assert submit(st, "a4", "alice") and submit(st, "a5", "alice")
    got = submit(st, "a6", "alice")  # two running fill it: nothing ended left to forget
    assert isinstance(got, Reject) and got.code == ErrorCode.OVERLOADED and "max_job_bytes" in got.message
    assert [js.job.id for js in st.job_registry.prune(10.0)] == ["alice:a0", "alice:a1", "alice:a2", "alice:a3"]


def test_over_the_memory_ceiling_ended_jobs_go_then_submissions_are_refused():
    st = SchedulerState(config(max_memory_bytes=10_000_000))
    reg = st.job_registry
    rss = [1_000_000]
    reg.rss = lambda: rss[0]
    for k in range(3):
        submit(st, f"j{k}", None)
        st.cancel_job({"job_id": f"j{k}"}, 0.0)
    assert "job_id" in submit(st, "run", None)
    rss[0] = 10_000_000 + reg.jobs["j0"].bytes  # one job over, and the new one (of the same size)
    assert "job_id" in submit(st, "more", None)  # ...made by forgetting the oldest ended
    assert "j0" not in reg.jobs and "j1" not in reg.jobs and "j2" in reg.jobs
    rss[0] = 20_000_000
    got = submit(st, "over", None)
    assert isinstance(got, Reject) and got.code == ErrorCode.OVERLOADED
    assert "([limits] max_memory_bytes)" in got.message and "10000000 bytes" in got.message
    assert "j2" not in reg.jobs and reg.refused_memory == 1
    st_ = st.status({}, 0.0)
    assert st_["memory"]["refused"] == 1 and st_["limits"]["max_memory_bytes"] == 10_000_000
    assert reg.jobs["run"].active and reg.jobs["more"].active  # running jobs are never dropped


# ---------------------------------------------------------------------- job leases


def test_a_job_whose_client_went_silent_is_abandoned_and_leaves_the_plan(tmp_path):
    from jitsched.client import Client
    from jitsched.daemon import Daemon
    from jitsched.daemon.server import wait_until
    from jitsched.workloads.synth import layer_chain_job
    d = Daemon(config(job_lease_s=0.6, journal=str(tmp_path / "j.db"), planner_process=False,
                      policy="jit")).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("silent", "h0", "h1"))
            c.submit_job(layer_chain_job("alive", "h2", "h3"))
            t_end = time.monotonic() + 1.5
            while time.monotonic() < t_end:  # the live client renews; the other says nothing
                assert c.renew_lease(["alive", "nope"]) == {"renewed": 1, "not_running": ["nope"]}
                time.sleep(0.2)
            st = c.status()
        assert st["jobs"]["silent"]["state"] == "abandoned"
        assert st["jobs"]["alive"]["state"] == "running"
        assert wait_until(lambda: "silent" not in {k for k, _ in d.state.schedule.prio}, 5.0)
    finally:
        d.stop()
    # journalled: a restarted daemon resumes only the live one, with a full lease
    d = Daemon(config(job_lease_s=0.6, journal=str(tmp_path / "j.db"), planner_process=False,
                      policy="jit")).start()
    try:
        assert d.state.restored == ["alive"]
    finally:
        d.stop()


def test_the_lease_is_a_positive_setting():
    from jitsched.errors import ValidationError

    with pytest.raises(ValidationError, match="job_lease_s: must be positive"):
        check_config(config(job_lease_s=0))


def critical(job_id: str, src: str, dst: str, **kw) -> dict:
    # 125 MB at 1 Gbit/s: 1 s on the wire, 0.1 s of compute either side; isolated JCT 1.2 s
    return tiny_job(job_id, 1.25e8, src=src, dst=dst) | {"class": "critical"} | kw


def test_a_critical_job_no_reservation_can_hold_is_refused_or_demoted_naming_port_and_start():
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0))
    reg = st.job_registry
    assert "job_id" in st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)
    # its reservation holds 1.05 x 1.2 s, up to the 0.1-s slot
    assert reg.jobs["a"].guard_until_s == pytest.approx(1.3)
    assert "a" in reg.reservations.held
    # h0's egress is a's from 0.1 to 1.1 s: b, also leaving h0 at once, is refused with the
    # port named and the earliest start at which it could be guaranteed
    got = st.submit_job({"job": critical("b", "h0", "h2")}, 0.5)
    assert isinstance(got, Reject) and got.code == ErrorCode.OVERLOADED
    assert got.message == ("critical job 'b' cannot be guaranteed: h0 egress binds; it could be "
                           "from 0.900 s (daemon clock)")
    assert got.detail["bottleneck"] == "h0 egress"
    assert got.detail["earliest_start_s"] == pytest.approx(0.9)
    assert "b" not in reg.jobs and reg.critical_refused == 1
    # its client asked for normal instead: admitted as normal, reserving nothing
    # (the reply says the class it runs in and why, status counts it)
    got = st.submit_job({"job": critical("b", "h0", "h2"), "if_unguaranteed": "normal"}, 0.5)
    assert got["class"] == "normal" and got["unguaranteed"]["bottleneck"] == "h0 egress"
    assert reg.jobs["b"].job.job_class == "normal" and reg.jobs["b"].guard_until_s == -math.inf
    assert "b" not in reg.reservations.held and reg.critical_demoted == 1
    # a holds h0 and h1, which have no address here: no agent can cap traffic into them
    assert st.status({}, 0.5)["critical"] == {"epsilon": 0.05, "reserved": 1, "refused": 1,
                                              "admitted_as_normal": 1, "met": 0, "missed": 0, "overdue": [], "at_risk": [],
                                              "hosts_held": 2, "hosts_unaddressed": ["h0", "h1"], "caps_Bps": {},
                                              "floor": 0.01}
    # disjoint ports: guaranteed; a normal job on a's ports: never refused
    assert st.submit_job({"job": critical("c", "h2", "h3")}, 0.5) == {"job_id": "c", "class": "critical"}
    assert "job_id" in submit(st, "n", None, 0.6)
    # into h3, which c's transfer fills: the ingress is named
    got = st.submit_job({"job": critical("d", "h1", "h3")}, 0.7)
    assert isinstance(got, Reject) and got.detail["bottleneck"] == "h3 ingress"
    # out of h0 after 1.5 s of compute, when a is done with it: shares the port with a
    # (port exclusivity refused it until 1.2 s)
    late = tiny_job("late", 1.25e8, duration_s=1.5, src="h0", dst="h1") | {"class": "critical"}
    assert st.submit_job({"job": late}, 0.2) == {"job_id": "late", "class": "critical"}
    # a job that ends gives the rest of its reservation back: h0's egress is free again
    reg.end(reg.jobs["a"], "cancelled", 0.6)
    assert reg.reservations.held["a"].end_slot == 6
    assert st.submit_job({"job": critical("b2", "h0", "h2")}, 0.6) == {"job_id": "b2", "class": "critical"}


def test_a_critical_job_is_told_and_counted_as_within_its_guarantee_or_not():
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0))
    reg = st.job_registry
    assert "job_id" in st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)
    assert "job_id" in st.submit_job({"job": critical("c", "h2", "h3")}, 0.0)
    assert "job_id" in submit(st, "n", None, 0.0)
    # deadline 1.3 s (1.05 x 1.2 s, up to the 0.1-s slot), a finish within a slot of it meets it
    jobs = st.status({}, 1.35)["jobs"]
    assert (jobs["a"]["deadline_s"], jobs["a"]["guarantee"]) == (pytest.approx(1.3), "on time")
    assert "guarantee" not in jobs["n"]
    assert st.job_finished({"job_id": "c"}, 1.35) == {"jct_s": pytest.approx(1.35), "guarantee": "met"}
    # a runs on past it: overdue in status and in the metrics, then missed when it ends
    crit = st.status({}, 1.5)["critical"]
    assert (crit["overdue"], crit["met"], crit["missed"]) == (["a"], 1, 0)
    assert st.job_finished({"job_id": "a"}, 1.5)["guarantee"] == "missed"
    assert st.job_finished({"job_id": "n"}, 1.5) == {"jct_s": pytest.approx(1.5)}
    crit = st.status({}, 1.6)["critical"]
    assert (crit["overdue"], crit["met"], crit["missed"]) == ([], 1, 1)
    assert st.status({}, 1.6)["jobs"]["a"]["guarantee"] == "missed"
    # a cancelled critical job holds no verdict
    assert "job_id" in st.submit_job({"job": critical("x", "h0", "h1")}, 2.0)
    reg.end(reg.jobs["x"], "cancelled", 2.1)
    assert "guarantee" not in st.status({}, 2.2)["jobs"]["x"] and reg.critical_missed == 1


def test_a_journalled_critical_job_is_reserved_for_again():
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0))
    reg = st.job_registry
    js = reg.restore(critical("a", "h0", "h1"), None, 0.0)
    assert js.job.job_class == "critical" and js.guard_until_s == pytest.approx(1.3)
    assert "a" in reg.reservations.held
    got = st.submit_job({"job": critical("b", "h0", "h2")}, 0.2)
    assert isinstance(got, Reject) and got.detail["bottleneck"] == "h0 egress"


def test_a_real_daemon_refuses_or_demotes_a_critical_job_with_the_port_and_start_in_the_reply():
    from jitsched.client import Client
    from jitsched.daemon import Daemon
    from jitsched.errors import RemoteError

    d = Daemon(config(planner_process=False, policy="jit", critical_assumed_share=1.0)).start()
    try:
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            assert c.submit(critical("a", "h0", "h1"))["class"] == "critical"
            with pytest.raises(RemoteError) as err:
                c.submit(critical("b", "h0", "h2"))
            assert err.value.code == ErrorCode.OVERLOADED
            assert err.value.detail["bottleneck"] == "h0 egress"
            assert err.value.detail["earliest_start_s"] > 0 and "h0 egress binds" in err.value.message
            got = c.submit(critical("b", "h0", "h2"), if_unguaranteed="normal")
            assert got["class"] == "normal" and got["unguaranteed"]["bottleneck"] == "h0 egress"
            assert got["unguaranteed"]["earliest_start_s"] > 0
            assert c.status()["critical"] == {"epsilon": 0.05, "reserved": 1, "refused": 1,
                                              "admitted_as_normal": 1, "met": 0, "missed": 0, "overdue": [], "at_risk": [],
                                              "hosts_held": 2, "hosts_unaddressed": ["h0", "h1"], "caps_Bps": {},
                                              "floor": 0.01}
            assert c.job_finished("a")["guarantee"] == "met"
            assert c.status()["critical"]["met"] == 1
    finally:
        d.stop()


def test_a_real_daemon_guarantees_within_its_critical_epsilon(tmp_path):
    import tomli_w

    from jitsched.client import Client
    from jitsched.config import config_doc, load_config
    from jitsched.daemon import Daemon
    from jitsched.errors import RemoteError

    # the setting as an operator writes it, read back from the TOML
    p = tmp_path / "d.toml"
    p.write_text(tomli_w.dumps(config_doc(config(planner_process=False, policy="jit", critical_assumed_share=1.0, critical_epsilon=1.0))))
    cfg = load_config(p)
    assert cfg.critical_epsilon == 1.0
    d = Daemon(cfg).start()
    try:
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            assert c.submit(critical("a", "h0", "h1"))["class"] == "critical"
            # b leaves h0 at once too: within 2x its 1.2-s isolated JCT it can wait for a's
            # transfer (refused at the default 0.05, above), so it is guaranteed
            assert c.submit(critical("b", "h0", "h2"))["class"] == "critical"
            # a third cannot wait behind both within 2x: refused, its target 2x its isolated
            # JCT, up to the slot
            with pytest.raises(RemoteError) as err:
                c.submit(critical("c", "h0", "h3"))
            assert err.value.detail["bottleneck"] == "h0 egress"
            assert err.value.detail["isolated_jct_s"] == pytest.approx(1.2)
            assert err.value.detail["target_jct_s"] == pytest.approx(2.4)
            assert c.status()["critical"] == {"epsilon": 1.0, "reserved": 2, "refused": 1,
                                              "admitted_as_normal": 0, "met": 0, "missed": 0, "overdue": [], "at_risk": [],
                                              "hosts_held": 3,
                                              "hosts_unaddressed": ["h0", "h1", "h2"], "caps_Bps": {}, "floor": 0.01}
        assert d.state.job_registry.reservations.options.eps == 1.0
    finally:
        d.stop()


def test_if_unguaranteed_is_checked_in_one_line():
    st = SchedulerState(config(policy="jit"))
    got = st.submit_job({"job": critical("a", "h0", "h1"), "if_unguaranteed": "maybe"}, 0.0)
    assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_BODY
    assert got.message == "body.if_unguaranteed: expected one of refuse, normal, got 'maybe'"


def test_agents_get_a_critical_jobs_reserved_rates_and_a_leftover_without_them():
    from jitsched.client import Client
    from jitsched.daemon.server import wait_until
    from tests.test_daemon import system

    with system(policy="jit") as (d, agents), Client(d.job_endpoint) as c:
        c.submit(critical("a", "h0", "h1"))

        def flow():
            body = agents["h0"].schedule
            got = [f for f in body["flows"] if f["flow"] == "a/t"] if body else []
            return got[0] if got and got[0]["rates_Bps"] else None

        assert wait_until(lambda: flow() is not None, 5.0)
        f, body = flow(), agents["h0"].schedule
        slot = body["slot_s"]
        # the reservation: 125 MB at up to the line rate, as the flow's floor
        assert max(f["rates_Bps"]) == pytest.approx(1.25e8)
        assert sum(f["rates_Bps"]) * slot == pytest.approx(1.25e8, rel=0.02)
        # what background traffic may take leaves the reserved slots alone
        left = body["leftover_Bps"]
        k = f["start_slot"] + int(np.argmax(f["rates_Bps"]))
        assert k < len(left) and left[k] == pytest.approx(0.0, abs=1.0)


@pytest.mark.parametrize("planning", ["full", "incremental"])
def test_every_other_agent_caps_its_unranked_traffic_into_a_critical_jobs_hosts(planning, capsys):
    # a real daemon and record agents: h1's ingress is reserved for a's transfer from h0,
    # so every other agent holds its unranked traffic to h1 to what the reservation leaves,
    # and to h0 to what the transfer's ACKs leave, until the transfer has arrived, and says
    # so in status; no agent caps its own host
    from jitsched.cli import main
    from jitsched.client import Client
    from jitsched.daemon.server import wait_until
    from jitsched.dag.model import Cluster, Host
    from jitsched.plan.reserve import ACK_SHARE
    from tests.test_daemon import system

    line = 1.25e8  # 1 Gbit/s in bytes/s
    cl = Cluster(tuple(Host(f"h{i}", 1e9, 1e9, f"198.18.0.{i + 1}") for i in range(4)))
    with system(cluster=cl, policy="jit", planning=planning) as (d, agents):
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            assert c.submit(critical("a", "h0", "h1"))["class"] == "critical"
        assert wait_until(lambda: agents["h2"].backend.caps.get("198.18.0.2", 2e8) < 0.1 * line, 5.0)
        assert agents["h2"].backend.caps["198.18.0.1"] == pytest.approx((1 - ACK_SHARE) * line)
        assert wait_until(lambda: agents["h0"].backend.caps.get("198.18.0.2", 2e8) < 0.1 * line, 3.0)
        assert wait_until(lambda: set(agents["h0"].backend.caps) == {"198.18.0.2"}
                          and set(agents["h1"].backend.caps) == {"198.18.0.1"}, 3.0)
        assert wait_until(lambda: d.state.agents["h2"].caps_held == 2, 3.0)
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            caps = c.status()["critical"]["caps_Bps"]
        assert set(caps) == {"h0", "h1"} and caps["h0"] == pytest.approx((1 - ACK_SHARE) * line)
        assert caps["h1"] < 0.1 * line
        assert main(["status", "--daemon", d.job_endpoint]) == 0
        # past the reservation's window (1.2 s and its 5 %) the transfer is still due: h1 stays held
        time.sleep(1.5)
        assert agents["h2"].backend.caps.get("198.18.0.2", 2e8) < 0.1 * line
        book = d.state.plan_book
        plans = dict(book.plans_by_mode)
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            c.transfer_finished("a", "t")
        assert wait_until(lambda: all(a.backend.caps == {} for a in agents.values()), 5.0)
        if planning == "full":
            # the bodies without the caps came from an increment that planned no job (a full
            # re-solve would rank the running jobs' flows anew); under incremental planning
            # the arrival's joint re-solve may come meanwhile and lift them itself
            assert book.plans_by_mode["incremental"] > plans["incremental"]
    out = capsys.readouterr().out
    [h2] = [ln for ln in out.splitlines() if "agent h2" in ln]
    assert h2.endswith("capping traffic to 2 reserved hosts")
    assert "1 holding reservations, 0 refused" in out
    assert (f"2 hosts held (the others' unranked traffic into each held to h0 "
            f"{(1 - ACK_SHARE) * line * 8e-6:.3g} Mbit/s, h1 ") in out
    assert " Mbit/s), their agents keeping 0.01 for unranked traffic\n" in out


@pytest.mark.parametrize("caps", [True, False])
def test_a_critical_jobs_agents_keep_the_critical_floor_while_it_holds_their_ports(caps, capsys):
    # [daemon] critical_floor: h0's and h1's agents keep 0.01 of their ports for unranked
    # traffic (their own floor otherwise) from the reservation's first slot until the
    # transfer has arrived, and say so in status; h2's keeps its own; with or without caps
    from jitsched.cli import main
    from jitsched.client import Client
    from jitsched.daemon.server import wait_until
    from jitsched.dag.model import Cluster, Host
    from tests.test_daemon import system

    cl = Cluster(tuple(Host(f"h{i}", 1e9, 1e9, f"198.18.0.{i + 1}") for i in range(4)))
    with system(cluster=cl, policy="jit", critical_floor=0.01, critical_caps=caps) as (d, agents):
        assert all(a.backend.floor is None for a in agents.values())
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            assert c.submit(critical("a", "h0", "h1"))["class"] == "critical"
        assert wait_until(lambda: agents["h0"].backend.floor == 0.01 and agents["h1"].backend.floor == 0.01, 5.0)
        assert agents["h2"].backend.floor is None and agents["h3"].backend.floor is None
        if caps:  # the caps go their own way, h2's agent applying its body in its own time
            assert wait_until(lambda: bool(agents["h2"].backend.caps), 5.0)
        else:
            assert "caps_into" not in d.state.host_body("h2") and not agents["h2"].backend.caps
        assert wait_until(lambda: d.state.agents["h0"].floor_held == 0.01, 3.0)
        assert d.state.agents["h2"].floor_held is None
        assert main(["status", "--daemon", d.job_endpoint]) == 0
        with Client(d.job_endpoint, timeout_s=10.0) as c:
            c.transfer_finished("a", "t")
        assert wait_until(lambda: all(a.backend.floor is None for a in agents.values()), 5.0)
        assert wait_until(lambda: d.state.agents["h0"].floor_held is None, 3.0)
    out = capsys.readouterr().out
    [h0] = [ln for ln in out.splitlines() if "agent h0" in ln]
    assert "keeping 0.01 for unranked traffic while a critical job holds its ports" in h0
    [h2] = [ln for ln in out.splitlines() if "agent h2" in ln]
    assert "keeping" not in h2
    held = "2 hosts held (the others' unranked traffic into each held to " if caps else "2 hosts held, "
    assert held in out and "their agents keeping 0.01 for unranked traffic" in out


def test_with_a_critical_floor_critical_jobs_are_reserved_on_what_it_leaves():
    # h0's agent keeps a fifth of each port for unranked traffic, but 0.05 where a critical
    # job holds it: the job is reserved on 0.9 x 0.95 of the line there
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0, critical_floor=0.05))
    assert "seq" in _register(st, "h0", 0.2, 0.9, holds_floor=True)
    assert "seq" in _register(st, "h1", 0.01, holds_floor=True) and "seq" in _register(st, "h2", 0.2, 0.9)
    agents = st.status({}, 0.0)["agents"]
    assert agents["h0"]["reservable"] == pytest.approx(0.855) and agents["h0"]["holds_floor"]
    assert agents["h1"]["reservable"] == pytest.approx(0.99)  # its own floor is lower: it keeps that
    # an agent that cannot keep DL packets out of its background class keeps its own floor
    assert agents["h2"]["reservable"] == pytest.approx(0.72) and not agents["h2"]["holds_floor"]
    assert st.job_registry.reservations.share("h0") == pytest.approx(0.855)
    assert st.status({}, 0.0)["critical"]["floor"] == 0.05
    assert st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)["class"] == "critical"
    # alone on what it can have: 1 s on the wire at 0.855 Gbit/s is 1.170 s, plus 0.2 s of compute
    assert st.job_registry.reservations.held["a"].windows.isolated_s == pytest.approx(1.370, abs=0.01)


def _register(st: SchedulerState, host: str, floor: float | None = None, payload: float | None = None,
              **join) -> dict | Reject:
    body = ({"host": host, "backend": "tc"} | ({} if floor is None else {"background_floor": floor})
            | ({} if payload is None else {"payload_share": payload}) | join)
    return st.register(host.encode(), body, 0.0)


def test_critical_jobs_are_reserved_on_what_the_agents_floor_and_frames_leave():
    # h0's agent keeps a fifth of each port for traffic it does not rank, and a flow's
    # payload takes 0.9 of the line: a reservation above 0.72 of the line there is one it
    # would not give while that traffic is backlogged
    st = SchedulerState(config(policy="jit", critical_floor=None, critical_assumed_share=1.0))
    reg = st.job_registry
    assert "seq" in _register(st, "h0", 0.2, 0.9) and "seq" in _register(st, "h1")
    agents = st.status({}, 0.0)["agents"]
    assert (agents["h0"]["background_floor"], agents["h0"]["payload_share"]) == (0.2, 0.9)
    assert agents["h0"]["reservable"] == pytest.approx(0.72) and agents["h1"]["reservable"] == 1.0
    assert (agents["h1"]["background_floor"], agents["h1"]["payload_share"]) == (0.0, 1.0)
    assert st.submit_job({"job": critical("a", "h0", "h1")}, 0.0) == {"job_id": "a", "class": "critical"}
    held = reg.reservations.held["a"]
    # alone on what it can have: 1 s on the wire at 0.72 Gbit/s is 1.389 s, plus 0.2 s of compute
    assert held.windows.isolated_s == pytest.approx(1.589, abs=0.01)
    assert reg.jobs["a"].guard_until_s == pytest.approx(1.7)  # 1.05 x 1.589 s, up to the 0.1-s slot
    line = st.cluster.hosts[0].egress_Bps
    assert held.rates.max() <= 0.72 * line * (1 + 1e-6)
    assert held.rates.sum() * 0.1 == pytest.approx(1.25e8, rel=1e-5)
    # a job from h1 to h2 has no floor on its ports: alone it takes 1.2 s, as before
    assert "job_id" in st.submit_job({"job": critical("b", "h1", "h2")}, 0.0)
    assert reg.reservations.held["b"].windows.isolated_s == pytest.approx(1.2, abs=0.01)


def test_a_floor_or_payload_share_that_is_no_share_is_refused_at_registration():
    st = SchedulerState(config(policy="jit"))
    for bad in (1.0, -0.1, float("nan")):
        got = _register(st, "h0", bad)
        assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_BODY
        assert "background_floor" in got.message
    for bad in (0.0, 1.5, float("nan")):
        got = _register(st, "h0", 0.05, bad)
        assert isinstance(got, Reject) and got.code == ErrorCode.INVALID_BODY
        assert "payload_share" in got.message
    assert "h0" not in st.status({}, 0.0)["agents"]


def test_a_critical_job_on_a_host_that_joined_is_reserved_on_the_grown_cluster():
    st = SchedulerState(config(policy="jit"))
    n = len(st.cluster)
    assert "seq" in _register(st, "new", 0.0, egress_bps=1e9, ingress_bps=1e9, address="198.18.7.9")
    assert len(st.cluster) == n + 1
    assert st.submit_job({"job": critical("a", "h0", "new")}, 0.0) == {"job_id": "a", "class": "critical"}
    assert st.job_registry.reservations.held["a"].windows.dst[0] == n
    got = st.submit_job({"job": critical("b", "h1", "new")}, 0.2)
    assert isinstance(got, Reject) and got.detail["bottleneck"] == "new ingress"


def test_before_its_agent_registers_a_host_is_reserved_on_the_assumed_share_then_on_its_agents():
    # the default assumes what a tc agent gives with its defaults, at most
    from agents.backends.base import BACKGROUND_FLOOR, payload_share

    st = SchedulerState(config(policy="jit"))
    assert st.config.critical_assumed_share <= payload_share() * (1 - BACKGROUND_FLOOR)
    reg = st.job_registry
    assert st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)["class"] == "critical"
    # 1 s on the wire at 0.9 Gbit/s is 1.111 s, plus 0.2 s of compute
    assert reg.reservations.held["a"].windows.isolated_s == pytest.approx(1.311, abs=0.01)
    assert reg.reservations.held["a"].rates.max() <= 0.9 * st.cluster.hosts[0].egress_Bps * (1 + 1e-6)
    # h2 and h3's agents can give the whole line (no floor, whole-frame payload): alone as on it
    assert "seq" in _register(st, "h2", 0.0, 1.0) and "seq" in _register(st, "h3", 0.0, 1.0)
    assert st.submit_job({"job": critical("b", "h2", "h3")}, 0.0)["class"] == "critical"
    assert reg.reservations.held["b"].windows.isolated_s == pytest.approx(1.2, abs=0.01)
    # more than the assumed share puts no running job at risk
    assert st.status({}, 0.0)["critical"]["at_risk"] == []


def test_a_job_reserved_on_more_than_its_hosts_agent_can_give_now_is_shown_at_risk():
    from prometheus_client import generate_latest

    from jitsched.daemon.metrics import Metrics

    st = SchedulerState(config(policy="jit", critical_floor=None))
    reg = st.job_registry
    for h in ("h0", "h1", "h2", "h3"):
        assert "seq" in _register(st, h, 0.0, 1.0)
    assert st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)["class"] == "critical"
    assert st.submit_job({"job": critical("b", "h2", "h3")}, 0.0)["class"] == "critical"
    assert reg.reservations.held["a"].rates.max() > 0.9 * st.cluster.hosts[0].egress_Bps
    # h1's agent comes back with a 20 % floor: a's transfer into it is reserved on the whole line
    assert "seq" in _register(st, "h1", 0.2, 1.0)
    # a change within 0.1 % of the line puts nothing at risk: b's hosts
    assert "seq" in _register(st, "h3", 0.0, 0.9995)
    st_ = st.status({}, 0.3)
    assert st_["critical"]["at_risk"] == ["a"]
    assert st_["jobs"]["a"]["at_risk"] == ("reserved on more than the 0.8 of host h1's ports its agent can give "
                                           "(payload share less its background floor)")
    assert "at_risk" not in st_["jobs"]["b"]
    m = Metrics()
    m.update(st, 0.3)
    assert 'jitsched_critical_jobs{outcome="at_risk"} 1.0' in generate_latest(m.registry).decode()
    # its agent back with no floor: a fits again
    assert "seq" in _register(st, "h1", 0.0, 1.0)
    assert st.status({}, 0.4)["critical"]["at_risk"] == [] and "at_risk" not in st.status({}, 0.4)["jobs"]["a"]
    assert "seq" in _register(st, "h1", 0.2, 1.0)
    assert st.status({}, 0.5)["critical"]["at_risk"] == ["a"]
    # jobs admitted from now on are reserved on what h1's agent gives
    assert st.job_finished({"job_id": "a"}, 1.2)["guarantee"] == "met"
    assert st.status({}, 1.3)["critical"]["at_risk"] == []
    assert st.submit_job({"job": critical("c", "h0", "h1")}, 1.3)["class"] == "critical"
    assert reg.reservations.held["c"].rates.max() <= 0.8 * st.cluster.hosts[1].ingress_Bps * (1 + 1e-6)


def test_a_job_whose_hosts_agent_gives_less_is_reserved_again_on_it_where_its_windows_let_it():
    # epsilon 1: a's 125 MB may take until 2.4 s; reserved on the whole line it takes
    # 0.1-1.1 s. At 0.3 s h1's agent keeps a fifth for unranked traffic: what is left goes
    # at 0.8 of the line in the rest of the window, and a is not at risk
    st = SchedulerState(config(policy="jit", critical_floor=None, critical_epsilon=1.0, critical_assumed_share=1.0))
    reg = st.job_registry
    for h in ("h0", "h1"):
        assert "seq" in _register(st, h, 0.0, 1.0)
    assert st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)["class"] == "critical"
    held = reg.reservations.held["a"]
    before = held.rates.copy()
    line = st.cluster.hosts[1].ingress_Bps
    assert before.max() > 0.8 * line * 1.01
    st.plan_book.reasons.clear()
    body = {"host": "h1", "backend": "tc", "background_floor": 0.2, "payload_share": 1.0}
    assert "seq" in st.register(b"h1", body, 0.3)
    assert st.status({}, 0.3)["critical"]["at_risk"] == []
    after = reg.reservations.held["a"].rates
    first = 3 - held.start_slot  # the slot holding 0.3 s, from the reservation's start
    assert np.array_equal(after[:, :first], before[:, :first])  # what went before stays
    assert after[:, first:].max() <= 0.8 * line * (1 + 1e-6)
    assert after.sum() * 0.1 == pytest.approx(1.25e8, rel=1e-5)  # every byte still reserved
    assert (held.start_slot + after.shape[1]) * 0.1 <= reg.jobs["a"].guard_until_s + 1e-9
    assert "reserved" in st.plan_book.reasons  # the agents get the new rates


def test_a_critical_job_taken_back_gives_its_reservation_back():
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0))
    reg = st.job_registry
    js = reg.submit({"job": critical("a", "h0", "h1")}, 0.0)
    assert "a" in reg.reservations.held
    reg.withdraw(js)  # its submission could not be journalled
    assert "a" not in reg.reservations.held
    assert st.submit_job({"job": critical("b", "h0", "h2")}, 0.0) == {"job_id": "b", "class": "critical"}


def test_an_ended_critical_job_holds_no_host_and_its_reservation_goes():
    st = SchedulerState(config(policy="jit", critical_assumed_share=1.0, ended_retention_s=1.0))
    reg = st.job_registry
    assert "job_id" in st.submit_job({"job": critical("a", "h0", "h1")}, 0.0)
    assert [h for h, _, _ in st.plan_book.held_hosts()] == [0, 1]
    # cancelled halfway through its transfer, which never arrives
    assert st.cancel_job({"job_id": "a"}, 0.6) == {"state": "cancelled"}
    assert st.plan_book.held_hosts() == ()
    assert st.status({}, 5.0)["critical"]["hosts_held"] == 0
    # one that finished, once the registry forgets it
    assert "job_id" in st.submit_job({"job": critical("b", "h2", "h3")}, 10.0)
    reg.mark_done(reg.jobs["b"], "c0", 10.1)
    reg.transfer_done(reg.jobs["b"], "t", 11.1)
    assert st.job_finished({"job_id": "b"}, 11.2)["guarantee"] == "met"
    assert st.plan_book.held_hosts() == ()
    # while the ended job is listed its reservation stays (status and a run's figures read it)
    st.prune(11.5)
    assert "b" in reg.jobs and "b" in reg.reservations.held
    st.prune(20.0)
    assert "b" not in reg.jobs
    assert st.plan_book.held_hosts() == () and not reg.reservations.held
