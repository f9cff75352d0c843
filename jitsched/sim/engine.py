"""Flow-level, event-driven simulator: DAG jobs and background flows on a virtual clock, rates from a policy."""

from __future__ import annotations

import math
import time

import numpy as np

from jitsched.alloc import CAPACITY_RTOL, check_capacity
from jitsched.errors import ValidationError, load_kernel
from jitsched.model import COMPUTE, TRANSFER, Workload, compile_jobs
from jitsched.policies.base import (
    DONE,
    RUNNING,
    WAITING,
    FlowSet,
    Policy,
    SchedulerView,
    make_policy,
)
from jitsched.sim.clock import EventQueue, VirtualClock
from jitsched.sim.metrics import SimResult, SlotLog, collect

# Event kinds; at equal times, arrivals are handled before completions so a
# policy planning at an arrival sees the state just before anything else moves.
_JOB_ARRIVAL, _BG_ARRIVAL, _COMPUTE_DONE, _TICK = 0, 1, 2, 3

# A flow is complete when at most this many bytes are left (absolute + relative
# to its size): fluid arithmetic leaves float crumbs, never real data.
DONE_ABS_BYTES = 1e-3
DONE_REL = 1e-9


class Simulator:
    """Replays a workload under one policy on a virtual clock.

    Compute nodes take their duration (optionally drawn around it with seeded
    noise; hosts run any number of ops at once, as the LAT model assumes);
    transfers and background flows are fluid flows whose rates the policy
    sets, limited by host egress/ingress. The policy is asked again whenever
    the set of sending flows changes, a job or flow arrives, or the instant
    it named in ``Allocation.valid_until_s`` comes.

    Parameters
    ----------
    workload : Workload
    policy : Policy or str
        A policy object or a registered name.
    seed : int
        Seeds the compute-duration noise.
    compute_noise : float
        Relative standard deviation of compute durations when a node gives no
        ``std_s`` (0: exact durations). Draws are truncated at 0.
    tick_s : float, optional
        Call ``policy.on_tick`` this often, seconds.
    check : bool
        Assert every allocation respects every port (cheap; on by default).
    progress : bool
        Show a tqdm bar over finished jobs and flows.
    policy_options : dict, optional
        Options for :func:`make_policy` when ``policy`` is a name.
    """

    def __init__(self, workload: Workload, policy: Policy | str, *, seed: int = 0,
                 compute_noise: float = 0.0, tick_s: float | None = None, check: bool = True,
                 progress: bool = False, policy_options: dict | None = None) -> None:
        if compute_noise < 0:
            raise ValidationError(f"compute_noise: must be >= 0, got {compute_noise!r}")
        if tick_s is not None and not tick_s > 0:
            raise ValidationError(f"tick_s: must be positive, got {tick_s!r}")
        self.workload = workload
        self.policy = make_policy(policy, **(policy_options or {})) if isinstance(policy, str) else policy
        self.seed = int(seed)
        self.compute_noise = float(compute_noise)
        self.tick_s = tick_s
        self.check = check
        self.progress = progress
        self.cluster = workload.cluster
        caps = np.concatenate([self.cluster.egress_Bps, self.cluster.ingress_Bps])
        if not np.all(np.isfinite(caps)):  # once here, not on every allocation (FlowSet.checked)
            raise ValidationError("cluster: host capacities must be finite")
        self.dag = compile_jobs(list(workload.jobs), self.cluster)

    # ------------------------------------------------------------------ setup

    def _durations(self) -> np.ndarray:
        dag = self.dag
        dur = dag.duration.copy()
        sd = np.where(dag.std > 0, dag.std, self.compute_noise * dag.duration)
        if np.any(sd > 0):
            rng = np.random.default_rng(self.seed)
            z = rng.standard_normal(dag.n_nodes)  # one draw per node: same seed, same run
            dur = np.maximum(dur + sd * z, 0.0)
        dur[dag.kind != COMPUTE] = 0.0
        return dur

    # ------------------------------------------------------------------ run

    def run(self) -> SimResult:
        """Simulate until every job and background flow is done.

        Returns
        -------
        SimResult
        """
        wall0 = time.perf_counter()
        dag, cl, pol = self.dag, self.cluster, self.policy
        wl = self.workload
        n, nj, nb, nh = dag.n_nodes, dag.n_jobs, len(wl.background), len(cl)
        cap_e, cap_i = cl.egress_Bps, cl.ingress_Bps
        dur = self._durations()
        pending = np.diff(dag.pred_ptr).astype(np.int64)
        succ_ptr, succ_idx = dag.succ_ptr, dag.succ_idx
        kind = dag.kind
        state = np.full(n, WAITING, dtype=np.int8)
        start = np.full(n, np.nan)
        finish = np.full(n, np.nan)
        remaining = np.where(kind == TRANSFER, dag.size, 0.0)
        sent = np.zeros(n)
        nodes_left = np.diff(dag.job_ptr).tolist()  # per job, a list: decremented per node
        job_arrived = np.zeros(nj, dtype=bool)
        job_done = np.zeros(nj, dtype=bool)
        job_finish = np.full(nj, np.nan)
        bg_src = np.array([cl.index(b.src) for b in wl.background], dtype=np.int64)
        bg_dst = np.array([cl.index(b.dst) for b in wl.background], dtype=np.int64)
        bg_bytes = np.array([b.bytes for b in wl.background], dtype=np.float64)
        bg_arr = np.array([b.arrival_s for b in wl.background], dtype=np.float64)
        bg_rem = bg_bytes.copy()
        bg_sent = np.zeros(nb)
        bg_finish = np.full(nb, np.nan)
        clock = VirtualClock(0.0)
        events = EventQueue()
        for k in range(nj):
            events.push(float(dag.arrival[k]), _JOB_ARRIVAL, k)
        for b in range(nb):
            events.push(float(bg_arr[b]), _BG_ARRIVAL, b)
        if self.tick_s is not None:
            events.push(self.tick_s, _TICK, None)

        # Active flows live in the first buf.n entries of parallel buffers that
        # grow by doubling: the per-event kernels of _sim.FlowTable update and
        # compact them in place, so an event costs a few calls, not one numpy
        # call per array (a paper-scale run has ~10^6 events over a few hundred
        # flows); the table holds every array they touch, so a call acquires none.
        dag_egress = np.zeros(nh)  # DAG-transfer rate per host egress, bytes/s
        dag_egress_int = np.zeros(nh)  # its integral over time, bytes
        buf = load_kernel("_sim").FlowTable(sent, remaining, bg_sent, dag_egress, dag_egress_int,
                                            np.ascontiguousarray(cap_e, dtype=np.float64),
                                            np.ascontiguousarray(cap_i, dtype=np.float64),
                                            DONE_ABS_BYTES, DONE_REL, 64)
        advance = buf.advance  # moves buf.rem (exact at buf.t_last) to a later time
        new_flows: list[tuple[int, int, int, int, int, float, float]] = []
        dag_window = [math.inf, -math.inf]  # first DAG arrival, last DAG finish
        # Remaining bandwidth per slot: the per-host byte integrals are sampled
        # at the grid instants (from the first DL arrival) and at the last DL
        # finish, between events, from the table's integrals (exact at its
        # last advance) and the rates in force since. No work per allocation.
        slots = SlotLog()
        next_slot = math.inf  # next grid instant to sample
        bg_int = bg_sent.copy()  # background bytes per flow without the finishing crumbs
        slot_k = [0]  # grid instants sampled
        jobs_left = [nj]

        def sample_slot(t: float) -> None:
            # rates are constant from the table's last advance to t
            dt = t - buf.t_last
            dag_int = dag_egress_int + dag_egress * dt
            bg_live = np.where(np.isnan(bg_finish), bg_sent, bg_int)
            bg_host = np.bincount(bg_src, bg_live, nh) if nb else np.zeros(nh)
            k = buf.n
            if k and dt > 0:
                live = buf.bg[:k] >= 0
                bg_host += np.bincount(buf.src[:k][live], buf.rate[:k][live] * dt, nh)
            slots.add(t, dag_int, bg_host)
        valid_until = math.inf
        t_flow = math.inf  # earliest finish of a live flow at the current rates
        n_alloc = 0
        n_events = 0
        policy_s = 0.0
        max_util = 0.0

        pol.reset(cl)
        view = SchedulerView(cl, 0.0, dag, job_arrived, job_done, state, finish, remaining,
                             FlowSet.empty(), bg_src, bg_dst, bg_bytes, bg_arr, virtual_time=True)
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=nj + nb, desc=f"sim {pol.name}", unit="job", leave=False)

        # Per-node bookkeeping runs ~10^6 times at paper scale: read the DAG
        # from Python lists (a numpy scalar access costs several list reads).
        kind_l, dur_l, job_of_l = kind.tolist(), dur.tolist(), dag.job_of.tolist()
        src_l, dst_l, size_l = dag.src.tolist(), dag.dst.tolist(), dag.size.tolist()
        succ_ptr_l, succ_idx_l = succ_ptr.tolist(), succ_idx.tolist()
        pending_l = pending.tolist()

        def release(v: int, now: float, out: list) -> None:
            # node v's predecessors are all done
            state[v] = RUNNING
            start[v] = now
            if kind_l[v] == COMPUTE:
                events.push(now + dur_l[v], _COMPUTE_DONE, v)
            else:
                out.append((src_l[v], dst_l[v], v, job_of_l[v], -1, now, size_l[v]))

        def node_done(v: int, now: float) -> None:
            nonlocal policy_s
            state[v] = DONE
            finish[v] = now
            k = job_of_l[v]
            for e in range(succ_ptr_l[v], succ_ptr_l[v + 1]):
                w = succ_idx_l[e]
                pending_l[w] -= 1
                if pending_l[w] == 0:
                    release(w, now, new_flows)
            nodes_left[k] -= 1
            if nodes_left[k] == 0:
                job_done[k] = True
                job_finish[k] = now
                dag_window[1] = max(dag_window[1], now)
                jobs_left[0] -= 1
                if jobs_left[0] == 0:
                    sample_slot(now)  # the remaining-bandwidth window ends here
                if bar is not None:
                    bar.update(1)
            view.now = now
            tp = time.perf_counter()
            pol.on_node_done(view, v)
            policy_s += time.perf_counter() - tp

        dirty = True
        while True:
            now = clock.now()
            if dirty:
                advance(now)
                if new_flows:
                    buf.append(new_flows)  # done when at most tol bytes are left (from the size)
                    new_flows.clear()
                n_live = buf.n
                f_src, f_dst = buf.src[:n_live], buf.dst[:n_live]
                f_rem = buf.rem[:n_live]
                view.now = now
                # Views of the buffers: policies read them during allocate() only
                # (they never keep or mutate a FlowSet); remaining is a copy, in
                # a buffer of the table that the next allocation refills.
                # checked: the buffers hold compiled host/node indices only (and
                # __init__ checked the capacities), so policies skip their O(F) checks
                view.flows = FlowSet(f_src, f_dst, buf.remaining(), buf.node[:n_live],
                                     buf.job[:n_live], buf.bg[:n_live], buf.rel[:n_live], checked=True)
                tp = time.perf_counter()
                alloc = pol.allocate(view)
                policy_s += time.perf_counter() - tp
                n_alloc += 1
                f_rate = np.ascontiguousarray(alloc.rates, dtype=np.float64)
                if f_rate.shape != f_rem.shape:
                    raise RuntimeError(f"policy {pol.name!r} returned {f_rate.shape} rates "
                                       f"for {f_rem.shape[0]} flows")
                check = self.check and n_live > 0
                t_flow, util_e, util_i, ok = buf.allocated(now, check, CAPACITY_RTOL, f_rate)
                if check:
                    if not ok:
                        check_capacity(f_src, f_dst, f_rate, cap_e, cap_i)  # raises, naming the port
                        raise AssertionError("allocation over capacity")  # pragma: no cover
                    max_util = max(max_util, util_e, util_i)
                valid_until = float(alloc.valid_until_s)
                if valid_until <= now:
                    raise RuntimeError(f"policy {pol.name!r} asked to be woken at "
                                       f"{valid_until} <= now {now}")
                dirty = False
            t_ev = events.peek_time()
            t_next = min(t_flow, t_ev, valid_until)
            if t_next == math.inf:
                break
            clock.wait_until(max(t_next, now))
            now = clock.now()
            while next_slot <= now and jobs_left[0]:
                # the grid instants passed on the way, up to the last DL finish
                sample_slot(next_slot)
                slot_k[0] += 1
                next_slot = slots.origin + slots.slot_s * slot_k[0]
            n_events += 1
            if t_flow <= now:
                advance(now)
                fin_nodes, fin_bgs, crumbs = buf.collect_done(now)
                for v, b, c in zip(fin_nodes, fin_bgs, crumbs, strict=True):
                    if v >= 0:
                        sent[v] += max(c, 0.0)  # the float crumb goes out with the rest
                        remaining[v] = 0.0
                        node_done(v, now)
                    else:
                        bg_int[b] = bg_sent[b]  # before the crumb: a finished flow adds nothing later
                        bg_sent[b] += max(c, 0.0)
                        bg_rem[b] = 0.0
                        bg_finish[b] = now
                        if bar is not None:
                            bar.update(1)
                        view.now = now
                        tp = time.perf_counter()
                        pol.on_flow_done(view, b)
                        policy_s += time.perf_counter() - tp
                dirty = True  # the flow set changed: t_flow is recomputed with the new rates
            while events.peek_time() <= now:
                _, ev, payload = events.pop()
                if ev == _COMPUTE_DONE:
                    node_done(payload, now)
                    if new_flows:
                        dirty = True
                    continue
                dirty = True
                advance(now)
                view.now = now
                tp = time.perf_counter()
                if ev == _JOB_ARRIVAL:
                    k = payload
                    job_arrived[k] = True
                    dag_window[0] = min(dag_window[0], now)
                    if slots.origin is None:  # the slot grid starts at the first DL arrival
                        slots.origin = now
                        sample_slot(now)
                        slot_k[0] = 1
                        next_slot = now + slots.slot_s
                    lo, hi = int(dag.job_ptr[k]), int(dag.job_ptr[k + 1])
                    for v in range(lo, hi):
                        if pending_l[v] == 0:
                            release(v, now, new_flows)
                    pol.on_job_arrival(view, k)
                elif ev == _BG_ARRIVAL:
                    b = payload
                    new_flows.append((int(bg_src[b]), int(bg_dst[b]), -1, -1, b, now, float(bg_bytes[b])))
                    pol.on_flow_arrival(view, b)
                elif ev == _TICK:
                    pol.on_tick(view)
                    if len(events) or buf.n or new_flows:
                        events.push(now + self.tick_s, _TICK, None)
                policy_s += time.perf_counter() - tp
            if valid_until <= now:
                dirty = True
            if not dirty and not math.isfinite(t_next):
                break
        if bar is not None:
            bar.close()
        if buf.n:
            raise RuntimeError(f"policy {pol.name!r} left {buf.n} flows starved "
                               f"(zero rate, nothing left to wake it) at t={clock.now()}")
        if not np.all(job_done):
            stuck = dag.job_ids[int(np.flatnonzero(~job_done)[0])]
            raise RuntimeError(f"job {stuck!r} never finished")
        wall = time.perf_counter() - wall0
        return collect(self, dict(
            start=start, finish=finish, sent=sent, job_finish=job_finish, bg_finish=bg_finish,
            bg_sent=bg_sent, bg_src=bg_src, bg_dst=bg_dst, bg_bytes=bg_bytes, bg_arr=bg_arr,
            dag_egress_int=dag_egress_int, dag_window=tuple(dag_window), slots=slots, wall_s=wall,
            policy_s=policy_s, n_alloc=n_alloc, n_events=n_events, max_util=max_util, end_s=clock.now()))


def simulate(workload: Workload, policy: Policy | str, **kwargs) -> SimResult:
    """Run one simulation; keyword arguments as for :class:`Simulator`."""
    return Simulator(workload, policy, **kwargs).run()
