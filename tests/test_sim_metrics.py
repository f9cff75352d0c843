"""Tests of the per-slot remaining-bandwidth metric on hand-computed scenarios (1 Gbit/s = 1.25e8 bytes/s)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload
from jitsched.policies import POLICIES
from jitsched.sim import simulate
from jitsched.sim.metrics import REMAINING_SLOT_S, SlotLog, quantile_summary, remaining_slots
from tests.test_sim_engine import random_workload

GB = 1.25e8  # bytes/s of 1 Gbit/s


def one_transfer(size: float, compute_s: float | None = None, arrival_s: float = 0.0) -> Job:
    """A job sending ``size`` bytes h0 -> h1, then (optionally) computing ``compute_s`` on h1."""
    if compute_s is None:
        return Job("j", (), (Transfer("t", "h0", "h1", size),), (), arrival_s, 0.0, "m")
    return Job("j", (Compute("c", "h1", compute_s),), (Transfer("t", "h0", "h1", size),),
               (("t", "c"),), arrival_s, 0.0, "m")


def run(jobs, bgs=(), policy="tensorflow"):
    return simulate(Workload(Cluster.uniform(5), tuple(jobs), tuple(bgs)), policy)


def test_slot_constant():
    assert REMAINING_SLOT_S == 0.1


def test_alone_one_full_slot():
    # 1.25e7 bytes at 1.25e8 bytes/s: 0.1 s, exactly the one slot of the window [0, 0.1]
    res = run([one_transfer(1.25e7)])
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0], atol=1e-9)
    assert len(res.remaining_bw_contended) == 0
    assert res.remaining_bw_slot_s == 0.1


def test_alone_partial_slot_then_compute():
    # 1.875e7 bytes: [0, 0.1] full (0), [0.1, 0.15] half of the slot [0.1, 0.2] (0.5);
    # the compute (0.5 s) keeps the window open to 0.65 but sends nothing
    res = run([one_transfer(1.875e7, compute_s=0.5)])
    assert res.window_s == pytest.approx((0.0, 0.65))
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0, 0.5], atol=1e-9)


def test_alone_window_ends_mid_slot():
    # no compute: the window ends at 0.15, so the last slot is [0.1, 0.15] and full
    res = run([one_transfer(1.875e7)])
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0, 0.0], atol=1e-9)


def test_fair_share_with_background_is_contended():
    # tensorflow: the DL transfer (1.25e8) and a file (2.5e8) share h0's egress:
    # 6.25e7 bytes/s each until the transfer ends at 2.0 s -> 20 slots at 0.5, all contended.
    # A file h3 -> h4 sends all along, on another host: it contends nothing on h0.
    bgs = [Background("f", "h0", "h2", 2.5e8, 0.0), Background("g", "h3", "h4", 1e9, 0.0)]
    res = run([one_transfer(1.25e8, compute_s=0.5)], bgs)
    np.testing.assert_allclose(res.jct_s, [2.5])
    np.testing.assert_allclose(res.remaining_bw_slots, np.full(20, 0.5), atol=1e-9)
    np.testing.assert_allclose(res.remaining_bw_contended, np.full(20, 0.5), atol=1e-9)
    # the old metric: 1.25e8 bytes over a 2.5 s window at 1.25e8 bytes/s on h0
    assert res.remaining_bw[0] == pytest.approx(1 - 1.25e8 / (GB * 2.5))
    s = res.summary()
    assert s["remaining_bw_slots"] == pytest.approx({"p5": 0.5, "p25": 0.5, "median": 0.5, "n": 20})
    assert s["remaining_bw_contended"]["n"] == 20


def test_grid_starts_at_first_arrival():
    # the job arrives at 0.05 while the file sends since 0: slots [0.05 + 0.1 k, ...];
    # fair share from 0.05, the transfer ends at 2.05 -> 20 slots at 0.5
    bgs = [Background("f", "h0", "h2", 5e8, 0.0)]
    res = run([one_transfer(1.25e8, compute_s=0.5, arrival_s=0.05)], bgs)
    np.testing.assert_allclose(res.remaining_bw_slots, np.full(20, 0.5), atol=1e-9)
    np.testing.assert_allclose(res.remaining_bw_contended, np.full(20, 0.5), atol=1e-9)


def test_background_ending_on_a_grid_instant():
    # DL 2.5e7 bytes from 0; a file of 6.25e6 bytes arrives at 0.1 and shares until it ends at 0.2:
    # [0, 0.1] alone (sent 1.25e7 -> 0), [0.1, 0.2] half (6.25e6 -> 0.5, contended),
    # [0.2, 0.25] the last 6.25e6 at full rate (-> 0.5 over the slot, background gone: not contended)
    bgs = [Background("f", "h0", "h2", 6.25e6, 0.1)]
    res = run([one_transfer(2.5e7, compute_s=0.5)], bgs)
    np.testing.assert_allclose(res.bg_finish_s, [0.2])
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0, 0.5, 0.5], atol=1e-9)
    np.testing.assert_allclose(res.remaining_bw_contended, [0.5], atol=1e-9)


def test_two_hosts_host_major_order():
    # h0 sends 1.25e7 (one slot, 0); h2 sends 3.125e7 to h3 (0.25 s: 0, 0, 0.5)
    j0 = one_transfer(1.25e7, compute_s=0.5)
    j1 = Job("k", (Compute("c", "h3", 0.5),), (Transfer("t", "h2", "h3", 3.125e7),),
             (("t", "c"),), 0.0, 0.0, "m")
    res = run([j0, j1])
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0, 0.0, 0.0, 0.5], atol=1e-9)


def test_no_jobs_no_samples():
    res = run([], [Background("f", "h0", "h2", 1e7, 0.0)])
    assert len(res.remaining_bw_slots) == 0 and len(res.remaining_bw_contended) == 0
    assert res.summary()["remaining_bw_slots"] is None


def test_quantile_summary():
    assert quantile_summary(np.zeros(0)) is None
    q = quantile_summary(np.arange(101) / 100)
    assert q == pytest.approx({"p5": 0.05, "p25": 0.25, "median": 0.5, "n": 101})


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_samples_in_range_every_policy(policy):
    wl = random_workload(3, n_bg=3)
    res = simulate(wl, policy, seed=3)
    assert len(res.remaining_bw_slots) > 0
    assert np.all(res.remaining_bw_slots >= 0) and np.all(res.remaining_bw_slots < 1)
    # the contended samples are a sub-multiset of the slot samples
    assert len(res.remaining_bw_contended) <= len(res.remaining_bw_slots)
    assert np.all(np.isin(res.remaining_bw_contended, res.remaining_bw_slots))
    # slots partition the window: every DAG byte is in one; only the last slot
    # (per host at most one) is shorter than slot_s, which this bound charges in full
    est = np.sum(1 - res.remaining_bw_slots) * GB * res.remaining_bw_slot_s
    assert res.transfer_size.sum() * (1 - 1e-9) <= est <= res.transfer_size.sum() + 5 * GB * 0.1


def test_slot_log_keeps_an_idle_stretchs_first_and_last_two_samples():
    log = SlotLog()
    busy = [np.array([0.0, 1.0]), np.array([0.0, 2.0])]
    idle = np.array([0.0, 2.0])
    for t, dag in enumerate(busy + [idle] * 5 + [np.array([1.0, 2.0])]):
        log.add(float(t), dag, np.full(2, float(t)))
    # 0, 1 busy; 1..6 the same integrals: 1 (its first), 5 and 6 (its last two); then 7
    assert log.times == [0.0, 1.0, 5.0, 6.0, 7.0]
    assert [float(b[0]) for b in log.background] == log.times  # each kept sample whole


def _plain_log(times, dag, bg) -> SlotLog:
    log = SlotLog()
    log.times, log.dag, log.background = list(times), list(dag), list(bg)
    return log


@pytest.mark.parametrize("seed", range(40))
def test_merging_idle_samples_changes_no_slot(seed):
    # grid instants with idle stretches (no DAG bytes anywhere) and busy ones, then the
    # window's end: on a grid instant, a float crumb after one (dropped as a sliver), or mid-slot
    rng = np.random.default_rng(seed)
    n, nh = int(rng.integers(3, 40)), 3
    times = [0.1 * k for k in range(n)]
    end = rng.choice(["on", "crumb", "mid"])
    times.append(times[-1] + {"on": 0.0, "crumb": 1e-12, "mid": 0.05}[end])
    dag, bg = [np.zeros(nh)], [np.zeros(nh)]
    for _ in times[1:]:
        step = np.where(rng.random(nh) < 0.5, rng.uniform(0, 1.25e7, nh), 0.0)
        if rng.random() < 0.6:  # an idle slot
            step[:] = 0.0
        dag.append(dag[-1] + step)
        bg.append(bg[-1] + np.where(rng.random(nh) < 0.5, rng.uniform(0, 1.25e7, nh), 0.0))
    if end == "crumb" and rng.random() < 0.5:
        dag[-1] = dag[-1] + 0.02  # a few bytes in the sliver
    merged = SlotLog()
    for t, d, b in zip(times, dag, bg, strict=True):
        merged.add(t, d, b)
    cap = np.full(nh, 1.25e8)
    want = remaining_slots(_plain_log(times, dag, bg), cap, 0.0, times[-1])
    got = remaining_slots(merged, cap, 0.0, times[-1])
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(a, b)


def _every_grid_instant(self, now):
    # the simulator's sampling without the idle shortcut: one sample per grid instant
    while self.next_slot <= now:
        self.sample_slot(self.next_slot)
        self.slot_k += 1
        self.next_slot = self.slots.origin + self.slots.slot_s * self.slot_k


def _append(self, t, dag, background):
    self.times.append(float(t))
    self.dag.append(dag)
    self.background.append(background)


def gappy_workload(seed: int) -> Workload:
    """Random jobs in three bursts seconds apart, background flows sending across the gaps."""
    base = random_workload(seed, n_jobs=6, n_bg=4)
    jobs = tuple(replace(j, arrival_s=j.arrival_s + 7.33 * (k % 3)) for k, j in enumerate(base.jobs))
    bgs = tuple(replace(b, arrival_s=b.arrival_s + 5.1 * k, bytes=b.bytes * 20) for k, b in enumerate(base.background))
    return Workload(base.cluster, jobs, bgs)


@pytest.mark.parametrize("policy", ["jit", "sincronia", "tensorflow"])
@pytest.mark.parametrize("seed", [1, 2])
def test_idle_stretches_give_the_results_of_sampling_every_grid_instant(policy, seed, monkeypatch):
    from dataclasses import fields

    import jitsched.sim.engine as engine

    samples = []
    real = engine.collect

    def spy(sim, raw):
        samples.append(len(raw["slots"].times))
        return real(sim, raw)

    monkeypatch.setattr(engine, "collect", spy)
    wl = gappy_workload(seed)
    fast = simulate(wl, policy, seed=seed)
    monkeypatch.setattr(engine._Run, "sample_grid", _every_grid_instant)
    monkeypatch.setattr(SlotLog, "add", _append)
    slow = simulate(wl, policy, seed=seed)
    assert len(slow.remaining_bw_slots) > 0
    assert samples[0] < samples[1] / 2  # the gaps' grid instants were skipped
    for f in fields(fast):
        if f.name in ("wall_s", "policy_s", "lp_s", "stats"):
            continue
        a, b = getattr(fast, f.name), getattr(slow, f.name)
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg=f.name)
        else:
            assert a == b, f.name


def test_a_long_idle_gap_costs_a_few_samples(monkeypatch):
    import jitsched.sim.engine as engine

    logs = []
    real = engine.collect

    def spy(sim, raw):
        logs.append(raw["slots"])
        return real(sim, raw)

    monkeypatch.setattr(engine, "collect", spy)
    # 0.1 s each, 1000 s apart: 10^4 grid instants, all but a few idle
    res = run([one_transfer(1.25e7), replace(one_transfer(1.25e7), id="k", arrival_s=1000.0)])
    np.testing.assert_allclose(res.jct_s, [0.1, 0.1])
    np.testing.assert_allclose(res.remaining_bw_slots, [0.0, 0.0], atol=1e-9)
    assert len(logs[0].times) <= 8


@pytest.mark.parametrize("seed", range(20))
def test_a_full_slot_log_doubles_its_step_keeping_every_byte(seed):
    # grid instants 0.1 s apart (some idle), then the window's end mid-slot, each sampled
    # while on the log's grid: a log of at most 8 samples holds those of the coarser
    # grid it ends on, as they were
    rng = np.random.default_rng(seed)
    n, nh = int(rng.integers(10, 80)), 3
    times = [0.1 * k for k in range(n)] + [0.1 * (n - 1) + 0.05]
    dag, bg = [np.zeros(nh)], [np.zeros(nh)]
    for _ in times[1:]:
        idle = rng.random() < 0.3
        dag.append(dag[-1] + (0.0 if idle else rng.uniform(0, 1.25e7, nh)))
        bg.append(bg[-1] + rng.uniform(0, 1.25e7, nh))
    log = SlotLog(max_samples=8)
    log.origin = 0.0
    for k, (t, d, b) in enumerate(zip(times, dag, bg, strict=True)):
        if k == n or k % round(log.slot_s / 0.1) == 0:  # the instants of its grid, as the simulator
            log.add(t, d, b)
    assert 1 <= log.coarsened and len(log.times) <= 8
    assert log.slot_s == pytest.approx(0.1 * 2 ** log.coarsened)
    assert log.times[-1] == times[-1] and log.times[0] == 0.0
    for t in log.times[:-1]:  # on the coarse grid, each sample the one taken there
        assert (t / log.slot_s) == pytest.approx(round(t / log.slot_s))
    at = {t: k for k, t in enumerate(times)}
    for t, d, b in zip(log.times, log.dag, log.background, strict=True):
        np.testing.assert_array_equal(d, dag[at[t]])
        np.testing.assert_array_equal(b, bg[at[t]])
    # the slots still partition the window: the DAG bytes they count are all of them
    cap = np.full(nh, 1.25e8)
    slots, _ = remaining_slots(log, cap, 0.0, times[-1])
    assert len(slots) > 0 and np.all((slots >= 0) & (slots <= 1))


def test_a_long_run_keeps_a_bounded_log_and_the_same_schedule(monkeypatch):
    import jitsched.sim.metrics as metrics

    base = random_workload(5, n_bg=2)  # its transfers 30x as large: a few hundred slots
    wl = replace(base, jobs=tuple(replace(j, transfers=tuple(replace(t, bytes=t.bytes * 30) for t in j.transfers))
                                  for j in base.jobs))
    plain = simulate(wl, "jit", seed=5)
    monkeypatch.setattr(metrics, "MAX_SLOT_SAMPLES", 16)
    small = simulate(wl, "jit", seed=5)
    np.testing.assert_array_equal(plain.jct_s, small.jct_s)  # sampling never moves a byte
    np.testing.assert_array_equal(plain.bg_jct_s, small.bg_jct_s)
    k = round(math.log2(small.remaining_bw_slot_s / REMAINING_SLOT_S))
    assert k >= 1 and small.remaining_bw_slot_s == pytest.approx(REMAINING_SLOT_S * 2 ** k)
    assert plain.remaining_bw_slot_s == REMAINING_SLOT_S
    assert len(small.remaining_bw_slots) < len(plain.remaining_bw_slots)
    assert small.summary()["remaining_bw_slot_s"] == small.remaining_bw_slot_s
    # every DAG byte is in one of the longer slots too
    est = np.sum(1 - small.remaining_bw_slots) * GB * small.remaining_bw_slot_s
    assert small.transfer_size.sum() * (1 - 1e-9) <= est <= small.transfer_size.sum() + 5 * GB * small.remaining_bw_slot_s
