"""Testbed scenarios of real PyTorch jobs: parameter-server training over Gloo in the host namespaces, beside unannounced file transfers."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass

from jitsched import testbed
from jitsched.netns import socket_in
from jitsched.testbed.measure import GOODPUT
from jitsched.testbed.options import TestbedOptions

# The first step of each worker is left out of the means: it carries the DAG's
# registration and the first touch of the Gloo pair's buffers.
WARMUP_ITERATIONS = 1
# How long the ranks may take to import torch and meet (about 40 s on a loaded 2-core machine).
RANK_START_S = 120.0


@dataclass(frozen=True)
class TorchScenario:
    """Real PyTorch parameter-server jobs (:mod:`jitsched.examples.torch_ps`) and file transfers.

    Every job is a parameter server and one worker, each a process started
    with ``ip netns exec`` in its host's namespace; Gloo's rendezvous and
    connections use the namespace addresses. The worker registers the DAG its
    :class:`jitsched.adapters.pytorch.TorchTrainer` captured from the module;
    both ranks attach their own connections on their host's agent (every
    policy but ``none``), which classifies them by sock_diag and ranks them.
    The files are background jitsched does not know of.

    Attributes
    ----------
    hosts : int
        Emulated hosts.
    jobs : tuple of (int, int)
        Per job, the host indices of its parameter server and its worker.
    iterations : int
        Training steps per job.
    width, depth, batch : int
        The MLP of :mod:`jitsched.examples.torch_ps`: hidden units per layer,
        hidden layers, batch size (its parameters are the bytes of each pull and push).
    files : tuple of (int, int)
        Per file, its source and destination host indices.
    file_link_s : float
        Every file's size, in seconds of the link rate.
    file_lead_s : float
        The ranks come up first (import torch, meet their partner); then the
        files start, and ``file_lead_s`` later the steps.
    link_mbit : float
        Link rate each way, Mbit/s.
    train_s : float
        How long the jobs may train, s (a job not done by then failed);
        ``TestbedOptions.timeout_s`` bounds the wait for the files after them.
    """

    hosts: int
    jobs: tuple[tuple[int, int], ...]
    iterations: int
    width: int
    depth: int
    batch: int
    files: tuple[tuple[int, int], ...]
    file_link_s: float
    file_lead_s: float = 1.0
    link_mbit: float = 100.0
    train_s: float = 600.0

    def param_bytes(self) -> int:
        """Bytes of the model's parameters (float32): what one pull (and one push) moves."""
        n = 32 * self.width + self.width
        n += (self.depth - 1) * (self.width * self.width + self.width)
        n += self.width * 10 + 10
        return 4 * n


TORCH_SCENARIOS: dict[str, TorchScenario] = {
    # Two jobs whose parameter servers share h0: their pulls leave through h0's port,
    # their pushes enter through it. One file takes the pulls' way out of h0, one the
    # pushes' way into it, each alone on its port among the files: a file's goodput is
    # then set by the DL bytes on its port, not by how two files split one (over two
    # files h0 -> h1 and h0 -> h2, one run: plain TCP's files 71.4 and 42.4 Mbit/s,
    # jit's 44.6 and 42.6, all four done within 141.6 s). 2.2 MB of parameters a pull
    # (0.18 s of the 100 Mbit/s link), so a step is mostly the network's; each file is
    # 60 s of the link, outliving the jobs under every policy.
    "torch-ps": TorchScenario(hosts=3, jobs=((0, 1), (0, 2)), iterations=40, width=512, depth=3, batch=64,
                              files=((0, 1), (1, 0)), file_link_s=60.0),
}


def run_torch_scenario(scenario: str, options: TestbedOptions, sc: TorchScenario | None = None) -> dict:
    """Bring the testbed up, train the scenario's PyTorch jobs beside its files, tear down.

    Parameters
    ----------
    scenario : str
        A key of :data:`TORCH_SCENARIOS` (its name in the output).
    options : TestbedOptions
        The testbed, the policy and its settings; ``link_mbit`` overrides the scenario's.
    sc : TorchScenario, optional
        The workload itself, instead of the named one's (the suite's small run).

    Returns
    -------
    dict
        ``policy, jobs, completed``, ``iteration_s_mean`` (s, mean over every
        job's steps after the first :data:`WARMUP_ITERATIONS`, as the workers
        timed them), ``background_mbit_mean`` (Mbit/s, mean goodput of the
        files over their whole lives), ``background_max_stall_s`` (the longest
        time any file's receiver read nothing), ``background_completed``,
        ``agents_failed`` and ``details``: per job its steps' mean, the SDK's
        counters, the daemon's entry of the recurring job (the captured DAG's
        computes and transfers, iterations, learned estimates' error) and,
        where agents run, what each host's agent classified of the job's
        connections; the machine's CPU while the jobs ran; ``errors``, per
        rank that failed, why.
    """
    from jitsched.config import DaemonConfig
    from jitsched.dag.model import Cluster, Host
    from jitsched.testbed.bgtraffic import BackgroundFlow, Generator
    from jitsched.testbed.children import (
        AGENT_READY_TIMEOUT_S,
        Child,
        agents_main,
        daemon_main,
        failed_agents,
        silent_agents,
        stop_children,
    )
    from jitsched.testbed.e2e import SCHEDULED_TOS, _sigterm_as_exit, cpu_busy, machine_cpu_ticks

    sc = sc or TORCH_SCENARIOS[scenario]
    link_mbit = options.link_mbit or sc.link_mbit
    prefix, policy = options.prefix, options.policy
    with _sigterm_as_exit():
        tb = testbed.up(sc.hosts, link_mbit, prefix=prefix)
        tmp = tempfile.mkdtemp(prefix="jitsched-tb-")
        children: list = []
        ranks: list[_Rank] = []
        gen = None
        agent_reports: dict = {}
        try:
            bps = link_mbit * 1e6
            hosts = tb.hosts
            cfg = DaemonConfig(cluster=Cluster(tuple(Host(h.name, bps, bps, h.address) for h in hosts)),
                               job_endpoint=f"ipc://{tmp}/jobs", agent_endpoint=f"ipc://{tmp}/agents",
                               heartbeat_s=0.5, heartbeat_timeout_s=3.0, **options.daemon_settings())
            # the agents start beside the daemon: they connect to its ipc path before it binds it
            daemon = Child("daemon", daemon_main, (cfg,))
            children.append(daemon)
            ns_tag = f"tb{os.getpid()}"
            if options.enforced:
                for h in hosts:
                    children.append(Child(f"agent-{h.name}", agents_main,
                                           ([(h.name, h.netns, options.agent_options(h.dev))], cfg.agent_endpoint,
                                            ns_tag, options.spare, (SCHEDULED_TOS,), ())))
            job_ep, _ = daemon.ready()
            for c in children[1:]:
                c.ready(AGENT_READY_TIMEOUT_S)
            file_bytes = sc.file_link_s * bps / 8
            bg = [BackgroundFlow(f"file-{k}", hosts[s].name, hosts[d].name, file_bytes, 0.0)
                  for k, (s, d) in enumerate(sc.files)]
            gen = Generator(bg, {h.name: h.netns for h in hosts}, {h.name: h.address for h in hosts})
            for k, (ps, worker) in enumerate(sc.jobs):
                ranks += _launch_job(f"torch-{k}", hosts[ps], hosts[worker], sc, job_ep,
                                     ns_tag if options.enforced else None)
            # every rank imported torch and met its partner before the files and the steps
            # start: a rank's start-up (seconds of CPU on a loaded machine) is no step's
            start_by = time.monotonic() + RANK_START_S
            ready = all(r.line(1, start_by) is not None for r in ranks)
            t0 = time.monotonic()
            busy0 = machine_cpu_ticks()
            held: dict[str, dict | None] = {}
            if ready:
                gen.start(t0)
                time.sleep(max(0.0, t0 + sc.file_lead_s - time.monotonic()))
                for r in ranks:
                    r.release()
                for r in ranks:
                    held[r.name] = r.line(2, t0 + sc.file_lead_s + sc.train_s)
                    if held[r.name] is None:
                        break  # its partner waits for it in a send or a receive: no use waiting
            t_jobs = time.monotonic() - t0
            busy = cpu_busy(busy0, machine_cpu_ticks())
            attached, daemon_jobs = _status(job_ep, [h.name for h in hosts] if options.enforced else [])
            final: dict[str, dict | None] = {}
            if all(held.get(r.name) is not None for r in ranks):
                for r in ranks:
                    r.release()
                final = {r.name: r.result(30.0) for r in ranks}
            if math.isnan(gen.t0):  # never started: the ranks did not all come up
                bg_res = {}
            else:
                deadline = time.monotonic() + options.timeout_s
                while len(gen.results) < len(bg) and time.monotonic() < deadline:
                    time.sleep(0.05)
                bg_res = gen.snapshot()
        finally:
            for r in ranks:
                r.kill()
            if gen is not None:
                gen.close()
            got = stop_children(children)
            got.pop("daemon", None)
            agent_reports |= {name: rep for name, rep in got.items() if rep}
            agent_reports |= silent_agents(children, got)  # a dead agent process is a failed agent
            testbed.down(prefix)
            for f in os.listdir(tmp):
                os.unlink(os.path.join(tmp, f))
            os.rmdir(tmp)
    alone_Bps = link_mbit * 1e6 / 8 * GOODPUT
    done = [r for r in bg_res.values() if r["complete"]]
    for r in done:
        r["slowdown"] = (r["end_s"] - r["start_s"]) / (file_bytes / alone_Bps)
    jobs: dict[str, dict] = {}
    steps: list[float] = []
    for k in range(len(sc.jobs)):
        job = f"torch-{k}"
        w = final.get(f"{job}/worker") or held.get(f"{job}/worker")
        ok = w is not None and w.get("iterations") == sc.iterations and final.get(f"{job}/ps") is not None
        mine = w["iteration_s"][WARMUP_ITERATIONS:] if ok else []
        steps += mine
        jobs[job] = {"ok": ok, "iteration_s_mean": statistics.fmean(mine) if mine else None,
                     "sdk": (w or {}).get("stats"), "ps_sdk": (final.get(f"{job}/ps") or {}).get("stats"),
                     "attached": {h: a[job] for h, a in attached.items() if job in a},
                     # of the bytes the job sent from each host, the share its agent classified
                     # (bytes before the SDK attached, after the first step, are not)
                     "classified_share": {h: a[job]["bytes_classified"] / (sc.iterations * sc.param_bytes())
                                          for h, a in attached.items() if job in a},
                     "daemon": daemon_jobs.get(job)}
    return {
        "policy": policy, "scenario": scenario, "jobs": len(sc.jobs),
        "completed": sum(j["ok"] for j in jobs.values()),
        "iteration_s_mean": statistics.fmean(steps) if steps else None,
        "background_mbit_mean": statistics.fmean(r["mbit"] for r in done) if done else None,
        "background_max_stall_s": max((r["max_stall_s"] for r in bg_res.values()), default=None),
        "background_slowdown_mean": statistics.fmean(r["slowdown"] for r in done) if done else None,
        "background_completed": f"{len(done)}/{len(bg)}",
        "agents_failed": failed_agents(agent_reports),
        "details": {"link_mbit": link_mbit, "param_bytes": sc.param_bytes(), "jobs": jobs, "wall_s": t_jobs,
                    "cpu_busy_during_jobs": busy, "background": bg_res, "scenario": asdict(sc),
                    "options": asdict(options), "agents": agent_reports,
                    "errors": {r.name: r.error for r in ranks if r.error}},
    }


def _status(job_ep: str, hosts: list[str]) -> tuple[dict[str, dict], dict[str, dict]]:
    """``({host: {job: what its agent classified}}, {job: the daemon's entry})`` from the daemon's status."""
    from jitsched.client import Client

    with Client(job_ep) as c:
        st = c.status()
    attached = {h: (st["agents"].get(h, {}).get("attached") or {}).get("jobs", {}) for h in hosts}
    keep = ("state", "computes", "transfers", "recurring")
    jobs = {j: {k: e.get(k) for k in keep} for j, e in st.get("jobs", {}).items()}
    return attached, jobs


def _free_port(netns: str, address: str) -> int:
    """A TCP port free on ``address`` in ``netns`` (the kernel's pick)."""
    with socket_in(netns) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _launch_job(job: str, ps, worker, sc: TorchScenario, job_ep: str, ns_tag: str | None) -> list[_Rank]:
    """Start a job's parameter server and worker in their hosts' namespaces (attached where ``ns_tag`` names agents)."""
    common = ["--master", f"{ps.address}:{_free_port(ps.netns, ps.address)}", "--daemon", job_ep, "--job", job,
              "--ps-host", ps.name, "--worker-host", worker.name, "--iterations", str(sc.iterations),
              "--width", str(sc.width), "--depth", str(sc.depth), "--batch", str(sc.batch), "--start-on-stdin", "--hold"]
    out = []
    for rank, h in enumerate((ps, worker)):
        attach = ["--host", h.name, "--agent-namespace", ns_tag] if ns_tag is not None else []
        out.append(_Rank(f"{job}/{'ps' if rank == 0 else 'worker'}", h, [*common, "--rank", str(rank), *attach]))
    return out


class _Rank:
    """One torch_ps process in a host's namespace; its JSON lines read by a thread."""

    def __init__(self, name: str, host, args: list[str]) -> None:
        self.name = name
        env = dict(os.environ, GLOO_SOCKET_IFNAME=host.dev, OMP_NUM_THREADS="1")
        argv = ["ip", "netns", "exec", host.netns, sys.executable, "-m", "jitsched.examples.torch_ps", *args]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)
        self.lines: list[dict] = []
        self.error = ""
        self._cv = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err: list[str] = []
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                got = json.loads(line)
            except ValueError:
                continue
            with self._cv:
                self.lines.append(got)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _read_err(self) -> None:
        for line in self.proc.stderr:
            self._err.append(line.rstrip())
            del self._err[:-20]  # the last lines say why it failed

    def _line(self, n: int, deadline: float) -> dict | None:
        with self._cv:
            while len(self.lines) < n and self.proc.poll() is None and time.monotonic() < deadline:
                self._cv.wait(min(1.0, max(0.0, deadline - time.monotonic())))
            if len(self.lines) >= n:
                return self.lines[n - 1]
        self._reader.join(1.0)
        if len(self.lines) >= n:
            return self.lines[n - 1]
        if not self.error:
            why = f"exited with {self.proc.returncode}" if self.proc.poll() is not None else "timed out"
            self.error = f"{why}: {' | '.join(self._err[-3:])}"
        return None

    def line(self, n: int, deadline: float) -> dict | None:
        """The rank's ``n``-th JSON line (1: ready to train, 2: trained), None if it failed or timed out."""
        return self._line(n, deadline)

    def release(self) -> None:
        """Send the rank a line: it starts training (after ``ready``) or closes (after training)."""
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def result(self, timeout_s: float) -> dict | None:
        """The rank's final result line (None if it failed)."""
        got = self._line(3, time.monotonic() + timeout_s)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
        return got

    def kill(self) -> None:
        """Stop the process if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


__all__ = ["RANK_START_S", "TORCH_SCENARIOS", "WARMUP_ITERATIONS", "TorchScenario", "run_torch_scenario"]
