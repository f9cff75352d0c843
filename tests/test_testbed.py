"""The emulated cluster on real kernel networking: build/teardown, shaping, enforcement, background traffic.

Needs root and network namespaces (CI has both): without them the tests fail
with the reason instead of skipping, unless JITSCHED_NO_NETNS=1 asks to skip.
Every test uses its own prefix and tears its testbed down in a ``finally``.
"""

from __future__ import annotations

import ipaddress
import math
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import numpy as np
import pytest

from jitsched import netns as netns_mod
from jitsched import testbed
from jitsched.dag.model import parse_cluster
from jitsched.testbed.bgtraffic import BackgroundFlow, Generator, Receiver, connect, send_bytes
from jitsched.testbed.measure import measure_enforcement, summarize

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib




def new_prefix() -> str:
    return "t" + uuid.uuid4().hex[:6]


@pytest.fixture
def make_bed(netns_available):
    """``make_bed(link_mbit)``: a 3-host testbed, torn down after the test even if it fails."""
    prefixes = []

    def make(link_mbit: float = 100.0) -> testbed.Testbed:
        prefixes.append(new_prefix())
        return testbed.up(3, link_mbit, prefix=prefixes[-1])

    try:
        yield make
    finally:
        for p in prefixes:
            testbed.down(p)


@pytest.fixture
def bed(make_bed):
    return make_bed(100.0)


def test_refuses_without_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(testbed.TestbedError, match="root"):
        testbed.up(2, 10, prefix=new_prefix())


def test_rejects_bad_prefix_and_sizes():
    with pytest.raises(testbed.TestbedError, match="prefix"):
        testbed.down("Bad-Prefix")
    with pytest.raises(testbed.TestbedError, match="hosts"):
        testbed.up(1, 10, prefix=new_prefix())


def test_up_refuses_a_cluster_file_it_cannot_write_before_building_anything(tmp_path, monkeypatch, capsys):
    from jitsched.cli import main

    built = []

    def building(*_a, **_k):  # the first step of a build: stop there
        built.append("build")
        raise RuntimeError("the testbed is being built")
    monkeypatch.setattr(testbed, "require_netns", lambda: None)
    monkeypatch.setattr(testbed, "down", building)
    for where, message in ((tmp_path / "missing" / "c.toml", f"directory {tmp_path / 'missing'} does not exist"),
                           (tmp_path, "a directory, not a file")):
        with pytest.raises(testbed.TestbedError, match=f"--cluster-file {where}: {message}"):
            testbed.up(2, 10, prefix=new_prefix(), cluster_file=where)
        assert main(["testbed", "up", "--hosts", "2", "--prefix", new_prefix(), "--cluster-file", str(where)]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("jitsched testbed: error: --cluster-file"), err
    assert built == []


def test_up_builds_hosts_addresses_cluster_file_and_down_removes_all(bed):
    names = netns_mod.list_netns(bed.prefix + "-")
    assert names == sorted([f"{bed.prefix}-h{i}" for i in range(3)] + [f"{bed.prefix}-sw"])
    for h in bed.hosts:
        assert ipaddress.ip_address(h.address) in ipaddress.ip_network("198.18.0.0/15")
        out = subprocess.run(["ip", "-n", h.netns, "-4", "addr", "show", "dev", "eth0"],
                             capture_output=True, text=True, check=True).stdout
        assert f"{h.address}/24" in out
        # Egress shaped on the host side, ingress on the bridge port.
        for ns, dev in ((h.netns, h.dev), (bed.switch_netns, h.switch_port)):
            q = subprocess.run(["ip", "netns", "exec", ns, "tc", "class", "show", "dev", dev],
                               capture_output=True, text=True, check=True).stdout
            assert "class htb 1:1 root rate 100Mbit ceil 100Mbit" in q
    with open(bed.cluster_file, "rb") as f:
        cluster = parse_cluster(tomllib.load(f))
    assert cluster.names == ["h0", "h1", "h2"]
    assert cluster.hosts[2].egress_bps == 100e6 and cluster.hosts[2].address == bed.hosts[2].address
    # Nothing of the testbed lives in the root namespace.
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert bed.prefix not in root_links

    assert set(testbed.down(bed.prefix)) == set(names)
    assert netns_mod.list_netns(bed.prefix + "-") == []
    assert not os.path.exists(bed.cluster_file)
    assert testbed.down(bed.prefix) == []  # idempotent


def test_link_is_shaped_to_its_rate(make_bed):
    bed = make_bed(20.0)
    h0, h1 = bed.hosts[0], bed.hosts[1]
    rx = Receiver(h1.address, 5001, netns=h1.netns)
    try:
        s = connect(h1.address, 5001, "bulk", netns=h0.netns)
        stop = threading.Event()
        th = threading.Thread(target=send_bytes, args=(s, float("inf"), stop), daemon=True)
        th.start()
        time.sleep(1.5)
        stop.set()
        th.join(5)
        rec = rx.flows["bulk"]
        t0 = rec.start_s + 0.3
        mbit = rec.bytes_between(t0, t0 + 1.0) * 8 / 1e6
    finally:
        rx.close()
    # 20 Mbit/s on the wire is 19.1 Mbit/s of TCP payload.
    assert 20 * 1448 / 1514 * 0.95 < mbit < 20 * 1.01


def test_down_cleans_up_after_a_crashed_owner(netns_available):
    prefix = new_prefix()
    code = (f"import subprocess, time; from jitsched import testbed; tb = testbed.up(2, 10, prefix={prefix!r}); "
            "subprocess.Popen(['ip', 'netns', 'exec', tb.hosts[0].netns, 'sleep', '600']); "
            "print('up', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "up"
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        pids = subprocess.run(["ip", "netns", "pids", f"{prefix}-h0"], capture_output=True, text=True).stdout
        assert pids.split(), "the orphaned process inside the namespace should still be running"
        removed = testbed.down(prefix)
        assert f"{prefix}-h0" in removed
        assert netns_mod.list_netns(prefix + "-") == []
        for pid in pids.split():
            assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    finally:
        p.kill()
        testbed.down(prefix)


def test_tc_backend_enforces_per_slot_rates_end_to_end(bed):
    # A short run of the bench's measurement: 12 slots of 100 ms, 3 flows + background.
    m = measure_enforcement(bed, n_flows=3, slot_s=0.1, n_slots=12, seed=3)
    s = summarize(m)
    assert len(m["ratio"]) == 36
    assert abs(s["rate_accuracy_p50"] - 1) < 0.05, s
    assert s["rate_accuracy_p5"] > 0.8, s
    assert s["rate_change_latency_ms_p50"] < 5.0, s
    # Background gets the leftover, and not much more (the link is shaped).
    assert 0.7 * s["leftover_mbit"] < s["background_mbit"] < 1.15 * s["leftover_mbit"], s


def test_background_generator_completes_flows_and_reports_throughput(bed):
    h = {x.name: x for x in bed.hosts}
    flows = [BackgroundFlow("bg0", "h0", "h2", 2e6, 0.0), BackgroundFlow("bg1", "h1", "h2", 2e6, 0.1)]
    gen = Generator(flows, {k: v.netns for k, v in h.items()}, {k: v.address for k, v in h.items()})
    try:
        gen.start()
        deadline = time.monotonic() + 10
        while len(gen.results) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        t_end = time.monotonic() - gen.t0
    finally:
        gen.close()
    assert set(gen.results) == {"bg0", "bg1"}
    assert all(r["complete"] and r["bytes"] == 2e6 for r in gen.results.values())
    # Both share h2's 100 Mbit/s ingress: 4 MB cannot take less than 0.32 s.
    assert max(r["end_s"] for r in gen.results.values()) > 4e6 * 8 / 100e6
    assert 0 < gen.throughput_mbit(t_end) < 100
    assert np.isfinite(gen.results["bg1"]["mbit"])


def start_sending(sock, stop: threading.Event, threads: list) -> None:
    """Send on ``sock`` flat out from a thread of ``threads`` until ``stop``."""
    threads.append(threading.Thread(target=send_bytes, args=(sock, float("inf"), stop), daemon=True))
    threads[-1].start()


def recent_Bps(rx: Receiver, flow: str, window_s: float) -> float:
    """Bytes/s ``rx`` received of ``flow`` over the last ``window_s`` seconds."""
    t = time.monotonic()
    return rx.flows[flow].bytes_between(t - window_s, t) / window_s


@pytest.mark.parametrize("spare", ["background", "shared"])
def test_tc_borrow_makes_the_plan_a_floor(bed, spare):
    # borrow=True (what `testbed run` uses under jit): a flow planned at 10 % of the link
    # takes the whole idle link; once background wants the link too, the flow falls back
    # to about its rate (spare="background") or the two split what no class's rate holds
    # (shared): here the plan leaves background 30 % (other flows hold the rest but are idle)
    from jitsched.agents.backends.base import FlowRate
    from jitsched.agents.backends.tc import TcBackend

    h0, h1 = bed.hosts[0], bed.hosts[1]
    rx = Receiver(h1.address, 5302, netns=h1.netns)
    backend = TcBackend(bed.link_Bps, dev=h0.dev, netns=h0.netns, borrow=True, spare=spare)
    stop = threading.Event()
    threads = []
    try:
        s = connect(h1.address, 5302, "planned", netns=h0.netns)
        src, sport = s.getsockname()[:2]
        rate = 0.1 * bed.link_Bps
        backend.apply([FlowRate("planned", rate, src, sport, h1.address, 5302)], 0.3 * bed.link_Bps)
        start_sending(s, stop, threads)
        time.sleep(0.8)
        alone = recent_Bps(rx, "planned", 0.5)
        start_sending(connect(h1.address, 5302, "bg", netns=h0.netns), stop, threads)
        time.sleep(1.2)
        shared, bg = recent_Bps(rx, "planned", 0.6), recent_Bps(rx, "bg", 0.6)
    finally:
        stop.set()
        for th in threads:
            th.join(5)
        backend.close()
        rx.close()
    assert alone > 0.8 * bed.link_Bps, alone / bed.link_Bps
    if spare == "background":
        assert 0.7 * rate < shared < 1.6 * rate, shared / rate
        assert bg > 0.7 * bed.link_Bps, bg / bed.link_Bps
    else:  # its 10 % plus about half of the 60 % no class holds; background its 30 % and the rest
        assert 0.25 * bed.link_Bps < shared < 0.55 * bed.link_Bps, shared / bed.link_Bps
        assert 0.4 * bed.link_Bps < bg < 0.75 * bed.link_Bps, bg / bed.link_Bps


def test_scenarios_are_the_papers_jobs_and_files_scaled_to_the_link_and_seeded():
    from jitsched.testbed.scenario import PAPER_FILE_GBIT, SCENARIOS, build_workload
    from jitsched.workloads.paper import model_template

    sc = SCENARIOS["quick"]
    w1, bg1 = build_workload(sc.hosts, 100.0, "quick", seed=7)
    w2, bg2 = build_workload(sc.hosts, 100.0, "quick", seed=7)
    assert w1.to_dict() == w2.to_dict() and bg1 == bg2
    assert build_workload(sc.hosts, 100.0, "quick", seed=8)[0].to_dict() != w1.to_dict()
    assert len(w1.jobs) == sc.jobs and len(bg1) == sc.files
    assert all(h.egress_bps == 100e6 for h in w1.cluster.hosts)
    # models in equal shares, each the real DAG with its bytes scaled by 100 Mbit/s / 1 Gbit/s
    models = sorted(j.model for j in w1.jobs)
    assert models == sorted(list(sc.models) * (sc.jobs // len(sc.models)))
    for j in w1.jobs:
        full = sum(t.bytes for t in model_template(j.model).transfers)
        assert abs(sum(t.bytes for t in j.transfers) / full - 0.1) < 1e-3
        assert len({t.src for t in j.transfers} | {t.dst for t in j.transfers}) == 2
    # files: the paper's sizes at the same scale, already moving when the first job arrives
    assert {b.bytes for b in bg1} <= {g * 1e9 / 8 * 0.1 for g in sc.file_gbit}
    assert set(sc.file_gbit) <= set(PAPER_FILE_GBIT)
    assert all(b.src != b.dst for b in bg1)
    first_job = min(j.arrival_s for j in w1.jobs)
    assert min(b.arrival_s for b in bg1) == 0.0 and first_job == sc.file_lead_s > 0
    assert max(b.arrival_s for b in bg1) <= max(j.arrival_s for j in w1.jobs)
    with pytest.raises(testbed.TestbedError, match="unknown scenario"):
        build_workload(4, 100.0, "nope")


def test_sharded_scenario_spreads_each_job_over_two_servers_and_two_workers():
    from jitsched.testbed.scenario import SCENARIOS, build_workload
    from jitsched.workloads.paper import model_template

    sc = SCENARIOS["sharded"]
    wl, bg = build_workload(sc.hosts, 100.0, "sharded", seed=3)
    assert wl.to_dict() == build_workload(sc.hosts, 100.0, "sharded", seed=3)[0].to_dict() and bg == []
    assert sorted(j.model for j in wl.jobs) == sorted(list(sc.models) * (sc.jobs // len(sc.models)))
    placements = set()
    for j in wl.jobs:
        template = model_template(j.model).transfers
        pull_ids = {t.id for t in template if t.src == "ps"}
        # expanded ids: w<worker>/<template id>#<shard>
        pulls = [t for t in j.transfers if t.id.split("/", 1)[1].rsplit("#", 1)[0] in pull_ids]
        servers, workers = {t.src for t in pulls}, {t.dst for t in pulls}
        assert len(servers) == len(workers) == 2 and not servers & workers
        assert {t.src for t in j.transfers if t not in pulls} == workers
        # every worker takes every tensor (sliced over both servers), its bytes scaled to the link
        full = sum(t.bytes for t in template if t.src == "ps")
        assert abs(sum(t.bytes for t in pulls) / (2 * full) - 0.1) < 1e-3
        placements.add(tuple(sorted(servers)))
    assert len(placements) > 1  # the servers are drawn per job
    with pytest.raises(testbed.TestbedError, match="need at least 3 hosts"):
        build_workload(2, 100.0, "sharded")


def test_rings_scenario_makes_each_job_a_ring_over_every_host():
    from jitsched.testbed.scenario import SCENARIOS, build_workload

    sc = SCENARIOS["rings"]
    wl, bg = build_workload(sc.hosts, 100.0, "rings", seed=3)
    assert bg == [] and len(wl.jobs) == sc.jobs
    orders = set()
    for j in wl.jobs:
        pairs = {(t.src, t.dst) for t in j.transfers}
        # each host sends to one host and receives from one: a single cycle over all four
        nxt = dict(pairs)
        assert len(pairs) == len(nxt) == sc.hosts and sorted(nxt.values()) == sorted(nxt)
        h, seen = "h0", []
        while h not in seen:
            seen.append(h)
            h = nxt[h]
        assert len(seen) == sc.hosts
        orders.add(tuple(seen))
    assert len(orders) > 1  # the ring's order is drawn per job
    with pytest.raises(testbed.TestbedError, match="at least 3 hosts"):
        build_workload(2, 100.0, "rings")


def test_mixed_scenario_has_each_shape_twice_on_every_host():
    from jitsched.dag.model import compile_jobs
    from jitsched.policies.jit import ring_hosts
    from jitsched.testbed.scenario import SCENARIOS, build_workload

    sc = SCENARIOS["mixed"]
    wl, bg = build_workload(sc.hosts, 100.0, "mixed", seed=0)
    assert bg == [] and len(wl.jobs) == sc.jobs
    shapes = []
    for j in wl.jobs:
        senders = {t.src for t in j.transfers}
        receivers = {t.dst for t in j.transfers}
        assert senders == receivers == {h.name for h in wl.cluster.hosts}  # every job on all four hosts
        out = {h: {t.dst for t in j.transfers if t.src == h} for h in senders}
        fan = sorted(len(d) for d in out.values())
        # a server with three workers, two servers with two workers each way, a ring
        shapes.append({(1, 1, 1, 3): "ps", (2, 2, 2, 2): "ps-sharded", (1, 1, 1, 1): "allreduce"}[tuple(fan)])
    assert sorted(shapes) == sorted(["ps", "ps-sharded", "allreduce"] * 2)
    rings = ring_hosts(compile_jobs(wl.jobs, wl.cluster), sc.hosts)
    assert [int(n) for n in rings] == [4 if s == "allreduce" else 1 for s in shapes]
    assert build_workload(sc.hosts, 100.0, "mixed", seed=1)[0].to_dict() != wl.to_dict()
    with pytest.raises(testbed.TestbedError, match="at least 3 hosts"):
        build_workload(2, 100.0, "mixed")


def test_on_testbed_puts_the_files_hosts_in_order_and_scales_its_bytes_to_the_link():
    from jitsched.dag.model import Background, Cluster, Compute, Host, Job, Workload
    from jitsched.errors import ValidationError
    from jitsched.testbed.scenario import file_scenario, on_testbed
    from jitsched.workloads.paper import load_model_job

    cluster = Cluster.uniform(3, 1e10, prefix="gpu")
    job = load_model_job("alexnet", "gpu2", "gpu1", "a", 1.5)
    wl = Workload(cluster, (job,), (Background("f", "gpu0", "gpu1", 1e9, 2.0),))
    placed, bg = on_testbed(wl, 3, 100.0)
    assert placed.cluster.names == ["h0", "h1", "h2"]
    assert all(h.egress_bps == h.ingress_bps == 100e6 for h in placed.cluster.hosts)
    [moved] = placed.jobs
    assert moved.id == "a" and moved.arrival_s == 1.5 and moved.edges == job.edges
    assert [(c.host, c.duration_s) for c in moved.computes] == [
        ({"gpu1": "h1", "gpu2": "h2"}[c.host], c.duration_s) for c in job.computes]
    # every transfer takes as long at 100 Mbit/s as at 10 Gbit/s
    assert [(t.src, t.dst, t.bytes) for t in moved.transfers] == [
        ({"gpu1": "h1", "gpu2": "h2"}[t.src], {"gpu1": "h1", "gpu2": "h2"}[t.dst], max(1.0, round(t.bytes / 100)))
        for t in job.transfers]
    assert [(b.id, b.src, b.dst, b.bytes, b.arrival_s) for b in bg] == [("f", "h0", "h1", 1e7, 2.0)]
    sc = file_scenario(wl, 100.0)
    assert (sc.hosts, sc.jobs, sc.files, sc.link_mbit, sc.bulk_share) == (3, 1, 1, 100.0, 0.0)
    with pytest.raises(testbed.TestbedError, match="the workload has 3 hosts, the testbed 4"):
        on_testbed(wl, 4, 100.0)
    one = Workload(Cluster.uniform(1, 1e10, prefix="gpu"), (Job("c", (Compute("a", "gpu0", 1.0),), (), ()),))
    with pytest.raises(testbed.TestbedError, match="2 to 200 hosts; the workload has 1"):
        on_testbed(one, 1, 100.0)
    mixed = Cluster(cluster.hosts[:2] + (Host("gpu2", 1e10, 4e10),))
    with pytest.raises(ValidationError, match="all of one rate"):
        on_testbed(Workload(mixed, (job,)), 3, 100.0)
    with pytest.raises(ValidationError, match="no jobs"):
        on_testbed(Workload(cluster), 3, 100.0)


def test_predict_runs_jit_on_the_shaped_ingress(monkeypatch):
    from jitsched.errors import ValidationError
    from jitsched.testbed.measure import GOODPUT
    from jitsched.testbed.scenario import SCENARIOS, Scenario, predict

    # one 62.5 MB file alone (the job arrives 30 s later): at the line rate under
    # fair sharing, at half of it into an ingress shaped to 0.5 under jit
    monkeypatch.setitem(SCENARIOS, "alone", Scenario(hosts=2, jobs=1, rate_per_s=1.0, models=("lenet",),
                                                     files=1, file_gbit=(5.0,), file_lead_s=30.0))
    p = predict("alone", ingress_share=0.5)
    assert p["tensorflow"]["background_mbit_mean"] == pytest.approx(100.0 * GOODPUT)
    assert p["jit"]["background_mbit_mean"] == pytest.approx(50.0 * GOODPUT)
    assert predict("alone")["jit"]["background_mbit_mean"] == pytest.approx(100.0 * GOODPUT)
    # the baselines as the testbed enforces them: through the same shaped ingress
    b = predict("alone", ingress_share=0.5, baselines=("sincronia", "tictac", "varys"))
    for name in ("sincronia", "tictac", "varys"):
        assert b[name]["background_mbit_mean"] == pytest.approx(50.0 * GOODPUT)
    assert b["sincronia"]["jct_s"].keys() == b["jit"]["jct_s"].keys()
    with pytest.raises(ValidationError, match="ingress_share"):
        predict("alone", ingress_share=0.0)
    with pytest.raises(ValidationError, match="baselines"):
        predict("alone", baselines=("none",))


def test_predict_ranks_announced_files_as_jit_and_sincronia_do(monkeypatch):
    from jitsched.testbed.measure import GOODPUT
    from jitsched.testbed.scenario import SCENARIOS, Scenario, predict

    # two hosts, a 12.5 MB file (1 s at 100 Mbit/s, 1 / GOODPUT s of payload) from 0 s, an AlexNet job from 0.5 s
    # (8 ms for Smith's key of the file against the job's tens of MB: the file first)
    monkeypatch.setitem(SCENARIOS, "pair", Scenario(hosts=2, jobs=1, rate_per_s=1.0, models=("alexnet",),
                                                    files=1, file_gbit=(1.0,), file_lead_s=0.5))
    quiet = predict("pair", baselines=("sincronia", "tictac", "varys"))
    told = predict("pair", baselines=("sincronia", "tictac", "varys"), announce_files=True)
    for name in ("jit", "sincronia", "varys"):
        # unannounced, behind the job wherever they share a port; announced, at the line rate
        # throughout, and the job starts its sends when the file is done
        assert quiet[name]["background_mbit_mean"] < 0.5 * 100.0 * GOODPUT
        assert told[name]["background_mbit_mean"] == pytest.approx(100.0 * GOODPUT)
        assert told[name]["mean_jct_s"] == pytest.approx(quiet[name]["mean_jct_s"] + 1.0 / GOODPUT - 0.5, abs=1e-3)
    # TicTac's order knows no files; fair sharing does not depend on being told
    assert told["tictac"] == quiet["tictac"] and told["tensorflow"] == quiet["tensorflow"]


def test_predict_simulates_varys_and_jit_as_their_agents_enforce_them(monkeypatch):
    import jitsched.sim
    from jitsched.policies import make_policy
    from jitsched.testbed.scenario import predict

    seen = {}
    real = jitsched.sim.simulate

    def spy(wl, policy, **kw):
        seen[policy] = kw.get("policy_options")
        return real(wl, policy, **kw)

    monkeypatch.setattr(jitsched.sim, "simulate", spy)
    predict("quick", baselines=("varys",), background_floor=0.05)
    # its order as ranks (no MADD rates), the files after every job with the agents' floor
    assert seen["varys"] == {"background": "last", "bg_floor": 0.05, "madd": False}
    predict("quick", baselines=("varys",), announce_files=True)
    assert seen["varys"] == {"background": "coflows", "madd": False}
    # jit as its daemon ranks: strict priority with no group lending its slack
    assert seen["jit"]["lend_slack"] == math.inf
    assert make_policy("jit").ranked_options() == {"lend_slack": math.inf}


def test_predict_runs_the_same_workload_in_the_fluid_simulator(monkeypatch):
    from jitsched.testbed.scenario import SCENARIOS, Scenario, build_workload, predict

    monkeypatch.setitem(SCENARIOS, "tiny", Scenario(hosts=3, jobs=2, rate_per_s=2.0,
                                                    models=("lenet", "alexnet"), files=1,
                                                    file_gbit=(5.0,)))
    p = predict("tiny", seed=1)
    wl, _ = build_workload(3, 100.0, "tiny", seed=1)
    assert set(p["tensorflow"]["jct_s"]) == set(p["jit"]["jct_s"]) == {j.id for j in wl.jobs}
    for j in wl.jobs:
        # no job beats its bytes over one 100 Mbit/s link in either direction
        per_dir = {}
        for t in j.transfers:
            per_dir[t.src] = per_dir.get(t.src, 0.0) + t.bytes
        floor = max(per_dir.values()) * 8 / 100e6
        assert p["tensorflow"]["jct_s"][j.id] >= floor and p["jit"]["jct_s"][j.id] >= floor
    ratio = p["tensorflow"]["mean_jct_s"] / p["jit"]["mean_jct_s"]
    assert abs(p["jct_ratio_tf_over_jit"] - ratio) < 1e-12
    assert p["tensorflow"]["background_slowdown"] >= 1.0 - 1e-9


def test_tc_ingress_keeps_an_inbound_flows_plan_against_another_sender(bed):
    # two senders into h2: in the switch port's FIFO plain TCP splits the port about
    # evenly; with h2's ingress shaped below the port (tc-ingress) the planned inbound
    # flow keeps its floor and the other sender gets the rest
    from jitsched.agents.backends.base import FlowRate
    from jitsched.agents.backends.tc import TcIngressBackend

    h0, h1, h2 = bed.hosts
    rx = Receiver(h2.address, 5303, netns=h2.netns)
    shaped = 0.98 * bed.link_Bps
    backend = None
    stop = threading.Event()
    threads = []
    try:
        backend = TcIngressBackend(bed.link_Bps, dev=h2.dev, netns=h2.netns, share=0.98, borrow=True)
        p = connect(h2.address, 5303, "planned", netns=h0.netns)
        src, sport = p.getsockname()[:2]
        rate = 0.75 * shaped
        backend.apply([FlowRate("planned", rate, src, sport, h2.address, 5303)], shaped - rate)
        for s in (p, connect(h2.address, 5303, "other", netns=h1.netns)):
            start_sending(s, stop, threads)
        time.sleep(1.6)
        planned, other = recent_Bps(rx, "planned", 0.8), recent_Bps(rx, "other", 0.8)
    finally:
        stop.set()
        for th in threads:
            th.join(5)
        if backend is not None:
            backend.close()
        rx.close()
    assert planned > 0.85 * rate, (planned / rate, other / bed.link_Bps)
    assert other > 0.1 * bed.link_Bps, other / bed.link_Bps
    assert planned + other > 0.85 * bed.link_Bps, (planned + other) / bed.link_Bps


def test_background_contention_counts_dl_bytes_on_a_files_ports_during_its_life():
    from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload
    from jitsched.testbed.scenario import background_contention

    job = Job("j", (Compute("c", "h1", 0.1),),
              (Transfer("same-path", "h0", "h1", 4e6),   # the file's very path: both ports
               Transfer("egress", "h0", "h2", 2e6),      # the file's sender only
               Transfer("ingress", "h2", "h1", 1e6),     # the file's receiver only
               Transfer("elsewhere", "h2", "h0", 8e6),   # neither port
               Transfer("instant", "h0", "h2", 5e5)),    # zero duration, inside the life
              (("same-path", "c"),), 1.0)
    wl = Workload(Cluster.uniform(3), (job,))
    bg = [BackgroundFlow("f", "h0", "h1", 1e8, 0.0), BackgroundFlow("unfinished", "h0", "h1", 1e8, 0.0)]
    # spans from the job's arrival (1 s): same-path 1-3 s (half inside the file's 2-4 s life),
    # egress 2-3 s (all inside), ingress 5-6 s (after), instant at 3 s
    spans = {"j": {"same-path": [0.0, 2.0], "egress": [1.0, 1.0], "ingress": [4.0, 1.0],
                   "elsewhere": [1.0, 2.0], "instant": [2.0, 0.0]}}
    files = {"f": {"start_s": 2.0, "end_s": 4.0}, "unfinished": {"start_s": 0.0, "end_s": None}}
    out = background_contention(wl, bg, spans, files)
    assert set(out) == {"f"}
    assert out["f"]["egress_dl_mb"] == pytest.approx(2.0 + 2.0 + 0.5)
    assert out["f"]["ingress_dl_mb"] == pytest.approx(2.0)
    assert out["f"]["life_s"] == pytest.approx(2.0)


def test_predict_gives_unannounced_files_the_agents_floor(monkeypatch):
    from jitsched.testbed.scenario import SCENARIOS, Scenario, predict

    monkeypatch.setitem(SCENARIOS, "pair", Scenario(hosts=2, jobs=1, rate_per_s=1.0, models=("alexnet",),
                                                    files=1, file_gbit=(1.0,), file_lead_s=0.5))
    base = predict("pair", baselines=("sincronia", "tictac"), background_floor=0.0)
    floored = predict("pair", baselines=("sincronia", "tictac"), background_floor=0.3)
    for name in ("jit", "sincronia", "tictac"):
        # the file behind the job without a floor, 30 % of the port beside it with one
        assert floored[name]["background_mbit_mean"] > base[name]["background_mbit_mean"] + 5.0
        assert floored[name]["mean_jct_s"] > base[name]["mean_jct_s"]
    assert floored["tensorflow"] == base["tensorflow"]  # plain TCP has no agents
    # announced files are ranked, not in the agents' background class: no floor
    told = predict("pair", announce_files=True, background_floor=0.0)
    assert predict("pair", announce_files=True, background_floor=0.3)["jit"] == told["jit"]
