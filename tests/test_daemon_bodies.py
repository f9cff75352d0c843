"""Per-host schedule bodies: what each agent is sent, and which hosts may share one packed frame."""

import msgpack
import numpy as np

from jitsched.daemon.bodies import host_bodies, pack_frames
from jitsched.model import Cluster, Host
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
    assert [(f["flow"], f["src"], f["prio"]) for f in bodies["h2"]["in_flows"]] == [("b/g2", "h0", 1)]
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
