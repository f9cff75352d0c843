"""Prometheus metrics of the daemon and of a replica that follows, each on a registry of its own (several per process in tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from jitsched.errors import ValidationError
from jitsched.protocol import AGENT_COUNTS

if TYPE_CHECKING:
    from jitsched.daemon.state import SchedulerState

SOLVE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def leader_gauge(registry: CollectorRegistry, leads: bool) -> Gauge:
    """``jitsched_replica_leader``, which the daemon and a following replica both export: 1 or 0."""
    g = Gauge("jitsched_replica_leader", "1 while this process leads (or is the one daemon)", registry=registry)
    g.set(1 if leads else 0)
    return g


def metrics_url(address: str, port: int) -> str:
    """Where the endpoint on ``address``:``port`` answers: ``http://ADDRESS:PORT/metrics``, an
    IPv6 address in brackets, and a wildcard address (``0.0.0.0``, ``::``) as loopback."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    return f"http://[{host}]:{port}/metrics" if ":" in host else f"http://{host}:{port}/metrics"


class Endpoint:
    """A registry and the HTTP endpoint serving it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server = None

    def serve(self, port: int, address: str = "127.0.0.1") -> int:
        """Expose ``/metrics`` on ``address``:``port`` (0: any free port); returns the port.

        Raises
        ------
        ValidationError
            The port cannot be served there (in use, an address this host does not have).
        """
        try:
            self._server, _ = start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise ValidationError(f"metrics_port {port}: cannot serve on {address} ({exc.strerror})") from None
        return self._server.server_port

    def shutdown(self) -> None:
        """Stop the HTTP endpoint (its port free again)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class Metrics(Endpoint):
    """Solve-time histogram, job and agent gauges, LAT misses and request counters."""

    def __init__(self) -> None:
        r = CollectorRegistry()
        self.solve_s = Histogram("jitsched_solve_seconds", "Planner time per plan (seconds)",
                                 buckets=SOLVE_BUCKETS, registry=r)
        self.jobs = Gauge("jitsched_jobs", "Jobs by state", ["state"], registry=r)
        self._job_states = {"running", "finished", "cancelled", "failed", "abandoned"}
        self.agents = Gauge("jitsched_agents", "Registered agents by liveness", ["up"], registry=r)
        self.lat_misses = Gauge("jitsched_lat_misses", "Transfers that arrived after their LAT",
                                registry=r)
        self.requests = Counter("jitsched_requests", "Requests handled, by type and outcome",
                                ["type", "outcome"], registry=r)
        self._request_children: dict[tuple[str, str], object] = {}
        self.plans = Counter("jitsched_plans", "Plans computed, by planning mode", ["mode"],
                             registry=r)
        self.plans_failed = Counter("jitsched_plans_failed", "Plans that failed, by planning mode",
                                    ["mode"], registry=r)
        self.planner_fallback = Gauge(
            "jitsched_planner_fallback",
            "1 while full re-solves run in a thread because the planner process failed", registry=r)
        self.request_s = Histogram("jitsched_request_seconds", "Handling time of accepted requests",
                                   buckets=(1e-5, 1e-4, 1e-3, 1e-2, 0.1), registry=r)
        self.critical = Gauge("jitsched_critical_jobs",
                              "Critical jobs since start: refused, admitted as normal, finished within "
                              "their guarantee (met) or not (missed), running past it (overdue) and running on a "
                              "reservation larger than an agent can give (at_risk)",
                              ["outcome"], registry=r)
        self.jobs_pruned = Gauge("jitsched_jobs_pruned", "Ended jobs forgotten after their retention",
                                 registry=r)
        # the socket loop's counts (status' loop): refused and closed connections, replies
        # refused for a peer's unread bytes, requests decoded off the loop, ...
        self.journal_errors = Gauge("jitsched_journal_errors", "Journal writes that failed since start",
                                    registry=r)
        self.journal_held = Gauge("jitsched_journal_held", "Journal writes held back, not yet durable "
                                  "(a replica's progress events while etcd does not take them)", registry=r)
        self.loop = Gauge("jitsched_loop", "Socket loop counts, by name (status.loop)", ["count"], registry=r)
        # announced background flows: held now, and the totals announced, resumed from the journal
        # (restored), finished and expired (an expired flow's sender never said it finished: a
        # leak on the sender's side)
        self.background = Gauge("jitsched_background_flows", "Announced background flows (status.background)",
                                ["count"], registry=r)
        # the agent table's counts (status.agent_counts): agents marked down, registrations and
        # acks refused, schedule re-sends and hosts whose re-sends stopped unacked
        self.agent_counts = Gauge("jitsched_agent_counts", "Agent table counts since start, by name "
                                  "(status.agent_counts)", ["count"], registry=r)
        # the agents' own counts (status.agents[h].counts), summed over the agents registered:
        # schedule bodies refused as a deposed leader's or older than the one held, schedules
        # dropped in a daemon's silence, daemon messages refused as malformed
        self.agent_reported = Gauge("jitsched_agent_reported", "Agents' own counts since each started, "
                                    "summed over the registered agents, by name (status.agents[h].counts)",
                                    ["count"], registry=r)
        self.clock_off = Gauge("jitsched_agents_clock_off",
                               "Agents whose clock is off the daemon's by more than a slot", registry=r)
        # hosts in the cluster, and those that joined, left or were refused since start (status.hosts)
        self.hosts = Gauge("jitsched_hosts", "Hosts in the cluster and membership counts since start, by name "
                           "(status.hosts)", ["count"], registry=r)
        self.replica_leader = leader_gauge(r, True)
        self.epoch = Gauge("jitsched_epoch", "The leader's epoch among replicas (0: one daemon)", registry=r)
        super().__init__(r)

    def request(self, type_: str, outcome: str, seconds: float | None = None) -> None:
        """Count one request (``outcome`` is "ok" or an error code)."""
        # the labelled child cached: labels() takes a lock and builds its key on every call,
        # and a joint re-solve at 1000 hosts brings 1000 acks through here
        child = self._request_children.get((type_, outcome))
        if child is None:
            child = self._request_children[(type_, outcome)] = self.requests.labels(type_, outcome)
        child.inc()
        if seconds is not None:
            self.request_s.observe(seconds)

    def solve(self, seconds: float, mode: str = "full") -> None:
        """Record one successful plan's solve time (seconds) and its mode (``full`` or ``incremental``)."""
        self.solve_s.observe(seconds)
        self.plans.labels(mode).inc()

    def plan_failed(self, mode: str = "full") -> None:
        """Count one failed plan of ``mode``."""
        self.plans_failed.labels(mode).inc()

    def update(self, state: SchedulerState, now: float) -> None:
        """Refresh the gauges from the scheduler state at ``now`` (daemon clock, seconds)."""
        self.epoch.set(state.epoch)
        # every state a job may be in, and any other seen since: a state whose last job was
        # pruned reads 0, not the count it had then
        counts = dict.fromkeys(self._job_states, 0)
        for js in state.jobs.values():
            counts[js.state] = counts.get(js.state, 0) + 1
        self._job_states.update(counts)
        for k, v in counts.items():
            self.jobs.labels(k).set(v)
        up = sum(1 for a in state.agents.values() if a.up)
        self.agents.labels("true").set(up)
        self.agents.labels("false").set(len(state.agents) - up)
        self.lat_misses.set(state.lat_misses)
        self.planner_fallback.set(1.0 if state.planner.startswith("thread (") else 0.0)
        reg = state.job_registry
        self.jobs_pruned.set(reg.pruned)
        for name, value in (("refused", reg.critical_refused), ("admitted_as_normal", reg.critical_demoted),
                            ("met", reg.critical_met), ("missed", reg.critical_missed),
                            ("overdue", len(reg.overdue(now))), ("at_risk", len(reg.at_risk()))):
            self.critical.labels(name).set(value)
        self.journal_errors.set(state.journal_errors)
        self.journal_held.set(state.journal_held)
        for name, value in state.loop.items():
            self.loop.labels(name).set(value)
        for name, value in state.agent_table.counts.items():
            self.agent_counts.labels(name).set(value)
        for name in AGENT_COUNTS:
            self.agent_reported.labels(name).set(sum(a.counts.get(name, 0) for a in state.agents.values()))
        self.clock_off.set(sum(a.clock_off for a in state.agents.values()))
        self.hosts.labels("in_cluster").set(len(state.cluster) - len(state.hosts.absent))
        for name, value in state.hosts.counts.items():
            self.hosts.labels(name).set(value)
        self.background.labels("held").set(len(state.background.flows))
        for name, value in state.background.counts.items():
            self.background.labels(name).set(value)


class FollowerMetrics(Endpoint):
    """What a replica that does not lead exports on the daemon's metrics port: its role, whether
    etcd answers it, the requests it sent on to the leader, its leaderships so far and those
    that ended on a failure of its own."""

    def __init__(self) -> None:
        r = CollectorRegistry()
        self.leader = leader_gauge(r, False)
        self.etcd_up = Gauge("jitsched_replica_etcd_up", "1 while etcd answered this replica's last look",
                             registry=r)
        self.not_leader = Gauge("jitsched_replica_not_leader_answers",
                                "Requests this follower answered not_leader", registry=r)
        self.leaderships = Gauge("jitsched_replica_leaderships", "Times this replica was elected", registry=r)
        self.lead_failures = Gauge("jitsched_replica_lead_failures",
                                   "Leaderships of this replica ended by a failure of its own", registry=r)
        super().__init__(r)
