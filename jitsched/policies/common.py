"""Helpers shared by policies: sub-DAGs of selected jobs and job-level groupings of flows."""

from __future__ import annotations

import numpy as np

from jitsched.model import DagArrays


def _gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR rows ``rows`` of (ptr, idx) as a new CSR (values not remapped)."""
    starts = ptr[rows]
    lens = ptr[rows + 1] - starts
    new_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=new_ptr[1:])
    total = int(new_ptr[-1])
    if total == 0:
        return new_ptr, np.zeros(0, dtype=np.int32)
    pos = np.arange(total) - np.repeat(new_ptr[:-1], lens) + np.repeat(starts, lens)
    return new_ptr, idx[pos]


def sub_dag(dag: DagArrays, jobs: np.ndarray) -> tuple[DagArrays, np.ndarray]:
    """The jobs ``jobs`` of ``dag`` as their own DagArrays, without recompiling.

    Parameters
    ----------
    dag : DagArrays
    jobs : array of int
        Job indices, strictly increasing.

    Returns
    -------
    sub : DagArrays
        Job ``k`` of ``sub`` is job ``jobs[k]`` of ``dag``.
    nodes : ndarray of int64
        ``nodes[i]`` is the node of ``dag`` that node ``i`` of ``sub`` is.
    """
    jobs = np.asarray(jobs, dtype=np.int64)
    lo, hi = dag.job_ptr[jobs], dag.job_ptr[jobs + 1]
    lens = hi - lo
    job_ptr = np.zeros(len(jobs) + 1, dtype=np.int64)
    np.cumsum(lens, out=job_ptr[1:])
    n = int(job_ptr[-1])
    nodes = np.arange(n) - np.repeat(job_ptr[:-1], lens) + np.repeat(lo, lens)
    remap = np.full(dag.n_nodes, -1, dtype=np.int64)
    remap[nodes] = np.arange(n)
    pred_ptr, pred_idx = _gather_csr(dag.pred_ptr, dag.pred_idx, nodes)
    succ_ptr, succ_idx = _gather_csr(dag.succ_ptr, dag.succ_idx, nodes)
    # compile_jobs orders topo job by job, so the topo positions of the chosen
    # jobs' node ranges hold exactly their nodes: gather those instead of
    # remapping the whole order (O(all nodes) per re-plan, seconds per run).
    seg = dag.topo[nodes]
    if np.array_equal(dag.job_of[seg], dag.job_of[nodes]):
        topo = remap[seg]
    else:  # some other order: filter the whole one
        topo = remap[dag.topo]
        topo = topo[topo >= 0]
    job_map = np.full(dag.n_jobs, -1, dtype=np.int32)
    job_map[jobs] = np.arange(len(jobs), dtype=np.int32)
    sub = DagArrays(
        # map over Python ints: a generator over numpy ints cost seconds per
        # paper-scale run (every re-plan copies ~10^4 ids)
        job_ids=tuple(map(dag.job_ids.__getitem__, jobs.tolist())),
        node_ids=tuple(map(dag.node_ids.__getitem__, nodes.tolist())) if len(dag.node_ids) else (),
        job_ptr=job_ptr,
        kind=dag.kind[nodes],
        host=dag.host[nodes],
        src=dag.src[nodes],
        dst=dag.dst[nodes],
        size=dag.size[nodes],
        duration=dag.duration[nodes],
        std=dag.std[nodes],
        job_of=job_map[dag.job_of[nodes]],
        arrival=dag.arrival[jobs],
        priority=dag.priority[jobs],
        pred_ptr=pred_ptr,
        pred_idx=remap[pred_idx].astype(np.int32),
        succ_ptr=succ_ptr,
        succ_idx=remap[succ_idx].astype(np.int32),
        topo=topo.astype(np.int32),
    )
    return sub, nodes
