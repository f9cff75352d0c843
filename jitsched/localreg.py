"""Local flow registration: a process hands a connected TCP socket to its host's agent for pacing.

Both sides use this module: the client library (:mod:`jitsched.client`)
registers the sockets of its transfers with :func:`register_flow`, and the
host agent (:mod:`jitsched.agents.agent`) listens at :func:`local_address`
(with :func:`listen_local`) and decodes the same messages. The exchange runs
over a Unix ``SOCK_SEQPACKET`` socket file in a directory only its owner may
enter (:func:`run_dir`): a ``register_flow`` request of
:mod:`jitsched.protocol` carrying the socket as ``SCM_RIGHTS``, the agent's
reply, and later an ``unregister_flow`` request on the same connection.

A descriptor goes only where both ends trust each other: the client sends
it only to a socket file owned by root or by its own user, whose listening
process (``SO_PEERCRED``) is root or its own user too; the agent accepts
connections only from root, its own user and the uids it was told to allow.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from jitsched.errors import JitschedError
from jitsched.protocol import (
    ErrorCode,
    MsgType,
    ProtocolError,
    RemoteError,
    Reply,
    decode_any,
    encode_request,
)

LOCAL_PREFIX = "jitsched-agent"
RUN_DIR_ENV = "JITSCHED_RUN_DIR"  # where agents put their sockets (default: see run_dir)
DIR_MODE = 0o700
SHARED_DIR_MODE = 0o711  # others may reach a socket they know the name of, not list them
SOCKET_MODE = 0o600
SHARED_SOCKET_MODE = 0o666  # SO_PEERCRED decides who is served
MAX_PATH = 107  # sun_path holds 108 bytes, the last a NUL
_UCRED = struct.Struct("3i")  # pid, uid, gid

log = logging.getLogger("jitsched.localreg")
_warned: set[tuple[str, str]] = set()  # (path, why): each refusal is logged once
_warned_lock = threading.Lock()


class LocalSocketError(JitschedError):
    """The agent's local socket cannot be set up safely (directory or file of another user)."""


def run_dir() -> Path:
    """The directory of the agents' sockets: ``$JITSCHED_RUN_DIR``, else
    ``$XDG_RUNTIME_DIR/jitsched-agents``, else ``/run/jitsched-agents`` for root,
    else ``<tmp>/jitsched-agents-<uid>``."""
    # a directory of its own: the agents make it 0700, which suits no other files
    configured = os.environ.get(RUN_DIR_ENV)
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "jitsched-agents"
    if os.geteuid() == 0:
        return Path("/run/jitsched-agents")
    return Path(tempfile.gettempdir()) / f"jitsched-agents-{os.geteuid()}"


def local_address(host: str, namespace: str = "", directory: str | Path | None = None) -> str:
    """The socket path where the agent of ``host`` takes flow registrations.

    ``namespace`` tells apart agents of the same host name (tests, the
    testbed); ``directory`` defaults to :func:`run_dir`.
    """
    name = f"{LOCAL_PREFIX}-{namespace}-{host}" if namespace else f"{LOCAL_PREFIX}-{host}"
    return str(Path(directory if directory is not None else run_dir()) / f"{name}.sock")


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a connected Unix socket."""
    return _UCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))[1]


def trusted_uids() -> frozenset[int]:
    """The users a client trusts with its sockets: root and itself."""
    return frozenset({0, os.geteuid()})


def private_dir(path: str | Path, shared: bool = False) -> Path:
    """Make ``path`` (and its parents) a directory of this user with mode 0700 (``shared``:
    0711, so that other allowed users can reach a socket in it) and return it.

    A directory at 0711 stays so: another agent of this user may serve other users from
    it, and each socket file's own mode keeps its agent's users apart.

    Raises
    ------
    LocalSocketError
        It exists and is not a directory of this user (a symlink, another user's),
        or it cannot be made.
    """
    p = Path(path)
    try:
        p.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    except OSError as exc:
        raise LocalSocketError(f"{p}: cannot make the directory ({exc.strerror}); "
                               f"give another or set {RUN_DIR_ENV}") from None
    st = os.lstat(p)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise LocalSocketError(f"{p}: not a directory of uid {os.geteuid()} (owner uid {st.st_uid}); "
                               f"remove it or set {RUN_DIR_ENV}")
    os.chmod(p, SHARED_DIR_MODE if shared or stat.S_IMODE(st.st_mode) == SHARED_DIR_MODE else DIR_MODE)
    return p


@dataclass
class LocalListener:
    """An agent's listening socket, its path, and the socket file's inode (to remove only it)."""

    sock: socket.socket
    path: str
    ino: int

    def close(self) -> None:
        """Close the socket and remove its file, unless another one took the path since."""
        try:
            if os.lstat(self.path).st_ino == self.ino:
                os.unlink(self.path)
        except OSError:
            pass
        self.sock.close()


def listen_local(path: str, shared: bool = False, backlog: int = 64) -> LocalListener:
    """A non-blocking ``SOCK_SEQPACKET`` listener at ``path``, in a private directory.

    A socket file left by an agent that died is replaced; one another agent
    listens on is not. ``shared``: other users may connect (the agent checks
    their uid).

    Raises
    ------
    LocalSocketError
        The directory or an existing file at ``path`` belongs to another user,
        another agent listens there, or the path is too long.
    """
    if path.startswith("\0") or len(os.fsencode(path)) > MAX_PATH:
        raise LocalSocketError(f"{path!r}: not a socket path of at most {MAX_PATH} bytes")
    private_dir(Path(path).parent, shared)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.geteuid():
            raise LocalSocketError(f"{path}: exists and is not a socket of uid {os.geteuid()}")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            os.unlink(path)  # its agent is gone
        except OSError as exc:
            raise LocalSocketError(f"{path}: cannot probe the existing socket ({exc.strerror})") from None
        else:
            raise LocalSocketError(f"{path}: another agent listens there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.bind(path)
        listener = LocalListener(sock, path, os.lstat(path).st_ino)
    except BaseException:
        sock.close()
        raise
    try:
        os.chmod(path, SHARED_SOCKET_MODE if shared else SOCKET_MODE)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        listener.close()
        raise
    return listener


def _refuse(path: str, why: str) -> None:
    with _warned_lock:
        if (path, why) in _warned or len(_warned) >= 1000:
            return
        _warned.add((path, why))
    log.warning("event=flow_not_registered socket=%r reason=%r", path, why)


def _untrusted(path: str) -> str:
    """Why the socket file at ``path`` must not get a descriptor ("" if it may)."""
    if path.startswith("\0"):
        return "an abstract socket name has no owner to check; agents listen at a path"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "-"  # no agent: not worth a warning
    except OSError as exc:
        return f"cannot stat it ({exc.strerror})"
    if not stat.S_ISSOCK(st.st_mode):
        return "not a socket"
    if st.st_uid not in trusted_uids():
        return f"owned by uid {st.st_uid}, neither root nor this user"
    return ""


def flow_body(flow_id: str, direction: str, ticket: dict | None = None) -> dict:
    """The body of a ``register_flow`` (with its ``ticket``) / ``unregister_flow`` request."""
    # "out" is the default: such bodies stay what agents before ingress enforcement accept
    body = {"flow": flow_id} if direction == "out" else {"flow": flow_id, "direction": direction}
    if ticket is not None:
        body["ticket"] = ticket
    return body


def register_flow(local_name: str, flow_id: str, sock: socket.socket,
                  timeout_s: float = 2.0, direction: str = "out",
                  ticket: dict | None = None) -> socket.socket | None:
    """Hand ``sock`` to the local agent for pacing; returns the control connection (keep it
    open until :func:`unregister_flow`), or None if no trusted agent listens at ``local_name``
    or the agent refused the flow.

    Parameters
    ----------
    local_name : str
        The agent's socket path (:func:`local_address`).
    flow_id : str
        ``"<job>/<transfer>"`` (the job's client-scoped id), or ``"/<name>"`` for an
        announced background flow (the name client-scoped with keys: the
        ``flow_id`` of the announcement's reply).
    sock : socket.socket
        The connected TCP socket.
    timeout_s : float
        How long to wait for the agent.
    direction : str
        ``"out"`` when this host sends the flow, ``"in"`` when it receives it (for an
        agent enforcing its ingress too).
    ticket : dict, optional
        The daemon's ticket for the flow's job, this host and this user (the
        ``tickets`` of :meth:`jitsched.client.Client.submit` with ``uid``, or
        :meth:`~jitsched.client.Client.attach_job`'s), or for a background flow the
        daemon's ticket for that flow id (the ``tickets`` of
        :meth:`jitsched.client.Client.background_started` with ``uid``): the agent
        refuses a flow without it (``ticket_refused``, logged once per path and reason).

    Returns
    -------
    socket.socket or None
        The control connection, None if the flow is not registered.

    Notes
    -----
    The socket goes only to a socket file owned by root or this user, served by a
    process of root or this user; anything else is refused (logged once per path).
    """
    why = _untrusted(local_name)
    if why:
        if why != "-":
            _refuse(local_name, why)
        return None
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(timeout_s)
    try:
        c.connect(local_name)
        uid = peer_uid(c)
        if uid not in trusted_uids():
            # the file was swapped after the check, or a process of another user serves it
            _refuse(local_name, f"served by uid {uid}, neither root nor this user")
            c.close()
            return None
        socket.send_fds(c, [encode_request(MsgType.REGISTER_FLOW, flow_body(flow_id, direction, ticket))],
                        [sock.fileno()])
        data = c.recv(65536)
        if not data:
            _refuse(local_name, "the agent closed the connection (it does not serve this user)")
            c.close()
            return None
        rep = decode_any(data)
    except (OSError, ProtocolError) as exc:  # no agent, it refused us, or it went away mid-request
        if isinstance(exc, OSError) and exc.errno not in (errno.ENOENT, errno.ECONNREFUSED):
            _refuse(local_name, f"{type(exc).__name__}: {exc}")
        c.close()
        return None
    if not isinstance(rep, Reply) or not rep.ok:
        if isinstance(rep, Reply) and rep.code == ErrorCode.TICKET_REFUSED:
            _refuse(local_name, f"ticket_refused: {rep.message}")
        c.close()
        return None
    return c


def unregister_flow(ctrl: socket.socket | None, flow_id: str, direction: str = "out") -> None:
    """Tell the agent the flow is over and close the control connection.

    Does not wait for the agent's reply (the agent reads the request before it
    sees the connection close): the transfer is over and its sender's next
    step should not wait for a busy agent's loop, which took a round trip per
    registered transfer on every DAG path.
    """
    if ctrl is None:
        return
    try:
        ctrl.send(encode_request(MsgType.UNREGISTER_FLOW, flow_body(flow_id, direction)))
    except OSError:
        pass
    finally:
        ctrl.close()


def _local_call(local_name: str, type_: str, body: dict, timeout_s: float) -> dict:
    """One request to the agent at ``local_name`` and its reply body (no descriptor passed)."""
    why = _untrusted(local_name)
    if why:
        raise LocalSocketError(f"{local_name}: " + ("no agent listens there" if why == "-" else why))
    c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    c.settimeout(timeout_s)
    try:
        try:
            c.connect(local_name)
        except OSError as exc:
            raise LocalSocketError(f"{local_name}: cannot reach the agent ({exc.strerror or exc})") from None
        uid = peer_uid(c)
        if uid not in trusted_uids():
            raise LocalSocketError(f"{local_name}: served by uid {uid}, neither root nor this user")
        c.send(encode_request(type_, body))
        try:
            data = c.recv(65536)
        except TimeoutError:
            raise TimeoutError(f"{local_name}: no reply from the agent within {timeout_s:g} s") from None
        if not data:
            raise LocalSocketError(f"{local_name}: the agent closed the connection (it does not serve this user)")
        rep = decode_any(data)
    finally:
        c.close()
    if not isinstance(rep, Reply):
        raise ProtocolError("bad_message", "the agent sent a request, not a reply")
    if not rep.ok:
        raise RemoteError(rep.code, rep.message)
    return rep.body


def attach(local_name: str, job: str, *, pids: list[int] | None = None, cgroup: str | None = None,
           ports: list[int] | None = None, peers: dict[str, str] | None = None,
           ticket: dict | None = None, timeout_s: float = 5.0) -> dict:
    """Have the agent at ``local_name`` schedule job ``job``'s TCP connections on its host.

    Name exactly one of ``pids`` (these processes and the children they fork),
    ``cgroup`` (a cgroup v2 directory under /sys/fs/cgroup, and those below it)
    and ``ports`` (connections with one of these local or remote ports). The
    agent finds their connections within a second of their opening and gives
    each the rank and rate of the job's group to its peer host, which
    ``peers`` names: ``{"address": host}`` or ``{"address:port": host}``
    (:meth:`jitsched.client.Client.attach_job` gives the cluster's). Only root,
    or the owner of the processes or cgroup, may attach them, and only with
    ``ticket``: the daemon's for ``job`` (client-scoped), this host and this
    user, which ``Client.attach_job(job, host, uid=os.geteuid())`` answers with.

    Returns
    -------
    dict
        ``{"job", "attachments", "conns"}``: the job's attachments on the host
        and the connections found at once.

    Raises
    ------
    RemoteError
        The agent refused (``invalid_body``: no such pid, a cgroup path outside
        /sys/fs/cgroup, ...; ``forbidden``: another user's processes;
        ``ticket_refused``: no ticket, or one that is not the daemon's for this
        job, host and user, or expired, or the agent has not met the daemon yet).
    LocalSocketError
        No trusted agent listens at ``local_name``.
    """
    body: dict = {"job": job}
    for key, val in (("pids", pids), ("cgroup", cgroup), ("ports", ports), ("peers", peers),
                     ("ticket", ticket)):
        if val is not None:
            body[key] = list(val) if key in ("pids", "ports") else val
    return _local_call(local_name, MsgType.ATTACH, body, timeout_s)


def detach(local_name: str, job: str, timeout_s: float = 5.0) -> dict:
    """Undo this user's :func:`attach` of job ``job`` (root's: everyone's); ``{"job", "detached": n}``.

    Takes no ticket: it removes only the caller's own attachments.
    """
    return _local_call(local_name, MsgType.DETACH, {"job": job}, timeout_s)


__all__ = ["LOCAL_PREFIX", "RUN_DIR_ENV", "LocalListener", "LocalSocketError", "attach", "detach", "flow_body", "listen_local",
           "local_address", "peer_uid", "private_dir", "register_flow", "run_dir", "trusted_uids",
           "unregister_flow"]
