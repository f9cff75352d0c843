"""Learned timings of a recurring job: per-node duration statistics that follow drift, and the job they plan with."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from jitsched.dag.model import Compute, Job, Transfer
from jitsched.dag.model import critical_path_s as longest_path_s
from jitsched.errors import ValidationError


@dataclass(frozen=True)
class LearnOptions:
    """How a recurring job's timings are learned from the durations its iterations report.

    Attributes
    ----------
    halflife : float
        Iterations after which an old report weighs half as much (> 0). The
        statistics are a running mean while fewer than ``1 / weight``
        iterations were seen (the declared durations then weigh nothing after
        the first report), an exponentially weighted mean and variance after:
        drift is followed within a few half-lives. With 20 % noise per
        compute the duration-weighted error of the mean is about
        ``0.16 * sqrt(w / (2 - w))`` at weight ``w`` (2.5 % at the default; a running mean of 20 iterations: 3.6 %).
    replan_rtol : float
        The planned-with estimates are replaced (and a re-plan asked for) once
        the learned ones moved by more than this, duration-weighted (>= 0).
    """

    halflife: float = 14.0
    replan_rtol: float = 0.02

    def __post_init__(self) -> None:
        for name, ok, why in (("halflife", lambda v: v > 0, "must be positive"),
                              ("replan_rtol", lambda v: v >= 0, "must be >= 0")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
                raise ValidationError(f"{name}: {why}, got {v!r}")
            object.__setattr__(self, name, float(v))

    @property
    def weight(self) -> float:
        """The EWMA weight of the newest report once warmed up: ``1 - 2 ** (-1 / halflife)``."""
        return 1.0 - 2.0 ** (-1.0 / self.halflife)


class Ewma:
    """Mean and variance of a vector of samples, one sample per iteration, following drift.

    Parameters
    ----------
    prior : ndarray, shape (n,)
        The declared values: the mean until the first sample.
    options : LearnOptions
    """

    def __init__(self, prior: np.ndarray, options: LearnOptions) -> None:
        self.mean = np.array(prior, dtype=np.float64)
        self.var = np.zeros_like(self.mean)
        self.n = 0
        self.w_min = options.weight

    def add(self, x: np.ndarray) -> None:
        """Take one iteration's samples (shape (n,), finite)."""
        self.n += 1
        w = max(1.0 / self.n, self.w_min)
        d = x - self.mean
        self.mean += w * d
        # West's incremental form: exact for the running mean, an EWMA variance after
        self.var = (1.0 - w) * (self.var + w * d * d)

    @property
    def std(self) -> np.ndarray:
        """Standard deviation of the samples (0 before two)."""
        return np.sqrt(self.var)

    def state(self) -> dict:
        """What :meth:`restore` takes back (for the journal)."""
        return {"n": self.n, "mean": self.mean.tobytes(), "var": self.var.tobytes()}

    def restore(self, state: dict) -> None:
        """Take back a :meth:`state` of the same length (ValueError otherwise)."""
        mean = np.frombuffer(state["mean"], dtype=np.float64)
        var = np.frombuffer(state["var"], dtype=np.float64)
        if mean.shape != self.mean.shape or var.shape != self.mean.shape:
            raise ValueError(f"learned state of {mean.size} values for {self.mean.size} nodes")
        self.mean, self.var, self.n = mean.copy(), var.copy(), int(state["n"])


def weighted_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """``sum |estimate - truth| / sum truth``: the relative error of a set of durations,
    weighted by duration (0 when the truth sums to 0 and the estimate matches it)."""
    total = float(np.sum(truth))
    diff = float(np.sum(np.abs(np.asarray(estimate) - np.asarray(truth))))
    if total <= 0:
        return 0.0 if diff == 0 else math.inf
    return diff / total


class TimingModel:
    """What a recurring job's iterations taught: per-compute durations, per-transfer bytes
    and durations, or one scale of the declared durations when only step times come.

    Parameters
    ----------
    job : Job
        The template as declared.
    options : LearnOptions
    """

    def __init__(self, job: Job, options: LearnOptions) -> None:
        self.job = job
        self.options = options
        self.declared = np.array([c.duration_s for c in job.computes], dtype=np.float64)
        self.declared_bytes = np.array([t.bytes for t in job.transfers], dtype=np.float64)
        self.compute = Ewma(self.declared, options)
        self.bytes = Ewma(self.declared_bytes, options)
        self.transfer_s = Ewma(np.zeros(len(job.transfers)), options)
        self.scale = Ewma(np.ones(1), options)  # measured step / declared step
        self.declared_step_s = critical_path_s(job)
        self.error = math.nan  # the last iteration's prediction error (see observe)
        self._planned = (self.declared.copy(), np.zeros_like(self.declared), self.declared_bytes.copy())

    def estimates(self) -> tuple[np.ndarray, np.ndarray]:
        """The learned compute durations: mean and std, seconds, in the template's order."""
        if self.compute.n:
            return self.compute.mean, self.compute.std
        if self.scale.n:
            s = float(self.scale.mean[0])
            return self.declared * s, self.declared * float(self.scale.std[0])
        return self.declared, np.zeros_like(self.declared)

    def observe(self, compute_s: np.ndarray | None = None, step_s: float | None = None,
                transfer_s: np.ndarray | None = None, transfer_bytes: np.ndarray | None = None) -> None:
        """One iteration's measurements (each optional; arrays in the template's order, checked).

        ``error`` becomes the iteration's prediction error before the update:
        the relative difference of its total compute time (or, with only a
        step time, its step time) from what the estimates said.
        """
        if compute_s is not None:
            pred = float(np.sum(self.estimates()[0]))
            total = float(np.sum(compute_s))
            self.error = abs(pred - total) / total if total > 0 else (0.0 if pred == 0 else math.inf)
            self.compute.add(compute_s)
        elif step_s is not None and self.declared_step_s > 0:
            pred = self.declared_step_s * (float(self.scale.mean[0]) if self.scale.n else 1.0)
            self.error = abs(pred - step_s) / step_s if step_s > 0 else (0.0 if pred == 0 else math.inf)
            self.scale.add(np.array([step_s / self.declared_step_s]))
        if transfer_s is not None:
            self.transfer_s.add(transfer_s)
        if transfer_bytes is not None:
            self.bytes.add(transfer_bytes)

    def moved(self) -> bool:
        """Whether the estimates moved more than ``replan_rtol`` from those last planned with."""
        mean, std = self.estimates()
        p_mean, p_std, p_bytes = self._planned
        tol = self.options.replan_rtol
        return (weighted_error(mean, p_mean) > tol or weighted_error(std, p_std) > max(tol, 0.1)
                or weighted_error(self.bytes.mean, p_bytes) > tol)

    def planned(self) -> tuple[np.ndarray, np.ndarray]:
        """The compute estimates a daemon plans the next iteration with (mean and std): the
        learned ones once they moved (:meth:`moved`, then planned with from now on), else
        those planned with before."""
        if self.moved():
            mean, std = self.estimates()
            self._planned = (mean.copy(), std.copy(), self.bytes.mean.copy())
        return self._planned[0], self._planned[1]

    def learned_job(self) -> Job:
        """The template with the learned estimates (computes' ``duration_s`` and ``std_s``,
        transfers' ``bytes``), now the ones planned with (see :meth:`moved`)."""
        mean, std = self.estimates()
        self._planned = (mean.copy(), std.copy(), self.bytes.mean.copy())
        return learned_job(self.job, mean, std, self.bytes.mean)

    def state(self) -> dict:
        """Everything learned so far, for the journal (:meth:`restore` takes it back)."""
        return {"compute": self.compute.state(), "bytes": self.bytes.state(),
                "transfer_s": self.transfer_s.state(), "scale": self.scale.state(),
                "error": None if math.isnan(self.error) else self.error}

    def restore(self, state: dict) -> None:
        """Take back a :meth:`state` of the same template (ValueError/KeyError otherwise)."""
        for name in ("compute", "bytes", "transfer_s", "scale"):
            getattr(self, name).restore(state[name])
        err = state.get("error")
        self.error = math.nan if err is None else float(err)


def learned_job(job: Job, mean: np.ndarray, std: np.ndarray, nbytes: np.ndarray | None = None) -> Job:
    """``job`` with compute ``i``'s duration ``mean[i]`` and std ``std[i]`` (the LAT pass plans
    with ``mean + k_std * std``) and, if given, transfer ``j``'s size ``nbytes[j]``."""
    computes = tuple(Compute(c.id, c.host, m, s)
                     for c, m, s in zip(job.computes, mean.tolist(), std.tolist(), strict=True))
    transfers = job.transfers
    if nbytes is not None:
        transfers = tuple(t if b == t.bytes else Transfer(t.id, t.src, t.dst, b)
                          for t, b in zip(job.transfers, nbytes.tolist(), strict=True))
    return replace(job, computes=computes, transfers=transfers)


def critical_path_s(job: Job) -> float:
    """The job's longest chain of compute durations, seconds (transfers taking no time):
    the step time its declared durations stand for, to scale them by measured step times."""
    took = {c.id: c.duration_s for c in job.computes} | {t.id: 0.0 for t in job.transfers}
    return longest_path_s(took, job.edges)


__all__ = ["Ewma", "LearnOptions", "TimingModel", "critical_path_s", "learned_job", "weighted_error"]
