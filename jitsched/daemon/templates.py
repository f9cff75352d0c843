"""Recurring jobs in the daemon: templates registered once, their iterations counted and timed, their timings learned."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import msgpack
import numpy as np

from jitsched.config import DaemonConfig
from jitsched.daemon.jobs import JobState
from jitsched.daemon.limits import check_job
from jitsched.daemon.reject import Reject
from jitsched.plan.learn import LearnOptions, TimingModel
from jitsched.protocol import ErrorCode

# Iteration times kept per template for status (mean and p95 over the newest).
KEEP_TIMES = 1000
# A recurring job's iteration count and learned statistics go to the journal every this
# many iterations, whenever the estimates planned with change, and at a clean stop. A
# daemon killed in between resumes with at most this many iterations' count and learning
# lost; the job's next report sets the count again. Writing the count every iteration
# cost a replica on etcd one transaction per iteration on its loop: 100 jobs at 5
# iterations/s each got 258 iterations/s through, ranks p50 368 ms (`python -m
# bench.bench_recurring --jobs 100 --etcd --json`; 500/s and 0.68 ms without etcd).
JOURNAL_EVERY = 20
KEEP_ENDED = 10000  # ids of pruned recurring jobs remembered (see TemplateBook.ended)
MAX_ITERATION = 2 ** 62  # an iteration number the journal (sqlite's int64) can hold


@dataclass
class Template:
    """One registered recurring job: what its iterations taught and how long they took.

    ``iterations`` is the highest iteration number reported (iterations count from 1);
    ``last_s`` the daemon-clock instant of the last report (or of registration);
    ``times`` the newest iteration times, seconds.
    """

    model: TimingModel
    counts: tuple[dict[int, int], dict[int, int]]  # per host, the template's transfers out / in
    iterations: int = 0
    last_s: float = 0.0
    times: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP_TIMES))
    journalled_at: int = 0  # the iteration whose statistics the journal holds
    over_limits: int = 0  # learned estimates not planned with: past a submission's limits

    def summary(self) -> dict:
        """The template's entry in a job's status: iterations, their mean and p95 time, and
        the learned estimates' current error (the last iteration's, see TimingModel.observe)."""
        t = np.fromiter(self.times, dtype=np.float64, count=len(self.times))
        err = self.model.error
        return {"iterations": self.iterations,
                "iteration_s_mean": float(t.mean()) if len(t) else None,
                "iteration_s_p95": float(np.percentile(t, 95)) if len(t) else None,
                "estimate_error": None if math.isnan(err) else err,
                "learned_from": "computes" if self.model.compute.n else ("steps" if self.model.scale.n else ""),
                "estimates_over_limits": self.over_limits}

    def state(self) -> bytes:
        """The learned statistics and the newest iteration times, packed for the journal."""
        return msgpack.packb({"model": self.model.state(), "times": list(self.times)}, use_bin_type=True)


def _vector(body: dict, key: str, n: int, limit: float, unit: str) -> np.ndarray | Reject | None:
    """``body[key]`` as n finite numbers within [0, limit], or a Reject naming the first bad one."""
    val = body.get(key)
    if val is None:
        return None
    if len(val) != n:
        return Reject(ErrorCode.INVALID_BODY, f"body.{key}: {len(val)} values for the template's {n}")
    if not set(map(type, val)) <= _NUMBERS:  # one pass in C: a ResNet152's 1507 values in ~20 us
        i = next(i for i, v in enumerate(val) if type(v) not in _NUMBERS)
        return Reject(ErrorCode.INVALID_BODY, f"body.{key}[{i}]: expected a number")
    x = np.array(val, dtype=np.float64)
    bad = ~np.isfinite(x) | (x < 0) | (x > limit)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        why = "not finite" if not math.isfinite(x[i]) else ("negative" if x[i] < 0 else
                                                             f"over the limit of {limit:g} {unit}")
        return Reject(ErrorCode.INVALID_BODY, f"body.{key}[{i}]: {x[i]!r} is {why}")
    return x


_NUMBERS = frozenset((int, float))  # msgpack's numbers (a bool is no duration)


class TemplateBook:
    """Every recurring job's template, by job id; the registry holds the job itself.

    A template is a job that stays running across its iterations: the plan in
    force keeps its transfers ranked, so an iteration that changes nothing the
    plan depends on costs a check and a count (no admission, no parse, no
    plan). With ``ranks_only`` (the policy's schedule is ranks, which neither
    durations nor time move: the default ``jit``) only learned bytes ask for a
    re-plan; otherwise every iteration does (a timed plan starts anew) and the
    learned durations go with it.

    Parameters
    ----------
    config : DaemonConfig
    options : LearnOptions, optional
    """

    def __init__(self, config: DaemonConfig, options: LearnOptions | None = None) -> None:
        self.config = config
        self.options = options or LearnOptions()
        self.templates: dict[str, Template] = {}
        self.ranks_only = False  # the daemon sets it from its policy (Policy.ranks_only)
        # templates whose learned estimates moved since their job was last rebuilt: rebuilt
        # when a plan takes them (refresh), not on every iteration (1.3 ms for a ResNet152)
        self.stale: set[str] = set()
        # recurring jobs that ended and left the registry since this daemon started (the
        # newest KEEP_ENDED): an iteration of one is job_ended, not unknown_job (which has
        # its trainer register the job again, behind the operator who ended it)
        self.ended: dict[str, None] = {}

    def register(self, js: JobState, now: float) -> Template:
        """``js`` (just admitted) is a recurring job's template."""
        t = Template(TimingModel(js.job, self.options), (dict(js.out_left), dict(js.in_left)), last_s=now)
        self.templates[js.job.id] = t
        self.ended.pop(js.job.id, None)
        return t

    def restore(self, js: JobState, iterations: int, blob: bytes | None, now: float) -> Template:
        """A journalled template back, with its count and what it had learned (if the
        statistics fit its job; else it learns anew)."""
        t = self.register(js, now)
        t.iterations = t.journalled_at = iterations
        if blob:
            try:
                got = msgpack.unpackb(blob, raw=False)
                t.model.restore(got["model"])
                t.times.extend(float(x) for x in got.get("times", ()))
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                t.model = TimingModel(js.job, self.options)
        if t.model.compute.n or t.model.scale.n or t.model.bytes.n:
            self._adopt(js, t)
        return t

    def get(self, job_id: str) -> Template | None:
        """The template of job ``job_id``, None if it is no recurring job."""
        return self.templates.get(job_id)

    def forget(self, job_id: str, ended: bool = False) -> None:
        """The job left the registry (``ended``: pruned after it ended)."""
        if self.templates.pop(job_id, None) is not None and ended:
            self.ended.pop(job_id, None)
            self.ended[job_id] = None
            while len(self.ended) > KEEP_ENDED:
                del self.ended[next(iter(self.ended))]
        self.stale.discard(job_id)

    def refresh(self, js: JobState) -> None:
        """``js``'s job becomes its template with the learned estimates (see :attr:`stale`)."""
        t = self.templates.get(js.job.id)
        self.stale.discard(js.job.id)
        if t is not None:
            self._adopt(js, t)

    def _adopt(self, js: JobState, t: Template) -> None:
        # the learned estimates are planned with only within the limits a submission is held
        # to ([limits] max_compute_s, max_transfer_bytes, max_plan_slots): reported iterations
        # cannot give the planner a job it would refuse (the job keeps its last estimates)
        learned = t.model.learned_job()
        if check_job(learned, self.config) is None:
            js.job = learned
        else:
            t.over_limits += 1

    def iteration(self, js: JobState, t: Template, body: dict, now: float) -> tuple[bool, bool] | Reject:
        """Take iteration ``body["n"]``'s report; returns (counted, replan) or a Reject.

        ``counted`` is False for a repeat (an iteration already counted: a
        resend); ``replan`` says a re-solve is due (the estimates planned with
        changed in a way the plan depends on, or the plan is timed).
        """
        n = body["n"]
        if not 1 <= n <= MAX_ITERATION:
            return Reject(ErrorCode.INVALID_BODY, f"body.n: iterations count from 1 to {MAX_ITERATION}, got {n}")
        if n <= t.iterations:
            return False, False
        cfg = self.config
        job = t.model.job
        got = {}
        for key, size, limit, unit in (("compute_s", len(job.computes), cfg.max_compute_s, "s"),
                                       ("transfer_s", len(job.transfers), cfg.max_compute_s, "s"),
                                       ("bytes", len(job.transfers), cfg.max_transfer_bytes, "bytes")):
            x = _vector(body, key, size, limit, unit)
            if isinstance(x, Reject):
                return x
            got[key] = x
        step = body.get("step_s")
        if step is not None:
            step_limit = cfg.max_compute_s * max(1, len(job.computes))
            if not (math.isfinite(step) and 0 <= step <= step_limit):
                return Reject(ErrorCode.INVALID_BODY, f"body.step_s: {step!r} is not a time within "
                              f"[0, {step_limit:g}] s")
        t.model.observe(compute_s=got["compute_s"], step_s=step, transfer_s=got["transfer_s"],
                        transfer_bytes=got["bytes"])
        # timed by the daemon: the gap since the last report, over the iterations it spans
        t.times.append(float(step) if step is not None else (now - t.last_s) / (n - t.iterations))
        t.iterations = n
        t.last_s = now
        replan = not self.ranks_only
        if t.model.moved():
            self.stale.add(js.job.id)
            replan = replan or got["bytes"] is not None
        return True, replan

    def reset_progress(self, js: JobState, t: Template) -> bool:
        """The next iteration starts: ``js``'s per-node progress goes; returns whether it had any
        (then its transfers must be listed again: a re-solve)."""
        if not js.done and not js.started:
            return False
        js.done, js.started, js.measured_s = {}, {}, {}
        js.out_left, js.in_left = dict(t.counts[0]), dict(t.counts[1])
        return True


__all__ = ["JOURNAL_EVERY", "KEEP_TIMES", "Template", "TemplateBook"]
