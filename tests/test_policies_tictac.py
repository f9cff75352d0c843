"""TicTac's TAC order against a reference that recomputes every property from its definition at every step."""

import math

import numpy as np
import pytest

from jitsched.dag.model import TRANSFER, Cluster, compile_jobs
from jitsched.policies import tictac
from jitsched.policies.tictac import _tac, tictac_order
from jitsched.workloads.paper import load_model_job, load_shaped_job


def tac_by_definition(dep: np.ndarray, dur: np.ndarray, m: np.ndarray) -> list[int]:
    """TAC, each step from scratch: P, M+ and the pick over the outstanding transfers, as sets."""
    waits = [(set(np.flatnonzero(row).tolist()), float(d)) for row, d in zip(dep, dur, strict=True)]
    ps = [round(x / tictac.TIE_QUANTUM_S) for x in m]  # M+ sums M exactly, in whole quanta
    out = set(range(len(m)))
    ranks = [0] * len(m)
    for step in range(len(m)):
        live = [(s & out, d) for s, d in waits if s & out]
        p = {r: sum(d for s, d in live if s == {r}) for r in out}
        mplus = {}
        for r in out:
            multi = [sum(ps[x] for x in s) for s, _ in live if r in s and len(s) > 1]
            if multi:
                mplus[r] = min(multi)
            else:
                mplus[r] = ps[r] if any(s == {r} for s, _ in live) else math.inf
        first = [r for r in out if m[r] <= p[r]]
        if first:
            pick = min(first, key=lambda r: (m[r], mplus[r], r))
        else:
            pick = min(out, key=lambda r: (-p[r], mplus[r], r))
        ranks[pick] = step
        out.remove(pick)
    return ranks


def random_waits(rng: np.random.Generator, n_ops: int, n_tr: int, levels: int):
    """Ops waiting on random sets of transfers, times on a few integer levels (many ties, sums exact)."""
    dep = rng.random((n_ops, n_tr)) < rng.uniform(0.05, 0.6)
    dep[rng.integers(0, n_ops, n_tr), np.arange(n_tr)] |= rng.random(n_tr) < 0.7
    m = rng.integers(1, levels + 1, n_tr).astype(float)
    dur = rng.integers(0, levels + 1, n_ops).astype(float)
    return dep, dur, m


@pytest.mark.parametrize("gather_ops", [20000, 0])  # tie-breaks read per transfer, or by walking the ops
@pytest.mark.parametrize("seed", range(40))
def test_tac_equals_the_definition_on_random_waits(seed, gather_ops, monkeypatch):
    monkeypatch.setattr(tictac._Waits, "GATHER_OPS", gather_ops)
    rng = np.random.default_rng(seed)
    dep, dur, m = random_waits(rng, int(rng.integers(1, 12)), int(rng.integers(1, 25)), int(rng.integers(1, 4)))
    assert _tac(dep, dur, m).tolist() == tac_by_definition(dep, dur, m)


def test_tac_breaks_ties_by_mplus_then_index():
    # no op waits on one transfer alone: every P is 0, below every M, so all four tie on
    # P; the op on {1, 2} sums the least M (2), so 1 goes first (the lower index). Then that
    # op waits on 2 alone: P(2) = 1 >= M(2), so 2 is next; 0 and 3 then tie on everything
    dep = np.array([[1, 1, 1, 1], [0, 1, 1, 0]], dtype=bool)
    dur = np.array([5.0, 1.0])
    m = np.ones(4)
    assert _tac(dep, dur, m).tolist() == tac_by_definition(dep, dur, m) == [2, 0, 1, 3]


def model_jobs():
    yield load_model_job("lenet", "h0", "h1")
    yield load_model_job("alexnet", "h0", "h1")
    yield load_shaped_job("lenet", "ps", ["h0"], ["h1", "h2", "h3"])
    yield load_shaped_job("lenet", "ps-sharded", ["h0", "h1"], ["h2", "h3"])
    yield load_shaped_job("lenet", "allreduce", [], ["h0", "h1", "h2"])
    # workers' equal tensors: ops whose summed M are equal but formed in other orders
    yield load_shaped_job("vgg16", "ps", ["h0"], ["h1", "h2", "h3"])


@pytest.mark.parametrize("job", list(model_jobs()), ids=lambda j: j.id)
def test_tictac_order_equals_the_definition_on_model_jobs(job):
    cl = Cluster.uniform(4, 1e10)
    dag = compile_jobs([job], cl)
    comm = tictac.transfer_times(dag, cl, np.flatnonzero(dag.kind == TRANSFER))
    transfers, dep, computes = tictac._dependencies(dag, 0)
    assert tictac_order(dag, 0, comm, "tac").tolist() == tac_by_definition(dep, dag.duration[computes], comm[transfers])
