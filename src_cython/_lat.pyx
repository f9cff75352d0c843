# cython: language_level=3
"""Topological order and latest-arrival-time kernels over CSR DAG arrays (private)."""

from libc.math cimport INFINITY, NAN, isnan

from _common cimport COMPUTE, DONE, RUNNING, TRANSFER, WAITING

# The constants of _common.pxd as this module was compiled with them, for
# tests/test_model.py to compare with jitsched.dag.model and jitsched.policies.base.
COMMON_CONSTANTS = {"COMPUTE": COMPUTE, "TRANSFER": TRANSFER,
                    "WAITING": WAITING, "RUNNING": RUNNING, "DONE": DONE}


def topological_order(Py_ssize_t n,
                      const long long[::1] pred_ptr,
                      const long long[::1] succ_ptr,
                      const int[::1] succ_idx,
                      int[::1] order,
                      int[::1] indeg):
    """Kahn's algorithm; returns how many nodes were ordered (< n means a cycle).

    # IN  pred_ptr (n+1,), succ_ptr (n+1,), succ_idx (E,): CSR adjacency
    # OUT order (n,): node indices, sources first; indeg (n,): scratch,
    #     left > 0 exactly on nodes that lie on or behind a cycle
    """
    cdef Py_ssize_t i, head = 0, tail = 0
    cdef long long e
    cdef int v, w
    for i in range(n):
        indeg[i] = <int>(pred_ptr[i + 1] - pred_ptr[i])
        if indeg[i] == 0:
            order[tail] = <int>i
            tail += 1
    while head < tail:
        v = order[head]
        head += 1
        for e in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                order[tail] = w
                tail += 1
    return tail


def lat_pass(const int[::1] topo,
             const signed char[::1] kind,
             const int[::1] job_of,
             const double[::1] floor_s,
             const double[::1] duration,
             const double[::1] trans,
             const double[::1] known_done,
             const long long[::1] pred_ptr,
             const int[::1] pred_idx,
             double[::1] release,
             double[::1] done,
             double[::1] lat,
             double[::1] job_finish):
    """Exact one-pass LAT (docs/architecture.md §4) over all nodes of all jobs.

    # IN  topo (n,): topological order; kind (n,): 0 compute, 1 transfer
    # IN  job_of (n,): job index; floor_s (n_jobs,): job arrival (or now)
    # IN  duration (n,): compute seconds; trans (n,): transfer seconds
    # IN  known_done (n,): finish time already known (NaN = unknown)
    # IN  pred_ptr (n+1,), pred_idx (E,): CSR predecessors
    # OUT release (n,): transfer release time; compute start time
    # OUT done (n,): transfer earliest arrival; compute finish
    # OUT lat (n,): transfer latest arrival time (computes: NaN)
    # OUT job_finish (n_jobs,): latest compute finish per job
    """
    cdef Py_ssize_t n = topo.shape[0], k, j
    cdef long long e
    cdef int v, p
    cdef double a, r, s, cand
    for j in range(job_finish.shape[0]):
        job_finish[j] = floor_s[j]
    for k in range(n):
        v = topo[k]
        a = floor_s[job_of[v]]
        if kind[v] == TRANSFER:
            r = a
            for e in range(pred_ptr[v], pred_ptr[v + 1]):
                p = pred_idx[e]
                if done[p] > r:
                    r = done[p]
            release[v] = r
            if isnan(known_done[v]):
                done[v] = r + trans[v]
            else:
                done[v] = known_done[v]
            lat[v] = INFINITY
        else:
            r = a
            s = a
            for e in range(pred_ptr[v], pred_ptr[v + 1]):
                p = pred_idx[e]
                if kind[p] == TRANSFER:
                    if done[p] > s:
                        s = done[p]
                elif done[p] > r:
                    r = done[p]
            if r > s:
                s = r
            release[v] = s
            if isnan(known_done[v]):
                done[v] = s + duration[v]
            else:
                done[v] = known_done[v]
            if done[v] > job_finish[job_of[v]]:
                job_finish[job_of[v]] = done[v]
            lat[v] = NAN
            # A transfer feeding v may arrive as late as v would start anyway with
            # every other input at its earliest: s >= done[p] for all of them.
            for e in range(pred_ptr[v], pred_ptr[v + 1]):
                p = pred_idx[e]
                if kind[p] == TRANSFER and s < lat[p]:
                    lat[p] = s
    for k in range(n):
        v = topo[k]
        if kind[v] == TRANSFER and lat[v] == INFINITY:
            cand = job_finish[job_of[v]]
            lat[v] = done[v] if done[v] > cand else cand



def paper_lat(const int[::1] ttopo,
              const int[::1] consumer,
              const int[::1] topo_pos,
              const int[::1] topo,
              const signed char[::1] kind,
              const int[::1] job_of,
              const double[::1] floor_s,
              const double[::1] duration,
              const double[::1] trans,
              const long long[::1] succ_ptr,
              const int[::1] succ_idx,
              double[::1] dist,
              double[::1] lat):
    """The paper's Algorithm 1: l_i = max over predecessor transfers j of
    l_j + c(j, i) + trans(i), with c(j, i) the longest compute time from j's
    consumer (inclusive) to i's consumer (exclusive).

    # IN  ttopo (m,): transfer node indices sorted by consumer position
    # IN  consumer (n,): first compute consumer of each transfer (-1: none)
    # IN  topo_pos (n,): position of each node in topo; topo (n,)
    # IN  kind, job_of, floor_s, duration, trans, succ_ptr, succ_idx as lat_pass
    # OUT dist (n,): scratch; lat (n,): estimates for transfers (others untouched)
    """
    cdef Py_ssize_t m = ttopo.shape[0], n = topo.shape[0], a, b, k
    cdef int i, jn, c, v, w
    cdef long long e
    cdef double base, step, tail, cand
    for a in range(m):
        i = ttopo[a]
        lat[i] = floor_s[job_of[i]] + trans[i]
    for a in range(m):
        jn = ttopo[a]
        c = consumer[jn]
        if c < 0:
            continue
        # Longest compute-time path from c (inclusive) to every later node (exclusive).
        for k in range(topo_pos[c], n):
            dist[topo[k]] = -INFINITY
        dist[c] = 0.0
        tail = -INFINITY
        for k in range(topo_pos[c], n):
            v = topo[k]
            if job_of[v] != job_of[c]:
                break
            if dist[v] == -INFINITY:
                continue
            step = dist[v] + (duration[v] if kind[v] != TRANSFER else 0.0)
            if succ_ptr[v + 1] == succ_ptr[v] and step > tail:
                tail = step
            for e in range(succ_ptr[v], succ_ptr[v + 1]):
                w = succ_idx[e]
                if step > dist[w]:
                    dist[w] = step
        base = lat[jn]
        for b in range(a + 1, m):
            i = ttopo[b]
            if job_of[i] != job_of[jn]:
                break
            if consumer[i] < 0:
                if tail > -INFINITY:
                    cand = base + tail + trans[i]
                    if cand > lat[i]:
                        lat[i] = cand
            elif consumer[i] != c and dist[consumer[i]] > -INFINITY:
                cand = base + dist[consumer[i]] + trans[i]
                if cand > lat[i]:
                    lat[i] = cand
