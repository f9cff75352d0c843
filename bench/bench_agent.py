"""Host agent cost per registration: a many-transfer job's JCT with and without its agents, and one registration's re-apply."""

# Why this bench: every transfer a job registers makes its agent re-apply the slot's
# rates at once. A backend that takes the whole schedule (pacing, the default; record)
# re-walking the schedule for each registration, one FlowRate per transfer the host
# will carry and again for its level, made an Inception-v3 job (851 transfers) alone on
# the demo's loopback take 10.7 s with its agents against 1.4 s without, 79 % of the
# process's GIL in that walk; the agents look up the registered flows instead. This
# bench keeps the figure:
# the same job alone, with and without agents (ratio in the same round), and the time
# of one registration's re-apply against the number of flows the schedule lists: under
# pacing, which now looks up only the flows registered with it (as the tc backends do),
# and under record, which takes the whole schedule (walked once per slot since).

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from jitsched.agents.agent import Agent, LocalFlow, load_backend
from jitsched.agents.options import AgentOptions
from jitsched.client.runner import JobRunner
from jitsched.client.transfer import TransferSink
from jitsched.dag.model import Cluster
from jitsched.protocol import flow_entry

SCHEDULE_FLOWS = (100, 1000, 4000)  # flows a host's schedule lists (a ResNet152 job alone: 2020)


def job_alone(model: str, with_agents: bool, backend: str = "pacing") -> dict:
    """One demo-scale ``model`` job alone on loopback (daemon, 4 agents, sinks); JCT and the ideal, seconds."""
    from jitsched.config import DaemonConfig
    from jitsched.daemon import Daemon
    from jitsched.daemon.server import wait_until
    from jitsched.demo import FULL, demo_jobs

    scale = FULL
    cluster = Cluster.uniform(scale.hosts, bps=scale.link_mbit * 1e6)
    cfg = DaemonConfig(cluster=cluster, job_endpoint="tcp://127.0.0.1:*", agent_endpoint="tcp://127.0.0.1:*",
                       slot_s=scale.slot_s, heartbeat_s=0.5, heartbeat_timeout_s=3.0)
    job = next(j for _, j in demo_jobs(scale, 0)[0] if j.model == model or j.id.startswith(model))
    d = Daemon(cfg).start()
    agents: list[Agent] = []
    sinks = {h: TransferSink("127.0.0.1") for h in cluster.names}
    try:
        agents = [Agent(h, d.agent_endpoint, AgentOptions(backend=backend),
                        local_namespace=f"ba{time.monotonic_ns()}").start()
                  for h in cluster.names]
        if not wait_until(lambda: all(a.registered.is_set() for a in agents), 10.0):
            raise RuntimeError("agents did not register")
        names = {a.host: a.local_name for a in agents} if with_agents else None
        r = JobRunner(job, d.job_endpoint, {h: s.address for h, s in sinks.items()}, agents=names,
                      max_threads=32, async_reports=True).run(timeout_s=300.0)
        if r.error:
            raise RuntimeError(f"{job.id}: {r.error}")
        return {"job": job.id, "transfers": len(job.transfers), "jct_s": r.jct_s, "ideal_jct_s": r.ideal_jct_s,
                "schedule_walks": sum(a.schedule_walks for a in agents)}
    finally:
        for s in sinks.values():
            s.close()
        for a in agents:
            a.stop()
        d.stop()


def reapply_s(n_flows: int, backend: str, registered: int = 32, repeat: int = 200) -> float:
    """Median seconds of one registration's re-apply (``_tick(force=True)``) with ``n_flows`` ranked flows
    listed, ``registered`` of them registered here, under ``backend`` (its sockets are not real: the
    agent's side and the backend's loop over the flows are what is timed)."""
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend=backend))
    a.backend = load_backend(backend, 125e6)
    a.line_rate_Bps = 125e6
    flows = [flow_entry(f"j/t{i}", "h1", 0, [], i) for i in range(n_flows)]
    a._install({"seq": 1, "slot_s": 600.0, "epoch_ns": time.time_ns(), "line_Bps": 125e6, "leftover_Bps": [],
                "flows": flows})
    for i in range(min(registered, n_flows)):
        a.flows[f"j/t{i}"] = LocalFlow(f"j/t{i}", None, "198.18.0.1", 40000 + i, "198.18.0.2", 5201)
    a._tick()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a._tick(force=True, only="out")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of the job each way (default 3; medians)")
    ap.add_argument("--model", default="inception", help="demo model of the job (default inception: 851 transfers)")
    ap.add_argument("--json", action="store_true", help="one JSON line of the figures on stdout")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    runs: dict[str, list[dict]] = {"agents": [], "no_agents": []}
    for i in range(args.repeat):
        for key in ("agents", "no_agents"):  # alternating, so that drift of the machine hits both
            r = job_alone(args.model, key == "agents")
            runs[key].append(r)
            print(f"[{i + 1}/{args.repeat}] {r['job']} {key.replace('_', ' ')}: JCT {r['jct_s']:.2f} s "
                  f"(longest path {r['ideal_jct_s']:.2f} s)", file=sys.stderr, flush=True)
    med = {k: statistics.median(r["jct_s"] for r in v) for k, v in runs.items()}
    per_reg = {b: {n: reapply_s(n, b) for n in SCHEDULE_FLOWS} for b in ("pacing", "record")}
    out = {"job": runs["agents"][0]["job"], "transfers": runs["agents"][0]["transfers"],
           "jct_s_agents": med["agents"], "jct_s_no_agents": med["no_agents"],
           "jct_ratio_agents_over_none": med["agents"] / med["no_agents"],
           "schedule_walks_per_run": statistics.median(r["schedule_walks"] for r in runs["agents"]),
           "reapply_ms": {b: {str(n): t * 1e3 for n, t in v.items()} for b, v in per_reg.items()}}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{out['job']} ({out['transfers']} transfers) alone on loopback, medians of {args.repeat}: "
              f"JCT {med['agents']:.2f} s with its agents (pacing), {med['no_agents']:.2f} s without, "
              f"ratio {out['jct_ratio_agents_over_none']:.2f}; schedule walks per run "
              f"{out['schedule_walks_per_run']:g}")
        for b, v in per_reg.items():
            print(f"one registration's re-apply, {b}: " + ", ".join(
                f"{n} flows listed {t * 1e3:.3f} ms" for n, t in v.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
