"""The testbed run's helper processes: their handle in the parent and the mains of the daemon, agent, job runner and sink children.

A spawned child imports the module of its main first: this one keeps to what
every child needs, and each main imports its own part (the daemon its server
and planner, an agent its backends, a runner the job runner), so that a child
starts without importing the run's own side (the planner's SciPy among it).
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from jitsched import testbed
from jitsched.netns import in_netns

if TYPE_CHECKING:
    from jitsched.agents.options import AgentOptions

START_TIMEOUT_S = 60.0  # a spawned child imports numpy and zmq first, the daemon's the planner too
# An agent process starts beside the daemon and registers once the daemon is up: it waits
# out the daemon's whole start allowance, then the registration itself (a retry comes after
# the agent's reconnect_s of silence, 3 s by default).
REGISTER_AFTER_START_S = 10.0
REGISTER_TIMEOUT_S = START_TIMEOUT_S + REGISTER_AFTER_START_S
# The parent's wait for an agent process's ready: its own start, then its registration wait.
AGENT_READY_TIMEOUT_S = START_TIMEOUT_S + REGISTER_TIMEOUT_S


def results_grace_s(timeout_s: float) -> float:
    """How long a runner waits past a job's limit (its arrival plus ``timeout_s``) for the
    job's thread before it sends its results: the job's own timeout has ended it by then
    but for its last requests (a cancel of up to 2 s). A third of a minute at most, and no
    shorter than 5 s."""
    return min(30.0, max(5.0, timeout_s))


class Child:
    """A spawned helper process that reports ``("ready", ...)`` once, then serves until told to stop.

    Spawned, not forked: this process runs threads, and a forked child would
    inherit their locks in whatever state they were.
    """

    def __init__(self, name: str, target, args: tuple) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(*args, child), name=f"jitsched-tb-{name}", daemon=True)
        self.proc.start()
        child.close()
        self._asked = False

    def _receive(self, timeout_s: float, silent: str, gone: str) -> tuple:
        """The child's next message; TestbedError ``silent`` if none within ``timeout_s``, ``gone`` if it exited."""
        if not self.conn.poll(timeout_s):
            raise testbed.TestbedError(f"testbed {self.name} {silent}")
        try:
            return self.conn.recv()
        except EOFError:
            raise testbed.TestbedError(f"testbed {self.name} {gone}") from None

    def ready(self, timeout_s: float = START_TIMEOUT_S) -> tuple:
        """The child's ready payload; raise TestbedError if it failed or is silent for ``timeout_s``."""
        msg = self._receive(timeout_s, f"did not start within {timeout_s:g} s", "exited during start-up")
        if msg[0] != "ready":
            raise testbed.TestbedError(f"testbed {self.name} failed: {msg[1]}")
        return msg[1:]

    def results(self, timeout_s: float) -> dict:
        """A runner child's ``("results", {job id: JobResult})``; raise TestbedError if it died or is silent."""
        return self._receive(timeout_s, f"sent no results within {timeout_s:g} s",
                             "exited before its jobs finished")[1]

    def ask_stop(self) -> None:
        """Tell the child to stop, without waiting (once; :meth:`stop` waits)."""
        if not self._asked:
            self._asked = True
            try:
                self.conn.send("stop")
            except OSError:
                pass  # it is gone already

    def stop(self, timeout_s: float = 15.0) -> dict:
        """Ask the child to stop; returns its final figures (empty if none). Kills it if it hangs."""
        out: dict = {}
        try:
            self.ask_stop()
            if self.conn.poll(timeout_s):
                msg = self.conn.recv()
                if msg[0] == "stats":
                    out = msg[1]
        except (OSError, EOFError):
            pass  # it is gone already
        self.proc.join(timeout_s)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self.conn.close()
        return out


def _tell(conn, msg: tuple) -> None:
    """Send ``msg`` to the parent; nothing if it is gone."""
    try:
        conn.send(msg)
    except OSError:
        pass


def _wait_stop(conn) -> None:
    # "stop" from the parent, or its end of the pipe closing (the parent died)
    try:
        conn.recv()
    except (EOFError, OSError):
        pass


def daemon_main(cfg, conn) -> None:
    """Child process: the daemon until the parent says stop; sends its planning figures."""
    from jitsched.daemon.server import Daemon

    try:
        d = Daemon(cfg).start()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    try:
        conn.send(("ready", d.job_endpoint, d.agent_endpoint))
        _wait_stop(conn)
    finally:
        d.stop()
    st = d.state
    solves = list(st.solve_times)
    _tell(conn, ("stats", {"plans": st.n_plans, "plans_by_mode": dict(st.plan_book.plans_by_mode),
                           "solve_s_total": float(sum(solves)),
                           "solve_s_median": float(statistics.median(solves)) if solves else None,
                           "solve_s_max": float(max(solves)) if solves else None,
                           "lat_misses": st.lat_misses,
                           # times a port's planned unscheduled rate moved (live capacity)
                           "capacity_changes": st.agent_table.capacity.changes,
                           "capacity": {h: st.agent_table.capacity.host_view(h) for h in st.cluster.names},
                           # announced files: how many the daemon got, and how they left
                           "background": dict(st.background.counts),
                           "critical": critical_stats(st)}))


def critical_stats(st) -> dict:
    """The critical jobs' side of a daemon's state after a run (:func:`daemon_main`'s stats).

    Returns
    -------
    dict
        ``epsilon`` (``[daemon] critical_epsilon``), ``refused`` and ``admitted_as_normal``
        (counts), ``verdicts`` (each critical job that finished: ``met`` or ``missed``, within
        its guarantee or not, :meth:`jitsched.daemon.jobs.JobState.guarantee`), ``classes`` (each job that
        asked to be critical and was admitted: the class it ran in) and ``reservations``
        (per job still holding one: its start, the isolated JCT and the JCT target it
        was reserved for, and each transfer's largest reserved rate, bytes/s).
    """
    reg = st.job_registry
    book = reg.reservations
    slot = book.options.slot_s
    return {"epsilon": book.options.eps, "refused": reg.critical_refused, "admitted_as_normal": reg.critical_demoted,
            "verdicts": {jid: js.verdict for jid, js in reg.jobs.items() if js.verdict is not None},
            "classes": {jid: js.job.job_class for jid, js in reg.jobs.items()
                        if js.job.job_class == "critical" or js.unguaranteed is not None},
            "reservations": {jid: {"start_s": h.start_slot * slot, "isolated_jct_s": h.windows.isolated_s,
                                   "target_jct_s": h.windows.target_s,
                                   "max_rate_Bps": {tid: float(h.rates[k].max(initial=0.0))
                                                    for k, tid in enumerate(h.windows.ids)}}
                             for jid, h in book.held.items()}}


def transfer_tos(job_class: str, small: bool, tos: int | None, critical_tos: int | None) -> int | None:
    """The TOS byte a job runner marks a transfer with: ``critical_tos`` for a critical job's
    transfer on a connection of its own, else ``tos`` (the small ones of every job ride the
    channels all jobs share, with the common mark)."""
    return critical_tos if job_class == "critical" and not small else tos


def dl_marks(tos: int | None, critical_tos: int | None) -> tuple[int, ...]:
    """The TOS bytes the agents take as DL packets': every mark :func:`transfer_tos` sets.

    A registered flow's first packets cross the receiver's ingress before its
    registration reaches the agent (the receiver reads the flow's name from
    them), and a critical job's carry the critical mark: with only the common
    one they waited in the background class, and at a background floor of 0 a
    critical job's pulls stalled for 10-13 s (classes scenario, two runs; 1.042x
    its JCT alone once both marks were DL's).
    """
    return tuple(dict.fromkeys(t for t in (tos, critical_tos) if t is not None))


def runners_main(jobs: list, job_ep: str, agent_names: dict, netns_of: dict, reg_max: int,
                  tos: tuple[int | None, int | None], timeout_s: float, use_channels: bool, conn) -> None:
    """Child process: run ``jobs``, each at its arrival after the parent's start time; sends their results.

    The parent's go message, ``("go", t0, addrs)``, gives the start time and the
    receivers' addresses (host -> address), which start beside this process.
    """
    from jitsched.client.runner import JobRunner
    from jitsched.client.transfer import Channels, send_bytes
    from jitsched.netns import Namespaces

    spaces = Namespaces()  # closed below: the namespaces must go with the testbed
    # TestbedOptions.channels: transfers too small to register ride connections kept per
    # sending host, as a framework's RPC channels carry a step's small tensors (under every
    # policy); a larger one has a connection of its own (jit's agents rank it by its ports).
    channels = {h: Channels() for h in netns_of} if use_channels else {}

    def sender(job_class: str):
        def send(src: str, addr, nbytes: int, flow: str, agent=None, ticket=None, peer_ticket=None) -> float:
            small = nbytes <= reg_max
            with spaces.entered(netns_of[src]):
                return send_bytes(addr, nbytes, flow, agent=None if small else agent, timeout_s=timeout_s,
                                  tos=transfer_tos(job_class, small, *tos),
                                  channels=channels.get(src) if small else None,
                                  ticket=ticket, peer_ticket=peer_ticket)
        return send

    results: dict = {}
    lock = threading.Lock()

    def launch(job, t0: float, addrs: dict) -> None:
        time.sleep(max(0.0, t0 + job.arrival_s - time.monotonic()))
        # 32 transfers of a job in flight. Every one a job makes ready at once (2048
        # threads per process, started before the jobs, as a TF step's receives all
        # go out) was worse under jit on paper-mini, alternating runs: mean JCT 12.2,
        # 9.51 s against 8.58, 8.05 s, LeNet 4.31, 1.98 s against 1.13, 0.62 s -- the
        # small transfers of every job share one unregistered DL class per port, and
        # a ResNet152's ~1000 pulls at once fill it.
        runner = JobRunner(job, job_ep, addrs, agents=agent_names, max_threads=32,
                           send=sender(job.job_class), async_reports=True)
        r = job_result(job, lambda: runner.run(timeout_s=timeout_s))
        with lock:
            results[job.id] = r

    threads: list[threading.Thread] = []
    try:
        conn.send(("ready",))
        msg = conn.recv()
        if msg == "stop":
            return
        threads = [threading.Thread(target=launch, args=(j, msg[1], msg[2]), daemon=True) for j in jobs]
        for t in threads:
            t.start()
        for j, t in zip(jobs, threads, strict=True):
            # each job's limit runs from its arrival, not from the start
            t.join(max(0.0, msg[1] + j.arrival_s + timeout_s + results_grace_s(timeout_s) - time.monotonic()))
        with lock:
            conn.send(("results", dict(results)))
        _wait_stop(conn)
        conn.send(("stats", {}))
    except (EOFError, OSError):
        pass  # the parent is gone
    finally:
        for c in channels.values():
            c.close()
        if not any(t.is_alive() for t in threads):  # else a sender may still be in one
            spaces.close()


def job_result(job, run):
    """What ``run`` (a job runner's run of ``job``) returns, or the job's failed result if it raises.

    A job the daemon refuses (invalid, over a limit, not admitted) raises in its
    runner: its result then carries the daemon's error code and message as its
    ``error``, so that the run's errors say why the job did not complete.

    Parameters
    ----------
    job : Job
    run : callable
        Returns the job's :class:`jitsched.client.runner.JobResult`.

    Returns
    -------
    JobResult
        ``run()``'s, or one with ``error`` set and a NaN JCT.
    """
    from jitsched.client.runner import JobResult
    from jitsched.errors import RemoteError

    try:
        return run()
    except RemoteError as exc:
        error = f"the daemon refused job {job.id!r}: {exc.code}: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - the job's error, not the runner process's end
        error = f"the runner of job {job.id!r} failed: {type(exc).__name__}: {exc}"
    return JobResult(job.id, float("nan"), len(job.transfers), float(sum(t.bytes for t in job.transfers)),
                     error=error)


def sinks_main(hosts: list[tuple[str, str, str]], agent_names: dict, reg_max: int, conn) -> None:
    """Child process: a transfer sink per host, each in its host's namespace; sends their addresses."""
    from jitsched.client.transfer import TransferSink

    sinks = []
    try:
        for name, netns, address in hosts:
            with in_netns(netns):
                sinks.append((name, TransferSink(address, agent=agent_names.get(name),
                                                 register_min_bytes=reg_max)))
        conn.send(("ready", {name: s.address for name, s in sinks}))
        _wait_stop(conn)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        _tell(conn, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for _, s in sinks:
            s.close()
    _tell(conn, ("stats", {}))


def agents_main(hosts: list[tuple[str, str, AgentOptions]], endpoint: str, ns_tag: str, spare: str,
                 dl_marks: tuple[int, ...], watch: tuple[str, ...], conn) -> None:
    """Child process: one tc agent per host (name, namespace, its options), each in its host's
    namespace; sends their socket names once every agent registered with the daemon.

    The agents start beside the daemon and wait :data:`REGISTER_TIMEOUT_S` for their
    registration (the daemon's start allowance and a margin); the parent waits
    :data:`AGENT_READY_TIMEOUT_S` for this child's ready.
    """
    # (not the daemon's server for its polling helper: it imports SciPy and the planner,
    # a second of CPU in each of these processes while the testbed starts)
    from jitsched.agents.agent import Agent

    agents = []
    late_ms: list[float] = []
    watched: dict[str, float] = {}
    try:
        for name, netns, opts in hosts:
            with in_netns(netns):
                # threads inherit the creator's namespace: the agent's local socket
                # (abstract, per namespace) and tc calls live in the host's namespace;
                # the agent command's defaults, and the testbed's plumbing: the namespace,
                # who borrows spare capacity, and the DL packets' marks (the job runners set them)
                plumbing = {"netns": netns, "spare": spare, "dl_tos": dl_marks}
                agents.append(Agent(name, endpoint, opts, backend_options=plumbing,
                                    local_namespace=ns_tag).start())
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        late = [a.host for a in agents if not a.registered.wait(max(0.0, deadline - time.monotonic()))]
        if late:
            raise testbed.TestbedError(
                f"the agents of {', '.join(late)} did not register with the daemon at {endpoint} within "
                f"{REGISTER_TIMEOUT_S:g} s (the daemon's start allowance of {START_TIMEOUT_S:g} s, "
                f"then {REGISTER_AFTER_START_S:g} s to register)")
        for a in agents:
            _time_slot_changes(a, late_ms, watch, watched)
        conn.send(("ready", {a.host: a.local_name for a in agents}))
        _wait_stop(conn)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        _tell(conn, ("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for a in agents:
            a.stop()  # removes the flow classes, puts the link shaper back
    _tell(conn, ("stats", agent_stats(agents, late_ms) | ({"watched_max_Bps": watched} if watch else {})))


def stop_children(children: list[Child]) -> dict:
    """Stop the run's child processes (the daemon first in the list); ``{name: what each sent back}``."""
    # all told at once: stopped one after another, the agents stopped first went
    # silent for longer than the daemon's heartbeat timeout, and it reported them down
    for c in children:
        c.ask_stop()
    return {c.name: c.stop() for c in reversed(children)}


def agent_stats(agents: list, late_ms: list[float]) -> dict:
    """What one agent process reports of its agents after a run.

    Parameters
    ----------
    agents : list of Agent
    late_ms : list of float
        How long after its slot boundary each slot's rates reached the kernel, ms.

    Returns
    -------
    dict
        Flows registered each way, sockets whose RTO was set (and refused),
        ``relevels`` (flows moved to a class at a new level, both ways), the
        slot changes' lateness (p50, p95, max, ms) and ``failed``: ``{host:
        error}`` of the agents whose loop ended with an error.
    """
    stats = {f"registered_{d}": sum(a.registrations[d] for a in agents) for d in ("out", "in")}
    stats |= {"rto_capped": sum(a.rto_capped for a in agents), "rto_cap_failed": sum(a.rto_cap_failed for a in agents)}
    # flows moved to a class at a new level while they ran (tc backends; see TcBackend.apply)
    stats["relevels"] = sum(getattr(b, "relevels", 0) for a in agents for b in (a.backend, a.in_backend)
                            if b is not None)
    # an agent whose loop ended with an error left its host unordered for the rest of the run
    stats["failed"] = {a.host: f"{type(a.failure).__name__}: {a.failure}" for a in agents if a.failure is not None}
    if late_ms:
        late = np.sort(late_ms)
        stats |= {"slot_changes": len(late), "apply_late_ms_p50": float(np.percentile(late, 50)),
                  "apply_late_ms_p95": float(np.percentile(late, 95)), "apply_late_ms_max": float(late[-1])}
    return stats


def silent_agents(children: list[Child], got: dict[str, dict]) -> dict[str, dict]:
    """The agent processes (``agent-<host>``) of ``children`` that sent no figures when stopped
    (:func:`stop_children`'s ``got``): killed, or ended by an error in their teardown. Their
    hosts were not ordered for some of the run; each as the figures of a failed agent,
    ``{process name: {"failed": {host: why}}}``, for :func:`failed_agents`."""
    return {c.name: {"failed": {c.name.removeprefix("agent-"):
                                f"its agent process ended without its figures (exit code {c.proc.exitcode})"}}
            for c in children if c.name.startswith("agent-") and not got.get(c.name)}


def failed_agents(stats_by_process: dict[str, dict]) -> dict[str, str]:
    """``{host: error}`` over every agent process's :func:`agent_stats`."""
    return {h: why for st in stats_by_process.values() for h, why in st.get("failed", {}).items()}


def _time_slot_changes(agent, late_ms: list[float], watch: tuple[str, ...] = (),
                       watched: dict[str, float] | None = None) -> None:
    """Record how long after its slot boundary each slot's rates reached the kernel (ms),
    and into ``watched`` the largest rate each flow whose id starts with one of ``watch``
    was given (bytes/s).

    Wraps the agent's backend: the first apply in a new slot of the agent's
    schedule is that slot's change; applies for flow registrations within a
    slot are not counted.
    """
    backend = agent.backend
    apply = backend.apply
    last = [None]

    def timed(flows, leftover_Bps):
        s = agent.schedule
        t0 = time.time_ns()
        apply(flows, leftover_Bps)
        if watch and watched is not None:
            for f in flows:
                if f.flow_id.startswith(watch):
                    watched[f.flow_id] = max(watched.get(f.flow_id, 0.0), float(f.rate_Bps))
        if s and s.get("slot_s"):
            slot_ns = int(s["slot_s"] * 1e9)
            k = (t0 - s["epoch_ns"]) // slot_ns
            if k >= 0 and k != last[0]:
                last[0] = k
                late_ms.append((time.time_ns() - s["epoch_ns"] - k * slot_ns) / 1e6)

    backend.apply = timed


__all__ = ["AGENT_READY_TIMEOUT_S", "REGISTER_TIMEOUT_S", "START_TIMEOUT_S", "Child", "agent_stats", "agents_main", "critical_stats", "daemon_main",
           "dl_marks", "failed_agents", "job_result", "results_grace_s", "runners_main", "silent_agents", "sinks_main", "stop_children", "transfer_tos"]
