"""Shared helpers for the bench scripts: timing medians, model-sized DAGs, matplotlib for figures."""

from __future__ import annotations

import importlib.util
import statistics
import time
from collections.abc import Callable

from jitsched.dag.model import Compute, Job, Transfer


def median_time(fn: Callable[[], object], repeat: int, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` over ``repeat`` runs, seconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


MATPLOTLIB_MISSING = ("the figures need matplotlib, an optional dependency of jitsched: "
                      "pip install 'jitsched[bench]' (or pip install matplotlib)")


def require_matplotlib() -> None:
    """Fail unless matplotlib is installed (without importing it): before a long run that ends with figures.

    Raises
    ------
    ModuleNotFoundError
        :data:`MATPLOTLIB_MISSING` when matplotlib is not installed.
    """
    if importlib.util.find_spec("matplotlib") is None:
        raise ModuleNotFoundError(MATPLOTLIB_MISSING, name="matplotlib")


def pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend.

    matplotlib is not a dependency of jitsched, only of its ``bench`` extra
    (and ``test``): the error says so when it is missing.

    Raises
    ------
    ModuleNotFoundError
        :data:`MATPLOTLIB_MISSING` when matplotlib is not installed.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def seed_label(seeds) -> str:
    """Seeds as a figure names them: ``0-5`` when more than two run consecutively, else comma-separated."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(x) for x in seeds)


def policy_default(policy: str, option: str):
    """The default of ``option`` in the declared options of the registered ``policy``: what a run that sets none gets.

    Raises
    ------
    KeyError
        ``policy`` is not registered or declares no ``option``.
    """
    from jitsched.policies import POLICIES
    from jitsched.policies.base import option_names

    cls = POLICIES[policy]
    if option not in option_names(cls):
        raise KeyError(option)
    return getattr(cls.Options(), option)


def resnet152_jobs(ps: str = "h0", worker: str = "h1") -> list[tuple[Job, str]]:
    """ResNet152-sized jobs with labels: the Table 1 sized stand-in and the real TF DAG.

    The stand-in has the paper's counts (932 transfers, 2641 compute ops); the
    DAG imported from TensorFlow has both directions' transfers (2020) and
    fewer compute nodes (bookkeeping ops contracted away).
    """
    from jitsched.workloads.paper import load_model_job

    return [(_resnet_like(ps, worker), "table1-sized-resnet152"),
            (load_model_job("resnet152", ps, worker, "resnet152-0", 0.0), "tensorflow-resnet152")]


def _resnet_like(ps: str, worker: str) -> Job:
    """Bottleneck-block chain of ResNet152's size: 932 parameter reads, 2641 ops."""
    computes, transfers, edges = [], [], []
    n_t = 932
    prev = None
    k = 0
    for i in range(n_t):
        t = f"t{i}"
        transfers.append(Transfer(t, ps, worker, 4.0 * (1024 + 97 * i)))
        c = f"op{k}"
        computes.append(Compute(c, worker, 1e-4))
        edges.append((t, c))
        if prev is not None:
            edges.append((prev, c))
        # every third op starts a residual branch joining two ops later
        if i % 3 == 0 and prev is not None:
            edges.append((prev, f"op{k + 2}"))
        prev = c
        k += 1
        if len(computes) < 2641 - (n_t - i - 1):
            extra = f"op{k}"
            computes.append(Compute(extra, worker, 5e-5))
            edges.append((prev, extra))
            prev = extra
            k += 1
    while len(computes) < 2641:
        extra = f"op{k}"
        computes.append(Compute(extra, worker, 5e-5))
        edges.append((prev, extra))
        prev = extra
        k += 1
    return Job("resnet152-0", tuple(computes), tuple(transfers), tuple(edges), 0.0, 0.0, "resnet152")
