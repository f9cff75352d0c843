"""A PyTorch MLP trained in parameter-server style over torch.distributed (Gloo), scheduled through the SDK.

Rank 0 is the parameter server: each step it sends every parameter to the
worker and applies the gradients the worker sends back (SGD). Rank 1 is the
worker: it receives the parameters, runs forward and backward on a random
batch and sends the gradients. The worker registers the job's DAG (captured
from the module by :class:`jitsched.adapters.pytorch.TorchTrainer`) and
reports each step; both ranks attach their own connections on their host's
agent. ``--world 1`` trains on the worker alone (no communication).

Run (two shells, a daemon at tcp://127.0.0.1:5555, agents for h0 and h1)::

    python -m jitsched.examples.torch_ps --rank 0 --master 127.0.0.1:29500 --host h0
    python -m jitsched.examples.torch_ps --rank 1 --master 127.0.0.1:29500 --host h1

Prints one JSON line: the steps' times (each and their mean) and the SDK's counters.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rank", type=int, default=1, choices=(0, 1), help="0: parameter server, 1: worker")
    p.add_argument("--world", type=int, default=2, choices=(1, 2), help="1: the worker alone")
    p.add_argument("--master", default="127.0.0.1:29500", help="rank 0's ADDR:PORT (Gloo rendezvous)")
    p.add_argument("--daemon", default="tcp://127.0.0.1:5555", help="the daemon's job endpoint")
    p.add_argument("--job", default="torch-ps", help="job id")
    p.add_argument("--ps-host", default="h0", help="cluster host of the parameter server")
    p.add_argument("--worker-host", default="h1", help="cluster host of the worker")
    p.add_argument("--host", default=None, help="this process's cluster host (attach its connections there)")
    p.add_argument("--agent-namespace", default="", help="the local agent's namespace (as `jitsched agent`)")
    p.add_argument("--peer", action="append", default=[], metavar="ADDR[:PORT]=HOST",
                   help="a peer address of the job's connections (repeatable)")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--width", type=int, default=256, help="hidden units per layer")
    p.add_argument("--depth", type=int, default=3, help="hidden layers")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--timeout-s", type=float, default=1.0, help="the SDK's request timeout")
    p.add_argument("--start-on-stdin", action="store_true",
                   help="after the rendezvous, print {\"ready\": true} and wait for a line on stdin before training")
    p.add_argument("--hold", action="store_true",
                   help="after training, print the result and wait for a line on stdin before closing")
    args = p.parse_args(argv)
    if args.iterations < 1 or args.width < 1 or args.depth < 1 or args.batch < 1:
        p.error("--iterations, --width, --depth and --batch must be >= 1")
    for peer in args.peer:
        if "=" not in peer:
            p.error(f"--peer {peer!r}: expected ADDR[:PORT]=HOST")
    return args


def main(argv: list[str] | None = None) -> int:
    """Train; print ``{"rank", "iterations", "iteration_s_mean", "iteration_s", "flow_job", "stats"}`` as one JSON line
    (with ``--hold``, one more before waiting, with ``"held": true``; with ``--start-on-stdin``, a
    ``{"ready": true}`` line first)."""
    args = _args(argv)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    from jitsched.adapters.pytorch import TorchTrainer
    from jitsched.client.sdk import Trainer, TrainerOptions

    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers: list[torch.nn.Module] = []
    width_in = 32
    for _ in range(args.depth):
        layers += [torch.nn.Linear(width_in, args.width), torch.nn.ReLU()]
        width_in = args.width
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width_in, 10))
    params = list(model.parameters())
    opts = TrainerOptions(endpoint=args.daemon, host=args.host, agent_namespace=args.agent_namespace,
                          peers=dict(p.split("=", 1) for p in args.peer),
                          request_timeout_s=args.timeout_s, retry_s=args.timeout_s)
    if args.world == 2:
        addr, _, port = args.master.rpartition(":")
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=args.rank, world_size=2)
    if args.start_on_stdin:
        print(json.dumps({"ready": True, "rank": args.rank}), flush=True)
        sys.stdin.readline()
    times: list[float] = []
    if args.rank == 0:
        # the parameter server: its connections are the job's (registered by the worker)
        handle = Trainer(args.job, opts)
        grads = [torch.empty_like(p) for p in params]
        with torch.no_grad():
            for _ in range(args.iterations):
                t0 = time.perf_counter()
                for p in params:
                    dist.send(p.data, dst=1)
                for p, g in zip(params, grads, strict=True):
                    dist.recv(g, src=1)
                    p.add_(g, alpha=-0.01)
                times.append(time.perf_counter() - t0)
                handle.step_done()
    else:
        handle = TorchTrainer(model, args.job, ps=args.ps_host, worker=args.worker_host, options=opts)
        loss_fn = torch.nn.CrossEntropyLoss()
        opt = torch.optim.SGD(params, lr=0.01) if args.world == 1 else None
        for _ in range(args.iterations):
            x, y = torch.randn(args.batch, 32), torch.randint(0, 10, (args.batch,))
            t0 = time.perf_counter()
            with handle.step():
                if args.world == 2:
                    with torch.no_grad():
                        for p in params:
                            dist.recv(p.data, src=0)
                model.zero_grad(set_to_none=False)
                loss_fn(model(x), y).backward()
                if opt is not None:
                    opt.step()
                else:
                    for p in params:
                        dist.send(p.grad, dst=0)
            times.append(time.perf_counter() - t0)
    def result() -> dict:
        return {"rank": args.rank, "iterations": len(times), "iteration_s_mean": statistics.fmean(times),
                "iteration_s": times,
                "flow_job": getattr(getattr(handle, "trainer", handle), "flow_job", None),
                "stats": dict(vars(handle.stats))}

    if args.hold:
        print(json.dumps({"held": True} | result()), flush=True)
        sys.stdin.readline()
    handle.close()
    if args.world == 2:
        dist.destroy_process_group()
    print(json.dumps(result()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
