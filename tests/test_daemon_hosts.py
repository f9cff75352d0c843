"""Hosts join and leave a running daemon: real daemons and agents over ZeroMQ on loopback,
with and without CURVE keys, the journal keeping the hosts that joined."""

from __future__ import annotations

import contextlib

import pytest

from jitsched.agents.agent import Agent, RegistrationRefused
from jitsched.agents.options import AgentOptions
from jitsched.client import Client, RemoteError
from jitsched.config import parse_config
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.errors import ValidationError
from jitsched.keys import init_keys, load_curve_keys
from jitsched.protocol import ErrorCode
from tests.test_daemon import config

GBIT = 1e9


def _job(jid: str, src: str, dst: str, nbytes: float = 2e8) -> dict:
    return {"id": jid, "computes": [{"id": "c0", "host": src, "duration_s": 0.01},
                                    {"id": "c1", "host": dst, "duration_s": 0.01}],
            "transfers": [{"id": "t", "src": src, "dst": dst, "bytes": nbytes}],
            "edges": [["c0", "t"], ["t", "c1"]]}


def _agent(host: str, d: Daemon, *, join: bool = False, leave_on_exit: bool = False, **kw) -> Agent:
    caps = {"egress_bps": 2 * GBIT, "ingress_bps": GBIT, "address": "198.18.7.9"} if join else None
    return Agent(host, d.agent_endpoint, AgentOptions(backend="record", leave_on_exit=leave_on_exit),
                 local_namespace=f"hosts{id(d)}", join=caps, **kw)


@contextlib.contextmanager
def _fabric(d: Daemon):
    """``d`` started, and a function starting agents of it; all stopped on exit."""
    started: list[Agent] = []

    def agent(host: str, **kw) -> Agent:
        a = kw.pop("agent", None) or _agent(host, d, **kw)
        started.append(a)
        return a.start()

    try:
        d.start()
        yield agent
    finally:
        for a in started:
            a.stop()
        d.stop()


def _flows(a: Agent) -> list[str]:
    return [f["flow"] for f in (a.schedule or {}).get("flows", [])]


def test_an_agent_with_its_capacities_joins_a_running_daemon_and_gets_its_jobs_flows():
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT), policy="jit-paper"))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h0 = agent("h0")
        assert wait_until(h0.registered.is_set, 5.0)
        # not a host yet: a job on it is refused
        with pytest.raises(RemoteError) as err:
            c.submit_job(_job("early", "h0", "h9"))
        assert err.value.code == ErrorCode.INVALID_JOB and "h9" in str(err.value)
        h9 = agent("h9", join=True)
        assert wait_until(h9.registered.is_set, 5.0)
        st = c.status()["hosts"]
        assert st["in_cluster"] == 3 and st["configured"] == 2 and st["hosts_joined"] == 1
        assert st["joined"]["h9"]["egress_bps"] == 2 * GBIT and st["joined"]["h9"]["ingress_bps"] == GBIT
        assert st["joined"]["h9"]["address"] == "198.18.7.9"
        assert c.submit_job(_job("a", "h0", "h9")) == "a"
        assert c.submit_job(_job("b", "h9", "h1")) == "b"
        # both senders hold their flows: h0's and the joined host's own
        assert wait_until(lambda: "a/t" in _flows(h0) and "b/t" in _flows(h9), 5.0)
        # h9's line is the 2 Gbit/s it registered, more than a configured host's 1 Gbit/s
        assert h9.schedule["line_Bps"] == 2 * GBIT / 8
        assert d.state.agents["h9"].up and "h9" in d.config.cluster


def test_an_allow_list_refuses_hosts_the_configuration_lacks():
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT), host_join="allow-list"))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h9 = agent("h9", join=True)
        assert wait_until(lambda: not h9.running, 15.0)
        assert isinstance(h9.failure, RegistrationRefused) and "allow-list" in str(h9.failure)
        st = c.status()["hosts"]
        assert st["joined"] == {} and st["in_cluster"] == 2 and st["joins_refused"] >= 1
        assert "h9" not in d.config.cluster


def test_an_unknown_host_without_capacities_is_refused_naming_the_flag():
    d = Daemon(config(cluster=Cluster.uniform(1, bps=GBIT)))
    with _fabric(d) as agent:
        mars = agent("mars")
        assert wait_until(lambda: not mars.running, 15.0)
        assert isinstance(mars.failure, RegistrationRefused) and "--egress-bps" in str(mars.failure)


def test_a_host_that_leaves_fails_its_jobs_and_the_rest_are_replanned():
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT)))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h0, h1, h9 = agent("h0"), agent("h1"), agent("h9", join=True, leave_on_exit=True)
        assert wait_until(lambda: all(a.registered.is_set() for a in (h0, h1, h9)), 5.0)
        c.submit_job(_job("on-h9", "h0", "h9", 1e9))
        c.submit_job(_job("stays", "h0", "h1", 1e9))
        c.background_started("into-h9", "h0", "h9", 1e9)
        assert wait_until(lambda: {"on-h9/t", "stays/t"} <= set(_flows(h0)), 5.0)
        seq = d.state.schedule_seq
        h9.stop()  # says it leaves
        assert h9.left
        st = c.status()
        assert st["jobs"]["on-h9"]["state"] == "failed" and "left the cluster" in st["jobs"]["on-h9"]["error"]
        assert st["jobs"]["stays"]["state"] == "running"
        assert st["hosts"]["left"]["h9"]["why"] == "its agent said it leaves" and "h9" not in st["agents"]
        assert st["hosts"]["in_cluster"] == 2 and st["hosts"]["hosts_left"] == 1
        # the announced flow into it is dropped with it, not counted as finished
        assert (st["background"]["held"], st["background"]["finished"], st["background"]["dropped"]) == (0, 0, 1)
        # re-planned without it: h0 keeps the job that stays, and the failed one's flow is gone
        assert wait_until(lambda: d.state.schedule_seq > seq and "on-h9/t" not in _flows(h0)
                          and "stays/t" in _flows(h0), 5.0)
        with pytest.raises(RemoteError) as err:
            c.submit_job(_job("late", "h0", "h9"))
        assert err.value.code == ErrorCode.UNKNOWN_HOST and "left the cluster" in err.value.message
        # it registers again: back in the cluster, and jobs on it are taken
        back = agent("h9", join=True)
        assert wait_until(back.registered.is_set, 5.0)
        st = c.status()["hosts"]
        assert "h9" in st["joined"] and st["left"] == {} and st["in_cluster"] == 3
        assert c.submit_job(_job("again", "h0", "h9")) == "again"


def test_a_configured_host_may_leave_and_come_back_with_its_configured_capacities():
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT)))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h1 = agent("h1", leave_on_exit=True)
        assert wait_until(h1.registered.is_set, 5.0)
        h1.stop()
        assert h1.left and "h1" in c.status()["hosts"]["left"]
        again = agent("h1")  # no capacities: a configured host needs none
        assert wait_until(again.registered.is_set, 5.0)
        st = c.status()["hosts"]
        assert st["left"] == {} and st["joined"] == {} and st["in_cluster"] == 2
        assert again.schedule is None or again.schedule["line_Bps"] == GBIT / 8


def test_a_joined_host_whose_agent_is_silent_past_host_leave_s_leaves():
    d = Daemon(config(cluster=Cluster.uniform(1, bps=GBIT), host_leave_s=1.0))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h0, h9 = agent("h0"), agent("h9", join=True)
        assert wait_until(lambda: h0.registered.is_set() and h9.registered.is_set(), 5.0)
        c.submit_job(_job("x", "h0", "h9", 1e10))
        h9.kill()  # no goodbye
        assert wait_until(lambda: "h9" in c.status()["hosts"]["left"], 6.0)
        st = c.status()
        assert "host_leave_s" in st["hosts"]["left"]["h9"]["why"]
        assert st["jobs"]["x"]["state"] == "failed"
        # a configured host's agent silent as long stays in the cluster (down)
        h0.kill()
        assert wait_until(lambda: not c.status()["agents"]["h0"]["up"], 5.0)
        assert not wait_until(lambda: "h0" in c.status()["hosts"]["left"], 2.0)


def test_with_keys_a_host_key_added_while_the_daemon_runs_lets_its_host_join(tmp_path):
    keys = tmp_path / "keys"
    init_keys(keys, ["h0"], ["client"])
    d = Daemon(config(cluster=Cluster.uniform(1, bps=GBIT), keys_dir=str(keys)))
    with _fabric(d) as agent:
        init_keys(keys, ["h9"], [], add=True)  # `jitsched keys add DIR --hosts h9`
        h9 = agent("h9", join=True, keys=keys)
        assert wait_until(h9.registered.is_set, 10.0)
        assert "h9" in d.state.hosts.summary(d.state.cluster)["joined"]
        assert d.state.agents["h9"].peer == "h9"


def test_a_key_of_one_host_cannot_join_as_another(tmp_path):
    keys = tmp_path / "keys"
    init_keys(keys, ["h0", "h9"], ["client"])
    d = Daemon(config(cluster=Cluster.uniform(1, bps=GBIT), keys_dir=str(keys)))
    with _fabric(d) as agent:
        h8 = agent("h8", join=True, keys=load_curve_keys(keys, "hosts", "h9"))
        assert wait_until(lambda: not h8.running, 15.0)
        assert isinstance(h8.failure, RegistrationRefused) and ErrorCode.FORBIDDEN in str(h8.failure)
        assert "h8" not in d.config.cluster


def test_hosts_that_joined_come_back_with_their_jobs_after_a_restart(tmp_path):
    cfg = config(cluster=Cluster.uniform(1, bps=GBIT), journal=str(tmp_path / "journal.db"))
    d = Daemon(cfg)
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h9 = agent("h9", join=True)
        assert wait_until(h9.registered.is_set, 5.0)
        c.submit_job(_job("kept", "h0", "h9", 1e10))
    again = Daemon(cfg)
    with _fabric(again), Client(again.job_endpoint, timeout_s=5.0) as c:
        st = c.status()
        assert st["jobs"]["kept"]["state"] == "running" and st["jobs_not_resumed"] == {}
        assert st["hosts"]["joined"]["h9"]["egress_bps"] == 2 * GBIT


def test_a_daemon_configured_with_no_hosts_plans_for_those_that_join():
    d = Daemon(parse_config({"daemon": {"job_endpoint": "tcp://127.0.0.1:*", "agent_endpoint": "tcp://127.0.0.1:*",
                                        "heartbeat_s": 0.1, "heartbeat_timeout_s": 0.6}}))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        a, b = agent("n1", join=True), agent("n2", join=True)
        assert wait_until(lambda: a.registered.is_set() and b.registered.is_set(), 5.0)
        c.submit_job(_job("j", "n1", "n2"))
        assert wait_until(lambda: "j/t" in _flows(a), 10.0)
        st = c.status()
        assert st["hosts"]["configured"] == 0 and set(st["hosts"]["joined"]) == {"n1", "n2"}
        assert "child failed" not in st["planner"]


def test_host_join_settings_are_checked():
    with pytest.raises(ValidationError, match="host_join"):
        parse_config({"hosts": [{"name": "h0", "egress_bps": 1e9, "ingress_bps": 1e9}],
                      "daemon": {"host_join": "anyone"}})
    with pytest.raises(ValidationError, match="no hosts"):
        parse_config({"daemon": {"host_join": "allow-list"}})
    with pytest.raises(ValidationError, match="host_leave_s"):
        parse_config({"daemon": {"host_leave_s": 1.0, "heartbeat_timeout_s": 2.0}})


@pytest.mark.parametrize("policy", ["jit", "sincronia"])
def test_status_cli_and_metrics_show_the_hosts_that_joined_and_left(policy, capsys):
    from jitsched.bench.bench_faults import free_ports
    from jitsched.cli import main
    from tests.test_daemon import _get

    port = free_ports(1)[0]
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT), policy=policy, metrics_port=port))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h0, h9 = agent("h0"), agent("h9", join=True)
        h8 = agent("h8", join=True, leave_on_exit=True)
        assert wait_until(lambda: all(a.registered.is_set() for a in (h0, h9, h8)), 5.0)
        c.submit_job(_job("j", "h9", "h0"))
        assert wait_until(lambda: "j/t" in _flows(h9), 5.0)
        h8.stop()
        assert h8.left
        want = ('jitsched_hosts{count="in_cluster"} 3.0', 'jitsched_hosts{count="hosts_joined"} 2.0',
                'jitsched_hosts{count="hosts_left"} 1.0')
        assert wait_until(lambda: all(w in _get(port) for w in want), 3.0), _get(port)
        assert main(["status", "--daemon", d.job_endpoint]) == 0
        assert not any(d.state.plan_book.plans_failed.values())
    out = capsys.readouterr().out
    assert "hosts: 3 in the cluster (2 configured, join open), 1 joined, 1 left" in out
    assert "joined h9 2/1 Gbit/s" in out and "left   h8: its agent said it leaves" in out


@pytest.mark.parametrize("policy", ["jit", "jit-paper"])
def test_hosts_joining_while_jobs_arrive_and_plans_run_break_no_plan(policy):
    # each join grows the cluster under plans in flight (incremental and joint): a plan
    # made before the join is installed with rows for the new hosts, and every later one
    # plans on the grown cluster
    d = Daemon(config(cluster=Cluster.uniform(2, bps=GBIT), policy=policy))
    with _fabric(d) as agent, Client(d.job_endpoint, timeout_s=5.0) as c:
        h0 = agent("h0")
        joined = []
        for i in range(6):
            joined.append(agent(f"n{i}", join=True))
            c.submit_job(_job(f"old{i}", "h0", "h1", 5e8))
            assert wait_until(joined[-1].registered.is_set, 5.0)
            c.submit_job(_job(f"new{i}", f"n{i}", "h0" if i % 2 else "h1", 5e8))
        want = {f"new{i}/t" for i in range(6)}
        assert wait_until(lambda: all(f"new{i}/t" in _flows(a) for i, a in enumerate(joined)), 10.0), \
            [_flows(a) for a in joined]
        assert wait_until(lambda: {f"old{i}/t" for i in range(6)} <= set(_flows(h0)), 10.0)
        st = c.status()
        assert not any(d.state.plan_book.plans_failed.values()), st.get("last_plan_error")
        assert all(st["jobs"][j.split("/")[0]]["state"] == "running" for j in want)
        sched = d.state.plan_book.schedule
        assert sched is not None and sched.leftover_egress.shape[0] == len(d.state.cluster) == 8


def test_a_join_with_a_bad_name_or_capacity_or_past_max_hosts_is_refused_naming_why():
    from tests.test_daemon_security import ask, raw_dealer

    d = Daemon(config(cluster=Cluster.uniform(1, bps=GBIT), max_hosts=2))
    with _fabric(d), raw_dealer(d.agent_endpoint, None) as s:
        for body, needle in (({"host": "a/b", "egress_bps": GBIT, "ingress_bps": GBIT}, "body.host"),
                             ({"host": "x" * 200, "egress_bps": GBIT, "ingress_bps": GBIT}, "body.host"),
                             ({"host": "n1", "egress_bps": 1e300, "ingress_bps": GBIT}, "body.egress_bps"),
                             ({"host": "n1", "egress_bps": GBIT, "ingress_bps": 0}, "body.ingress_bps"),
                             # positive, but 0 bytes/s once divided by 8
                             ({"host": "n1", "egress_bps": 5e-324, "ingress_bps": GBIT}, "body.egress_bps"),
                             ({"host": "n1", "egress_bps": GBIT}, "body.ingress_bps")):
            rep = ask(s, "register", body)
            assert rep.code == ErrorCode.INVALID_BODY and needle in rep.message, (body, rep)
        assert len(d.state.cluster) == 1 and d.state.hosts.counts["joins_refused"] == 6
        assert ask(s, "register", {"host": "n1", "egress_bps": GBIT, "ingress_bps": GBIT}).ok
        assert len(d.state.cluster) == 2
        # [limits] max_hosts: 2 here, so a third host is refused
        rep = ask(s, "register", {"host": "n2", "egress_bps": GBIT, "ingress_bps": GBIT})
        assert rep.code == ErrorCode.OVERLOADED and "max_hosts" in rep.message and len(d.state.cluster) == 2
