"""Varys: MADD rates end a coflow's flows together, SEBF orders coflows, spare capacity is handed out."""

from __future__ import annotations

import numpy as np
import pytest

from jitsched.dag.model import Background, Cluster, Job, Transfer, Workload
from jitsched.policies.varys import effective_bottleneck, madd_rates
from jitsched.sim import simulate

CAP = np.full(3, 100.0)  # bytes/s per port


def test_madd_ends_a_coflows_flows_together_on_its_bottleneck():
    # coflow 0: 200 bytes h0->h1 and 100 bytes h0->h2 share egress h0: gamma = 300/100 = 3 s
    src, dst = np.array([0, 0]), np.array([1, 2])
    rem = np.array([200.0, 100.0])
    rate = madd_rates(src, dst, rem, np.array([0, 0]), 1, CAP, CAP)
    assert rate.tolist() == pytest.approx([200 / 3, 100 / 3])
    assert (rem / rate).tolist() == pytest.approx([3.0, 3.0])


def test_madd_gives_later_coflows_what_earlier_ones_leave():
    # coflow 0 (h0->h1, 100 B) takes all of h0's egress; coflow 1 on h0 waits, coflow 2 elsewhere runs
    src, dst = np.array([0, 0, 1]), np.array([1, 2, 2])
    rate = madd_rates(src, dst, np.array([100.0, 50.0, 50.0]), np.array([0, 1, 2]), 3, CAP, CAP)
    assert rate.tolist() == pytest.approx([100.0, 0.0, 100.0])


def test_effective_bottleneck_is_the_largest_port_load():
    load = np.array([[1.0, 3.0, 0.5], [2.0, 0.0, 0.0]])
    assert effective_bottleneck(load).tolist() == [3.0, 2.0]


def _coflow(jid: str, flows: list[tuple[str, str, float]]) -> Job:
    return Job(jid, (), tuple(Transfer(f"f{k}", s, d, b) for k, (s, d, b) in enumerate(flows)), (),
               model="coflow")


def test_smallest_bottleneck_first_and_work_conserving():
    cl = Cluster.uniform(3, bps=800.0)  # 100 bytes/s each way
    big = _coflow("big", [("h0", "h1", 300.0)])
    small = _coflow("small", [("h0", "h2", 100.0)])
    other = _coflow("other", [("h2", "h1", 100.0)])
    res = simulate(Workload(cl, (big, small, other)), "varys")
    jct = dict(zip(res.job_ids, res.jct_s.tolist(), strict=True))
    # small (1 s) before big on h0: small ends at 1 s, big at 4 s; other shares no egress with
    # either but h1's ingress with big: SEBF puts it (1 s) before big too
    assert jct["small"] == pytest.approx(1.0) and jct["other"] == pytest.approx(1.0)
    assert jct["big"] == pytest.approx(4.0)


def test_varys_beats_fair_sharing_on_contended_coflows():
    import random

    rng = random.Random(0)
    cl = Cluster.uniform(6, bps=8e6)
    jobs = []
    for c in range(20):
        flows = []
        for _ in range(rng.randint(1, 6)):
            s, d = rng.sample(range(6), 2)
            flows.append((f"h{s}", f"h{d}", rng.choice([1e4, 1e5, 1e6])))
        jobs.append(_coflow(f"c{c}", flows))
    wl = Workload(cl, tuple(jobs))
    mean = {p: float(np.mean(simulate(wl, p).jct_s)) for p in ("varys", "sincronia", "tensorflow")}
    assert mean["varys"] < 0.8 * mean["tensorflow"]
    assert mean["sincronia"] < 0.8 * mean["tensorflow"]


def test_without_madd_the_order_is_strict_priority_as_a_daemons_agents_enforce_it():
    cl = Cluster.uniform(3, bps=800.0)  # 100 bytes/s each way
    wl = Workload(cl, (_coflow("a", [("h0", "h1", 200.0), ("h0", "h2", 100.0)]),))
    arrived = {}
    for madd in (True, False):
        res = simulate(wl, "varys", policy_options={"madd": madd})
        arrived[madd] = res.transfer_arrival_s.tolist()
        assert res.jct_s.tolist() == pytest.approx([3.0])
    # MADD ends both flows with the coflow's bottleneck; strict priority sends them in node order
    assert arrived[True] == pytest.approx([3.0, 3.0])
    assert arrived[False] == pytest.approx([2.0, 3.0])


def test_background_last_with_a_floor_as_the_testbeds_agents_put_unknown_files():
    cl = Cluster.uniform(3, bps=800.0)
    wl = Workload(cl, (_coflow("job", [("h0", "h1", 300.0)]),), (Background("file", "h0", "h2", 100.0),))

    def run(**opts):
        res = simulate(wl, "varys", policy_options=opts)
        return res.jct_s[0], res.bg_jct_s[0]

    # a coflow of its own, the file's smaller bottleneck goes first
    assert run() == pytest.approx((4.0, 1.0))
    # after every job; with a floor it keeps a tenth of h0 while the job is backlogged
    assert run(background="last") == pytest.approx((3.0, 4.0))
    assert run(background="last", bg_floor=0.1) == pytest.approx((300 / 90, 4.0))


def test_madd_must_be_a_bool():
    from jitsched.errors import ValidationError
    from jitsched.policies.varys import VarysOptions

    with pytest.raises(ValidationError, match="madd: expected true or false, got 'no'"):
        VarysOptions(madd="no")
    with pytest.raises(ValidationError, match="madd: expected true or false, got 0"):
        VarysOptions(madd=0)
    # a numpy bool (an option read from an array) is one, and is kept as Python's
    import numpy as np

    got = VarysOptions(madd=np.bool_(False)).madd
    assert got is False


def test_what_the_agents_enforce_is_varys_without_madd():
    from jitsched.policies import make_policy

    # the daemon's agents get Varys's order as ranks; Sincronia's schedule carries all it decides
    assert make_policy("varys").ranked_options() == {"madd": False}
    assert make_policy("sincronia").ranked_options() == {}
    assert make_policy("varys", **make_policy("varys").ranked_options()).madd is False
