"""Tests of jitsched.policies.common's background floor: the agents' guaranteed share, in the simulator."""

from __future__ import annotations

import math

import pytest

from jitsched.dag.model import Background, Cluster, Compute, Host, Job, Transfer, Workload
from jitsched.errors import ValidationError
from jitsched.sim import Simulator

C = 1.25e8  # bytes/s of a 1 Gbit/s port
# the simulator's counterparts of the testbed's policies with agents, files in the agents' background class
AGENT_POLICIES = [("jit", {"bg_weight": math.inf}), ("sincronia", {"background": "last"}),
                  ("tictac", {"background": "last"})]


def dl_job(nbytes: float) -> Job:
    return Job("dl", (Compute("c", "h1", 0.0),), (Transfer("t", "h0", "h1", nbytes),), (("t", "c"),), 0.0)


def run(policy: str, opts: dict, floor: float, wl: Workload):
    return Simulator(wl, policy, policy_options=opts | {"bg_floor": floor}).run()


@pytest.mark.parametrize("policy, opts", AGENT_POLICIES)
def test_the_floor_gives_the_file_its_share_while_dl_is_backlogged(policy, opts):
    # a 2 GB DL transfer (16 s alone) and a 0.2 GB file on the same host pair from 0 s
    wl = Workload(Cluster.uniform(2), (dl_job(2e9),), (Background("f", "h0", "h1", 2e8, 0.0),))
    none = run(policy, opts, 0.0, wl)
    # no floor: the file waits for the whole DL transfer
    assert none.jct_s[0] == pytest.approx(16.0) and none.bg_jct_s[0] == pytest.approx(17.6)
    got = run(policy, opts, 0.2, wl)
    # a fifth of the port throughout the DL transfer: 0.2 GB at 25 MB/s, 8 s; DL gets the
    # other 0.8 meanwhile and the whole port after
    assert got.bg_jct_s[0] == pytest.approx(2e8 / (0.2 * C))
    assert got.jct_s[0] == pytest.approx(8.0 + (2e9 - 0.8 * C * 8.0) / C)


@pytest.mark.parametrize("policy, opts", AGENT_POLICIES)
def test_dl_borrows_back_the_floor_a_file_cannot_use(policy, opts):
    # the file's receiver takes 5 % of a port, under the 20 % floor: DL gets the other 95 %
    slow = Host("h2", 1e9, 0.05 * 1e9)
    cl = Cluster((Host("h0", 1e9, 1e9), Host("h1", 1e9, 1e9), slow))
    wl = Workload(cl, (dl_job(2e9),), (Background("f", "h0", "h2", 1e8, 0.0),))
    got = run(policy, opts, 0.2, wl)
    assert got.bg_jct_s[0] == pytest.approx(1e8 / (0.05 * C))  # 16 s: its own bottleneck
    assert got.jct_s[0] == pytest.approx(16.0 + (2e9 - 0.95 * C * 16.0) / C)


def test_a_file_alone_is_not_held_to_the_floor():
    wl = Workload(Cluster.uniform(2), (dl_job(1e6),), (Background("f", "h0", "h1", 1.25e9, 0.0),))
    got = run("jit", {"bg_weight": math.inf}, 0.3, wl)
    assert got.bg_jct_s[0] == pytest.approx(10.0, abs=0.01)  # the whole port but the DL's 1 MB


@pytest.mark.parametrize("policy, opts", AGENT_POLICIES)
@pytest.mark.parametrize("bad", [1.0, -0.1, math.nan, True, "0.1"])
def test_a_floor_outside_0_1_is_refused(policy, opts, bad):
    wl = Workload(Cluster.uniform(2), (dl_job(1e6),))
    with pytest.raises(ValidationError, match=r"bg_floor: must be within \[0, 1\)"):
        run(policy, opts, bad, wl)
