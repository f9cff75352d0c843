"""Tests of the PyTorch adapter: a module's parameter-server DAG, per-layer times from hooks, and real training processes (Gloo) scheduled through the SDK."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import uuid

import pytest
import torch

from jitsched.adapters.pytorch import LayerTimer, TorchTrainer, parameter_layers
from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.bench.bench_faults import free_ports
from jitsched.client import Client
from jitsched.client.sdk import TrainerOptions
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster, Host, parse_job


class Branchy(torch.nn.Module):
    """Layers registered in another order than they run, one reused, one frozen, a parameterless op."""

    def __init__(self) -> None:
        super().__init__()
        self.head = torch.nn.Linear(16, 4)
        self.body = torch.nn.Linear(16, 16)
        self.stem = torch.nn.Linear(8, 16)
        self.stem.requires_grad_(False)
        self.act = torch.nn.Tanh()

    def forward(self, x):
        h = self.act(self.stem(x))
        h = self.act(self.body(h))
        h = self.act(self.body(h))
        return self.head(h)


def _step(model, x) -> None:
    model(x).sum().backward()


def test_the_dag_has_a_pull_forward_backward_and_push_per_layer_in_call_order():
    model = Branchy()
    assert [n for n, _ in parameter_layers(model)] == ["head", "body", "stem"]
    timer = LayerTimer(model)
    timer.start()
    _step(model, torch.randn(4, 8))
    timer.stop()
    assert [timer.names[i] for i in timer.order] == ["stem", "body", "head"]
    job = timer.job("b", "ps", "w")
    assert [c.id for c in job.computes] == ["fwd0", "fwd1", "fwd2", "bwd2", "bwd1", "bwd0"]
    nbytes = {t.id: (t.src, t.dst, t.bytes) for t in job.transfers}
    # parameters out, gradients back; the frozen stem pushes nothing
    assert nbytes == {"pull0": ("ps", "w", 4 * (8 * 16 + 16)), "pull1": ("ps", "w", 4 * (16 * 16 + 16)),
                      "pull2": ("ps", "w", 4 * (16 * 4 + 4)), "push1": ("w", "ps", 4 * (16 * 16 + 16)),
                      "push2": ("w", "ps", 4 * (16 * 4 + 4))}
    edges = set(job.edges)
    assert {("pull0", "fwd0"), ("pull1", "fwd1"), ("pull2", "fwd2"), ("fwd0", "fwd1"), ("fwd1", "fwd2"), ("fwd2", "bwd2"),
            ("bwd2", "bwd1"), ("bwd1", "bwd0"), ("bwd1", "push1"), ("bwd2", "push2")} == edges
    # a valid native job on hosts of those names (ids, hosts, edges, no cycle)
    assert parse_job(job.to_dict(), Cluster((Host("ps", 1e9, 1e9), Host("w", 1e9, 1e9)))) == job
    # the times are the step's, in the computes' order; the frozen stem's backward is nothing
    got = dict(zip([c.id for c in job.computes], timer.compute_s(), strict=True))
    assert all(v >= 0 for v in got.values()) and got["fwd1"] > 0 and got["bwd1"] > 0 and got["bwd0"] == 0
    timer.remove()
    timer.start()
    _step(model, torch.randn(4, 8))
    assert sum(timer.compute_s()) == 0  # the hooks are off


def test_layer_times_add_up_to_the_passes_and_follow_the_work():
    torch.manual_seed(0)
    small, big = torch.nn.Linear(64, 8), torch.nn.Linear(8, 8192)
    model = torch.nn.Sequential(small, torch.nn.ReLU(), big)
    timer = LayerTimer(model)
    x = torch.randn(256, 64)
    fwd_big, fwd_small = [], []
    for _ in range(5):
        timer.start()
        t0 = time.perf_counter()
        out = model(x)
        t1 = time.perf_counter()
        out.square().mean().backward()
        t2 = time.perf_counter()
        timer.stop()
        s = timer.compute_s()  # fwd0 (small), fwd1 (big), bwd1, bwd0
        # segments of the passes: together no longer than each pass, nothing counted twice
        assert 0 < s[0] + s[1] <= t1 - t0 and 0 < s[2] + s[3] <= t2 - t1
        fwd_small.append(s[0])
        fwd_big.append(s[1])
    # 128x the multiply-adds: the big layer's forward takes longer (the least of 5 each, the
    # other helpers' load on the machine aside)
    assert min(fwd_big) > min(fwd_small)


def test_a_torch_trainer_registers_the_captured_dag_after_its_first_step():
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", policy="jit")
    d = Daemon(cfg).start()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        tt = TorchTrainer(model, "tt", ps="h0", worker="h1", options=TrainerOptions(endpoint=d.job_endpoint))
        assert tt.stats.steps == 0
        for _ in range(5):
            with tt.step():
                _step(model, torch.randn(4, 8))
        assert [c.id for c in tt.job.computes] == ["fwd0", "fwd1", "bwd1", "bwd0"]
        assert wait_until(lambda: tt.stats.sent == 5, 5.0), tt.stats
        with Client(d.job_endpoint) as c:
            rec = c.status()["jobs"]["tt"]["recurring"]
        assert rec["iterations"] == 5 and rec["learned_from"] == "computes"
        tt.close()
        assert tt.stats.state == "closed"
    finally:
        d.stop()


class TiedLM(torch.nn.Module):
    """An embedding whose weight the output layer shares (tied weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(10, 8)
        self.mid = torch.nn.Linear(8, 8)
        self.out = torch.nn.Linear(8, 10)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(torch.tanh(self.mid(self.emb(x))))


def test_a_parameter_shared_by_two_layers_is_pulled_and_pushed_once():
    model = TiedLM()
    timer = LayerTimer(model)
    timer.start()
    model(torch.tensor([1, 2, 3])).sum().backward()
    timer.stop()
    job = timer.job("t", "ps", "w")
    total = sum(p.numel() * p.element_size() for p in model.parameters())  # each tensor once
    pulls = {t.id: t.bytes for t in job.transfers if t.id.startswith("pull")}
    pushes = {t.id: t.bytes for t in job.transfers if t.id.startswith("push")}
    assert sum(pulls.values()) == total and sum(pushes.values()) == total
    # the shared weight goes with the first layer that uses it: pulled before fwd0, pushed after bwd0
    assert pulls == {"pull0": 4 * 10 * 8, "pull1": 4 * (8 * 8 + 8), "pull2": 4 * 10}
    assert pushes == {"push0": 4 * 10 * 8, "push1": 4 * (8 * 8 + 8), "push2": 4 * 10}
    assert parse_job(job.to_dict(), Cluster((Host("ps", 1e9, 1e9), Host("w", 1e9, 1e9)))) == job
    timer.remove()


class TwoOutputs(torch.nn.Module):
    """A model whose forward returns a tuple or a dict of tensors."""

    def __init__(self, as_dict: bool) -> None:
        super().__init__()
        self.a, self.b, self.as_dict = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8), as_dict

    def forward(self, x):
        h = self.a(x)
        out = self.b(h)
        return {"logits": out, "hidden": h} if self.as_dict else (out, h)


@pytest.mark.parametrize("as_dict", [False, True])
def test_time_between_a_tuple_or_dict_output_and_its_backward_is_in_no_layer(as_dict):
    model = TwoOutputs(as_dict)
    timer = LayerTimer(model)
    timer.start()
    got = model(torch.randn(4, 8))
    logits = got["logits"] if as_dict else got[0]
    time.sleep(0.3)  # the loss, logging: outside the model's passes
    logits.sum().backward()
    timer.stop()
    fwd0, fwd1, bwd1, bwd0 = timer.compute_s()
    assert bwd1 > 0 and bwd0 > 0 and bwd1 + bwd0 < 0.2
    timer.remove()


class Scaled(torch.nn.Module):
    """A layer with a parameter its forward does not always use (no gradient in such a step)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(64, 64))
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, x):
        return x @ self.weight


def test_a_layer_whose_parameter_gets_no_gradient_still_has_its_backward_time():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), Scaled())
    timer = LayerTimer(model)
    timer.start()
    model(torch.randn(16, 64)).sum().backward()
    timer.stop()
    assert model[1].scale.grad is None
    fwd0, fwd1, bwd1, bwd0 = timer.compute_s()
    assert bwd1 > 0 and bwd0 > 0
    timer.remove()


def test_layers_frozen_or_unfrozen_before_the_first_step_push_as_they_are_then():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    model[1].requires_grad_(False)
    timer = LayerTimer(model)
    model[0].requires_grad_(False)  # fine-tuning: the first layer frozen, the second trained
    model[1].requires_grad_(True)
    timer.start()
    model(torch.randn(4, 8)).sum().backward()
    timer.stop()
    job = timer.job("f", "ps", "w")
    assert {t.id for t in job.transfers if t.id.startswith("push")} == {"push1"}
    fwd0, fwd1, bwd1, bwd0 = timer.compute_s()
    assert bwd1 > 0 and bwd0 == 0
    timer.remove()


class FailsOnce(torch.nn.Module):
    """Registered head, body, stem; called stem, body, head; the first call fails after stem."""

    def __init__(self) -> None:
        super().__init__()
        self.head, self.body, self.stem = torch.nn.Linear(8, 2), torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)
        self.failed = False

    def forward(self, x):
        h = self.stem(x)
        if not self.failed:
            self.failed = True
            raise RuntimeError("out of memory")
        return self.head(self.body(h))


def test_a_first_step_that_raises_registers_nothing_and_the_next_step_fixes_the_dag():
    port = free_ports(1)[0]
    model = FailsOnce()
    opts = TrainerOptions(endpoint=f"tcp://127.0.0.1:{port}", request_timeout_s=0.2, retry_s=0.2)
    tt = TorchTrainer(model, "f", ps="h0", worker="h1", options=opts)
    try:
        with pytest.raises(RuntimeError), tt.step():
            _step(model, torch.randn(4, 8))
        assert tt.job is None and tt.trainer is None and tt.stats.steps == 0
        with tt.step():
            _step(model, torch.randn(4, 8))
        assert [tt.timer.names[i] for i in tt.timer.order] == ["stem", "body", "head"]
        assert tt.stats.steps == 1 and all(c.duration_s > 0 for c in tt.job.computes)
    finally:
        tt.close(timeout_s=0.5)


# ---------------------------------------------------------------- real training processes


@contextlib.contextmanager
def system(hosts=("h0", "h1")):
    """A daemon (jit) and a record agent per host, local sockets in a namespace of their own."""
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=2.0,
                       resend_s=0.1, slot_s=0.1, policy="jit")
    d = Daemon(cfg).start()
    ns = f"t{uuid.uuid4().hex[:8]}"
    agents: dict[str, Agent] = {}
    try:
        for h in hosts:
            agents[h] = Agent(h, d.agent_endpoint, AgentOptions(backend="record"), local_namespace=ns).start()
        assert all(wait_until(a.registered.is_set, 5.0) for a in agents.values())
        yield d, agents, ns
    finally:
        for a in agents.values():
            a.stop()
        d.stop()


def _train(endpoint: str, *args: str, hold: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jitsched.examples.torch_ps", "--daemon", endpoint, *args,
                             *(["--hold"] if hold else [])],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(10)
        p.stdin.close()
        p.stdout.close()


def test_a_real_training_process_registers_once_and_the_daemon_learns_its_20_iterations():
    with system(hosts=()) as (d, _, _):
        p = _train(d.job_endpoint, "--world", "1", "--iterations", "20", "--batch", "256")
        try:
            out, _ = p.communicate(timeout=120)
        finally:
            _stop([p])
        assert p.returncode == 0
        got = json.loads(out.splitlines()[-1])
        st = got["stats"]
        assert (got["iterations"], st["steps"], st["sent"], st["registrations"], st["outages"]) == (20, 20, 20, 1, 0)
        with Client(d.job_endpoint) as c:
            job = c.status()["jobs"]["torch-ps"]
        rec = job["recurring"]
        assert job["state"] == "finished" and job["computes"] == 8 and job["transfers"] == 8
        assert rec["iterations"] == 20 and rec["learned_from"] == "computes"
        assert 0 < rec["iteration_s_mean"] <= rec["iteration_s_p95"]
        assert rec["estimate_error"] is not None and rec["estimate_error"] >= 0


def test_two_gloo_processes_connections_are_attached_and_classified_on_both_hosts():
    iters = 150
    with system() as (d, agents, ns):
        common = ["--master", f"127.0.0.1:{free_ports(1)[0]}", "--iterations", str(iters), "--width", "512",
                  "--agent-namespace", ns]
        procs = [_train(d.job_endpoint, "--rank", "0", "--host", "h0", "--peer", "127.0.0.1=h1", *common, hold=True),
                 _train(d.job_endpoint, "--rank", "1", "--host", "h1", "--peer", "127.0.0.1=h0", *common, hold=True)]
        try:
            held = [json.loads(p.stdout.readline()) for p in procs]
            assert [h["iterations"] for h in held] == [iters, iters]
            worker = held[1]["stats"]
            assert worker["registrations"] == 1 and worker["attached"], worker

            def attached(h: str) -> dict:
                with Client(d.job_endpoint) as c:
                    a = c.status()["agents"][h].get("attached") or {}
                return a.get("jobs", {}).get("torch-ps", {})

            # parameters go out on h0 (the server), gradients on h1 (the worker): each host's
            # agent classified the job's bytes on the framework's own connections
            for h in ("h0", "h1"):
                assert wait_until(lambda h=h: attached(h).get("bytes_classified", 0) > 1_000_000, 5.0,
                                  step_s=0.1), (h, attached(h))
                assert attached(h)["pids"] == 1 and attached(h)["unmapped"] == 0
                given = [f for f in agents[h].backend.last if f.flow_id.startswith("torch-ps/@")]
                assert given and all(f.dst_addr == "127.0.0.1" for f in given)
            with Client(d.job_endpoint) as c:
                rec = c.status()["jobs"]["torch-ps"]["recurring"]
            assert rec["iterations"] >= iters - 5 and rec["iteration_s_mean"] > 0
            for p in procs:
                p.stdin.write("\n")
                p.stdin.flush()
            final = [json.loads(p.stdout.readline()) for p in procs]
            assert final[1]["stats"]["sent"] + final[1]["stats"]["coalesced"] == iters
            assert [p.wait(30) for p in procs] == [0, 0]
            assert wait_until(lambda: not attached("h0") and not attached("h1"), 3.0)
        finally:
            _stop(procs)
