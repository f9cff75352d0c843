"""Tests of jitsched.workloads.shapes: byte totals of each shape, the DAGs' structure and invariants, LAT kernels against references."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jitsched.dag.lat import latest_arrival_times
from jitsched.dag.model import (
    Cluster,
    Compute,
    Host,
    Job,
    Transfer,
    Workload,
    compile_jobs,
    parse_job,
    topological_order,
)
from jitsched.errors import ValidationError
from jitsched.reference import (
    lat_bruteforce,
    lat_exact_reference,
    lat_paper_reference,
    topological_order_reference,
)
from jitsched.sim import simulate
from jitsched.workloads.paper import load_shaped_job, model_template
from jitsched.workloads.shapes import (
    SHAPES,
    ShapeOptions,
    expand_job,
    ps_roles,
    shape_hosts,
    shape_of,
    shaped_bytes,
)
from jitsched.workloads.synth import layer_chain_job

HOSTS = Cluster.uniform(8)


def pulls_pushes(job: Job) -> tuple[float, float]:
    server, worker = ps_roles(job)
    return (sum(t.bytes for t in job.transfers if t.src == server),
            sum(t.bytes for t in job.transfers if t.src == worker))


def sent_received(job: Job) -> tuple[Counter, Counter]:
    sent, got = Counter(), Counter()
    for t in job.transfers:
        sent[t.src] += t.bytes
        got[t.dst] += t.bytes
    return sent, got


def test_ps_with_n_workers_moves_every_pull_and_push_once_per_worker():
    t = model_template("lenet")
    pull, push = pulls_pushes(t)
    job = expand_job(t, "ps", ["h0"], ["h1", "h2", "h3"], job_id="L")
    sent, got = sent_received(job)
    for w in ("h1", "h2", "h3"):
        assert got[w] == pytest.approx(pull) and sent[w] == pytest.approx(push)
    assert sent["h0"] == pytest.approx(3 * pull) and got["h0"] == pytest.approx(3 * push)
    assert len(job.computes) == 3 * len(t.computes) and len(job.transfers) == 3 * len(t.transfers)
    assert {c.host for c in job.computes if c.id.startswith("w2/")} == {"h3"}
    assert sum(sent.values()) == pytest.approx(shaped_bytes(pull, push, "ps", 3))


@pytest.mark.parametrize("servers", [2, 3])
def test_sharded_ps_splits_the_bytes_across_servers(servers):
    t = model_template("vgg16")
    pull, push = pulls_pushes(t)
    names = [f"s{i}" for i in range(servers)]
    job = expand_job(t, "ps-sharded", names, ["w0", "w1"])
    sent, got = sent_received(job)
    for s in names:  # each server holds about 1/M of the parameters, and gets 1/M of the gradients
        assert sent[s] == pytest.approx(2 * pull / servers, rel=0.01)
        assert got[s] == pytest.approx(2 * push / servers, rel=0.01)
    assert sum(sent.values()) == pytest.approx(shaped_bytes(pull, push, "ps-sharded", 2))
    # the 411 MB fully connected tensor is split evenly over all servers
    big = max(t.transfers, key=lambda x: x.bytes)
    parts = [x for x in job.transfers if x.id.startswith(f"w0/{big.id}#")]
    assert len(parts) == servers and {x.src for x in parts} == set(names)
    assert all(x.bytes == pytest.approx(big.bytes / servers) for x in parts)
    # a slice keeps the whole tensor's dependencies
    consumers = {b for a, b in t.edges if a == big.id}
    for x in parts:
        assert {b[3:] for a, b in job.edges if a == x.id} == consumers
    # a small tensor is not split: it lives whole on one server
    small = min(t.transfers, key=lambda x: x.bytes)
    assert len([x for x in job.transfers if x.id.startswith(f"w0/{small.id}#")]) == 1


@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_allreduce_moves_2_n_minus_1_over_n_of_the_gradients_per_worker(n):
    t = model_template("alexnet")
    pull, push = pulls_pushes(t)
    workers = [f"h{i}" for i in range(n)]
    opts = ShapeOptions("allreduce", n, bucket_bytes=40e6)
    job = expand_job(t, "allreduce", [], workers, options=opts)
    sent, got = sent_received(job)
    for w in workers:
        assert sent[w] == pytest.approx(2 * (n - 1) / n * push)
        assert got[w] == pytest.approx(2 * (n - 1) / n * push)
    assert sum(sent.values()) == pytest.approx(shaped_bytes(pull, push, "allreduce", n))
    # no parameter reads: each worker has its own copy; every step goes to the ring's next worker
    assert all(x.dst == workers[(workers.index(x.src) + 1) % n] for x in job.transfers)
    buckets = {x.id.split("/")[0] for x in job.transfers}
    # 40 MB buckets: alexnet's 244 MB of gradients in several (a larger tensor is a bucket alone)
    assert len(buckets) > 1 and len(job.transfers) == len(buckets) * 2 * (n - 1) * n
    chunks = {b: {x.bytes for x in job.transfers if x.id.startswith(b + "/")} for b in buckets}
    assert all(len(c) == 1 for c in chunks.values())  # every step of a bucket moves the same chunk
    # step s of worker k waits for its own step s-1 and the chunk worker k-1 sent it
    pred = {}
    for a, b in job.edges:
        pred.setdefault(b, set()).add(a)
    assert pred[f"ar0/s1/w{n - 1}"] == {f"ar0/s0/w{n - 1}", f"ar0/s0/w{n - 2}"}
    # step 0 waits for the bucket's gradients on that worker only
    assert pred["ar0/s0/w1"] and all(p.startswith("w1/") for p in pred["ar0/s0/w1"])


def test_gradients_ready_first_are_reduced_in_the_first_bucket():
    # layer chain: backward runs from the last layer to the first, so the last
    # layer's gradients are ready first
    one = layer_chain_job("j", "ps", "wk", layers=((10, 1), (20, 2), (30, 3)), pushes=True)
    job = expand_job(one, "allreduce", [], ["a", "b"], options=ShapeOptions("allreduce", 2, bucket_bytes=100))
    pred = {}
    for a, b in job.edges:
        pred.setdefault(b, set()).add(a)
    first = {p.split("/", 1)[1] for p in pred["ar0/s0/w0"]}
    assert first == {"bwd2"}  # 4 * 33 = 132 bytes fill bucket 0 alone
    assert {p.split("/", 1)[1] for p in pred["ar2/s0/w0"]} == {"bwd0"}


@pytest.mark.parametrize("shape", SHAPES)
def test_expanded_jobs_are_valid_native_jobs(shape):
    opts = ShapeOptions(shape, 3, 2 if shape == "ps-sharded" else 1)
    servers, workers = shape_hosts(shape, opts, "h0", "h")
    assert len(set(servers + workers)) == opts.n_hosts(shape)
    cl = Cluster(tuple(Host(n, 1e9, 1e9) for n in servers + workers))
    job = load_shaped_job("lenet", shape, servers, workers, "x", 1.5, opts)
    # the parser accepts it as it is (no duplicate edge, no cycle, known hosts)
    assert parse_job(job.to_dict(), cl) == job
    assert job.arrival_s == 1.5 and job.model == "lenet"
    compile_jobs([job], cl)


def test_workers_start_together_in_the_simulator():
    job = load_shaped_job("lenet", "ps", ["h0"], ["h1", "h2", "h3"], "x", 2.0, ShapeOptions("ps", 3))
    res = simulate(Workload(HOSTS, (job,)), "tensorflow")
    dag = compile_jobs([job], HOSTS)
    roots = [i for i in range(dag.n_nodes) if dag.pred_ptr[i] == dag.pred_ptr[i + 1] and dag.kind[i] == 0]
    by_worker = Counter(dag.node_ids[i].split("/")[0] for i in roots)
    assert set(by_worker) == {"w0", "w1", "w2"} and len(set(by_worker.values())) == 1
    assert np.all(res.node_start_s[roots] == 2.0)
    # the three workers' identical DAGs on symmetric hosts finish their computes together
    last = {w: max(res.node_finish_s[i] for i in range(dag.n_nodes)
                   if dag.kind[i] == 0 and dag.node_ids[i].startswith(w + "/")) for w in by_worker}
    assert max(last.values()) - min(last.values()) < 1e-9


def test_bad_options_and_jobs_are_refused_with_their_reason():
    for kw, msg in [(dict(shape="tree"), "shape: expected one of"),
                    (dict(shape="allreduce", workers=1), "at least 2 workers"),
                    (dict(shape="ps", servers=2), "only ps-sharded"),
                    (dict(shape="ps-sharded", workers=2), "at least 2 servers"),
                    (dict(workers=0), "workers: expected an integer >= 1"),
                    (dict(shape="allreduce", workers=2, bucket_bytes=0), "bucket_bytes")]:
        with pytest.raises(ValidationError, match=msg):
            ShapeOptions(**kw)
    t = model_template("lenet")
    with pytest.raises(ValidationError, match="distinct hosts"):
        expand_job(t, "ps", ["h0"], ["h1", "h0"])
    with pytest.raises(ValidationError, match="1 servers given"):
        expand_job(t, "allreduce", ["h0"], ["h1", "h2"])
    two = Job("two", (Compute("a", "h1", 1.0), Compute("b", "h2", 1.0)), (Transfer("t", "h0", "h1", 1.0),), ())
    with pytest.raises(ValidationError, match="every compute on one worker host"):
        expand_job(two, "ps", ["h3"], ["h4", "h5"])
    with pytest.raises(ValidationError, match="no gradient pushes"):
        expand_job(layer_chain_job("j", "h0", "h1"), "allreduce", [], ["h2", "h3"])
    odd = Job("odd", (Compute("a", "h1", 1.0),), (Transfer("t", "h0", "h1", 1.0), Transfer("u", "h2", "h1", 1.0)), ())
    with pytest.raises(ValidationError, match="transfer 'u'"):
        expand_job(odd, "ps", ["h3"], ["h4", "h5"])


def test_shape_of_reads_generated_ids():
    assert [shape_of(x) for x in ("vgg16-ps-sharded-3", "lenet-allreduce-0", "lenet-ps-1", "lenet-4")] == [
        "ps-sharded", "allreduce", "ps", "ps"]


@st.composite
def shaped_jobs(draw):
    layers = tuple((draw(st.integers(1, 5000)), draw(st.integers(1, 50)))
                   for _ in range(draw(st.integers(1, 4))))
    shape = draw(st.sampled_from(SHAPES))
    n = draw(st.integers(2, 4))
    opts = ShapeOptions(shape, n, draw(st.integers(2, 3)) if shape == "ps-sharded" else 1,
                        bucket_bytes=float(draw(st.integers(100, 20000))),
                        min_slice_bytes=float(draw(st.integers(10, 5000))))
    one = layer_chain_job("one", "ps", "wk", layers=layers, fwd_s_per_param=1e-4, min_compute_s=0.0,
                          pushes=True)
    hosts = HOSTS.names[:opts.n_hosts(shape)]
    k = opts.n_servers(shape)
    jobs = [expand_job(one, shape, hosts[:k], hosts[k:], options=opts, job_id="a")]
    if draw(st.booleans()):  # a second job, later, on the hosts in reverse
        hosts = hosts[::-1]
        jobs.append(expand_job(one, shape, hosts[:k], hosts[k:], options=opts, job_id="b"))
        jobs[1] = Job("b", jobs[1].computes, jobs[1].transfers, jobs[1].edges, draw(st.floats(0, 1)))
    return jobs


def _close(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return bool(np.all(np.isnan(a) == np.isnan(b)) and np.all(np.isnan(a) | np.isclose(a, b, rtol=1e-9, atol=1e-12)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shaped_jobs())
def test_lat_kernels_match_the_python_references_on_every_shape(jobs):
    d = compile_jobs(jobs, HOSTS)
    order = topological_order(d.n_nodes, d.pred_ptr, d.succ_ptr, d.succ_idx)
    assert order.tolist() == topological_order_reference(d.n_nodes, d.pred_ptr, d.succ_ptr, d.succ_idx)
    r = latest_arrival_times(d, HOSTS)
    rel, done, lat, finish = lat_exact_reference(d, r.trans, d.arrival, d.duration)
    assert _close(r.release, rel) and _close(r.done, done)
    assert _close(r.lat, lat) and _close(r.job_finish, finish)
    assert _close(r.lat, lat_bruteforce(d, r.trans, d.arrival, d.duration))
    p = latest_arrival_times(d, HOSTS, estimator="paper")
    assert _close(p.lat, lat_paper_reference(d, p.trans, d.arrival, d.duration))
