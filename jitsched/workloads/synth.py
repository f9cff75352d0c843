"""Synthetic layer-chain DAG jobs (parameter server and worker, or many workers) for benches and examples."""

from __future__ import annotations

import numpy as np

from jitsched.dag.model import Compute, Job, Transfer
from jitsched.workloads.shapes import ShapeOptions, draw_shape, expand_job

# VGG16's 16 parameterised layers (13 conv, 3 fully connected): (weights, biases)
# element counts; float32 parameters, 4 bytes each.
VGG16_LAYERS = (
    (1728, 64), (36864, 64), (73728, 128), (147456, 128), (294912, 256), (589824, 256),
    (589824, 256), (1179648, 512), (2359296, 512), (2359296, 512), (2359296, 512),
    (2359296, 512), (2359296, 512), (102760448, 4096), (16777216, 4096), (4096000, 1000),
)


def layer_chain_job(job_id: str, ps: str, worker: str, layers=VGG16_LAYERS, *,
                    arrival_s: float = 0.0, fwd_s_per_param: float = 1e-10,
                    min_compute_s: float = 0.002, model: str | None = "vgg16",
                    pushes: bool = False) -> Job:
    """One training iteration of a layer chain in parameter-server style.

    Each parameter tensor is read from ``ps`` by ``worker`` (one transfer per
    tensor, so VGG16 gives 32), feeds its layer's forward op; forward ops form
    a chain, followed by a chain of backward ops (twice the forward time).
    A forward op takes ``max(min_compute_s, fwd_s_per_param * parameters)``
    seconds: 1e-10 s per parameter is about 2 flops x batch 32 per parameter
    at ~0.6 TFLOP/s effective, so VGG16's largest layer (103 M parameters)
    computes for ~10 ms. With ``pushes``, each backward op sends its layer's
    gradients back to ``ps`` (``push_w<k>``, ``push_b<k>``), as a
    parameter-server step does. A stand-in for measured op times; real model
    DAGs come from ``jitsched.workloads.load_model_job``.

    Returns
    -------
    Job
    """
    computes, transfers, edges = [], [], []
    prev = None
    for k, (w, b) in enumerate(layers):
        dur = max(min_compute_s, fwd_s_per_param * (w + b))
        fwd = f"fwd{k}"
        computes.append(Compute(fwd, worker, float(dur)))
        for name, count in (("w", w), ("b", b)):
            tid = f"read_{name}{k}"
            transfers.append(Transfer(tid, ps, worker, float(4 * count)))
            edges.append((tid, fwd))
        if prev is not None:
            edges.append((prev, fwd))
        prev = fwd
    for k in reversed(range(len(layers))):
        w, b = layers[k]
        bwd = f"bwd{k}"
        computes.append(Compute(bwd, worker, float(2 * max(min_compute_s, fwd_s_per_param * (w + b)))))
        edges.append((prev, bwd))
        prev = bwd
        if pushes:
            for name, count in (("w", w), ("b", b)):
                transfers.append(Transfer(f"push_{name}{k}", worker, ps, float(4 * count)))
                edges.append((bwd, f"push_{name}{k}"))
    return Job(job_id, tuple(computes), tuple(transfers), tuple(edges), float(arrival_s), 0.0, model)


def random_vgg16_jobs(n_jobs: int, host_names: list[str], *, seed: int = 0,
                      arrival_s: float = 0.0, shapes: ShapeOptions | None = None) -> list[Job]:
    """``n_jobs`` VGG16 layer-chain jobs, parameter server and worker on random distinct hosts.

    With ``shapes`` (not one server and one worker), each job is the layer
    chain with gradient pushes, expanded to a shape drawn uniformly from
    ``shapes.shapes()`` on random distinct servers and workers
    (:func:`jitsched.workloads.shapes.expand_job`), id ``vgg16-<shape>-<j>``.
    """
    rng = np.random.default_rng(seed)
    jobs = []
    if shapes is not None and not shapes.trivial:
        one = layer_chain_job("one", "ps", "worker", arrival_s=arrival_s, pushes=True)
        for j in range(n_jobs):
            shape, servers, workers = draw_shape(rng, shapes, host_names)
            jobs.append(expand_job(one, shape, servers, workers, options=shapes, job_id=f"vgg16-{shape}-{j}"))
        return jobs
    for j in range(n_jobs):
        ps, worker = rng.choice(len(host_names), size=2, replace=False)
        jobs.append(layer_chain_job(f"vgg16-{j}", host_names[ps], host_names[worker],
                                    arrival_s=arrival_s))
    return jobs
