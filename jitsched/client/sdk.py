"""The training-loop SDK: a recurring job registered once, its steps reported in the background, never in training's way."""

# One module although past 500 lines: Trainer is a training loop's side and one
# background thread that alone talks to the daemon (register, report, renew the lease,
# register again a template the daemon lost); both share one queue of reports and the
# job's registration.

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jitsched.dag.model import CLASSES, Job
from jitsched.errors import JitschedError, RemoteError, ValidationError
from jitsched.keys import DEFAULT_CLIENT
from jitsched.protocol import ErrorCode, MsgType, endpoint_problem, split_endpoints

log = logging.getLogger("jitsched.client.sdk")

# A refusal the daemon may not repeat once it is less busy or its journal writes again:
# the report waits, as it would for a daemon that does not answer.
_TRANSIENT = frozenset({ErrorCode.OVERLOADED, ErrorCode.UNAVAILABLE})
# How often a process of a job that another process registers asks whether it is there yet.
FOLLOW_POLL_S = 0.2


@dataclass(frozen=True)
class TrainerOptions:
    """How a :class:`Trainer` reaches the daemon and its host's agent.

    Attributes
    ----------
    endpoint : str
        The daemon's job endpoint.
    keys : str or Path, optional
        A key directory (``jitsched keys init``): connect as client ``key_name``.
    key_name : str
    host : str, optional
        The cluster host this process runs on. With an agent listening for it
        (``agent_namespace``, ``agent_dir`` as the agent was started with), the
        process and the children it forks are attached to the job there: their
        TCP connections are ranked as the job's transfers. None: no attach.
    agent_namespace, agent_dir : str
        Where that agent's local socket is (:func:`jitsched.localreg.local_address`).
    peers : mapping of str to str
        ``{"address" or "address:port": host}``: peer hosts of the job's
        connections beyond the addresses the daemon's cluster gives.
    request_timeout_s : float
        A request without a reply within this long finds the daemon unreachable.
    retry_s : float
        While unreachable, the daemon is tried again this often.
    lease_renew_s : float
        With no request for this long (a long step, an evaluation pause), the
        job's lease is renewed; keep it well under ``[daemon] job_lease_s``.
    max_pending : int
        Step reports waiting to be sent; past it, a step's report is merged
        into the newest waiting one (one message for several steps).
    job_class : str, optional
        The job's priority class (``critical``, ``normal``, ``best-effort``) when the
        DAG does not carry one; None: the DAG's own (normal if it has none).
    """

    endpoint: str = "tcp://127.0.0.1:5555"
    keys: str | Path | None = None
    key_name: str = DEFAULT_CLIENT
    host: str | None = None
    agent_namespace: str = ""
    agent_dir: str | Path | None = None
    peers: Mapping[str, str] = field(default_factory=dict)
    request_timeout_s: float = 2.0
    retry_s: float = 2.0
    lease_renew_s: float = 60.0
    max_pending: int = 64
    job_class: str | None = None

    def __post_init__(self) -> None:
        if self.job_class is not None and self.job_class not in CLASSES:
            raise ValidationError(f"job_class: expected one of {', '.join(CLASSES)}, got {self.job_class!r}")
        for name in ("request_timeout_s", "retry_s", "lease_renew_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValidationError(f"{name}: must be a positive number of seconds, got {v!r}")
        if isinstance(self.max_pending, bool) or not isinstance(self.max_pending, int) or self.max_pending < 1:
            raise ValidationError(f"max_pending: must be an integer >= 1, got {self.max_pending!r}")
        if not isinstance(self.endpoint, str) or "://" not in self.endpoint:
            raise ValidationError(f"endpoint: expected e.g. tcp://HOST:PORT, got {self.endpoint!r}")
        for ep in split_endpoints(self.endpoint) or [self.endpoint]:
            why = endpoint_problem(ep)
            if why:
                raise ValidationError(f"endpoint: {ep!r}: {why}")


@dataclass
class TrainerStats:
    """What a :class:`Trainer` did, counted (read at any time; updated by its thread).

    ``state`` is ``"connecting"`` (not registered yet), ``"ok"``,
    ``"unreachable"`` (no reply: steps are not reported until the daemon is
    back), ``"ended"`` (the daemon ended or refused the job: nothing is
    reported any more; ``last_error`` says why) or ``"closed"``.
    """

    state: str = "connecting"
    steps: int = 0  # steps marked
    sent: int = 0  # iteration messages the daemon took
    coalesced: int = 0  # steps merged into another step's message (the daemon was slow)
    dropped: int = 0  # steps not reported (the daemon was unreachable, or the job had ended)
    rejected: int = 0  # reports the daemon refused (e.g. durations of the wrong length)
    outages: int = 0  # times the daemon went unreachable
    registrations: int = 0  # template registrations (more than 1: the daemon lost the job)
    lease_renewals: int = 0
    attached: bool = False  # this process's connections are attached on its host's agent
    attach_error: str = ""
    last_error: str = ""


@dataclass
class _Report:
    """One iteration message: step ``n`` (the newest of ``count`` merged steps) and its
    measurements, averages over the merged steps."""

    n: int
    count: int
    step_s: float | None
    compute_s: list[float] | None
    transfer_s: list[float] | None
    nbytes: list[float] | None

    def merge(self, o: _Report) -> None:
        w = o.count / (self.count + o.count)
        self.step_s = _mix(self.step_s, o.step_s, w)
        for name in ("compute_s", "transfer_s", "nbytes"):
            a, b = getattr(self, name), getattr(o, name)
            setattr(self, name, [x + w * (y - x) for x, y in zip(a, b, strict=False)]
                    if a is not None and b is not None and len(a) == len(b) else b)
        self.n, self.count = o.n, self.count + o.count


def _mix(a: float | None, b: float | None, w: float) -> float | None:
    return b if a is None or b is None else a + w * (b - a)


def _floats(x: Sequence[float] | None) -> list[float] | None:
    return None if x is None else [float(v) for v in x]


class Trainer:
    """What a training script holds: its job's DAG registered once, each step reported
    in the background.

    ``job`` is the DAG of one training step (a :class:`Job` or a native job map),
    registered as a recurring job's template; or the id of a job that another
    process of the same training registers (then this process only attaches
    its connections on its host, and its steps are counted, not reported).

    Marking a step (:meth:`step` or :meth:`step_done`) only queues its report:
    one thread sends each as one ``iteration`` message, renews the job's lease
    when no step was reported for ``lease_renew_s``, registers the template
    again if the daemon lost it (a restart without a journal), and attaches
    this process on its host's agent once registered. A daemon that does not
    answer costs training nothing: the reports are dropped (``stats.dropped``)
    until it answers again, which the first outage logs as a warning (later
    ones at info level) and ``stats.outages`` counts.

    Parameters
    ----------
    job : Job, mapping or str
    options : TrainerOptions, optional

    Examples
    --------
    >>> trainer = Trainer(job, TrainerOptions(endpoint="tcp://10.0.0.1:5555", host="h3"))  # doctest: +SKIP
    >>> for batch in data:                                                                # doctest: +SKIP
    ...     with trainer.step():
    ...         train_one_step(batch)
    >>> trainer.close()                                                                   # doctest: +SKIP
    """

    def __init__(self, job: Job | Mapping[str, Any] | str, options: TrainerOptions | None = None) -> None:
        self.options = options or TrainerOptions()
        if isinstance(job, str):
            self.template: dict[str, Any] | None = None
            self.job_id = job
        else:
            self.template = job.to_dict() if isinstance(job, Job) else dict(job)
            self.job_id = str(self.template.get("id", ""))
            if self.options.job_class is not None and self.options.job_class != "normal":
                self.template["class"] = self.options.job_class
            elif self.options.job_class == "normal":
                self.template.pop("class", None)
        if not self.job_id:
            raise ValidationError("job: a job id is required")
        self.flow_job: str | None = None  # the id the job's flows go by (with keys, client-scoped)
        self.stats = TrainerStats()
        self._pending: collections.deque[_Report] = collections.deque()
        self._inflight: _Report | None = None
        self._cv = threading.Condition()
        self._closing = False
        self._n = 0
        self._t0 = time.perf_counter()
        self._warned = False
        self._registered = False
        self._register_unanswered = False  # a registration went out and got no reply
        self._lease_lost = False  # a renewal said the job is not running: the next report tells why
        self._thread = threading.Thread(target=self._run, name=f"jitsched-sdk-{self.job_id}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ training side

    @contextlib.contextmanager
    def step(self, *, compute_s: Sequence[float] | None = None) -> Iterator[dict]:
        """Time the block as one step and report it when it ends (also when it raises).

        Yields a dict: set ``compute_s`` (each compute's duration in the
        template's order), ``transfer_s`` or ``nbytes`` in it to report them too.
        """
        got: dict[str, Any] = {"compute_s": compute_s}
        t0 = time.perf_counter()
        try:
            yield got
        finally:
            self.step_done(time.perf_counter() - t0, compute_s=got.get("compute_s"),
                           transfer_s=got.get("transfer_s"), nbytes=got.get("nbytes"))

    def step_done(self, step_s: float | None = None, *, compute_s: Sequence[float] | None = None,
                  transfer_s: Sequence[float] | None = None, nbytes: Sequence[float] | None = None) -> int:
        """Mark a step done (``step_s`` its time, seconds; default the daemon times the gap
        between reports), with what else it measured; returns the step's number (from 1).

        Never blocks on the daemon: the report is queued for the sending thread.
        """
        rep = _Report(0, 1, None if step_s is None else float(step_s), _floats(compute_s),
                      _floats(transfer_s), _floats(nbytes))
        with self._cv:
            self._n += 1
            rep.n = n = self._n
            self.stats.steps = n
            if self.template is None or self.stats.state in ("ended", "closed"):
                self.stats.dropped += self.template is not None
                return n
            if self.stats.state == "unreachable":
                # no backlog for a daemon that is away: only the newest step waits for it
                self.stats.dropped += sum(r.count for r in self._pending)
                self._pending.clear()
            if len(self._pending) >= self.options.max_pending and self._pending[-1] is not self._inflight:
                self._pending[-1].merge(rep)
                self.stats.coalesced += 1
            else:
                self._pending.append(rep)
            self._cv.notify()
        return n

    @property
    def connected(self) -> bool:
        """Whether the daemon answered the last request (and took the job)."""
        return self.stats.state == "ok"

    def close(self, timeout_s: float = 10.0) -> None:
        """Send what is queued, report the job finished (``job_finished``), detach this
        process from its agent and stop the thread; within about ``timeout_s``."""
        with self._cv:
            if self._closing:
                return
            self._closing = True
            self._close_by = time.monotonic() + timeout_s
            self._cv.notify()
        self._thread.join(timeout_s + self.options.request_timeout_s)

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the sending thread

    def _run(self) -> None:
        from jitsched.client import Client

        opts = self.options
        client = None
        last_request = time.monotonic()
        try:
            # inside the try: keys that cannot be read end the trainer as any failure does
            client = Client(opts.endpoint, timeout_s=opts.request_timeout_s, keys=opts.keys,
                            key_name=opts.key_name)
            while True:
                with self._cv:
                    closing = self._closing
                    rep = self._pending[0] if self._pending and self._registered else None
                    self._inflight = rep  # being sent: no step is merged into it any more
                if closing and (not self._registered or rep is None or time.monotonic() > self._close_by
                                or self.stats.state != "ok"):
                    break
                if self.stats.state == "ended":
                    self._wait(None)
                    continue
                if not self._registered:
                    client, wait_s = self._register(client)
                    if wait_s:
                        self._wait(wait_s, retry=True)
                    continue
                if rep is not None:
                    client, outcome = self._send(client, rep)
                    last_request = time.monotonic()
                    if outcome == "retry" and self.stats.state == "unreachable":
                        self._wait(opts.retry_s, retry=True)
                    continue
                due = last_request + opts.lease_renew_s - time.monotonic()
                if due <= 0 and self.template is not None and not self._lease_lost:
                    client, _ = self._call(client, "renew_lease", [self.job_id])
                    last_request = time.monotonic()
                    continue
                self._wait(due if due > 0 else None)
            self._finish(client)
        except Exception as exc:  # noqa: BLE001 - the SDK must never take training down
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
            self.stats.state = "ended"
            log.error("event=sdk_failed job=%s error=%r", self.job_id, self.stats.last_error)
        finally:
            if client is not None:
                with contextlib.suppress(Exception):  # noqa: BLE001 - see above
                    client.close()
            if self.stats.state != "ended":
                self.stats.state = "closed"

    def _wait(self, timeout_s: float | None, retry: bool = False) -> None:
        # a retry waits out its time whatever is queued; only closing cuts it short
        with self._cv:
            if self._closing or (not retry and self._pending and self._registered):
                return
            self._cv.wait(timeout_s)

    def _call(self, client, name: str, *args, **kwargs):
        """``client.<name>(*args)``: (client, reply), or (client, None) when the daemon did
        not answer (then a fresh client: a request the old socket still holds must not
        reach a restarted daemon late), or (client, RemoteError) when it refused."""
        try:
            rep = getattr(client, name)(*args, **kwargs)
        except TimeoutError as exc:
            return self._unreachable(client, str(exc)), None
        except RemoteError as exc:
            if exc.code in _TRANSIENT:
                return self._unreachable(client, str(exc)), None
            self._reachable()
            return client, exc
        self._reachable()
        if name == "renew_lease":
            self.stats.lease_renewals += 1
            if self.job_id in rep.get("not_running", ()):
                self._lease_lost = True
        return client, rep

    def _unreachable(self, client, why: str):
        from jitsched.client import Client

        st = self.stats
        if st.state != "unreachable":
            st.outages += 1
            st.state = "unreachable"
            with self._cv:  # only the newest report waits for the daemon (see step_done)
                while len(self._pending) > 1:
                    st.dropped += self._pending.popleft().count
            msg = ("event=sdk_unreachable job=%s endpoint=%s why=%r: training goes on unscheduled, "
                   "steps are not reported; retrying every %g s")
            args = (self.job_id, self.options.endpoint, why, self.options.retry_s)
            if self._warned:
                log.info(msg, *args)
            else:
                self._warned = True
                log.warning(msg, *args)
        st.last_error = why
        client.close()
        o = self.options
        return Client(o.endpoint, timeout_s=o.request_timeout_s, keys=o.keys, key_name=o.key_name)

    def _reachable(self) -> None:
        if self.stats.state == "unreachable":
            log.info("event=sdk_resumed job=%s outages=%d", self.job_id, self.stats.outages)
        if self.stats.state in ("unreachable", "connecting"):
            self.stats.state = "ok" if self._registered else "connecting"

    def _end(self, why: str) -> None:
        st = self.stats
        st.state, st.last_error = "ended", why
        with self._cv:
            st.dropped += sum(r.count for r in self._pending)
            self._pending.clear()
        log.warning("event=sdk_ended job=%s why=%r: training goes on, steps are no longer reported",
                    self.job_id, why)

    def _register(self, client):
        """Register the template (or, for a job registered elsewhere, find it); then attach.
        Returns (client, seconds to wait before trying again: 0 when done)."""
        if self.template is None:
            client, rep = self._call(client, "attach_job", self.job_id, self.options.host or "", os.geteuid())
            if isinstance(rep, RemoteError) and rep.code == ErrorCode.UNKNOWN_HOST and not self.options.host:
                self._registered = True  # the job is there, and no host to attach on: done
                self.stats.state = "ok"
                self.flow_job = self._scoped_id()
                return client, 0.0
            if isinstance(rep, RemoteError) and rep.code == ErrorCode.UNKNOWN_JOB:
                # the daemon answers, the job's owner has not registered it yet: its first
                # steps are the ones whose connections matter most, so look again soon
                return client, min(FOLLOW_POLL_S, self.options.retry_s)
            if not isinstance(rep, dict):
                if isinstance(rep, RemoteError):
                    self._end(str(rep))
                return client, self.options.retry_s
            self._registered = True
            self.stats.state = "ok"
            self.flow_job = rep["job_id"]
            self._attach(rep.get("peers", {}), rep.get("ticket"))
            return client, 0.0
        client, rep = self._call(client, "request", MsgType.REGISTER_TEMPLATE, {"job": self.template})
        if isinstance(rep, RemoteError):
            if rep.code != ErrorCode.DUPLICATE_JOB or not self._register_unanswered:
                # duplicate_job with no earlier try unanswered: another trainer holds the job
                self._end(str(rep))
                return client, 0.0
            # an earlier try got there, its reply did not: the daemon holds the job by its
            # client-scoped id (jobs.scoped_id)
            rep = {"job_id": self.job_id, "flow_job": self._scoped_id()}
        if rep is None:
            self._register_unanswered = True
            return client, self.options.retry_s
        self._register_unanswered = False
        self.flow_job = rep.get("flow_job") or rep["job_id"]
        self._registered = True
        self._lease_lost = False
        self.stats.registrations += 1
        self.stats.state = "ok"
        if self.options.host and not self.stats.attached:
            client, known = self._call(client, "attach_job", self.job_id, self.options.host, os.geteuid())
            if isinstance(known, dict):
                self._attach(known.get("peers", {}), known.get("ticket"))
            elif isinstance(known, RemoteError):
                self.stats.attach_error = str(known)
        return client, 0.0

    def _scoped_id(self) -> str:
        # the id the daemon holds this client's job by (jobs.scoped_id): "<key name>:<id>" with keys
        return f"{self.options.key_name}:{self.job_id}" if self.options.keys is not None else self.job_id

    def _attach(self, peers: Mapping[str, str], ticket: dict | None) -> None:
        """Attach this process on the options' host with the daemon's ``ticket`` for this user."""
        from jitsched.localreg import LocalSocketError, attach, local_address

        o = self.options
        if not o.host or self.stats.attached:
            return
        where = local_address(o.host, o.agent_namespace, o.agent_dir)
        try:
            attach(where, self.flow_job or self.job_id, pids=[os.getpid()], peers=dict(peers) | dict(o.peers),
                   ticket=ticket, timeout_s=o.request_timeout_s)
        except (OSError, LocalSocketError, RemoteError, JitschedError) as exc:
            self.stats.attach_error = f"{type(exc).__name__}: {exc}"
            log.info("event=sdk_not_attached job=%s host=%s why=%r", self.job_id, o.host, self.stats.attach_error)
            return
        self.stats.attached, self.stats.attach_error = True, ""

    def _send(self, client, rep: _Report):
        """Send the oldest queued report: (client, "sent" | "retry" | "dropped")."""
        client, got = self._call(client, "iteration", self.job_id, rep.n, step_s=rep.step_s,
                                 compute_s=rep.compute_s, transfer_s=rep.transfer_s, nbytes=rep.nbytes)
        if got is None:
            return client, "retry"  # the daemon is away: the report stays (the newest only)
        if isinstance(got, RemoteError):
            if got.code == ErrorCode.UNKNOWN_JOB:
                self._registered = False  # the daemon lost the job: registered anew, then sent
                log.info("event=sdk_reregister job=%s", self.job_id)
                return client, "retry"
            if got.code == ErrorCode.JOB_ENDED:
                self._end(str(got))
                return client, "dropped"
            self.stats.rejected += 1
            self.stats.last_error = str(got)
            if self.stats.rejected == 1:
                log.warning("event=sdk_report_refused job=%s error=%r", self.job_id, str(got))
            self._pop(rep)
            return client, "dropped"
        self.stats.sent += 1
        self._lease_lost = False
        self._pop(rep)
        return client, "sent"

    def _pop(self, rep: _Report) -> None:
        with self._cv:
            if self._pending and self._pending[0] is rep:
                self._pending.popleft()

    def _finish(self, client) -> None:
        """Closing: the job finished (its template's owner says so) and the attach undone."""
        if self.template is not None and self._registered and self.stats.state == "ok":
            self._call(client, "job_finished", self.job_id, time.perf_counter() - self._t0)
        with self._cv:
            self.stats.dropped += sum(r.count for r in self._pending)
            self._pending.clear()
        if self.stats.attached:
            from jitsched.localreg import detach, local_address

            o = self.options
            with contextlib.suppress(OSError, RemoteError, JitschedError):
                detach(local_address(o.host, o.agent_namespace, o.agent_dir), self.flow_job or self.job_id,
                       timeout_s=o.request_timeout_s)
            self.stats.attached = False


__all__ = ["Trainer", "TrainerOptions", "TrainerStats"]
