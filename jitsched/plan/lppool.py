"""A pool of worker processes that solve independent components of the bandwidth LP at once."""

from __future__ import annotations

import atexit
import multiprocessing as mp
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_size = 0


def pool(size: int) -> ProcessPoolExecutor:
    """The process pool of ``size`` workers, started on first use (kept for later calls).

    Its workers are fresh interpreters (``spawn``): a forked copy of a process
    in which HiGHS has run would inherit its solver state without its threads.
    """
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size != size:
            if _pool is not None:
                _pool.shutdown(wait=True, cancel_futures=True)
            _pool = ProcessPoolExecutor(max_workers=size, mp_context=mp.get_context("spawn"))
            _pool_size = size
        return _pool


def shutdown() -> None:
    """Stop the pool's workers and wait for them (a later call starts a new pool)."""
    global _pool, _pool_size
    with _lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
        _pool, _pool_size = None, 0


atexit.register(shutdown)


def batches(sizes: list[int], n: int) -> list[list[int]]:
    """Indices of ``sizes`` in ``n`` batches of about equal sums, largest first (each to
    the batch with the least so far); each batch in increasing index order."""
    load = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        b = min(range(n), key=lambda b: (load[b], b))
        out[b].append(k)
        load[b] += sizes[k]
    return [sorted(b) for b in out if b]


def _solve_batch(comps: list[np.ndarray], args: tuple, deadline: float) -> list[dict]:
    """Worker: plan each component of ``comps`` (:func:`jitsched.plan.lp.plan_component`), one
    Highs object for the batch."""
    from jitsched.plan.lp import _new_highs, plan_component

    highs = _new_highs()
    return [plan_component(fidx, args, deadline, highs) for fidx in comps]


def solve_components(comps: list[np.ndarray], args: tuple, deadline: float, workers: int) -> list[dict]:
    """:func:`jitsched.plan.lp.plan_component` of every component of ``comps`` (flow indices),
    ``workers`` at once: this process solves one batch while ``workers - 1`` pool
    processes solve the others. Returns the results in the order of ``comps``."""
    parts = batches([len(c) for c in comps], min(workers, len(comps)))
    ex = pool(workers - 1)
    try:
        futures = [ex.submit(_solve_batch, [comps[k] for k in b], args, deadline) for b in parts[1:]]
        out: list[dict | None] = [None] * len(comps)
        for k, r in zip(parts[0], _solve_batch([comps[k] for k in parts[0]], args, deadline), strict=True):
            out[k] = r
        for b, f in zip(parts[1:], futures, strict=True):
            for k, r in zip(b, f.result(), strict=True):
                out[k] = r
    except BrokenProcessPool:
        shutdown()  # a worker died: the plan fails (and says so), the next one starts a new pool
        raise
    return out


__all__ = ["batches", "pool", "shutdown", "solve_components"]
