"""Flood bench: one client pipelines big ``report`` messages while 100 agents heartbeat; agents marked down, status latency."""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

from jitsched.bench.bench_faults import DaemonProc, _percentile, log
from jitsched.protocol import MAX_REPORT_EVENTS, MsgType, decode_reply, encode_request
from jitsched.workloads.synth import layer_chain_job

FLOOD_JOB = "flood"


def host_names(n: int) -> tuple[str, ...]:
    """``h0`` .. ``h{n-1}``."""
    return tuple(f"h{i}" for i in range(n))


def report_message(events: int = MAX_REPORT_EVENTS) -> bytes:
    """A valid ``report`` about the flood job: ``events`` ``started`` events cycling over its
    32 transfers (each idempotent after the first), ~78 kB at 4,096 events."""
    job = layer_chain_job(FLOOD_JOB, "h0", "h1")
    tids = [t.id for t in job.transfers]
    evs = [["started", tids[i % len(tids)], None] for i in range(events)]
    return encode_request(MsgType.REPORT, {"job_id": FLOOD_JOB, "events": evs})


def _agents_main(names: list[str], endpoint: str, tag: str, conn) -> None:
    """Child process: a record agent per host; reports how many dropped their schedule
    (the daemon silent past its heartbeat timeout) once the parent says stop."""
    from jitsched.agents.agent import Agent
    from jitsched.agents.options import AgentOptions
    from jitsched.daemon.server import wait_until

    # each agent says when it reconnects or drops its schedule: counted here instead
    logging.getLogger("jitsched.agent").setLevel(logging.ERROR)
    ctx = zmq.Context.instance()
    ctx.set(zmq.MAX_SOCKETS, 4 * len(names) + 64)
    agents = [Agent(h, endpoint, AgentOptions(backend="record"),
                    local_namespace=f"{tag}{i}") for i, h in enumerate(names)]
    try:
        for a in agents:
            a.start()
        conn.send(wait_until(lambda: all(a.registered.is_set() for a in agents), 60))
        conn.recv()  # the flood starts
        base = {a.host: a.dropped for a in agents}
        conn.recv()  # the flood ended
        conn.send({"dropped": sum(a.dropped - base[a.host] for a in agents),
                   "agents_dropping": sum(a.dropped > base[a.host] for a in agents),
                   "failed": sum(a.failure is not None or not a.running for a in agents)})
    finally:
        for a in agents:
            a.stop(2.0)


def _flooder_main(endpoint: str, seconds: float, events: int, conn) -> None:
    """Child process: pipeline ``report`` messages as fast as the sockets take them for
    ``seconds``, reading replies as they come; sends back counts."""
    data = report_message(events)
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    sent = answered = errors = 0
    codes: dict[str, int] = {}
    conn.send(len(data))
    conn.recv()  # go
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            while True:  # as many as the socket takes without blocking
                try:
                    s.send(data, zmq.NOBLOCK)
                    sent += 1
                except zmq.Again:
                    break
            if s.poll(10):
                while True:
                    try:
                        rep = decode_reply(s.recv(zmq.NOBLOCK))
                    except zmq.Again:
                        break
                    answered += 1
                    if not rep.ok:
                        errors += 1
                        codes[rep.code] = codes.get(rep.code, 0) + 1
    finally:
        s.close(0)
        ctx.term()
    conn.send({"sent": sent, "answered": answered, "errors": errors, "codes": codes})


def flood(workdir: Path, seconds: float = 10.0, n_agents: int = 100, events: int = MAX_REPORT_EVENTS,
          heartbeat_s: float = 0.5, heartbeat_timeout_s: float = 2.0, status_every_s: float = 0.01) -> dict:
    """Agents marked down and a second client's ``status`` latency while one client floods
    ``report`` messages about its own job.

    A daemon process serves ``n_agents`` hosts with its default heartbeats
    (``heartbeat_s`` 0.5, ``heartbeat_timeout_s`` 2); a child process runs one
    record agent per host; another child submits a VGG16 job (``h0`` -> ``h1``)
    and then, for ``seconds``, sends ``report`` messages of ``events`` valid
    events each as fast as its socket takes them, without waiting for replies;
    this process asks ``status`` every ``status_every_s`` meanwhile.

    Returns
    -------
    dict
        ``flood_agents_down``: hosts the daemon marked down during the flood
        (its ``agent_down`` log lines; goal 0), ``flood_status_p99_s``, and the
        flood's own figures (reports sent and answered, agents that dropped
        their schedule for the daemon's silence).
    """
    from jitsched.client import Client

    hosts = host_names(n_agents)
    d = DaemonProc(workdir, hosts=hosts,
                   daemon_options={"heartbeat_s": heartbeat_s, "heartbeat_timeout_s": heartbeat_timeout_s,
                                   "resend_s": 0.2})
    ctx = mp.get_context("spawn")
    procs: list = []
    lat: list[float] = []
    timeouts = 0
    stop = threading.Event()
    try:
        d.start()
        with Client(d.job_endpoint, timeout_s=30.0) as c:
            c.submit_job(layer_chain_job(FLOOD_JOB, "h0", "h1"))
        a_conn, a_theirs = ctx.Pipe()
        agents = ctx.Process(target=_agents_main, args=(list(hosts), d.agent_endpoint, f"fl{d.pid}-", a_theirs),
                             daemon=True)
        f_conn, f_theirs = ctx.Pipe()
        flooder = ctx.Process(target=_flooder_main, args=(d.job_endpoint, seconds, events, f_theirs), daemon=True)
        procs = [agents, flooder]
        agents.start()
        flooder.start()
        if not (a_conn.poll(120) and a_conn.recv()):
            raise RuntimeError(f"{n_agents} agents did not register")
        msg_bytes = f_conn.recv()
        time.sleep(2 * heartbeat_s)  # every agent heartbeats once more before the flood
        log_at = d.log_path.stat().st_size

        def poll_status() -> None:
            nonlocal timeouts
            with Client(d.job_endpoint, timeout_s=10.0) as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    try:
                        c.status(limit=1)
                    except TimeoutError:
                        timeouts += 1
                        continue
                    lat.append(time.perf_counter() - t0)
                    stop.wait(status_every_s)

        poller = threading.Thread(target=poll_status, name="flood-status", daemon=True)
        a_conn.send("go")
        f_conn.send("go")
        t0 = time.monotonic()
        poller.start()
        if not f_conn.poll(seconds + 120):
            raise RuntimeError("the flooding client did not finish")
        fl = f_conn.recv()
        flood_s = time.monotonic() - t0
        stop.set()
        poller.join(30)
        a_conn.send("stop")
        ag = a_conn.recv() if a_conn.poll(60) else {}
        with open(d.log_path, "rb") as fh:
            fh.seek(log_at)
            tail = fh.read().decode(errors="replace")
        down_hosts = set(re.findall(r"event=agent_down host=(\S+)", tail))
        alive = d.serving(10.0)
    finally:
        stop.set()
        for p in procs:
            p.join(15)
            if p.is_alive():
                p.kill()
                p.join(5)
        d.stop()
    out = {"flood_s": round(flood_s, 3), "flood_agents": n_agents, "flood_report_bytes": msg_bytes,
           "flood_report_events": events, "flood_reports_sent": fl["sent"], "flood_reports_answered": fl["answered"],
           "flood_report_errors": fl["errors"], "flood_agents_down": len(down_hosts),
           "flood_agent_down_lines": tail.count("event=agent_down"),
           "flood_agents_dropped_schedule": ag.get("agents_dropping"), "flood_agents_failed": ag.get("failed"),
           "flood_status_p50_s": _percentile(lat, 0.5), "flood_status_p99_s": _percentile(lat, 0.99),
           "flood_status_max_s": max(lat) if lat else None, "flood_status_n": len(lat),
           "flood_status_timeouts": timeouts, "flood_daemon_serving_after": alive}
    p99 = out["flood_status_p99_s"]
    log(f"flood: {fl['answered']}/{fl['sent']} reports of {events} events ({msg_bytes / 1e3:.0f} kB) answered in "
        f"{flood_s:.1f} s; agents marked down {len(down_hosts)} of {n_agents}, dropped their schedule "
        f"{ag.get('agents_dropping')}; status p99 {p99 * 1e3 if p99 is not None else float('nan'):.1f} ms over "
        f"{len(lat)} ({timeouts} timed out)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    ap.add_argument("--flood-s", type=float, default=10.0, help="seconds of flooding (default 10)")
    ap.add_argument("--agents", type=int, default=100, help="agents heartbeating meanwhile (default 100)")
    ap.add_argument("--events", type=int, default=MAX_REPORT_EVENTS,
                    help=f"events per report message (default {MAX_REPORT_EVENTS}, the most one may carry)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-flood-") as tmp:
        out = flood(Path(tmp), args.flood_s, args.agents, args.events)
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:<32} {v}")
    return 1 if out["flood_agents_down"] or not out["flood_daemon_serving_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
