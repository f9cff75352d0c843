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
    # the rates are the same for weights scaled alike; the kernel's filling takes a port's
    # unfrozen weight below 1e-12 for rounding, so weights below 1 are scaled up to it
    w = _at_least_one(w)
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


def _at_least_one(w: np.ndarray, over: np.ndarray | None = None) -> np.ndarray:
    """Positive weights scaled so that the smallest of ``over`` (default: all of them) is 1
    if it is less (else themselves)."""
    over = w if over is None else over
    low = float(over.min()) if len(over) else 1.0
    return w / low if low < 1.0 else w


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
    # np.where divides every port, also those it then drops (load <= cap, e.g. a
    # subnormal load under a large capacity overflows): those results are discarded
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
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
        w = _at_least_one(w, ws)  # as maxmin_fair scales them
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

