"""A job run alone in its cluster under the default jit: its isolated schedule and the reservation windows it gives."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from jitsched.dag.model import Cluster, Job, Workload
from jitsched.plan.reserve import Isolated, ReserveOptions, Windows, job_windows
from jitsched.sim.engine import Simulator


def isolated_run(job: Job, cluster: Cluster) -> Isolated:
    """``job`` alone in ``cluster`` from time 0, simulated under the default jit.

    Parameters
    ----------
    job : Job
    cluster : Cluster

    Returns
    -------
    Isolated
        Each transfer's start and finish (in the order of ``job.transfers``) and the JCT.
    """
    res = Simulator(Workload(cluster, (replace(job, arrival_s=0.0),)), "jit").run()
    n_comp = len(job.computes)
    return Isolated(np.asarray(res.node_start_s[n_comp:], dtype=np.float64),
                    np.asarray(res.node_finish_s[n_comp:], dtype=np.float64), float(res.jct_s[0]))


def isolated_windows(job: Job, cluster: Cluster, options: ReserveOptions) -> Windows:
    """The reservation windows of critical job ``job``: its isolated run
    (:func:`isolated_run`) stretched by ``1 + options.eps``
    (:func:`jitsched.plan.reserve.job_windows`).

    Parameters
    ----------
    job : Job
    cluster : Cluster
    options : ReserveOptions

    Returns
    -------
    Windows
    """
    return job_windows(job, cluster, isolated_run(job, cluster), options)


__all__ = ["isolated_run", "isolated_windows"]
