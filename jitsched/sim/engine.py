"""Flow-level, event-driven simulator: DAG jobs and background flows on a virtual clock, rates from a policy."""

# One module although past 500 lines: _Run is one event loop over one run's state
# (the event heap, the active flows, each node's readiness); its handlers read and write
# that state between two events, so a split would only pass it around.

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from jitsched.dag.model import COMPUTE, TRANSFER, Workload, compile_jobs
from jitsched.errors import ValidationError, load_kernel
from jitsched.plan.alloc import CAPACITY_RTOL, check_capacity
from jitsched.plan.bound import check_arrivals
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
    follows : sequence of int, optional
        Per job, the job whose end it arrives at (-1: at its ``arrival_s``): a
        recurring job's iterations, back to back (:mod:`jitsched.sim.recurring`).
    true_duration_s : ndarray, shape (n_nodes,), optional
        What each compute really takes before noise (default: its ``duration_s``);
        the DAG's durations are then only what policies are told.
    on_job_done : callable, optional
        ``on_job_done(job, now, took)`` when a job ends, ``took`` its nodes'
        run times (computes' drawn durations, transfers' release-to-arrival
        times), before the jobs that follow it arrive: the caller may rewrite
        their estimates in ``self.dag`` (``duration``, ``std``) there.

    Raises
    ------
    ValidationError
        On a bad option, infinite host capacities, or a job or background flow
        arriving after :data:`jitsched.plan.bound.MAX_ARRIVAL_S`.
    """

    def __init__(self, workload: Workload, policy: Policy | str, *, seed: int = 0,
                 compute_noise: float = 0.0, tick_s: float | None = None, check: bool = True,
                 progress: bool = False, policy_options: dict | None = None,
                 follows: Sequence[int] | None = None, true_duration_s: np.ndarray | None = None,
                 on_job_done: Callable[[int, float, np.ndarray], None] | None = None) -> None:
        if not 0 <= compute_noise < math.inf:
            raise ValidationError(f"compute_noise: must be a finite number >= 0, got {compute_noise!r}")
        if tick_s is not None and not tick_s > 0:
            raise ValidationError(f"tick_s: must be positive, got {tick_s!r}")
        self.workload = workload
        self.policy = make_policy(policy, **(policy_options or {})) if isinstance(policy, str) else policy
        self.seed = int(seed)
        self.compute_noise = float(compute_noise)
        self.tick_s = tick_s
        self.check = check
        self.progress = progress
        check_arrivals(workload)
        self.cluster = workload.cluster
        caps = np.concatenate([self.cluster.egress_Bps, self.cluster.ingress_Bps])
        if not np.all(np.isfinite(caps)):  # once here, not on every allocation (FlowSet.checked)
            raise ValidationError("cluster: host capacities must be finite")
        self.dag = compile_jobs(list(workload.jobs), self.cluster)
        nj = self.dag.n_jobs
        self.follows = [-1] * nj if follows is None else [int(k) for k in follows]
        if len(self.follows) != nj or any(not -1 <= k < nj or k == j for j, k in enumerate(self.follows)):
            raise ValidationError(f"follows: expected {nj} job indices (or -1), none a job's own")
        self.true_duration_s = None
        if true_duration_s is not None:
            self.true_duration_s = np.asarray(true_duration_s, dtype=np.float64)
            if self.true_duration_s.shape != (self.dag.n_nodes,) or not np.all(self.true_duration_s >= 0):
                raise ValidationError(f"true_duration_s: expected {self.dag.n_nodes} durations >= 0")
        self.on_job_done = on_job_done

    # ------------------------------------------------------------------ setup

    def _durations(self) -> np.ndarray:
        dag = self.dag
        if self.true_duration_s is not None:
            dur = self.true_duration_s.copy()
            sd = self.compute_noise * dur
        else:
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
        run = _Run(self)
        run.loop()
        run.check_finished()
        return collect(self, run.raw(time.perf_counter() - wall0))


class _Run:
    """The state of one :meth:`Simulator.run` and one handler per event kind.

    SimPy style: :meth:`loop` takes the events off one heap (deterministic
    ties, :class:`EventQueue`) and hands each to its handler; between events
    the policy re-allocates whenever a handler left the flow set dirty. The
    state lives on the object so that each step reads as a method; the hot
    ones (:meth:`node_done`, :meth:`release`, ~10^6 calls at paper scale)
    read the DAG from Python lists, as a numpy scalar access costs several
    list reads.
    """

    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        dag, cl, wl = sim.dag, sim.cluster, sim.workload
        self.dag, self.pol = dag, sim.policy
        n, nj, nb, nh = dag.n_nodes, dag.n_jobs, len(wl.background), len(cl)
        self.nh, self.nb = nh, nb
        self.cap_e, self.cap_i = cl.egress_Bps, cl.ingress_Bps
        dur = sim._durations()
        # node state, as SchedulerView shows it to the policy
        self.state = np.full(n, WAITING, dtype=np.int8)
        self.start = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.remaining = np.where(dag.kind == TRANSFER, dag.size, 0.0)
        self.sent = np.zeros(n)
        self.nodes_left = np.diff(dag.job_ptr).tolist()  # per job, a list: decremented per node
        self.jobs_left = nj
        self.job_arrived = np.zeros(nj, dtype=bool)
        self.job_done = np.zeros(nj, dtype=bool)
        self.job_finish = np.full(nj, np.nan)
        self.dag_window = [math.inf, -math.inf]  # first DAG arrival, last DAG finish
        # background flows
        self.bg_src = np.array([cl.index(b.src) for b in wl.background], dtype=np.int64)
        self.bg_dst = np.array([cl.index(b.dst) for b in wl.background], dtype=np.int64)
        self.bg_bytes = np.array([b.bytes for b in wl.background], dtype=np.float64)
        self.bg_arr = np.array([b.arrival_s for b in wl.background], dtype=np.float64)
        self.bg_sent = np.zeros(nb)
        self.bg_finish = np.full(nb, np.nan)
        self.bg_int = self.bg_sent.copy()  # background bytes per flow without the finishing crumbs
        # the DAG as Python lists, for the per-node bookkeeping
        self.kind_l, self.dur_l, self.job_of_l = dag.kind.tolist(), dur.tolist(), dag.job_of.tolist()
        self.src_l, self.dst_l, self.size_l = dag.src.tolist(), dag.dst.tolist(), dag.size.tolist()
        self.succ_ptr_l, self.succ_idx_l = dag.succ_ptr.tolist(), dag.succ_idx.tolist()
        self.pending_l = np.diff(dag.pred_ptr).astype(np.int64).tolist()  # unfinished predecessors
        # events
        self.clock = VirtualClock(0.0)
        self.events = EventQueue()
        self.followers: dict[int, list[int]] = {}
        for k in range(nj):
            if sim.follows[k] >= 0:
                self.followers.setdefault(sim.follows[k], []).append(k)
            else:
                self.events.push(float(dag.arrival[k]), _JOB_ARRIVAL, k)
        for b in range(nb):
            self.events.push(float(self.bg_arr[b]), _BG_ARRIVAL, b)
        if sim.tick_s is not None:
            self.events.push(sim.tick_s, _TICK, None)

        # Active flows live in the first buf.n entries of parallel buffers that
        # grow by doubling: the per-event kernels of _sim.FlowTable update and
        # compact them in place, so an event costs a few calls, not one numpy
        # call per array (a paper-scale run has ~10^6 events over a few hundred
        # flows); the table holds every array they touch, so a call acquires none.
        self.dag_egress = np.zeros(nh)  # DAG-transfer rate per host egress, bytes/s
        self.dag_egress_int = np.zeros(nh)  # its integral over time, bytes
        self.buf = load_kernel("_sim").FlowTable(
            self.sent, self.remaining, self.bg_sent, self.dag_egress, self.dag_egress_int,
            np.ascontiguousarray(self.cap_e, dtype=np.float64),
            np.ascontiguousarray(self.cap_i, dtype=np.float64), DONE_ABS_BYTES, DONE_REL, 64)
        self.advance = self.buf.advance  # moves buf.rem (exact at buf.t_last) to a later time
        self.new_flows: list[tuple[int, int, int, int, int, float, float]] = []  # for the next allocation
        # Remaining bandwidth per slot: the per-host byte integrals are sampled
        # at the grid instants (from the first DL arrival) and at the last DL
        # finish, between events, from the table's integrals (exact at its
        # last advance) and the rates in force since. No work per allocation.
        self.slots = SlotLog()
        self.next_slot = math.inf  # next grid instant to sample
        self.slot_k = 0  # grid instants sampled
        # the allocation in force
        self.valid_until = math.inf
        self.t_flow = math.inf  # earliest finish of a live flow at the current rates
        # counters
        self.n_alloc = 0
        self.n_events = 0
        self.policy_s = 0.0
        self.max_util = 0.0

        self.pol.reset(cl)
        self.view = SchedulerView(cl, 0.0, dag, self.job_arrived, self.job_done, self.state, self.finish,
                                  self.remaining, FlowSet.empty(), self.bg_src, self.bg_dst, self.bg_bytes,
                                  self.bg_arr, virtual_time=True)
        self.bar = None
        if sim.progress:
            from tqdm import tqdm

            self.bar = tqdm(total=nj + nb, desc=f"sim {self.pol.name}", unit="job", leave=False)

    # ------------------------------------------------------------------ the loop

    def loop(self) -> None:
        """Run to the end: allocate when dirty, jump to the next instant, handle what is due."""
        clock, events = self.clock, self.events
        handlers = {_JOB_ARRIVAL: self.on_job_arrival, _BG_ARRIVAL: self.on_bg_arrival,
                    _COMPUTE_DONE: self.on_compute_done, _TICK: self.on_tick}
        dirty = True
        while True:
            now = clock.now()
            if dirty:
                self.allocate(now)
                dirty = False
            t_next = min(self.t_flow, events.peek_time(), self.valid_until)
            if t_next == math.inf:
                break
            clock.wait_until(max(t_next, now))
            now = clock.now()
            if self.next_slot <= now and self.jobs_left:
                self.sample_grid(now)  # the grid instants passed on the way, up to the last DL finish
            self.n_events += 1
            if self.t_flow <= now:
                self.flows_done(now)
                dirty = True  # the flow set changed: t_flow is recomputed with the new rates
            while events.peek_time() <= now:
                _, ev, payload = events.pop()
                if handlers[ev](now, payload):
                    dirty = True
            if self.valid_until <= now:
                dirty = True
            if not dirty and not math.isfinite(t_next):
                break
        if self.bar is not None:
            self.bar.close()

    def allocate(self, now: float) -> None:
        """Move the flows to ``now``, add the new ones, and take the policy's rates for them."""
        buf, view, pol = self.buf, self.view, self.pol
        self.advance(now)
        k = buf.n
        if k and np.any(buf.rem[:k] <= buf.tol[:k]):
            # flows that reached their last crumbs at an event before their computed
            # finish (an ulp apart) are done now: a policy ranking them behind a new
            # flow would give them 0 and hold them until the port frees
            self.flows_done(now)
        if self.new_flows:
            buf.append(self.new_flows)  # done when at most tol bytes are left (from the size)
            self.new_flows.clear()
        n_live = buf.n
        f_src, f_dst = buf.src[:n_live], buf.dst[:n_live]
        f_rem = buf.rem[:n_live]
        view.now = now
        # Views of the buffers: policies read them during allocate() only
        # (they never keep or mutate a FlowSet); remaining is a copy, in
        # a buffer of the table that the next allocation refills.
        # checked: the buffers hold compiled host/node indices only (and
        # Simulator checked the capacities), so policies skip their O(F) checks
        view.flows = FlowSet(f_src, f_dst, buf.remaining(), buf.node[:n_live],
                             buf.job[:n_live], buf.bg[:n_live], buf.rel[:n_live], checked=True)
        tp = time.perf_counter()
        alloc = pol.allocate(view)
        self.policy_s += time.perf_counter() - tp
        self.n_alloc += 1
        f_rate = np.ascontiguousarray(alloc.rates, dtype=np.float64)
        if f_rate.shape != f_rem.shape:
            raise RuntimeError(f"policy {pol.name!r} returned {f_rate.shape} rates "
                               f"for {f_rem.shape[0]} flows")
        check = self.sim.check and n_live > 0
        self.t_flow, util_e, util_i, ok = buf.allocated(now, check, CAPACITY_RTOL, f_rate)
        if check:
            if not ok:
                check_capacity(f_src, f_dst, f_rate, self.cap_e, self.cap_i)  # raises, naming the port
                raise AssertionError("allocation over capacity")  # pragma: no cover
            self.max_util = max(self.max_util, util_e, util_i)
        self.valid_until = float(alloc.valid_until_s)
        if self.valid_until <= now:
            raise RuntimeError(f"policy {pol.name!r} asked to be woken at "
                               f"{self.valid_until} <= now {now}")

    def sample_grid(self, now: float) -> None:
        """Sample the grid instants up to ``now``, the rates in force since the last advance.

        With no DAG bytes flowing, every grid instant of the jump holds the
        same DAG integrals: after the first, only the last two are sampled,
        all that :class:`SlotLog` keeps of an idle stretch, so a long idle
        span costs two samples, not one per grid instant.
        """
        origin, step = self.slots.origin, self.slots.slot_s
        idle = not self.dag_egress.any()
        while self.next_slot <= now:
            self.sample_slot(self.next_slot)
            self.slot_k += 1
            if self.slots.slot_s != step:  # the log doubled its step: go on on its grid
                step = self.slots.slot_s
                self.slot_k = _last_grid_index(origin, step, self.next_slot) + 1
            if idle:
                self.slot_k = max(self.slot_k, _last_grid_index(origin, step, now) - 1)
            self.next_slot = origin + step * self.slot_k

    def sample_slot(self, t: float) -> None:
        """Record the per-host DAG and background bytes sent up to ``t`` (rates constant since the last advance)."""
        buf, nh = self.buf, self.nh
        dt = t - buf.t_last
        dag_int = self.dag_egress_int + self.dag_egress * dt
        bg_live = np.where(np.isnan(self.bg_finish), self.bg_sent, self.bg_int)
        bg_host = np.bincount(self.bg_src, bg_live, nh) if self.nb else np.zeros(nh)
        k = buf.n
        if k and dt > 0:
            live = buf.bg[:k] >= 0
            bg_host += np.bincount(buf.src[:k][live], buf.rate[:k][live] * dt, nh)
        self.slots.add(t, dag_int, bg_host)

    # ------------------------------------------------------------------ nodes and flows

    def release(self, v: int, now: float) -> None:
        """Start node ``v``, whose predecessors are all done: a compute runs, a transfer joins the flows."""
        self.state[v] = RUNNING
        self.start[v] = now
        if self.kind_l[v] == COMPUTE:
            self.events.push(now + self.dur_l[v], _COMPUTE_DONE, v)
        else:
            self.new_flows.append((self.src_l[v], self.dst_l[v], v, self.job_of_l[v], -1, now, self.size_l[v]))

    def node_done(self, v: int, now: float) -> None:
        """Finish node ``v``: release the successors it was the last wait of, close its job if it was the last node."""
        self.state[v] = DONE
        self.finish[v] = now
        k = self.job_of_l[v]
        pending, succ_idx = self.pending_l, self.succ_idx_l
        for e in range(self.succ_ptr_l[v], self.succ_ptr_l[v + 1]):
            w = succ_idx[e]
            pending[w] -= 1
            if pending[w] == 0:
                self.release(w, now)
        self.nodes_left[k] -= 1
        if self.nodes_left[k] == 0:
            self.job_done[k] = True
            self.job_finish[k] = now
            self.dag_window[1] = max(self.dag_window[1], now)
            self.jobs_left -= 1
            if self.jobs_left == 0:
                self.sample_slot(now)  # the remaining-bandwidth window ends here
            if self.bar is not None:
                self.bar.update(1)
            if k in self.followers:
                self.job_followed(k, now)
        self.view.now = now
        tp = time.perf_counter()
        self.pol.on_node_done(self.view, v)
        self.policy_s += time.perf_counter() - tp

    def job_followed(self, k: int, now: float) -> None:
        """Job ``k`` ended: the caller's hook sees its run times, then its followers arrive now."""
        if self.sim.on_job_done is not None:
            lo, hi = int(self.dag.job_ptr[k]), int(self.dag.job_ptr[k + 1])
            self.sim.on_job_done(k, now, self.finish[lo:hi] - self.start[lo:hi])
        for j in self.followers.pop(k):
            self.dag.arrival[j] = now
            self.events.push(now, _JOB_ARRIVAL, j)

    def flows_done(self, now: float) -> None:
        """Take the flows finished by ``now`` out of the table; their nodes are done."""
        self.advance(now)
        fin_nodes, fin_bgs, crumbs = self.buf.collect_done(now)
        sent, remaining, bg_sent = self.sent, self.remaining, self.bg_sent
        for v, b, c in zip(fin_nodes, fin_bgs, crumbs, strict=True):
            if v >= 0:
                sent[v] += max(c, 0.0)  # the float crumb goes out with the rest
                remaining[v] = 0.0
                self.node_done(v, now)
            else:
                self.bg_int[b] = bg_sent[b]  # before the crumb: a finished flow adds nothing later
                bg_sent[b] += max(c, 0.0)
                self.bg_finish[b] = now
                if self.bar is not None:
                    self.bar.update(1)
                self.view.now = now
                tp = time.perf_counter()
                self.pol.on_flow_done(self.view, b)
                self.policy_s += time.perf_counter() - tp

    # ------------------------------------------------------------------ event handlers
    # Each takes (now, payload) and returns whether the flow set needs a new allocation.

    def on_compute_done(self, now: float, v: int) -> bool:
        """A compute node's duration is over."""
        self.node_done(v, now)
        return bool(self.new_flows)

    def _policy_event(self, now: float) -> None:
        # before an arrival or a tick the policy sees: the flows moved to now
        self.advance(now)
        self.view.now = now

    def on_job_arrival(self, now: float, k: int) -> bool:
        """Job ``k`` arrives: its source nodes start; the first DL arrival starts the slot grid."""
        self._policy_event(now)
        tp = time.perf_counter()
        self.job_arrived[k] = True
        self.dag_window[0] = min(self.dag_window[0], now)
        if self.slots.origin is None:  # the slot grid starts at the first DL arrival
            self.slots.origin = now
            self.sample_slot(now)
            self.slot_k = 1
            self.next_slot = now + self.slots.slot_s
        lo, hi = int(self.dag.job_ptr[k]), int(self.dag.job_ptr[k + 1])
        for v in range(lo, hi):
            if self.pending_l[v] == 0:
                self.release(v, now)
        self.pol.on_job_arrival(self.view, k)
        self.policy_s += time.perf_counter() - tp
        return True

    def on_bg_arrival(self, now: float, b: int) -> bool:
        """Background flow ``b`` arrives and joins the flows."""
        self._policy_event(now)
        tp = time.perf_counter()
        self.new_flows.append((int(self.bg_src[b]), int(self.bg_dst[b]), -1, -1, b, now, float(self.bg_bytes[b])))
        self.pol.on_flow_arrival(self.view, b)
        self.policy_s += time.perf_counter() - tp
        return True

    def on_tick(self, now: float, _payload: None) -> bool:
        """The policy's periodic tick; the next one is due while anything is left to happen."""
        self._policy_event(now)
        tp = time.perf_counter()
        self.pol.on_tick(self.view)
        if len(self.events) or self.buf.n or self.new_flows:
            self.events.push(now + self.sim.tick_s, _TICK, None)
        self.policy_s += time.perf_counter() - tp
        return True

    # ------------------------------------------------------------------ the end

    def check_finished(self) -> None:
        """Raise if a flow or a job was left behind when nothing was left to happen."""
        if self.buf.n:
            raise RuntimeError(f"policy {self.pol.name!r} left {self.buf.n} flows starved "
                               f"(zero rate, nothing left to wake it) at t={self.clock.now()}")
        if not np.all(self.job_done):
            stuck = self.dag.job_ids[int(np.flatnonzero(~self.job_done)[0])]
            raise RuntimeError(f"job {stuck!r} never finished")

    def raw(self, wall_s: float) -> dict:
        """The run's arrays and counters, as :func:`jitsched.sim.metrics.collect` takes them.

        ``end_s`` is the last job or background flow completion (0 with
        neither), not the clock: a policy's wake-up or tick after the last
        completion moves the clock past it without anything left to finish.
        """
        ends = np.concatenate([self.job_finish, self.bg_finish])
        end_s = float(np.max(ends)) if len(ends) else 0.0
        return dict(
            start=self.start, finish=self.finish, sent=self.sent, job_finish=self.job_finish,
            bg_finish=self.bg_finish, bg_sent=self.bg_sent, bg_src=self.bg_src, bg_dst=self.bg_dst,
            bg_bytes=self.bg_bytes, bg_arr=self.bg_arr, dag_egress_int=self.dag_egress_int,
            dag_window=tuple(self.dag_window), slots=self.slots, wall_s=wall_s, policy_s=self.policy_s,
            n_alloc=self.n_alloc, n_events=self.n_events, max_util=self.max_util, end_s=end_s)


def _last_grid_index(origin: float, step: float, t: float) -> int:
    """The largest ``k`` with ``origin + step * k <= t`` (computed so, as the grid's instants are)."""
    k = max(int((t - origin) // step), 0)
    while origin + step * (k + 1) <= t:
        k += 1
    while k > 0 and origin + step * k > t:
        k -= 1
    return k


def simulate(workload: Workload, policy: Policy | str, **kwargs) -> SimResult:
    """Run one simulation; keyword arguments as for :class:`Simulator`."""
    return Simulator(workload, policy, **kwargs).run()
