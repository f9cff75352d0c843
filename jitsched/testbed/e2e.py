"""``testbed run``: the scenario end to end on the namespace testbed, JIT scheduling or none.

One process tree: the daemon listens on ``ipc://`` endpoints in the root
namespace (Unix sockets reach every namespace, so control traffic never
crosses the shaped links); per host, an agent thread with the tc backend and
a transfer sink live in the host's namespace; every transfer's socket is
opened in its source host's namespace and moves real bytes over the shaped
198.18.0.x links. Background file transfers (not scheduled) run beside.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time

from jitsched import testbed
from jitsched.testbed.netns import in_netns

POLICIES = ("jit", "none")


def run_scenario(scenario: str = "quick", policy: str = "jit", seed: int = 0, prefix: str = "js",
                 link_mbit: float | None = None, timeout_s: float = 120.0, slot_s: float = 0.1,
                 measure_slots: int = 20) -> dict:
    """Bring the testbed up, run the scenario's jobs and background flows, tear down.

    Parameters
    ----------
    scenario : str
        ``quick`` or ``paper-mini`` (:data:`jitsched.testbed.scenario.SCENARIOS`).
    policy : str
        ``jit``: the daemon's ``jit`` policy enforced by tc agents; ``none``:
        the same jobs with no agents, so flows share the shaped links as plain TCP.
    seed : int
        Workload seed (same seed, same jobs and background flows).
    prefix : str
        Testbed name prefix.
    link_mbit : float, optional
        Link rate in Mbit/s (default: the scenario's).
    timeout_s : float
        Per-job limit in seconds.
    slot_s : float
        Scheduling slot in seconds.
    measure_slots : int
        ``jit`` only: slots of random tc rates measured first on hosts 0 -> 1
        (:func:`jitsched.testbed.measure.measure_enforcement`); 0 skips. ``none``
        enforces nothing, so its rate fields are None.

    Returns
    -------
    dict
        ``policy, jobs, completed, mean_jct_s`` (s), ``lat_hit_rate``,
        ``rate_accuracy_p50``/``p5`` (achieved / target rate per slot),
        ``rate_change_latency_ms_p50`` (ms), ``background_mbit_mean`` (Mbit/s,
        mean of the background flows' goodputs)
        and ``details``.
    """
    from jitsched.agents.agent import Agent
    from jitsched.client import TransferSink
    from jitsched.client import send_bytes as _send
    from jitsched.config import DaemonConfig
    from jitsched.daemon.server import Daemon, wait_until
    from jitsched.runner import JobResult, JobRunner
    from jitsched.testbed.scenario import SCENARIOS, build_workload

    if policy not in POLICIES:
        raise testbed.TestbedError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    sc = SCENARIOS[scenario]
    link_mbit = link_mbit or sc["link_mbit"]
    tb = testbed.up(sc["hosts"], link_mbit, prefix=prefix)
    tmp = tempfile.mkdtemp(prefix="jitsched-tb-")
    daemon = agents = sinks = gen = None
    agents, sinks = [], {}
    results: dict[str, JobResult] = {}
    enforcement: dict = {}
    try:
        if policy == "jit" and measure_slots:
            # the tc backend's per-slot rate accuracy and rate-change latency on these very
            # links, measured before the agents take the qdiscs over (the run itself mixes
            # flows that start and stop mid-slot, which says little about enforcement)
            from jitsched.testbed.measure import measure_enforcement, summarize

            enforcement = summarize(measure_enforcement(tb, slot_s=slot_s, n_slots=measure_slots, seed=seed))
        wl, bg = build_workload(tb, link_mbit, scenario, seed)
        netns_of = {h.name: h.netns for h in tb.hosts}
        addr_of = {h.name: h.address for h in tb.hosts}
        cfg = DaemonConfig(cluster=wl.cluster, job_endpoint=f"ipc://{tmp}/jobs",
                           agent_endpoint=f"ipc://{tmp}/agents", policy="jit", slot_s=slot_s,
                           alpha=0.4, heartbeat_s=0.5, heartbeat_timeout_s=3.0)
        daemon = Daemon(cfg)
        daemon.start()
        ns_tag = f"tb{os.getpid()}"
        for h in tb.hosts:
            with in_netns(h.netns):
                sinks[h.name] = TransferSink(h.address)
                if policy == "jit":
                    # threads inherit the creator's namespace: the agent's local socket
                    # (abstract, per namespace) and tc calls live in the host's namespace
                    agents.append(Agent(h.name, daemon.agent_endpoint, backend="tc",
                                        backend_options={"dev": h.dev, "netns": h.netns},
                                        local_namespace=ns_tag).start())
        if agents and not wait_until(lambda: all(a.registered.is_set() for a in agents), 10.0):
            raise testbed.TestbedError("agents did not register")
        agent_names = {a.host: a.local_name for a in agents}
        addrs = {h: s.address for h, s in sinks.items()}

        def send(src: str, addr, nbytes: int, flow: str, agent=None) -> float:
            with in_netns(netns_of[src]):
                return _send(addr, nbytes, flow, agent=agent, timeout_s=timeout_s)

        from jitsched.bgtraffic import Generator
        gen = Generator(bg, netns_of, addr_of)
        lock = threading.Lock()
        t0 = time.monotonic()

        def launch(job) -> None:
            time.sleep(max(0.0, t0 + job.arrival_s - time.monotonic()))
            r = JobRunner(job, daemon.job_endpoint, addrs, agents=agent_names, max_threads=32,
                          send=send).run(timeout_s=timeout_s)
            with lock:
                results[job.id] = r

        gen.start(t0)
        threads = [threading.Thread(target=launch, args=(j,), daemon=True) for j in wl.jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout_s + 30.0)
        t_jobs = time.monotonic() - t0
        bg_window_mbit = gen.throughput_mbit(t_jobs)
        bg_res = dict(gen.results)
        # per-flow goodput (bytes / own duration): the window average above is set by how
        # long the jobs ran, not by how fast the background moved
        flow_mbit = [r["mbit"] for r in bg_res.values() if "mbit" in r]
        bg_mbit = statistics.fmean(flow_mbit) if flow_mbit else None
    finally:
        if gen is not None:
            gen.close()
        for s in sinks.values():
            s.close()
        for a in agents:
            a.stop()
        if daemon is not None:
            daemon.stop()
        testbed.down(prefix)
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    ok = [r for r in results.values() if not r.error]
    known = sum(r.lat_known for r in ok)
    return {
        "policy": policy, "jobs": len(wl.jobs), "completed": len(ok),
        "mean_jct_s": statistics.fmean(r.jct_s for r in ok) if ok else None,
        "lat_hit_rate": sum(r.lat_hits for r in ok) / known if known else None,
        "rate_accuracy_p50": enforcement.get("rate_accuracy_p50"),
        "rate_accuracy_p5": enforcement.get("rate_accuracy_p5"),
        "rate_change_latency_ms_p50": enforcement.get("rate_change_latency_ms_p50"),
        "background_mbit_mean": bg_mbit,
        "details": {"enforcement": enforcement, "background_window_mbit": bg_window_mbit, "scenario": scenario, "seed": seed, "link_mbit": link_mbit, "wall_s": t_jobs,
                    "jct_s": {j: r.jct_s for j, r in sorted(results.items())},
                    "errors": {j: r.error for j, r in results.items() if r.error},
                    "background": bg_res},
    }


__all__ = ["POLICIES", "run_scenario"]
