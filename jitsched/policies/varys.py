"""Varys (SIGCOMM 2014): smallest-effective-bottleneck-first coflow order, MADD rates, work-conserving."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from jitsched.optspec import check_flag, option
from jitsched.plan.alloc import priority_greedy
from jitsched.policies.base import register_policy
from jitsched.policies.sincronia import SincroniaOptions, SincroniaPolicy


def effective_bottleneck(load: np.ndarray) -> np.ndarray:
    """Each coflow's effective bottleneck: its largest load on any port (seconds of port time).

    Parameters
    ----------
    load : ndarray, shape (C, P)

    Returns
    -------
    ndarray, shape (C,)
    """
    return load.max(axis=1, initial=0.0)


def madd_rates(src: np.ndarray, dst: np.ndarray, remaining: np.ndarray, group: np.ndarray, n_groups: int,
               cap_e: np.ndarray, cap_i: np.ndarray) -> np.ndarray:
    """Minimum-allocation-for-desired-duration rates, coflow by coflow in order.

    Coflow ``g`` (``group == g``; 0 first) gets, on what earlier ones left,
    the rates that make all its flows end together at its effective
    bottleneck on that capacity: ``remaining / gamma``. A coflow with a flow
    whose port has nothing left gets nothing (it waits, as in Varys).

    Parameters
    ----------
    src, dst, group : ndarray of int, shape (F,)
    remaining : ndarray, shape (F,)
        Bytes.
    n_groups : int
    cap_e, cap_i : ndarray, shape (H,)
        Free capacity per host, bytes/s.

    Returns
    -------
    ndarray, shape (F,)
        Bytes/s.
    """
    free_e, free_i = cap_e.astype(float).copy(), cap_i.astype(float).copy()
    rate = np.zeros(len(src))
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(n_groups + 1))
    h = len(cap_e)
    for g in range(n_groups):
        idx = order[bounds[g]:bounds[g + 1]]
        if not len(idx):
            continue
        s, d, r = src[idx], dst[idx], remaining[idx]
        load_e = np.bincount(s, weights=r, minlength=h)
        load_i = np.bincount(d, weights=r, minlength=h)
        used_e, used_i = load_e > 0, load_i > 0
        if (free_e[used_e] <= 0).any() or (free_i[used_i] <= 0).any():
            continue
        gamma = max(float((load_e[used_e] / free_e[used_e]).max(initial=0.0)),
                    float((load_i[used_i] / free_i[used_i]).max(initial=0.0)))
        if gamma <= 0:
            continue
        x = r / gamma
        rate[idx] = x
        free_e -= np.bincount(s, weights=x, minlength=h)
        free_i -= np.bincount(d, weights=x, minlength=h)
        np.maximum(free_e, 0.0, out=free_e)
        np.maximum(free_i, 0.0, out=free_i)
    return rate


@dataclass(frozen=True)
class VarysOptions(SincroniaOptions):
    """:class:`VarysPolicy`'s options: Sincronia's slot length, background and floor (the
    order is always recomputed at coflow arrivals and completions), and whether the
    rates inside the order are MADD's."""

    recompute: str = field(default="events", init=False)
    madd: bool = option(True, "MADD rates inside the coflow order (false: strict priority in it, as "
                              "a daemon's agents enforce the order)")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "madd", check_flag(self, "madd"))


@register_policy
class VarysPolicy(SincroniaPolicy):
    """Coflows (all transfers of one DAG job; each background flow alone) in smallest-effective-
    bottleneck-first order, MADD rates, then the spare capacity handed out in that order.

    The order is computed from the coflows' unfinished bytes at arrivals and
    completions (as Sincronia's ``recompute="events"``); the rates at every
    allocation, MADD on the flows that may send now, then a greedy pass in
    coflow order over what MADD left (work conservation, Varys's backfilling).
    A daemon's agents get the order as ranks (MADD's equal finishing inside a
    coflow is not enforced there); ``madd`` false simulates that.

    Parameters
    ----------
    options : VarysOptions, optional
        None: the defaults. ``slot_s``: slot length of the schedules a daemon
        asks for (ranks only), seconds; ``background`` and ``bg_floor`` as
        :class:`jitsched.policies.sincronia.SincroniaPolicy`'s (``last``:
        background flows after every job, as the testbed's agents put the
        files the daemon does not know); ``madd``: MADD rates (default) or
        strict priority in the order.
    """

    name = "varys"
    role = "baseline"
    role_rank = 2
    Options = VarysOptions

    def __init__(self, options: VarysOptions | None = None) -> None:
        super().__init__(options)
        self.madd = self.options.madd

    def _order(self, load: np.ndarray) -> np.ndarray:
        return np.argsort(effective_bottleneck(load), kind="stable")

    def _rates(self, f, rank: np.ndarray, order: np.ndarray, cap_e: np.ndarray, cap_i: np.ndarray) -> np.ndarray:
        """MADD rates coflow by coflow in SEBF order, then spare capacity greedily in the same
        order (bytes/s); with ``madd`` false, strict priority in that order."""
        if not self.madd:
            return super()._rates(f, rank, order, cap_e, cap_i)
        # dense groups in rank order (flows that arrived since the ordering share the last)
        _, group = np.unique(rank, return_inverse=True)
        got = madd_rates(f.src, f.dst, f.remaining, group, int(group.max()) + 1, cap_e, cap_i)
        left_e = np.maximum(cap_e - np.bincount(f.src, weights=got, minlength=len(cap_e)), 0.0)
        left_i = np.maximum(cap_i - np.bincount(f.dst, weights=got, minlength=len(cap_i)), 0.0)
        return got + priority_greedy(order, f.src, f.dst, left_e, left_i)

    def ranked_options(self) -> dict:
        # the agents get the order as ranks, not MADD's rates
        return {"madd": False}


__all__ = ["VarysOptions", "VarysPolicy", "effective_bottleneck", "madd_rates"]
