"""The scheduling-policy interface shared by the simulator and the daemon, and its registry."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np

from jitsched.dag.model import Cluster, DagArrays

# Node states in SchedulerView.node_state.
WAITING = 0  # some predecessor unfinished
RUNNING = 1  # released: a transfer may send, a compute is executing
DONE = 2


@dataclass
class FlowSet:
    """The flows that may send now (released, unfinished), shape (n_flows,) each.

    ``node`` is the DAG node index of a job transfer (-1 for background flows),
    ``job`` its job index (-1 for background), ``bg`` the background index
    (-1 for job transfers). ``remaining`` is in bytes, ``release_s`` in seconds.

    ``checked`` is the owner's promise that the arrays are contiguous (int64
    indices, float64 values), of one shape, with hosts within the view's
    cluster, nodes within its DAG (each transfer's ``job``, ``src`` and
    ``dst`` its node's) and background indices within its background arrays,
    and that the cluster's capacities are finite: policies may then skip
    per-allocation passes that check it (the simulator's own buffers are; a
    daemon's flows need not be).
    """

    src: np.ndarray
    dst: np.ndarray
    remaining: np.ndarray
    node: np.ndarray
    job: np.ndarray
    bg: np.ndarray
    release_s: np.ndarray
    checked: bool = False

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def empty(cls) -> FlowSet:
        i = np.zeros(0, dtype=np.int64)
        f = np.zeros(0)
        return cls(i, i, f, i, i, i, f)


@dataclass
class SchedulerView:
    """What a policy may read: the clock owner's state at one instant.

    The simulator and the daemon both build it; policies never mutate it.

    Attributes
    ----------
    cluster : Cluster
    now : float
        Seconds on the owner's clock (virtual or wall).
    dag : DagArrays
        Every job known so far (arrived or not; see ``job_arrived``).
    job_arrived, job_done : ndarray of bool, shape (n_jobs,)
    node_state : ndarray of int8, shape (n_nodes,)
        ``WAITING``, ``RUNNING`` or ``DONE``.
    node_finish : ndarray, shape (n_nodes,)
        Finish time of done nodes, NaN otherwise (seconds).
    remaining : ndarray, shape (n_nodes,)
        Bytes each transfer still has to send (0 for computes and done transfers).
    flows : FlowSet
        The flows that may send now, job transfers and background flows.
    bg_src, bg_dst, bg_bytes, bg_arrival_s : ndarray, shape (n_background,)
        All background flows (arrived or not).
    bg_ids : tuple of str
        Names of the background flows, in ``bg_*`` order, where the owner
        knows them (a daemon's announced flows; empty in the simulator):
        schedules list them as ``(BACKGROUND_JOB, name)``.
    virtual_time : bool
        ``now`` is a simulated clock: decisions must not depend on wall time
        (e.g. solver time limits), or the same run gives different results on
        different machines.
    """

    cluster: Cluster
    now: float
    dag: DagArrays
    job_arrived: np.ndarray
    job_done: np.ndarray
    node_state: np.ndarray
    node_finish: np.ndarray
    remaining: np.ndarray
    flows: FlowSet
    bg_src: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bg_dst: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    bg_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    bg_arrival_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    virtual_time: bool = False
    bg_ids: tuple[str, ...] = ()


@dataclass
class Allocation:
    """Rates for ``view.flows`` (bytes/s, same order), valid until ``valid_until_s``.

    ``valid_until_s`` is when the policy wants to be asked again even if no
    flow or node finishes (e.g. the next slot boundary of a plan); ``inf`` if never.
    """

    rates: np.ndarray
    valid_until_s: float = float("inf")


@dataclass
class SlotSchedule:
    """A time-slotted schedule for the daemon to push to host agents.

    Attributes
    ----------
    epoch_s : float
        Start of slot 0 on the owner's clock, seconds.
    slot_s : float
        Slot length, seconds.
    flows : list of (job_id, transfer_id, src_host_index, dst_host_index, start_slot, rates)
        ``rates`` in bytes/s for slots ``start_slot`` onwards.
    leftover_egress, leftover_ingress : ndarray, shape (n_hosts, n_slots)
        Bytes/s left for unscheduled traffic per host and slot.
    late : list of dict
        Planned LAT misses ``{"job", "transfer", "lateness_s"}``.
    solve_s : float
        Planner time, seconds.
    prio : dict of (job_id, transfer_id) -> int
        Strict-priority rank of a flow among its source host's (0 first). A
        ranked flow is work-conserving: it borrows whatever its port has
        spare in rank order, and stays listed (at its floor) past its rates;
        background traffic borrows after every ranked flow. Empty: rates only.
    """

    epoch_s: float
    slot_s: float
    flows: list[tuple[str, str, int, int, int, np.ndarray]]
    leftover_egress: np.ndarray
    leftover_ingress: np.ndarray
    late: list[dict] = field(default_factory=list)
    solve_s: float = 0.0
    prio: dict[tuple[str, str], int] = field(default_factory=dict)

    def __reduce__(self):
        # Pickled by columns: a joint re-solve's schedule at 1000 VGG16 jobs (32k flows, a
        # numpy array each) took 0.21 s to pickle in the planner process and 0.20 s to
        # load in the daemon, GIL held, per re-solve; as columns 0.04 s and 0.025 s.
        f = self.flows
        n = len(f)
        ints = np.array([(x[2], x[3], x[4]) for x in f], dtype=np.int64).reshape(n, 3)
        lens = np.fromiter((len(x[5]) for x in f), dtype=np.int64, count=n)
        rates = (np.concatenate([np.asarray(x[5], dtype=np.float64).ravel() for x in f])
                 if n else np.zeros(0))
        prio = dict(self.prio)
        ranks = np.fromiter((prio.pop((x[0], x[1]), _NO_RANK) for x in f), dtype=np.int64, count=n)
        return (_schedule_from_columns,
                (self.epoch_s, self.slot_s, [x[0] for x in f], [x[1] for x in f], ints, lens, rates,
                 ranks, prio, self.leftover_egress, self.leftover_ingress, self.late, self.solve_s))


_NO_RANK = np.iinfo(np.int64).min  # a flow without a rank, in SlotSchedule's pickled columns


def _schedule_from_columns(epoch_s, slot_s, jobs, tids, ints, lens, rates, ranks, prio,
                           leftover_egress, leftover_ingress, late, solve_s) -> SlotSchedule:
    """The inverse of :meth:`SlotSchedule.__reduce__` (``prio``: ranks of keys that are no flow)."""
    ends = np.cumsum(lens).tolist()
    starts = [0, *ends[:-1]] if ends else []
    src, dst, start = ints.T.tolist()
    # flows without rates (every ranked one of the default jit) share one empty array:
    # a slice each was 6 of the 11 ms this takes at 32k flows
    none = np.zeros(0)
    flows = [(j, t, a, b, k, rates[lo:hi] if hi > lo else none)
             for j, t, a, b, k, lo, hi in zip(jobs, tids, src, dst, start, starts, ends, strict=True)]
    ranked = np.flatnonzero(ranks != _NO_RANK).tolist()
    prio.update({(jobs[k], tids[k]): r for k, r in zip(ranked, ranks[ranked].tolist(), strict=True)})
    return SlotSchedule(epoch_s, slot_s, flows, leftover_egress, leftover_ingress, late, solve_s, prio)


@dataclass(frozen=True)
class NoOptions:
    """The options of a policy that takes none."""


class Policy(ABC):
    """A scheduling policy: told about events, asked for rates.

    Subclasses set ``name`` and register with :func:`register_policy`. Hooks
    may update the policy's own state (plans, orders); :meth:`allocate` must
    return rates that respect every port's capacity.

    A policy's options are declared once, as the frozen dataclass ``Options``
    (its fields, defaults and checks); the constructor takes one instance of
    it (None: the defaults). :func:`make_policy` builds it from keywords.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    # Whether the policy needs the jobs' DAGs (compute nodes, dependencies): a coflow
    # trace has flows only, so `jitsched sim --coflow-trace` takes the policies without.
    needs_dag: ClassVar[bool] = True
    # What comparisons use the policy as, one of ROLES ("" for none), so that benches
    # and tools ask the registry (policies_with_role...) rather than spell names. A
    # subclass inherits it: a variant of a role's policy declares its own ("" for none).
    role: ClassVar[str] = ""
    # Place among the policies of its role (lower first, then by name): the order
    # in which comparisons list them, so that tables and figures keep their layout.
    role_rank: ClassVar[int] = 0

    def __init__(self, options=None) -> None:
        if options is None:
            options = self.Options()
        elif not isinstance(options, self.Options):
            raise TypeError(f"{type(self).__name__} takes a {self.Options.__name__}, "
                            f"got {type(options).__name__}")
        self.options = options

    def reset(self, cluster: Cluster) -> None:
        """Start afresh on ``cluster`` (before a run)."""
        self.cluster = cluster

    def on_job_arrival(self, view: SchedulerView, job: int) -> None:
        """Job ``job`` arrived at ``view.now``."""

    def on_flow_arrival(self, view: SchedulerView, bg: int) -> None:
        """Background flow ``bg`` arrived at ``view.now``."""

    def on_node_done(self, view: SchedulerView, node: int) -> None:
        """DAG node ``node`` finished at ``view.now``."""

    def on_flow_done(self, view: SchedulerView, bg: int) -> None:
        """Background flow ``bg`` finished at ``view.now``."""

    def on_tick(self, view: SchedulerView) -> None:
        """The owner's periodic timer fired (re-solve opportunities)."""

    @abstractmethod
    def allocate(self, view: SchedulerView) -> Allocation:
        """Rates for every flow in ``view.flows`` at ``view.now``."""

    def schedule(self, view: SchedulerView) -> SlotSchedule | None:
        """The time-slotted plan agents should enforce, or None if the policy has none."""
        return None

    def schedule_changes_at(self, view: SchedulerView) -> float:
        """When (``view``'s clock, seconds) the :meth:`schedule` just made would change with no
        event: a daemon re-solves then. inf: never (the default)."""
        return math.inf

    def schedule_increment(self, view: SchedulerView, base: SlotSchedule | None,
                           busy_egress: np.ndarray, busy_ingress: np.ndarray) -> SlotSchedule | None:
        """Plan only the jobs of ``view`` on top of ``base``, whose allocations stay frozen.

        Parameters
        ----------
        view : SchedulerView
            Just the jobs to add.
        base : SlotSchedule or None
            The schedule in force; its ``leftover_*`` is what it leaves free
            (past its last slot every port is free).
        busy_egress, busy_ingress : ndarray of int, shape (n_hosts,)
            Other jobs with unfinished transfers leaving / entering each host.

        Returns
        -------
        SlotSchedule or None
            The new jobs' flows on ``base``'s slot grid (its epoch; ``view.now``
            without a base), with what base and new flows together leave as
            leftover; None if the policy cannot plan incrementally, and the owner
            re-solves in full. Must not change the policy's state: it may run
            beside a full :meth:`schedule`.
        """
        return None

    def ranks_background(self) -> bool:
        """Whether :meth:`schedule` ranks a daemon's announced background flows (``view.bg_ids``).

        True: they take ranks among the jobs' transfers. False (default): the
        agents send them after every ranked flow, as background the daemon
        does not know.
        """
        return False

    def ranked_options(self) -> dict:
        """Options under which this policy simulates what a daemon's agents enforce of its
        :meth:`schedule` (for a prediction beside a testbed run): {} (default) when the
        schedule carries all the policy decides; a policy whose simulated rates its ranks
        do not carry names the options that drop them."""
        return {}

    def ranks_only(self) -> bool:
        """Whether :meth:`schedule` is ranks alone, which neither compute durations nor the
        passing of time move (no per-slot rates): a recurring job's next iteration then
        runs on the ranks in force (False, the default: it needs a new plan)."""
        return False

    def plans_increments(self) -> bool:
        """Whether :meth:`schedule_increment` can return a schedule (False: the owner re-solves in full)."""
        return type(self).schedule_increment is not Policy.schedule_increment

    def stats(self) -> dict:
        """Policy-specific figures for reports (solve times, LAT misses...)."""
        return {}


POLICIES: dict[str, type[Policy]] = {}

# The roles a policy may declare (Policy.role), in the order comparisons list them:
# "reference", the behaviour speedups are measured against (exactly one);
# "baseline", the published alternatives compared with; "default", the product's
# policy, the one a daemon runs unless told otherwise (exactly one); "paper", the
# published formulation of the default (at most one).
ROLES = ("reference", "baseline", "default", "paper")


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Class decorator: make ``cls`` available by ``cls.name``."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    if cls.role and cls.role not in ROLES:
        raise ValueError(f"{cls.__name__}: unknown role {cls.role!r}; known: {', '.join(ROLES)}")
    if cls.name in POLICIES and POLICIES[cls.name] is not cls:
        raise ValueError(f"policy {cls.name!r} registered twice")
    POLICIES[cls.name] = cls
    return cls


def option_names(cls: type[Policy]) -> tuple[str, ...]:
    """The options policy class ``cls`` declares: the fields of ``cls.Options`` a caller sets, in
    declaration order (a field declared ``init=False`` is fixed by the class)."""
    return tuple(f.name for f in fields(cls.Options) if f.init)


def make_policy(name: str, **options) -> Policy:
    """Instantiate the policy registered as ``name`` with its ``Options`` built from ``options``.

    Raises
    ------
    ValidationError
        An unknown policy, an option it does not declare (the message lists
        those it declares), or a value its ``Options`` refuses.
    """
    from jitsched.errors import ValidationError

    try:
        cls = POLICIES[name]
    except KeyError:
        raise ValidationError(
            f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    declared = option_names(cls)
    unknown = sorted(set(options) - set(declared))
    if unknown:
        takes = ", ".join(sorted(declared)) or "none"
        raise ValidationError(f"policy {name!r}: unknown option(s) {', '.join(unknown)}; it takes: {takes}")
    return cls(cls.Options(**options))


def policies_with_role(*roles: str) -> tuple[str, ...]:
    """Names of the registered policies that play one of ``roles``, in a stable order.

    Ordered by ``roles`` as given, then by ``role_rank``, then by name: the
    same whatever order the policy modules were imported in.

    Parameters
    ----------
    *roles : str
        Roles from :data:`ROLES`.

    Returns
    -------
    tuple of str

    Raises
    ------
    ValueError
        A role is not in :data:`ROLES`.
    """
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise ValueError(f"unknown role {unknown[0]!r}; known: {', '.join(ROLES)}")
    ranked = sorted(POLICIES.items(), key=lambda item: (item[1].role_rank, item[0]))
    return tuple(name for role in roles for name, cls in ranked if cls.role == role)


def _only(role: str, *, required: bool = True) -> str | None:
    """The one policy playing ``role`` (None if none and not ``required``); LookupError otherwise."""
    names = policies_with_role(role)
    if len(names) > 1 or (required and not names):
        raise LookupError(f"expected {'exactly' if required else 'at most'} one {role} policy, "
                          f"registered: {', '.join(names) or 'none'}")
    return names[0] if names else None


def reference_policy() -> str:
    """The policy speedups are measured against (role ``"reference"``: tensorflow)."""
    return _only("reference")


def baseline_policies() -> tuple[str, ...]:
    """The published alternatives compared with (role ``"baseline"``), by ``role_rank``."""
    return policies_with_role("baseline")


def default_policy() -> str:
    """The product's policy (role ``"default"``: jit)."""
    return _only("default")


def paper_policy() -> str | None:
    """The published formulation of the default policy (role ``"paper"``), None if none is registered."""
    return _only("paper", required=False)
