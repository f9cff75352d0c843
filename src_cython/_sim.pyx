# cython: language_level=3
"""Per-event kernels of the flow-level simulator over its active-flow arrays (private).

The simulator keeps its active flows in parallel buffers, of which the first
``n`` entries are live. A paper-scale run wakes up about a million times with
a few hundred flows active, so one numpy call per array per event costs more
than the arithmetic; these kernels do each step in one pass. Each one
performs exactly the float operations, in the same order, as the numpy code
it replaces, so results are bit-identical (tests/test_sim_kernels.py keeps
pure-Python references).
"""

from libc.math cimport INFINITY, NAN, isfinite


def advance(double dt,
            Py_ssize_t n,
            const double[::1] rate,
            double[::1] rem,
            const long long[::1] node,
            const long long[::1] bg,
            double[::1] sent,
            double[::1] remaining,
            double[::1] bg_sent,
            const double[::1] dag_egress,
            double[::1] dag_egress_int):
    """Move every live flow ``rate * dt`` bytes forward.

    # IN  dt: seconds (> 0); n: live flows
    # IN  rate (>= n,): bytes/s
    # IN/OUT rem (>= n,): bytes left per flow (may go slightly negative)
    # IN  node, bg (>= n,): DAG node of a job transfer (-1 otherwise), background index (-1 otherwise)
    # IN/OUT sent (n_nodes,), bg_sent (n_bg,): bytes sent so far
    # OUT remaining (n_nodes,): ``max(rem, 0)`` of every live job transfer
    # IN  dag_egress (H,): DAG transfer rate per egress port, bytes/s
    # IN/OUT dag_egress_int (H,): its integral over time, bytes (+= dag_egress * dt)
    """
    cdef Py_ssize_t f
    for f in range(dag_egress.shape[0]):
        dag_egress_int[f] += dag_egress[f] * dt
    cdef double moved, r
    cdef long long v
    for f in range(n):
        moved = rate[f] * dt
        r = rem[f] - moved
        rem[f] = r
        v = node[f]
        if v >= 0:
            sent[v] += moved
            remaining[v] = r if r > 0.0 else 0.0
        else:
            bg_sent[bg[f]] += moved
    return 0


def after_allocation(double now,
                     Py_ssize_t n,
                     bint check,
                     const long long[::1] src,
                     const long long[::1] dst,
                     const long long[::1] node,
                     const double[::1] rate,
                     const double[::1] rem,
                     const double[::1] cap_e,
                     const double[::1] cap_i,
                     const double rtol,
                     double[::1] load_e,
                     double[::1] load_i,
                     double[::1] dag_egress,
                     double[::1] fin):
    """Port loads, capacity check, DAG egress rate and finish times of a new allocation.

    # IN  now: seconds; n: live flows; check: verify ports and measure utilisation
    # IN  src, dst, node (>= n,): hosts and DAG node (-1: background) per flow
    # IN  rate, rem (>= n,): bytes/s and bytes left per flow
    # IN  cap_e, cap_i (H,): port capacities, bytes/s; rtol: relative slack of the check
    # OUT load_e, load_i (H,): scratch (per-port load, bytes/s; only with check)
    # OUT dag_egress (H,): rate of DAG transfers per egress port, bytes/s
    # OUT fin (>= n,): ``now + max(rem, 0) / rate`` where rate > 0, else inf
    Returns ``(earliest finish, largest egress utilisation, largest ingress
    utilisation, ok)``; ``ok`` is False if a rate is negative or non-finite
    or a port is over capacity (utilisations are then meaningless, -inf); a
    utilisation is NaN if a ratio is (0/0), as ``np.max`` would report it.
    """
    cdef Py_ssize_t f, h = cap_e.shape[0]
    cdef double r, x, tmin = INFINITY, util_e = -INFINITY, util_i = -INFINITY
    cdef bint ok = True
    for f in range(h):
        dag_egress[f] = 0.0
    if check:
        for f in range(h):
            load_e[f] = 0.0
            load_i[f] = 0.0
    for f in range(n):
        r = rate[f]
        if check:
            if r < 0.0 or not isfinite(r):
                ok = False
            load_e[src[f]] += r
            load_i[dst[f]] += r
        if node[f] >= 0:
            dag_egress[src[f]] += r
        if r > 0.0:
            x = rem[f]
            x = now + (x if x > 0.0 else 0.0) / r
            if x < tmin:
                tmin = x
            fin[f] = x
        else:
            fin[f] = INFINITY
    if check and ok:
        for f in range(h):
            if load_e[f] > cap_e[f] * (1.0 + rtol) + 1e-6 or load_i[f] > cap_i[f] * (1.0 + rtol) + 1e-6:
                ok = False
        util_e = _max_ratio(load_e, cap_e)
        util_i = _max_ratio(load_i, cap_i)
    return tmin, util_e, util_i, ok


cdef double _max_ratio(const double[::1] a, const double[::1] b) noexcept nogil:
    # max(a / b) with NaN winning, as np.max(a / b) reports it
    cdef Py_ssize_t k
    cdef double x, m = -INFINITY
    for k in range(a.shape[0]):
        x = a[k] / b[k]
        if x != x:
            return NAN
        if x > m:
            m = x
    return m


def collect_done(double now,
                 Py_ssize_t n,
                 long long[::1] src,
                 long long[::1] dst,
                 long long[::1] node,
                 long long[::1] job,
                 long long[::1] bg,
                 double[::1] rel,
                 double[::1] rem,
                 double[::1] rate,
                 double[::1] fin,
                 double[::1] tol,
                 long long[::1] out_node,
                 long long[::1] out_bg,
                 double[::1] out_crumb):
    """Take finished flows out of the live arrays, keeping the others in order.

    A flow is finished when ``rem <= tol`` or ``fin <= now``.

    # IN  now: seconds; n: live flows
    # IN/OUT src, dst, node, job, bg, rel, rem, rate, fin, tol (>= n,): the live
    #        flows in, the unfinished ones compacted to the front out
    # OUT out_node, out_bg, out_crumb (>= n,): node, background index and
    #     bytes left of each finished flow, in their former order
    Returns the number of finished flows (the live count drops by as much).
    """
    cdef Py_ssize_t f, k = 0, d = 0
    for f in range(n):
        if rem[f] <= tol[f] or fin[f] <= now:
            out_node[d] = node[f]
            out_bg[d] = bg[f]
            out_crumb[d] = rem[f]
            d += 1
            continue
        if k != f:
            src[k] = src[f]
            dst[k] = dst[f]
            node[k] = node[f]
            job[k] = job[f]
            bg[k] = bg[f]
            rel[k] = rel[f]
            rem[k] = rem[f]
            rate[k] = rate[f]
            fin[k] = fin[f]
            tol[k] = tol[f]
        k += 1
    return d


def append_flows(const double[::1] add,
                 Py_ssize_t lo,
                 double abs_tol,
                 double rel_tol,
                 long long[::1] src,
                 long long[::1] dst,
                 long long[::1] node,
                 long long[::1] job,
                 long long[::1] bg,
                 double[::1] rel,
                 double[::1] rem,
                 double[::1] tol):
    """Write new flows after the live ones.

    # IN  add (7K,): K rows of (src, dst, node, job, bg, release s, bytes), row-major
    # IN  lo: live flows so far (the new ones go to lo .. lo + K - 1)
    # IN  abs_tol, rel_tol: a flow is done at ``abs_tol + rel_tol * bytes`` left
    # OUT src, dst, node, job, bg, rel, rem, tol (>= lo + K,): the new entries
    """
    cdef Py_ssize_t r, k = add.shape[0] // 7, i
    for r in range(k):
        i = lo + r
        src[i] = <long long> add[7 * r]
        dst[i] = <long long> add[7 * r + 1]
        node[i] = <long long> add[7 * r + 2]
        job[i] = <long long> add[7 * r + 3]
        bg[i] = <long long> add[7 * r + 4]
        rel[i] = add[7 * r + 5]
        rem[i] = add[7 * r + 6]
        tol[i] = abs_tol + rel_tol * add[7 * r + 6]
    return 0
