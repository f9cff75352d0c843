"""Full re-solves in a child planner process, so that they never hold the daemon's GIL."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from multiprocessing.connection import Connection

import jitsched
from jitsched.daemon.state import PlanRequest, PlanResult, run_plan
from jitsched.model import Cluster
from jitsched.policies.base import Policy

# ``-c`` rather than ``-m``: the package would import this module before runpy runs it.
# ``-c`` puts the working directory first on sys.path, so a daemon of an installed
# jitsched started from a source checkout had a child importing the checkout (no
# compiled kernels: every full re-solve failed); the child's sys.path[0] is the
# directory the daemon's own jitsched came from instead.
_CHILD = ("import sys; sys.path[0] = sys.argv[1]; from jitsched.daemon.solver import main; "
          "sys.exit(main(sys.argv[2:]))")
# the directory holding the jitsched package this process imported
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(jitsched.__file__)))


class PlannerProcess:
    """:func:`jitsched.daemon.state.run_plan` in a child Python process.

    A full re-solve of tens of jobs is hundreds of milliseconds of mostly
    Python and numpy work; in a thread of the daemon it holds the GIL so often
    that the socket loop and incremental plans wait for it at every hand-over
    (measured: 2-4x longer submit-to-ack while one runs). The child has its own
    interpreter and its own copy of the policy (pickled at start, so it keeps the
    state full re-solves build up); requests and results travel pickled over a
    socket pair, one request at a time. The child needs a second or two to
    import; :meth:`ready` says when it can take requests.

    Parameters
    ----------
    policy : Policy
    cluster : Cluster
    t0_wall_s : float
        The daemon clock's wall-clock origin (for agent epochs).
    """

    def __init__(self, policy: Policy, cluster: Cluster, t0_wall_s: float) -> None:
        self._init = (policy, cluster, t0_wall_s)
        self._conn: Connection | None = None
        self._proc: subprocess.Popen | None = None
        self._ready = False

    def start(self) -> PlannerProcess:
        """Spawn the child (:func:`main` in a fresh interpreter) and hand it the policy.

        Raises
        ------
        OSError, pickle.PicklingError
            If the child cannot be started or the policy cannot be sent.
        """
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CHILD, _ROOT, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            self._conn.send(self._init)
        except BaseException:
            self.close()
            raise
        return self

    @property
    def pid(self) -> int | None:
        """The child's process id (None once closed)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def started(self) -> bool:
        """Whether the child has said it takes requests (as last seen by :meth:`ready`)."""
        return self._ready

    def ready(self) -> bool:
        """Whether the child has started and takes requests (never blocks).

        Raises
        ------
        OSError, EOFError
            If the child died while starting.
        """
        if not self._ready and self._conn is not None and self._conn.poll(0):
            self._ready = self._conn.recv() == "ready"
        return self._ready

    def solve(self, req: PlanRequest) -> PlanResult:
        """Run one full re-solve in the child (blocks; the GIL is free meanwhile).

        Raises
        ------
        OSError, EOFError
            If the child died.
        """
        if self._conn is None:
            raise EOFError("the planner process is not running")
        self._conn.send(req)
        return self._conn.recv()

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the child to exit, then reap it (killed if it does not exit in time)."""
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._conn.close()
            self._conn = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


def main(argv: list[str] | None = None) -> int:
    """The child: receive (policy, cluster, t0), then answer requests until None or EOF."""
    argv = sys.argv[1:] if argv is None else argv
    # Ctrl-C reaches the whole process group; the daemon decides when the child ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(int(argv[0]))
    try:
        policy, cluster, t0_wall_s = conn.recv()
        conn.send("ready")
        while True:
            req = conn.recv()
            if req is None:
                return 0
            conn.send(run_plan(policy, req, cluster, t0_wall_s=t0_wall_s))
    except (EOFError, OSError):  # the daemon went away
        return 0
    finally:
        conn.close()
