"""Flows of the bandwidth LP: transfers aggregated per port pair (EDF split back), port-slot loads, lowest-peak plans that need no solve."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from jitsched.errors import ValidationError

# Unit-capacity slots (1.25 bytes at 1 Gbit/s and 100 ms slots) a flow's plan may
# fall short of a deadline and still have the split end the transfer there:
# HiGHS's primal feasibility tolerance is 1e-7.
SPLIT_TOL = 1e-7


@dataclass
class Flows:
    """Transfers grouped into flows, each with its deadline levels.

    A flow is a set of transfers of one group (job) with the same egress and
    ingress port, release slot and weight (one transfer when not aggregating).
    They load the same two ports, so the LP only needs their sum per slot. With
    a common release, sending in earliest-deadline-first order meets every
    deadline that any order meets and minimises tardiness (equal weights; a
    convex cost of send slot minus deadline), so the LP needs only the flow's
    demand due by each deadline. Demands are in unit-capacity slots.

    Attributes
    ----------
    of : ndarray of int64, shape (m,)
        Flow of each transfer.
    member, member_ptr : ndarray of int64, shapes (m,), (n+1,)
        ``member[member_ptr[g]:member_ptr[g+1]]``: flow ``g``'s transfers by
        deadline slot, then index (the order the split serves them in).
    a, pe, pi, w, demand : ndarray, shape (n,)
        Release slot, egress and ingress port, weight, total demand.
    lvl_ptr : ndarray of int64, shape (n+1,)
        ``lvl_dl[lvl_ptr[g]:lvl_ptr[g+1]]``: flow ``g``'s distinct deadline slots, increasing.
    lvl_dl, lvl_cum : ndarray, shape (n_levels,)
        Deadline slot of a level; demand of its flow due by it (cumulative).
    t_demand, t_dl : ndarray, shape (m,)
        Demand and deadline slot of each transfer.
    """

    of: np.ndarray
    member: np.ndarray
    member_ptr: np.ndarray
    a: np.ndarray
    pe: np.ndarray
    pi: np.ndarray
    w: np.ndarray
    demand: np.ndarray
    lvl_ptr: np.ndarray
    lvl_dl: np.ndarray
    lvl_cum: np.ndarray
    t_demand: np.ndarray
    t_dl: np.ndarray

    @property
    def n(self) -> int:
        return len(self.a)

    @classmethod
    def make(cls, a, dl, demand, w, pe, pi, aggregate: bool, group=None) -> Flows:
        m = len(a)
        idx = np.arange(m)
        if aggregate:
            grp = np.zeros(m, dtype=np.int64) if group is None else group
            member = np.lexsort((idx, dl, w, a, grp, pi, pe))
            new = np.zeros(m, dtype=bool)
            new[:1] = True
            for key in (pe, pi, grp, a, w):
                k = key[member]
                new[1:] |= k[1:] != k[:-1]
        else:
            member, new = idx, np.ones(m, dtype=bool)
        fid = np.cumsum(new) - 1
        of = np.empty(m, dtype=np.int64)
        of[member] = fid
        first = np.flatnonzero(new)
        member_ptr = np.append(first, m).astype(np.int64)
        d_sorted = demand[member]
        dl_sorted = dl[member]
        lnew = new.copy()
        lnew[1:] |= dl_sorted[1:] != dl_sorted[:-1]
        lvl_start = np.flatnonzero(lnew)
        lvl_flow = fid[lvl_start]
        lvl_dl = dl_sorted[lvl_start]
        lvl_demand = np.add.reduceat(d_sorted, lvl_start) if m else np.zeros(0)
        lvl_ptr = np.searchsorted(lvl_flow, np.arange(len(first) + 1)).astype(np.int64)
        lvl_cum = segmented_cumsum(lvl_demand, lvl_ptr)
        total = lvl_cum[lvl_ptr[1:] - 1] if m else np.zeros(0)
        head = member[first]
        return cls(of, member, member_ptr, a[head], pe[head], pi[head], w[head], total, lvl_ptr,
                   lvl_dl, lvl_cum, demand, dl)

    def last_deadline(self, fidx: np.ndarray) -> np.ndarray:
        return self.lvl_dl[self.lvl_ptr[fidx + 1] - 1]

    def split(self, fo: np.ndarray, x: np.ndarray, lengths: np.ndarray):
        """Each flow's per-slot rates cut into its transfers', earliest deadline first.

        Parameters
        ----------
        fo : ndarray of int64, shape (k,)
            Flows, in the order of ``x``.
        x : ndarray, shape (sum(lengths),)
            Flow ``fo[j]``'s rate (unit capacities) in slots ``a[fo[j]]`` onwards, concatenated.
        lengths : ndarray of int64, shape (k,)

        Returns
        -------
        start : ndarray of int64, shape (m,)
            Slot of each transfer's first value.
        ptr : ndarray of int64, shape (m+1,)
        vals : ndarray
            Transfer ``f``'s rates are ``vals[ptr[f]:ptr[f+1]]`` from slot ``start[f]``.
        """
        m = len(self.of)
        if m == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(0)
        x_ptr = np.zeros(len(fo) + 1, dtype=np.int64)
        np.cumsum(lengths, out=x_ptr[1:])
        cum = np.cumsum(x)
        base = np.concatenate([[0.0], cum])[x_ptr[:-1]]  # cumulative rate before each flow
        pos_of = np.empty(self.n, dtype=np.int64)
        pos_of[fo] = np.arange(len(fo))
        # transfers in flow order (of fo), each flow's in deadline order
        cnt = np.diff(self.member_ptr)[fo]
        mptr = np.zeros(len(fo) + 1, dtype=np.int64)
        np.cumsum(cnt, out=mptr[1:])
        gather = np.repeat(self.member_ptr[fo] - mptr[:-1], cnt) + np.arange(m)
        mem = self.member[gather]
        j = np.repeat(np.arange(len(fo)), cnt)  # position of each one's flow in fo
        d = self.t_demand[mem]
        hi = segmented_cumsum(d, mptr)  # demand served by the end of each
        lo = hi - d
        lo[mptr[:-1]] = 0.0
        last = np.zeros(m, dtype=bool)
        last[mptr[1:] - 1] = True
        hi[last] = np.inf  # the last takes what is left (solver crumbs included)
        glo, ghi = base[j] + lo, base[j] + hi
        first_x, last_x = x_ptr[j], x_ptr[j + 1] - 1
        # A solver's plan meets a deadline to its feasibility tolerance: a transfer
        # whose deadline leaves it at most SPLIT_TOL short ends there, and the
        # next one takes the crumb, rather than sending it late.
        sent = cum[np.clip(first_x + self.t_dl[mem] - self.a[fo][j], first_x, last_x)]
        snap = ~last & (ghi > sent) & (ghi - sent <= SPLIT_TOL)
        ghi[snap] = np.maximum(sent[snap], glo[snap])
        after = np.flatnonzero(snap) + 1
        glo[after] = ghi[after - 1]
        s = np.clip(np.searchsorted(cum, glo, side="right"), first_x, last_x)
        e = np.clip(np.searchsorted(cum, ghi, side="left"), s, last_x)
        alone = (cnt == 1)[j]  # a flow of one transfer: its rates as they are
        s[alone], e[alone] = first_x[alone], last_x[alone]
        n_each = e - s + 1
        vptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(n_each, out=vptr[1:])
        owner = np.repeat(np.arange(m), n_each)
        p = s[owner] + (np.arange(int(vptr[-1])) - vptr[owner])
        prev = np.where(p == first_x[owner], base[j][owner], cum[np.maximum(p - 1, 0)])
        vals = np.maximum(np.minimum(cum[p], ghi[owner]) - np.maximum(prev, glo[owner]), 0.0)
        vals[alone[owner]] = x[p[alone[owner]]]
        start = self.a[fo][j] + (s - first_x)
        # back to transfer order
        inv = np.empty(m, dtype=np.int64)
        inv[mem] = np.arange(m)
        n_t = n_each[inv]
        ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(n_t, out=ptr[1:])
        take = np.repeat(vptr[inv] - ptr[:-1], n_t) + np.arange(int(ptr[-1]))
        return start[inv], ptr, vals[take]


def base_utilisation(res_e, res_i, cap_e, cap_i) -> np.ndarray | None:
    """Utilisation already taken per port and slot, shape (2 n_hosts, n_res), or None.

    Rows are egress ports then ingress ports, as in the LP; values in [0, 1].
    """
    if res_e is None and res_i is None:
        return None
    nh = len(cap_e)
    arrs = []
    for name, res in (("residual_egress_Bps", res_e), ("residual_ingress_Bps", res_i)):
        if res is None:
            arrs.append(None)
            continue
        r = np.asarray(res, dtype=np.float64)
        if r.ndim != 2 or r.shape[0] != nh:
            raise ValidationError(f"{name}: expected shape ({nh}, n_slots), got {r.shape}")
        if not np.all(np.isfinite(r)):
            raise ValidationError(f"{name}: must be finite")
        arrs.append(r)
    n_res = max(r.shape[1] for r in arrs if r is not None)
    util = np.zeros((2 * nh, n_res))
    for k, (r, cap) in enumerate(zip(arrs, (cap_e, cap_i), strict=True)):
        if r is not None:
            # float crumbs of the plans that left these residuals: clip into [0, cap]
            util[k * nh:(k + 1) * nh, :r.shape[1]] = 1.0 - np.clip(r, 0.0, cap[:, None]) / cap[:, None]
    return util


def util_at(util: np.ndarray | None, port: np.ndarray, slot: np.ndarray) -> np.ndarray:
    """Frozen utilisation of (port, slot) pairs; 0 past the residual window."""
    if util is None:
        return np.zeros(len(port))
    inside = slot < util.shape[1]
    out = np.zeros(len(port))
    out[inside] = util[port[inside], slot[inside]]
    return out


def span(a, dl, demand, coef, pe, pi, util=None) -> tuple[int, int]:
    """First slot and horizon of a component, enough to finish every demand.

    Parameters are per flow (or transfer) of the component. Fluid preemptive
    transfers on a bipartite switch can finish all demand in as many slots as
    the busiest port needs, once every transfer is released and every port is
    free of frozen allocations.
    """
    t_first = int(a.min())
    nports = int(max(pe.max(), pi.max())) + 1
    load = np.bincount(pe, weights=demand * coef[pe], minlength=nports)
    load += np.bincount(pi, weights=demand * coef[pi], minlength=nports)
    need = int(math.ceil(load.max() - 1e-9))
    busy_until = 0
    if util is not None:
        ports = np.unique(np.concatenate([pe, pi]))
        busy = np.flatnonzero((util[ports] > 1e-12).any(axis=0))
        busy_until = int(busy[-1]) + 1 if busy.size else 0
    horizon = max(int(dl.max()) + 1, max(int(a.max()), busy_until) + need + 1)
    return t_first, horizon


def segmented_cumsum(v: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """Cumulative sums of ``v`` restarting at each ``ptr[k]``, each as exact as a cumsum of its own.

    (A global cumsum minus each segment's offset would carry the rounding of
    everything before it.) One vectorised step per position within a segment.
    """
    out = np.asarray(v, dtype=np.float64).copy()
    n = np.diff(ptr)
    if len(out) == 0 or n.max() <= 1:
        return out
    pos = np.arange(len(out)) - np.repeat(ptr[:-1], n)
    by_pos = np.argsort(pos, kind="stable")
    edges = np.searchsorted(pos[by_pos], np.arange(int(n.max()) + 1))
    for k in range(1, len(edges) - 1):
        at = by_pos[edges[k]:edges[k + 1]]
        out[at] += out[at - 1]
    return out


def ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``concatenate([arange(l, h) for l, h in zip(lo, hi)])``, vectorised."""
    n = hi - lo
    ptr = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(n, out=ptr[1:])
    return np.repeat(lo - ptr[:-1], n) + np.arange(int(ptr[-1]))


def lowest_peak_plan(flows: Flows, coef, comp_of_flow, n_comp, objective, util=None, *,
                     linear_until: float):
    """Each flow's lowest-peak on-time rates, and the components they plan optimally.

    With one release slot and cumulative demands due by increasing deadline
    slots, the lowest-peak profile of a flow sends at the highest of the
    rates ``(demand due by D - sent) / (slots up to D)`` up to the deadline
    ``D`` that needs it, then repeats from there (its cumulative sends are
    the least concave majorant of the demand due). No on-time plan of the
    flow has a lower peak rate.

    Components are proven when their ports carry no frozen load and, with
    every flow on its profile, ``balanced``: no port-slot leaves phi's first
    segment (utilisation ``linear_until``), where the cost is linear, so the
    plan attains the bound of slope 1 times every unit of load; ``minmax``: the busiest port-slot is
    no busier than some flow alone must make it.

    Returns
    -------
    x : ndarray
        Rates (unit capacities) of each flow from its release to its last
        deadline slot, concatenated in flow order.
    ptr : ndarray of int64, shape (n_flows+1,)
    proven : ndarray of bool, shape (n_comp,)
    """
    nf = flows.n
    lvl_end = flows.lvl_ptr[1:]
    k0 = flows.lvl_ptr[:-1].copy()
    start = flows.a.copy()
    done = np.zeros(nf)
    seg_flow, seg_s, seg_e, seg_r = [], [], [], []
    active = np.arange(nf)
    while len(active):  # one critical interval per active flow and step
        lo, hi = k0[active], lvl_end[active]
        cnt = hi - lo
        heads = np.zeros(len(active), dtype=np.int64)
        np.cumsum(cnt[:-1], out=heads[1:])
        lv = ranges(lo, hi)
        own = np.repeat(np.arange(len(active)), cnt)
        g = active[own]
        rate = (flows.lvl_cum[lv] - done[g]) / (flows.lvl_dl[lv] - start[g] + 1)
        top = np.maximum.reduceat(rate, heads)
        j = np.maximum.reduceat(np.where(rate >= top[own] * (1 - 1e-12), lv, -1), heads)
        seg_flow.append(active)
        seg_s.append(start[active])
        seg_e.append(flows.lvl_dl[j])
        seg_r.append(top)
        done[active] = flows.lvl_cum[j]
        start[active] = flows.lvl_dl[j] + 1
        k0[active] = j + 1
        active = active[k0[active] < lvl_end[active]]
    sf, ss, se, sr = (np.concatenate(v) for v in (seg_flow, seg_s, seg_e, seg_r))
    by = np.lexsort((ss, sf))  # each flow's intervals in time order tile its window
    sf, ss, se, sr = sf[by], ss[by], se[by], sr[by]
    x = np.repeat(sr, se - ss + 1)
    lengths = flows.lvl_dl[lvl_end - 1] - flows.a + 1
    ptr = np.zeros(nf + 1, dtype=np.int64)
    np.cumsum(lengths, out=ptr[1:])
    peak_rate = np.maximum.reduceat(sr, np.searchsorted(sf, np.arange(nf)))

    # port-slot loads of all profiles together
    owner = np.repeat(np.arange(nf), lengths)
    slot = flows.a[owner] + (np.arange(len(x)) - ptr[owner])
    port, _, load = port_slot_loads(flows.pe[owner], flows.pi[owner], slot, x, coef)
    port_comp = np.empty(len(coef), dtype=np.int64)
    port_comp[flows.pe] = comp_of_flow
    port_comp[flows.pi] = comp_of_flow
    peak = np.zeros(n_comp)
    np.maximum.at(peak, port_comp[port], load)
    if objective == "balanced":
        proven = peak <= linear_until * (1 + 1e-9)
    else:
        alone = np.zeros(n_comp)
        np.maximum.at(alone, comp_of_flow, peak_rate * np.maximum(coef[flows.pe], coef[flows.pi]))
        proven = (peak <= alone * (1 + 1e-9)) & (peak <= 1.0 + 1e-9)
    if util is not None:
        busy = np.zeros(n_comp, dtype=bool)
        hot = np.flatnonzero(util.max(axis=1) > 0)
        hot = hot[np.isin(hot, np.concatenate([flows.pe, flows.pi]))]
        busy[np.unique(port_comp[hot])] = True
        proven &= ~busy
    return x, ptr, proven


def edf_fill(flows: Flows, fidx, coef, util=None):
    """Earliest-deadline-first greedy fill of a component's flows: always valid, never optimal.

    Flows go by their earliest deadline, each as early as its ports allow.

    Returns
    -------
    x : ndarray
        Each flow's rates from its release slot, concatenated in ``fidx`` order.
    lengths : ndarray of int64, shape (len(fidx),)
    """
    fa, fpe, fpi, ftot = flows.a[fidx], flows.pe[fidx], flows.pi[fidx], flows.demand[fidx]
    first_dl = flows.lvl_dl[flows.lvl_ptr[fidx]]
    t_first, horizon = span(fa, flows.last_deadline(fidx), ftot, coef, fpe, fpi, util)
    nports = int(max(fpe.max(), fpi.max())) + 1
    free = np.ones((nports, horizon))
    if util is not None:
        w = min(horizon, util.shape[1])
        free[:, :w] -= util[:nports, :w]
    result: dict[int, np.ndarray] = {}
    for k in np.lexsort((fa, first_dl)):
        e, i, a0 = fpe[k], fpi[k], fa[k]
        while True:
            avail = np.minimum(free[e, a0:] / coef[e], free[i, a0:] / coef[i])
            cum = np.cumsum(avail)
            last = int(np.searchsorted(cum, ftot[k] - 1e-12))
            if last < len(avail):
                break
            # A greedy fill, unlike an optimal plan, may need more slots than the
            # busiest port's load: past the grid every port is free, so add enough.
            short = ftot[k] - (float(cum[-1]) if len(cum) else 0.0)
            more = int(math.ceil(short * max(coef[e], coef[i]))) + 1
            free = np.concatenate([free, np.ones((nports, more))], axis=1)
        y = avail[: last + 1].copy()
        y[last] -= cum[last] - ftot[k]
        y = np.maximum(y, 0.0)
        free[e, a0:a0 + last + 1] -= y * coef[e]
        free[i, a0:a0 + last + 1] -= y * coef[i]
        result[k] = y
    ys = [result[k] for k in range(len(fidx))]
    return np.concatenate(ys), np.array([len(y) for y in ys], dtype=np.int64)


DENSE_PORT_SLOTS = 1 << 24


def port_slot_loads(pe, pi, slot, rate, coef):
    """Utilisation per (port, slot) that rates ``rate`` (unit capacities) on ``pe -> pi`` cause.

    Returns
    -------
    port, slot, load : ndarray, shape (k,)
        The port-slots with a positive load, and the load.
    """
    if len(slot) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    width = int(slot.max()) + 1
    n_ports = len(coef)
    key = np.concatenate([pe * width + slot, pi * width + slot])
    w = np.concatenate([rate * coef[pe], rate * coef[pi]])
    if n_ports * width <= DENSE_PORT_SLOTS:
        dense = np.bincount(key, weights=w, minlength=n_ports * width)
        keys = np.flatnonzero(dense > 0)
        load = dense[keys]
    else:
        keys, inv = np.unique(key, return_inverse=True)
        load = np.bincount(inv, weights=w)
        keys, load = keys[load > 0], load[load > 0]
    return keys // width, keys % width, load
