"""Shared rate-allocation kernels: max-min fair, strict-priority greedy, fixed plan + fair leftover."""

from __future__ import annotations

import numpy as np

from jitsched.errors import ValidationError, load_kernel

# Relative slack allowed when checking that rates fit the ports (float rounding).
CAPACITY_RTOL = 1e-9


def _kernels():
    return load_kernel("_alloc")


def _check_flows(src, dst, cap_e, cap_i) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    src = np.ascontiguousarray(src, dtype=np.int64)
    dst = np.ascontiguousarray(dst, dtype=np.int64)
    cap_e = np.ascontiguousarray(cap_e, dtype=np.float64)
    cap_i = np.ascontiguousarray(cap_i, dtype=np.float64)
    h = len(cap_e)
    if src.ndim != 1 or dst.shape != src.shape:
        raise ValidationError(f"src/dst: expected two arrays of one shape, got {src.shape} and {dst.shape}")
    if cap_i.shape != (h,):
        raise ValidationError(f"cap_i: expected shape ({h},), got {cap_i.shape}")
    # one kernel pass instead of six numpy reductions: policies call this per allocation
    lo, hi, finite = _kernels().index_bounds(src, dst, cap_e, cap_i)
    if len(src) and (lo < 0 or hi >= h):
        raise ValidationError("src/dst: host index out of range")
    if not finite:
        raise ValidationError("cap_e/cap_i: capacities must be finite")
    return src, dst, cap_e, cap_i


def maxmin_fair(src, dst, cap_e, cap_i, weight=None) -> np.ndarray:
    """Weighted max-min fair rates of flows over host egress and ingress ports.

    Progressive filling: all flows' rates rise together (in proportion to
    their weights) until a port saturates; that port's flows are frozen, and
    the rest keep rising. Negative capacities count as zero.

    Parameters
    ----------
    src, dst : array of int, shape (F,)
        Sending and receiving host of each flow.
    cap_e, cap_i : array, shape (H,)
        Free egress and ingress capacity per host, bytes/s.
    weight : array, shape (F,), optional
        Positive weights (default 1): a flow of weight 2 gets twice the share.

    Returns
    -------
    ndarray, shape (F,)
        Rates in bytes/s.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    nf, h = len(src), len(cap_e)
    w = np.ones(nf) if weight is None else np.ascontiguousarray(weight, dtype=np.float64)
    if w.shape != (nf,) or (nf and (not np.all(np.isfinite(w)) or w.min() <= 0)):
        raise ValidationError("weight: expected one positive finite weight per flow")
    rate = np.zeros(nf)
    if nf == 0:
        return rate
    port_b = dst + h
    cap = np.concatenate([cap_e, cap_i])
    # heap entries: one per port initially, then at most one per touched port per
    # saturation; both bounds hold, so the smaller one is enough
    heap = 2 * h + min(2 * nf, 4 * h * h) + 1
    _kernels().maxmin_fair(src, port_b, w, cap, np.empty(2 * h + 2, dtype=np.int64),
                           np.empty(2 * nf, dtype=np.int32), np.empty(2 * h), rate,
                           np.empty(nf + 2 * h, dtype=np.int8), np.empty(heap),
                           np.empty(heap, dtype=np.int32), np.empty(2 * h, dtype=np.int32))
    return rate


def pair_maxmin(src, dst, cap_e, cap_i) -> np.ndarray:
    """Per-flow max-min fair rates, computed once per (src, dst) host pair.

    Flows on the same host pair always get the same max-min rate, so the
    filling runs on pairs weighted by their flow counts: the same answer with
    far fewer flows (a job's many parameter reads share one pair). Pairs are
    filled in ascending (src, dst) order, so the rates are bit-identical to
    :func:`maxmin_fair` on ``np.unique(src * H + dst)`` groups.

    Parameters
    ----------
    src, dst : array of int, shape (F,)
        Sending and receiving host of each flow.
    cap_e, cap_i : array, shape (H,)
        Free egress and ingress capacity per host, bytes/s (negative counts as zero).

    Returns
    -------
    ndarray, shape (F,)
        Rates, bytes/s.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    rate = np.zeros(len(src))
    if len(src) and _kernels().pair_maxmin(src, dst, cap_e, cap_i, rate) < 0:
        raise MemoryError("pair_maxmin: no memory for the kernel's scratch")
    return rate


def priority_greedy(order, src, dst, cap_e, cap_i) -> np.ndarray:
    """Strict priority, work-conserving rates: each flow in turn takes what its ports have left.

    Parameters
    ----------
    order : array of int, shape (F,)
        A permutation of flow indices, highest priority first.
    src, dst : array of int, shape (F,)
    cap_e, cap_i : array, shape (H,)
        Free capacity per host, bytes/s.

    Returns
    -------
    ndarray, shape (F,)
        Rates in bytes/s: ``min(free egress of src, free ingress of dst)`` when the flow's turn comes.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    order = np.ascontiguousarray(order, dtype=np.int64)
    nf = len(src)
    # a permutation: every index in range exactly once (counting, not sorting: the
    # sort was a tenth of jit's simulation time, one check per allocation)
    if order.shape != (nf,) or (nf and (order.min() < 0 or order.max() >= nf
                                        or np.count_nonzero(np.bincount(order, minlength=nf)) != nf)):
        raise ValidationError("order: expected a permutation of the flow indices")
    rate = np.zeros(nf)
    if nf:
        _kernels().priority_greedy(order, src, dst, cap_e.copy(), cap_i.copy(), rate)
    return rate


def fit_fixed(fixed, src, dst, cap_e, cap_i) -> np.ndarray:
    """Scale fixed rates down where they overload a port (each flow by its worse port's factor).

    Parameters
    ----------
    fixed : array, shape (F,)
        Requested rates, bytes/s (>= 0).
    src, dst : array of int, shape (F,)
    cap_e, cap_i : array, shape (H,)
        Capacity per host, bytes/s.

    Returns
    -------
    ndarray, shape (F,)
        Rates in bytes/s that fit every port.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    fixed = np.maximum(np.asarray(fixed, dtype=np.float64), 0.0)
    h = len(cap_e)
    load_e = np.bincount(src, weights=fixed, minlength=h)
    load_i = np.bincount(dst, weights=fixed, minlength=h)
    with np.errstate(divide="ignore", invalid="ignore"):
        fe = np.where(load_e > cap_e, np.maximum(cap_e, 0.0) / load_e, 1.0)
        fi = np.where(load_i > cap_i, np.maximum(cap_i, 0.0) / load_i, 1.0)
    return fixed * np.minimum(fe[src], fi[dst])


def fixed_then_maxmin(fixed, src, dst, cap_e, cap_i, weight=None) -> np.ndarray:
    """Planned rates first, then max-min fair sharing of the leftover by the other flows.

    Parameters
    ----------
    fixed : array, shape (F,)
        Planned rate in bytes/s, or NaN for a flow that shares the leftover.
    src, dst : array of int, shape (F,)
    cap_e, cap_i : array, shape (H,)
        Capacity per host, bytes/s.
    weight : array, shape (F,), optional
        Max-min weights of the sharing flows (entries of planned flows are ignored).

    Returns
    -------
    ndarray, shape (F,)
        Rates in bytes/s; planned rates are scaled down (as :func:`fit_fixed`)
        only if they overload a port, and the sharers fill what they leave as
        :func:`maxmin_fair` would.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    fixed = np.ascontiguousarray(fixed, dtype=np.float64)
    if fixed.shape != src.shape:
        raise ValidationError(f"fixed: expected shape {src.shape}, got {fixed.shape}")
    if weight is None:
        w = np.zeros(0)
    else:
        w = np.ascontiguousarray(weight, dtype=np.float64)
        ws = w[np.isnan(fixed)] if w.shape == fixed.shape else w
        if w.shape != fixed.shape or (len(ws) and (not np.all(np.isfinite(ws)) or ws.min() <= 0)):
            raise ValidationError("weight: expected one positive finite weight per flow")
    rate = np.zeros(len(src))
    # one kernel call: a JIT allocation used to make ~30 numpy calls here
    if len(src) and _kernels().fixed_then_maxmin(fixed, src, dst, cap_e, cap_i, w, rate) < 0:
        raise MemoryError("fixed_then_maxmin: no memory for the kernel's scratch")
    return rate


def backfill(order, src, dst, cap_e, cap_i, rate) -> np.ndarray:
    """Give the capacity ``rate`` leaves unused on each port to the flows in ``order``, in turn.

    Work-conserving strict priority over the leftover: each listed flow in
    turn adds ``min(unused egress of its src, unused ingress of its dst)``
    to its rate (as :func:`priority_greedy` on ``max(cap - load, 0)``).

    Parameters
    ----------
    order : array of int, shape (K,)
        Indices of the flows that may take more, highest priority first.
    src, dst : array of int, shape (F,)
    cap_e, cap_i : array, shape (H,)
        Capacity per host, bytes/s.
    rate : array, shape (F,)
        Current rates, bytes/s.

    Returns
    -------
    ndarray, shape (F,)
        The new rates, bytes/s.
    """
    src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
    order = np.ascontiguousarray(order, dtype=np.int64)
    out = np.array(rate, dtype=np.float64)  # a copy: the kernel adds in place
    nf, h = len(src), len(cap_e)
    if out.shape != (nf,):
        raise ValidationError(f"rate: expected shape ({nf},), got {out.shape}")
    if order.ndim != 1 or (len(order) and (order.min() < 0 or order.max() >= nf)):
        raise ValidationError("order: expected flow indices")
    if len(order):
        _kernels().backfill(order, src, dst, cap_e, cap_i, out, np.empty(h), np.empty(h))
    return out


class SlotPlan:
    """A time-slotted plan, checked once, for many JIT allocations (:meth:`rates`).

    The JIT policy allocates on every event but re-plans rarely: checking the
    node-indexed plan arrays on every allocation cost a fifth of a paper-scale
    run, so they are checked here, once, and each allocation checks only its
    flows. The arrays are kept by reference (the kernel reads them unchecked):
    do not change them while the plan is in use, make a new ``SlotPlan``.

    Parameters
    ----------
    p_start, p_len, p_off : array of int, shape (N,)
        Per DAG node: first planned slot (-1: unplanned), number of planned
        slots and offset of its rates in ``plan_rates``.
    plan_rates : array, shape (R,)
        Planned rates, bytes/s.
    lat : array, shape (N,)
        Latest arrival time (s) per DAG node: the backfill order.

    Raises
    ------
    ValidationError
        If the shapes disagree or a planned node's rates lie outside ``plan_rates``.
    """

    def __init__(self, p_start, p_len, p_off, plan_rates, lat) -> None:
        self.p_start = np.ascontiguousarray(p_start, dtype=np.int64)
        self.p_len = np.ascontiguousarray(p_len, dtype=np.int64)
        self.p_off = np.ascontiguousarray(p_off, dtype=np.int64)
        self.plan_rates = np.ascontiguousarray(plan_rates, dtype=np.float64)
        self.lat = np.ascontiguousarray(lat, dtype=np.float64)
        nn = len(self.p_start)
        if self.p_start.shape != (nn,) or self.plan_rates.ndim != 1:
            raise ValidationError("p_start/plan_rates: expected one-dimensional arrays")
        if self.p_len.shape != (nn,) or self.p_off.shape != (nn,) or self.lat.shape != (nn,):
            raise ValidationError(f"p_len/p_off/lat: expected shape ({nn},)")
        k = _kernels()
        lo, hi = k.plan_extent(self.p_start, self.p_len, self.p_off)
        if lo < 0 or hi > len(self.plan_rates):
            raise ValidationError("p_off/p_len: planned rates outside plan_rates")
        self._kernel = k.SlotPlan(self.p_start, self.p_len, self.p_off, self.plan_rates, self.lat)

    def __len__(self) -> int:
        return len(self.p_start)

    def _check(self, node, src, dst, remaining, size, cap_e, cap_i):
        """Validated contiguous flow inputs of :meth:`rates`."""
        src, dst, cap_e, cap_i = _check_flows(src, dst, cap_e, cap_i)
        node = np.ascontiguousarray(node, dtype=np.int64)
        remaining = np.ascontiguousarray(remaining, dtype=np.float64)
        size = np.ascontiguousarray(size, dtype=np.float64)
        self._check_shapes(node, src, dst, remaining, size, cap_e, cap_i)
        # (index_bounds over node alone: np.max costs more than the kernel call)
        if len(node) and _kernels().index_bounds(node, node, cap_e[:0], cap_i[:0])[1] >= len(self.p_start):
            raise ValidationError("node: index out of range")
        return node, src, dst, remaining, size, cap_e, cap_i

    def _check_shapes(self, node, src, dst, remaining, size, cap_e, cap_i) -> None:
        nf, nn, h = len(node), len(self.p_start), len(cap_e)
        if src.shape != (nf,) or dst.shape != (nf,) or remaining.shape != (nf,):
            raise ValidationError(f"src/dst/remaining: expected shape ({nf},) as node")
        if size.shape != (nn,):
            raise ValidationError(f"size: expected shape ({nn},)")
        if cap_i.shape != (h,):
            raise ValidationError(f"cap_i: expected shape ({h},)")

    def rates(self, k, node, src, dst, remaining, size, cap_e, cap_i, crumb_rtol,
              backfill_free: bool = True, *, in_range: bool = False) -> tuple[np.ndarray, int, int]:
        """A JIT allocation in slot ``k``, in one kernel call, bit-identical to these steps in turn.

        A planned transfer's flow gets the plan's rate for the slot (0 before
        its first planned slot, line rate for a crumb past its planned slots);
        the other flows (background, unplanned, drifted) share the leftover
        max-min fair (:func:`fixed_then_maxmin`); then, with
        ``backfill_free``, the capacity still unused goes to the flows waiting
        for or within their planned slots, earliest ``lat`` first, stable
        (:func:`backfill`).

        Parameters
        ----------
        k : int
            Slot index.
        node : array of int, shape (F,)
            DAG node of each flow, -1 for background flows.
        src, dst : array of int, shape (F,)
        remaining : array, shape (F,)
            Bytes left per flow.
        size : array, shape (N,)
            Bytes per DAG node.
        cap_e, cap_i : array, shape (H,)
            Capacity per host, bytes/s.
        crumb_rtol : float
            A flow past its planned slots with at most this fraction of its size
            left is a crumb and gets line rate; with more it has drifted.
        backfill_free : bool
            Backfill the unused capacity as above.
        in_range : bool
            The caller guarantees what would take a pass over the flows to
            check: ``node``/``src``/``dst`` are contiguous int64 with hosts in
            ``[0, len(cap_e))`` and nodes below the plan's N, ``remaining``,
            ``size`` and the finite capacities contiguous float64 (e.g. a
            simulator's own flow buffers, checked when they entered them).
            Only the shapes are checked then; a wrong dtype still raises.

        Returns
        -------
        rate : ndarray, shape (F,)
            Bytes/s.
        n_planned : int
            Flows waiting for or within their planned slots.
        drifted : int
            Flows past their planned slots with more than a crumb left.
        """
        if in_range:
            self._check_shapes(node, src, dst, remaining, size, cap_e, cap_i)
        else:
            node, src, dst, remaining, size, cap_e, cap_i = self._check(node, src, dst, remaining, size,
                                                                        cap_e, cap_i)
        rate = np.zeros(len(node))
        if len(node) == 0:
            return rate, 0, 0
        nc, nd = self._kernel.rates(int(k), node, src, dst, remaining, size, cap_e, cap_i,
                                    float(crumb_rtol), bool(backfill_free), rate)
        if nc < 0:
            raise MemoryError("SlotPlan.rates: no memory for the kernel's scratch")
        return rate, nc, nd


class GroupPriority:
    """The default JIT policy's strict-priority order, checked once, for many allocations (:meth:`rates`).

    Flows go in ``np.lexsort((bg, node, need, ident, key))`` order (see
    :func:`group_priority_reference`, which spells it out in numpy): a job
    transfer's key is the bytes its (job, src, dst) group has not sent yet,
    its ident its job and then its node's ``need``; a transfer with at most
    ``crumb_rtol`` of its size left is a crumb, key -1; a background flow's
    key is its remaining bytes times its size over ``bg_ref_s`` seconds of
    its source's line rate, times ``bg_weight``, its ident ``n_jobs`` plus
    its index. Each flow in turn takes what its ports have free.

    The arrays are kept by reference (the kernel reads them unchecked): the
    owner may change the values of ``need`` and ``pair_left`` in place
    between calls (the JIT policy does), nothing else.

    Parameters
    ----------
    size, need : array, shape (N,)
        Bytes and need order (seconds) per DAG node; float64, contiguous.
    group : array of int, shape (N,)
        Each node's group, in ``[0, G)``: the transfers of one group must
        share job, source and destination (only then can the kernel skip
        all but a group's first flow; checked here).
    pair_left : array, shape (G,)
        Bytes each group has in transfers not yet done; float64, contiguous.
    node_job, node_src, node_dst : array of int, shape (N,)
        Each node's job and hosts (a job transfer's flow must have them).
    bg_bytes : array, shape (B,)
        Bytes per background flow (B = 0: each flow's remaining bytes stand in).
    egress : array, shape (H,)
        Line rate per host, bytes/s.
    bg_ref_s, bg_weight : float
        Background key's reference time (s) and weight (``inf``: background last).
    crumb_rtol : float
        Crumb threshold, a fraction of the transfer's size.
    n_jobs : int
        Jobs in the DAG (background idents follow them).

    Raises
    ------
    ValidationError
        If shapes disagree, a group is out of range, or ``need``/``pair_left``
        are not contiguous float64 (a copy would not see the owner's updates).
    """

    def __init__(self, size, need, group, pair_left, node_job, node_src, node_dst, bg_bytes, egress, *,
                 bg_ref_s: float, bg_weight: float, crumb_rtol: float, n_jobs: int) -> None:
        for name, a in (("need", need), ("pair_left", pair_left)):
            if not (isinstance(a, np.ndarray) and a.dtype == np.float64 and a.ndim == 1
                    and a.flags.c_contiguous):
                raise ValidationError(f"{name}: expected a contiguous float64 array (kept by reference)")
        self.size = np.ascontiguousarray(size, dtype=np.float64)
        self.need, self.pair_left = need, pair_left
        self.group = np.ascontiguousarray(group, dtype=np.int64)
        self.bg_bytes = np.ascontiguousarray(bg_bytes, dtype=np.float64)
        self.egress = np.ascontiguousarray(egress, dtype=np.float64)
        nn, ng = len(self.size), len(pair_left)
        if self.size.ndim != 1 or need.shape != (nn,) or self.group.shape != (nn,):
            raise ValidationError(f"need/group: expected shape ({nn},) as size")
        if self.bg_bytes.ndim != 1 or self.egress.ndim != 1:
            raise ValidationError("bg_bytes/egress: expected one-dimensional arrays")
        if nn and (self.group.min() < 0 or self.group.max() >= ng):
            raise ValidationError("group: index out of range")
        self.node_job, self.node_src, self.node_dst = (np.ascontiguousarray(a, dtype=np.int64)
                                                       for a in (node_job, node_src, node_dst))
        if self.node_job.shape != (nn,) or self.node_src.shape != (nn,) or self.node_dst.shape != (nn,):
            raise ValidationError(f"node_job/node_src/node_dst: expected shape ({nn},) as size")
        if nn:  # one (job, src, dst) per group: its rows sorted by group have no second triple
            o = np.lexsort((self.node_dst, self.node_src, self.node_job, self.group))
            g, trip = self.group[o], np.stack([self.node_job[o], self.node_src[o], self.node_dst[o]])
            if np.any((g[1:] == g[:-1]) & np.any(trip[:, 1:] != trip[:, :-1], axis=0)):
                raise ValidationError("group: a group's transfers must share job, source and destination")
        if not (bg_ref_s > 0 and bg_weight > 0 and crumb_rtol >= 0 and n_jobs >= 0):
            raise ValidationError("bg_ref_s/bg_weight: must be positive; crumb_rtol, n_jobs: >= 0")
        self.n_jobs = int(n_jobs)
        self._kernel = _kernels().GroupPriority(self.size, need, self.group, pair_left, self.bg_bytes,
                                                self.egress, float(bg_ref_s), float(bg_weight),
                                                float(crumb_rtol), self.n_jobs)

    def rates(self, src, dst, node, job, bg, remaining, free_e, free_i, *, in_range: bool = False) -> np.ndarray:
        """Strict-priority rates of the flows in this order over the free capacity, bit-identical to the reference.

        Parameters
        ----------
        src, dst : array of int, shape (F,)
        node, job : array of int, shape (F,)
            DAG node and job of a job transfer, -1 for a background flow.
        bg : array of int, shape (F,)
            Background index of a background flow, -1 for a job transfer.
        remaining : array, shape (F,)
            Bytes left per flow.
        free_e, free_i : array, shape (H,)
            Free capacity per host, bytes/s (negative counts as zero); not modified.
        in_range : bool
            The caller guarantees what would take passes over the flows to
            check: contiguous int64/float64 arrays, hosts in range, a job
            transfer's node in ``[0, N)``, a background flow's index in
            ``[0, B)`` (e.g. a simulator's own flow buffers). Shapes are checked either way.

        Returns
        -------
        ndarray, shape (F,)
            Bytes/s.
        """
        # (the kernel takes from a copy of the free capacities: no numpy call here
        # when in_range, a tenth of the call at 1000 jobs)
        if not in_range:
            src, dst, free_e, free_i = _check_flows(src, dst, free_e, free_i)
            node, job, bg = (np.ascontiguousarray(a, dtype=np.int64) for a in (node, job, bg))
            remaining = np.ascontiguousarray(remaining, dtype=np.float64)
        nf, h = len(src), len(free_e)
        if (dst.shape != (nf,) or node.shape != (nf,) or job.shape != (nf,) or bg.shape != (nf,)
                or remaining.shape != (nf,) or free_i.shape != (h,)):
            raise ValidationError(f"src/dst/node/job/bg/remaining: expected shape ({nf},); free_i ({h},)")
        if not in_range and nf:
            is_job = job >= 0
            if np.any(is_job & ((node < 0) | (node >= len(self.size)))):
                raise ValidationError("node: a job transfer's node is out of range")
            jn = node[is_job]
            if (np.any(job[is_job] != self.node_job[jn]) or np.any(src[is_job] != self.node_src[jn])
                    or np.any(dst[is_job] != self.node_dst[jn])):
                raise ValidationError("job/src/dst: a job transfer's differ from its node's")
            if np.any(~is_job & ((bg < 0) | (bg >= len(self.bg_bytes) if len(self.bg_bytes) else bg < 0))):
                raise ValidationError("bg: a background flow's index is out of range")
            if np.any(~is_job & (src >= len(self.egress))):
                raise ValidationError("src: a background flow's host has no line rate in egress")
        rate = np.empty(nf)
        if nf and self._kernel.rates(src, dst, node, job, bg, remaining, free_e, free_i, rate) < 0:
            raise MemoryError("GroupPriority.rates: no memory for the kernel's scratch")
        return rate


def port_loads(src, dst, rate, n_hosts: int) -> tuple[np.ndarray, np.ndarray]:
    """Egress and ingress load per host, bytes/s, shape (n_hosts,) each."""
    return (np.bincount(np.asarray(src, dtype=np.int64), weights=rate, minlength=n_hosts),
            np.bincount(np.asarray(dst, dtype=np.int64), weights=rate, minlength=n_hosts))


def check_capacity(src, dst, rate, cap_e, cap_i) -> None:
    """Raise AssertionError naming the port if ``rate`` overloads any port or is negative."""
    rate = np.asarray(rate, dtype=np.float64)
    if np.any(rate < 0) or not np.all(np.isfinite(rate)):
        raise AssertionError("negative or non-finite rate")
    le, li = port_loads(src, dst, rate, len(cap_e))
    over_e = le > np.asarray(cap_e) * (1 + CAPACITY_RTOL) + 1e-6
    over_i = li > np.asarray(cap_i) * (1 + CAPACITY_RTOL) + 1e-6
    if over_e.any():
        h = int(np.argmax(over_e))
        raise AssertionError(f"egress of host {h} over capacity: {le[h]} > {cap_e[h]} bytes/s")
    if over_i.any():
        h = int(np.argmax(over_i))
        raise AssertionError(f"ingress of host {h} over capacity: {li[h]} > {cap_i[h]} bytes/s")


# --------------------------------------------------------------------------- references


def maxmin_fair_reference(src, dst, cap_e, cap_i, weight=None) -> np.ndarray:
    """Pure-Python progressive filling (O(P^2 + F)); the Cython kernel must agree with it."""
    h = len(cap_e)
    nf = len(src)
    w = [1.0] * nf if weight is None else [float(x) for x in weight]
    cap = [max(float(c), 0.0) for c in list(cap_e) + list(cap_i)]
    ports = [(int(src[f]), h + int(dst[f])) for f in range(nf)]
    rate = [0.0] * nf
    active = set(range(nf))
    while active:
        wsum = [0.0] * (2 * h)
        for f in active:
            for p in ports[f]:
                wsum[p] += w[f]
        best, level = -1, float("inf")
        for p in range(2 * h):
            if wsum[p] > 0 and max(cap[p], 0.0) / wsum[p] < level:
                best, level = p, max(cap[p], 0.0) / wsum[p]
        for f in sorted(active):
            if best in ports[f]:
                rate[f] = w[f] * level
                for p in ports[f]:
                    cap[p] -= rate[f]
                active.discard(f)
    return np.asarray(rate, dtype=np.float64)


def priority_greedy_reference(order, src, dst, cap_e, cap_i) -> np.ndarray:
    """Pure-Python strict-priority greedy; the Cython kernel must agree with it."""
    fe = [float(c) for c in cap_e]
    fi = [float(c) for c in cap_i]
    rate = [0.0] * len(src)
    for f in order:
        s, d = int(src[f]), int(dst[f])
        r = max(min(fe[s], fi[d]), 0.0)
        rate[f] = r
        fe[s] -= r
        fi[d] -= r
    return np.asarray(rate, dtype=np.float64)


def group_priority_reference(src, dst, node, job, bg, remaining, size, need, group, pair_left, bg_bytes,
                             egress, bg_ref_s, bg_weight, crumb_rtol, n_jobs, free_e, free_i) -> np.ndarray:
    """The JIT policy's strict-priority rates as numpy had them (lexsort, then a greedy); :class:`GroupPriority` must agree bit for bit."""
    src, dst, node, job, bg = (np.asarray(a, dtype=np.int64) for a in (src, dst, node, job, bg))
    remaining, size, need = (np.asarray(a, dtype=np.float64) for a in (remaining, size, need))
    pair_left, bg_bytes = np.asarray(pair_left, dtype=np.float64), np.asarray(bg_bytes, dtype=np.float64)
    is_job = job >= 0
    bsize = bg_bytes[np.maximum(bg, 0)] if len(bg_bytes) else remaining
    ref_B = bg_ref_s * np.asarray(egress, dtype=np.float64)[src]
    with np.errstate(invalid="ignore"):  # bg_weight inf: inf * 0 is nan, not taken
        bg_key = np.where(remaining > 0, remaining * (bsize / ref_B) * bg_weight, 0.0)
    if not is_job.any():
        order = np.lexsort((bg, bg_key))
    else:
        jnode = np.where(is_job, node, 0)
        grp = np.asarray(group, dtype=np.int64)[jnode]
        sent = np.where(is_job, size[jnode] - remaining, 0.0)
        left = pair_left - np.bincount(grp, weights=sent, minlength=len(pair_left))
        key = np.where(is_job, left[grp], bg_key)
        key[is_job & (remaining <= crumb_rtol * size[jnode])] = -1.0
        ident = np.where(is_job, job, n_jobs + bg)
        order = np.lexsort((bg, node, np.where(is_job, need[jnode], 0.0), ident, key))
    return priority_greedy_reference(order, src, dst, np.maximum(free_e, 0.0), np.maximum(free_i, 0.0))
