"""Tests of jitsched.workloads.synth: the layer chain with and without gradient pushes, and random jobs of many workers."""

from __future__ import annotations

from collections import Counter

import pytest

from jitsched.dag.model import Cluster, compile_jobs
from jitsched.workloads.shapes import MIXED, SHAPES, ShapeOptions
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job, random_vgg16_jobs

PARAM_BYTES = 4 * sum(w + b for w, b in VGG16_LAYERS)


def test_pushes_send_each_layers_gradients_back_after_its_backward_op():
    plain = layer_chain_job("j", "h0", "h1")
    job = layer_chain_job("j", "h0", "h1", pushes=True)
    assert len(plain.transfers) == 32 and len(job.transfers) == 64
    assert sum(t.bytes for t in job.transfers if t.src == "h1") == PARAM_BYTES
    assert sum(t.bytes for t in job.transfers if t.src == "h0") == PARAM_BYTES
    assert ("bwd15", "push_w15") in job.edges and ("bwd0", "push_b0") in job.edges
    assert plain.computes == job.computes


def test_random_jobs_without_shapes_are_the_one_worker_jobs():
    names = Cluster.uniform(6).names
    assert random_vgg16_jobs(4, names, seed=1) == random_vgg16_jobs(4, names, seed=1, shapes=ShapeOptions())


def test_random_mixed_jobs_take_every_shape_on_distinct_hosts():
    cl = Cluster.uniform(8)
    jobs = random_vgg16_jobs(12, cl.names, seed=4, shapes=ShapeOptions(MIXED, 3, 2))
    shapes = Counter(j.id.rsplit("-", 1)[0].split("-", 1)[1] for j in jobs)
    assert set(shapes) == set(SHAPES)
    for j in jobs:
        workers = {c.host for c in j.computes}
        assert len(workers) == 3
        total = sum(t.bytes for t in j.transfers)
        if "allreduce" in j.id:
            assert total == pytest.approx(2 * 2 * PARAM_BYTES)  # 2(N-1) x the gradients
        else:
            assert total == pytest.approx(3 * 2 * PARAM_BYTES)
    compile_jobs(jobs, cl)
