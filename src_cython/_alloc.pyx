# cython: language_level=3
"""Rate-allocation kernels over host ports: max-min fair filling and strict-priority greedy (private)."""

from libc.math cimport INFINITY


cdef inline void _push(double[::1] hkey, int[::1] hport, Py_ssize_t* size,
                       double key, int port) noexcept nogil:
    cdef Py_ssize_t i = size[0], parent
    size[0] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if hkey[parent] < key or (hkey[parent] == key and hport[parent] <= port):
            break
        hkey[i] = hkey[parent]
        hport[i] = hport[parent]
        i = parent
    hkey[i] = key
    hport[i] = port


cdef inline void _pop(double[::1] hkey, int[::1] hport, Py_ssize_t* size) noexcept nogil:
    cdef Py_ssize_t n = size[0] - 1, i = 0, c
    cdef double key = hkey[n]
    cdef int port = hport[n]
    size[0] = n
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (hkey[c + 1] < hkey[c]
                          or (hkey[c + 1] == hkey[c] and hport[c + 1] < hport[c])):
            c += 1
        if key < hkey[c] or (key == hkey[c] and port <= hport[c]):
            break
        hkey[i] = hkey[c]
        hport[i] = hport[c]
        i = c
    if n > 0:
        hkey[i] = key
        hport[i] = port


def maxmin_fair(const long long[::1] port_a,
                const long long[::1] port_b,
                const double[::1] weight,
                double[::1] cap,
                long long[::1] pf_ptr,
                int[::1] pf_idx,
                double[::1] wsum,
                double[::1] rate,
                signed char[::1] mark,
                double[::1] hkey,
                int[::1] hport,
                int[::1] touched):
    """Weighted max-min fair rates by progressive filling.

    Every flow crosses two ports; the port whose residual capacity per unit
    of unfrozen weight is smallest saturates next and freezes its flows at
    ``weight * level``. A lazy binary heap keyed by that level, re-keyed once
    per touched port per saturation, makes one call O((P + F) log P)-ish.

    # IN  port_a, port_b (F,): the two ports of each flow (egress, ingress)
    # IN  weight (F,): positive weights
    # IN/OUT cap (P,): capacities in, residual capacities out
    # OUT pf_ptr (P+2,), pf_idx (2F,): scratch (CSR port -> flows)
    # OUT wsum (P,): scratch; rate (F,): weight * level, bytes/s
    # OUT mark (F + P,): scratch (frozen flows, touched ports)
    # OUT hkey, hport (P + P*P or P + F, whichever smaller, at least P+1): heap scratch
    # OUT touched (P,): scratch
    """
    cdef Py_ssize_t nf = port_a.shape[0], np_ = cap.shape[0], hsize = 0, f, p, e, k, nt
    cdef int q, fl
    cdef double level, key, r
    # counting sort of (port, flow) incidences into pf_ptr/pf_idx
    for p in range(np_ + 2):
        pf_ptr[p] = 0
    for p in range(np_):
        wsum[p] = 0.0
        mark[nf + p] = 0
    for f in range(nf):
        mark[f] = 0
        rate[f] = 0.0
        wsum[port_a[f]] += weight[f]
        wsum[port_b[f]] += weight[f]
        pf_ptr[port_a[f] + 2] += 1
        pf_ptr[port_b[f] + 2] += 1
    for p in range(2, np_ + 2):
        pf_ptr[p] += pf_ptr[p - 1]
    for f in range(nf):
        pf_idx[pf_ptr[port_a[f] + 1]] = <int>f
        pf_ptr[port_a[f] + 1] += 1
        pf_idx[pf_ptr[port_b[f] + 1]] = <int>f
        pf_ptr[port_b[f] + 1] += 1
    for p in range(np_):
        if wsum[p] > 0.0:
            _push(hkey, hport, &hsize, (cap[p] if cap[p] > 0.0 else 0.0) / wsum[p], <int>p)
    while hsize > 0:
        key = hkey[0]
        q = hport[0]
        _pop(hkey, hport, &hsize)
        if wsum[q] <= 0.0:
            continue
        level = (cap[q] if cap[q] > 0.0 else 0.0) / wsum[q]
        if level != key:  # stale entry: the port's level changed after it was pushed
            continue
        nt = 0
        for e in range(pf_ptr[q], pf_ptr[q + 1]):
            fl = pf_idx[e]
            if mark[fl]:
                continue
            mark[fl] = 1
            r = weight[fl] * level
            rate[fl] = r
            cap[port_a[fl]] -= r
            cap[port_b[fl]] -= r
            wsum[port_a[fl]] -= weight[fl]
            wsum[port_b[fl]] -= weight[fl]
            p = port_b[fl] if port_a[fl] == q else port_a[fl]
            if not mark[nf + p]:
                mark[nf + p] = 1
                touched[nt] = <int>p
                nt += 1
        wsum[q] = 0.0
        for k in range(nt):
            p = touched[k]
            mark[nf + p] = 0
            if wsum[p] > 1e-12:
                _push(hkey, hport, &hsize, (cap[p] if cap[p] > 0.0 else 0.0) / wsum[p], <int>p)
            else:
                wsum[p] = 0.0
    return 0


def priority_greedy(const long long[::1] order,
                    const long long[::1] src,
                    const long long[::1] dst,
                    double[::1] free_e,
                    double[::1] free_i,
                    double[::1] rate):
    """Strict priority, work-conserving: flows in ``order`` take what their ports have left.

    # IN  order (F,): flow indices, highest priority first
    # IN  src, dst (F,): host indices
    # IN/OUT free_e, free_i (H,): free egress / ingress in, left over out (bytes/s)
    # OUT rate (F,): bytes/s
    """
    cdef Py_ssize_t k, nf = order.shape[0]
    cdef long long f, s, d
    cdef double r
    for k in range(nf):
        f = order[k]
        s = src[f]
        d = dst[f]
        r = free_e[s] if free_e[s] < free_i[d] else free_i[d]
        if r < 0.0:
            r = 0.0
        rate[f] = r
        free_e[s] -= r
        free_i[d] -= r
    return 0


def pair_groups(const long long[::1] src,
                const long long[::1] dst,
                long long[::1] cnt,
                long long[::1] tmp,
                long long[::1] order,
                long long[::1] gsrc,
                long long[::1] gdst,
                double[::1] gcount,
                long long[::1] inv):
    """Group flows by (src, dst) host pair, pairs in ascending (src, dst) order.

    Two stable counting sorts (by dst, then by src), O(F + H): the same
    groups, in the same order, as ``np.unique(src * H + dst)``, without a
    comparison sort or an H*H table.

    # IN  src, dst (F,): host indices in [0, H)
    # OUT cnt (H+1,), tmp (F,), order (F,): scratch
    # OUT gsrc, gdst (>= G,): the G distinct pairs, ascending
    # OUT gcount (>= G,): flows per pair (as float64, ready as max-min weights)
    # OUT inv (F,): pair index of each flow
    Returns G.
    """
    cdef Py_ssize_t nf = src.shape[0], h = cnt.shape[0] - 1, f, k, g = -1
    cdef long long s, d, ps = -1, pd = -1
    for k in range(h + 1):
        cnt[k] = 0
    for f in range(nf):
        cnt[dst[f] + 1] += 1
    for k in range(1, h + 1):
        cnt[k] += cnt[k - 1]
    for f in range(nf):
        tmp[cnt[dst[f]]] = f
        cnt[dst[f]] += 1
    for k in range(h + 1):
        cnt[k] = 0
    for f in range(nf):
        cnt[src[f] + 1] += 1
    for k in range(1, h + 1):
        cnt[k] += cnt[k - 1]
    for k in range(nf):
        f = tmp[k]
        order[cnt[src[f]]] = f
        cnt[src[f]] += 1
    for k in range(nf):
        f = order[k]
        s = src[f]
        d = dst[f]
        if s != ps or d != pd:
            g += 1
            gsrc[g] = s
            gdst[g] = d
            gcount[g] = 0.0
            ps = s
            pd = d
        gcount[g] += 1.0
        inv[f] = g
    return g + 1
