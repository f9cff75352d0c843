"""Testbed scenarios: model DAG workloads scaled to the link rate, plus background transfers."""

from __future__ import annotations

import importlib.util

import numpy as np

from jitsched.bgtraffic import BackgroundFlow
from jitsched.model import Cluster, Host, Job, Workload
from jitsched.synth import layer_chain_job
from jitsched.testbed import Testbed, TestbedError

# (hosts, jobs, Poisson arrival rate per second, background flows, background MB at 1 Gbit/s)
SCENARIOS = {
    "quick": dict(hosts=4, jobs=4, rate_per_s=2.0, background=2, bg_mb=25.0, link_mbit=100.0),
    "paper-mini": dict(hosts=8, jobs=12, rate_per_s=1.5, background=6, bg_mb=50.0, link_mbit=100.0),
}
PAPER_LINK_BPS = 1e9  # the paper's links; byte sizes scale by link rate / this

# Modules of the daemon side (issue 5) that `testbed run` drives; absent until they land.
REQUIRED_MODULES = ("jitsched.daemon", "jitsched.runner", "jitsched.agents.agent")


def scaled_vgg16(job_id: str, ps: str, worker: str, scale: float, arrival_s: float) -> Job:
    """A VGG16 layer-chain job whose transfer sizes are multiplied by ``scale`` (compute times kept).

    Scaling bytes by link rate / 1 Gbit/s keeps every transfer's time, and so
    the compute/communication balance of the paper's setting, on slower links.
    """
    j = layer_chain_job(job_id, ps, worker, arrival_s=arrival_s)
    transfers = tuple(type(t)(t.id, t.src, t.dst, max(1.0, round(t.bytes * scale))) for t in j.transfers)
    return Job(j.id, j.computes, transfers, j.edges, j.arrival_s, j.priority, j.model)


def build_workload(tb_or_hosts: Testbed | int, link_mbit: float, scenario: str, seed: int = 0
                   ) -> tuple[Workload, list[BackgroundFlow]]:
    """The scenario's DAG jobs (native format) and its background flows, for a testbed.

    Jobs: VGG16 layer chains, parameter server and worker on random distinct
    hosts, Poisson arrivals; background: file transfers between random hosts
    with uniform arrivals over the job arrival span. Same ``seed``, same workload.
    """
    try:
        sc = SCENARIOS[scenario]
    except KeyError:
        raise TestbedError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}") from None
    if isinstance(tb_or_hosts, Testbed):
        names = [h.name for h in tb_or_hosts.hosts]
        addrs = [h.address for h in tb_or_hosts.hosts]
    else:
        names = [f"h{i}" for i in range(tb_or_hosts)]
        addrs = [None] * tb_or_hosts
    bps = link_mbit * 1e6
    cluster = Cluster(tuple(Host(n, bps, bps, a) for n, a in zip(names, addrs, strict=True)))
    rng = np.random.default_rng(seed)
    scale = bps / PAPER_LINK_BPS
    arrivals = np.cumsum(rng.exponential(1.0 / sc["rate_per_s"], size=sc["jobs"]))
    arrivals -= arrivals[0]
    jobs = []
    for j, a in enumerate(arrivals):
        ps, worker = rng.choice(len(names), size=2, replace=False)
        jobs.append(scaled_vgg16(f"vgg16-{j}", names[ps], names[worker], scale, float(a)))
    span = float(arrivals[-1]) if len(arrivals) else 1.0
    bg = []
    for b in range(sc["background"]):
        s, d = rng.choice(len(names), size=2, replace=False)
        bg.append(BackgroundFlow(f"file-{b}", names[s], names[d], sc["bg_mb"] * 1e6 * scale,
                                 float(rng.uniform(0, span))))
    return Workload(cluster, tuple(jobs)), bg


def require_daemon_side() -> None:
    """Raise TestbedError naming the daemon-side modules ``testbed run`` needs that are not installed."""
    missing = [m for m in REQUIRED_MODULES if _find(m) is None]
    if missing:
        raise TestbedError(
            "testbed run drives the jitsched daemon, host agents and job runners; "
            f"not in this installation yet: {', '.join(missing)}")


def _find(mod: str):
    try:
        return importlib.util.find_spec(mod)
    except ModuleNotFoundError:
        return None
