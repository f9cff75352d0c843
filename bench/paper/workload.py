"""The paper's section 4.1 workload for the figures: the real-model generator when its DAGs are packaged, else Table-1-shaped stand-ins."""

from __future__ import annotations

import numpy as np

from jitsched.dag.model import Background, Cluster, Compute, Job, Transfer, Workload

# Paper Table 1: transfers, total transfer MB, compute ops; plus an assumed
# total compute time of one iteration (s), GPU-like (not published by the paper).
TABLE1 = {
    "lenet": (8, 12.5, 123, 0.01),
    "alexnet": (16, 82.5, 161, 0.06),
    "vgg16": (32, 512.3, 351, 0.30),
    "inception_v3": (190, 83.1, 1384, 0.25),
    "resnet152": (932, 226.5, 2641, 0.40),
}
MODELS = tuple(TABLE1)
FILE_SIZES_BITS = (5e9, 10e9, 20e9, 30e9, 40e9)
DISPLAY = {"lenet": "LeNet", "alexnet": "AlexNet", "vgg16": "VGG16",
           "inception_v3": "Inception", "resnet152": "ResNet152"}


def standin_job(model: str, ps: str, worker: str, job_id: str, arrival_s: float) -> Job:
    """A Table-1-sized parameter-server iteration of ``model``.

    ``n`` parameter reads (sizes spread log-uniformly, fixed seed per model,
    scaled to the table's total MB) each feed one forward op of a chain; the
    remaining ops of the table's count are backward ops after the forward
    chain. Compute time (1/3 forward, 2/3 backward) follows the read sizes.
    """
    n_t, mb, n_ops, comp_s = TABLE1[model]
    rng = np.random.default_rng(abs(hash(model)) % (2 ** 32) if False else len(model) * 7919)
    sizes = np.exp(rng.uniform(np.log(1e3), np.log(1e8), n_t))
    sizes *= mb * 1e6 / sizes.sum()
    n_fwd = max(n_t, n_ops // 3)
    n_bwd = n_ops - n_fwd
    fwd_w = np.zeros(n_fwd)
    reader = np.linspace(0, n_fwd - 1, n_t).round().astype(int)
    np.add.at(fwd_w, reader, sizes)
    fwd_w = fwd_w / fwd_w.sum() * comp_s / 3 + 1e-5
    computes, transfers, edges = [], [], []
    for k in range(n_fwd):
        computes.append(Compute(f"f{k}", worker, float(fwd_w[k])))
        if k:
            edges.append((f"f{k - 1}", f"f{k}"))
    for i in range(n_t):
        transfers.append(Transfer(f"r{i}", ps, worker, float(sizes[i])))
        edges.append((f"r{i}", f"f{reader[i]}"))
    prev = f"f{n_fwd - 1}"
    bwd_s = 2 * comp_s / 3 / max(n_bwd, 1)
    for k in range(n_bwd):
        computes.append(Compute(f"b{k}", worker, float(bwd_s)))
        edges.append((prev, f"b{k}"))
        prev = f"b{k}"
    return Job(job_id, tuple(computes), tuple(transfers), tuple(edges), float(arrival_s), 0.0, model)


def real_models_available() -> bool:
    """True when jitsched.workloads.paper can load all five packaged model DAGs."""
    try:
        from jitsched.workloads.paper import model_template
        for m in MODELS:
            model_template(m)
    except Exception:  # noqa: BLE001 - any failure means: use the stand-ins
        return False
    return True


def paper_workload(n_dl_jobs: int, *, n_hosts: int = 100, load: float = 0.5,
                   background_share: float = 0.2, seed: int = 0, real: bool | None = None) -> Workload:
    """Poisson stream of DL jobs (five models, equal shares) and file transfers on ``n_hosts`` hosts.

    Parameters
    ----------
    n_dl_jobs : int
        DL jobs; file transfers are added so that they are ``background_share`` of all jobs.
    n_hosts : int
        Hosts at 1 Gbit/s each way.
    load : float
        Offered load: mean offered bytes/s over the cluster's total egress (bytes/s).
    background_share : float
        Share of jobs (by count) that are file transfers.
    seed : int
    real : bool, optional
        Use the real TensorFlow model DAGs (default: when packaged).

    Returns
    -------
    Workload
    """
    if real is None:
        real = real_models_available()
    make = _job_maker(real)
    if real:
        from jitsched.workloads.paper import model_bytes
        dl_bytes = float(np.mean([model_bytes(m) for m in MODELS]))
    else:
        dl_bytes = float(np.mean([TABLE1[m][1] * 1e6 for m in MODELS]))
    rng = np.random.default_rng(seed)
    n_total = int(round(n_dl_jobs / (1 - background_share)))
    mean_bytes = (1 - background_share) * dl_bytes + background_share * np.mean(FILE_SIZES_BITS) / 8
    rate = load * n_hosts * 1.25e8 / mean_bytes
    t = np.cumsum(rng.exponential(1 / rate, n_total))
    cl = Cluster.uniform(n_hosts)
    names = cl.names
    kinds = np.array(["file"] * (n_total - n_dl_jobs) + [MODELS[i % 5] for i in range(n_dl_jobs)])
    rng.shuffle(kinds)
    jobs, bgs = [], []
    for i in range(n_total):
        a, b = rng.choice(n_hosts, 2, replace=False)
        if kinds[i] == "file":
            size = float(rng.choice(FILE_SIZES_BITS)) / 8
            bgs.append(Background(f"file-{i}", names[a], names[b], size, float(t[i])))
        else:
            jobs.append(make(str(kinds[i]), names[a], names[b], f"{kinds[i]}-{i}", float(t[i])))
    return Workload(cl, tuple(jobs), tuple(bgs))


def model_job(model: str, ps: str, worker: str, job_id: str, arrival_s: float = 0.0, *,
              real: bool | None = None) -> Job:
    """One job of ``model`` as :func:`paper_workload` makes it (real DAG or stand-in).

    Parameters
    ----------
    model : str
        One of :data:`MODELS`.
    ps, worker : str
        Hosts of the parameter server and the worker (distinct).
    job_id : str
    arrival_s : float
        Seconds.
    real : bool, optional
        Use the real TensorFlow model DAG (default: when packaged).

    Returns
    -------
    Job
    """
    return _job_maker(real_models_available() if real is None else real)(
        model, ps, worker, job_id, float(arrival_s))


def _job_maker(real: bool):
    """The function that builds one model job: the real DAG's loader, or :func:`standin_job`."""
    if real:
        from jitsched.workloads.paper import load_model_job

        return load_model_job
    return standin_job
