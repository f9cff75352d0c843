"""Transfer-time estimates of the LAT pass: Eq. 1, fair sharing, and per-job need-order queues."""

from __future__ import annotations

import numpy as np

from jitsched.dag.model import TRANSFER, Cluster, DagArrays

# eq1: the paper's Eq. 1 (trans_times); fair: processor sharing of every
# transfer (fair_share_trans); ordered: each job's transfers queue in need
# order at a per-job share of the port (ordered_trans).
TRANS_ESTIMATES = ("fair", "eq1", "ordered")
# How the "ordered" estimate lets jobs share a port: fairly (each of n jobs at
# C/n), or one job after another at the full rate, in arrival order ("fifo") or
# smallest bottleneck first ("smallest": the job whose busiest port has the
# fewest seconds of work left goes first, as Sincronia orders coflows).
JOB_ORDERS = ("fair", "fifo", "smallest")


def trans_times(dag: DagArrays, cluster: Cluster, *, remaining: np.ndarray | None = None,
                active: np.ndarray | None = None) -> np.ndarray:
    """Paper Eq. 1: each transfer's time if every port is shared equally.

    ``trans(f) = bytes(f) / min(E_a / num(a), I_b / num(b))`` where ``num``
    counts the active transfers of all jobs in ``dag`` leaving ``a`` / entering ``b``.

    Parameters
    ----------
    dag : DagArrays
    cluster : Cluster
    remaining : ndarray, shape (n_nodes,), optional
        Bytes still to send per transfer (default: the full size).
    active : ndarray of bool, shape (n_nodes,), optional
        Transfers that count in ``num`` (default: every transfer).

    Returns
    -------
    ndarray, shape (n_nodes,)
        Seconds; 0 for computes and inactive transfers.
    """
    is_t = dag.kind == TRANSFER
    if active is None:
        active = is_t
    else:
        active = np.asarray(active, dtype=bool) & is_t
    size = dag.size if remaining is None else np.asarray(remaining, dtype=np.float64)
    h = len(cluster)
    num_out = np.bincount(dag.src[active], minlength=h).astype(np.float64)
    num_in = np.bincount(dag.dst[active], minlength=h).astype(np.float64)
    out = np.zeros(dag.n_nodes, dtype=np.float64)
    idx = np.flatnonzero(active)
    if idx.size:
        s, d = dag.src[idx], dag.dst[idx]
        share = np.minimum(cluster.egress_Bps[s] / num_out[s], cluster.ingress_Bps[d] / num_in[d])
        out[idx] = size[idx] / share
    return out


def fair_share_trans(dag, cluster, remaining: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Transfer times if every port were shared fairly from now on (processor sharing).

    On one port of capacity ``C`` with ``n`` flows sized ``s_1 <= ... <= s_n``
    starting together, fair sharing finishes flow ``k`` at
    ``(s_1 + ... + s_{k-1} + (n - k + 1) * s_k) / C``; a transfer's estimate is
    the later of its egress and ingress ports. Eq. 1 (``s_k * n / C``) is the
    same model with every flow pretending to last as long as the longest: it
    is an upper bound of this one and grossly over-estimates a large transfer
    queued behind many small ones (VGG16's 411 MB fc6 weights behind 31 small
    reads: Eq. 1 says 105 s, fair sharing 4.2 s).

    Parameters
    ----------
    dag : DagArrays
    cluster : Cluster
    remaining : ndarray, shape (n_nodes,)
        Bytes left per transfer.
    active : ndarray of bool, shape (n_nodes,)
        Transfers that share the ports.

    Returns
    -------
    ndarray, shape (n_nodes,)
        Seconds; 0 for computes and inactive transfers.
    """
    out = np.zeros(dag.n_nodes)
    idx = np.flatnonzero(active)
    if len(idx) == 0:
        return out
    h = len(cluster)
    size = np.asarray(remaining, dtype=np.float64)[idx]
    best = np.zeros(len(idx))
    for port, cap in ((dag.src[idx], cluster.egress_Bps), (dag.dst[idx], cluster.ingress_Bps)):
        order = np.lexsort((size, port))
        p, s = port[order], size[order]
        first = np.searchsorted(p, np.arange(h))
        count = np.bincount(p, minlength=h)
        rank = np.arange(len(p)) - first[p]  # 0-based position within the port
        before = np.cumsum(s) - s
        before -= (np.cumsum(s) - s)[first[p]]  # bytes of smaller flows on the same port
        t = (before + (count[p] - rank) * s) / cap[p]
        t_in = np.empty_like(t)
        t_in[order] = t
        best = np.maximum(best, t_in)
    out[idx] = best
    return out


def segmented_cummax(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` restarting at every group start.

    Parameters
    ----------
    values : ndarray, shape (n,)
    group_start : ndarray of bool, shape (n,)
        True where a new group begins (``group_start[0]`` must be True).

    Returns
    -------
    ndarray, shape (n,)
    """
    if len(values) == 0:
        return values.copy()
    # Lift every group above all earlier ones so one global running maximum
    # never carries across a group boundary; subtract the lift afterwards.
    # The lift is a whole multiple of the value span, so the error is a few
    # ulps of (groups x span): nanoseconds for seconds-sized values.
    lo = float(values.min())
    span = float(values.max()) - lo + 1.0
    lift = (np.cumsum(group_start) - 1) * span
    return np.maximum.accumulate(values - lo + lift) - lift + lo


def ordered_trans(dag, cluster, remaining: np.ndarray, active: np.ndarray, release: np.ndarray,
                  need: np.ndarray, job_rank: np.ndarray | None = None) -> np.ndarray:
    """Transfer times if each job sends its transfers in need order at a per-job fair share.

    The model behind JIT's speed-up (docs/architecture.md §4.1, the paper's intent): a
    port is shared fairly among the *jobs* that use it, not among their
    transfers, and each job sends its own transfers on a port one after the
    other, the one needed first going first (TicTac-like pipelining). On a
    port of capacity ``C`` used by ``n`` jobs, a job's transfers sorted by
    ``need`` with releases ``r_k`` and bytes ``s_k`` then complete at
    ``c_k = max(r_k, c_{k-1}) + s_k * n / C`` (a single-server queue). A
    transfer's completion is the later of its egress and ingress queues, and
    its estimate is ``c_k - r_k``, so the LAT pass's earliest arrival
    ``release + trans`` is exactly ``c_k``.

    Compared with :func:`fair_share_trans` (every transfer of every job
    progressing at once) the urgent transfers of a job get much earlier
    arrival estimates, hence earlier LATs: deadlines that, met, make the job
    faster than under fair sharing rather than reproduce it.

    Parameters
    ----------
    dag : DagArrays
    cluster : Cluster
    remaining : ndarray, shape (n_nodes,)
        Bytes left per transfer.
    active : ndarray of bool, shape (n_nodes,)
        Transfers to queue (unfinished ones).
    release : ndarray, shape (n_nodes,)
        Release time per transfer, seconds (e.g. from a previous LAT pass).
    need : ndarray, shape (n_nodes,)
        Sort key of the need order, seconds (e.g. a previous pass's LATs);
        ties go by release, then node index.
    job_rank : ndarray of int, shape (n_jobs,), optional
        Jobs take each port one after another in this order (lowest first),
        each at the port's full capacity, instead of sharing it fairly: one
        queue per port sorted by (rank, need). The queue never lets a later
        job use a gap before an earlier job's release, so its estimates are
        on the late side; backfill gives such gaps away at run time.

    Returns
    -------
    ndarray, shape (n_nodes,)
        Seconds; 0 for computes and inactive transfers.
    """
    out = np.zeros(dag.n_nodes)
    idx = np.flatnonzero(active)
    if len(idx) == 0:
        return out
    h, nj = len(cluster), max(dag.n_jobs, 1)
    size = np.asarray(remaining, dtype=np.float64)[idx]
    rel = np.asarray(release, dtype=np.float64)[idx]
    key_need = np.asarray(need, dtype=np.float64)[idx]
    job = dag.job_of[idx].astype(np.int64)
    finish = np.full(len(idx), -np.inf)
    for port, cap in ((dag.src[idx].astype(np.int64), cluster.egress_Bps),
                      (dag.dst[idx].astype(np.int64), cluster.ingress_Bps)):
        if job_rank is None:
            group = port * nj + job  # one queue per (port, job)
            jobs_on_port = np.bincount(np.unique(group) // nj, minlength=h)
            work = size * jobs_on_port[port] / cap[port]  # seconds at the job's share
            order = np.lexsort((idx, rel, key_need, group))
        else:
            group = port  # one queue per port, jobs in rank order
            work = size / cap[port]
            order = np.lexsort((idx, rel, key_need, job_rank[job], group))
        g, r, w = group[order], rel[order], work[order]
        start = np.ones(len(g), dtype=bool)
        start[1:] = g[1:] != g[:-1]
        # c_k = W_k + max_{j<=k} (r_j - W_{j-1}) with W the per-group prefix sum
        # of work: the closed form of c_k = max(r_k, c_{k-1}) + w_k.
        csum = np.cumsum(w)
        base = np.repeat((csum - w)[start], np.diff(np.append(np.flatnonzero(start), len(g))))
        wk = csum - base
        c = wk + segmented_cummax(r - (wk - w), start)
        done = np.empty_like(c)
        done[order] = c
        finish = np.maximum(finish, done)
    out[idx] = np.maximum(finish - rel, 0.0)
    return out


def job_ranks(dag, cluster, remaining: np.ndarray, active: np.ndarray, job_order: str
               ) -> np.ndarray | None:
    """Order in which jobs take the ports in the ``ordered`` estimate (None: fair sharing).

    Parameters
    ----------
    dag : DagArrays
    cluster : Cluster
    remaining : ndarray, shape (n_nodes,)
        Bytes left per transfer.
    active : ndarray of bool, shape (n_nodes,)
        Unfinished transfers.
    job_order : {"fair", "fifo", "smallest"}
        See :data:`JOB_ORDERS`.

    Returns
    -------
    ndarray of int64, shape (n_jobs,), or None
        Rank of every job (0 first); ties keep the jobs' order in ``dag``
        (arrival order).
    """
    if job_order == "fair":
        return None
    nj, h = dag.n_jobs, len(cluster)
    if job_order == "fifo":
        return np.arange(nj, dtype=np.int64)
    idx = np.flatnonzero(active)
    job = dag.job_of[idx].astype(np.int64)
    busiest = np.zeros(nj)
    for port, cap in ((dag.src[idx].astype(np.int64), cluster.egress_Bps),
                      (dag.dst[idx].astype(np.int64), cluster.ingress_Bps)):
        secs = np.bincount(job * h + port, weights=np.asarray(remaining, dtype=np.float64)[idx]
                           / cap[port], minlength=nj * h)
        busiest = np.maximum(busiest, secs.reshape(nj, h).max(axis=1, initial=0.0))
    rank = np.empty(nj, dtype=np.int64)
    rank[np.argsort(busiest, kind="stable")] = np.arange(nj)
    return rank
