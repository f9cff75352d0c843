"""The daemon's client library: submit jobs and templates, report progress, attach connections, announce flows."""

# One module although past 500 lines: Client is one ZeroMQ socket and its request loop
# (the deadline, and with replicas the move to the leader), and each of its methods is
# one request type of jitsched.protocol, checked and sent through that loop.

from __future__ import annotations

import contextlib
import math
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import zmq

from jitsched.dag.model import Job
from jitsched.errors import ValidationError
from jitsched.keys import (
    CLIENTS,
    DEFAULT_CLIENT,
    CurveKeys,
    curve_keys,
    handshake_failure,
    handshake_monitor,
)
from jitsched.localreg import register_flow, unregister_flow
from jitsched.protocol import (
    MAX_MESSAGE_BYTES,
    ErrorCode,
    MsgType,
    RemoteError,
    background_flow_id,
    decode_reply,
    encode_request,
    endpoint_problem,
    leader_named,
    next_id,
    split_endpoints,
)

# With replicas: a replica silent this long is left for the next, and one that knows no
# leader yet is asked again after NOT_LEADER_RETRY_S (a dead leader's lease lapses first)
REPLICA_WAIT_S = 1.0
NOT_LEADER_RETRY_S = 0.1
# a send the socket refused although a poll found room (its peer left in between) is tried
# again after this many seconds, within the request's deadline
SEND_RETRY_S = 0.01


class Client:
    """A connection to the daemon's job socket (one per thread).

    Parameters
    ----------
    endpoint : str
        The daemon's job endpoint, e.g. ``tcp://127.0.0.1:5555``; or the job
        endpoints of daemon replicas separated by commas: a request goes to the
        leader (a replica that does not lead answers ``not_leader`` naming it; one
        that does not answer within :data:`REPLICA_WAIT_S` is left for the next).
    timeout_s : float
        How long to wait for a reply, seconds (with replicas: over all of them).
    keys : CurveKeys or path, optional
        Connect as a CURVE client: these keys, or those of client ``key_name`` in
        a key directory (``jitsched keys init``). The daemon then lets this
        client act only on the jobs it submitted. None: plaintext.
    key_name : str
        The client's name in the key directory.

    Raises
    ------
    KeyFileError
        ``keys`` is a directory without this client's keys.
    ValidationError
        ``endpoint`` is no ZeroMQ endpoint, or ``timeout_s`` is not a positive finite number.
    """

    def __init__(self, endpoint: str, timeout_s: float = 10.0, ctx: zmq.Context | None = None, *,
                 keys: CurveKeys | str | Path | None = None, key_name: str = DEFAULT_CLIENT) -> None:
        if isinstance(timeout_s, bool) or not (isinstance(timeout_s, (int, float))
                                               and 0 < timeout_s < math.inf):
            raise ValidationError(f"timeout_s: must be a positive finite number of seconds, got {timeout_s!r}")
        self.endpoints = split_endpoints(endpoint) or [endpoint]
        for ep in self.endpoints:
            why = endpoint_problem(ep)
            if why:
                raise ValidationError(f"{ep!r}: {why}")
        self.endpoint = self.endpoints[0]
        self.timeout_s = timeout_s
        self.keys = curve_keys(keys, CLIENTS, key_name)
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.leader_moves = 0  # switches to another replica, since start
        # sends of the last request that no reply answered: a replica may have acted on
        # one and died before answering, so a refusal of a resend may be of this request
        self.unanswered_sends = 0
        self._open(self.endpoint)

    def _open(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 4 * MAX_MESSAGE_BYTES)
        if self.keys is not None:
            self.keys.apply(self.sock)
        # a refused handshake looks like silence: the monitor says why a request timed out
        self._monitor = handshake_monitor(self.sock)
        try:
            self.sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise ValidationError(f"{endpoint!r}: cannot connect ({zmq.strerror(exc.errno)}): not an endpoint such as "
                                  "tcp://127.0.0.1:5555 or ipc:///run/jitsched.sock") from None

    def close(self) -> None:
        """Close the socket (and the context if this client made it); again: nothing."""
        if self.sock.closed:
            return
        self.sock.disable_monitor()
        self._monitor.close(0)
        self.sock.close(0)
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _move(self, endpoint: str) -> None:
        """Talk to ``endpoint`` from now on (another replica)."""
        self.sock.disable_monitor()
        self._monitor.close(0)
        self.sock.close(0)
        self._open(endpoint)
        self.leader_moves += 1

    def request_raw(self, data: bytes, req_id: int) -> dict:
        """Send one already-encoded request and wait for the reply with ``req_id``.

        With replicas, the request goes again to the leader a ``not_leader``
        reply names, or to the next replica when one does not answer, until
        ``timeout_s`` has passed.

        Raises
        ------
        RemoteError
            The daemon answered with an error (``code``, ``message``).
        TimeoutError
            No reply within ``timeout_s`` (with replicas: none of them led in that time).
        """
        self.unanswered_sends = 0
        if len(self.endpoints) == 1:
            return self._request_once(data, req_id, self.timeout_s)
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                return self._request_once(data, req_id, min(left, REPLICA_WAIT_S))
            except RemoteError as exc:
                if exc.code != ErrorCode.NOT_LEADER:
                    raise
                if time.monotonic() + NOT_LEADER_RETRY_S >= deadline:
                    # no replica led within the timeout: as silence is, a reason to try again
                    raise TimeoutError(f"no leader among {', '.join(self.endpoints)} answered within "
                                       f"{self.timeout_s} s ({exc.message})") from None
                named = leader_named(exc.message)
                if named is not None and named[0] != self.endpoint:
                    self._move(named[0])
                else:  # no leader yet: this replica learns of the next one first
                    time.sleep(NOT_LEADER_RETRY_S)
            except TimeoutError:
                self.unanswered_sends += 1
                if time.monotonic() >= deadline - 0.01:
                    raise
                i = self.endpoints.index(self.endpoint) if self.endpoint in self.endpoints else -1
                self._move(self.endpoints[(i + 1) % len(self.endpoints)])

    def _request_once(self, data: bytes, req_id: int, timeout_s: float) -> dict:
        deadline = time.monotonic() + timeout_s
        # a DEALER with no connected peer (none yet, or a refused CURVE handshake) blocks
        # a plain send forever: the send waits for room within the same deadline
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(max(1, int(left * 1000)), zmq.POLLOUT):
                why = handshake_failure(self._monitor, self.keys is not None)
                raise TimeoutError(f"no connection to {self.endpoint} within {timeout_s:.3g} s"
                                   + (f": {why}" if why else ""))
            try:
                self.sock.send(data, zmq.NOBLOCK)
                break
            except zmq.Again:
                # the peer left between the poll and the send (a refused CURVE handshake
                # drops the connection it had): wait for room again
                time.sleep(SEND_RETRY_S)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                why = handshake_failure(self._monitor, self.keys is not None)
                raise TimeoutError(f"no reply from {self.endpoint} within {timeout_s:.3g} s"
                                   + (f": {why}" if why else ""))
            rep = decode_reply(self.sock.recv())
            if rep.id != req_id and rep.id != 0:
                continue  # a late reply to an earlier, timed-out request
            if not rep.ok:
                raise RemoteError(rep.code, rep.message, rep.detail)
            return rep.body

    def request(self, type_: str, body: dict | None = None) -> dict:
        """Send a request of ``type_`` and return the reply body."""
        rid = next_id()
        return self.request_raw(encode_request(type_, body or {}, rid), rid)

    # ------------------------------------------------------------------ job side

    def submit_job(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None) -> str:
        """Submit a native-format job map (or a :class:`Job`); returns the job id."""
        return self.submit(job, cluster)["job_id"]

    def submit(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None,
               if_unguaranteed: str | None = None, uid: int | None = None) -> dict:
        """:meth:`submit_job`, returning the whole reply: ``job_id``, and with keys
        ``flow_job``, the job id its flows go by in the agents' schedules
        (``"<client>:<job id>"``: each client's job ids are its own).

        ``if_unguaranteed`` ("refuse", the daemon's default, or "normal"): what a critical
        job no reservation can hold becomes. Refused, :class:`RemoteError`'s ``detail``
        names the bottleneck port and the earliest start; admitted as normal, the reply's
        ``class`` is "normal" and its ``unguaranteed`` says the same.

        With replicas, a ``duplicate_job`` refusal after a send no reply answered is this
        submission's own (a replica acted on it, then died or answered too late): the
        reply is then ``{"job_id": ..., "resent": True}``.

        ``uid``: the local user that will register the job's sockets with its hosts'
        agents (usually ``os.geteuid()``): the reply then carries ``tickets``,
        ``{host: ticket}`` for every host of the job's transfers, valid ``ticket_s``
        seconds (:func:`jitsched.localreg.register_flow` takes them; ask
        :meth:`attach_job` with ``uid`` for new ones)."""
        body: dict[str, Any] = {"job": job.to_dict() if isinstance(job, Job) else dict(job)}
        if cluster is not None:
            body["cluster"] = dict(cluster)
        if if_unguaranteed is not None:
            body["if_unguaranteed"] = if_unguaranteed
        if uid is not None:
            body["uid"] = int(uid)
        try:
            return self.request(MsgType.SUBMIT_JOB, body)
        except RemoteError as exc:
            if exc.code != ErrorCode.DUPLICATE_JOB or not self.unanswered_sends:
                raise
            return {"job_id": str(body["job"].get("id")), "resent": True}

    def submit_graph(self, graph_path: str | Path, *, ps_host: str, worker_host: str,
                     job_id: str | None = None) -> str:
        """Import a TensorFlow GraphDef file as a native job and submit it."""
        job = load_graph_job(graph_path, ps_host=ps_host, worker_host=worker_host, job_id=job_id)
        return self.submit_job(job)

    def transfer_started(self, job_id: str, transfer: str) -> None:
        """Report that ``transfer`` started sending."""
        self.request(MsgType.TRANSFER_STARTED, {"job_id": job_id, "transfer": transfer,
                                                "t_ns": time.time_ns()})

    def transfer_finished(self, job_id: str, transfer: str, nbytes: float | None = None) -> dict:
        """Report that ``transfer`` arrived; the reply says whether it met its LAT."""
        body: dict[str, Any] = {"job_id": job_id, "transfer": transfer, "t_ns": time.time_ns()}
        if nbytes is not None:
            body["bytes"] = nbytes
        return self.request(MsgType.TRANSFER_FINISHED, body)

    def compute_finished(self, job_id: str, compute: str, duration_s: float) -> None:
        """Report a compute op's measured duration (seconds)."""
        self.request(MsgType.COMPUTE_FINISHED, {"job_id": job_id, "compute": compute,
                                                "duration_s": float(duration_s),
                                                "t_ns": time.time_ns()})

    def report(self, job_id: str, events: list) -> list[dict]:
        """Several progress reports of one job in one round trip, applied in order.

        Parameters
        ----------
        events : list of [kind, node id, value]
            ``["started", transfer, None]``, ``["finished", transfer, bytes or
            None]``, ``["compute", compute, duration_s]``: what
            :meth:`transfer_started`, :meth:`transfer_finished` and
            :meth:`compute_finished` report one at a time.

        Returns
        -------
        list of dict
            Each event's reply (a ``finished`` one says whether the LAT was met).

        Raises
        ------
        RemoteError
            The first event the daemon refused (``events[i]: ...``); the ones
            before it were applied, and sending them again changes nothing.
        """
        return self.request(MsgType.REPORT, {"job_id": job_id, "events": [list(e) for e in events]})["results"]

    def job_finished(self, job_id: str, jct_s: float | None = None) -> dict:
        """Report the job done (JCT in seconds, measured by the job)."""
        body: dict[str, Any] = {"job_id": job_id, "t_ns": time.time_ns()}
        if jct_s is not None:
            body["jct_s"] = float(jct_s)
        return self.request(MsgType.JOB_FINISHED, body)

    def renew_lease(self, job_ids: Sequence[str]) -> dict:
        """Renew the leases of running jobs (``[daemon] job_lease_s``); returns ``{"renewed",
        "not_running"}``."""
        return self.request(MsgType.RENEW_LEASE, {"job_ids": list(job_ids)})

    def cancel_job(self, job_id: str) -> dict:
        """Cancel a job."""
        return self.request(MsgType.CANCEL_JOB, {"job_id": job_id})

    def register_template(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None) -> str:
        """Register a recurring job's DAG once (a native job map or a :class:`Job`); returns its job id.

        Its iterations are then reported with :meth:`iteration`; it ends with
        :meth:`job_finished` or :meth:`cancel_job`.
        """
        body: dict[str, Any] = {"job": job.to_dict() if isinstance(job, Job) else dict(job)}
        if cluster is not None:
            body["cluster"] = dict(cluster)
        return self.request(MsgType.REGISTER_TEMPLATE, body)["job_id"]

    def iteration(self, job_id: str, n: int, *, step_s: float | None = None,
                  compute_s: Sequence[float] | None = None, transfer_s: Sequence[float] | None = None,
                  nbytes: Sequence[float] | None = None) -> dict:
        """Report that iteration ``n`` (from 1) of recurring job ``job_id`` ended, with what it measured.

        Parameters
        ----------
        job_id : str
        n : int
        step_s : float, optional
            The iteration's time, seconds (default: the daemon times the gap between reports).
        compute_s : sequence of float, optional
            Each compute's duration, seconds, in the template's compute order.
        transfer_s, nbytes : sequence of float, optional
            Each transfer's time (seconds) and size (bytes), in the template's transfer order.

        Returns
        -------
        dict
            ``{"n", "counted", "ranked", "seq"}``: the count, whether this report was new,
            whether the schedule in force (``seq``) ranks the job.
        """
        body: dict[str, Any] = {"job_id": job_id, "n": int(n)}
        for key, val in (("compute_s", compute_s), ("transfer_s", transfer_s), ("bytes", nbytes)):
            if val is not None:
                body[key] = [float(v) for v in val]
        if step_s is not None:
            body["step_s"] = float(step_s)
        return self.request(MsgType.ITERATION, body)

    def background_started(self, flow: str, src: str, dst: str, nbytes: float, left: float | None = None,
                           uid: int | None = None) -> dict:
        """Announce a bulk transfer outside every DAG, ``nbytes`` bytes from host ``src`` to ``dst``.

        The default ``jit`` policy then ranks it among the jobs' transfers
        (small flows before large jobs, large ones after; Smith's rule) instead
        of after all of them, provided its sender's agent knows its socket as
        :func:`jitsched.protocol.background_flow_id` of its client-scoped name
        (with keys ``"/<client>:<flow>"``, the reply's ``flow_id``). Announcing
        the same name again with ``left``, the bytes it still has, keeps its rank
        current as it goes (the daemon does not see its progress otherwise;
        its key shrinks with what it has left).

        Parameters
        ----------
        flow : str
            The flow's name, this client's own.
        src, dst : str
            Its sending and receiving hosts.
        nbytes : float
            Its size, bytes.
        left : float, optional
            The bytes it still has (a progress report).
        uid : int, optional
            The local user that will register its socket with the agents
            (usually ``os.geteuid()``): the reply then carries the tickets the
            agents want for it.

        Returns
        -------
        dict
            ``{"flows": n}``, the announced flows the daemon holds, and with keys
            ``"flow_id"``, the id the agents know this one by (without keys,
            :func:`jitsched.protocol.background_flow_id` ``(flow)``); with ``uid``, ``"tickets"``,
            ``{host: ticket}`` for ``src`` and ``dst`` (for
            :func:`jitsched.localreg.register_flow`), valid ``"ticket_s"`` seconds.
        """
        body: dict[str, Any] = {"flow": flow, "src": src, "dst": dst, "bytes": float(nbytes)}
        if left is not None:
            body["left"] = float(left)
        if uid is not None:
            body["uid"] = int(uid)
        return self.request(MsgType.BACKGROUND_STARTED, body)

    def background_finished(self, flow: str) -> dict:
        """The announced flow ``flow`` ended; ``{"held": bool}`` (False: the daemon no longer had it)."""
        return self.request(MsgType.BACKGROUND_FINISHED, {"flow": flow})

    def attach_job(self, job_id: str, host: str, uid: int | None = None) -> dict:
        """Ask whether this client may attach job ``job_id``'s connections on ``host``.

        Parameters
        ----------
        job_id : str
            The job's id as this client submitted it.
        host : str
            The host whose agent is to attach the job's processes.
        uid : int, optional
            The local user (on ``host``) that will send the agent the ``attach``
            request, usually ``os.geteuid()``: the reply then carries the ticket
            the agent wants for it. None: no ticket (the ownership check and the
            addresses only).

        Returns
        -------
        dict
            ``{"job_id", "host", "peers": {address: host}, "hosts"}``: the id the
            job's flows go by (client-scoped), the addresses of the job's hosts the
            daemon's cluster knows and the job's hosts; with ``uid``, ``"ticket"``
            too, valid the daemon's ``attach_ticket_s`` (for
            :func:`jitsched.localreg.attach`).

        Raises
        ------
        RemoteError
            ``unknown_job`` (no such job, another client's, or it ended) or
            ``unknown_host``.
        """
        body: dict = {"job_id": job_id, "host": host}
        if uid is not None:
            body["uid"] = int(uid)
        return self.request(MsgType.ATTACH_JOB, body)

    def status(self, *, after: int | None = None, limit: int | None = None) -> dict:
        """Jobs, agents and the last plan summary.

        The daemon lists jobs a page at a time (``[limits] status_page_jobs``).
        By default every page is fetched and the jobs merged into the first
        reply (``pages`` says how many it took; ``next_after`` is None). With
        ``after`` or ``limit``, one page: the jobs submitted after seq
        ``after``, at most ``limit``, and ``next_after``, the cursor of the
        next page (None on the last).
        """
        if after is not None or limit is not None:
            body = {k: v for k, v in (("after", after), ("limit", limit)) if v is not None}
            return self.request(MsgType.STATUS, body)
        first = self.request(MsgType.STATUS, {})
        pages = 1
        cursor = first.get("next_after")
        while cursor is not None:
            page = self.request(MsgType.STATUS, {"after": cursor})
            first["jobs"].update(page["jobs"])
            pages += 1
            cursor = page.get("next_after")
        if "next_after" in first:
            first["next_after"] = None
            first["jobs_omitted"] = first.get("jobs_total", len(first["jobs"])) - len(first["jobs"])
        first["pages"] = pages
        return first


@contextlib.contextmanager
def announced_flow(client: Client, flow: str, src: str, dst: str, nbytes: float,
                   sock: socket.socket | None = None, agent: str | None = None
                   ) -> Iterator[Callable[[float], None]]:
    """A bulk transfer outside every DAG, announced to the daemon for the duration of the block.

    ``with announced_flow(c, "ckpt-7", "h3", "h9", size, sock, agent=...) as left: ...``
    announces ``nbytes`` bytes from host ``src`` to ``dst``
    (:meth:`Client.background_started`, with this process's uid when it
    registers a socket), registers ``sock`` with the local agent at ``agent``
    by the id and with the ticket for ``src`` the daemon's reply gives, so that
    the agent enforces the flow's rank, and on leaving (also on an error)
    unregisters it and says the flow finished. ``left(n)`` tells the
    daemon the flow has ``n`` bytes left (about once a second keeps its key
    current; the daemon re-solves on such reports at most once a second; one
    that fails is skipped). Leave the block only once the
    receiver has every byte: a socket closed with its tail in flight is an
    orphan, which the kernel may reset under the agent's short
    retransmission timeouts.

    The agent checks the ticket once, when it takes the socket: the
    announcement's reply carries a fresh one, so the flow registers however
    long it then lasts.
    """
    register = sock is not None and bool(agent)
    rep = client.background_started(flow, src, dst, nbytes, uid=os.geteuid() if register else None)
    fid = rep.get("flow_id", background_flow_id(flow)) if isinstance(rep, dict) else background_flow_id(flow)
    ctrl = None

    def left(n: float) -> None:
        with contextlib.suppress(OSError, RemoteError):
            client.background_started(flow, src, dst, nbytes, left=max(0.0, min(float(n), float(nbytes))))

    try:
        if register:
            ticket = (rep.get("tickets") or {}).get(src) if isinstance(rep, dict) else None
            ctrl = register_flow(agent, fid, sock, ticket=ticket)
        yield left
    finally:
        unregister_flow(ctrl, fid)
        with contextlib.suppress(OSError, RemoteError):
            client.background_finished(flow)


def load_graph_job(graph_path: str | Path, *, ps_host: str, worker_host: str,
                   job_id: str | None = None) -> Job:
    """A native job from a TensorFlow GraphDef file (JSON or text) via :mod:`jitsched.workloads.tfgraph`.

    The graph's ``ps`` task maps to ``ps_host`` and its ``worker`` task to ``worker_host``.
    """
    from jitsched.workloads.tfgraph import import_tf_graph

    name = Path(graph_path).name.split(".")[0]
    return import_tf_graph(graph_path, hosts={"ps": ps_host, "worker": worker_host},
                           job_id=job_id or name)


__all__ = ["Client", "RemoteError", "announced_flow", "load_graph_job"]
