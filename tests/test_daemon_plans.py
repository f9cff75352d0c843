"""Tests of the plan book's pure schedule operations: pruning what went, merging an increment."""

import numpy as np

from jitsched.daemon.plans import merge_schedules, prune_schedule
from jitsched.dag.model import Cluster
from jitsched.policies.base import SlotSchedule

C = 1e9 / 8  # Cluster.uniform's line rate, bytes/s


def test_prune_gives_the_capacity_back_and_drops_ranks_and_misses_of_what_went():
    cluster = Cluster.uniform(3)
    flows = [("a", "t", 0, 1, 1, np.array([0.25 * C, 0.5 * C])), ("b", "t", 0, 2, 0, np.array([0.5 * C])),
             ("c", "t", 2, 1, 0, np.zeros(0))]
    left_e = np.array([[0.5, 0.75, 0.5], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]) * C
    left_i = np.array([[1.0, 1.0, 1.0], [1.0, 0.75, 0.5], [0.5, 1.0, 1.0]]) * C
    sched = SlotSchedule(0.0, 0.1, flows, left_e, left_i,
                         late=[{"job": "a", "transfer": "t", "lateness_s": 0.1},
                               {"job": "b", "transfer": "t", "lateness_s": 0.2}],
                         prio={("a", "t"): 0, ("b", "t"): 1, ("c", "t"): 2})
    out, hosts = prune_schedule(sched, np.array([False, True, False]), cluster)
    assert [f[:2] for f in out.flows] == [("b", "t")] and hosts == {0, 1, 2}
    # a's 0.25 and 0.5 C back on h0's egress in slots 1-2 and h1's ingress; c had no rates
    assert np.allclose(out.leftover_egress / C, [[0.5, 1.0, 1.0], [1, 1, 1], [1, 1, 1]])
    assert np.allclose(out.leftover_ingress / C, [[1, 1, 1], [1.0, 1.0, 1.0], [0.5, 1.0, 1.0]])
    assert out.prio == {("b", "t"): 1} and out.late == [{"job": "b", "transfer": "t", "lateness_s": 0.2}]
    # never mutated, and all live: the very same schedule back
    assert sched.prio == {("a", "t"): 0, ("b", "t"): 1, ("c", "t"): 2} and len(sched.flows) == 3
    assert prune_schedule(sched, np.ones(3, dtype=bool), cluster) == (sched, set())


def test_merge_puts_the_increment_on_the_base_with_its_leftover():
    base = SlotSchedule(1.0, 0.1, [("a", "t", 0, 1, 0, np.zeros(0))], np.zeros((2, 0)), np.zeros((2, 0)),
                        prio={("a", "t"): 0})
    inc = SlotSchedule(1.0, 0.1, [("b", "t", 1, 0, 0, np.zeros(0))], np.zeros((2, 0)), np.zeros((2, 0)),
                       prio={("b", "t"): 1}, solve_s=0.5)
    out = merge_schedules(base, inc)
    assert [f[0] for f in out.flows] == ["a", "b"] and out.prio == {("a", "t"): 0, ("b", "t"): 1}
    assert out.solve_s == 0.5 and out.epoch_s == 1.0


def _caps_of(book) -> dict:
    """A request's caps as :meth:`PlanBook._caps` gives them, the configuration's switches
    (caps sent, the critical floor: the defaults) checked and left out."""
    got = book._caps()
    assert got["send_caps"] is True and got["held_floor"] == book.config.critical_floor == 0.01
    return {"caps_into": got["caps_into"], "caps_changed": got["caps_changed"]}


def test_a_plan_in_force_with_caps_since_lifted_asks_for_an_increment():
    # a full re-solve asked for while h1 was held lands after the increment that lifted
    # the cap: its bodies put the cap back, so another increment must send them all again
    from jitsched.daemon.plans import FULL, PlanResult
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon import config

    book = SchedulerState(config(policy="jit")).plan_book
    caps = [((1, 0.0, 0.0),)]
    book._caps_now = lambda: caps[0]
    book.plan_seq = book.inflight[FULL] = 5
    assert _caps_of(book) == {"caps_into": caps[0], "caps_changed": True}
    caps[0] = ()
    book.plan_seq = 6
    assert _caps_of(book) == {"caps_into": (), "caps_changed": True}
    book._caps_installed(PlanResult(6, None, {}, 0.0, ()))
    assert not book.caps_due
    book._caps_installed(PlanResult(5, None, {}, 0.0, ()))
    assert book.caps_due and book.caps_requested == ((1, 0.0, 0.0),)
    book.inflight[FULL] = 0
    book.plan_seq = 7
    assert _caps_of(book) == {"caps_into": (), "caps_changed": True}
    assert book._caps_of == {7: ()}


def test_caps_a_failed_plan_carried_are_asked_for_again():
    from jitsched.daemon.plans import INCREMENTAL, PlanResult
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon import config

    book = SchedulerState(config(policy="jit")).plan_book
    caps = [((1, 0.0, 0.0, ("a",)),)]
    book._caps_now = lambda: caps[0]
    book.plan_seq = book.inflight[INCREMENTAL] = 3
    assert book._caps()["caps_changed"] and not book.caps_due
    book.install(PlanResult(3, None, {}, 0.0, ("caps",), error="boom", mode=INCREMENTAL), 1.0, lambda r, t: None)
    # the agents never got h1's cap: the next increment asks for it and sends every body
    assert book.caps_due and book.caps_in_force == () and book.caps_requested == ()
    book.plan_seq = 4
    assert _caps_of(book) == {"caps_into": caps[0], "caps_changed": True}


def test_a_full_plan_overtaken_by_a_caps_increment_is_not_undone_by_it():
    # planning "full": a caps increment (a critical job's transfer arrived) is asked for on
    # the schedule in force while a full re-solve that plans a new job n is in flight; the
    # full result comes first. The increment, planned on the older schedule, never takes
    # n's flows out of the plan: n stays covered and its sender's body keeps its flow.
    from jitsched.config import INCREMENTAL
    from jitsched.daemon.server import create_policy
    from jitsched.daemon.solver import run_increment, run_plan
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon import config
    from tests.test_daemon_jobs import critical
    from tests.test_daemon_limits import tiny_job

    cfg = config(policy="jit", critical_assumed_share=1.0, planning="full")
    st, policy = SchedulerState(cfg), create_policy(cfg)

    def run(req):
        solve = run_increment if req.mode == INCREMENTAL else run_plan
        return solve(policy, req, req.cluster or cfg.cluster, t0_wall_s=st.t0_wall_s)

    assert st.submit_job({"job": critical("c", "h0", "h1")}, 0.0)["class"] == "critical"
    [first] = st.plan_requests(0.0)
    assert st.install(run(first), 0.01)
    assert st.submit_job({"job": tiny_job("n", 1e8, src="h2", dst="h3")}, 0.1) == {"job_id": "n"}
    [full] = st.plan_requests(0.1)
    st.transfer_finished({"job_id": "c", "transfer": "t"}, 0.2)
    [caps] = st.plan_requests(0.2)
    assert (full.mode, caps.mode) == ("full", INCREMENTAL)
    done_full, done_caps = run(full), run(caps)
    assert st.install(done_full, 0.3)
    assert st.install(done_caps, 0.31)
    for t in (0.4, 0.5):  # whatever else is due (the full result's rebase) goes in too
        for req in st.plan_requests(t):
            assert st.install(run(req), t)
    assert "n" in st.covered
    assert ("n", "t") in [f[:2] for f in st.schedule.flows]
    assert [f["flow"] for f in st.host_body("h2")["flows"]] == ["n/t"]
