"""Local flow registration: a private socket file, and no descriptor for a process of another user."""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.localreg import (
    LocalSocketError,
    listen_local,
    local_address,
    private_dir,
    register_flow,
)
from jitsched.protocol import MsgType, decode_reply, encode_request
from tests.flowtickets import flow_ticket

OTHER_UID = 54321  # users no process of this machine runs as
THIRD_UID = 54322
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files and processes of other users needs root")


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def base():
    """A directory other users may pass through (tmp_path's parents are root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="jitsched-lr-"))
    os.chmod(d, 0o711)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def agent(local_dir, **kw):
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"), local_dir=local_dir, **kw).start()
    try:
        yield a
    finally:
        a.stop()


@contextlib.contextmanager
def tcp_pair():
    """A connected TCP socket (what a job registers) and its peer."""
    srv = socket.create_server(("127.0.0.1", 0))
    s = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        yield s
    finally:
        for x in (s, peer, srv):
            x.close()


class AsUser:
    """``fn()`` in a forked child running as ``uid``; its output comes back through a pipe.

    ``fn(say)`` may call ``say(bytes)`` to report before it ends (the parent
    waits for that with :meth:`heard`); what it returns is sent last.
    """

    def __init__(self, uid: int, fn: Callable[[Callable[[bytes], None]], bytes]) -> None:
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the child: stdlib calls only, and always _exit
            code = 0
            try:
                os.close(r)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                out = fn(lambda b: os.write(w, b + b"\n"))
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out, code = f"error {type(exc).__name__}: {exc}".encode(), 1
            finally:
                try:
                    os.write(w, out + b"\n")
                finally:
                    os._exit(code)
        os.close(w)
        self.r = r
        self.buf = b""

    def heard(self, timeout_s: float = 5.0) -> bytes:
        """The child's next line (b"" if it said nothing in time)."""
        end = time.monotonic() + timeout_s
        while b"\n" not in self.buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                return b""
            chunk = os.read(self.r, 4096)
            if not chunk:
                break
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def close(self) -> None:
        os.close(self.r)
        for _ in range(50):
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def test_agent_socket_is_private_and_goes_with_the_agent(tmp_path):
    d = tmp_path / "run"
    with agent(d) as a:
        assert a.local_name == local_address("h0", directory=d)
        assert mode(d) == 0o700 and mode(a.local_name) == 0o600
        assert os.lstat(a.local_name).st_uid == os.geteuid()
        with tcp_pair() as s:
            assert register_flow(a.local_name, "j/t", s, ticket=flow_ticket(a, "j/t")) is not None
    assert not os.path.exists(a.local_name)


def test_a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced(tmp_path):
    path = local_address("h0", directory=tmp_path)
    live = listen_local(path)
    try:
        with pytest.raises(LocalSocketError, match="another agent listens"):
            Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"), local_dir=tmp_path).start()
    finally:
        live.sock.close()  # its agent died: the file stays behind
    assert os.path.exists(path)
    with agent(tmp_path) as a, tcp_pair() as s:
        assert register_flow(a.local_name, "j/t", s, ticket=flow_ticket(a, "j/t")) is not None


@needs_root
def test_a_directory_or_file_of_another_user_is_refused(tmp_path):
    d = tmp_path / "theirs"
    d.mkdir()
    os.chown(d, OTHER_UID, OTHER_UID)
    with pytest.raises(LocalSocketError, match="not a directory of uid"):
        Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"), local_dir=d).start()
    mine = tmp_path / "mine"
    mine.mkdir()
    Path(local_address("h0", directory=mine)).write_text("not a socket")
    with pytest.raises(LocalSocketError, match="not a socket"):
        Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"), local_dir=mine).start()


@needs_root
def test_no_descriptor_for_a_socket_file_of_another_user(tmp_path):
    # a squatter's listener at the agent's path: its file belongs to another user
    path = local_address("h0", directory=tmp_path)
    squat = listen_local(path)
    os.chown(path, OTHER_UID, OTHER_UID)
    try:
        with tcp_pair() as s:
            assert register_flow(path, "j/t", s) is None
            # an abstract name has no owner to check: refused as well
            assert register_flow("\0jitsched-agent-h0", "j/t", s) is None
        with pytest.raises(BlockingIOError):
            squat.sock.accept()  # the client did not even connect
    finally:
        squat.close()


@needs_root
def test_no_descriptor_for_a_process_of_another_user(base):
    # the file looks right (root's), but the process serving it is another user's
    run = base / "run"
    run.mkdir()
    os.chown(run, OTHER_UID, OTHER_UID)
    path = local_address("h0", directory=run)

    def squatter(say):
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        srv.bind(path)
        os.chmod(path, 0o666)
        srv.listen(4)
        say(b"ready")
        srv.settimeout(3.0)
        try:
            c, _ = srv.accept()
        except TimeoutError:
            return b"no connection"
        c.settimeout(3.0)
        _, fds, _, _ = socket.recv_fds(c, 65536, 4)
        return f"fds {len(fds)}".encode()

    child = AsUser(OTHER_UID, squatter)
    try:
        assert child.heard() == b"ready"
        os.chown(path, 0, 0)
        with tcp_pair() as s:
            assert register_flow(path, "j/t", s) is None
        assert child.heard() == b"fds 0"
    finally:
        child.close()


@needs_root
def test_the_agent_serves_allowed_users_only(base):
    with agent(base / "run", allowed_uids=(OTHER_UID,)) as a:
        # others must reach the socket for SO_PEERCRED to judge them
        assert mode(base / "run") == 0o711 and mode(a.local_name) == 0o666
        request = encode_request(MsgType.REGISTER_FLOW,
                                 {"flow": "j/t", "ticket": flow_ticket(a, "j/t", uid=OTHER_UID)})
        with tcp_pair() as s:

            def register(say):
                c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                c.settimeout(3.0)
                c.connect(a.local_name)
                try:
                    socket.send_fds(c, [request], [s.fileno()])
                    return c.recv(65536).hex().encode() or b"closed"
                except (ConnectionResetError, BrokenPipeError):
                    # the agent may close a refused peer before or after its send lands
                    return b"closed"

            for uid in (THIRD_UID, OTHER_UID):
                child = AsUser(uid, register)
                try:
                    out = child.heard()
                finally:
                    child.close()
                if uid == THIRD_UID:
                    assert out == b"closed"
                    assert a.refused_local == 1 and a.flows == {}
                else:
                    assert decode_reply(bytes.fromhex(out.decode())).ok
                    assert list(a.flows) == ["j/t"] and a.registrations["out"] == 1


@needs_root
def test_a_private_agent_leaves_a_shared_directory_reachable(base):
    # two agents of root in one directory, the first serving another user: the second,
    # private, keeps its own socket to root without shutting that user out of the first
    run = base / "run"

    def reach(path):
        return lambda say: str(os.stat(path).st_mode & 0o777).encode()

    with agent(run, allowed_uids=(OTHER_UID,)) as shared, agent(run, local_namespace="b") as private:
        assert mode(run) == 0o711
        assert mode(shared.local_name) == 0o666 and mode(private.local_name) == 0o600
        child = AsUser(OTHER_UID, reach(shared.local_name))
        try:
            assert child.heard() == str(0o666).encode()
        finally:
            child.close()
    with agent(run) as later:
        assert mode(run) == 0o711 and mode(later.local_name) == 0o600


def test_a_private_directory_is_made_0700_and_a_shared_one_is_never_narrowed(tmp_path):
    d = tmp_path / "a" / "run"
    assert private_dir(d) == d and mode(d) == 0o700
    os.chmod(d, 0o755)
    private_dir(d)
    assert mode(d) == 0o700
    private_dir(d, shared=True)
    assert mode(d) == 0o711
    private_dir(d)
    assert mode(d) == 0o711


@pytest.mark.alone
def test_unregister_does_not_wait_for_a_busy_agent():
    # the agent takes 1 s over the end of a flow; its sender is not held that long,
    # and the agent still drops the flow once it gets to the request
    from jitsched.daemon.server import wait_until
    from jitsched.localreg import unregister_flow

    a = Agent("h7", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"unreg{time.monotonic_ns()}")
    a.start()
    orig = a._local_request

    def slow(req, fds, *uid):
        if req.type == MsgType.UNREGISTER_FLOW:
            time.sleep(1.0)
        return orig(req, fds, *uid)

    a._local_request = slow
    srv = socket.create_server(("127.0.0.1", 0))
    s = socket.create_connection(srv.getsockname())
    try:
        ctrl = register_flow(a.local_name, "j/u", s, ticket=flow_ticket(a, "j/u"))
        assert ctrl is not None and "j/u" in a.flows
        t0 = time.monotonic()
        unregister_flow(ctrl, "j/u")
        assert time.monotonic() - t0 < 0.3
        assert ctrl.fileno() == -1  # closed
        assert "j/u" in a.flows  # not yet: the agent is still on it
        assert wait_until(lambda: "j/u" not in a.flows, 3.0)
    finally:
        s.close()
        srv.close()
        a.stop()


@needs_root
def test_a_user_cannot_unregister_or_replace_another_users_flow(base):
    # a shared agent serves root and OTHER_UID: a flow root registered stays root's, whatever
    # the other user sends under its id
    with agent(base / "run", allowed_uids=(OTHER_UID,)) as a, tcp_pair() as s:
        ctrl = register_flow(a.local_name, "alice:j/t", s, ticket=flow_ticket(a, "alice:j/t"))
        assert ctrl is not None and list(a.flows) == ["alice:j/t"]
        mine = a.flows["alice:j/t"]

        def meddle(say):
            out = []
            c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            c.settimeout(3.0)
            c.connect(a.local_name)
            c.send(encode_request(MsgType.UNREGISTER_FLOW, {"flow": "alice:j/t"}))
            out.append(decode_reply(c.recv(65536)))
            srv = socket.create_server(("127.0.0.1", 0))
            own = socket.create_connection(srv.getsockname())
            socket.send_fds(c, [encode_request(MsgType.REGISTER_FLOW, {"flow": "alice:j/t"})], [own.fileno()])
            out.append(decode_reply(c.recv(65536)))
            return " ".join(f"{r.ok}/{r.code}" for r in out).encode()

        child = AsUser(OTHER_UID, meddle)
        try:
            out = child.heard()
        finally:
            child.close()
        try:
            assert out == b"False/forbidden False/forbidden"
            assert a.flows.get("alice:j/t") is mine
        finally:
            ctrl.close()
