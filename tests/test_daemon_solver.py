"""Tests of the planner child process: it imports the daemon's own jitsched, wherever it starts."""

import time

from jitsched.daemon.solver import PlannerProcess
from jitsched.model import Cluster
from jitsched.policies import make_policy


def test_planner_child_ignores_a_jitsched_in_the_working_directory(tmp_path, monkeypatch):
    # A daemon of an installed jitsched started from a source checkout: the
    # checkout's package (here one that cannot even import) must not shadow
    # the daemon's own in the child, or every full re-solve fails.
    shadow = tmp_path / "jitsched"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise ImportError('the shadow package was imported')\n")
    monkeypatch.chdir(tmp_path)
    proc = PlannerProcess(make_policy("jit"), Cluster.uniform(2), 0.0).start()
    try:
        deadline = time.monotonic() + 60
        while not proc.ready():  # raises EOFError if the child died importing the shadow
            assert time.monotonic() < deadline, "planner child never became ready"
            time.sleep(0.05)
        assert proc.started
    finally:
        proc.close()
