"""The default JIT policy's strict-priority allocation in one kernel call per allocation, its numpy reference, and the flows whose slack lets them yield.

Apart from :mod:`jitsched.plan.alloc` (the kernels every policy shares): this
order is the JIT policy's alone, and its reference spells out the numpy code
the policy ran before (a five-key lexsort over every flow, then
:func:`jitsched.plan.alloc.priority_greedy`), which the kernel must match bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from jitsched.errors import ValidationError
from jitsched.plan.alloc import _check_flows, _kernels, priority_greedy_reference

# A lender is looked at again no sooner than this many of its thresholds later (flow_lenders):
# one sending at line rate keeps its slack just above its threshold, and would otherwise
# ask at every instant; it still has half its threshold of slack when looked at.
LEND_RECHECK = 0.5
_NO_TIERS = np.zeros(0, dtype=np.int64)  # GroupPriority's kernel: every flow in one tier


class GroupPriority:
    """The default JIT policy's strict-priority order, checked once, for many allocations (:meth:`rates`).

    Flows go in ``np.lexsort((bg, node, need, ident, key))`` order (see
    :func:`group_priority_reference`, which spells it out in numpy): a job
    transfer's key is the bytes its (job, src, dst) group has not sent yet
    (the largest of its component's groups', ``group_comp``),
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
    job_left : array, shape (J,), optional
        Bytes each job has in transfers not yet done; float64, contiguous,
        kept by reference like ``pair_left``. Needed when ``job_exp`` is not 0.
    job_exp : float
        A group's key is its bytes left times (its job's bytes left, less what
        the job's live transfers sent, times its ``job_scale``, over ``bg_ref_s``
        seconds of the flow's source's line rate) to this power: Smith's rule
        for jobs with their bytes left as the size. 0 (default): the bytes left alone.
    job_scale : array, shape (J,), optional
        A positive factor per job on its bytes left in the key (None: 1 for
        every job, the bytes as they are); copied.
    group_comp : array of int, shape (G,), optional
        Each group's component: a group's bytes left in its key are the
        largest of its component's groups' (None: each group alone, its
        own). The JIT policy puts a job's groups into one host together
        (:func:`ingress_components`); copied.

    Raises
    ------
    ValidationError
        If shapes disagree, a group is out of range, or ``need``/``pair_left``
        are not contiguous float64 (a copy would not see the owner's updates).
    """

    def __init__(self, size, need, group, pair_left, node_job, node_src, node_dst, bg_bytes, egress, *,
                 bg_ref_s: float, bg_weight: float, crumb_rtol: float, n_jobs: int,
                 job_left: np.ndarray | None = None, job_exp: float = 0.0,
                 job_scale: np.ndarray | None = None, group_comp: np.ndarray | None = None) -> None:
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
        if not (math.isfinite(job_exp) and job_exp >= 0):
            raise ValidationError(f"job_exp: must be a finite number >= 0, got {job_exp!r}")
        group_job = np.zeros(ng, dtype=np.int64)
        if job_exp:
            if not (isinstance(job_left, np.ndarray) and job_left.dtype == np.float64 and job_left.ndim == 1
                    and job_left.flags.c_contiguous and len(job_left) == self.n_jobs):
                raise ValidationError(f"job_left: expected a contiguous float64 array of {self.n_jobs} "
                                      "(kept by reference)")
            is_tr = self.node_job >= 0
            if np.any(self.node_job >= self.n_jobs):
                raise ValidationError("node_job: a job index is out of range")
            group_job[self.group[is_tr]] = self.node_job[is_tr]
        else:
            job_left = np.zeros(self.n_jobs)
        self.job_left, self.job_exp, self.group_job = job_left, float(job_exp), group_job
        self.job_scale = _job_scale(job_scale, self.n_jobs)
        self.group_comp = _group_comp(group_comp, ng)
        count = np.bincount(self.group_comp, minlength=int(self.group_comp.max()) + 1 if ng else 0)
        comp_ptr = np.concatenate([[0], np.cumsum(count)]).astype(np.int64)
        comp_groups = np.argsort(self.group_comp, kind="stable").astype(np.int64)
        self._kernel = _kernels().GroupPriority(self.size, need, self.group, pair_left, self.bg_bytes,
                                                self.egress, float(bg_ref_s), float(bg_weight),
                                                float(crumb_rtol), self.n_jobs, group_job, job_left,
                                                self.job_scale, float(job_exp), comp_ptr, comp_groups,
                                                self.group_comp)

    def rates(self, src, dst, node, job, bg, remaining, free_e, free_i, *, in_range: bool = False,
              tier: np.ndarray | None = None) -> np.ndarray:
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
        tier : array of int, shape (F,), optional
            Each flow's tier, >= 0: the tiers go one after another, lowest
            first, each tier's flows in this order on what the tiers before
            them left (as separate calls on each tier's flows would give,
            the free capacity less the earlier tiers' rates per host,
            clamped at 0). None: one tier.

        Returns
        -------
        ndarray, shape (F,)
            Bytes/s.
        """
        # (the kernel copies the free capacities, clamped at 0, into its scratch:
        # no numpy call here when in_range)
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
        if tier is None:
            tier = _NO_TIERS
        else:
            tier = np.ascontiguousarray(tier, dtype=np.int64)
            if tier.shape != (nf,):
                raise ValidationError(f"tier: expected shape ({nf},)")
        err = self._kernel.rates(src, dst, node, job, bg, remaining, free_e, free_i, tier, rate) if nf else 0
        if err == -2:
            raise ValidationError("tier: must be >= 0")
        if err < 0:
            raise MemoryError("GroupPriority.rates: no memory for the kernel's scratch")
        return rate


def _job_scale(job_scale, n_jobs: int) -> np.ndarray:
    """``job_scale`` checked (shape (n_jobs,), positive and finite) as a contiguous float64 copy; None: ones."""
    if job_scale is None:
        return np.ones(n_jobs)
    a = np.array(job_scale, dtype=np.float64)
    if a.shape != (n_jobs,) or not np.all(np.isfinite(a) & (a > 0)):
        raise ValidationError(f"job_scale: expected {n_jobs} positive finite numbers")
    return a


def _group_comp(group_comp, n_groups: int) -> np.ndarray:
    """``group_comp`` checked (shape (n_groups,), non-negative integers) as a contiguous int64 copy;
    None: each group its own component."""
    if group_comp is None:
        return np.arange(n_groups, dtype=np.int64)
    a = np.array(group_comp)
    if a.shape != (n_groups,) or (n_groups and (a.dtype.kind not in "iu" or a.min() < 0)):
        raise ValidationError(f"group_comp: expected {n_groups} non-negative integers")
    return a.astype(np.int64)


def ingress_components(group_job: np.ndarray, group_src: np.ndarray, group_dst: np.ndarray) -> np.ndarray:
    """Each (job, src, dst) group's component: the groups of one job into one host from other hosts.

    A receiver that needs one job's transfers from several senders (a worker
    reading from sharded parameter servers, a server taking gradients from
    several workers) should take them in the job's need order, not the
    sender with fewer bytes left first: with one key for them all, ties go to
    the need order. A job's only group into a host, and a group whose
    transfers stay on one host, is a component of its own.

    Parameters
    ----------
    group_job, group_src, group_dst : ndarray of int, shape (G,)
        Each group's job and hosts (negative job: no transfer, alone).

    Returns
    -------
    ndarray of int, shape (G,)
        Component ids in ``[0, G)``.
    """
    g = len(group_job)
    out = np.arange(g, dtype=np.int64)
    net = (np.asarray(group_job) >= 0) & (np.asarray(group_src) != np.asarray(group_dst))
    if not net.any():
        return out
    idx = np.flatnonzero(net)
    key = np.stack([np.asarray(group_job)[idx], np.asarray(group_dst)[idx]])
    _, first = np.unique(key, axis=1, return_inverse=True)
    first = first.ravel()
    lead = np.full(first.max() + 1, g, dtype=np.int64)
    np.minimum.at(lead, first, idx)  # each (job, dst)'s lowest group names it
    out[idx] = lead[first]
    return out


def component_max(left: np.ndarray, comp: np.ndarray) -> np.ndarray:
    """Each group's bytes ``left`` replaced by the largest of its component's (``comp``, shape (G,))."""
    if not len(comp):
        return left
    most = np.full(int(comp.max()) + 1, -np.inf)
    np.maximum.at(most, comp, left)
    return most[comp]


def background_key(remaining, size, egress_Bps, bg_ref_s: float, bg_weight: float) -> np.ndarray:
    """The JIT order's key of background flows (Smith's rule): bytes left times size over
    ``bg_ref_s`` seconds of the source's line rate, times ``bg_weight`` (bytes).

    Parameters
    ----------
    remaining, size : array, shape (B,)
        Each flow's bytes left and its whole size.
    egress_Bps : array, shape (B,)
        Its source's line rate, bytes/s.
    """
    return remaining * (size / (bg_ref_s * egress_Bps)) * bg_weight


def group_priority_reference(src, dst, node, job, bg, remaining, size, need, group, pair_left, bg_bytes,
                             egress, bg_ref_s, bg_weight, crumb_rtol, n_jobs, free_e, free_i,
                             job_left=None, job_exp=0.0, job_scale=None, group_comp=None,
                             tier=None) -> np.ndarray:
    """The JIT policy's strict-priority rates as numpy had them (lexsort, then a greedy); :class:`GroupPriority` must agree bit for bit.

    With ``tier``: one call per tier present, lowest first, on that tier's
    flows and the capacity the tiers before left.
    """
    if tier is not None:
        tier = np.asarray(tier, dtype=np.int64)
        flows = dict(src=src, dst=dst, node=node, job=job, bg=bg, remaining=remaining)
        flows = {k: np.asarray(v) for k, v in flows.items()}
        rest = dict(size=size, need=need, group=group, pair_left=pair_left, bg_bytes=bg_bytes, egress=egress,
                    bg_ref_s=bg_ref_s, bg_weight=bg_weight, crumb_rtol=crumb_rtol, n_jobs=n_jobs,
                    job_left=job_left, job_exp=job_exp, job_scale=job_scale, group_comp=group_comp)
        rates = np.zeros(len(tier))
        free_e, free_i = np.maximum(free_e, 0.0), np.maximum(free_i, 0.0)
        h = len(free_e)
        present = np.flatnonzero(np.bincount(tier)) if len(tier) else []
        for k, t in enumerate(present):
            sel = np.flatnonzero(tier == t)
            r = group_priority_reference(**{n: v[sel] for n, v in flows.items()}, **rest,
                                         free_e=free_e, free_i=free_i)
            rates[sel] = r
            if k + 1 < len(present):
                free_e = np.maximum(free_e - np.bincount(flows["src"][sel], weights=r, minlength=h), 0.0)
                free_i = np.maximum(free_i - np.bincount(flows["dst"][sel], weights=r, minlength=h), 0.0)
        return rates
    src, dst, node, job, bg = (np.asarray(a, dtype=np.int64) for a in (src, dst, node, job, bg))
    remaining, size, need = (np.asarray(a, dtype=np.float64) for a in (remaining, size, need))
    pair_left, bg_bytes = np.asarray(pair_left, dtype=np.float64), np.asarray(bg_bytes, dtype=np.float64)
    is_job = job >= 0
    bsize = bg_bytes[np.maximum(bg, 0)] if len(bg_bytes) else remaining
    egress_src = np.asarray(egress, dtype=np.float64)[src]
    ref_B = bg_ref_s * egress_src
    with np.errstate(invalid="ignore"):  # bg_weight inf: inf * 0 is nan, not taken
        bg_key = np.where(remaining > 0, background_key(remaining, bsize, egress_src, bg_ref_s, bg_weight), 0.0)
    if not is_job.any():
        order = np.lexsort((bg, bg_key))
    else:
        jnode = np.where(is_job, node, 0)
        grp = np.asarray(group, dtype=np.int64)[jnode]
        sent = np.where(is_job, size[jnode] - remaining, 0.0)
        left = pair_left - np.bincount(grp, weights=sent, minlength=len(pair_left))
        left = component_max(left, _group_comp(group_comp, len(pair_left)))
        key = np.where(is_job, left[grp], bg_key)
        if job_exp:
            jl = np.asarray(job_left, dtype=np.float64) - np.bincount(job[is_job], weights=sent[is_job],
                                                                      minlength=n_jobs)
            jix = np.maximum(job, 0)
            js = _job_scale(job_scale, n_jobs)
            scale = np.power(np.maximum(jl, 0.0)[jix] * js[jix] / ref_B, job_exp)
            with np.errstate(invalid="ignore"):  # a background key inf times a scale 0: not taken
                key = np.where(is_job, key * scale, key)
        key[is_job & (remaining <= crumb_rtol * size[jnode])] = -1.0
        ident = np.where(is_job, job, n_jobs + bg)
        order = np.lexsort((bg, node, np.where(is_job, need[jnode], 0.0), ident, key))
    return priority_greedy_reference(order, src, dst, np.maximum(free_e, 0.0), np.maximum(free_i, 0.0))


def flow_lenders(node, job, src, dst, remaining, need: np.ndarray, group: np.ndarray, n_groups: int,
                 may_lend: np.ndarray, iso_jct: np.ndarray, lend_slack: float, cap_e: np.ndarray,
                 cap_i: np.ndarray, late: np.ndarray, now: float, *, in_range: bool = False
                 ) -> tuple[np.ndarray, float]:
    """Which job flows have slack to lend their ports, and when the first of them stops having it.

    A flow's slack is its LAT in its job's isolated plan (its node's ``need``),
    moved later by as much as its job has run behind that plan so far, less
    ``now`` and the time it needs alone at its line rate: its remaining bytes
    over the smaller of its source's egress and its destination's ingress
    rate. That is how long it could wait without delaying its job further. A
    (job, src, dst) group (its node's ``group``) lends when every live flow
    in it has more slack than its threshold, ``lend_slack`` times its job's
    isolated JCT where the job may lend (never reached where not): the policy
    then ranks it after the flows that do not lend. One kernel call
    (:func:`flow_lenders_reference` spells it out in numpy).

    Parameters
    ----------
    node, job, src, dst : array of int, shape (F,)
        The flows' DAG node, job (both -1: a background flow, never lends) and hosts.
    remaining : array, shape (F,)
        Bytes left per flow.
    need, group : ndarray, shape (N,)
        Each DAG node's LAT in its job's isolated plan (seconds, absolute)
        and (job, src, dst) group in ``[0, n_groups)``.
    n_groups : int
    may_lend : ndarray of bool, shape (J,)
        Jobs whose groups may lend.
    iso_jct : ndarray, shape (J,)
        Each job's isolated JCT, seconds.
    lend_slack : float
        A threshold in isolated JCTs.
    cap_e, cap_i : ndarray, shape (H,)
        Line rates, bytes/s.
    late : ndarray, shape (J,)
        How far each job has run behind its isolated plan so far, seconds;
        raised in place to what the flows show ``now`` (contiguous float64).
    now : float
        Seconds.
    in_range : bool
        The caller guarantees contiguous int64 (``node``, ``job``, ``src``,
        ``dst``, ``group``), float64 and bool arrays (e.g. a simulator's own
        flow buffers and a policy's own tables): no copies are made. Shapes
        and indices are checked either way.

    Returns
    -------
    lend : ndarray of bool, shape (F,)
    wake : float
        When to look again (seconds): the first instant a lender's slack falls to its
        threshold, but at least :data:`LEND_RECHECK` of its threshold from ``now``; inf
        if none lends.

    Raises
    ------
    ValidationError
        If shapes disagree, ``late`` is not a contiguous float64 array, or a job
        flow's node, job, group or host is out of range.
    """
    if not in_range:
        node, job, src, dst, group = (np.ascontiguousarray(a, dtype=np.int64) for a in (node, job, src, dst, group))
        remaining, need, iso_jct, cap_e, cap_i = (np.ascontiguousarray(a, dtype=np.float64)
                                                  for a in (remaining, need, iso_jct, cap_e, cap_i))
        may_lend = np.ascontiguousarray(may_lend, dtype=bool)
        if not (isinstance(late, np.ndarray) and late.dtype == np.float64 and late.ndim == 1
                and late.flags.c_contiguous):
            raise ValidationError("late: expected a contiguous float64 array (raised in place)")
    n = len(node)
    if job.shape != (n,) or src.shape != (n,) or dst.shape != (n,) or remaining.shape != (n,):
        raise ValidationError(f"node/job/src/dst/remaining: expected shape ({n},)")
    lend = np.zeros(n, dtype=np.uint8)
    wake = _kernels().flow_lenders(node, job, src, dst, remaining, need, group, int(n_groups), may_lend.view(np.uint8),
                                   iso_jct, float(lend_slack), cap_e, cap_i, late, float(now), LEND_RECHECK, lend)
    if math.isnan(wake):
        raise ValidationError("node/job/group/src/dst: index out of range, or per-job/per-node shapes disagree")
    return lend.view(bool), wake


def flow_lenders_reference(node, job, src, dst, remaining, need, group, n_groups, may_lend, iso_jct,
                           lend_slack, cap_e, cap_i, late, now, *, in_range=False) -> tuple[np.ndarray, float]:
    """:func:`flow_lenders` in numpy, the kernel's reference: the same results, bit for bit (``in_range`` changes nothing here)."""
    node, job, src, dst = (np.asarray(a, dtype=np.int64) for a in (node, job, src, dst))
    if not (job >= 0).any():
        return np.zeros(len(job), dtype=bool), math.inf
    jx, nx = np.maximum(job, 0), np.maximum(node, 0)  # a background flow's lookups are never read
    with np.errstate(divide="ignore", invalid="ignore"):
        t_left = np.asarray(remaining, dtype=np.float64) / np.minimum(np.asarray(cap_e)[src], np.asarray(cap_i)[dst])
        threshold = np.where(np.asarray(may_lend)[jx], lend_slack, np.inf) * np.asarray(iso_jct)[jx]
    return _lenders_reference(np.asarray(need)[nx], job, np.asarray(group)[nx], n_groups, t_left, late, threshold,
                             now)


def _lenders_reference(need: np.ndarray, job: np.ndarray, group: np.ndarray, n_groups: int, t_left: np.ndarray,
                       late: np.ndarray, threshold: np.ndarray, now: float) -> tuple[np.ndarray, float]:
    # flow_lenders_reference on per-flow need, group, time left and threshold
    is_job = (job >= 0) & np.isfinite(need)
    if not is_job.any():
        return np.zeros(len(need), dtype=bool), math.inf
    j = job[is_job]
    np.maximum.at(late, j, now + t_left[is_job] - need[is_job])
    slack = np.full(len(need), -math.inf)
    slack[is_job] = need[is_job] + late[j] - now - t_left[is_job]
    lend = slack > threshold
    held = np.zeros(n_groups + 1, dtype=bool)  # groups with a live flow that cannot wait; -1 last
    held[group[(job >= 0) & ~lend]] = True
    lend &= ~held[group]
    if not lend.any():
        return lend, math.inf
    return lend, now + float(np.min(np.maximum(slack[lend] - threshold[lend], LEND_RECHECK * threshold[lend])))
