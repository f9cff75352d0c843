"""Options of a testbed run and of a tc enforcement measurement, each a dataclass, and the argparse flags built from them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jitsched.agents.backends.base import (
    BACKGROUND_FLOOR,
    FLOW_FLOOR,
    FLOW_FLOORS_SUM,
    INGRESS_SHARE,
)
from jitsched.agents.options import AgentOptions
from jitsched.config import PLANNING_MODES
from jitsched.errors import ValidationError
from jitsched.optspec import (
    add_options,
    argument_specs,
    check_choice,
    check_range,
    check_types,
    flag_fields,
    option,
    options_from_args,
)
from jitsched.plan import DEFAULT_SLOT_S, MIN_SLOT_S
from jitsched.plan.estimate import JOB_ORDERS
from jitsched.testbed import LINK_MBIT_RANGE, TestbedError, check_prefix

# The daemon's policy per testbed policy, and the simulator's in
# :func:`jitsched.testbed.scenario.predict`. ``jit`` is the jit policy by name:
# runs pass it jit's own options. ``none`` enforces nothing, so its daemon only
# keeps the books (LATs for the hit rate) and plans nothing: an idle JIT planner
# would take CPU from plain TCP's runners; its ideal is the simulator's reference
# policy (``tensorflow``, max-min fair), what speedups are measured against (named
# here, so that the flags are built without importing the policies; a test holds it
# to jitsched.policies.reference_policy()).
# ``sincronia`` is the baseline's coflow order as ranks (SincroniaPolicy.schedule)
# through the same agents as jit's, and ``tictac`` TicTac's (first come first
# served across jobs, TicTac's order inside one: TicTacPolicy.schedule) and
# ``varys`` Varys's (smallest effective bottleneck first; its MADD rates are not
# enforced, VarysPolicy): the orders on real TCP, side by side. Under all of
# them the agents put background traffic after every ranked flow.
DAEMON_POLICY = {"jit": "jit", "jit-paper": "jit-paper", "sincronia": "sincronia", "tictac": "tictac",
                 "varys": "varys", "none": "tensorflow"}
POLICIES = tuple(DAEMON_POLICY)
# the enforced baselines' orders: what runs beside jit and plain TCP, and what
# scenario.predict simulates with the files last, as their agents enforce them
BASELINES = tuple(p for p in POLICIES if p not in ("jit", "jit-paper", "none"))
# The daemon plans as the simulator's jit policy does, so that
# :func:`jitsched.testbed.scenario.predict` describes the same policy: every
# arrival re-solves all jobs jointly, and a transfer late against its plan
# triggers nothing (replan_on_drift off). On this testbed a runner's
# per-transfer overhead makes most transfers of Inception and ResNet152 finish
# over 0.5 s behind a fluid plan: with drift re-plans (paper-mini seed 0) the
# daemon re-solved 98 times, 40 s of solver CPU, and tc changes landed 35 ms
# late at p95 on a 2-core machine.
DAEMON_DEFAULTS = {"planning": "full", "drift_s": math.inf}
# The tc backend's SPARE_MODES, repeated rather than imported: the backend loads
# pyroute2 (~0.4 s) and the CLI builds these flags for every command it runs.
# tests/test_testbed_options.py keeps the two equal.
SPARE_MODES = ("background", "shared")
# TestbedOptions fields that become DaemonConfig fields under jit (policy_options: the policy's own)
_JIT_POLICY_OPTIONS = ("job_order", "dl_share")
_JIT_DAEMON_OPTIONS = ("planning", "max_planner_duty", "drift_s", "early_s", "live_capacity")


@dataclass(frozen=True)
class TestbedOptions:
    """How ``testbed run`` runs a scenario: the testbed, the policy and its settings.

    Every field with ``flag`` metadata is a flag of ``jitsched testbed`` and
    of ``bench/bench_testbed.py`` (:func:`add_options`); the help texts are
    theirs. None means "not set": the scenario's link rate, the policy's or
    the daemon's default. The jit settings reach the daemon only under
    ``jit`` (:meth:`daemon_settings`) and the simulator's ``jit`` in
    :func:`jitsched.testbed.scenario.predict` under either policy; they are
    checked here, by the daemon's and the policy's own checks, before a
    testbed is built.

    Attributes
    ----------
    link_mbit : float or None
        Link rate each way, Mbit/s (None: the scenario's; it scales the byte sizes).
    prefix : str
        Testbed name prefix (namespaces ``<prefix>-h<i>``, bridge ``<prefix>-br0``).
    policy : {"jit", "jit-paper", "sincronia", "tictac", "varys", "none"}
        ``jit``: the daemon's ``jit`` policy enforced by tc agents (a flow's
        planned rate is a floor; flows borrow what background leaves idle,
        the policy's backfill); ``sincronia``, ``tictac``, ``varys``: those
        baselines' orders as ranks through the same agents; ``none``: the same jobs with
        no agents, so flows share the shaped links as plain TCP (the
        TensorFlow baseline).
    seed : int
        Workload seed (same seed, same jobs and files).
    ingress : bool or None
        jit: the agents enforce the plan on their hosts' ingress too
        (``tc-ingress`` backend, shaped to
        :data:`jitsched.agents.backends.base.INGRESS_SHARE` of the link while
        inbound flows are scheduled, as ``jitsched agent --backend tc`` does
        by default; receivers register their inbound flows and rank them as
        the senders do). None: on where agents run. Without it only egress
        is ordered, and the flows of several senders, the files among them,
        meet in the receiver's switch port FIFO where TCP shares them. Measured with the default ``jit``
        (one run each, seed 0, every file delivered): quick 8.40 s egress-only
        vs 7.93 s with ingress (plain TCP 11.03 s); paper-mini 11.15 s vs
        9.99 s (plain TCP 11.42-12.37 s), the files' goodput not lower.
    alpha : float or None
        jit: fraction of each job's transfers the LP plans, in [0, 1].
    job_order : str or None
        jit: how jobs share a port in the LAT estimate (:data:`jitsched.plan.estimate.JOB_ORDERS`).
    dl_share : float or None
        jit: fraction of each port plans may give DL transfers, in (0, 1].
    spare : {"background", "shared"}
        jit: who borrows the capacity no class's rate holds (the tc backend's
        ``spare``): ``background`` the files first, then flows above their
        plan, as the simulator's backfill; ``shared`` the flows and the files in turn.
    background_floor : float
        Share of each port, in [0, 1), the agents guarantee the traffic they
        do not rank (the unannounced files) while ranked flows are backlogged
        (``jitsched agent --background-floor``; every policy with agents).
    flow_floor : float
        Share of each port, in [0, 1), the agents still guarantee a ranked
        flow held behind higher ranks (``jitsched agent --flow-floor``).
    flow_floors_sum : float
        Share of each port, in [0, 1), the ranked flows' floors add up to at
        most (``jitsched agent --flow-floors-sum``; 0: no bound).
    planning : str or None
        jit: the daemon's planning mode (None: ``full``, :data:`DAEMON_DEFAULTS`).
    max_planner_duty : float or None
        jit: bound on the share of time full re-solves keep the planner busy, in (0, 1].
    drift_s, early_s : float or None
        jit: re-solve when a transfer is this many seconds behind its plan /
        arrives this many seconds early (None: never).
    critical_caps : bool or None
        ``[daemon] critical_caps`` under every policy (None: the daemon's
        default, on): the agents hold the traffic they do not rank towards
        the hosts a critical job holds to what its reservation leaves.
    critical_floor : float or None
        ``[daemon] critical_floor`` under every policy: the share of a
        critical job's ports its agents keep for the traffic they do not rank
        while its reserved transfers run (None: the daemon's default, 0.01).
    critical_band : bool
        Under every policy, a critical job's transfers on connections of
        their own carry :data:`jitsched.testbed.e2e.CRITICAL_TOS` (DSCP EF), and
        the switch ports serve it in a band before every other (default True),
        as a datacenter switch's strict-priority queue: the traffic into a
        critical job's hosts from senders that do not rank it meets it there.
    switch_priority : bool
        Mark every DL transfer with :data:`jitsched.testbed.e2e.SCHEDULED_TOS`
        and give the switch ports a strict-priority band for it, so DL traffic
        is ahead of the files where the agents cannot reach (the receivers'
        ports); under ``none`` it is the ablation.
    channels : bool
        The job runners send the transfers too small to register on
        connections kept per sending host (:class:`jitsched.client.transfer.Channels`),
        as a framework's RPC channels would, under every policy (default
        on; ``--no-channels``: a connection per transfer). A
        fresh connection per small transfer put a handshake through two
        switch FIFOs before its data, and a lost SYN costs a second: over a
        paper-mini jit run 11 SYN retransmissions without them, 0 with them,
        and the runners' CPU 14.5 -> 10.9 CPU-s. The files of ``quick`` get
        the same with and without them: 45.65 against 47.3 Mbit/s over four
        runs each, and 47.5 and 45.6 in two more runs without them, the
        files' spread.
    announce_files : bool
        The files are announced to the daemon and their sockets registered
        with their hosts' agents, as an application that tells jitsched its
        bulk transfers would (``background_started``): jit (and Sincronia)
        then rank them among the jobs, as the simulator ranks files. Off by
        default: most background traffic knows nothing of the scheduler, and
        the agents put it after every ranked flow. A property of the
        workload, not a setting of the scheduler.
    runner_procs : int
        Processes the job runners run in (jobs dealt round-robin in arrival
        order), apart from this process's transfer sinks and file transfers;
        each critical job runs in a process of its own besides.
    timeout_s : float
        Per-job limit, s; also how long the files may take after the last job.
    slot_s : float
        Scheduling slot, s.
    measure_slots : int
        jit: slots of random tc rates measured on hosts 0 -> 1 before the run
        (:func:`jitsched.testbed.measure.measure_enforcement`; 0: none). ``none``
        enforces nothing, so its rate fields are None.
    daemon_options : mapping
        Further :class:`jitsched.config.DaemonConfig` fields, over everything
        above (``policy_options`` merged key by key).
    """

    __test__ = False  # not a pytest test class, whatever its name says

    link_mbit: float | None = option(
        None, "link rate in Mbit/s each way (default 100; run: the scenario's, which scales its byte sizes)")
    prefix: str = option("js", "names of namespaces/interfaces (default %(default)s: %(default)s-h0.., "
                               "%(default)s-br0)")
    policy: str = option("jit", "run: jit scheduling (jit-paper: the paper's LP formulation), sincronia, tictac "
                                "or varys (their orders through the same "
                                "agents), or none (plain TCP sharing, the TensorFlow baseline)",
                         choices=POLICIES)
    seed: int = option(0, "workload seed for run")
    ingress: bool | None = option(
        None, "run, jit: agents also order their hosts' ingress (tc-ingress; default on under jit)")
    alpha: float | None = option(
        None, "run, jit: fraction of each job's transfers the LP plans (default 0: strict priority only; "
              "the paper's is 0.4)")
    job_order: str | None = option(
        None, "run, jit: how jobs share a port in the LAT estimate (default fair, the paper's)",
        choices=JOB_ORDERS)
    dl_share: float | None = option(
        None, "run, jit: fraction of each port plans may give DL transfers; the rest is the background's "
              "floor (default 1)")
    spare: str = option(
        "background", "run, jit: who borrows capacity no plan holds: background first (default) or flows "
                      "and background in turn", choices=SPARE_MODES)
    background_floor: float = option(
        BACKGROUND_FLOOR, "run: share of each port the agents guarantee the traffic they do not rank while "
                          "ranked flows are backlogged, in [0, 1) (default %(default)s)", metavar="SHARE")
    flow_floor: float = option(
        FLOW_FLOOR, "run: share of each port the agents still guarantee a ranked flow held behind higher "
                    "ranks, in [0, 1) (default %(default)s)", metavar="SHARE")
    flow_floors_sum: float = option(
        FLOW_FLOORS_SUM, "run: share of each port the ranked flows' floors add up to at most, in [0, 1) "
                         "(default %(default)s; 0: no bound)", metavar="SHARE")
    planning: str | None = option(
        None, "run, jit: the daemon's planning mode (default full, as the simulator plans)",
        choices=PLANNING_MODES)
    max_planner_duty: float | None = option(
        None, "run, jit: bound on the share of time full re-solves keep the planner busy (default none)")
    drift_s: float | None = option(
        None, "run, jit: re-solve when a transfer is this many seconds behind its plan (default: never, "
              "like the simulator)")
    early_s: float | None = option(
        None, "run, jit: re-solve when a transfer arrives while its job has another paced to finish more "
              "than this many seconds later (default: never)")
    live_capacity: bool | None = option(
        None, "run, jit: plan each port on its line rate less the traffic its agent measures outside every "
              "schedule (default on), or on the line rate (--no-live-capacity)")
    critical_caps: bool | None = option(
        None, "run: the agents hold their unranked traffic into a critical job's hosts to what its reservation "
              "leaves (default on), or not (--no-critical-caps)")
    critical_floor: float | None = option(
        None, "run: share of a critical job's ports its agents keep for the traffic they do not rank while its "
              "reserved transfers run, in [0, 1) (default: the daemon's, 0.01; at or above "
              "--background-floor: that)", metavar="SHARE")
    critical_band: bool = option(
        True, "run: a critical job's transfers ahead of all else at the switch ports (DSCP EF; every policy)")
    switch_priority: bool = option(
        False, "run: DL transfers in a strict-priority band at the switch ports (both policies)")
    channels: bool = option(
        True, "run: transfers too small to register ride connections kept per sending host (all policies; "
              "default on)")
    announce_files: bool = option(
        False, "run: the files announce their sizes to the daemon and register with their agents "
               "(a workload whose bulk transfers tell jitsched; default off)")
    runner_procs: int = option(
        2, "run: processes the jobs' senders run in, apart from the sinks and files (default %(default)s)")
    timeout_s: float = option(120.0, "per-job limit in seconds", flag=False)
    slot_s: float = option(DEFAULT_SLOT_S, "scheduling slot in seconds", flag=False)
    measure_slots: int = option(20, "jit: slots of random tc rates measured before the run", flag=False)
    daemon_options: Mapping[str, Any] = option(
        help="further DaemonConfig fields", flag=False, default_factory=dict)

    def __post_init__(self) -> None:
        check_types(self)
        check_choice(self, "policy")
        check_range(self, "seed", lo=0)
        try:
            check_prefix(self.prefix)
        except TestbedError as exc:
            raise ValidationError(f"prefix: {exc}") from None
        if self.link_mbit is not None:
            check_range(self, "link_mbit", lo=LINK_MBIT_RANGE[0], hi=LINK_MBIT_RANGE[1])
        check_choice(self, "spare")
        self.agent_options("")  # the agents' own checks of the floors, naming the field
        check_range(self, "timeout_s", lo=0.0, open_lo=True)
        check_range(self, "slot_s", lo=MIN_SLOT_S)
        check_range(self, "measure_slots", lo=0)
        check_range(self, "runner_procs", lo=1)
        if self.daemon_options is None:  # run_scenario's default before the options object
            object.__setattr__(self, "daemon_options", {})
        if not isinstance(self.daemon_options, Mapping):
            raise ValidationError(f"daemon_options: expected a mapping, got {self.daemon_options!r}")
        # a copy: the caller's dict changing later must not change a frozen run's settings
        object.__setattr__(self, "daemon_options", dict(self.daemon_options))
        # The daemon's and the policy's own checks (ranges, choices, unknown keys) on
        # what this run's daemon gets; under none also on the jit settings, which the
        # simulator's prediction uses whatever the testbed policy.
        _check_daemon_settings(self.daemon_settings())
        if self.policy != "jit":
            _check_daemon_settings(self.daemon_settings("jit", extra=False))

    @property
    def enforce_ingress(self) -> bool:
        """Whether the agents order their hosts' ingress in this run (``ingress``, on by default where agents run)."""
        return (True if self.ingress is None else self.ingress) and self.enforced

    def agent_options(self, dev: str) -> AgentOptions:
        """The options of this run's agent on a host whose link is ``dev``: the tc backend, the
        ingress as :attr:`enforce_ingress`, this run's floors, the agent command's other defaults."""
        return AgentOptions(backend="tc", dev=dev, ingress=self.enforce_ingress,
                            background_floor=self.background_floor, flow_floor=self.flow_floor,
                            flow_floors_sum=self.flow_floors_sum)

    @property
    def enforced(self) -> bool:
        """Whether host agents enforce the daemon's schedules in this run (every policy but ``none``)."""
        return self.policy != "none"

    def jit_settings(self) -> dict:
        """The jit settings that are set, as :class:`jitsched.config.DaemonConfig` fields.

        ``job_order`` and ``dl_share`` are the policy's own, in ``policy_options``.
        """
        out: dict = {name: getattr(self, name) for name in _JIT_DAEMON_OPTIONS if getattr(self, name) is not None}
        policy_options = {name: getattr(self, name) for name in _JIT_POLICY_OPTIONS
                          if getattr(self, name) is not None}
        if policy_options:
            out["policy_options"] = policy_options
        return out

    def daemon_settings(self, policy: str | None = None, *, extra: bool = True) -> dict:
        """:class:`jitsched.config.DaemonConfig` fields of a run under ``policy`` (default: this one's).

        ``policy``, ``slot_s`` and ``alpha``, then :data:`DAEMON_DEFAULTS`,
        the jit settings under ``jit``, and (``extra``) ``daemon_options`` over
        them, its ``policy_options`` merged with the jit ones.
        """
        policy = self.policy if policy is None else policy
        out = {"policy": DAEMON_POLICY[policy], "slot_s": self.slot_s, "alpha": self.alpha, **DAEMON_DEFAULTS}
        if policy in ("jit", "jit-paper"):
            out |= self.jit_settings()
        if self.critical_caps is not None:
            out["critical_caps"] = self.critical_caps
        if self.critical_floor is not None:
            out["critical_floor"] = self.critical_floor
        if extra:
            more = dict(self.daemon_options)
            if "policy_options" in more and "policy_options" in out:
                more["policy_options"] = {**out["policy_options"], **more["policy_options"]}
            out |= more
        return out

    def prediction_options(self) -> dict:
        """Keywords of :func:`jitsched.testbed.scenario.predict`: this run's link rate, slot and jit settings."""
        # jit's ingress as a jit run has it, whichever policy this run measures
        jit_ingress = True if self.ingress is None else self.ingress
        return {"link_mbit": self.link_mbit, "slot_s": self.slot_s, "alpha": self.alpha,
                "job_order": self.job_order, "dl_share": self.dl_share,
                "ingress_share": INGRESS_SHARE if jit_ingress else 1.0,
                "announce_files": self.announce_files, "background_floor": self.background_floor}


@dataclass(frozen=True)
class MeasureOptions:
    """How ``testbed measure`` (and the enforcement part of the testbed bench) drives the tc backend.

    Attributes
    ----------
    slots : int
        Slots of random rates, at least 1.
    slot_s : float
        Slot length, s.
    """

    slots: int = option(30, "measure: slots of random rates (default %(default)s)")
    slot_s: float = option(DEFAULT_SLOT_S, "measure: slot length in seconds (default %(default)s)")

    def __post_init__(self) -> None:
        check_types(self)
        check_range(self, "slots", lo=1)
        check_range(self, "slot_s", lo=MIN_SLOT_S)


def _check_daemon_settings(settings: dict) -> None:
    # a daemon for a 2-host cluster: the settings' checks do not depend on the hosts
    from jitsched.config import DaemonConfig, check_config
    from jitsched.daemon.server import create_policy
    from jitsched.dag.model import Cluster

    try:
        cfg = DaemonConfig(cluster=Cluster.uniform(2), **settings)
        check_config(cfg)
        create_policy(cfg)
    except TypeError as exc:  # an unknown DaemonConfig field or policy option
        raise ValidationError(f"daemon_options: {exc}") from None


__all__ = ["BASELINES", "DAEMON_DEFAULTS", "DAEMON_POLICY", "POLICIES", "SPARE_MODES", "MeasureOptions", "TestbedOptions",
           "add_options", "argument_specs", "flag_fields", "option", "options_from_args"]
