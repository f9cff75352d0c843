"""Tests of recurring jobs in the daemon: templates, iterations on the ranks in force, learned timings, the journal."""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitsched.policies  # noqa: F401 - registers the policies
from jitsched.client import Client
from jitsched.config import FULL, DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import create_policy
from jitsched.daemon.state import SchedulerState, run_increment, run_plan
from jitsched.daemon.templates import JOURNAL_EVERY
from jitsched.dag.model import Cluster
from jitsched.errors import RemoteError
from jitsched.plan.learn import learned_job
from jitsched.protocol import ErrorCode
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job
from tests.test_daemon import config

CLUSTER = Cluster.uniform(3, bps=1e9)


def _state(policy: str = "jit", **kw):
    cfg = DaemonConfig(cluster=CLUSTER, slot_s=0.1, policy=policy, **kw)
    st = SchedulerState(cfg, t0_wall_s=0.0)
    pol = create_policy(cfg)  # as the daemon makes it (re-plans whenever asked)
    st.templates.ranks_only = pol.ranks_only()
    st.incremental_ok = pol.plans_increments()
    return st, pol


def _plan(st, pol, now: float) -> int:
    """Run every plan the state asks for at ``now``; returns how many."""
    n = 0
    for _ in range(4):
        reqs = st.plan_requests(now)
        if not reqs:
            break
        for req in reqs:
            res = run_plan(pol, req, CLUSTER) if req.mode == FULL else run_increment(pol, req, CLUSTER)
            assert not res.error, res.error
            st.install(res, now)
            n += 1
    return n


def _job(jid="r", src="h1", dst="h2"):
    return layer_chain_job(jid, src, dst, VGG16_LAYERS[:4])


def test_an_iteration_runs_on_the_ranks_in_force_without_a_plan():
    st, pol = _state("jit")
    job = _job()
    assert st.register_template({"job": job.to_dict()}, 0.0) == {"job_id": "r"}
    assert _plan(st, pol, 0.0) >= 1
    seq, sched = st.schedule_seq, st.schedule
    ranked = {k: v for k, v in sched.prio.items() if k[0] == "r"}
    assert len(ranked) == len(job.transfers)
    nc = len(job.computes)
    for n in range(1, 6):
        got = st.iteration({"job_id": "r", "n": n, "compute_s": [0.01] * nc, "step_s": 0.05}, 0.1 * n)
        assert got == {"n": n, "counted": True, "ranked": True, "seq": seq}
        # nothing for the planner: no trigger, no pending arrival
        assert not st.plan_book.reasons and not st.plan_book.pending
    assert _plan(st, pol, 1.0) == 0 and st.schedule is sched
    # a resend is answered, not counted again
    assert st.iteration({"job_id": "r", "n": 5}, 1.1)["counted"] is False
    summary = st.status({}, 1.2)["jobs"]["r"]["recurring"]
    assert summary["iterations"] == 5 and summary["iteration_s_mean"] == pytest.approx(0.05)
    assert summary["learned_from"] == "computes" and summary["estimate_error"] is not None


def test_per_node_progress_is_reset_for_the_next_iteration_and_relisted():
    st, pol = _state("jit")
    job = _job()
    st.register_template({"job": job.to_dict()}, 0.0)
    _plan(st, pol, 0.0)
    t0 = job.transfers[0].id
    st.transfer_started({"job_id": "r", "transfer": t0}, 0.01)
    st.transfer_finished({"job_id": "r", "transfer": t0}, 0.02)
    st.plan_book.trigger("tick", 0.03)
    _plan(st, pol, 0.03)
    assert ("r", t0) not in st.schedule.prio  # done: no longer listed
    st.iteration({"job_id": "r", "n": 1}, 0.1)
    js = st.jobs["r"]
    assert not js.done and not js.started and sum(js.out_left.values()) == len(job.transfers)
    assert "iteration" in st.plan_book.reasons
    _plan(st, pol, 0.1)
    assert ("r", t0) in st.schedule.prio


@pytest.mark.parametrize("policy", ["jit", "jit-paper"])
def test_learned_estimates_plan_as_a_fresh_submission_of_them(policy):
    job = _job()
    nc = len(job.computes)
    truth = np.linspace(0.02, 0.3, nc)
    st, pol = _state(policy, planning=FULL)  # full plans: the policy keeps its last plan
    st.register_template({"job": job.to_dict()}, 0.0)
    _plan(st, pol, 0.0)
    rng = np.random.default_rng(1)
    for n in range(1, 9):
        st.iteration({"job_id": "r", "n": n, "compute_s": (truth * (1 + 0.1 * rng.standard_normal(nc))).tolist()},
                     0.5 * n)
    t = st.templates.get("r")
    mean, std = t.model.estimates()
    assert np.allclose(mean, truth, rtol=0.2)
    assert "r" in st.templates.stale  # rebuilt when a plan takes it, not per iteration
    now = 5.0
    st.plan_book.trigger("tick", now)
    _plan(st, pol, now)
    planned = st.jobs["r"].job
    assert [c.duration_s for c in planned.computes] == pytest.approx(mean.tolist())
    assert not st.templates.stale
    # the same DAG with the same estimates, submitted afresh to another daemon state
    fresh, fpol = _state(policy, planning=FULL)
    fresh.submit_job({"job": learned_job(job, mean, std).to_dict()}, now)
    _plan(fresh, fpol, now)

    def flows(sched):
        return {(f[0], f[1]): (f[4], np.asarray(f[5]).round(6).tolist()) for f in sched.flows}

    assert flows(st.schedule) == flows(fresh.schedule) and len(flows(st.schedule)) >= 4
    assert st.schedule.prio == fresh.schedule.prio
    if policy == "jit-paper":
        # the LATs planned with are the same, and not those of the declared durations
        assert np.array_equal(pol.plan.lat.lat, fpol.plan.lat.lat, equal_nan=True)
        declared, dpol = _state(policy, planning=FULL)
        declared.submit_job({"job": job.to_dict()}, now)
        _plan(declared, dpol, now)
        assert not np.allclose(dpol.plan.lat.lat, pol.plan.lat.lat, equal_nan=True)


def _refused(got, code, field):
    assert not isinstance(got, dict), got
    assert got.code == code and field in got.message, got


def test_bad_iterations_are_refused_naming_the_field_and_change_nothing():
    st, pol = _state("jit")
    job = _job()
    st.register_template({"job": job.to_dict()}, 0.0)
    st.submit_job({"job": _job("plain", "h0", "h2").to_dict()}, 0.0)
    _plan(st, pol, 0.0)
    nc, nt = len(job.computes), len(job.transfers)
    st.iteration({"job_id": "r", "n": 1, "compute_s": [0.01] * nc}, 0.1)
    before = (st.templates.get("r").model.compute.mean.copy(), st.jobs["r"].job, st.schedule_seq)
    _refused(st.iteration({"job_id": "nope", "n": 2}, 0.2), ErrorCode.UNKNOWN_JOB, "nope")
    _refused(st.iteration({"job_id": "plain", "n": 1}, 0.2), ErrorCode.UNKNOWN_JOB, "body.job_id")
    _refused(st.iteration({"job_id": "r", "n": 0}, 0.2), ErrorCode.INVALID_BODY, "body.n")
    _refused(st.iteration({"job_id": "r", "n": 2 ** 64}, 0.2), ErrorCode.INVALID_BODY, "body.n")
    cases = [("compute_s", [0.01] * (nc - 1)), ("compute_s", [0.01] * (nc - 1) + [-1.0]),
             ("compute_s", [0.01] * (nc - 1) + [math.nan]), ("compute_s", [0.01] * (nc - 1) + [math.inf]),
             ("compute_s", [0.01] * (nc - 1) + [1e9]), ("compute_s", [0.01] * (nc - 1) + ["x"]),
             ("compute_s", [0.01] * (nc - 1) + [True]),
             ("bytes", [1e6] * (nt - 1) + [1e30]), ("transfer_s", [-0.5] * nt), ("step_s", -1.0),
             ("step_s", math.nan)]
    for key, val in cases:
        _refused(st.iteration({"job_id": "r", "n": 2, key: val}, 0.2), ErrorCode.INVALID_BODY, f"body.{key}")
    t = st.templates.get("r")
    assert t.iterations == 1 and np.array_equal(t.model.compute.mean, before[0])
    assert st.jobs["r"].job is before[1] and st.schedule_seq == before[2]
    assert not st.plan_book.reasons
    # an ended template
    st.job_finished({"job_id": "r"}, 0.3)
    _refused(st.iteration({"job_id": "r", "n": 2}, 0.4), ErrorCode.JOB_ENDED, "body.job_id")
    # a template over [limits]: refused like a submission, naming the field
    small, _ = _state("jit", max_job_nodes=3)
    _refused(small.register_template({"job": job.to_dict()}, 0.0), ErrorCode.INVALID_JOB, "body.job")
    assert not small.jobs and not small.templates.templates


def test_step_times_alone_scale_the_declared_durations():
    st, pol = _state("jit-paper")
    job = _job()
    st.register_template({"job": job.to_dict()}, 0.0)
    t = st.templates.get("r")
    declared = t.model.declared
    for n in range(1, 4):
        st.iteration({"job_id": "r", "n": n, "step_s": 3.0 * t.model.declared_step_s}, float(n))
    mean, _ = t.model.estimates()
    assert mean == pytest.approx(3.0 * declared)
    assert t.summary()["learned_from"] == "steps"
    assert "iteration" in st.plan_book.reasons  # a timed plan (jit-paper) starts anew
    req = next(r for r in st.plan_requests(4.0) if r.mode == FULL)
    assert [c.duration_s for c in req.jobs[0][0].computes] == pytest.approx((3.0 * declared).tolist())
    assert [c.duration_s for c in st.jobs["r"].job.computes] == pytest.approx((3.0 * declared).tolist())


def test_templates_and_their_counts_survive_a_daemon_restart(tmp_path):
    path = tmp_path / "journal.db"
    cfg = config(journal=str(path), planner_process=False, policy="jit")
    job = _job("rec", "h0", "h1")
    nc = len(job.computes)
    n_it = JOURNAL_EVERY + 3
    d = Daemon(cfg).start()
    try:
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            assert c.register_template(job) == "rec"
            for n in range(1, n_it + 1):
                got = c.iteration("rec", n, compute_s=[0.02 * (i + 1) for i in range(nc)], step_s=0.1)
                assert got["n"] == n and got["counted"]
            with pytest.raises(RemoteError) as err:
                c.iteration("rec", n_it + 1, compute_s=[-1.0] * nc)
            assert err.value.code == ErrorCode.INVALID_BODY and "body.compute_s[0]" in str(err.value)
            learned = d.state.templates.get("rec").model.compute.mean.copy()
    finally:
        d.stop()
    d = Daemon(cfg).start()
    try:
        t = d.state.templates.get("rec")
        assert d.state.restored == ["rec"] and t.iterations == n_it
        # a clean stop journalled the count and statistics of the last iteration
        assert t.model.compute.n == n_it
        assert np.allclose(t.model.compute.mean, learned)
        assert [c.duration_s for c in d.state.jobs["rec"].job.computes] == pytest.approx(learned.tolist())
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            assert c.iteration("rec", n_it, step_s=0.1)["counted"] is False
            assert c.iteration("rec", n_it + 1, step_s=0.1)["n"] == n_it + 1
            rec = c.request("status")["jobs"]["rec"]["recurring"]
            assert rec["iterations"] == n_it + 1 and rec["iteration_s_p95"] == pytest.approx(0.1)
            c.job_finished("rec")
            with pytest.raises(RemoteError) as err:
                c.iteration("rec", n_it + 2)
            assert err.value.code == ErrorCode.JOB_ENDED
    finally:
        d.stop()


def test_a_killed_daemon_resumes_a_recurring_job_from_its_last_journalled_iteration(tmp_path):
    # the count and statistics go to the journal every JOURNAL_EVERY iterations (each would
    # be an etcd transaction on a replica's loop): a daemon killed in between loses the
    # iterations since, and the job's next report sets the count again
    from jitsched.daemon.journal import Journal

    cfg = config(journal=str(tmp_path / "journal.db"), policy="jit")
    job = _job("rec", "h0", "h1")
    nc = len(job.computes)
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    st.templates.ranks_only = True  # as the daemon sets it for jit: an iteration re-plans nothing
    assert st.register_template({"job": job.to_dict()}, 0.0)["job_id"] == "rec"
    # its first write comes within JOURNAL_EVERY iterations, at a phase its row sets
    first = JOURNAL_EVERY - st.jobs["rec"].journal_row % JOURNAL_EVERY
    for n in range(1, JOURNAL_EVERY + 4):
        assert st.iteration({"job_id": "rec", "n": n, "compute_s": [0.02] * nc, "step_s": 0.1}, 0.1 * n)["counted"]
    st.journal.close()  # killed: no flush_iterations
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    st.templates.ranks_only = True
    try:
        t = st.templates.get("rec")
        assert 3 < first < JOURNAL_EVERY + 4 <= first + JOURNAL_EVERY
        assert t.iterations == first and t.model.compute.n == first
        got = st.iteration({"job_id": "rec", "n": JOURNAL_EVERY + 4, "compute_s": [0.02] * nc}, 5.0)
        assert got["counted"] and got["n"] == JOURNAL_EVERY + 4
        # a clean stop writes what moved since: the next start has it exactly
        assert st.flush_iterations() == 1 and st.flush_iterations() == 0
    finally:
        st.journal.close()
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    try:
        assert st.templates.get("rec").iterations == JOURNAL_EVERY + 4
    finally:
        st.journal.close()


def test_jobs_registered_together_journal_their_counts_at_iterations_of_their_own(tmp_path):
    from jitsched.daemon.journal import Journal

    cfg = config(journal=str(tmp_path / "journal.db"), policy="jit")
    st = SchedulerState(cfg, journal=Journal(cfg.journal))
    st.templates.ranks_only = True
    written: list[tuple[str, int]] = []
    real = st.journal.template

    def template(row, iterations, learned=None, *, later=False):
        if iterations:
            written.append((row, iterations))
        return real(row, iterations, learned, later=later)

    st.journal.template = template
    jobs = [_job(f"r{i}", "h0", "h1") for i in range(JOURNAL_EVERY)]
    for job in jobs:
        assert "job_id" in st.register_template({"job": job.to_dict()}, 0.0)
    nc = len(jobs[0].computes)
    for n in range(1, 2 * JOURNAL_EVERY + 1):
        for job in jobs:
            st.iteration({"job_id": job.id, "n": n, "compute_s": [0.02] * nc}, 0.1 * n)
    firsts = {}
    for row, n in written:
        firsts.setdefault(row, n)
    # each job once within its first JOURNAL_EVERY iterations, then every JOURNAL_EVERY; no
    # two jobs at the same iteration
    assert sorted(firsts.values()) == list(range(1, JOURNAL_EVERY + 1))
    assert all(sorted(n for r, n in written if r == row) == [f, f + JOURNAL_EVERY] for row, f in firsts.items())


def test_a_best_effort_job_is_ranked_as_normal_once_it_has_waited_with_no_other_event():
    # h0's egress: a normal job of 1 GB and a best-effort job of 100 MB (0.8 s on the wire,
    # 1.0 s alone with its computes). First the normal one ranks first; after be_age (10)
    # times the best-effort job's time alone a re-solve is due with no event, and it ranks
    # as normal: smaller, first
    from tests.test_daemon_limits import tiny_job

    st, pol = _state("jit")
    assert "job_id" in st.submit_job({"job": tiny_job("n", 1e9, src="h0", dst="h1")}, 0.0)
    assert "job_id" in st.submit_job({"job": tiny_job("b", 1e8, src="h0", dst="h2") | {"class": "best-effort"}},
                                     0.0)
    assert _plan(st, pol, 0.0) >= 1

    def ranks() -> dict[str, int]:
        return {job: st.schedule.prio[(job, "t")] for job in ("n", "b")}

    assert ranks()["n"] < ranks()["b"]
    assert _plan(st, pol, 9.5) == 0  # nothing to do before it
    assert ranks()["n"] < ranks()["b"]
    assert _plan(st, pol, 10.5) == 1
    assert ranks()["b"] < ranks()["n"] and st.plan_summary["reasons"] == ["ranks_due"]
    assert st.plan_book.changes_at_s == math.inf  # no best-effort job left to age


def test_an_iteration_timed_by_the_daemon_after_a_gap_in_the_counts_is_each_iteration_s_share():
    # no step_s: the daemon times the gap between reports; reports that did not come (dropped
    # while the daemon was away, merged) leave a gap of several iterations, each its share
    st, pol = _state("jit")
    st.register_template({"job": _job().to_dict()}, 0.0)
    for n, now in ((1, 1.0), (2, 2.0), (10, 10.0), (11, 11.0)):
        assert st.iteration({"job_id": "r", "n": n}, now)["counted"]
    rec = st.templates.get("r").summary()
    assert rec["iterations"] == 11
    assert rec["iteration_s_mean"] == pytest.approx(1.0) and rec["iteration_s_p95"] == pytest.approx(1.0)


def test_learned_estimates_past_the_submission_limits_are_not_planned_with():
    # a job of these estimates would be refused at submission (max_plan_slots): its
    # iterations' reports do not make the planner take it
    from jitsched.daemon.limits import check_job
    from tests.test_daemon_limits import tiny_job

    st, pol = _state("jit-paper")
    cfg = st.config
    assert st.register_template({"job": tiny_job("r")}, 0.0) == {"job_id": "r"}
    big = cfg.max_compute_s
    for n in range(1, 40):
        st.iteration({"job_id": "r", "n": n, "compute_s": [big, big], "transfer_s": [big],
                      "bytes": [cfg.max_transfer_bytes]}, 0.1 * n)
    _plan(st, pol, 5.0)
    js = st.job_registry.jobs["r"]
    assert check_job(js.job, cfg) is None
    assert st.schedule.leftover_egress.shape[1] <= cfg.max_plan_slots
    # and the job's status says its learned estimates were not planned with
    assert st.status({}, 5.0)["jobs"]["r"]["recurring"]["estimates_over_limits"] >= 1
