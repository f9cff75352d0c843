"""``testbed run``: a scenario or a workload file end to end on the namespace testbed, JIT scheduling or none.

Separate processes, as on a real cluster where the daemon, the host agents
and the jobs do not share an interpreter (in one they would share one GIL:
a 100 ms plan would stall every runner and every slot change):

- the daemon, listening on ``ipc://`` endpoints in the root namespace (Unix
  sockets reach every namespace, so control traffic never crosses the
  shaped links);
- under ``jit``, one process per host agent, inside the host's namespace,
  driving the tc backend of its host's link;
- ``runner_procs`` processes of job runners, the jobs dealt among them,
  and a process of its own for each critical job (every transfer's socket
  is opened in its source host's namespace and moves real bytes over the
  shaped 198.18.0.x links; reports go to the daemon from a reporter thread
  per job, off the DAG's critical path);
- this process: a transfer sink per host and the background file transfers.
"""

# The helper processes' handle and mains (their ready / results / stats messages) live in
# children.py, which a spawned child imports without this module's own imports.

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, replace

from jitsched import testbed
from jitsched.agents.backends.htb import MIN_BURST_B
from jitsched.client.runner import UNREGISTERED_MAX_S
from jitsched.client.runner import unregistered_max_bytes as runner_unregistered_max_bytes
from jitsched.dag.model import Workload, load_workload
from jitsched.localreg import local_address
from jitsched.testbed.children import (
    AGENT_READY_TIMEOUT_S,
    Child,
    agents_main,
    daemon_main,
    dl_marks,
    failed_agents,
    results_grace_s,
    runners_main,
    silent_agents,
    sinks_main,
    stop_children,
)
from jitsched.testbed.measure import GOODPUT
from jitsched.testbed.options import (
    DAEMON_DEFAULTS,
    DAEMON_POLICY,
    POLICIES,
    TestbedOptions,
)

# A transfer that takes at most jitsched.client.runner.UNREGISTERED_MAX_S (10 ms, measured there)
# at the link rate is not registered with the agents: it rides the DL class
# (TcBackend's dl_tos: priority 0, ahead of the background) rather than a ranked class
# of its own. Registering costs two round trips to the agent at each end and a tc class
# installed and removed, on this 2-core machine as long as such a transfer itself.
# The floor: a transfer this small passes its class in the burst it starts with
# (two full frames, htb.MIN_BURST_B, less its header), whatever rate it is given
_BURST_PAYLOAD_B = MIN_BURST_B // 1514 * 1448 - 512


def unregistered_max_bytes(link_mbit: float) -> int:
    """Largest transfer, bytes, that the testbed's senders and receivers do not register (see UNREGISTERED_MAX_S)."""
    return max(_BURST_PAYLOAD_B, runner_unregistered_max_bytes(link_mbit * 1e6 / 8))


# seconds a scenario's bulk stream runs before the jobs start: four heartbeats of the run's
# daemon (0.5 s), the agents' first two samples among them
BULK_LEAD_S = 2.0
# DSCP AF41 in the TOS byte: DL transfers' class when switch ports have a priority band
SCHEDULED_TOS = 0x88
# DSCP EF in the TOS byte: a critical job's transfers on connections of their own, served
# first at the switch ports (TestbedOptions.critical_band). Beside the four files of the
# classes scenario the critical job took 1.071 times its JCT alone in two runs with the band
# against 1.083 in three without, and 1.097 and 1.094 in the whole run against 1.099-1.148
# (`jitsched testbed run --scenario classes --policy jit --seed 0 --json`): the files into
# its hosts had met its packets in the switch ports' FIFO.
CRITICAL_TOS = 0xB8


def run_scenario(scenario: str = "quick", options: TestbedOptions | None = None, **overrides) -> dict:
    """Bring the testbed up, run the scenario's jobs and background flows, tear down.

    Parameters
    ----------
    scenario : str
        A key of :data:`jitsched.testbed.scenario.SCENARIOS`.
    options : TestbedOptions, optional
        The testbed, the policy and its settings (default: ``TestbedOptions()``).
    **overrides
        :class:`TestbedOptions` fields over ``options`` (e.g. ``policy="none",
        link_mbit=50``), checked as the options are.

    Returns
    -------
    dict
        ``policy, jobs, completed, mean_jct_s`` (s), ``lat_hit_rate``,
        ``rate_accuracy_p50``/``p5`` (achieved / target rate per slot),
        ``rate_change_latency_ms_p50`` (ms), ``background_mbit_mean`` (Mbit/s,
        mean goodput of the files, each over its whole life: the run waits for
        them after the last job), ``background_slowdown_mean`` (file duration
        over its duration alone on an idle link), ``background_completed`` and
        ``details`` (per-job JCTs, the files as they stood when the last job
        ended, daemon planning figures, how late the agents applied each
        slot's rates).
    """
    from jitsched.testbed.scenario import get_scenario

    if isinstance(options, str):  # the policy, second before the options object replaced it
        raise TypeError(f"run_scenario: pass the policy as policy={options!r} or in TestbedOptions")
    options = TestbedOptions(**overrides) if options is None else replace(options, **overrides)
    sc = get_scenario(scenario)
    with _sigterm_as_exit():
        if sc.critical_model:
            from jitsched.testbed.classes import run_classes

            return run_classes(sc, scenario, options)
        return run_workload(sc, scenario, options)


def run_workload_file(path: str, options: TestbedOptions | None = None, *, loaded: Workload | None = None,
                      **overrides) -> dict:
    """Bring the testbed up, run a workload file's jobs and background flows, tear down.

    The file (native format, :func:`jitsched.dag.model.load_workload`) runs as
    :func:`jitsched.testbed.scenario.on_testbed` places it: a host of the testbed
    per host of the file, byte counts scaled to the testbed's link rate
    (``options.link_mbit``, else :data:`jitsched.testbed.DEFAULT_LINK_MBIT`).
    ``loaded`` is the file's workload when the caller has read it already (it is
    not read again).

    Returns
    -------
    dict
        As :func:`run_scenario`; ``details.scenario`` is the file's path and
        ``details.byte_scale`` the factor on its byte counts.
    """
    from jitsched.testbed.scenario import file_scenario, on_testbed

    options = TestbedOptions(**overrides) if options is None else replace(options, **overrides)
    wl = load_workload(path) if loaded is None else loaded
    link_mbit = options.link_mbit or testbed.DEFAULT_LINK_MBIT
    on_testbed(wl, len(wl.cluster), link_mbit)  # a bad workload fails before any namespace exists
    sc = file_scenario(wl, link_mbit)
    with _sigterm_as_exit():
        tb = scenario_testbed(sc, options, critical=any(j.job_class == "critical" for j in wl.jobs))
        try:
            out = run_workload(sc, str(path), options, tb=tb, workload=on_testbed(wl, tb, link_mbit))
        finally:
            testbed.down(options.prefix)
    out["details"]["byte_scale"] = link_mbit * 1e6 / wl.cluster.hosts[0].egress_bps
    return out


def _progress(message: str) -> None:
    """Say where a run is, on stderr when it is a terminal (a run takes minutes; a pipe or a
    log gets nothing)."""
    if sys.stderr.isatty():
        print(f"testbed: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    # SIGTERM's default action ends the process at once, skipping every ``finally``:
    # namespaces, qdiscs and helper processes would outlive the run
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def scenario_testbed(sc, options: TestbedOptions, critical: bool | None = None) -> testbed.Testbed:
    """Bring up the testbed a run of scenario ``sc`` needs: its hosts at the run's link rate
    (``options.link_mbit``, else the scenario's), named by ``options.prefix``, with the
    switch ports' priority band when ``options.switch_priority``, and their critical band
    (:data:`CRITICAL_TOS`) when ``options.critical_band`` for a workload with a critical job
    (``critical``; None: the scenario has one), under every policy: it is the network's."""
    band = options.critical_band and (bool(sc.critical_model) if critical is None else critical)
    return testbed.up(sc.hosts, options.link_mbit or sc.link_mbit, prefix=options.prefix,
                      priority_tos=SCHEDULED_TOS if options.switch_priority else None,
                      critical_tos=CRITICAL_TOS if band else None)


def run_workload(sc, scenario: str, options: TestbedOptions, *, tb: testbed.Testbed | None = None,
                 workload=None, watch: tuple[str, ...] = ()) -> dict:
    """One run of :func:`run_scenario`: the daemon, agents, sinks, runners and files of one workload.

    Parameters
    ----------
    sc : Scenario
    scenario : str
        Its name (the workload's, unless ``workload`` is given).
    options : TestbedOptions
    tb : Testbed, optional
        A testbed that is up, of ``sc.hosts`` hosts at the run's link rate, left
        up; None: one is brought up and torn down.
    workload : (Workload, list of BackgroundFlow), optional
        The jobs and files to run instead of the scenario's (:func:`build_workload`).
    watch : tuple of str
        Flow-id prefixes whose rates the agents record (``details.agents.*.watched_max_Bps``:
        the largest rate each flow was given).

    Returns
    -------
    dict
        As :func:`run_scenario`.
    """
    from jitsched.client.runner import JobResult
    from jitsched.config import DaemonConfig
    from jitsched.testbed.scenario import background_contention, build_workload

    policy, seed, prefix, timeout_s = options.policy, options.seed, options.prefix, options.timeout_s
    link_mbit = options.link_mbit or sc.link_mbit
    reg_max = unregistered_max_bytes(link_mbit)
    ingress = options.enforce_ingress
    # Under jit every DL transfer is marked, so the agents' tc can put the ones too
    # small to register ahead of the background (TcBackend's dl_tos class); the
    # switch ports' priority band is a separate choice (switch_priority).
    tos = SCHEDULED_TOS if options.switch_priority or options.enforced else None
    own = tb is None
    if own:
        tb = scenario_testbed(sc, options)
    # critical jobs' transfers carry the mark of the switch ports' critical band, if they have one
    crit_tos = tos if tb.critical_tos is None else tb.critical_tos
    marks = dl_marks(tos, crit_tos)
    tmp = tempfile.mkdtemp(prefix="jitsched-tb-")
    gen = None
    bulk, bulk_stats = None, {}
    children: list[Child] = []
    results: dict[str, JobResult] = {}
    enforcement: dict = {}
    daemon_stats: dict = {}
    agent_reports: dict = {}
    busy, cpu = None, {}
    try:
        if options.enforced and options.measure_slots:
            # the tc backend's per-slot rate accuracy and rate-change latency on these very
            # links, measured before the agents take the qdiscs over (the run itself mixes
            # flows that start and stop mid-slot, which says little about enforcement)
            from jitsched.testbed.measure import measure_enforcement, summarize

            enforcement = summarize(measure_enforcement(tb, slot_s=options.slot_s, n_slots=options.measure_slots,
                                                        seed=seed))
        wl, bg = build_workload(tb, link_mbit, scenario, seed) if workload is None else workload
        # the daemon knows each host's link; under ingress enforcement the agents shape
        # a little below it themselves (AgentOptions.ingress_share), as `jitsched agent` does
        cluster = wl.cluster
        netns_of = {h.name: h.netns for h in tb.hosts}
        addr_of = {h.name: h.address for h in tb.hosts}
        cfg = DaemonConfig(cluster=cluster, job_endpoint=f"ipc://{tmp}/jobs",
                           agent_endpoint=f"ipc://{tmp}/agents", heartbeat_s=0.5, heartbeat_timeout_s=3.0,
                           **options.daemon_settings())
        # Every child starts at once (importing is most of a child's start): the daemon's
        # endpoints are ipc paths, which agents and runners may connect to before it binds
        # them; the agents' socket names follow from their hosts and this run's tag; the
        # runners get the receivers' addresses with their start time.
        daemon = Child("daemon", daemon_main, (cfg,))
        children.append(daemon)
        tag = f"tb{os.getpid()}"
        agent_names: dict[str, str] = {}
        if options.enforced:
            # one process per host: a host's agent answers its runners' flow
            # registrations at once, not behind the other hosts' slot changes
            for h in tb.hosts:
                agent_names[h.name] = local_address(h.name, tag)
                children.append(Child(f"agent-{h.name}", agents_main,
                                       ([(h.name, h.netns, options.agent_options(h.dev))], cfg.agent_endpoint,
                                        tag, options.spare, marks, watch)))
        # The receivers in a process of their own too, off this one's GIL and its file
        # threads: this process's CPU while paper-mini's jobs ran fell from ~17 to ~6
        # CPU-s; a transfer's duration stayed 0.08 s (p50) either way
        sink_proc = Child("sinks", sinks_main, ([(h.name, h.netns, h.address) for h in tb.hosts],
                                                  agent_names if ingress else {}, reg_max))
        agent_procs = children[1:]
        children.append(sink_proc)

        from jitsched.testbed.bgtraffic import Generator
        # announced files: the daemon ranks them, their agents (sender's, and receiver's when
        # it orders its ingress) know their sockets
        gen = Generator(bg, netns_of, addr_of,
                        announce=(cfg.job_endpoint, agent_names) if options.announce_files and options.enforced else None)
        # The job runners in their own processes, away from this one's file senders and
        # receivers (see TestbedOptions.runner_procs).
        jobs = sorted(wl.jobs, key=lambda j: j.arrival_s)
        groups = runner_groups(jobs, options.runner_procs)
        for i, group in enumerate(groups):
            children.append(Child(f"runners-{i}", runners_main,
                                   (group, cfg.job_endpoint, agent_names, netns_of, reg_max, (tos, crit_tos),
                                    timeout_s, options.channels)))
        runners = children[len(children) - len(groups):]
        daemon.ready()
        for c in agent_procs:
            (names,) = c.ready(AGENT_READY_TIMEOUT_S)
            if any(agent_names[h] != name for h, name in names.items()):
                raise testbed.TestbedError(f"{c.name} listens at {names}, not at {agent_names}")
        (addrs,) = sink_proc.ready()
        for c in runners:
            c.ready()
        if sc.bulk_share > 0:
            from jitsched.testbed.bulk import UdpStream
            from jitsched.testbed.scenario import bulk_path

            src, dst = bulk_path(wl)
            bulk_stats = {"src": src, "dst": dst}
            bulk = UdpStream(netns_of[src], netns_of[dst], addr_of[dst], sc.bulk_share * link_mbit * 1e6 / 8).start()
            # a few heartbeats: the agents measure the stream before the first job arrives
            time.sleep(BULK_LEAD_S)
        t0 = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of this machine
        busy0 = machine_cpu_ticks()
        pids = {c.name: c.proc.pid for c in children} | {"main": os.getpid()}
        cpu0 = {name: process_cpu_s(pid) for name, pid in pids.items()}
        gen.start(t0)
        for c in runners:
            c.conn.send(("go", t0, addrs))
        _progress(f"{scenario}: {len(jobs)} jobs under {policy} arriving over "
                  f"{max((j.arrival_s for j in jobs), default=0.0):.1f} s, {len(bg)} files")
        for group, c in zip(groups, runners, strict=True):
            # a runner's jobs each have timeout_s from their arrival, and it sends what it has
            # results_grace_s after the last one's (runners_main): a few seconds more for its message
            last = (t0 + max((j.arrival_s for j in group), default=0.0) + timeout_s
                    + results_grace_s(timeout_s) + 5.0)
            results.update(c.results(max(0.0, last - time.monotonic())))
        t_jobs = time.monotonic() - t0
        _progress(f"{scenario}: jobs done in {t_jobs:.1f} s" + (f"; the files next (up to {timeout_s:g} s)" if bg else ""))
        busy = cpu_busy(busy0, machine_cpu_ticks())
        # where it went, per role (CPU seconds while the jobs ran)
        for name, pid in pids.items():
            role = name.split("-")[0]  # agent-h1 -> agent, runners-0 -> runners
            cpu[role] = cpu.get(role, 0.0) + process_cpu_s(pid) - cpu0[name]
        during = gen.snapshot()
        bg_window_mbit = sum(r["bytes"] for r in during.values()) * 8 / 1e6 / max(t_jobs, 1e-9)
        # then let every file finish: a file's goodput and slowdown over its whole life
        # (the paper's Fig. 9 metric) do not depend on when this policy's jobs ended
        deadline = time.monotonic() + timeout_s
        while len(gen.results) < len(bg) and time.monotonic() < deadline:
            time.sleep(0.05)
        bg_res = gen.snapshot()
        # a file whose connection failed, or that never reached its receiver, is
        # a lost file, not a missing row: say so where the results are read
        bg_errors = {f.id: gen.results.get(f.id, {}).get("error") or "never reached its receiver"
                     for f in bg if f.id not in bg_res}
        alone_Bps = link_mbit * 1e6 / 8 * GOODPUT
        for f in bg:
            r = bg_res.get(f.id)
            if r is not None and r["complete"]:
                r["slowdown"] = (r["end_s"] - r["start_s"]) / (f.bytes / alone_Bps)
        done = [r for r in bg_res.values() if r["complete"]]
        bg_mbit = statistics.fmean(r["mbit"] for r in done) if done else None
        bg_slowdown = statistics.fmean(r["slowdown"] for r in done) if done else None
        # the longest time any file's receiver read nothing (64-kB reads: see bgtraffic.longest_stall_s)
        bg_stall = max((r["max_stall_s"] for r in bg_res.values()), default=None)
    finally:
        if bulk is not None:
            bulk_stats |= bulk.close()
        if gen is not None:
            gen.close()
        got = stop_children(children)
        daemon_stats = got.pop("daemon", daemon_stats)
        agent_reports |= {name: rep for name, rep in got.items() if rep}
        agent_reports |= silent_agents(children, got)  # a dead agent process is a failed agent
        if own:
            testbed.down(prefix)
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    ok = [r for r in results.values() if not r.error]
    # a job whose thread was still running when its runner process sent its results
    unreported = {j.id: f"no result: job {j.id!r} was still running {timeout_s:g} s after its arrival "
                        f"and {results_grace_s(timeout_s):g} s more"
                  for j in wl.jobs if j.id not in results}
    known = sum(r.lat_known for r in ok)
    spans = {j: {t: [r.transfer_start_s[t], r.transfer_s[t]] for t in r.transfer_s}
             for j, r in sorted(results.items())}
    return {
        "policy": policy, "jobs": len(wl.jobs), "completed": len(ok),
        "mean_jct_s": statistics.fmean(r.jct_s for r in ok) if ok else None,
        "lat_hit_rate": sum(r.lat_hits for r in ok) / known if known else None,
        # transfers that arrived after the LAT their job's plan gave them
        "lat_misses": known - sum(r.lat_hits for r in ok), "lat_known": known,
        "rate_accuracy_p50": enforcement.get("rate_accuracy_p50"),
        "rate_accuracy_p5": enforcement.get("rate_accuracy_p5"),
        "rate_change_latency_ms_p50": enforcement.get("rate_change_latency_ms_p50"),
        "background_mbit_mean": bg_mbit, "background_slowdown_mean": bg_slowdown,
        "background_completed": f"{len(done)}/{len(bg)}",
        "background_max_stall_s": bg_stall,
        # hosts whose agent stopped with an error during the run (their figures are not jit's)
        "agents_failed": failed_agents(agent_reports),
        "details": {"enforcement": enforcement, "background_window_mbit": bg_window_mbit,
                    "background_during_jobs": during,
                    "scenario": scenario, "seed": seed, "link_mbit": link_mbit, "wall_s": t_jobs,
                    "options": asdict(options), "cpu_s": cpu,
                    # the machine's cores busy while the jobs ran (0-1): near 1, the runners,
                    # agents and daemon wait for a core and the figures say more about the CPU
                    "cpu_busy_during_jobs": busy,
                    "jct_s": {j: r.jct_s for j, r in sorted(results.items())},
                    # per job, the runner's own lag: its JCT less the one its transfers' times
                    # allow with nodes started at no cost (JobResult.ideal_jct_s); on 2 cores
                    # half or more of a ResNet152's or an Inception's JCT, under every policy
                    "runner_lag_s": {j: r.jct_s - r.ideal_jct_s for j, r in sorted(results.items())
                                     if not r.error},
                    # requests the runners sent again after no reply came in time (a slow daemon)
                    "reconnects": {j: r.reconnects for j, r in sorted(results.items()) if r.reconnects},
                    # per job, per transfer: [start, duration] in seconds from the job's submission
                    "transfers": spans,
                    # per file: DL MB through its ports during its life (what the file gave up)
                    "background_contention": background_contention(wl, bg, spans, bg_res),
                    "errors": {**{j: r.error for j, r in results.items() if r.error}, **unreported,
                               **bg_errors},
                    "background": bg_res, "daemon": daemon_stats, "agents": agent_reports,
                    # the scenario's unannounced constant-rate stream (Scenario.bulk_share)
                    "bulk": bulk_stats},
    }


def runner_groups(jobs: list, procs: int) -> list[list]:
    """The jobs of each runner process: a critical job alone in one of its own (a production
    job is a process of its own, and sharing one lends its nodes' timing the other jobs'
    GIL), the rest dealt round-robin in their order among ``procs`` processes.

    On the classes scenario (``jitsched testbed run --scenario classes --policy jit --seed 0
    --json``, docs/results.md) the critical job took 1.042-1.063 times its JCT alone
    (median 1.049) in nine runs in a process of its own, and 1.041-1.092 (median 1.065) in
    four sharing one with three other jobs; its parameter pulls ended 4.99-5.03 s into it
    against 4.99-5.38 s.

    Parameters
    ----------
    jobs : list of Job
        In arrival order.
    procs : int
        Processes for the jobs that are not critical (>= 1).

    Returns
    -------
    list of list of Job
        One list per process, none empty.
    """
    critical = [j for j in jobs if j.job_class == "critical"]
    rest = [j for j in jobs if j.job_class != "critical"]
    k = max(1, min(procs, len(rest)))
    return [[j] for j in critical] + [g for i in range(k) if (g := rest[i::k])]


def process_cpu_s(pid: int) -> float:
    """CPU time of process ``pid`` so far (every thread), user plus system, seconds; NaN if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def machine_cpu_ticks() -> tuple[int, int]:
    """``(busy, total)`` clock ticks of every core since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        # user nice system idle iowait irq softirq steal (guest time is inside user already)
        ticks = [int(x) for x in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]  # a core stolen by the hypervisor counts as busy: not ours
    return sum(ticks) - idle, sum(ticks)


def cpu_busy(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Fraction of the machine's cores busy between two :func:`machine_cpu_ticks` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


__all__ = ["CRITICAL_TOS", "DAEMON_DEFAULTS", "DAEMON_POLICY", "POLICIES", "SCHEDULED_TOS",
           "UNREGISTERED_MAX_S", "unregistered_max_bytes",
           "run_scenario", "run_workload_file"]
