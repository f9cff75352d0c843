"""Announced background flows: the daemon holds them, the default jit ranks them among the jobs
(Smith's rule, as the simulator ranks files) and their senders' agents get the ranks."""

import pytest

from jitsched.client import Client
from jitsched.daemon.background import BackgroundTable
from jitsched.daemon.reject import Reject
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.errors import RemoteError
from jitsched.protocol import ErrorCode, background_flow_id
from tests.test_daemon import config, system
from tests.test_daemon_incremental import LINE, one_transfer, settled

MB = 1e6


def ranks_on(agent) -> dict[str, int]:
    body = agent.schedule or {"flows": []}
    return {f["flow"]: f["prio"] for f in body["flows"]}


def test_jit_ranks_announced_flows_among_the_jobs_by_smiths_rule():
    # Keys by hand (BG_REF_S 8 s of the 125 MB/s line = 1000 MB; bg_weight 0.5, job_exp 1.75):
    # the job's one group 100 MB x (100 MB / 1000 MB) ** 1.75 = 1.8 MB; a 50 MB file
    # 50 x 0.05 x 0.5 = 1.25 MB (first), a 500 MB file 500 x 0.5 x 0.5 = 125 MB (last).
    with system(policy="jit", joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(one_transfer("big", 100 * MB, src="h1", dst="h2"))
        assert wait_until(lambda: d.state.schedule_seq and settled(d), 5.0)
        assert c.background_started("small", "h1", "h2", 50 * MB) == {"flows": 1}
        assert c.background_started("large", "h1", "h3", 500 * MB) == {"flows": 2}
        want = {background_flow_id("small"): 0, "big/t": 1, background_flow_id("large"): 2}
        assert wait_until(lambda: ranks_on(agents["h1"]) == want and settled(d), 5.0), ranks_on(agents["h1"])
        assert background_flow_id("small") == "/small"
        # the receivers' agents hold their inbound flows in the same order (ranks dense per host)
        def inbound(h):
            return {f["flow"]: f["prio"] for f in agents[h].schedule["in_flows"]}
        assert inbound("h2") == {"/small": 0, "big/t": 1} and inbound("h3") == {"/large": 0}
        st = c.status()["background"]
        assert (st["held"], st["announced"], st["finished"]) == (2, 2, 0)
        # a finished flow leaves every body; the job keeps its rank among what is left
        assert c.background_finished("small") == {"held": True}
        assert c.background_finished("small") == {"held": False}
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"big/t": 0, "/large": 1} and settled(d), 5.0), \
            ranks_on(agents["h1"])
        assert c.status()["background"]["finished"] == 1


def test_a_flows_rank_follows_the_bytes_it_says_it_has_left():
    # Smith's key with what is left: a 200 MB file 200 x 0.2 x 0.5 = 20 MB, behind the
    # 100 MB job's 100 x 0.1 ** 1.75 = 1.8 MB; with 15 MB left 15 x 0.2 x 0.5 = 1.5 MB, ahead of it
    with system(policy="jit", joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(one_transfer("job", 100 * MB, src="h1", dst="h2"))
        c.background_started("f", "h1", "h3", 200 * MB)
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"job/t": 0, "/f": 1} and settled(d), 5.0)
        # a progress report is no new flow; it re-solves once the last re-solve is
        # PROGRESS_REPLAN_S old (here at once: the test's clock is the daemon's)
        d.state.plan_book.last_plan_s = -10.0
        c.background_started("f", "h1", "h3", 200 * MB, left=15 * MB)
        assert d.state.background.counts["announced"] == 1 and d.state.background.flows["f"].left == 15 * MB
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"/f": 0, "job/t": 1} and settled(d), 5.0), \
            ranks_on(agents["h1"])
        # reports within PROGRESS_REPLAN_S of the last re-solve only update the key
        n = d.state.n_plans
        d.state.plan_book.last_plan_s = d.now()
        c.background_started("f", "h1", "h3", 200 * MB, left=10 * MB)
        assert d.state.background.flows["f"].left == 10 * MB
        assert not wait_until(lambda: d.state.n_plans > n, 0.3)


def test_an_arrival_keeps_the_announced_flows_ranks_until_the_joint_resolve():
    # the increment that admits a job ranks it after everything ranked, the announced
    # flows included (an increment that dropped them would leave them unranked a moment)
    with system(policy="jit", joint_replan_s=60.0) as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(one_transfer("a", 100 * MB, src="h1", dst="h2"))
        c.background_started("f", "h1", "h3", 500 * MB)
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"a/t": 0, "/f": 1} and settled(d), 5.0)
        results = []
        adopt = d.state._adopt

        def spy(res, now):
            results.append(res)
            adopt(res, now)

        d.state._adopt = spy
        c.submit_job(one_transfer("b", 10 * MB, src="h1", dst="h2"))
        assert wait_until(lambda: any(r.mode == "full" for r in results) and settled(d), 5.0)
        inc = next(r for r in results if r.mode == "incremental")
        assert inc.schedule.prio[("", "f")] == 1 and inc.schedule.prio[("b", "t")] == 2
        # jointly: b (10 MB x 0.01 = 0.1 MB) first, a (10 MB), the file (125 MB)
        assert ranks_on(agents["h1"]) == {"b/t": 0, "a/t": 1, "/f": 2}


def test_sincronia_ranks_announced_flows_as_coflows():
    # BSSI by hand, one port (h1's egress, 125 MB/s): the 1 MB file (8 ms) and the 100 MB
    # job (0.8 s) as two coflows: the smaller bottleneck goes first
    with system(policy="sincronia") as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(one_transfer("a", 100 * MB, src="h1", dst="h2"))
        c.background_started("f", "h1", "h2", 1 * MB)
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"/f": 0, "a/t": 1} and settled(d), 5.0), \
            ranks_on(agents["h1"])
        assert not any(d.state.plan_book.plans_failed.values())


def test_policies_that_do_not_rank_background_leave_it_out():
    # TicTac orders jobs only: an announced flow stays background the agents put last
    with system(policy="tictac") as (d, agents), Client(d.job_endpoint) as c:
        c.submit_job(one_transfer("a", 100 * MB, src="h1", dst="h2"))
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"a/t": 0} and settled(d), 5.0)
        n = d.state.n_plans
        c.background_started("f", "h1", "h2", 1 * MB)
        # a re-solve with the announcement in its view, and still only the job ranked
        assert wait_until(lambda: d.state.n_plans > n and settled(d), 5.0)
        assert ranks_on(agents["h1"]) == {"a/t": 0}
        assert not any(d.state.plan_book.plans_failed.values())


def test_bad_announcements_are_refused_with_the_field():
    with system(policy="jit", hosts=("h0", "h1")) as (d, _), Client(d.job_endpoint) as c:
        for args, code, word in ((("f", "h9", "h1", 1.0), ErrorCode.UNKNOWN_HOST, "body.src"),
                                 (("f", "h1", "h1", 1.0), ErrorCode.INVALID_BODY, "body.dst"),
                                 (("f", "h0", "h1", 0.0), ErrorCode.INVALID_BODY, "body.bytes"),
                                 (("f", "h0", "h1", 2e12), ErrorCode.INVALID_BODY, "body.bytes"),
                                 (("x" * 300, "h0", "h1", 1.0), ErrorCode.INVALID_BODY, "body.flow")):
            with pytest.raises(RemoteError) as err:
                c.background_started(*args)
            assert err.value.code == code and word in str(err.value)
        assert c.status()["background"]["held"] == 0


def table(**kw) -> BackgroundTable:
    return BackgroundTable(config(cluster=Cluster.uniform(3), **kw))


def body(name="f", src="h0", dst="h1", nbytes=LINE):
    return {"flow": name, "src": src, "dst": dst, "bytes": nbytes}


def test_table_expires_flows_whose_sender_never_finished():
    t = table(background_ttl_s=10.0)
    t.start(body("old"), 0.0)
    t.start(body("new"), 5.0)
    t.start(body("kept"), 1.0)
    t.start({**body("kept"), "left": 1.0}, 8.0)  # a progress report renews it
    assert t.expire(9.9) == []
    assert t.expire(10.0) == ["old"] and [f.name for f in t.snapshot()] == ["new", "kept"]
    assert t.flows["kept"].started_s == 1.0
    assert t.expire(17.9) == ["new"] and t.expire(18.0) == ["kept"]
    assert t.counts == {"announced": 3, "restored": 0, "finished": 0, "expired": 3, "dropped": 0}


def test_table_limits_owners_and_reannouncement():
    t = table(max_background=2)
    a = t.start(body("a", nbytes=5.0), 0.0, peer="alice")
    assert (a.src, a.dst, a.bytes, a.owner) == (0, 1, 5.0, "alice")
    assert isinstance(t.start(body("b"), 0.0, peer="bob"), type(a))
    full = t.start(body("c"), 0.0)
    assert isinstance(full, Reject) and full.code == ErrorCode.OVERLOADED
    # each client's names are its own: held by their client-scoped names
    assert set(t.flows) == {"alice:a", "bob:b"} and a.name == "alice:a"
    # the owner may announce its flow again (replacing it) even at the limit; bob's "a" is
    # another flow (a new one past the limit), and bob's finish of "a" ends none of alice's
    again = t.start(body("a", nbytes=2.0), 1.0, peer="alice")
    assert again.bytes == 2.0 and len(t.flows) == 2
    got = t.start(body("a"), 1.0, peer="bob")
    assert isinstance(got, Reject) and got.code == ErrorCode.OVERLOADED
    assert t.finish({"flow": "a"}, peer="bob") is False and "alice:a" in t.flows
    # progress: the bytes left, within the size; the first announcement's time stays
    step = t.start({**body("a", nbytes=2.0), "left": 0.5}, 7.0, peer="alice")
    assert (step.left, step.started_s, t.counts["announced"]) == (0.5, 0.0, 2)
    bad = t.start({**body("a", nbytes=2.0), "left": 3.0}, 7.0, peer="alice")
    assert isinstance(bad, Reject) and "body.left" in bad.message
    assert t.finish({"flow": "a"}, peer="alice") is True and t.finish({"flow": "a"}, peer="alice") is False


def test_status_cli_and_metrics_show_the_announced_flows(capsys):
    from jitsched.cli import main
    from tests.test_daemon import _free_port, _get

    port = _free_port()
    with system(policy="jit", hosts=("h0", "h1"), metrics_port=port) as (d, _), Client(d.job_endpoint) as c:
        c.background_started("a", "h0", "h1", 1 * MB)
        c.background_started("b", "h1", "h0", 1 * MB)
        c.background_finished("b")
        want = ('jitsched_background_flows{count="held"} 1.0', 'jitsched_background_flows{count="announced"} 2.0',
                'jitsched_background_flows{count="finished"} 1.0')
        assert wait_until(lambda: all(w in _get(port) for w in want), 3.0), _get(port)
        assert main(["status", "--daemon", d.job_endpoint]) == 0
    out = capsys.readouterr().out
    assert "background: 1 announced flow held (2 announced, 1 finished, 0 expired unfinished)" in out


@pytest.mark.parametrize("policy", ["jit", "sincronia"])
def test_announced_flows_alone_rank_among_themselves(policy):
    # no job at all: the two files still get an order at their sender (smaller first, by
    # Smith's rule under jit, as one-flow coflows under Sincronia), not TCP's fair share
    with system(policy=policy) as (d, agents), Client(d.job_endpoint) as c:
        c.background_started("big", "h1", "h2", 100 * MB)
        c.background_started("small", "h1", "h3", 1 * MB)
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"/small": 0, "/big": 1} and settled(d), 5.0), \
            ranks_on(agents["h1"])
        c.background_finished("small")
        assert wait_until(lambda: ranks_on(agents["h1"]) == {"/big": 0} and settled(d), 5.0)
        c.background_finished("big")
        assert wait_until(lambda: ranks_on(agents["h1"]) == {} and settled(d), 5.0)
        assert not any(d.state.plan_book.plans_failed.values())
