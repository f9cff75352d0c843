"""Per-host schedule bodies: what each agent is sent, and which hosts may share one packed frame."""

import msgpack
import numpy as np

from jitsched.config import DaemonConfig
from jitsched.daemon.agents import AgentTable
from jitsched.daemon.bodies import (
    CAP_HOLD_S,
    IdleFrame,
    RankFrame,
    host_bodies,
    pack_frames,
    restamp_frames,
)
from jitsched.dag.model import Cluster, Host
from jitsched.policies.base import SlotSchedule

LINE = 12.5e6  # 100 Mbit/s in bytes/s (Host takes bits/s)


def cluster(n: int) -> Cluster:
    return Cluster(tuple(Host(f"h{i}", LINE * 8, LINE * 8) for i in range(n)))


def ranked_schedule(n: int = 4) -> SlotSchedule:
    # h0 -> h1 and h0 -> h2, ranked, no planned rates (the default jit on real TCP);
    # h3 neither sends nor receives
    flows = [("a", "g1", 0, 1, 0, np.zeros(0)), ("b", "g2", 0, 2, 0, np.zeros(0))]
    return SlotSchedule(epoch_s=0.0, slot_s=0.1, flows=flows, leftover_egress=np.zeros((n, 0)),
                        leftover_ingress=np.zeros((n, 0)), prio={("a", "g1"): 0, ("b", "g2"): 1})


def unpacked(frames: dict[str, bytes]) -> dict[str, dict]:
    return {h: msgpack.unpackb(f) for h, f in frames.items()}


def test_receivers_keep_their_own_inbound_flows():
    # h1 and h2 send nothing: their bodies differ only in what they receive, and
    # each must carry its own flow with its rank (a shared frame gave h2 h1's flow)
    bodies = unpacked(pack_frames(host_bodies(ranked_schedule(), None, 7, 0.0, cluster(4), 0.1)))
    assert [(f["flow"], f["src"], f["prio"]) for f in bodies["h1"]["in_flows"]] == [("a/g1", "h0", 0)]
    # ranks are dense per host (h2 carries b alone: 0), in the global order
    assert [(f["flow"], f["src"], f["prio"]) for f in bodies["h2"]["in_flows"]] == [("b/g2", "h0", 0)]
    assert [(f["flow"], f["prio"]) for f in bodies["h0"]["flows"]] == [("a/g1", 0), ("b/g2", 1)]
    assert bodies["h1"]["flows"] == [] and bodies["h2"]["flows"] == []
    assert [f["flow"] for f in bodies["h0"]["flows"]] == ["a/g1", "b/g2"]
    assert bodies["h3"]["flows"] == [] and bodies["h3"]["in_flows"] == []


def test_only_hosts_idle_both_ways_share_a_frame():
    frames = pack_frames(host_bodies(ranked_schedule(6), None, 7, 0.0, cluster(6), 0.1))
    # h3, h4, h5 are idle both ways: one frame object for all three
    assert frames["h3"] is frames["h4"] is frames["h5"]
    assert len({id(frames[h]) for h in ("h0", "h1", "h2", "h3")}) == 4


def test_an_ingress_leftover_alone_makes_a_host_not_idle():
    # a planned flow h0 -> h1 over two slots at half the line: h1's ingress leftover
    # is below the line rate while its egress is idle
    sched = SlotSchedule(epoch_s=0.0, slot_s=0.1, flows=[("a", "g1", 0, 1, 0, np.full(2, LINE / 2))],
                         leftover_egress=np.array([[LINE / 2] * 2, [LINE] * 2, [LINE] * 2]),
                         leftover_ingress=np.array([[LINE] * 2, [LINE / 2] * 2, [LINE] * 2]))
    bodies = host_bodies(sched, None, 3, 0.0, cluster(3), 0.1)
    assert bodies["h1"]["flows"] == [] and bodies["h1"]["leftover_Bps"] == []
    got = unpacked(pack_frames(bodies))
    assert got["h1"]["in_leftover_Bps"] == [LINE / 2, LINE / 2]
    assert got["h2"]["in_leftover_Bps"] == [] and got["h2"]["in_flows"] == []


def test_a_job_ranked_in_between_changes_only_the_bodies_of_its_hosts():
    # x (h0 -> h1) and z (h2 -> h3) ranked 0 and 1; then y (h0 -> h3) ranked between them:
    # per-host dense ranks leave h1's and h2's bodies as they were (only seq and epoch
    # differ), and the agent table keeps them; h0's and h3's change and are sent
    def sched(flows, prio, epoch):
        return SlotSchedule(epoch_s=epoch, slot_s=0.1, flows=[(*f, 0, np.zeros(0)) for f in flows],
                            leftover_egress=np.zeros((4, 0)), leftover_ingress=np.zeros((4, 0)), prio=prio)

    before = pack_frames(host_bodies(sched([("x", "t", 0, 1), ("z", "t", 2, 3)],
                                           {("x", "t"): 0, ("z", "t"): 1}, 0.0), None, 1, 0.0, cluster(4), 0.1))
    after = pack_frames(host_bodies(sched([("x", "t", 0, 1), ("y", "t", 0, 3), ("z", "t", 2, 3)],
                                          {("x", "t"): 0, ("y", "t"): 1, ("z", "t"): 2}, 0.5), None, 2, 0.0,
                                    cluster(4), 0.1))
    assert all(type(f) is RankFrame for f in after.values())
    assert [after[h].content == before[h].content for h in ("h0", "h1", "h2", "h3")] == [False, True, True, False]
    assert msgpack.unpackb(after["h3"])["in_flows"][0]["prio"] == 0  # y before z into h3
    assert [f["prio"] for f in msgpack.unpackb(after["h3"])["in_flows"]] == [0, 1]
    table = AgentTable(DaemonConfig(cluster=cluster(4)), 0.0, lambda *a: None)
    assert table.publish(before, 1) == 4
    assert table.publish(after, 2) == 2 and table.kept_same == 2
    assert table.host_seq == {"h0": 2, "h1": 1, "h2": 1, "h3": 2}
    # a body with planned rates depends on the grid: always sent
    planned = SlotSchedule(epoch_s=0.0, slot_s=0.1, flows=[("x", "t", 0, 1, 0, np.full(2, LINE / 2))],
                           leftover_egress=np.full((4, 2), LINE), leftover_ingress=np.full((4, 2), LINE))
    frames = pack_frames(host_bodies(planned, None, 3, 0.0, cluster(4), 0.1))
    assert not isinstance(frames["h0"], RankFrame) and not isinstance(frames["h1"], RankFrame)
    assert table.publish(frames, 3) == 4  # h2, h3 idle now (sent once)
    assert table.publish(frames, 4) == 2 and table.kept_idle == 2  # h0, h1 again


def test_restamped_frames_differ_from_the_originals_in_seq_only():
    frames = pack_frames(host_bodies(ranked_schedule(6), None, 7, 0.0, cluster(6), 0.1))
    got = restamp_frames(frames, 9)
    before, after = unpacked(frames), unpacked(got)
    assert sorted(got) == sorted(frames)
    for h in frames:
        assert type(got[h]) is type(frames[h])
        assert after[h]["seq"] == 9 and before[h]["seq"] == 7
        assert after[h] | {"seq": 7} == before[h] and list(after[h]) == list(before[h])
    assert got["h0"].content == frames["h0"].content  # no seq in a RankFrame's content
    assert got["h3"] is got["h4"] is got["h5"]  # idle hosts still share one frame


def test_reserved_ingress_caps_go_to_every_other_host_with_an_address():
    # h1's ingress is held from 0.5 s on (half the line left); h2 has no address and its
    # cap cannot be matched: only h1's goes, to every host but h1
    cl = Cluster(tuple(Host(f"h{i}", LINE * 8, LINE * 8, None if i == 2 else f"198.18.0.{i + 1}")
                       for i in range(4)))
    caps = ((1, 0.5, LINE / 2), (2, 0.5, 0.0))
    bodies = host_bodies(ranked_schedule(), None, 5, 100.0, cl, 0.1, caps_into=caps)
    want = [{"host": "h1", "addr": "198.18.0.2", "epoch_ns": int(100.5 * 1e9), "slot_s": CAP_HOLD_S,
             "left_Bps": [LINE / 2]}]
    assert all(bodies[h]["caps_into"] == want for h in ("h0", "h2", "h3"))
    assert "caps_into" not in bodies["h1"]
    # h3 neither sends nor receives, but may send unranked traffic into h1: not idle
    frames = pack_frames(bodies)
    assert not isinstance(frames["h3"], IdleFrame)
    assert unpacked(frames)["h3"]["caps_into"] == want
    # no reservation: no key at all, and h3 is idle
    plain = host_bodies(ranked_schedule(), None, 5, 100.0, cl, 0.1)
    assert all("caps_into" not in b for b in plain.values())
    assert isinstance(pack_frames(plain)["h3"], IdleFrame)


def test_a_held_host_keeps_the_critical_floor_from_its_first_reserved_slot():
    # h1 is held from 0.5 s on, h2 (no address: no cap, but its own agent knows it) too
    cl = Cluster(tuple(Host(f"h{i}", LINE * 8, LINE * 8, None if i == 2 else f"198.18.0.{i + 1}")
                       for i in range(4)))
    held = ((1, 0.5, LINE / 2), (2, 0.5, 0.0))
    bodies = host_bodies(ranked_schedule(), None, 5, 100.0, cl, 0.1, floors_at=held, held_floor=0.01)
    want = [{"epoch_ns": int(100.5 * 1e9), "share": 0.01}]
    assert bodies["h1"]["floor_from"] == want and bodies["h2"]["floor_from"] == want
    assert "floor_from" not in bodies["h0"] and "floor_from" not in bodies["h3"]
    assert all("caps_into" not in b for b in bodies.values())  # no caps asked for
    # h2 plans nothing but holds a floor: not idle, and the floor changes its content
    frames = pack_frames(bodies)
    assert not isinstance(frames["h2"], IdleFrame)
    assert unpacked(frames)["h1"]["floor_from"] == want
    plain = pack_frames(host_bodies(ranked_schedule(), None, 5, 100.0, cl, 0.1))
    assert frames["h1"].content != plain["h1"].content
    # no floor configured: the hosts held get none
    assert all("floor_from" not in b for b in host_bodies(ranked_schedule(), None, 5, 100.0, cl, 0.1,
                                                            floors_at=held).values())


def test_a_jobs_status_counts_the_computes_a_resubmission_says_are_done():
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon import config
    from tests.test_daemon_limits import tiny_job

    st = SchedulerState(config())
    # a runner whose daemon restarted without a journal resubmits with its progress
    assert st.submit_job({"job": tiny_job("a"), "progress": {"done": ["c0", "t"]}}, 0.0) == {"job_id": "a"}
    entry = st.status({}, 1.0)["jobs"]["a"]
    assert (entry["computes_done"], entry["transfers_done"]) == (1, 1)
    st.compute_finished({"job_id": "a", "compute": "c1", "duration_s": 0.1}, 1.5)
    assert st.status({}, 2.0)["jobs"]["a"]["computes_done"] == 2
