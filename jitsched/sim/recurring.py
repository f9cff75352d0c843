"""Recurring jobs in the simulator: a DAG re-run N times back to back, planned with declared, learned or exact timings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from jitsched.dag.model import COMPUTE, Background, Cluster, Job, Workload
from jitsched.errors import ValidationError
from jitsched.plan.learn import LearnOptions, TimingModel, learned_job, weighted_error
from jitsched.policies.base import Policy
from jitsched.sim.engine import Simulator

# What the policy is told an iteration's computes take: the template's declared
# durations throughout, what earlier iterations taught (jitsched.plan.learn), or the truth.
ESTIMATES = ("declared", "learned", "oracle")


@dataclass(frozen=True)
class RecurringJob:
    """A job of ``iterations`` runs of ``template`` (its declared durations), starting at
    ``start_s``; its computes really take ``truth_s`` (seconds, in the template's compute
    order; default: as declared)."""

    template: Job
    iterations: int
    truth_s: tuple[float, ...] | None = None
    start_s: float = 0.0


@dataclass
class RecurringResult:
    """Per recurring job: each iteration's time (arrival to last node, seconds) and the
    duration-weighted error of the estimates it was planned with against the truth
    (``estimate_error[i]``: after ``i`` iterations were measured)."""

    ids: list[str]
    iteration_s: list[np.ndarray]
    estimate_error: list[np.ndarray]
    estimates: str
    policy: str

    def mean_iteration_s(self, skip: int = 0) -> float:
        """Mean iteration time over every job's iterations after the first ``skip``."""
        got = np.concatenate([x[skip:] for x in self.iteration_s]) if self.iteration_s else np.zeros(0)
        return float(got.mean()) if len(got) else float("nan")

    def iterations_to(self, rtol: float) -> list[int | None]:
        """Per job, how many iterations were measured before its estimates came within
        ``rtol`` of the truth and stayed there (0: from the start; None: never)."""
        out: list[int | None] = []
        for err in self.estimate_error:
            bad = np.flatnonzero(err > rtol)
            if not len(bad):
                out.append(0)
            else:
                out.append(int(bad[-1]) + 1 if bad[-1] + 1 < len(err) else None)
        return out


def simulate_recurring(cluster: Cluster, jobs: Sequence[RecurringJob], policy: Policy | str, *,
                       estimates: str = "learned", learn: LearnOptions | None = None,
                       compute_noise: float = 0.0, seed: int = 0,
                       policy_options: dict | None = None,
                       background: Sequence[Background] = ()) -> RecurringResult:
    """Simulate recurring jobs side by side, each iteration arriving when the one before ends.

    Parameters
    ----------
    cluster : Cluster
    jobs : sequence of RecurringJob
    policy : Policy or str
    estimates : {"declared", "learned", "oracle"}
        What the policy is told each iteration's computes take (:data:`ESTIMATES`):
        ``learned`` starts from the declared durations and, after each iteration,
        plans the next with what the iterations so far measured (mean and std,
        :class:`jitsched.plan.learn.TimingModel`) once it moved more than
        ``learn.replan_rtol`` from what was planned with, as a daemon does.
    learn : LearnOptions, optional
    compute_noise : float
        Relative standard deviation of every compute's run time around its truth.
    seed : int
    policy_options : dict, optional
    background : sequence of Background
        Flows outside every DAG sharing the cluster meanwhile.

    Returns
    -------
    RecurringResult
    """
    if estimates not in ESTIMATES:
        raise ValidationError(f"estimates: expected one of {ESTIMATES}, got {estimates!r}")
    learn = learn or LearnOptions()
    unrolled: list[Job] = []
    follows: list[int] = []
    truth_parts: list[np.ndarray] = []
    owner: list[int] = []  # unrolled job -> recurring job
    truths: list[np.ndarray] = []
    for r, rj in enumerate(jobs):
        if rj.iterations < 1:
            raise ValidationError(f"jobs[{r}].iterations: must be >= 1, got {rj.iterations!r}")
        t = rj.template
        declared = np.array([c.duration_s for c in t.computes], dtype=np.float64)
        truth = declared if rj.truth_s is None else np.asarray(rj.truth_s, dtype=np.float64)
        if truth.shape != declared.shape or not np.all(truth >= 0):
            raise ValidationError(f"jobs[{r}].truth_s: expected {len(declared)} durations >= 0")
        truths.append(truth)
        node_truth = np.r_[truth, np.zeros(len(t.transfers))]
        for i in range(rj.iterations):
            follows.append(len(unrolled) - 1 if i else -1)
            owner.append(r)
            job = t if estimates != "oracle" else learned_job(t, truth, np.zeros_like(truth))
            unrolled.append(Job(f"{t.id}#{i}", job.computes, t.transfers, t.edges, rj.start_s,
                                t.priority, t.model, t.job_class))
            truth_parts.append(node_truth)
    models = [TimingModel(rj.template, learn) for rj in jobs]

    sim: Simulator | None = None

    def done(k: int, now: float, took: np.ndarray) -> None:
        r = owner[k]
        dag = sim.dag
        nc = len(jobs[r].template.computes)
        if estimates == "learned":
            models[r].observe(compute_s=took[:nc])
        nxt = k + 1
        if nxt < len(owner) and owner[nxt] == r and estimates == "learned":
            mean, std = models[r].planned()  # as a daemon: moved past replan_rtol, or as before
            lo = int(dag.job_ptr[nxt])
            comp = dag.kind[lo:lo + nc] == COMPUTE
            if not comp.all():
                raise RuntimeError("a template's computes are not first in its compiled job")
            dag.duration[lo:lo + nc] = mean
            dag.std[lo:lo + nc] = std

    wl = Workload(cluster, tuple(unrolled), tuple(background))
    sim = Simulator(wl, policy, seed=seed, compute_noise=compute_noise, policy_options=policy_options,
                    follows=follows, true_duration_s=np.concatenate(truth_parts) if truth_parts else None,
                    on_job_done=done)
    res = sim.run()
    dag = sim.dag
    its: list[list[float]] = [[] for _ in jobs]
    errs: list[list[float]] = [[] for _ in jobs]
    for k in range(dag.n_jobs):
        r = owner[k]
        its[r].append(float(res.jct_s[k]))
        lo = int(dag.job_ptr[k])
        nc = len(jobs[r].template.computes)
        # each iteration's estimates were written before it arrived and kept since
        errs[r].append(weighted_error(dag.duration[lo:lo + nc], truths[r]))
    return RecurringResult([rj.template.id for rj in jobs], [np.array(x) for x in its],
                           [np.array(x) for x in errs], estimates,
                           sim.policy.name)


__all__ = ["ESTIMATES", "RecurringJob", "RecurringResult", "simulate_recurring"]
