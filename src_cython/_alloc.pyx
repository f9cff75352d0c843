# cython: language_level=3
"""Rate-allocation kernels over host ports: max-min fair filling and strict-priority greedy (private)."""

# One module although past 500 lines: every allocation (maxmin_fair, pair_maxmin,
# fixed_then_maxmin, SlotPlan) runs the same inline heap, filling core
# (_maxmin_core) and port-pair grouping (_unit_pairs). Split into several
# extension modules, those would be called through function pointers from
# a .pxd, neither inlined nor optimised across the call.

from libc.math cimport INFINITY, NAN, isfinite, isnan, pow
from libc.stdlib cimport calloc, free, malloc


cdef inline void _push(double* hkey, int* hport, Py_ssize_t* size,
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


cdef inline void _pop(double* hkey, int* hport, Py_ssize_t* size) noexcept nogil:
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


cdef inline Py_ssize_t _heap_len(Py_ssize_t h, Py_ssize_t nf) noexcept nogil:
    # heap entries _maxmin_core needs over the 2h ports of h hosts and nf flows (or
    # pairs): one per port, then at most one per touched port per saturation
    return 2 * h + min(2 * nf, 4 * h * h) + 1


cdef void _maxmin_core(Py_ssize_t nf, Py_ssize_t np_, const long long* port_a,
                       const long long* port_b, const double* weight, const long long* mult,
                       double* cap, long long* pf_ptr, int* pf_idx, double* wsum, double* rate,
                       signed char* mark, double* hkey, int* hport, int* touched) noexcept nogil:
    # The body of maxmin_fair on raw buffers. A twin that stays: pair_maxmin,
    # fixed_then_maxmin and SlotPlan run it on their own scratch, with mult (flows
    # grouped by port pair) where maxmin_fair passes weights.
    # Either weight (positive weights) or mult is given: with mult, entry f stands
    # for mult[f] unit-weight flows on the same two ports (at most one entry per
    # pair of ports), and the filling does exactly the float operations it would
    # do on those flows one by one (_unit_pairs).
    cdef Py_ssize_t hsize = 0, f, p, e, k, nt
    cdef int q, fl
    cdef long long other, m, i
    cdef double level, key, r, w, c
    # counting sort of (port, flow) incidences into pf_ptr/pf_idx
    for p in range(np_ + 2):
        pf_ptr[p] = 0
    for p in range(np_):
        wsum[p] = 0.0
        mark[nf + p] = 0
    for f in range(nf):
        mark[f] = 0
        rate[f] = 0.0
        pf_ptr[port_a[f] + 2] += 1
        pf_ptr[port_b[f] + 2] += 1
    if weight != NULL:
        for f in range(nf):
            wsum[port_a[f]] += weight[f]
            wsum[port_b[f]] += weight[f]
    else:
        # sums of whole numbers below 2^53 are exact: the order does not matter
        for f in range(nf):
            wsum[port_a[f]] += <double> mult[f]
            wsum[port_b[f]] += <double> mult[f]
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
        # Port q is done after this loop (all its flows freeze, wsum[q] = 0 keeps
        # it so): only the other port of each flow needs its capacity and weight
        # updated, which spares a serial chain of updates to q's own entries.
        for e in range(pf_ptr[q], pf_ptr[q + 1]):
            fl = pf_idx[e]
            if mark[fl]:
                continue
            mark[fl] = 1
            other = port_b[fl] if port_a[fl] == q else port_a[fl]
            if weight == NULL:
                # mult[fl] flows at the level, one subtraction each, as they would
                # be taken one by one (no other entry of q shares port other)
                m = mult[fl]
                rate[fl] = level
                c = cap[other]
                for i in range(m):
                    c -= level
                cap[other] = c
                wsum[other] -= <double> m
            else:
                w = weight[fl]
                r = w * level
                rate[fl] = r
                cap[other] -= r
                wsum[other] -= w
            if not mark[nf + other]:
                mark[nf + other] = 1
                touched[nt] = <int>other
                nt += 1
        wsum[q] = 0.0
        for k in range(nt):
            p = touched[k]
            mark[nf + p] = 0
            if wsum[p] > 1e-12:
                _push(hkey, hport, &hsize, (cap[p] if cap[p] > 0.0 else 0.0) / wsum[p], <int>p)
            else:
                wsum[p] = 0.0


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
    # IN/OUT cap (P,): capacities in, scratch out (a saturated port keeps its last value)
    # OUT pf_ptr (P+2,), pf_idx (2F,): scratch (CSR port -> flows)
    # OUT wsum (P,): scratch; rate (F,): weight * level, bytes/s
    # OUT mark (F + P,): scratch (frozen flows, touched ports)
    # OUT hkey, hport (P + P*P or P + F, whichever smaller, at least P+1): heap scratch
    # OUT touched (P,): scratch
    """
    _maxmin_core(port_a.shape[0], cap.shape[0], &port_a[0], &port_b[0], &weight[0], NULL, &cap[0],
                 &pf_ptr[0], &pf_idx[0], &wsum[0], &rate[0], &mark[0], &hkey[0], &hport[0],
                 &touched[0])
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



cdef Py_ssize_t _pair_groups(Py_ssize_t nf, Py_ssize_t h, const long long* src, const long long* dst,
                             long long* cnt, long long* tmp, long long* order, long long* gsrc,
                             long long* gdst, double* gcount, long long* inv) noexcept nogil:
    # Two stable counting sorts (by dst, then by src), O(F + H): the groups of
    # np.unique(src * H + dst), in its (ascending) order, without an H*H table.
    cdef Py_ssize_t f, k, g = -1
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


def pair_maxmin(const long long[::1] src,
                const long long[::1] dst,
                const double[::1] cap_e,
                const double[::1] cap_i,
                double[::1] rate):
    """Per-flow max-min fair rates, filled once per (src, dst) host pair.

    Groups the flows by host pair (pairs in ascending (src, dst) order, as
    ``np.unique(src * H + dst)`` lists them), runs :func:`maxmin_fair` on the
    pairs weighted by their flow counts, and gives each flow its pair's rate
    divided by the count. Scratch is allocated here: one call per allocation.

    # IN  src, dst (F,): host indices in [0, H)
    # IN  cap_e, cap_i (H,): free capacity per port, bytes/s
    # OUT rate (F,): bytes/s
    Returns the number of pairs, or -1 if scratch memory ran out.
    """
    cdef Py_ssize_t nf = src.shape[0], h = cap_e.shape[0], ng, f, p, heap
    cdef Py_ssize_t n_ll = (h + 1) + 6 * nf + (2 * h + 2)
    cdef Py_ssize_t n_dbl = nf + 2 * h + 2 * h + nf + (4 * h + 2 * nf + 1)
    cdef Py_ssize_t n_int = 2 * nf + (4 * h + 2 * nf + 1) + 2 * h
    cdef long long* ll = <long long*> malloc((n_ll + 1) * sizeof(long long))
    cdef double* dbl = <double*> malloc((n_dbl + 1) * sizeof(double))
    cdef int* ints = <int*> malloc((n_int + 1) * sizeof(int))
    cdef signed char* mark = <signed char*> malloc(nf + 2 * h + 1)
    cdef long long *cnt, *tmp, *order, *gsrc, *gdst, *inv, *pf_ptr
    cdef double *gcount, *cap, *wsum, *grate, *hkey
    cdef int *pf_idx, *hport, *touched
    if ll == NULL or dbl == NULL or ints == NULL or mark == NULL:
        free(ll)
        free(dbl)
        free(ints)
        free(mark)
        return -1
    cnt = ll
    tmp = cnt + (h + 1)
    order = tmp + nf
    gsrc = order + nf
    gdst = gsrc + nf
    inv = gdst + nf
    pf_ptr = inv + nf + nf  # one spare block keeps the layout simple
    gcount = dbl
    cap = gcount + nf
    wsum = cap + 2 * h
    grate = wsum + 2 * h
    hkey = grate + nf
    ng = _pair_groups(nf, h, &src[0], &dst[0], cnt, tmp, order, gsrc, gdst, gcount, inv)
    for p in range(ng):
        gdst[p] += h  # ingress ports follow the egress ports
    for p in range(h):
        cap[p] = cap_e[p]
        cap[h + p] = cap_i[p]
    heap = _heap_len(h, ng)
    pf_idx = ints
    hport = pf_idx + 2 * ng
    touched = hport + heap
    _maxmin_core(ng, 2 * h, gsrc, gdst, gcount, NULL, cap, pf_ptr, pf_idx, wsum, grate, mark, hkey,
                 hport, touched)
    for p in range(ng):
        grate[p] = grate[p] / gcount[p]
    for f in range(nf):
        rate[f] = grate[inv[f]]
    free(ll)
    free(dbl)
    free(ints)
    free(mark)
    return ng


def index_bounds(const long long[::1] src,
                 const long long[::1] dst,
                 const double[::1] cap_e,
                 const double[::1] cap_i):
    """Smallest and largest host index and whether every capacity is finite, in one pass.

    Lets the Python wrappers validate their inputs without six numpy reductions per call.

    # IN  src, dst (F,): host indices
    # IN  cap_e, cap_i (H,): capacities
    Returns ``(lo, hi, finite)``; ``lo``/``hi`` are 0/-1 when F = 0.
    """
    cdef Py_ssize_t f
    cdef long long lo = 0, hi = -1, v
    cdef bint finite = True
    if src.shape[0]:
        lo = src[0]
        hi = src[0]
    for f in range(src.shape[0]):
        v = src[f]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
        v = dst[f]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    for f in range(cap_e.shape[0]):
        if not isfinite(cap_e[f]):
            finite = False
    for f in range(cap_i.shape[0]):
        if not isfinite(cap_i[f]):
            finite = False
    return lo, hi, finite


cdef Py_ssize_t _unit_pairs(Py_ssize_t n, const long long* a, const long long* b, long long* pair_of,
                            long long* pa, long long* pb, long long* mult) noexcept nogil:
    # Group n flows by their two ports: pair g joins ports pa[g] and pb[g] and
    # holds mult[g] flows, flow f is in pair pair_of[f] (pairs in order of first
    # appearance). A job releases its transfers together, so a pair's flows
    # mostly come in runs: runs are measured in registers, and only a run's
    # first flow looks its pair up, in a hash table of twice the runs.
    # Returns the number of pairs, or -1 if scratch memory ran out.
    cdef Py_ssize_t f, i, start, runs = 0, size = 2, g = 0, slot
    cdef long long ka, kb, k
    cdef unsigned long long x
    cdef long long* table
    for f in range(n):
        if f == 0 or a[f] != a[f - 1] or b[f] != b[f - 1]:
            runs += 1
    while size < 2 * runs:
        size *= 2
    table = <long long*> malloc(size * sizeof(long long))
    if table == NULL:
        return -1
    for slot in range(size):
        table[slot] = -1
    f = 0
    while f < n:
        ka = a[f]
        kb = b[f]
        start = f
        f += 1
        while f < n and a[f] == ka and b[f] == kb:
            f += 1
        x = (<unsigned long long> ka) * 0x9E3779B97F4A7C15ULL ^ (<unsigned long long> kb) * 0xC2B2AE3D27D4EB4FULL
        slot = <Py_ssize_t> ((x >> 32) & <unsigned long long> (size - 1))
        while table[slot] >= 0 and (pa[table[slot]] != ka or pb[table[slot]] != kb):
            slot = (slot + 1) & (size - 1)  # linear probing; the table is at most half full
        if table[slot] < 0:
            table[slot] = g
            pa[g] = ka
            pb[g] = kb
            mult[g] = 0
            g += 1
        k = table[slot]
        mult[k] += f - start
        for i in range(start, f):
            pair_of[i] = k
    free(table)
    return g


cdef inline double _scaled(double x, double load_e, double cap_e, double load_i,
                           double cap_i) noexcept nogil:
    # a planned rate x scaled down by the more oversubscribed of its two ports
    # (factor 1 where the planned load fits; a negative capacity counts as 0)
    cdef double fe = 1.0, fi = 1.0
    if load_e > cap_e:
        fe = (cap_e if cap_e > 0.0 else 0.0) / load_e
    if load_i > cap_i:
        fi = (cap_i if cap_i > 0.0 else 0.0) / load_i
    return x * (fe if fe < fi else fi)


cdef inline void _port_loads(Py_ssize_t nf, Py_ssize_t h, const long long* src, const long long* dst,
                             const double* rate, double* load_e, double* load_i) noexcept nogil:
    # per host the flows' rates summed in flow order from 0.0 (as np.bincount sums them)
    cdef Py_ssize_t k
    for k in range(h):
        load_e[k] = 0.0
        load_i[k] = 0.0
    for k in range(nf):
        load_e[src[k]] += rate[k]
        load_i[dst[k]] += rate[k]


cdef inline void _take(double* rate, double* free_e, double* free_i) noexcept nogil:
    # one backfill turn: the flow adds min(free egress, free ingress) of its two ports
    cdef double r = free_e[0] if free_e[0] < free_i[0] else free_i[0]
    if r < 0.0:
        r = 0.0
    rate[0] += r
    free_e[0] -= r
    free_i[0] -= r


cdef inline void _leftover_caps(Py_ssize_t h, double* cap, const double* cap_e,
                                const double* cap_i, bint used) noexcept nogil:
    # IN  cap[:2h]: with ``used``, the planned rates summed per port (egress, then ingress)
    # IN  cap_e, cap_i (H,): capacity per port, bytes/s
    # OUT cap[:2h]: what is left per port for the flows that share, at least 0
    cdef Py_ssize_t p
    for p in range(h):
        cap[p] = cap_e[p] - cap[p] if used else cap_e[p]
        cap[h + p] = cap_i[p] - cap[h + p] if used else cap_i[p]
    for p in range(2 * h):
        if not cap[p] > 0.0:
            cap[p] = 0.0


def fixed_then_maxmin(const double[::1] fixed,
                      const long long[::1] src,
                      const long long[::1] dst,
                      const double[::1] cap_e,
                      const double[::1] cap_i,
                      const double[::1] weight,
                      double[::1] rate):
    """Planned rates first (scaled down where they overload a port), max-min fair leftover for the rest.

    The float operations of the former numpy code in the same order, so the
    rates are bit-identical: each port's planned load is summed in flow order;
    a planned flow gets ``max(fixed, 0) * min(factor of its egress, of its
    ingress)`` with factor ``max(cap, 0) / load`` on overloaded ports (1
    elsewhere); the sharing flows, in flow order, fill ``max(cap - planned
    load, 0)`` as :func:`maxmin_fair` does.

    # IN  fixed (F,): planned rate in bytes/s, NaN for a flow that shares the leftover
    # IN  src, dst (F,): host indices in [0, H)
    # IN  cap_e, cap_i (H,): capacity per port, bytes/s
    # IN  weight (F,) or (0,): max-min weights of sharing flows (empty: all 1)
    # OUT rate (F,): bytes/s
    Returns 0, or -1 if scratch memory ran out.
    """
    cdef Py_ssize_t nf = src.shape[0], h = cap_e.shape[0], f, p, ns = 0, heap
    cdef bint any_planned = False
    cdef double x
    cdef bint weighted = weight.shape[0] > 0
    cdef Py_ssize_t n_dbl = 4 * h + nf + nf + (2 * h + 2 * nf + 1)
    cdef Py_ssize_t n_ll = 7 * nf + (2 * h + 2)
    cdef Py_ssize_t n_int = 2 * nf + (2 * h + 2 * nf + 1) + 2 * h
    cdef Py_ssize_t ng
    cdef double* dbl = <double*> malloc((n_dbl + 1) * sizeof(double))
    cdef long long* ll = <long long*> malloc((n_ll + 1) * sizeof(long long))
    cdef int* ints = <int*> malloc((n_int + 1) * sizeof(int))
    cdef signed char* mark = <signed char*> malloc(nf + 2 * h + 1)
    cdef double *load, *cap, *sw, *srate, *hkey
    cdef long long *sa, *sb, *sidx, *pf_ptr, *pair_of, *pa, *pb, *mult
    if dbl == NULL or ll == NULL or ints == NULL or mark == NULL:
        free(dbl)
        free(ll)
        free(ints)
        free(mark)
        return -1
    load = dbl  # planned load per port, egress then ingress
    cap = load + 2 * h  # what is left for the sharers, egress then ingress
    sw = cap + 2 * h
    srate = sw + nf
    hkey = srate + nf
    sa = ll
    sb = sa + nf
    sidx = sb + nf
    pair_of = sidx + nf
    pa = pair_of + nf
    pb = pa + nf
    mult = pb + nf
    pf_ptr = mult + nf
    for p in range(2 * h):
        load[p] = 0.0
    for f in range(nf):
        if fixed[f] == fixed[f]:
            any_planned = True
            x = fixed[f] if fixed[f] > 0.0 else 0.0
            load[src[f]] += x
            load[h + dst[f]] += x
    if any_planned:
        for p in range(2 * h):
            cap[p] = 0.0  # the planned flows' rates, summed per port in flow order
        for f in range(nf):
            if fixed[f] == fixed[f]:
                x = _scaled(fixed[f] if fixed[f] > 0.0 else 0.0, load[src[f]], cap_e[src[f]],
                            load[h + dst[f]], cap_i[dst[f]])
                rate[f] = x
                cap[src[f]] += x
                cap[h + dst[f]] += x
    if h:
        _leftover_caps(h, cap, &cap_e[0], &cap_i[0], any_planned)
    for f in range(nf):
        if fixed[f] != fixed[f]:
            sa[ns] = src[f]
            sb[ns] = h + dst[f]
            if weighted:
                sw[ns] = weight[f]
            sidx[ns] = f
            ns += 1
    if ns and weighted:
        heap = _heap_len(h, ns)
        _maxmin_core(ns, 2 * h, sa, sb, sw, NULL, cap, pf_ptr, ints, load, srate, mark,
                     hkey, ints + 2 * ns, ints + 2 * ns + heap)
        for f in range(ns):
            rate[sidx[f]] = srate[f]
    elif ns:
        # Unit weights: fill host pairs, not flows (a JIT allocation has ~25 flows
        # per pair), with the float operations of the flow-by-flow filling.
        ng = _unit_pairs(ns, sa, sb, pair_of, pa, pb, mult)
        if ng < 0:
            free(dbl)
            free(ll)
            free(ints)
            free(mark)
            return -1
        heap = _heap_len(h, ng)
        _maxmin_core(ng, 2 * h, pa, pb, NULL, mult, cap, pf_ptr, ints, load, srate, mark,
                     hkey, ints + 2 * ng, ints + 2 * ng + heap)
        for f in range(ns):
            rate[sidx[f]] = srate[pair_of[f]]
    free(dbl)
    free(ll)
    free(ints)
    free(mark)
    return 0


def backfill(const long long[::1] order,
             const long long[::1] src,
             const long long[::1] dst,
             const double[::1] cap_e,
             const double[::1] cap_i,
             double[::1] rate,
             double[::1] free_e,
             double[::1] free_i):
    """Give the capacity ``rate`` leaves unused to the flows in ``order``, first come first served.

    # IN  order (K,): flow indices, highest priority first
    # IN  src, dst (F,): host indices in [0, H)
    # IN  cap_e, cap_i (H,): capacity per port, bytes/s
    # IN/OUT rate (F,): rates in, plus each listed flow's share of the unused capacity out
    # OUT free_e, free_i (H,): scratch (unused capacity, bytes/s)
    """
    cdef Py_ssize_t nf = src.shape[0], h = cap_e.shape[0], k
    cdef long long g
    cdef double r
    # free_e, free_i = max(cap - load of rate, 0), loads summed in flow order
    _port_loads(nf, h, &src[0] if nf else NULL, &dst[0] if nf else NULL, &rate[0] if nf else NULL,
                &free_e[0] if h else NULL, &free_i[0] if h else NULL)
    for k in range(h):
        r = cap_e[k] - free_e[k]
        free_e[k] = r if r > 0.0 else 0.0
        r = cap_i[k] - free_i[k]
        free_i[k] = r if r > 0.0 else 0.0
    # the flows in order, in turn, add min(free egress, free ingress) to their rate
    for k in range(order.shape[0]):
        g = order[k]
        _take(&rate[g], &free_e[src[g]], &free_i[dst[g]])
    return 0


def slot_rates(long long k,
               const long long[::1] node,
               const long long[::1] src,
               const long long[::1] dst,
               const double[::1] remaining,
               const long long[::1] p_start,
               const long long[::1] p_len,
               const long long[::1] p_off,
               const double[::1] plan_rates,
               const double[::1] size,
               const double[::1] lat,
               const double[::1] cap_e,
               const double[::1] cap_i,
               double crumb_rtol,
               double[::1] fixed,
               long long[::1] cand,
               double[::1] cand_key):
    """Each flow's planned rate in slot ``k`` of a time-slotted plan (the JIT policy's per-allocation step).

    A flow of a planned DAG node is *waiting* before its first planned slot
    (rate 0), *running* within its planned slots (that slot's rate), and
    *over* after them: a crumb (at most ``crumb_rtol`` of its size left) then
    gets line rate, anything more is left to the sharers and counted as drift.
    Every other flow gets NaN (shares the leftover).

    # IN  k: slot index; node, src, dst (F,): DAG node (-1: background) and hosts per flow
    # IN  remaining (F,): bytes left per flow
    # IN  p_start, p_len, p_off (N,): per DAG node, first planned slot (-1: unplanned),
    #     planned slots and offset of its rates in plan_rates (p_off + p_len <= len(plan_rates))
    # IN  size, lat (N,): bytes and latest arrival time per DAG node
    # IN  cap_e, cap_i (H,): capacities, bytes/s; crumb_rtol: crumb threshold
    # OUT fixed (F,): planned rate, bytes/s, or NaN
    # OUT cand, cand_key (F,): the waiting and running flows in flow order, and their nodes' LATs
    Returns ``(number of waiting and running flows, number of drifted flows)``.
    """
    cdef Py_ssize_t nf = node.shape[0], f, nc = 0, nd = 0
    cdef long long v, off
    cdef double ce, ci
    for f in range(nf):
        fixed[f] = NAN
        v = node[f]
        if v < 0 or p_start[v] < 0:
            continue
        off = k - p_start[v]
        if off < 0:
            fixed[f] = 0.0
        elif off < p_len[v]:
            fixed[f] = plan_rates[p_off[v] + off]
        else:
            if remaining[f] <= crumb_rtol * size[v]:
                ce = cap_e[src[f]]
                ci = cap_i[dst[f]]
                fixed[f] = ce if ce < ci else ci
            else:
                nd += 1
            continue
        cand[nc] = f
        cand_key[nc] = lat[v]
        nc += 1
    return nc, nd


cdef inline bint _key_less(double a, double b) noexcept nogil:
    # a < b with NaN after every number, as np.argsort orders them
    return a < b or (b != b and a == a)


cdef void _stable_order(Py_ssize_t n, const double* key, long long* idx, long long* tmp) noexcept nogil:
    # idx = 0..n-1 sorted by key, stably: np.argsort(key, kind="stable").
    # Natural merge sort: each pass merges neighbouring ascending runs, so
    # nearly sorted keys (LATs of flows in release order) take a few passes.
    cdef Py_ssize_t i, m, e, o, a, b, c
    cdef bint merged
    cdef double* kbuf
    cdef double* ka
    cdef double* kb
    cdef double* ks
    cdef long long* ia = idx
    cdef long long* ib = tmp
    cdef long long* isw
    for i in range(n):
        idx[i] = i
    if n < 2:
        return
    kbuf = <double*> malloc(2 * n * sizeof(double))
    if kbuf == NULL:  # no scratch: insertion sort, stable, O(n^2)
        for i in range(1, n):
            c = i
            while c > 0 and _key_less(key[idx[c]], key[idx[c - 1]]):
                idx[c], idx[c - 1] = idx[c - 1], idx[c]
                c -= 1
        return
    ka = kbuf
    kb = kbuf + n
    for i in range(n):
        ka[i] = key[i]
    while True:
        i = 0
        o = 0
        merged = False
        while i < n:
            m = i + 1
            while m < n and not _key_less(ka[m], ka[m - 1]):
                m += 1
            e = m
            if m < n:
                e = m + 1
                while e < n and not _key_less(ka[e], ka[e - 1]):
                    e += 1
                merged = True
            a = i
            b = m
            while a < m and b < e:
                if _key_less(ka[b], ka[a]):
                    kb[o] = ka[b]
                    ib[o] = ia[b]
                    b += 1
                else:
                    kb[o] = ka[a]
                    ib[o] = ia[a]
                    a += 1
                o += 1
            while a < m:
                kb[o] = ka[a]
                ib[o] = ia[a]
                a += 1
                o += 1
            while b < e:
                kb[o] = ka[b]
                ib[o] = ia[b]
                b += 1
                o += 1
            i = e
        ks = ka
        ka = kb
        kb = ks
        isw = ia
        ia = ib
        ib = isw
        if not merged:
            break
    if ia != idx:
        for i in range(n):
            idx[i] = ia[i]
    free(kbuf)


def stable_order(const double[::1] key, long long[::1] idx, long long[::1] tmp):
    """Indices that sort ``key`` stably, NaN last: ``np.argsort(key, kind="stable")``.

    # IN  key (n,)
    # OUT idx (n,): the order; tmp (n,): scratch
    """
    if key.shape[0]:
        _stable_order(key.shape[0], &key[0], &idx[0], &tmp[0])
    return 0


def plan_extent(const long long[::1] p_start,
                const long long[::1] p_len,
                const long long[::1] p_off):
    """Where the planned nodes' rates lie in ``plan_rates``, in one pass.

    Lets :class:`jitsched.plan.alloc.SlotPlan` check a plan once instead of every allocation.

    # IN  p_start, p_len, p_off (N,): first planned slot (-1: unplanned), slots and offset per node
    Returns ``(lo, hi)``: the smallest ``p_off`` and the largest ``p_off + p_len``
    over planned nodes with ``p_len > 0`` (``(0, 0)`` if there is none).
    """
    cdef Py_ssize_t v
    cdef long long lo = 0, hi = 0, end
    cdef bint first = True
    for v in range(p_start.shape[0]):
        if p_start[v] < 0 or p_len[v] <= 0:
            continue
        end = p_off[v] + p_len[v]
        if first or p_off[v] < lo:
            lo = p_off[v]
        if first or end > hi:
            hi = end
        first = False
    return lo, hi


cdef class SlotPlan:
    """A time-slotted plan and the scratch of the JIT policy's allocations (private).

    :class:`jitsched.plan.alloc.SlotPlan` checks the plan arrays once and then
    calls :meth:`rates` on every allocation: the arrays are held here (by
    reference, not copied) and the scratch grows with the flow count, so a
    call acquires only the flows' buffers.

    # IN  p_start, p_len, p_off (N,): per DAG node, first planned slot (-1: unplanned),
    #     planned slots and offset of its rates in plan_rates (p_off + p_len <= len(plan_rates))
    # IN  plan_rates (R,): planned rates, bytes/s
    # IN  lat (N,): latest arrival time per DAG node, seconds
    """

    cdef const long long[::1] p_start
    cdef const long long[::1] p_len
    cdef const long long[::1] p_off
    cdef const double[::1] plan_rates
    cdef const double[::1] lat
    # scratch for cap_f flows and cap_h hosts (malloc'd: rates() slices none of it)
    cdef Py_ssize_t cap_f, cap_h
    cdef double* dbl
    cdef long long* ll
    cdef int* ints
    cdef signed char* mark

    def __init__(self,
                 const long long[::1] p_start,
                 const long long[::1] p_len,
                 const long long[::1] p_off,
                 const double[::1] plan_rates,
                 const double[::1] lat):
        self.p_start = p_start
        self.p_len = p_len
        self.p_off = p_off
        self.plan_rates = plan_rates
        self.lat = lat

    def __dealloc__(self):
        free(self.dbl)
        free(self.ll)
        free(self.ints)
        free(self.mark)

    cdef bint _reserve(self, Py_ssize_t nf, Py_ssize_t h) noexcept:
        # scratch for nf flows and h hosts; doubles, so a run reallocates a few times only.
        # False if memory ran out (the old scratch is gone then, and cap_f is 0).
        if nf <= self.cap_f and h <= self.cap_h and self.dbl != NULL:
            return True
        cdef Py_ssize_t cf = max(nf, 2 * self.cap_f, 16), ch = max(h, self.cap_h, 1)
        free(self.dbl)
        free(self.ll)
        free(self.ints)
        free(self.mark)
        # layouts: see _rates
        self.dbl = <double*> malloc((8 * ch + 5 * cf + 1) * sizeof(double))
        self.ll = <long long*> malloc((11 * cf + 2 * ch + 2) * sizeof(long long))
        self.ints = <int*> malloc((4 * cf + 6 * ch + 1) * sizeof(int))
        self.mark = <signed char*> malloc(cf + 2 * ch)
        if self.dbl == NULL or self.ll == NULL or self.ints == NULL or self.mark == NULL:
            free(self.dbl)
            free(self.ll)
            free(self.ints)
            free(self.mark)
            self.dbl = self.ll = self.ints = self.mark = NULL
            self.cap_f = self.cap_h = 0
            return False
        self.cap_f = cf
        self.cap_h = ch
        return True

    cdef Py_ssize_t _rates(self, long long k, Py_ssize_t nf, Py_ssize_t h, const long long* node,
                           const long long* src, const long long* dst, const double* remaining,
                           const double* size, const double* cap_e, const double* cap_i, double crumb_rtol,
                           bint backfill, double* rate, Py_ssize_t* n_drift) noexcept nogil:
        # A twin of rates() that stays: rates() turns the buffers into pointers (NULL for
        # an empty one) and reserves the scratch; this is the hot loop of every JIT
        # allocation, nogil so that the compiler refuses any Python operation in it.
        # slot_rates, fixed_then_maxmin (unit weights) and backfill of the candidates, fused
        # so that a waiting flow (planned rate 0: most flows of a busy run) costs one visit:
        # adding its 0.0 to a port sum that starts at +0.0 changes nothing, and its rate is
        # 0.0 * a finite factor, so only flows planned above 0 go through the scaling pass
        # and only flows with a rate through the free-capacity sums, each in flow order, as
        # the three kernels in turn add them. The exception: a factor is NaN (0/0) on an
        # ingress of negative capacity with no planned load, so 0.0 flows into such a port
        # take the scaling pass too. Returns the candidates (waiting and running flows), or -1
        # if scratch memory ran out.
        cdef Py_ssize_t f, i, j, p, nc = 0, nd = 0, npl = 0, ns = 0, ng, m, heap
        cdef long long v, off, s, d
        cdef double x, fe, fi, r
        # doubles: load 2h | cap 2h | free_e h | free_i h | srate F | hkey 2h+2F+1 | pl_x F | cand_key F
        cdef double* load = self.dbl
        cdef double* cap = load + 2 * h
        cdef double* free_e = cap + 2 * h
        cdef double* free_i = free_e + h
        cdef double* srate = free_i + h
        cdef double* hkey = srate + nf
        cdef double* pl_x = hkey + (2 * h + 2 * nf + 1)
        cdef double* cand_key = pl_x + nf
        # long longs: sa sb sidx pair_of pa pb mult pl_idx cand order tmp (F each) | pf_ptr 2h+2
        cdef long long* sa = self.ll
        cdef long long* sb = sa + nf
        cdef long long* sidx = sb + nf
        cdef long long* pair_of = sidx + nf
        cdef long long* pa = pair_of + nf
        cdef long long* pb = pa + nf
        cdef long long* mult = pb + nf
        cdef long long* pl_idx = mult + nf
        cdef long long* cand = pl_idx + nf
        cdef long long* order = cand + nf
        cdef long long* tmp = order + nf
        cdef long long* pf_ptr = tmp + nf
        # the plan as plain pointers: read through self, every access reloads
        # the buffer's address (the stores below might alias it, as far as C knows)
        cdef const long long* p_start = &self.p_start[0] if self.p_start.shape[0] else NULL
        cdef const long long* p_len = &self.p_len[0] if self.p_len.shape[0] else NULL
        cdef const long long* p_off = &self.p_off[0] if self.p_off.shape[0] else NULL
        cdef const double* plan_rates = &self.plan_rates[0] if self.plan_rates.shape[0] else NULL
        cdef const double* lat = &self.lat[0] if self.lat.shape[0] else NULL
        for p in range(2 * h):
            load[p] = 0.0
        for f in range(nf):
            v = node[f]
            if v >= 0 and p_start[v] >= 0:
                off = k - p_start[v]
                if off < 0 or off < p_len[v]:  # waiting or running: a candidate
                    x = 0.0 if off < 0 else plan_rates[p_off[v] + off]
                    cand[nc] = f
                    cand_key[nc] = lat[v]
                    nc += 1
                elif remaining[f] <= crumb_rtol * size[v]:
                    fe = cap_e[src[f]]
                    fi = cap_i[dst[f]]
                    x = fe if fe < fi else fi
                else:
                    x = NAN  # drifted: shares the leftover
                    nd += 1
                if x == x:  # a NaN planned rate shares the leftover, as fixed_then_maxmin has it
                    if x > 0.0:
                        load[src[f]] += x
                        load[h + dst[f]] += x
                        pl_idx[npl] = f
                        pl_x[npl] = x
                        npl += 1
                    elif cap_i[dst[f]] < 0.0:
                        pl_idx[npl] = f
                        pl_x[npl] = 0.0
                        npl += 1
                    else:
                        rate[f] = 0.0
                    continue
            sa[ns] = src[f]
            sb[ns] = h + dst[f]
            sidx[ns] = f
            ns += 1
        n_drift[0] = nd
        if npl:
            for p in range(2 * h):
                cap[p] = 0.0  # the planned flows' rates, summed per port in flow order
            for i in range(npl):
                f = pl_idx[i]
                s = src[f]
                d = dst[f]
                x = _scaled(pl_x[i], load[s], cap_e[s], load[h + d], cap_i[d])
                rate[f] = x
                cap[s] += x
                cap[h + d] += x
        _leftover_caps(h, cap, cap_e, cap_i, npl > 0)
        if ns:
            ng = _unit_pairs(ns, sa, sb, pair_of, pa, pb, mult)
            if ng < 0:
                return -1
            heap = _heap_len(h, ng)
            _maxmin_core(ng, 2 * h, pa, pb, NULL, mult, cap, pf_ptr, self.ints, load, srate, self.mark,
                         hkey, self.ints + 2 * ng, self.ints + 2 * ng + heap)
            for i in range(ns):
                rate[sidx[i]] = srate[pair_of[i]]
        if not backfill or nc == 0:
            return nc
        for p in range(h):
            free_e[p] = 0.0
            free_i[p] = 0.0
        i = 0
        j = 0
        while i < npl or j < ns:  # the flows with a rate, merged back into flow order
            if j == ns or (i < npl and pl_idx[i] < sidx[j]):
                f = pl_idx[i]
                i += 1
            else:
                f = sidx[j]
                j += 1
            free_e[src[f]] += rate[f]
            free_i[dst[f]] += rate[f]
        for p in range(h):
            r = cap_e[p] - free_e[p]
            free_e[p] = r if r > 0.0 else 0.0
            r = cap_i[p] - free_i[p]
            free_i[p] = r if r > 0.0 else 0.0
        # Free capacity only shrinks as candidates take it, so one that finds
        # none on either port now gets nothing whatever its turn: sort only
        # the others (a stable sort of a subsequence is the subsequence of the
        # stable sort, so the rates are the same).
        m = 0
        for i in range(nc):
            f = cand[i]
            if free_e[src[f]] > 0.0 and free_i[dst[f]] > 0.0:
                cand[m] = f
                cand_key[m] = cand_key[i]
                m += 1
        if m:
            _stable_order(m, cand_key, tmp, order)
            for i in range(m):
                f = cand[tmp[i]]
                _take(&rate[f], &free_e[src[f]], &free_i[dst[f]])
        return nc

    def rates(self,
              long long k,
              const long long[::1] node,
              const long long[::1] src,
              const long long[::1] dst,
              const double[::1] remaining,
              const double[::1] size,
              const double[::1] cap_e,
              const double[::1] cap_i,
              double crumb_rtol,
              bint backfill,
              double[::1] rate):
        """The JIT policy's allocation in one call: :func:`slot_rates`, :func:`fixed_then_maxmin`,
        then (if ``backfill``) :func:`backfill` of the waiting and running flows, earliest LAT first.

        # IN  k: slot index; node, src, dst (F,): DAG node (-1: background, else < N) and hosts
        # IN  remaining (F,): bytes left per flow; size (N,): bytes per DAG node
        # IN  cap_e, cap_i (H,): capacities, bytes/s; crumb_rtol: crumb threshold (as slot_rates)
        # IN  backfill: give unused capacity to planned flows
        # OUT rate (F,): bytes/s
        Returns ``(waiting and running flows, drifted flows)``, or ``(-1, 0)`` if
        scratch memory ran out.
        """
        cdef Py_ssize_t nd = 0, nc, nf = node.shape[0], h = cap_e.shape[0]
        if nf == 0:
            return 0, 0
        if not self._reserve(nf, h):
            return -1, 0
        nc = self._rates(k, nf, h, &node[0], &src[0], &dst[0], &remaining[0], &size[0] if size.shape[0] else NULL,
                         &cap_e[0] if h else NULL, &cap_i[0] if h else NULL, crumb_rtol, backfill, &rate[0], &nd)
        if nc < 0:
            return -1, 0
        return nc, nd


cdef inline bint _prio_before(Py_ssize_t a, Py_ssize_t b, const double* key, const long long* node,
                              const long long* job, const long long* bg, const double* need,
                              long long n_jobs) noexcept nogil:
    # flow a before flow b in np.lexsort((bg, node, need_of, ident, key)) order, where a
    # job transfer's ident is its job and need_of its node's need, a background flow's
    # n_jobs + its index and 0.0; NaNs after every number and equal to each other, as
    # np.lexsort has them (see _key_less)
    cdef long long ia, ib, na = node[a], nb = node[b]
    cdef double xa = key[a], xb = key[b]
    if _key_less(xa, xb):
        return True
    if _key_less(xb, xa):
        return False
    ia = job[a] if job[a] >= 0 else n_jobs + bg[a]
    ib = job[b] if job[b] >= 0 else n_jobs + bg[b]
    if ia != ib:
        return ia < ib
    xa = need[na] if job[a] >= 0 else 0.0
    xb = need[nb] if job[b] >= 0 else 0.0
    if _key_less(xa, xb):
        return True
    if _key_less(xb, xa):
        return False
    if na != nb:
        return na < nb
    return bg[a] < bg[b]


cdef class GroupPriority:
    """The default JIT policy's strict-priority allocation, by group heads (private).

    :class:`jitsched.plan.alloc.GroupPriority` checks the per-node and per-group
    arrays once and calls :meth:`rates` on every allocation; they are held here
    by reference (the policy updates ``need`` and ``pair_left`` in place) with
    the scratch, so a call acquires only the flows' buffers.

    # IN  size, need (N,): bytes and need order (s) per DAG node
    # IN  group (N,): per DAG node its (job, src, dst) group, in [0, G)
    # IN  pair_left (G,): bytes each group has in transfers not yet done
    # IN  bg_bytes (B,): bytes per background flow (B = 0: a flow's remaining bytes stand in)
    # IN  egress (H,): line rate per host, bytes/s (the background key's reference)
    # IN  bg_ref_s, bg_weight, crumb_rtol, n_jobs: as jitsched.plan.alloc.GroupPriority
    # IN  group_job (G,): each group's job (any value where job_exp is 0)
    # IN  job_left (J,): bytes each job has in transfers not yet done
    # IN  job_scale (J,): each job's bytes left count times this (1: as they are)
    # IN  job_exp: a group's key is scaled by (its job's bytes left times its
    #     job_scale / bg_ref_s of the line rate) ** job_exp (0: not scaled)
    # IN  comp_ptr (C + 1,), comp_groups (G,): the groups of each component, CSR; a
    #     group's bytes left in its key are the largest of its component's groups'
    #     (a group alone in its component: its own)
    # IN  group_comp (G,): each group's component, in [0, C)
    """

    cdef const double[::1] size
    cdef const double[::1] need
    cdef const long long[::1] group
    cdef const double[::1] pair_left
    cdef const double[::1] bg_bytes
    cdef const double[::1] egress
    cdef double bg_ref_s, bg_weight, crumb_rtol, job_exp
    cdef const long long[::1] group_job
    cdef const double[::1] job_left
    cdef const double[::1] job_scale
    cdef const long long[::1] comp_ptr
    cdef const long long[::1] comp_groups
    cdef const long long[::1] group_comp
    cdef double* jsent  # per job: bytes its live transfers sent (zeros between calls)
    cdef long long n_jobs
    cdef Py_ssize_t n_groups
    cdef double* gsent  # per group: bytes its live transfers sent (zeros between calls)
    cdef long long* head  # per group: -1 between calls; -2 touched, or its first non-crumb flow
    cdef double* hneed  # per group: its first flow's need and node, as the call found them
    cdef long long* hnode
    cdef Py_ssize_t cap_f, cap_h
    cdef double* fe  # per host: free egress, then free ingress (the caller's stay as they are)
    cdef double* key  # per flow
    cdef long long* cand  # candidates, then the merge sort's scratch
    cdef long long* groups  # groups touched by the flows of a call

    def __init__(self,
                 const double[::1] size,
                 const double[::1] need,
                 const long long[::1] group,
                 const double[::1] pair_left,
                 const double[::1] bg_bytes,
                 const double[::1] egress,
                 double bg_ref_s,
                 double bg_weight,
                 double crumb_rtol,
                 long long n_jobs,
                 const long long[::1] group_job,
                 const double[::1] job_left,
                 const double[::1] job_scale,
                 double job_exp,
                 const long long[::1] comp_ptr,
                 const long long[::1] comp_groups,
                 const long long[::1] group_comp):
        self.size = size
        self.need = need
        self.group = group
        self.pair_left = pair_left
        self.bg_bytes = bg_bytes
        self.egress = egress
        self.bg_ref_s = bg_ref_s
        self.bg_weight = bg_weight
        self.crumb_rtol = crumb_rtol
        self.n_jobs = n_jobs
        self.group_job = group_job
        self.job_left = job_left
        self.job_scale = job_scale
        self.job_exp = job_exp
        self.comp_ptr = comp_ptr
        self.comp_groups = comp_groups
        self.group_comp = group_comp
        cdef Py_ssize_t j, g, ng = pair_left.shape[0]
        self.jsent = <double*> malloc((n_jobs + 1) * sizeof(double))
        if self.jsent == NULL:
            raise MemoryError("GroupPriority: no memory for the per-job scratch")
        for j in range(n_jobs + 1):
            self.jsent[j] = 0.0
        self.gsent = <double*> malloc((ng + 1) * sizeof(double))
        self.head = <long long*> malloc((ng + 1) * sizeof(long long))
        self.hneed = <double*> malloc((ng + 1) * sizeof(double))
        self.hnode = <long long*> malloc((ng + 1) * sizeof(long long))
        if self.gsent == NULL or self.head == NULL or self.hneed == NULL or self.hnode == NULL:
            raise MemoryError("GroupPriority: no memory for the per-group scratch")
        for g in range(ng):
            self.gsent[g] = 0.0
            self.head[g] = -1
        self.n_groups = ng

    def __dealloc__(self):
        free(self.jsent)
        free(self.gsent)
        free(self.head)
        free(self.hneed)
        free(self.hnode)
        free(self.fe)
        free(self.key)
        free(self.cand)
        free(self.groups)

    cdef bint _reserve(self, Py_ssize_t nf, Py_ssize_t h) noexcept:
        # per-flow scratch; doubles, so a run reallocates a few times only.
        # False if memory ran out (the old scratch is gone then, and cap_f is 0).
        if h > self.cap_h or self.fe == NULL:
            free(self.fe)
            self.fe = <double*> malloc((2 * h + 1) * sizeof(double))
            self.cap_h = h if self.fe != NULL else 0
            if self.fe == NULL:
                return False
        if nf <= self.cap_f and self.key != NULL:
            return True
        cdef Py_ssize_t cf = max(nf, 2 * self.cap_f, 16)
        free(self.key)
        free(self.cand)
        free(self.groups)
        self.key = <double*> malloc(cf * sizeof(double))
        self.cand = <long long*> malloc(2 * cf * sizeof(long long))
        self.groups = <long long*> malloc(cf * sizeof(long long))
        if self.key == NULL or self.cand == NULL or self.groups == NULL:
            free(self.key)
            free(self.cand)
            free(self.groups)
            self.key = NULL
            self.cand = self.groups = NULL
            self.cap_f = 0
            return False
        self.cap_f = cf
        return True

    cdef void _rates(self, Py_ssize_t nf, Py_ssize_t h, const long long* src, const long long* dst,
                     const long long* node, const long long* job, const long long* bg,
                     const double* remaining, const double* cap_e, const double* cap_i,
                     double* rate) noexcept nogil:
        # Strict priority greedy over every flow in lexsort order (_prio_before) gives a
        # flow 0.0 whenever an earlier flow on the same host pair had its turn: that one
        # took min(free egress, free ingress), leaving one of the two ports at exactly 0.0,
        # and a port at 0.0 stays there (each later turn takes at most what is free).
        # The transfers of one (job, src, dst) group that are not crumbs share their key
        # and job, so they go in need order and only the first of them can get a rate:
        # the greedy needs the groups' first flows, the crumbs and the background flows
        # only (a few dozen heads instead of thousands of flows at paper scale, measured
        # 1700 flows in ~22 groups per allocation at 200 jobs), in order.
        cdef Py_ssize_t f, i, m = 0, ng = 0, w, lo, mid, hi, a, b, k
        cdef long long v, g, s, d, x, c, q
        cdef double sz, r, fe, fi
        cdef double* key = self.key
        cdef long long* cand = self.cand
        cdef long long* tmp = self.cand + nf
        cdef long long* groups = self.groups
        cdef double* gsent = self.gsent
        cdef long long* head = self.head
        cdef const double* size = &self.size[0] if self.size.shape[0] else NULL
        cdef const double* need = &self.need[0] if self.need.shape[0] else NULL
        cdef const long long* group = &self.group[0] if self.group.shape[0] else NULL
        cdef const double* pair_left = &self.pair_left[0] if self.pair_left.shape[0] else NULL
        cdef const double* bg_bytes = &self.bg_bytes[0] if self.bg_bytes.shape[0] else NULL
        cdef const double* egress = &self.egress[0] if self.egress.shape[0] else NULL
        cdef double* free_e = self.fe
        cdef double* free_i = self.fe + h
        for i in range(h):  # negative free capacity counts as none
            free_e[i] = cap_e[i] if cap_e[i] > 0.0 else 0.0
            free_i[i] = cap_i[i] if cap_i[i] > 0.0 else 0.0
        # One pass: bytes sent per group, summed in flow order as np.bincount does
        # (background flows add their +0.0, which changes no sum that starts at
        # +0.0), the crumbs and background flows, and each group's first flow, by
        # (need, node) as lexsort breaks the group's tie. A group's key is the same
        # for all its flows, so only its first flow's is computed, after the pass
        # (two passes, each flow's key and the head's need read through its node,
        # took 13.7 µs for a 1414-flow allocation of the 1000-job run, one 6.6 µs).
        for f in range(nf):
            rate[f] = 0.0
            if job[f] >= 0:
                v = node[f]
                g = group[v]
                sz = size[v]
                r = remaining[f]
                x = head[g]
                if x == -1:
                    head[g] = x = -2  # touched: restored at the end
                    groups[ng] = g
                    ng += 1
                gsent[g] += sz - r
                if self.job_exp != 0.0:
                    self.jsent[job[f]] += sz - r
                if r <= self.crumb_rtol * sz:
                    # crumbs of a transfer whose plan met its demand only to the LP's tolerance
                    key[f] = -1.0
                    cand[m] = f
                    m += 1
                    continue
                fe = need[v]
                if x < 0 or _key_less(fe, self.hneed[g]) or (not _key_less(self.hneed[g], fe)
                                                             and v < self.hnode[g]):
                    head[g] = f
                    self.hneed[g] = fe
                    self.hnode[g] = v
            else:
                sz = bg_bytes[bg[f]] if bg_bytes != NULL else remaining[f]
                r = remaining[f]
                key[f] = r * (sz / (self.bg_ref_s * egress[src[f]])) * self.bg_weight if r > 0.0 else 0.0
                cand[m] = f
                m += 1
        cdef const long long* comp_ptr = &self.comp_ptr[0]
        cdef const long long* comp_groups = &self.comp_groups[0] if self.comp_groups.shape[0] else NULL
        cdef const long long* group_comp = &self.group_comp[0] if self.group_comp.shape[0] else NULL
        for i in range(ng):  # the heads' keys, every group's bytes sent counted first
            g = groups[i]
            x = head[g]
            if x >= 0:
                c = group_comp[g]
                key[x] = pair_left[g] - gsent[g]
                for q in range(comp_ptr[c], comp_ptr[c + 1]):  # the component's largest
                    v = comp_groups[q]
                    if pair_left[v] - gsent[v] > key[x]:
                        key[x] = pair_left[v] - gsent[v]
                if self.job_exp != 0.0:
                    fe = self.job_left[self.group_job[g]] - self.jsent[self.group_job[g]]
                    if fe < 0.0:
                        fe = 0.0
                    fe = fe * self.job_scale[self.group_job[g]]
                    key[x] = key[x] * pow(fe / (self.bg_ref_s * egress[src[x]]), self.job_exp)
                cand[m] = x
                m += 1
        for i in range(ng):
            g = groups[i]
            head[g] = -1
            gsent[g] = 0.0
        if self.job_exp != 0.0:
            for i in range(ng):
                self.jsent[self.group_job[groups[i]]] = 0.0
        # the heads in order: a bottom-up merge sort, stable (flows of equal keys
        # keep their order; with one flow per node none compare equal)
        w = 1
        while w < m:
            lo = 0
            while lo < m:
                mid = lo + w if lo + w < m else m
                hi = lo + 2 * w if lo + 2 * w < m else m
                a = lo
                b = mid
                k = lo
                while k < hi:
                    if b >= hi or (a < mid and not _prio_before(cand[b], cand[a], key, node, job, bg, need,
                                                                 self.n_jobs)):
                        tmp[k] = cand[a]
                        a += 1
                    else:
                        tmp[k] = cand[b]
                        b += 1
                    k += 1
                lo = hi
            cand, tmp = tmp, cand
            w *= 2
        for i in range(m):
            f = cand[i]
            s = src[f]
            d = dst[f]
            fe = free_e[s]
            fi = free_i[d]
            r = fe if fe < fi else fi
            if r < 0.0:
                r = 0.0
            rate[f] = r
            free_e[s] -= r
            free_i[d] -= r

    def rates(self,
              const long long[::1] src,
              const long long[::1] dst,
              const long long[::1] node,
              const long long[::1] job,
              const long long[::1] bg,
              const double[::1] remaining,
              const double[::1] free_e,
              const double[::1] free_i,
              const long long[::1] tier,
              double[::1] rate):
        """Strict-priority rates of every flow in the JIT order, over the free capacity, tier by tier.

        # IN  src, dst (F,): hosts; node, job (F,): DAG node and job (-1: background)
        # IN  bg (F,): background index (-1: job transfer); remaining (F,): bytes left
        # IN  free_e, free_i (H,): free capacity, bytes/s (negative: none)
        # IN  tier (F,) or (0,): each flow's tier, >= 0, lower tiers first; empty: one tier
        # OUT rate (F,): bytes/s
        Tier t's flows, in flow order, get what a call on them alone gives with free
        capacity max(free - sums of earlier tiers' rates per host, 0): the sums taken
        in flow order from 0.0 as np.bincount takes them, the clamp as np.maximum's (a
        NaN stays NaN, -0.0 stays -0.0), free itself clamped first.
        Returns 0, -1 if scratch memory ran out, -2 if a tier is negative.
        """
        cdef Py_ssize_t nf = src.shape[0], h = free_e.shape[0], f, m, i, k
        cdef long long t, n_tiers = 0
        if nf == 0:
            return 0
        for f in range(tier.shape[0]):  # none: one tier
            if tier[f] < 0:
                return -2
            if tier[f] >= n_tiers:
                n_tiers = tier[f] + 1
        if not self._reserve(nf, h):
            return -1
        if tier.shape[0] == 0:
            self._rates(nf, h, &src[0], &dst[0], &node[0], &job[0], &bg[0], &remaining[0],
                        &free_e[0], &free_i[0], &rate[0])
            return 0
        # one more than needed of each: an allocation of 0 bytes may return NULL
        cdef long long* ll = <long long*> malloc((6 * nf + 1) * sizeof(long long))
        cdef double* dbl = <double*> malloc((2 * nf + 4 * h + 1) * sizeof(double))
        if ll == NULL or dbl == NULL:
            free(ll)
            free(dbl)
            return -1
        cdef long long *idx = ll, *s_src = ll + nf, *s_dst = ll + 2 * nf, *s_node = ll + 3 * nf
        cdef long long *s_job = ll + 4 * nf, *s_bg = ll + 5 * nf
        cdef double *s_rem = dbl, *s_rate = dbl + nf, *cur_e = dbl + 2 * nf, *cur_i = dbl + 2 * nf + h
        cdef double *acc_e = dbl + 2 * nf + 2 * h, *acc_i = dbl + 2 * nf + 3 * h
        cdef double x
        for i in range(h):  # np.maximum(free, 0.0)
            cur_e[i] = free_e[i] if (free_e[i] >= 0.0 or isnan(free_e[i])) else 0.0
            cur_i[i] = free_i[i] if (free_i[i] >= 0.0 or isnan(free_i[i])) else 0.0
        with nogil:
            for t in range(n_tiers):
                m = 0
                for f in range(nf):
                    if tier[f] == t:
                        idx[m] = f
                        s_src[m] = src[f]
                        s_dst[m] = dst[f]
                        s_node[m] = node[f]
                        s_job[m] = job[f]
                        s_bg[m] = bg[f]
                        s_rem[m] = remaining[f]
                        m += 1
                if m == 0:
                    continue
                self._rates(m, h, s_src, s_dst, s_node, s_job, s_bg, s_rem, cur_e, cur_i, s_rate)
                for k in range(m):
                    rate[idx[k]] = s_rate[k]
                if t + 1 < n_tiers:
                    _port_loads(m, h, s_src, s_dst, s_rate, acc_e, acc_i)
                    for i in range(h):
                        x = cur_e[i] - acc_e[i]
                        cur_e[i] = x if (x >= 0.0 or isnan(x)) else 0.0
                        x = cur_i[i] - acc_i[i]
                        cur_i[i] = x if (x >= 0.0 or isnan(x)) else 0.0
        free(ll)
        free(dbl)
        return 0


cdef double _lenders_core(Py_ssize_t nf, const double* need, const long long* job, const long long* group,
                          const double* t_left, double* late, const double* threshold, double now,
                          double recheck, unsigned char* lend, unsigned char* held, double* slack) noexcept nogil:
    # flow_lenders on checked per-flow arrays; held (n_groups + 1) zeroed, slack (nf) scratch
    cdef Py_ssize_t f
    cdef long long j
    cdef double v, s, wake = INFINITY
    for f in range(nf):
        j = job[f]
        if j >= 0 and isfinite(need[f]):
            v = now + t_left[f] - need[f]
            if v > late[j]:
                late[j] = v
    for f in range(nf):
        j = job[f]
        lend[f] = 0
        if j < 0:
            continue
        s = need[f] + late[j] - now - t_left[f] if isfinite(need[f]) else -INFINITY
        slack[f] = s
        if s > threshold[f]:
            lend[f] = 1
        else:
            held[group[f]] = 1
    for f in range(nf):
        if lend[f]:
            if held[group[f]]:
                lend[f] = 0
            else:
                v = slack[f] - threshold[f]
                if v < recheck * threshold[f]:
                    v = recheck * threshold[f]
                if v < wake:
                    wake = v
    return now + wake if wake < INFINITY else INFINITY


def flow_lenders(const long long[::1] node,
                 const long long[::1] job,
                 const long long[::1] src,
                 const long long[::1] dst,
                 const double[::1] remaining,
                 const double[::1] node_need,
                 const long long[::1] node_group,
                 Py_ssize_t n_groups,
                 const unsigned char[::1] may_lend,
                 const double[::1] iso_jct,
                 double lend_slack,
                 const double[::1] cap_e,
                 const double[::1] cap_i,
                 double[::1] late,
                 double now,
                 double recheck,
                 unsigned char[::1] lend):
    """The job flows whose (job, src, dst) group can wait: jitsched.plan.priority.flow_lenders.

    # IN  node, job, src, dst, remaining (F,): the flows (node and job -1: background)
    # IN  node_need (N,), node_group (N,): each DAG node's need (s) and group in [0, n_groups)
    # IN  may_lend (J,): 1 where a job's groups may lend; iso_jct (J,): seconds
    # IN  lend_slack: a job flow's threshold is lend_slack times its job's iso_jct where
    #     it may lend, inf times it where not (as numpy multiplies: inf * 0 is NaN)
    # IN  cap_e, cap_i (H,): line rates; a flow's time left is its remaining bytes
    #     over the smaller of its ports' (np.minimum's choice)
    # IN/OUT late (J,): each job's lateness, raised to what its flows show at now
    # OUT lend (F,): 1 where the flow's group lends
    # IN  recheck: the least wait, in thresholds, before a lender is looked at again
    # returns the instant to look again: the first at which a lender's slack reaches its
    # threshold, but at least recheck thresholds away (inf: none lends); NaN if a node,
    # job, group or host index is out of range (nothing written)
    """
    cdef Py_ssize_t f, nf = node.shape[0], nj = late.shape[0], nn = node_need.shape[0], h = cap_e.shape[0]
    cdef long long j, v
    cdef double a, b
    if may_lend.shape[0] != nj or iso_jct.shape[0] != nj or node_group.shape[0] != nn or cap_i.shape[0] != h:
        return NAN
    for f in range(nf):
        j = job[f]
        if j < 0:
            continue
        v = node[f]
        if (j >= nj or v < 0 or v >= nn or node_group[v] < 0 or node_group[v] >= n_groups
                or src[f] < 0 or src[f] >= h or dst[f] < 0 or dst[f] >= h):
            return NAN
    cdef unsigned char* held = <unsigned char*> calloc(n_groups + 1, 1)
    cdef double* dbl = <double*> malloc((4 * nf + 1) * sizeof(double))
    cdef long long* grp = <long long*> malloc((nf + 1) * sizeof(long long))
    if held == NULL or dbl == NULL or grp == NULL:
        free(held)
        free(dbl)
        free(grp)
        raise MemoryError()
    cdef double *need = dbl, *t_left = dbl + nf, *threshold = dbl + 2 * nf, *slack = dbl + 3 * nf
    cdef double wake
    with nogil:
        for f in range(nf):
            j = job[f]
            if j < 0:
                grp[f] = -1
                continue
            v = node[f]
            need[f] = node_need[v]
            grp[f] = node_group[v]
            a = cap_e[src[f]]
            b = cap_i[dst[f]]
            t_left[f] = remaining[f] / (a if (a <= b or isnan(a)) else b)
            threshold[f] = (lend_slack if may_lend[j] else INFINITY) * iso_jct[j]
        wake = _lenders_core(nf, need, &job[0] if nf else NULL, grp, t_left, &late[0] if nj else NULL,
                             threshold, now, recheck, &lend[0] if nf else NULL, held, slack)
    free(held)
    free(dbl)
    free(grp)
    return wake
