"""The job runner: executes a native-format job for real (sleeping computes, paced TCP transfers)."""

# One module although past 500 lines: JobRunner and its session (the daemon's
# replies, the reporter thread, the transfers in flight) are one state machine over
# one job's DAG.

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from jitsched.client import Client
from jitsched.client.transfer import send_bytes
from jitsched.dag.model import Job, critical_path_s
from jitsched.errors import ValidationError
from jitsched.keys import CLIENTS, DEFAULT_CLIENT, CurveKeys, curve_keys
from jitsched.protocol import MAX_REPORT_EVENTS, ErrorCode, MsgType, RemoteError, flow_id

log = logging.getLogger("jitsched.client.runner")


# A transfer that takes at most this long at its line rate is not worth registering with
# the agents (JobRunner's register_min_bytes, :func:`unregistered_max_bytes`): the round
# trips to them cost about what such a transfer takes. Measured on the testbed's
# paper-mini (seed 0, 100 Mbit/s, jit, runs alternating with plain TCP): registering all
# but what fits in an HTB class's first burst 10.19, 10.47, 12.41 s mean JCT; up to
# 128 KiB (10 ms) 8.80, 9.36, 8.72 s; up to 1 MiB (84 ms) 9.68, 9.76 s; plain TCP 11.98,
# 11.71 s; 10 ms keeps 89 % of the scenario's bytes ranked. On the demo (runs
# alternating, two each): mean JCT 1.82, 1.83 s registering every transfer, 1.65,
# 1.61 s with 10 ms; its Inception-v3 jobs 1.75-1.95 s against 0.81-0.94 s.
UNREGISTERED_MAX_S = 0.01
# A request the daemon answered ``unavailable`` (it could not record it: its journal or etcd
# could not be written) goes again after this pause, until the run's deadline.
UNAVAILABLE_RETRY_S = 0.2


def unregistered_max_bytes(line_Bps: float) -> int:
    """Largest transfer, bytes, that takes at most :data:`UNREGISTERED_MAX_S` at ``line_Bps`` (bytes/s)."""
    return int(line_Bps * UNREGISTERED_MAX_S)


# seconds before a ticket the daemon did not give is asked for again (each ask opens a
# connection to the daemon: not one per transfer)
NO_TICKET_RETRY_S = 30.0


@dataclass
class JobResult:
    """What one run of a job measured (seconds, bytes).

    ``transfer_s`` is each transfer's duration as its sender saw it (connect
    to the receiver's confirmation), ``transfer_start_s`` when it started,
    seconds after the job's start (when its submission went out; see
    ``JobRunner``'s ``async_reports``); ``jct_s`` from there to its last node. ``reconnects`` counts requests
    sent again on a fresh connection after no reply came in time, and
    ``resubmits`` the job submitted again to a daemon that had lost it.
    ``ideal_jct_s`` is when the job would have ended with the same transfer
    durations and no cost of its own to start a node or end a compute (the
    DAG's longest path, each node starting when its last input ended):
    ``jct_s`` less it is the runner's own lag, and what a transfer waited
    for the runner to start it.
    """

    job_id: str
    jct_s: float
    transfers: int
    bytes: float
    lat_hits: int = 0
    lat_known: int = 0
    transfer_s: dict[str, float] = field(default_factory=dict)
    transfer_start_s: dict[str, float] = field(default_factory=dict)
    error: str = ""
    reconnects: int = 0
    resubmits: int = 0
    ideal_jct_s: float = float("nan")
    compute_s: dict[str, float] = field(default_factory=dict)  # each compute's emulated duration

    @property
    def lat_hit_rate(self) -> float:
        """Fraction of transfers with a known LAT that arrived by it (NaN if none)."""
        return self.lat_hits / self.lat_known if self.lat_known else float("nan")


class _Session:
    """The runner's requests to the daemon, carried through a daemon restart.

    A request without a reply within ``request_timeout_s`` is sent again on a
    fresh connection (what the old one still queued is dropped); every report
    is idempotent in the daemon, and a submission that turns out to have
    arrived (``duplicate_job`` on a resend) counts as made. ``unknown_job``
    means the daemon restarted without a journal: the job is submitted again
    with the nodes done and transfers started so far, then the report is sent
    again. Only the run's ``deadline`` (monotonic) ends the retries.
    """

    MAX_RESUBMITS = 8  # in a row without a report getting through: something else is wrong

    def __init__(self, runner: JobRunner, deadline: float) -> None:
        self.runner = runner
        self.deadline = deadline
        self.client = self._connect()
        self.done: dict[str, None] = {}  # nodes done here, reported or not
        self.started: dict[str, None] = {}  # transfers started here
        self.lock = threading.Lock()  # guards done and started (worker threads add to them)
        self.reconnects = 0
        self.resubmits = 0
        self._resubmits_in_row = 0

    def _connect(self) -> Client:
        r = self.runner
        return Client(r.endpoint, timeout_s=r.request_timeout_s, keys=r.keys)

    def close(self) -> None:
        self.client.close()

    def node_done(self, nid: str) -> None:
        with self.lock:
            self.done[nid] = None

    def node_started(self, nid: str) -> None:
        with self.lock:
            self.started[nid] = None

    def call(self, name: str, *args, resubmit: bool = True, **kwargs):
        """``Client.<name>(*args)``, retried until the deadline through a restart.

        A request answered ``unavailable`` (the daemon could not record it) goes
        again after :data:`UNAVAILABLE_RETRY_S`.

        Raises
        ------
        TimeoutError
            The daemon did not answer before the run's deadline, or still could not
            record the request then.
        RemoteError
            The daemon refused the request for another reason than a restart.
        """
        first = True
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply from the daemon at {self.runner.endpoint} to {name} "
                                   "before the run's timeout")
            self.client.timeout_s = min(self.runner.request_timeout_s, left)
            try:
                rep = getattr(self.client, name)(*args, **kwargs)
            except TimeoutError:
                self._reconnect(name)
                first = False
                continue
            except RemoteError as exc:
                if exc.code == ErrorCode.DUPLICATE_JOB and name == "submit" and not first:
                    # an earlier try got there; its reply did not (the client itself counts
                    # the sends it made within one try: Client.submit)
                    return {"job_id": self.runner.job.id}
                if exc.code == ErrorCode.UNKNOWN_JOB and resubmit and name not in ("submit", "register_template"):
                    self._resubmit()
                    first = False
                    continue
                if exc.code == ErrorCode.UNAVAILABLE:
                    left = self.deadline - time.monotonic()
                    if left <= UNAVAILABLE_RETRY_S:
                        raise TimeoutError(f"the daemon could not record {name} before the run's timeout: "
                                           f"{exc.message}") from None
                    time.sleep(UNAVAILABLE_RETRY_S)
                    first = False
                    continue
                raise
            if resubmit:  # a report got through (not the resubmission itself)
                self._resubmits_in_row = 0
            return rep

    def _reconnect(self, name: str) -> None:
        # a fresh socket: requests the old one still holds must not reach a new daemon late
        log.info("event=runner_reconnect job=%s request=%s", self.runner.job.id, name)
        self.client.close()
        self.client = self._connect()
        self.reconnects += 1

    def _resubmit(self) -> None:
        """The daemon lost the job (restarted without a journal): submit it again with its progress."""
        self._resubmits_in_row += 1
        if self._resubmits_in_row > self.MAX_RESUBMITS:
            raise RemoteError(ErrorCode.UNKNOWN_JOB, f"job {self.runner.job.id!r} lost "
                              f"{self.MAX_RESUBMITS} times in a row after resubmitting it")
        with self.lock:
            progress = {"done": list(self.done), "started": list(self.started)}
        log.warning("event=runner_resubmit job=%s done=%d", self.runner.job.id, len(progress["done"]))
        if self.runner.template is not None:  # a recurring job: its template again, counting anew
            msg, body = MsgType.REGISTER_TEMPLATE, {"job": self.runner.template.to_dict(),
                                                    **self.runner._ticket_ask()}
        else:
            msg, body = MsgType.SUBMIT_JOB, {"job": self.runner.job.to_dict(), "progress": progress,
                                             **self.runner._ticket_ask()}
        try:
            # a daemon that restarted without keys signs with a new secret: its tickets
            self.runner._take_tickets(self.call("request", msg, body, resubmit=False))
        except RemoteError as exc:
            if exc.code != ErrorCode.DUPLICATE_JOB:
                raise
        self.resubmits += 1


# a Client report method -> the kind of its event in a ``report`` message
_EVENT_OF = {"transfer_started": "started", "transfer_finished": "finished", "compute_finished": "compute"}

COMPUTE_THREADS = 64  # a job's computes at once (each sleeps to its emulated end, or not at all)


class JobRunner:
    """Runs one job: submits it, then starts every node once its predecessors finished.

    Parameters
    ----------
    job : Job
        Native job; transfer ``src``/``dst`` and compute ``host`` name cluster hosts.
    endpoint : str
        The daemon's job endpoint.
    sinks : dict
        ``host -> (address, port)`` of a :class:`jitsched.client.transfer.TransferSink` per host.
    agents : dict, optional
        ``host -> local agent socket name``; transfers from a host register with its agent.
    compute_scale : float
        Computes sleep ``duration_s * compute_scale`` seconds.
    max_threads : int
        Nodes running at once (transfers block in ``send``; computes sleep).
        Computes have :data:`COMPUTE_THREADS` threads of their own. A thread
        that ends a node goes on with one of the nodes it made ready (a
        compute if any) and hands the others on, and a compute sleeps until its
        emulated end (its last input's plus its duration), not for its
        duration from when its thread got to it. Both measured on the
        testbed's paper-mini under jit: a ResNet152's longest chain is ~1320
        computes of ~0.5 ms, and a hop through the pool and a sleep's
        overshoot (a woken thread waits for the GIL of a process running
        seven jobs) cost ~8 ms each, 10.2 s of its 10.2 s JCT against 3.0 s
        of transfers and computes on that chain.
    on_event : callable, optional
        ``on_event(kind, job_id, node_id)`` after each node (progress display).
    send : callable, optional
        ``send(src_host, addr, nbytes, flow, agent=..., ticket=..., peer_ticket=...)`` replacing
        :func:`jitsched.client.transfer.send_bytes` (the testbed opens each transfer's
        socket inside its source host's network namespace).
    async_reports : bool
        False (default): each node waits for the daemon's reply to its
        reports before its successors start. True: one reporter thread sends
        the reports in order while the DAG runs on, as a training runtime
        would not stall its ops on the scheduler (thousands of round trips
        otherwise put the daemon's latency on every node of a 2000-transfer
        ResNet152); the reports queued while one message is on its way go
        together in the next (``report``: one round trip for many events);
        the job's JCT ends with its last node, and the run returns once the
        daemon has every report. The submission goes first on that thread
        and the DAG starts at once, as the simulator's jobs start at their
        arrival: on the testbed's paper-mini the reply took 5-110 ms for a
        LeNet and 0.14-0.72 s for a ResNet152 (a daemon under load, a
        2000-transfer DAG to check), all of it in every JCT, under every
        policy. A refusal still raises :class:`RemoteError`, once the nodes
        in flight have ended. A transfer that registers with an agent waits
        for the reply, which brings the tickets the agents take its flows by.
    keys : CurveKeys or path, optional
        The client's CURVE keys (see :class:`jitsched.client.Client`), or a key
        directory holding those of client ``key_name``. None: plaintext.
    key_name : str
        The client's name in the key directory.
    register_min_bytes : int
        Transfers of at most this many bytes are not registered with their
        sender's agent (default 0: all are). A registration is a round trip to
        the agent and a re-apply of its rates, longer than a small transfer
        takes; the testbed and the demo leave out those under 10 ms at the
        line rate (:func:`unregistered_max_bytes`).
    tos : int, optional
        The TOS byte of its transfers' connections (a DSCP value times four;
        None: the system's): with the same DSCP in its hosts' agents'
        ``--dl-dscp``, a transfer's packets that no flow class takes yet (its
        first, before its receiver registers it) go ahead of the background
        traffic there. Not used with ``send``, which marks its own.
    request_timeout_s : float
        How long a request waits for its reply before it is sent again on a
        fresh connection. Submission and reports are retried so through a
        daemon restart (the job submitted again, with its progress, if the
        daemon lost it) until ``run``'s ``timeout_s`` runs out.
    """

    def __init__(self, job: Job, endpoint: str, sinks: dict[str, tuple[str, int]], *,
                 agents: dict[str, str] | None = None, compute_scale: float = 1.0,
                 max_threads: int = 64,
                 on_event: Callable[[str, str, str], None] | None = None,
                 send: Callable[..., float] | None = None, async_reports: bool = False,
                 keys: CurveKeys | str | Path | None = None, key_name: str = DEFAULT_CLIENT,
                 request_timeout_s: float = 2.0, register_min_bytes: int = 0, tos: int | None = None) -> None:
        self.job = job
        self.request_timeout_s = request_timeout_s
        self.keys = curve_keys(keys, CLIENTS, key_name)  # read once, not per run
        self.key_name = key_name
        self.flow_job = job.id  # the job id its flows go by, as the daemon's reply says
        self._flow_job_known = threading.Event()
        self.endpoint = endpoint
        self.sinks = sinks
        self.agents = agents or {}
        self.compute_scale = compute_scale
        self.max_threads = max_threads
        self.on_event = on_event
        self.send = send
        self.async_reports = async_reports
        if register_min_bytes < 0:
            raise ValidationError(f"register_min_bytes: must be >= 0, got {register_min_bytes!r}")
        self.register_min_bytes = int(register_min_bytes)
        if tos is not None and (isinstance(tos, bool) or not isinstance(tos, int) or not 0 <= tos <= 255):
            raise ValidationError(f"tos: must be a TOS byte 0-255 (a DSCP value times four), got {tos!r}")
        self.tos = tos
        self._lock = threading.Lock()
        # a recurring run (run_iterations): the template registered, the iteration under way,
        # the session kept across iterations, and each compute's factor in this iteration
        self.template: Job | None = None
        self._iteration = 0
        self._session: _Session | None = None
        self._factor: dict[str, float] = {}
        # the daemon's tickets for the job's hosts ({host: ticket}, for this process's uid),
        # which its sockets are registered with the agents by; taken (monotonic) at
        # _tickets_at, refreshed past half their ticket_s
        self.uid = os.geteuid()
        self._tickets: dict[str, dict] = {}
        self._tickets_at: dict[str, float] = {}
        self._ticket_s = 0.0
        self._ticket_lock = threading.Lock()
        self._ticket_failed = False  # a refresh failed: logged once

    def run(self, timeout_s: float = 600.0) -> JobResult:
        """Submit and execute the job; returns when every node finished (or on failure).

        A daemon restart costs time, never the run: requests are retried until
        ``timeout_s`` (from the call) runs out. A daemon refusing the job
        raises :class:`RemoteError`.
        """
        job = self.job
        computes = {c.id: c for c in job.computes}
        transfers = {t.id: t for t in job.transfers}
        preds: dict[str, int] = {n: 0 for n in job.node_ids()}
        succs: dict[str, list[str]] = {n: [] for n in preds}
        inputs: dict[str, list[str]] = {n: [] for n in preds}
        for a, b in job.edges:
            preds[b] += 1
            succs[a].append(b)
            inputs[b].append(a)
        # each node's emulated end, seconds after t0: a compute's is its last input's
        # plus its duration, a transfer's when it really ended
        ends: dict[str, float] = {}
        result = JobResult(job.id, float("nan"), len(transfers), sum(t.bytes for t in job.transfers))
        all_done = threading.Event()
        left = [len(preds)]
        failure: list[str] = []
        deadline = time.monotonic() + timeout_s
        recurring = self._iteration > 0  # one iteration of a registered template: no per-node reports
        if not recurring:  # a template's flow_job was set when run_iterations registered it
            self.flow_job = job.id
            self._flow_job_known.clear()
        client = self._session or _Session(self, deadline)
        client.deadline = deadline
        self.session = client  # what it went through (reconnects, resubmits): tests and benches
        reports: queue.SimpleQueue | None = (queue.SimpleQueue() if self.async_reports and not recurring
                                             else None)
        reporter = None
        unsubmitted: list[Exception] = []  # why an asynchronous submission failed
        try:
            t0 = time.perf_counter()
            if recurring:
                pass  # registered once, by run_iterations
            elif reports is None:
                try:
                    self._submitted(client.call("submit", job, **self._ticket_ask()))
                except TimeoutError as exc:  # no daemon answered before the deadline
                    result.error = f"submit: {exc}"
                    log.warning("event=job_failed job=%s error=%r", job.id, result.error)
                    return result
            else:
                # the only user of the client until it has sent everything (sockets are
                # per thread); the submission goes first on it and the DAG starts at once
                reporter = threading.Thread(target=self._submit_then_report,
                                            args=(client, job, reports, failure, unsubmitted, all_done),
                                            name=f"report-{job.id}", daemon=True)
                reporter.start()
            # Transfers block their thread for their whole length; computes wait in a
            # pool of their own, not behind the hundreds of transfers a step makes ready.
            with ThreadPoolExecutor(max_workers=self.max_threads,
                                    thread_name_prefix=f"run-{job.id}") as pool, \
                    ThreadPoolExecutor(max_workers=COMPUTE_THREADS,
                                       thread_name_prefix=f"compute-{job.id}") as cpool:

                def submit(nid: str) -> None:
                    (cpool if nid in computes else pool).submit(run_node, nid)

                def finish(nid: str) -> str | None:
                    # the node's successors now ready: one to go on with on this thread
                    ready = []
                    with self._lock:
                        left[0] -= 1
                        for s in succs[nid]:
                            preds[s] -= 1
                            if preds[s] == 0:
                                ready.append(s)
                        if left[0] == 0:
                            all_done.set()
                    if not ready:
                        return None
                    # go on with a compute (a chain of ops), hand the rest on
                    nxt = next((s for s in ready if s in computes), ready[0])
                    for s in ready:
                        if s is not nxt:
                            submit(s)
                    return nxt

                def report(fn, *args, then=None):
                    if recurring:
                        return  # the iteration's end reports them all at once
                    if reports is not None:
                        # (kind, node, value) of a report message; args are (job id, node[, value])
                        reports.put((_EVENT_OF[fn], args[1], args[2] if len(args) > 2 else None, then))
                        return
                    with self._lock:
                        rep = client.call(fn, *args)
                    if then is not None:
                        then(rep)

                def lat_hit(rep: dict) -> None:
                    if rep.get("lat_hit") is not None:
                        with self._lock:
                            result.lat_known += 1
                            result.lat_hits += int(rep["lat_hit"])

                def run_node(nid: str | None) -> None:
                    while nid is not None and not failure:
                        if not run_one(nid):
                            return
                        nid = finish(nid)

                def run_one(nid: str) -> bool:
                    try:
                        if nid in computes:
                            c = computes[nid]
                            s0 = time.perf_counter()
                            begin = max((ends[p] for p in inputs[nid]), default=0.0)
                            took = c.duration_s * self.compute_scale * self._factor.get(nid, 1.0)
                            ends[nid] = end = begin + took
                            wait = end - (s0 - t0)
                            if wait > 0:
                                time.sleep(wait)
                            client.node_done(nid)
                            result.compute_s[nid] = took
                            # the duration it emulated (the runner's lag is the job's, not the op's)
                            report("compute_finished", job.id, nid, took)
                        else:
                            t = transfers[nid]
                            result.transfer_start_s[nid] = time.perf_counter() - t0
                            client.node_started(nid)
                            report("transfer_started", job.id, nid)
                            registers = t.bytes > self.register_min_bytes
                            agent = self.agents.get(t.src) if registers else None
                            # the agents take a job's flow with the daemon's ticket only: the
                            # sender's for its registration, the receiver's in the flow's header
                            tickets = {"ticket": self._ticket(t.src) if agent is not None else None,
                                       "peer_ticket": self._ticket(t.dst) if registers and self.agents
                                       else None}
                            if self.send is not None:
                                secs = self.send(t.src, self.sinks[t.dst], int(t.bytes),
                                                 self._flow_id(nid), agent=agent, **tickets)
                            else:
                                secs = send_bytes(self.sinks[t.dst], int(t.bytes), self._flow_id(nid),
                                                  agent=agent, tos=self.tos, **tickets)
                            result.transfer_s[nid] = secs
                            ends[nid] = time.perf_counter() - t0
                            client.node_done(nid)
                            report("transfer_finished", job.id, nid, t.bytes, then=lat_hit)
                        if self.on_event is not None:
                            self.on_event("compute" if nid in computes else "transfer", job.id, nid)
                    except Exception as exc:  # noqa: BLE001 - reported, and the run ends
                        failure.append(f"{nid}: {type(exc).__name__}: {exc}")
                        all_done.set()
                        return False
                    return True

                for nid, k in list(preds.items()):
                    if k == 0:
                        submit(nid)
                if not all_done.wait(max(deadline - time.monotonic(), 0.0)):
                    failure.append(f"timed out after {timeout_s} s")
            result.jct_s = time.perf_counter() - t0
            if not failure:
                # each transfer taking what it took, each compute its duration
                took = dict(result.compute_s) | result.transfer_s
                result.ideal_jct_s = critical_path_s(took, job.edges)
            if reporter is not None:
                reports.put(None)
                reporter.join()
            if unsubmitted:
                if isinstance(unsubmitted[0], RemoteError):
                    raise unsubmitted[0]  # refused, as a synchronous submission would raise
                result.error = failure[0]  # no daemon answered: none has a job to cancel
            elif failure:
                result.error = failure[0]
                # best effort: the daemon may be gone, and a job it lost needs no cancel
                client.deadline = max(client.deadline, time.monotonic() + self.request_timeout_s)
                try:
                    client.call("cancel_job", job.id, resubmit=False)
                except (TimeoutError, RemoteError) as exc:
                    log.warning("event=cancel_failed job=%s error=%r", job.id, str(exc))
            elif recurring:
                try:
                    client.call("iteration", job.id, self._iteration, step_s=result.jct_s,
                                compute_s=[result.compute_s[c.id] for c in job.computes],
                                transfer_s=[result.transfer_s[t.id] for t in job.transfers])
                except TimeoutError as exc:
                    result.error = str(exc)
            else:
                try:
                    client.call("job_finished", job.id, result.jct_s)
                except TimeoutError as exc:
                    result.error = str(exc)
        finally:
            if reporter is not None and reporter.is_alive():
                reports.put(None)
                reporter.join(30.0)
            if client is not self._session:
                client.close()
            result.reconnects, result.resubmits = client.reconnects, client.resubmits
        if result.error:
            log.warning("event=job_failed job=%s error=%r", job.id, result.error)
        return result

    def run_iterations(self, n: int, timeout_s: float = 600.0, *, template: Job | None = None,
                       compute_noise: float = 0.0, seed: int = 0) -> list[JobResult]:
        """Run the job as a recurring one: register it once, run its DAG ``n`` times back to back.

        Each iteration runs as :meth:`run` does, without per-node reports: its
        end is one ``iteration`` message with its step time and every
        compute's and transfer's duration, from which the daemon learns the
        job's timings. The job then ends with ``job_finished``.

        Parameters
        ----------
        n : int
            Iterations (>= 1).
        timeout_s : float
            For each iteration, as :meth:`run`'s.
        template : Job, optional
            The DAG registered (its declared durations; same nodes as the job),
            default the job itself: the computes run the job's durations.
        compute_noise : float
            Each compute runs its duration times ``1 + compute_noise * z``, ``z``
            standard normal, drawn anew each iteration (at least 0).
        seed : int

        Returns
        -------
        list of JobResult
            One per iteration run (the last one failed if its ``error`` is set).

        Raises
        ------
        RemoteError
            The daemon refused the template or a report.
        """
        import numpy as np

        if n < 1:
            raise ValidationError(f"n: must be >= 1, got {n!r}")
        tpl = template or self.job
        if [c.id for c in tpl.computes] != [c.id for c in self.job.computes] or \
                [t.id for t in tpl.transfers] != [t.id for t in self.job.transfers] or tpl.id != self.job.id:
            raise ValidationError("template: must have the job's id and nodes, in the job's order")
        rng = np.random.default_rng(seed)
        ids = [c.id for c in self.job.computes]
        self.template = tpl
        self._session = _Session(self, time.monotonic() + timeout_s)
        out: list[JobResult] = []
        try:
            self._submitted(self._session.call("request", MsgType.REGISTER_TEMPLATE,
                                                      {"job": tpl.to_dict(), **self._ticket_ask()}))
            for i in range(1, n + 1):
                z = rng.standard_normal(len(ids)) if compute_noise else np.zeros(len(ids))
                self._factor = dict(zip(ids, np.maximum(1.0 + compute_noise * z, 0.0).tolist(), strict=True))
                self._iteration = i
                res = self.run(timeout_s)
                out.append(res)
                if res.error:
                    break
            else:
                self._session.deadline = time.monotonic() + timeout_s
                self._session.call("job_finished", self.job.id, sum(r.jct_s for r in out))
        finally:
            self._iteration = 0
            self._factor = {}
            self._session.close()
            self._session = None
        return out

    @classmethod
    def _submit_then_report(cls, session: _Session, job: Job, reports: queue.SimpleQueue, failure: list[str],
                            unsubmitted: list[Exception], all_done: threading.Event) -> None:
        # The asynchronous runner's reporter: the submission, then the reports. A refusal
        # or no reply ends the run (the DAG has started meanwhile: what it sent stays sent).
        try:
            session.runner._submitted(session.call("submit", job, **session.runner._ticket_ask()))
        except (TimeoutError, RemoteError) as exc:
            unsubmitted.append(exc)
            failure.append(f"submit: {exc}")
            all_done.set()
            return
        finally:
            session.runner._flow_job_known.set()  # transfers waiting for it go on (or end)
        cls._report_loop(session, job.id, reports, failure, all_done)

    def _submitted(self, reply: dict) -> None:
        """The submission's reply: the id the job's flows go by (``flow_job`` with keys)."""
        flow_job = reply.get("flow_job")
        if flow_job is None and self.keys is not None:
            # a retried submission whose first try got there: the daemon said only that
            # the job runs. Its flows go by "<key name>:<job id>" (jobs.scoped_id)
            flow_job = f"{self.key_name}:{self.job.id}"
        self.flow_job = flow_job or self.job.id
        self._take_tickets(reply)
        self._flow_job_known.set()

    def _ticket_ask(self) -> dict:
        """What a submission adds to ask for the job's tickets: ``uid``, when the run
        registers its flows with agents (none otherwise: nothing would use them)."""
        return {"uid": self.uid} if self.agents else {}

    def _take_tickets(self, reply: dict) -> None:
        """Hold the ``tickets`` of a submission's reply (a reply without them leaves
        :meth:`_ticket` to ask ``attach_job``)."""
        got = reply.get("tickets") if isinstance(reply, dict) else None
        if not isinstance(got, dict):
            return
        now = time.monotonic()
        with self._ticket_lock:
            self._ticket_s = float(reply.get("ticket_s", self._ticket_s))
            for host, t in got.items():
                self._tickets[host], self._tickets_at[host] = t, now

    def _ticket(self, host: str) -> dict | None:
        """The daemon's ticket for the job on ``host`` for this process's user, fresh.

        The submission's reply brings one per host of the job; one past half its
        ``ticket_s`` (or missing: a resent submission's reply has none) is asked again
        with ``attach_job``, on a client of its own (the session's is its reporter's),
        so a job running longer than a ticket registers its later flows with a valid
        one. None if the daemon gives none (the agent then leaves the flow unpaced).
        """
        self._flow_job_known.wait()  # the submission's reply, with the tickets
        with self._ticket_lock:
            t = self._tickets.get(host)
            age = time.monotonic() - self._tickets_at.get(host, -1e18)
            if age < (self._ticket_s / 2 if self._ticket_s > 0 else NO_TICKET_RETRY_S):
                return t  # None after a failed ask: not asked again before then
            try:
                with Client(self.endpoint, timeout_s=self.request_timeout_s, keys=self.keys) as c:
                    rep = c.attach_job(self.job.id, host, uid=self.uid)
            except Exception as exc:  # noqa: BLE001 - the flow goes unpaced, the job on
                self._tickets_at[host] = time.monotonic()
                if not self._ticket_failed:
                    self._ticket_failed = True
                    log.warning("event=runner_no_ticket job=%s host=%s error=%r", self.job.id, host, str(exc))
                return t
            if "ticket" in rep:
                self._tickets[host], self._tickets_at[host] = rep["ticket"], time.monotonic()
                self._ticket_s = float(rep.get("ticket_s", self._ticket_s))
            return self._tickets.get(host)

    def _flow_id(self, nid: str) -> str:
        # With keys the daemon scopes the job's id by the client's key (its reply says
        # how): an asynchronous run's transfers wait for that reply before they start.
        if self.keys is not None:
            self._flow_job_known.wait()
        return flow_id(self.flow_job, nid)

    @staticmethod
    def _report_loop(session: _Session, job_id: str, reports: queue.SimpleQueue, failure: list[str],
                     all_done: threading.Event) -> None:
        # Sends the queued reports in order until None, every report queued meanwhile in
        # one message (at most MAX_REPORT_EVENTS); the first failure ends the run, as a
        # failed synchronous report would, and later reports are dropped.
        end = False
        while not end:
            batch = []
            item = reports.get()
            while item is not None:
                batch.append(item)
                if len(batch) >= MAX_REPORT_EVENTS:
                    break
                try:
                    item = reports.get_nowait()
                except queue.Empty:
                    break
            end = item is None
            if failure or not batch:
                continue
            try:
                got = session.call("report", job_id, [b[:3] for b in batch])
                for (_, _, _, then), rep in zip(batch, got, strict=True):
                    if then is not None:
                        then(rep)
            except Exception as exc:  # noqa: BLE001 - reported, and the run ends
                failure.append(f"report of {len(batch)} events: {type(exc).__name__}: {exc}")
                all_done.set()


__all__ = ["UNREGISTERED_MAX_S", "JobResult", "JobRunner", "unregistered_max_bytes"]
