"""Pure-Python references of the Cython kernels, for tests and benchmark ratios."""

from __future__ import annotations

import math

import numpy as np

from jitsched.dag.model import TRANSFER, DagArrays


def topological_order_reference(n: int, pred_ptr, succ_ptr, succ_idx) -> list[int]:
    """Kahn's algorithm with a FIFO queue; shorter than ``n`` when there is a cycle."""
    indeg = [int(pred_ptr[i + 1] - pred_ptr[i]) for i in range(n)]
    order = [i for i in range(n) if indeg[i] == 0]
    head = 0
    while head < len(order):
        v = order[head]
        head += 1
        for e in range(int(succ_ptr[v]), int(succ_ptr[v + 1])):
            w = int(succ_idx[e])
            indeg[w] -= 1
            if indeg[w] == 0:
                order.append(w)
    return order


def lat_exact_reference(dag: DagArrays, trans, floor_s, duration, known_done=None):
    """The one-pass LAT of docs/architecture.md §4 in plain Python.

    Returns
    -------
    release, done, lat, job_finish : lists of float (see ``jitsched.dag.lat.LatResult``)
    """
    n = dag.n_nodes
    kind = dag.kind.tolist()
    job_of = dag.job_of.tolist()
    preds = [dag.pred_idx[dag.pred_ptr[v]:dag.pred_ptr[v + 1]].tolist() for v in range(n)]
    release = [0.0] * n
    done = [0.0] * n
    lat = [math.nan] * n
    job_finish = [float(x) for x in floor_s]
    for v in dag.topo.tolist():
        a = float(floor_s[job_of[v]])
        known = None if known_done is None or math.isnan(known_done[v]) else float(known_done[v])
        if kind[v] == TRANSFER:
            r = max([a] + [done[p] for p in preds[v]])
            release[v] = r
            done[v] = r + float(trans[v]) if known is None else known
            lat[v] = math.inf
        else:
            r = max([a] + [done[p] for p in preds[v] if kind[p] != TRANSFER])
            s = max([r] + [done[p] for p in preds[v] if kind[p] == TRANSFER])
            release[v] = s
            done[v] = s + float(duration[v]) if known is None else known
            job_finish[job_of[v]] = max(job_finish[job_of[v]], done[v])
            for p in preds[v]:
                if kind[p] == TRANSFER:
                    lat[p] = min(lat[p], s)
    for v in range(n):
        if kind[v] == TRANSFER and lat[v] == math.inf:
            lat[v] = max(done[v], job_finish[job_of[v]])
    return release, done, lat, job_finish


def lat_paper_reference(dag: DagArrays, trans, floor_s, duration) -> list[float]:
    """The paper's Algorithm 1 with explicit DoneSet / ReadySet / TodoSet bookkeeping.

    A transfer's consumer is its first compute successor in topological order;
    ``pred(i)`` holds the transfers whose consumer reaches ``i``'s consumer by
    a path; ``c(j, i)`` is the longest compute time from ``j``'s consumer
    (inclusive) to ``i``'s (exclusive). A transfer with no consumer is treated
    as consumed after the last compute reachable from each predecessor.
    """
    n = dag.n_nodes
    kind = dag.kind.tolist()
    succ = [dag.succ_idx[dag.succ_ptr[v]:dag.succ_ptr[v + 1]].tolist() for v in range(n)]
    pos = {v: k for k, v in enumerate(dag.topo.tolist())}
    consumer = {}
    for v in range(n):
        if kind[v] == TRANSFER:
            cs = [w for w in succ[v] if kind[w] != TRANSFER]
            consumer[v] = min(cs, key=pos.__getitem__) if cs else -1

    def longest_from(c: int) -> tuple[dict[int, float], float]:
        # dist[w]: longest compute time on a path c ... w, counting c, excluding w
        dist = {c: 0.0}
        tail = -math.inf
        for v in sorted((w for w in range(n) if pos[w] >= pos[c]), key=pos.__getitem__):
            if v not in dist:
                continue
            step = dist[v] + (float(duration[v]) if kind[v] != TRANSFER else 0.0)
            if not succ[v]:
                tail = max(tail, step)
            for w in succ[v]:
                dist[w] = max(dist.get(w, -math.inf), step)
        return dist, tail

    reach = {}
    for j, c in consumer.items():
        if c >= 0:
            reach[j] = longest_from(c)
    pred: dict[int, dict[int, float]] = {i: {} for i in consumer}
    for i, ci in consumer.items():
        for j, cj in consumer.items():
            if j == i or cj < 0 or dag.job_of[j] != dag.job_of[i]:
                continue
            dist, tail = reach[j]
            if ci < 0:
                if tail > -math.inf:
                    pred[i][j] = tail
            elif ci != cj and ci in dist:
                pred[i][j] = dist[ci]
    lat = [math.nan] * n
    done_set: set[int] = set()
    todo = set(consumer)
    while todo:
        ready = [i for i in todo if all(j in done_set for j in pred[i])]
        if not ready:  # cannot happen on a DAG: consumer positions order pred(i)
            raise RuntimeError("no ready transfer")
        for i in ready:
            li = float(floor_s[dag.job_of[i]]) + float(trans[i])
            for j, c in pred[i].items():
                li = max(li, lat[j] + c + float(trans[i]))
            lat[i] = li
        done_set.update(ready)
        todo.difference_update(ready)
    return lat


def lat_bruteforce(dag: DagArrays, trans, floor_s, duration) -> np.ndarray:
    """LAT from explicit longest paths with networkx (the definition, not the pass).

    ``done(v)`` is the job's arrival plus the longest node-weighted path ending
    at ``v``; a transfer's LAT is the smallest start time of its compute
    consumers (or the job's last compute finish if none), never before its
    earliest arrival.
    """
    import networkx as nx

    g = nx.DiGraph()
    n = dag.n_nodes
    weight = np.where(dag.kind == TRANSFER, trans, duration)
    g.add_nodes_from(range(n))
    for v in range(n):
        for w in dag.succ_idx[dag.succ_ptr[v]:dag.succ_ptr[v + 1]]:
            g.add_edge(v, int(w))
    done = np.zeros(n)
    for v in range(n):
        sub = g.subgraph(nx.ancestors(g, v) | {v})
        # longest node-weighted path ending at v: put each node's weight on its out-edges
        best = {}
        for u in nx.topological_sort(sub):
            best[u] = weight[u] + max((best[p] for p in sub.predecessors(u)), default=0.0)
        done[v] = float(floor_s[dag.job_of[v]]) + best[v]
    lat = np.full(n, np.nan)
    finish = {}
    for v in range(n):
        if dag.kind[v] != TRANSFER:
            finish[dag.job_of[v]] = max(finish.get(dag.job_of[v], -np.inf), done[v])
    for v in range(n):
        if dag.kind[v] != TRANSFER:
            continue
        starts = [done[c] - duration[c] for c in g.successors(v) if dag.kind[c] != TRANSFER]
        if starts:
            lat[v] = max(done[v], min(starts))
        else:
            lat[v] = max(done[v], finish.get(dag.job_of[v], float(floor_s[dag.job_of[v]])))
    return lat
