"""Planning workers: one plan from a request (in a thread or a child process, off the GIL)."""

# One module although past 500 lines: the thread and the child process run the
# same functions (run_plan, run_increment, isolate, self_test); the child's half (the
# PlannerProcess handle and its main loop) is the smaller part and would only import
# the rest back.

from __future__ import annotations

import contextlib
import copy
import gc
import math
import os
import pickle
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from multiprocessing.connection import Connection

import numpy as np

import jitsched
from jitsched.config import FULL, INCREMENTAL
from jitsched.daemon.bodies import host_bodies, pack_frames
from jitsched.daemon.capacity import live_cluster
from jitsched.daemon.plans import PlanRequest, PlanResult, merge_schedules, prune_schedule
from jitsched.daemon.reservations import with_reservations
from jitsched.dag.lat import latest_arrival_times
from jitsched.dag.model import (
    TRANSFER,
    Cluster,
    Compute,
    DagArrays,
    Host,
    Job,
    Transfer,
    compile_jobs,
)
from jitsched.plan.planner import shared_cluster
from jitsched.policies.base import DONE, RUNNING, WAITING, FlowSet, Policy, SchedulerView

# A failed full re-solve plans at most this many of its jobs (the newest) alone to find
# the ones to blame: each is a plan of its own, and a failure may be the sum of many jobs.
ISOLATE_MAX = 32
ERROR_CHARS = 500  # of an error in a result, status and log lines


def build_view(req: PlanRequest, cluster: Cluster) -> tuple[SchedulerView, dict[str, int]]:
    """The policy's view of ``req``: its jobs compiled, node states derived from done times.

    Returns the view and a map job id -> job index in ``view.dag``.
    """
    jobs = [j for j, _, _ in req.jobs]
    dag = compile_jobs(jobs, cluster)
    n = dag.n_nodes
    finish = np.full(n, np.nan)
    remaining = np.where(dag.kind == TRANSFER, dag.size, 0.0)
    for k, (job, done, rem) in enumerate(req.jobs):
        base = int(dag.job_ptr[k])
        pos = {nid: base + i for i, nid in enumerate(job.node_ids())}
        for nid, t in done.items():
            finish[pos[nid]] = t
        for nid, b in rem.items():
            remaining[pos[nid]] = b
    done_mask = ~np.isnan(finish)
    remaining[done_mask] = 0.0
    # a node is released when none of its predecessors is unfinished
    owner = np.repeat(np.arange(n), np.diff(dag.pred_ptr))
    blocked = np.bincount(owner[~done_mask[dag.pred_idx]], minlength=n) if n else np.zeros(0, int)
    state = np.where(done_mask, DONE, np.where(blocked > 0, WAITING, RUNNING)).astype(np.int8)
    flows_idx = np.flatnonzero((state == RUNNING) & (dag.kind == TRANSFER))
    neg = np.full(len(flows_idx), -1, dtype=np.int64)
    # announced background flows follow the transfers, each with the bytes its sender last
    # said it has left (the daemon does not see their progress otherwise)
    bg = req.background
    bg_src = np.array([b.src for b in bg], dtype=np.int64)
    bg_dst = np.array([b.dst for b in bg], dtype=np.int64)
    bg_bytes = np.array([b.bytes for b in bg], dtype=np.float64)
    nb = np.full(len(bg), -1, dtype=np.int64)
    flows = FlowSet(
        src=np.r_[dag.src[flows_idx].astype(np.int64), bg_src],
        dst=np.r_[dag.dst[flows_idx].astype(np.int64), bg_dst],
        remaining=np.r_[remaining[flows_idx], np.array([b.left for b in bg], dtype=np.float64)],
        node=np.r_[flows_idx.astype(np.int64), nb],
        job=np.r_[dag.job_of[flows_idx].astype(np.int64), nb], bg=np.r_[neg, np.arange(len(bg))],
        release_s=np.full(len(flows_idx) + len(bg), req.now_s),
    )
    view = SchedulerView(
        cluster=cluster, now=req.now_s, dag=dag, job_arrived=np.ones(dag.n_jobs, dtype=bool),
        job_done=np.zeros(dag.n_jobs, dtype=bool), node_state=state, node_finish=finish,
        remaining=remaining, flows=flows, bg_src=bg_src, bg_dst=bg_dst, bg_bytes=bg_bytes,
        bg_arrival_s=np.array([b.started_s for b in bg], dtype=np.float64),
        bg_ids=tuple(b.name for b in bg),
    )
    return view, {j.id: k for k, j in enumerate(jobs)}


def run_plan(policy: Policy, req: PlanRequest, cluster: Cluster, t0_wall_s: float = 0.0,
             fresh: Callable[[], Policy] | None = None) -> PlanResult:
    """Full re-solve (worker thread): deliver ``req``'s events to ``policy``, ask it for a schedule.

    Every host's body changes (the plan has a new epoch). Never raises: when the
    plan fails, the jobs that cannot be planned even alone (:func:`isolate`)
    are named in ``poisoned`` and the others planned without them; when the
    planner fails its :func:`self_test` too, no job is to blame
    (``planner_broken``) and the result carries the error. ``fresh`` makes
    the unused copies of the policy those take (default: deep copies of
    ``policy``; see :func:`copies_of`).
    """
    t0 = time.perf_counter()
    try:
        return _full_plan(policy, req, cluster, t0_wall_s, t0)
    except Exception as exc:  # noqa: BLE001 - a failed plan must not kill the daemon
        error = describe(exc)
    fresh = fresh or (lambda: copy.deepcopy(policy))
    broken = self_test(fresh, cluster)
    poisoned = isolate(fresh, req, cluster) if req.jobs and not broken else {}
    if poisoned and len(poisoned) < len(req.jobs):
        try:
            res = _full_plan(policy, _without(req, poisoned), cluster, t0_wall_s, t0)
            res.poisoned = poisoned
            return res
        except Exception as exc:  # noqa: BLE001
            error = describe(exc)
    return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons, error, mode=FULL,
                      poisoned=poisoned, planner_broken=bool(broken))


def _full_plan(policy: Policy, req: PlanRequest, cluster: Cluster, t0_wall_s: float,
               t0: float) -> PlanResult:
    """:func:`run_plan`'s plan, raising whatever the policy or the bodies raise."""
    # the policy and the LAT estimates plan on the live capacity; the agents' bodies keep
    # the line rates (their link shapers must not hold the unscheduled traffic back)
    view, kidx = build_view(req, live_cluster(cluster, req.capacity))
    for kind, job_id, node_id in req.events:
        k = kidx.get(job_id)
        if k is None:
            continue
        if kind == "arrival":
            policy.on_job_arrival(view, k)
        elif kind == "node_done":
            policy.on_node_done(view, _node_index(view.dag, k, node_id))
    if "tick" in req.reasons:
        policy.on_tick(view)
    # announced flows alone still take ranks among themselves (jit, Sincronia)
    sched = policy.schedule(view) if view.dag.n_jobs or view.bg_ids else None
    changes_at = policy.schedule_changes_at(view) if sched is not None else math.inf
    sched = with_reservations(sched, req.reserved, cluster)
    new = {job_id for kind, job_id, _ in req.events if kind == "arrival"}
    lats = _lats(view, new, view.cluster)
    solve_s = time.perf_counter() - t0
    ready = time.time()
    res = PlanResult(req.seq, sched, lats, solve_s, req.reasons, mode=FULL,
                     jobs=frozenset(kidx), ready_wall_s=ready, changes_at_s=changes_at)
    _attach_bodies(res, None, cluster, t0_wall_s, req)
    return res


def describe(exc: BaseException) -> str:
    """``"Type: message"`` of a planning failure, at most ``ERROR_CHARS`` characters."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= ERROR_CHARS else f"{text[:ERROR_CHARS]}..."


def _without(req: PlanRequest, gone: dict[str, str] | set[str]) -> PlanRequest:
    return replace(req, jobs=tuple(x for x in req.jobs if x[0].id not in gone),
                   events=tuple(e for e in req.events if e[1] not in gone))


def copies_of(policy: Policy) -> Callable[[], Policy]:
    """A maker of copies of ``policy`` as it is now: call it while the policy is fresh.

    A policy that has planned may hold what cannot be copied (a solver's
    handle); one pickled before it planned always unpickles.
    """
    try:
        blank = pickle.dumps(policy)
    except Exception:  # noqa: BLE001 - an unpicklable policy: copy it when asked
        return lambda: copy.deepcopy(policy)
    return lambda: pickle.loads(blank)


def isolate(fresh: Callable[[], Policy], req: PlanRequest, cluster: Cluster) -> dict[str, str]:
    """The jobs of a failed full re-solve that fail when planned alone, each with its error.

    Each of the newest ``ISOLATE_MAX`` jobs is planned alone on a policy from
    ``fresh()``, started afresh. Empty when no such copy can be made.
    """
    try:
        probe = fresh()
    except Exception:  # noqa: BLE001 - no copy, no probe: nobody is blamed
        return {}
    out = {}
    for job, done, rem in reversed(req.jobs[-ISOLATE_MAX:]):
        solo = replace(req, jobs=((job, done, rem),),
                       events=tuple(e for e in req.events if e[1] == job.id))
        try:
            probe.reset(cluster)
            _full_plan(probe, solo, cluster, 0.0, time.perf_counter())
        except Exception as exc:  # noqa: BLE001 - that is what is being found out
            out[job.id] = describe(exc)
    return out


SELF_TEST_JOB = "jitsched-self-test"


def self_test(fresh: Callable[[], Policy], cluster: Cluster) -> str:
    """Plan one tiny job (a 1 MB transfer between two computes) on a policy from ``fresh()``.

    Returns "" when that works, else the error: the planner itself is broken
    (a kernel that is not built, a policy that cannot plan at all).
    """
    if not len(cluster):  # every host joins later: the kernels are tested on one of a probe's own
        cluster = Cluster((Host("self-test", 1e9, 1e9),))
    names = cluster.names
    src, dst = names[0], names[-1]
    computes = (Compute("c0", src, 0.01), Compute("c1", dst, 0.01))
    if src == dst:  # one host: nothing to transfer
        job = Job(SELF_TEST_JOB, computes, (), (("c0", "c1"),))
    else:
        job = Job(SELF_TEST_JOB, computes, (Transfer("t", src, dst, 1e6),), (("c0", "t"), ("t", "c1")))
    req = PlanRequest(0, 0.0, ((job, {}, {}),), (("arrival", SELF_TEST_JOB, ""),), ("self-test",))
    try:
        probe = fresh()
        probe.reset(cluster)
        _full_plan(probe, req, cluster, 0.0, time.perf_counter())
    except Exception as exc:  # noqa: BLE001 - the answer is the error
        return describe(exc)
    return ""


def run_increment(policy: Policy, req: PlanRequest, cluster: Cluster,
                  t0_wall_s: float = 0.0) -> PlanResult:
    """Incremental plan (worker thread): ``req.jobs`` alone on top of ``req.base``, frozen.

    Flows of ``req.base`` that no longer count (``req.live``) go first and give
    their capacity back. Only the hosts whose flows or leftover changed get new
    bodies, unless the slot grid moved (no base before), when every host does.
    """
    t0 = time.perf_counter()
    added = tuple(j.id for j, _, _ in req.jobs)
    kw = dict(mode=INCREMENTAL, added=added, removed=req.removed, rebase=req.rebase)
    try:
        base, gone_hosts = prune_schedule(req.base, req.live, cluster)
        sched, changed, lats, late, changes_at = base, set(gone_hosts), {}, 0, math.inf
        if req.jobs:
            view, _ = build_view(req, live_cluster(cluster, req.capacity))
            inc = policy.schedule_increment(view, base, req.busy_egress, req.busy_ingress)
            if inc is None:
                return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                                  unsupported=True, **kw)
            changes_at = policy.schedule_changes_at(view)  # the added jobs' own (their aging)
            inc = with_reservations(inc, req.reserved, cluster, keep_epoch=base is not None)
            sched = merge_schedules(base, inc)
            changed.update(h for f in inc.flows for h in (f[2], f[3]))
            late = len(inc.late)
            lats = _lats(view, set(added), shared_cluster(view.cluster, req.busy_egress, req.busy_ingress))
        solve_s = time.perf_counter() - t0
        ready = time.time()
        jobs = (req.covered - req.removed) | frozenset(added)
        res = PlanResult(req.seq, sched, lats, solve_s, req.reasons, jobs=jobs, added_late=late,
                         ready_wall_s=ready, changes_at_s=changes_at, **kw)
        regrid = sched is not None and (req.base is None or sched.epoch_s != req.base.epoch_s)
        # A rebase installs a held full result, whose bodies were never sent: every host's
        # (the agents' table sends only those that differ from what each agent holds).
        # Only the changed ones lost a rebase's reorder wherever no added job went, and
        # lost an announced background flow's rank outright when none was added.
        # New caps (a reservation made or released) go into every host's body.
        _attach_bodies(res, None if regrid or req.rebase or req.caps_changed else changed, cluster, t0_wall_s, req)
    except Exception as exc:  # noqa: BLE001 - a failed plan must not kill the daemon
        return PlanResult(req.seq, None, {}, time.perf_counter() - t0, req.reasons,
                          describe(exc), **kw)
    return res


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off for a burst of allocations that hold no cycles."""
    # Building 10,000 hosts' bodies allocates ~50k dicts and lists that all survive, so the
    # collector ran over and over through young and old objects alike: 0.068 s median to
    # build them with it, 0.028 s without (bodies.host_bodies, 10,000 hosts, this machine).
    # Reference counting still frees everything; a cycle made meanwhile waits for the next
    # collection.
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _attach_bodies(res: PlanResult, hosts: Iterable[int] | None, cluster: Cluster,
                   t0_wall_s: float, req: PlanRequest) -> None:
    """Pack the bodies of ``hosts`` (None: all) and build the flow index into ``res``."""
    t0 = time.perf_counter()
    sched = res.schedule
    slot_s = sched.slot_s if sched is not None else req.slot_s
    with gc_paused():
        res.frames = pack_frames(host_bodies(_unscheduled_kept(sched, cluster, req.capacity), hosts, res.seq,
                                             t0_wall_s, cluster, slot_s, req.incarnation, req.epoch,
                                             caps_into=req.caps_into if req.send_caps else (),
                                             floors_at=req.caps_into if req.held_floor is not None else (),
                                             held_floor=req.held_floor))
    if sched is not None:
        # planned flows only: a ranked one (no rates) has no finish to drift from or
        # to hold back to, and the default jit's 32k ranked flows at 1000 jobs took
        # 19 ms of an increment's 27 to index
        res.flow_index = {(f[0], f[1]): (int(f[4]), len(f[5])) for f in sched.flows if len(f[5])}
    res.bodies_s = time.perf_counter() - t0


def _unscheduled_kept(sched, cluster: Cluster, capacity: tuple[np.ndarray, np.ndarray] | None):
    """``sched`` as its agents get it: a plan on live capacity leaves the unscheduled traffic
    the share it was measured to take (line less live capacity) beside its own leftover."""
    if sched is None or capacity is None:
        return sched
    return replace(sched, leftover_egress=sched.leftover_egress + (cluster.egress_Bps - capacity[0])[:, None],
                   leftover_ingress=sched.leftover_ingress + (cluster.ingress_Bps - capacity[1])[:, None])


def _node_index(dag: DagArrays, k: int, node_id: str) -> int:
    lo, hi = int(dag.job_ptr[k]), int(dag.job_ptr[k + 1])
    return lo + dag.node_ids[lo:hi].index(node_id)


def _lats(view: SchedulerView, new: set[str], cluster: Cluster) -> dict[tuple[str, str], float]:
    """LATs (Eq. 1 estimate on ``cluster``) of the transfers of the jobs ``new``, for the LAT hit rate."""
    if not new:
        return {}
    dag = view.dag
    res = latest_arrival_times(dag, cluster, now=view.now, known_done=view.node_finish,
                               remaining=view.remaining)
    out = {}
    for node in np.flatnonzero(dag.kind == TRANSFER):
        job = dag.job_ids[dag.job_of[node]]
        if job in new:
            out[(job, dag.node_ids[node])] = float(res.lat[node])
    return out


# The child's own start. ``-c`` rather than ``-m``: the package would import this module
# before runpy runs it. The interpreter runs isolated (``-I``: no working directory or
# PYTHON* variables on its path, no user site), and its import path is the daemon's with
# the directory of the daemon's jitsched first: a child that found another jitsched (a
# source checkout in the working directory, without compiled kernels, beside an installed
# one) failed every full re-solve. It says why it cannot start rather than just dying.
_CHILD = """\
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
sys.path[:] = conn.recv()
try:
    from jitsched.daemon.solver import main
except BaseException as exc:
    conn.send(("failed", "", f"cannot import the planner: {type(exc).__name__}: {exc}"))
    sys.exit(1)
sys.exit(main(conn))
"""
# the directory holding the jitsched package this process imported
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(jitsched.__file__)))


def child_path() -> list[str]:
    """The planner child's import path: this process's, with the directory of its jitsched
    first (working-directory entries made absolute)."""
    cwd = os.getcwd()
    rest = [os.path.join(cwd, p) if not os.path.isabs(p) else p for p in sys.path]
    return [_ROOT] + [p for p in rest if p != _ROOT]


class PlannerStartError(RuntimeError):
    """The planner child could not start: it failed to import or to plan its self-test,
    imported another jitsched than the daemon's, or exited."""


class PlannerProcess:
    """:func:`run_plan` in a child Python process.

    A full re-solve of tens of jobs is hundreds of milliseconds of mostly
    Python and numpy work; in a thread of the daemon it holds the GIL so often
    that the socket loop and incremental plans wait for it at every hand-over
    (measured: 2-4x longer submit-to-ack while one runs). The child has its own
    interpreter and its own copy of the policy (pickled at start, so it keeps the
    state full re-solves build up); requests and results travel pickled over a
    socket pair, one request at a time. The child needs a second or two to
    import and plan its :func:`self_test`; :meth:`ready` says when it can take
    requests, or raises :class:`PlannerStartError` saying why it never will.

    Parameters
    ----------
    policy : Policy
    cluster : Cluster
    t0_wall_s : float
        The daemon clock's wall-clock origin (for agent epochs).
    """

    def __init__(self, policy: Policy, cluster: Cluster, t0_wall_s: float) -> None:
        self._init = (policy, cluster, t0_wall_s)
        self._conn: Connection | None = None
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self.jitsched_file = ""  # the jitsched the child imported, once it said
        self._jobs: dict[str, Job] = {}  # the jobs the child holds, by id (see solve)

    def start(self) -> PlannerProcess:
        """Spawn the child (:func:`main` in an isolated interpreter) and hand it the policy.

        Raises
        ------
        OSError, pickle.PicklingError
            If the child cannot be started or the policy cannot be sent.
        PlannerStartError
            If the child said why it cannot start before it took the policy.
        """
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _CHILD, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            self._conn.send(child_path())
            self._conn.send(self._init)
        except OSError:
            # it exited before reading the policy: say why, if it did
            why = self._said()
            self.close()
            if why:
                raise PlannerStartError(why) from None
            raise
        except BaseException:
            self.close()
            raise
        return self

    def _said(self) -> str:
        """What a child that gave up said (empty if nothing)."""
        try:
            if self._conn is not None and self._conn.poll(1.0):
                return str(self._conn.recv()[2])
        except (OSError, EOFError, IndexError, TypeError):
            pass
        return ""

    @property
    def pid(self) -> int | None:
        """The child's process id (None once closed)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def started(self) -> bool:
        """Whether the child has said it takes requests (as last seen by :meth:`ready`)."""
        return self._ready

    def ready(self) -> bool:
        """Whether the child has started, passed its self-test and takes requests (never blocks).

        Raises
        ------
        PlannerStartError
            If the child cannot plan: its import or self-test failed, it
            imported another jitsched than this process, or it exited.
        """
        if self._ready or self._conn is None:
            return self._ready
        try:
            if not self._conn.poll(0):
                return False
            kind, path, error = self._conn.recv()
        except (EOFError, OSError):
            code = self._proc.poll() if self._proc is not None else None
            raise PlannerStartError(f"the planner process exited (code {code}) before it was ready") from None
        self.jitsched_file = path
        if kind != "ready":
            raise PlannerStartError(error)
        if os.path.realpath(path) != os.path.realpath(jitsched.__file__):
            raise PlannerStartError(f"the planner process imported {path}, the daemon {jitsched.__file__}")
        self._ready = True
        return True

    def solve(self, req: PlanRequest, timeout_s: float = math.inf) -> PlanResult:
        """Run one full re-solve in the child (blocks; the GIL is free meanwhile).

        Raises
        ------
        OSError, EOFError
            If the child died.
        TimeoutError
            If it did not answer within ``timeout_s`` seconds (stopped, or stuck).
        """
        if self._conn is None:
            raise EOFError("the planner process is not running")
        # A job the child already holds travels as its id: pickling 1000 VGG16 jobs took
        # 0.17 s (3.9 MB) in this thread, GIL held, for every joint re-solve at that size,
        # and an increment running meanwhile waited for it. Jobs are frozen, so the
        # object sent last time is the job; a new object under a known id (a
        # resubmission) travels whole. The child keeps the jobs of the last request.
        sent = self._jobs
        jobs = tuple((job.id if sent.get(job.id) is job else job, done, left) for job, done, left in req.jobs)
        self._conn.send(replace(req, jobs=jobs))
        self._jobs = {job.id: job for job, _, _ in req.jobs}
        deadline = time.monotonic() + timeout_s
        while not self._conn.poll(min(1.0, max(deadline - time.monotonic(), 0.0))):
            code = self._proc.poll() if self._proc is not None else None
            if code is not None:
                raise EOFError(f"the planner process exited (code {code})")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the planner process answered no re-solve within {timeout_s:g} s")
        return self._conn.recv()

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the child to exit, then reap it (killed if it does not exit in time, and at
        once if it has not said it is ready: it is still importing or planning its
        self-test, holds nothing, and would read the request to exit only after that,
        1.1 s of a daemon's stop on a 2-core machine)."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            if not self._ready:
                self._proc.kill()
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def main(conn: Connection) -> int:
    """The child, its import path set: receive (policy, cluster, t0), plan the self-test and
    say ``("ready"|"failed", jitsched file, error)``, then answer requests until None or EOF."""
    try:
        try:
            policy, cluster, t0_wall_s = conn.recv()
        except (EOFError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a policy class this interpreter cannot import
            conn.send(("failed", jitsched.__file__, f"cannot take the policy: {describe(exc)}"))
            return 1
        fresh = copies_of(policy)
        error = self_test(fresh, cluster)
        conn.send(("failed" if error else "ready", jitsched.__file__, error and f"self-test: {error}"))
        if error:
            return 1
        jobs: dict[str, Job] = {}  # the last request's jobs: the parent sends known ones as ids
        while True:
            req = conn.recv()
            if req is None:
                return 0
            full = tuple((jobs[j] if isinstance(j, str) else j, done, left) for j, done, left in req.jobs)
            jobs = {job.id: job for job, _, _ in full}
            conn.send(run_plan(policy, replace(req, jobs=full), req.cluster or cluster, t0_wall_s=t0_wall_s,
                               fresh=fresh))
    except (EOFError, OSError):  # the daemon went away
        return 0
    finally:
        conn.close()
