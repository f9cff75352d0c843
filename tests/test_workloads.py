"""Tests of the model DAG templates and the §4.1 job-stream generator."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.dag.model import compile_jobs, parse_workload
from jitsched.errors import ValidationError
from jitsched.workloads.paper import (
    FILE_SIZES_BITS,
    MODELS,
    arrival_rate,
    generate_arrivals,
    generate_workload,
    load_model_job,
    model_bytes,
    model_shaped_bytes,
    model_template,
    time_scale_for,
)
from jitsched.workloads.shapes import MIXED, SHAPES, ShapeOptions


@pytest.mark.parametrize("name", MODELS)
def test_load_model_job_rehosts_the_template(name):
    t = model_template(name)
    j = load_model_job(name, "h3", "h9", f"{name}-7", 4.5)
    assert (j.id, j.model, j.arrival_s) == (f"{name}-7", name, 4.5)
    assert {c.host for c in j.computes} == {"h9"}
    assert {(x.src, x.dst) for x in j.transfers} == {("h3", "h9"), ("h9", "h3")}
    assert [x.bytes for x in j.transfers] == [x.bytes for x in t.transfers]
    assert [c.duration_s for c in j.computes] == [c.duration_s for c in t.computes]
    assert j.edges == t.edges
    # parameter reads go ps -> worker in the template
    reads = {x.id for x in t.transfers if x.src == "ps"}
    assert {x.id for x in j.transfers if x.src == "h3"} == reads


def test_template_is_cached_and_defaults():
    assert model_template("vgg16") is model_template("vgg16")
    j = load_model_job("lenet", "a", "b")
    assert j.id == "lenet" and j.arrival_s == 0.0
    k = load_model_job("inception", "a", "b", "i-0")
    assert k.model == "inception_v3" and len(k.transfers) == len(model_template("inception_v3").transfers)


def test_load_model_job_errors():
    with pytest.raises(ValidationError, match="distinct hosts"):
        load_model_job("lenet", "h1", "h1", "x", 0.0)
    with pytest.raises(ValidationError, match="unknown model 'googlenet'"):
        load_model_job("googlenet", "h1", "h2", "x", 0.0)


def test_time_scale():
    assert time_scale_for(80e9) == pytest.approx(0.01)
    with pytest.raises(ValidationError):
        time_scale_for(0.0)


def test_arrival_rate_definition():
    mean_dl = np.mean([model_bytes(m) for m in MODELS])
    mean_file = np.mean(FILE_SIZES_BITS) / 8
    cap = 100 * 1e9 / 8
    rate = arrival_rate(0.6, background_share=0.3)
    assert rate == pytest.approx(0.6 * cap / (0.7 * mean_dl + 0.3 * mean_file))
    assert arrival_rate(0.5, background_share=0.0, models=("lenet",)) == pytest.approx(
        0.5 * cap / model_bytes("lenet"))
    assert arrival_rate(0.5, background_share=1.0) == pytest.approx(0.5 * cap / mean_file)


def test_generated_stream_statistics():
    load, share, n = 0.7, 0.4, 20000
    arr = generate_arrivals(load, n_jobs=n, background_share=share, seed=11)
    assert len(arr) == n
    times = np.array([a.arrival_s for a in arr])
    assert np.all(np.diff(times) > 0)
    gaps = np.diff(np.concatenate([[0.0], times]))
    rate = arrival_rate(load, background_share=share)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    # exponential gaps: coefficient of variation 1
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)
    kinds = Counter(a.kind for a in arr)
    assert kinds["file"] / n == pytest.approx(share, abs=0.015)
    for m in MODELS:
        assert kinds[m] / n == pytest.approx((1 - share) / len(MODELS), abs=0.01)
    sizes = Counter(a.bytes for a in arr if a.kind == "file")
    assert set(sizes) == {b / 8 for b in FILE_SIZES_BITS}
    for c in sizes.values():
        assert c / kinds["file"] == pytest.approx(0.2, abs=0.02)
    # offered bytes per second over total capacity is the load asked for
    offered = sum(a.bytes for a in arr) / times[-1]
    assert offered / (100 * 1e9 / 8) == pytest.approx(load, rel=0.06)
    hosts = Counter(h for a in arr for h in (a.src, a.dst))
    assert set(hosts) == {f"h{i}" for i in range(100)}
    assert all(a.src != a.dst for a in arr)


def test_stream_is_reproducible():
    a = generate_arrivals(0.5, n_jobs=200, seed=3)
    assert a == generate_arrivals(0.5, n_jobs=200, seed=3)
    assert a != generate_arrivals(0.5, n_jobs=200, seed=4)


def test_duration_bound():
    arr = generate_arrivals(0.5, duration_s=30.0, seed=1)
    assert arr and all(a.arrival_s < 30.0 for a in arr)
    rate = arrival_rate(0.5)
    assert len(arr) == pytest.approx(30.0 * rate, rel=0.35)


def test_generate_workload_is_a_valid_native_workload():
    w = generate_workload(0.5, n_jobs=40, n_hosts=10, background_share=0.3, seed=5)
    assert len(w.cluster) == 10 and w.cluster.hosts[0].egress_bps == 1e9
    assert len(w.jobs) + len(w.background) == 40
    arr = generate_arrivals(0.5, n_jobs=40, n_hosts=10, background_share=0.3, seed=5)
    dl = [a for a in arr if a.kind != "file"]
    assert [(j.id, j.model, j.arrival_s) for j in w.jobs] == [
        (f"{a.kind}-{a.index}", a.kind, a.arrival_s) for a in dl]
    for j, a in zip(w.jobs, dl, strict=True):
        assert {c.host for c in j.computes} == {a.dst}
        assert sum(t.bytes for t in j.transfers) == a.bytes
    assert all(b.id.startswith("file-") and b.bytes in {s / 8 for s in FILE_SIZES_BITS}
               for b in w.background)
    again = parse_workload(w.to_dict())
    assert again == w
    compile_jobs(w.jobs, w.cluster)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), share=st.floats(0, 1), n_hosts=st.integers(2, 20),
       load=st.floats(0.05, 2.0))
def test_stream_properties(seed, share, n_hosts, load):
    arr = generate_arrivals(load, n_jobs=30, n_hosts=n_hosts, background_share=share, seed=seed)
    assert [a.index for a in arr] == list(range(30))
    assert all(0 < x.arrival_s < y.arrival_s for x, y in pairwise(arr))
    assert all(a.src != a.dst and int(a.src[1:]) < n_hosts and int(a.dst[1:]) < n_hosts
               for a in arr)
    if share == 0:
        assert all(a.kind != "file" for a in arr)
    if share == 1:
        assert all(a.kind == "file" for a in arr)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"load": 0.5}, "exactly one of n_jobs and duration_s"),
    ({"load": 0.5, "n_jobs": 3, "duration_s": 1.0}, "exactly one"),
    ({"load": 0.0, "n_jobs": 3}, "load must be positive"),
    ({"load": float("nan"), "n_jobs": 3}, "load must be positive"),
    ({"load": 0.5, "n_jobs": 3, "background_share": 1.5}, "background_share"),
    ({"load": 0.5, "n_jobs": 3, "n_hosts": 1}, "at least 2 hosts"),
    ({"load": 0.5, "n_jobs": -1}, "n_jobs must be >= 0"),
    ({"load": float("inf"), "n_jobs": 3}, "load must be finite, got inf"),
    # one host: a generator that let the infinite window through would stop at the
    # host count, not run until memory is gone
    ({"load": 0.5, "duration_s": float("inf"), "n_hosts": 1}, "duration_s must be a finite number >= 0"),
    ({"load": 0.5, "duration_s": float("nan"), "n_hosts": 1}, "duration_s must be a finite number >= 0"),
    ({"load": 0.5, "n_jobs": 3, "models": ("lenet", "bert")}, "unknown model 'bert'"),
    # refused before a job is drawn: a huge finite window or count would fill the memory
    ({"load": 0.5, "duration_s": 1e300}, r"duration_s: the stream would hold \d\.\d+e\+\d+ jobs, more than 1,000,000"),
    ({"load": 0.5, "n_jobs": 10**12}, "n_jobs: the stream would hold 1e\\+12 jobs, more than 1,000,000"),
])
def test_generator_errors(kwargs, pattern):
    load = kwargs.pop("load")
    with pytest.raises(ValidationError, match=pattern):
        generate_arrivals(load, **kwargs)


def test_the_default_shape_leaves_the_one_worker_stream_as_it_was():
    plain = generate_arrivals(0.5, n_jobs=60, n_hosts=12, seed=7)
    assert generate_arrivals(0.5, n_jobs=60, n_hosts=12, seed=7, shapes=ShapeOptions()) == plain
    assert generate_workload(0.5, n_jobs=20, n_hosts=12, seed=7, shapes=ShapeOptions()) == generate_workload(
        0.5, n_jobs=20, n_hosts=12, seed=7)


def test_shaped_streams_offer_the_load_asked_for():
    # the rate counts each shape's bytes: N workers' pulls and pushes, or a ring's 2(N-1)/N per worker
    load, n = 0.6, 6000
    shapes = ShapeOptions(MIXED, 4, 3)
    arr = generate_arrivals(load, n_jobs=n, background_share=0.3, seed=2, shapes=shapes)
    times = np.array([a.arrival_s for a in arr])
    offered = sum(a.bytes for a in arr) / times[-1]
    assert offered / (100 * 1e9 / 8) == pytest.approx(load, rel=0.06)
    dl = [a for a in arr if a.kind != "file"]
    counts = Counter(a.shape for a in dl)
    assert set(counts) == set(SHAPES) and all(c / len(dl) == pytest.approx(1 / 3, abs=0.03)
                                              for c in counts.values())
    for a in dl:
        assert len(a.workers) == 4 and len(a.servers) == shapes.n_servers(a.shape)
        assert len(set(a.servers + a.workers)) == len(a.servers) + 4
        assert a.bytes == pytest.approx(model_shaped_bytes(a.kind, a.shape, 4))
    ring = next(a for a in dl if a.shape == "allreduce" and a.kind == "vgg16")
    push = sum(t.bytes for t in model_template("vgg16").transfers if t.src == "worker")
    assert ring.bytes == pytest.approx(4 * 2 * 3 / 4 * push)


@pytest.mark.parametrize("shape", SHAPES + (MIXED,))
def test_shaped_workloads_are_valid_and_place_the_jobs_on_the_drawn_hosts(shape):
    shapes = ShapeOptions(shape, 3, 2 if shape in ("ps-sharded", MIXED) else 1)
    w = generate_workload(0.5, n_jobs=16, n_hosts=8, models=("lenet", "alexnet"), seed=3, shapes=shapes)
    arr = generate_arrivals(0.5, n_jobs=16, n_hosts=8, models=("lenet", "alexnet"), seed=3, shapes=shapes)
    dl = [a for a in arr if a.kind != "file"]
    assert [j.id for j in w.jobs] == [f"{a.kind}-{a.shape}-{a.index}" for a in dl]
    for j, a in zip(w.jobs, dl, strict=True):
        assert {c.host for c in j.computes} == set(a.workers)
        assert {h for t in j.transfers for h in (t.src, t.dst)} == set(a.servers + a.workers)
        assert sum(t.bytes for t in j.transfers) == pytest.approx(a.bytes)
    assert parse_workload(w.to_dict()) == w
    compile_jobs(w.jobs, w.cluster)


def test_shaped_streams_need_hosts_for_every_server_and_worker():
    with pytest.raises(ValidationError, match=r"need at least 6 hosts for ps-sharded jobs of 4 workers "
                                              r"\(hosts per job: ps-sharded 6\), got 5"):
        generate_arrivals(0.5, n_jobs=5, n_hosts=5, shapes=ShapeOptions("ps-sharded", 4, 2))
    # a mixed stream says which shape needs the hosts; a ring has no server to count
    with pytest.raises(ValidationError, match=r"of 4 workers \(hosts per job: ps 5, ps-sharded 6, allreduce 4\)"):
        generate_arrivals(0.5, n_jobs=5, n_hosts=4, shapes=ShapeOptions("mixed", 4, 2))
    with pytest.raises(ValidationError, match=r"ps-sharded jobs of 1 worker \("):
        generate_arrivals(0.5, n_jobs=5, n_hosts=4, shapes=ShapeOptions("ps-sharded", 1, 4))
    # files alone need two hosts whatever the shape
    assert generate_arrivals(0.5, n_jobs=5, n_hosts=2, background_share=1.0,
                             shapes=ShapeOptions("allreduce", 4))
