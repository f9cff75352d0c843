# cython: language_level=3
"""Per-event kernels of the flow-level simulator over its active-flow arrays (private).

The simulator keeps its active flows in parallel buffers, of which the first
``n`` entries are live. A paper-scale run wakes up about a million times with
a few hundred flows active, so one numpy call per array per event costs more
than the arithmetic; these kernels do each step in one pass. Each one
performs exactly the float operations, in the same order, as the numpy code
it replaces, so results are bit-identical (tests/test_sim_kernels.py keeps
pure-Python references). The kernels are ``cpdef``: one body is both the
Python function the tests call and the C function :class:`FlowTable` calls
on its bound buffers.
"""

from libc.math cimport INFINITY, NAN, isfinite
from libc.string cimport memmove


cpdef void advance(double dt,
                   Py_ssize_t n,
                   const double[::1] rate,
                   double[::1] rem,
                   const long long[::1] node,
                   const long long[::1] bg,
                   double[::1] sent,
                   double[::1] remaining,
                   double[::1] bg_sent,
                   const double[::1] dag_egress,
                   double[::1] dag_egress_int) noexcept nogil:
    """Move every live flow ``rate * dt`` bytes forward.

    # IN  dt: seconds (> 0); n: live flows
    # IN  rate (>= n,): bytes/s
    # IN/OUT rem (>= n,): bytes left per flow (may go slightly negative)
    # IN  node, bg (>= n,): DAG node of a job transfer (-1 otherwise), background index (-1 otherwise)
    # IN/OUT sent (n_nodes,), bg_sent (n_bg,): bytes sent so far
    # IN/OUT remaining (n_nodes,): ``max(rem, 0)`` of every live job transfer that moves
    #        (rate not 0); the others keep theirs, which the simulator already holds at
    #        ``max(rem, 0)`` (from the transfer's size, or its last move)
    # IN  dag_egress (H,): DAG transfer rate per egress port, bytes/s
    # IN/OUT dag_egress_int (H,): its integral over time, bytes (+= dag_egress * dt)
    """
    cdef Py_ssize_t f
    for f in range(dag_egress.shape[0]):
        dag_egress_int[f] += dag_egress[f] * dt
    cdef double moved, r
    cdef long long v
    for f in range(n):
        # A flow at rate 0 (most wait for their planned slots) does not move:
        # rem - 0.0 and sent + 0.0 are what they were (sums from +0.0 are never
        # -0.0; a rem of +-0.0 takes the full step), and remaining[v] holds it.
        if rate[f] == 0.0 and rem[f] != 0.0:
            continue
        moved = rate[f] * dt
        r = rem[f] - moved
        rem[f] = r
        v = node[f]
        if v >= 0:
            sent[v] += moved
            remaining[v] = r if r > 0.0 else 0.0
        else:
            bg_sent[bg[f]] += moved


cpdef (double, double, double, bint) after_allocation(double now,
                                                     Py_ssize_t n,
                                                     bint check,
                                                     const long long[::1] src,
                                                     const long long[::1] dst,
                                                     const long long[::1] node,
                                                     const double[::1] rate,
                                                     const double[::1] rem,
                                                     const double[::1] cap_e,
                                                     const double[::1] cap_i,
                                                     double rtol,
                                                     double[::1] load_e,
                                                     double[::1] load_i,
                                                     double[::1] dag_egress,
                                                     double[::1] fin) noexcept nogil:
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
    # Zero rates (most flows waiting for their planned slots) are left out of
    # the port sums: a sum that starts at +0.0 is never -0.0, so adding a zero
    # leaves it as it is, and the hot ports' chains of additions get shorter.
    for f in range(n):
        r = rate[f]
        if r == 0.0:
            fin[f] = INFINITY
            continue
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


cpdef Py_ssize_t collect_done(double now,
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
                              double[::1] out_crumb) noexcept nogil:
    """Take finished flows out of the live arrays, keeping the others in order.

    A flow is finished when ``rem <= tol`` or ``fin <= now``.

    # IN  now: seconds; n: live flows
    # IN/OUT src, dst, node, job, bg, rel, rem, rate, fin, tol (>= n,): the live
    #        flows in, the unfinished ones compacted to the front out
    # OUT out_node, out_bg, out_crumb (>= n,): node, background index and
    #     bytes left of each finished flow, in their former order
    Returns the number of finished flows (the live count drops by as much).
    """
    # The kept flows move down in runs (one memmove per array and run): a
    # flow finishing near the front of a few hundred used to cost ten
    # element-by-element copies per later flow.
    cdef Py_ssize_t f, k = 0, d = 0, start = 0
    for f in range(n):
        if rem[f] <= tol[f] or fin[f] <= now:
            out_node[d] = node[f]
            out_bg[d] = bg[f]
            out_crumb[d] = rem[f]
            d += 1
            _move_run(k, start, f - start, src, dst, node, job, bg, rel, rem, rate, fin, tol)
            k += f - start
            start = f + 1
    _move_run(k, start, n - start, src, dst, node, job, bg, rel, rem, rate, fin, tol)
    return d


cdef inline void _move_run(Py_ssize_t to,
                           Py_ssize_t at,
                           Py_ssize_t length,
                           long long[::1] src,
                           long long[::1] dst,
                           long long[::1] node,
                           long long[::1] job,
                           long long[::1] bg,
                           double[::1] rel,
                           double[::1] rem,
                           double[::1] rate,
                           double[::1] fin,
                           double[::1] tol) noexcept nogil:
    # entries [at, at + length) of every array to [to, to + length), to <= at
    if length <= 0 or to == at:
        return
    memmove(&src[to], &src[at], length * sizeof(long long))
    memmove(&dst[to], &dst[at], length * sizeof(long long))
    memmove(&node[to], &node[at], length * sizeof(long long))
    memmove(&job[to], &job[at], length * sizeof(long long))
    memmove(&bg[to], &bg[at], length * sizeof(long long))
    memmove(&rel[to], &rel[at], length * sizeof(double))
    memmove(&rem[to], &rem[at], length * sizeof(double))
    memmove(&rate[to], &rate[at], length * sizeof(double))
    memmove(&fin[to], &fin[at], length * sizeof(double))
    memmove(&tol[to], &tol[at], length * sizeof(double))


cdef class FlowTable:
    """The simulator's active flows in parallel buffers, of which the first ``n`` are live.

    The per-flow buffers (numpy arrays, attributes of the same names) grow by
    doubling; the simulator's per-node and per-port arrays are bound once at
    construction. A paper-scale run calls these methods about a million
    times, and acquiring a dozen buffers per call cost more than the loops:
    here a call acquires at most the policy's rates. The methods are the
    kernels above on the bound buffers (tests/test_sim_kernels.py).

    # IN/OUT sent, remaining (n_nodes,), bg_sent (n_bg,): as advance
    # IN/OUT dag_egress, dag_egress_int (H,): as advance and after_allocation
    # IN  cap_e, cap_i (H,): port capacities, bytes/s
    # IN  abs_tol, rel_tol: a flow is done at ``abs_tol + rel_tol * bytes`` left
    # IN  capacity: initial buffer length
    """

    cdef readonly Py_ssize_t n
    cdef readonly double t_last
    cdef readonly object src, dst, node, job, bg, rel, rem, rate, fin, tol, pos
    cdef readonly object out_node, out_bg, out_crumb
    cdef long long[::1] _src, _dst, _node, _job, _bg, _out_node, _out_bg
    cdef double[::1] _rel, _rem, _rate, _fin, _tol, _pos, _out_crumb
    cdef double[::1] _sent, _remaining, _bg_sent, _dag_egress, _dag_egress_int
    cdef const double[::1] _cap_e, _cap_i
    cdef double[::1] _load_e, _load_i
    cdef double abs_tol, rel_tol

    def __init__(self,
                 double[::1] sent,
                 double[::1] remaining,
                 double[::1] bg_sent,
                 double[::1] dag_egress,
                 double[::1] dag_egress_int,
                 const double[::1] cap_e,
                 const double[::1] cap_i,
                 double abs_tol,
                 double rel_tol,
                 Py_ssize_t capacity=64):
        import numpy as np

        self._sent = sent
        self._remaining = remaining
        self._bg_sent = bg_sent
        self._dag_egress = dag_egress
        self._dag_egress_int = dag_egress_int
        self._cap_e = cap_e
        self._cap_i = cap_i
        self._load_e = np.zeros(cap_e.shape[0])
        self._load_i = np.zeros(cap_e.shape[0])
        self.abs_tol = abs_tol
        self.rel_tol = rel_tol
        self.n = 0
        self.t_last = 0.0
        empty_i, empty_f = np.zeros(0, dtype=np.int64), np.zeros(0)
        self.src = self.dst = self.node = self.job = self.bg = self.out_node = self.out_bg = empty_i
        self.rel = self.rem = self.rate = self.fin = self.tol = self.pos = self.out_crumb = empty_f
        self._bind()
        self.reserve(capacity)

    cdef void _bind(self):
        self._src = self.src
        self._dst = self.dst
        self._node = self.node
        self._job = self.job
        self._bg = self.bg
        self._out_node = self.out_node
        self._out_bg = self.out_bg
        self._rel = self.rel
        self._rem = self.rem
        self._rate = self.rate
        self._fin = self.fin
        self._tol = self.tol
        self._pos = self.pos
        self._out_crumb = self.out_crumb

    def reserve(self, Py_ssize_t n):
        """Make room for ``n`` flows, keeping the live ones (the buffers at least double)."""
        import numpy as np

        cdef Py_ssize_t cap = self._src.shape[0]
        if n <= cap:
            return
        cap = max(n, 2 * cap)

        def grown(old):
            new = np.zeros(cap, dtype=old.dtype)
            new[:len(old)] = old
            return new

        self.src, self.dst, self.node, self.job, self.bg = (
            grown(self.src), grown(self.dst), grown(self.node), grown(self.job), grown(self.bg))
        self.out_node, self.out_bg = grown(self.out_node), grown(self.out_bg)
        self.rel, self.rem, self.rate, self.fin, self.tol, self.out_crumb = (
            grown(self.rel), grown(self.rem), grown(self.rate), grown(self.fin), grown(self.tol),
            grown(self.out_crumb))
        self.pos = np.zeros(cap)  # scratch of remaining(): nothing to keep
        self._bind()

    def append(self, list rows):
        """Add flows after the live ones, at rate 0 until the next allocation.

        # IN  rows: tuples (src, dst, node, job, bg, release s, bytes)
        """
        cdef Py_ssize_t i = self.n, k = len(rows)
        cdef double size
        self.reserve(self.n + k)
        for row in rows:
            self._src[i] = row[0]
            self._dst[i] = row[1]
            self._node[i] = row[2]
            self._job[i] = row[3]
            self._bg[i] = row[4]
            self._rel[i] = row[5]
            size = row[6]
            self._rem[i] = size
            self._tol[i] = self.abs_tol + self.rel_tol * size
            self._rate[i] = 0.0  # until the next allocation
            self._fin[i] = INFINITY
            i += 1
        self.n = i

    def advance(self, double t):
        """Move the live flows to time ``t`` at their rates (nothing if ``t`` is not later)."""
        cdef double dt = t - self.t_last
        if dt > 0 and self.n:
            advance(dt, self.n, self._rate, self._rem, self._node, self._bg, self._sent, self._remaining,
                    self._bg_sent, self._dag_egress, self._dag_egress_int)
        self.t_last = t

    def allocated(self, double now, bint check, double rtol, const double[::1] rate):
        """Take the policy's rates for the live flows: as :func:`after_allocation`.

        # IN  rate (n,): bytes/s per live flow
        Returns ``(earliest finish, egress utilisation, ingress utilisation, ok)``.
        """
        cdef Py_ssize_t f
        for f in range(self.n):
            self._rate[f] = rate[f]
        return after_allocation(now, self.n, check, self._src, self._dst, self._node, self._rate,
                                self._rem, self._cap_e, self._cap_i, rtol, self._load_e, self._load_i,
                                self._dag_egress, self._fin)

    def remaining(self):
        """``np.maximum(rem, 0.0)`` of the live flows, in a buffer the next call overwrites.

        The simulator hands it to the policy on every allocation: filling one
        kept buffer costs less than the ufunc call and its new array.
        """
        cdef Py_ssize_t f
        cdef double x
        for f in range(self.n):
            x = self._rem[f]
            # np.maximum's answer: NaN stays NaN, -0.0 becomes +0.0
            self._pos[f] = x if x > 0.0 or x != x else 0.0
        return self.pos[:self.n]

    def collect_done(self, double now):
        """Take finished flows out: as :func:`collect_done`.

        Returns the finished flows' nodes, background indices and bytes left, as lists in flow order.
        """
        cdef Py_ssize_t d = collect_done(now, self.n, self._src, self._dst, self._node, self._job, self._bg,
                                         self._rel, self._rem, self._rate, self._fin, self._tol,
                                         self._out_node, self._out_bg, self._out_crumb)
        self.n -= d
        return self.out_node[:d].tolist(), self.out_bg[:d].tolist(), self.out_crumb[:d].tolist()
