"""Tests of learned timings: the running mean then EWMA, its state, and the job planned with it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jitsched.errors import ValidationError
from jitsched.plan.learn import Ewma, LearnOptions, TimingModel, learned_job, weighted_error
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job


def test_ewma_is_the_running_mean_then_follows_drift():
    opts = LearnOptions(halflife=2.0)
    e = Ewma(np.array([100.0]), opts)
    for x in (1.0, 3.0):
        e.add(np.array([x]))
    assert e.mean[0] == pytest.approx(2.0) and e.var[0] == pytest.approx(1.0)  # prior forgotten
    for _ in range(30):
        e.add(np.array([10.0]))
    assert e.mean[0] == pytest.approx(10.0, rel=1e-3)  # drift followed within a few half-lives
    assert e.std[0] < 0.05


def test_options_are_checked():
    for bad in (dict(halflife=0), dict(halflife=math.nan), dict(replan_rtol=-1), dict(halflife=True)):
        with pytest.raises(ValidationError):
            LearnOptions(**bad)


def test_noisy_durations_converge_and_state_round_trips():
    job = layer_chain_job("j", "h0", "h1", VGG16_LAYERS[:6], min_compute_s=0.01)
    truth = np.array([c.duration_s for c in job.computes])
    model = TimingModel(learned_job(job, 2 * truth, np.zeros_like(truth)), LearnOptions())
    rng = np.random.default_rng(0)
    assert weighted_error(model.estimates()[0], truth) == pytest.approx(1.0)
    for _ in range(20):
        model.observe(compute_s=truth * np.maximum(1 + 0.2 * rng.standard_normal(len(truth)), 0))
    assert weighted_error(model.estimates()[0], truth) < 0.05
    assert 0 <= model.error < 0.5  # the last iteration's prediction error
    assert model.moved()
    planned = model.learned_job()
    assert not model.moved()
    assert [c.duration_s for c in planned.computes] == pytest.approx(model.estimates()[0].tolist())
    copy = TimingModel(job, LearnOptions())
    copy.restore(model.state())
    assert np.array_equal(copy.estimates()[0], model.estimates()[0]) and copy.compute.n == 20
    with pytest.raises(ValueError):
        TimingModel(layer_chain_job("k", "h0", "h1", VGG16_LAYERS[:2]), LearnOptions()).restore(model.state())
