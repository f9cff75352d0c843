"""Critical jobs' reservations: the LP meets each window, holds JCT within (1 + eps) in the simulator, and names the binding port and the earliest start when it cannot."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from jitsched.dag.model import Workload, parse_job
from jitsched.plan.reserve import ACK_SHARE, ReservationBook, ReserveOptions, solve_reservation
from jitsched.policies.base import make_policy
from jitsched.policies.reserved import Reserved
from jitsched.sim import Simulator
from jitsched.sim.isolated import isolated_windows
from tests.dags import cluster, job

SLOT = 0.05
OPTS = ReserveOptions(eps=0.05, slot_s=SLOT)
CL = cluster(4)  # 1e9 bytes/s per port


def sends_first(jid: str = "first"):
    # 0.4 GB out of h0 (0.4 s), then 1 s of compute: h0's egress is busy at the start only
    return parse_job(job(jid, computes=[("c", "h1", 1.0)], transfers=[("t", "h0", "h1", 4e8)],
                         edges=[("t", "c")]) | {"class": "critical"}, CL)


def sends_last(jid: str = "last"):
    # 0.8 s of compute, then 0.4 GB out of h0 into h3: h0's egress is busy at the end only
    return parse_job(job(jid, computes=[("c", "h2", 0.8), ("d", "h3", 0.1)],
                         transfers=[("t", "h0", "h3", 4e8)], edges=[("c", "t"), ("t", "d")])
                     | {"class": "critical"}, CL)


def test_windows_stretch_the_isolated_schedule_by_one_plus_eps():
    w = isolated_windows(sends_last(), CL, OPTS)
    assert w.isolated_s == pytest.approx(1.3)
    assert w.target_s == pytest.approx(1.4)  # 1.05 x 1.3 = 1.365, up to the slot
    # the transfer ran 0.8-1.2 s alone: 0.84-1.26 s stretched, slots 16..25 outwards
    assert (int(w.first[0]), int(w.last[0])) == (16, 25)


def test_two_critical_jobs_share_a_port_and_each_meets_its_target_in_the_simulator():
    book = ReservationBook(CL, OPTS)
    a, b = sends_first(), sends_last()
    assert book.admit("first", isolated_windows(a, CL, OPTS), 0.0).admitted
    # port exclusivity refused this one (h0's egress is the first's until its JCT);
    # the LP finds the port free when the second needs it
    d = book.admit("last", isolated_windows(b, CL, OPTS), 0.0)
    assert d.admitted and d.bottleneck == ""
    # every window gets its bytes; no port-slot carries more than its line rate
    for h in book.held.values():
        w = h.windows
        for k in range(len(w.size)):
            inside = h.rates[k, w.first[k]:w.last[k] + 1].sum() * SLOT
            assert inside == pytest.approx(w.size[k], rel=1e-6)
            assert h.rates[k].sum() * SLOT == pytest.approx(w.size[k], rel=1e-6)
    free_e, free_i = book.free(0, book.horizon_slot())
    assert free_e.min() >= -1e-3 and free_i.min() >= -1e-3
    # the simulator enforcing the reservations: each JCT within 1.05x its isolated JCT
    jobs = (replace(a, arrival_s=0.0), replace(b, arrival_s=0.0))
    res = Simulator(Workload(CL, jobs), Reserved(make_policy("jit"), book, {0: "first", 1: "last"})).run()
    iso = np.array([isolated_windows(j, CL, OPTS).isolated_s for j in jobs])
    assert np.all(res.jct_s <= 1.05 * iso + 1e-9)


def test_a_job_no_reservation_can_hold_names_the_port_and_the_earliest_start():
    book = ReservationBook(CL, OPTS)
    assert book.admit("first", isolated_windows(sends_first(), CL, OPTS), 0.0).admitted
    assert book.admit("last", isolated_windows(sends_last(), CL, OPTS), 0.0).admitted
    again = sends_first("again")
    d = book.admit("again", isolated_windows(again, CL, OPTS), 0.0)
    # h0's egress is the first's for 0.4 s from 0: nothing of 0.4 GB fits by 0.45 s
    assert not d.admitted and d.bottleneck == "h0 egress"
    # the port is free from 0.4 s until the second's transfer at 0.8 s: 0.4 s, just enough
    # for a window started at 0.35 s (0.35-0.8 s: the rounded 0.45 s, one slot the first's)
    assert d.earliest_start_s == pytest.approx(0.35)
    assert "again" not in book.held
    assert book.admit("again", isolated_windows(again, CL, OPTS), d.earliest_start_s).admitted
    # the three in the simulator, the third arriving at its earliest start
    jobs = (sends_first(), sends_last(), replace(again, arrival_s=d.earliest_start_s))
    res = Simulator(Workload(CL, jobs), Reserved(make_policy("jit"), book,
                                                  {0: "first", 1: "last", 2: "again"})).run()
    iso = np.array([1.0 + 0.4, 1.3, 1.0 + 0.4])
    assert np.all(res.jct_s <= 1.05 * iso + 1e-9)


def test_an_ingress_bottleneck_is_named_as_one():
    into = parse_job(job("into", computes=[("c", "h2", 0.1)], transfers=[("t", "h1", "h2", 4e8)],
                         edges=[("t", "c")]) | {"class": "critical"}, CL)
    other = parse_job(job("other", computes=[("c", "h2", 0.1)], transfers=[("t", "h3", "h2", 4e8)],
                          edges=[("t", "c")]) | {"class": "critical"}, CL)
    book = ReservationBook(CL, OPTS)
    assert book.admit("into", isolated_windows(into, CL, OPTS), 0.0).admitted
    d = book.admit("other", isolated_windows(other, CL, OPTS), 0.0)
    assert not d.admitted and d.bottleneck == "h2 ingress"


def test_released_reservations_free_their_ports():
    book = ReservationBook(CL, OPTS)
    assert book.admit("first", isolated_windows(sends_first(), CL, OPTS), 0.0).admitted
    assert not book.admit("again", isolated_windows(sends_first("again"), CL, OPTS), 0.0, hold=False).admitted
    book.release("first", 0.0)
    assert book.held == {}
    assert book.admit("again", isolated_windows(sends_first("again"), CL, OPTS), 0.0).admitted


def test_the_lp_alone_leaves_demand_unmet_only_where_capacity_lacks():
    w = isolated_windows(sends_first(), CL, OPTS)
    n = w.n_slots
    full = np.full((len(CL), n), 1e9)
    assert solve_reservation(w, full, full, CL, SLOT).feasible
    half = full.copy()
    half[0] = 0.5e9  # h0's egress at half its rate: 0.45 s x 0.5 GB/s < 0.4 GB
    got = solve_reservation(w, half, full, CL, SLOT)
    assert not got.feasible and got.bottleneck == "h0 egress"
    assert got.unmet[0] == pytest.approx(1 - 0.45 * 0.5e9 / 4e8, rel=1e-6)


def test_options_are_checked():
    from jitsched.errors import ValidationError

    with pytest.raises(ValidationError, match="eps: must be a finite number >= 0"):
        ReserveOptions(eps=-1)
    with pytest.raises(ValidationError, match="max_starts: must be a positive integer"):
        ReserveOptions(max_starts=0)


def test_ingress_held_covers_both_ends_until_the_reserved_transfers_arrive():
    book = ReservationBook(CL, OPTS)
    assert book.ingress_held({}) == ()
    assert book.admit("first", isolated_windows(sends_first(), CL, OPTS), 0.0).admitted
    held = book.held["first"]
    first = held.start_slot + int(np.flatnonzero(held.rates[0] > 0)[0])
    # h1 receives t: what t's peak leaves of its port; h0 sends it: its port less the
    # ACKs' share (nothing reserved comes in); nothing holds h2 or h3
    (h0, s0, left0), (h1, s1, left1) = book.ingress_held({})
    assert (h0, h1) == (0, 1) and s0 == s1 == pytest.approx(first * SLOT)
    assert left0 == pytest.approx((1 - ACK_SHARE) * CL.ingress_Bps[0])
    assert left1 == pytest.approx(max(CL.ingress_Bps[1] - held.rates[0].max(), 0.0))
    assert left1 < 0.1 * CL.ingress_Bps[1]  # t is network-bound: its reservation takes most of h1's port
    # t arrived: nothing is held any more, though its reserved window may not be over
    assert book.ingress_held({"first": {"t"}}) == ()
    book.release("first", 0.0)
    assert book.ingress_held({}) == ()
    # another reservation made after it: its hosts are held, whatever "first" had done
    assert book.admit("again", isolated_windows(sends_first("again"), CL, OPTS), 0.0).admitted
    assert [x[0] for x in book.ingress_held({"first": {"t"}})] == [0, 1]
    assert book.ingress_held({"again": {"t"}}) == ()


def test_ingress_held_counts_reserved_rates_on_the_wire_and_the_acks_only_where_they_leave():
    # h0 sends t to h1, h1 computes, then sends u back: h0's ingress is reserved for u only
    # after t has left, so the share of t's rate its ACKs take is off t's slots alone; with
    # a payload share of 0.95 a reserved rate takes 1/0.95 of it on the wire
    rt = parse_job(job("rt", computes=[("c", "h1", 0.2)], transfers=[("t", "h0", "h1", 2e8), ("u", "h1", "h0", 2e8)],
                       edges=[("t", "c"), ("c", "u")]) | {"class": "critical"}, CL)
    p = 0.95
    book = ReservationBook(CL, OPTS, shares={"h0": 0.5, "h1": 0.5}, payloads={"h0": p, "h1": p})
    assert book.admit("rt", isolated_windows(rt, book.planning_cluster(), OPTS), 0.0).admitted
    held = book.held["rt"]
    ids = list(held.windows.ids)
    t, u = held.rates[ids.index("t")], held.rates[ids.index("u")]
    assert not np.any((t > 0) & (u > 0))  # the two never share a slot
    line = CL.ingress_Bps[0]
    (h0, _, left0), (h1, _, left1) = book.ingress_held({})
    assert (h0, h1) == (0, 1)
    # each port's least: where the other way's transfer peaks on the wire, or its own ACKs
    want0 = min(line - u.max() / p, line - ACK_SHARE * t.max() / p)
    assert left0 == pytest.approx(max(want0, 0.0) * p)
    assert left1 == pytest.approx(max(min(line - t.max() / p, line - ACK_SHARE * u.max() / p), 0.0) * p)
    assert u.max() == pytest.approx(0.5 * line) and left0 < (line - u.max()) * p  # the wire's, not the payload's
    assert left0 > (line - u.max() / p - ACK_SHARE * line) * p  # no ACKs in u's slots
    # a payload share that changes after the first look is taken into account
    book.payloads["h0"] = 1.0
    (_, _, again0), _ = book.ingress_held({})
    assert again0 == pytest.approx(max(min(line - u.max(), line - ACK_SHARE * t.max()), 0.0))


def test_shares_bound_what_is_reserved_and_the_isolated_jct_but_not_what_the_caps_leave():
    # h0's and h1's agents can give reserved flows 0.8 of their ports: the job alone runs
    # on that (0.5 s on the wire, not 0.4) and no slot reserves more
    book = ReservationBook(CL, OPTS, shares={"h0": 0.8, "h1": 0.8})
    assert book.planning_cluster().hosts[0].egress_Bps == pytest.approx(0.8 * CL.egress_Bps[0])
    assert book.planning_cluster().hosts[2] == CL.hosts[2]
    free_e, free_i = book.free(0, 3)
    assert free_e[0] == pytest.approx([0.8 * CL.egress_Bps[0]] * 3) and free_i[2] == pytest.approx([CL.ingress_Bps[2]] * 3)
    win = isolated_windows(sends_first(), book.planning_cluster(), OPTS)
    assert win.isolated_s == pytest.approx(1.5) and isolated_windows(sends_first(), CL, OPTS).isolated_s == pytest.approx(1.4)
    assert book.admit("first", win, 0.0).admitted
    rates = book.held["first"].rates
    assert rates.max() <= 0.8 * CL.egress_Bps[0] * (1 + 1e-6)
    # what the reservation leaves of h1's whole line goes to the caps: the share that is not
    # reservable is unranked traffic's as much as what the reservation does not take
    (_, _, _), (h1, _, left1) = book.ingress_held({})
    assert h1 == 1 and left1 == pytest.approx(CL.ingress_Bps[1] - rates[0].max())
    assert left1 >= 0.2 * CL.ingress_Bps[1] * (1 - 1e-6)
    # with every share 1 the planning cluster is the cluster itself
    assert ReservationBook(CL, OPTS, shares={"h0": 1.0}).planning_cluster() is CL


def test_refit_reserves_what_is_left_of_unfinished_transfers_in_the_rest_of_their_windows():
    # two transfers out of h0 in one window; eps 1 leaves room. At 0.2 s h0's share falls
    # to 0.5: "t" is done and needs nothing more, "u" gets the rest of its bytes at 0.5
    two = parse_job(job("two", computes=[("c", "h1", 0.2)], transfers=[("t", "h0", "h1", 2e8),
                                                                       ("u", "h0", "h2", 2e8)],
                        edges=[("t", "c"), ("u", "c")]) | {"class": "critical"}, CL)
    opts = ReserveOptions(eps=1.0, slot_s=SLOT)
    book = ReservationBook(CL, opts)
    assert book.admit("two", isolated_windows(two, CL, opts), 0.0).admitted
    before = book.held["two"].rates.copy()
    book.shares["h0"] = 0.5
    assert book.overbooked("h0", 0.2) == ["two"]
    assert book.refit("two", 0.2, done={"t"})
    after = book.held["two"].rates
    k_t, k_u = book.held["two"].windows.ids.index("t"), book.held["two"].windows.ids.index("u")
    assert np.array_equal(after[:, :4], before[:, :4])  # slots before 0.2 s stay
    assert not after[k_t, 4:].any()  # done: nothing more
    assert after[k_u].sum() * SLOT == pytest.approx(2e8, rel=1e-5)
    assert after[:, 4:].max() <= 0.5 * CL.egress_Bps[0] * (1 + 1e-6)
    assert book.overbooked("h0", 0.2) == []
    # with no room left in the windows it does not fit, and the reservation stays as it was
    book.shares["h0"] = 0.01
    kept = book.held["two"].rates
    assert not book.refit("two", 0.2, done={"t"}) and book.held["two"].rates is kept


def test_a_critical_job_of_computes_alone_is_admitted_reserving_nothing():
    book = ReservationBook(CL, OPTS)
    alone = parse_job(job("alone", computes=[("c", "h0", 0.5)]) | {"class": "critical"}, CL)
    d = book.admit("alone", isolated_windows(alone, CL, OPTS), 0.0)
    assert d.admitted and d.bottleneck == ""
    assert book.held["alone"].rates.shape[0] == 0
    assert book.admit("first", isolated_windows(sends_first(), CL, OPTS), 0.0).admitted


def test_a_transfer_of_a_fraction_of_a_byte_is_reserved_for():
    book = ReservationBook(CL, OPTS)
    tiny = parse_job(job("tiny", transfers=[("t", "h0", "h1", 1e-300)]) | {"class": "critical"}, CL)
    d = book.admit("tiny", isolated_windows(tiny, CL, OPTS), 0.0)
    assert d.admitted
    assert book.held["tiny"].rates.sum() * SLOT == pytest.approx(1e-300 * (1 + 1e-7))
