"""The Reserved policy: reserved transfers get their reserved rates whatever the inner policy ranks first; the rest share what is left."""

from __future__ import annotations

from dataclasses import replace

from jitsched.dag.model import Workload, parse_job
from jitsched.plan.reserve import ReservationBook, ReserveOptions
from jitsched.policies.base import make_policy
from jitsched.policies.reserved import Reserved
from jitsched.sim import Simulator
from jitsched.sim.isolated import isolated_windows
from tests.dags import cluster, job

CL = cluster(4)  # 1e9 bytes/s per port
OPTS = ReserveOptions(eps=0.05, slot_s=0.05)


def jobs():
    # a reserved job ranked last by jit (best-effort), and a normal one filling h0's egress
    kept = parse_job(job("kept", computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", 4e8)],
                         edges=[("t", "c")]) | {"class": "best-effort"}, CL)
    hog = parse_job(job("hog", computes=[("c", "h2", 0.1)], transfers=[("t", "h0", "h2", 2e9)],
                        edges=[("t", "c")]), CL)
    return kept, hog


def test_a_reserved_job_keeps_its_target_where_the_inner_policy_would_rank_it_last():
    kept, hog = jobs()
    wl = Workload(CL, (kept, hog))
    iso = 0.4 + 1.0
    # jit alone: the normal job's 2 s on h0 go first
    assert Simulator(wl, "jit").run().jct_s[0] > 2.0
    book = ReservationBook(CL, OPTS)
    assert book.admit("kept", isolated_windows(replace(kept, job_class="critical"), CL, OPTS), 0.0).admitted
    res = Simulator(wl, Reserved(make_policy("jit"), book, {0: "kept"})).run()
    assert res.jct_s[0] <= 1.05 * iso + 1e-9
    # the other job takes what the reservation leaves: 2.4 s of h0's egress in all
    assert res.jct_s[1] <= 2.4 + 0.1 + 1e-6


def test_without_reservations_it_is_the_inner_policy():
    kept, hog = jobs()
    wl = Workload(CL, (kept, hog))
    plain = Simulator(wl, "jit").run().jct_s
    got = Simulator(wl, Reserved(make_policy("jit"), ReservationBook(CL, OPTS), {})).run().jct_s
    assert got.tolist() == plain.tolist()
