"""PyTorch adapter: a module's parameter-server DAG and its per-layer compute times, measured with module and tensor hooks.

torch is imported only by the functions that need it: jitsched never requires it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from jitsched.client.sdk import Trainer, TrainerOptions, TrainerStats
from jitsched.dag.model import Compute, Job, Transfer
from jitsched.errors import JitschedError


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - the suite installs torch
        raise JitschedError("jitsched.adapters.pytorch needs PyTorch: pip install torch") from exc
    return torch


def parameter_layers(model) -> list[tuple[str, Any]]:
    """The modules of ``model`` that hold parameters of their own, ``(name, module)`` in
    registration order (the root is named ``""``)."""
    return [(name, m) for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))]


def _param_bytes(params) -> int:
    return sum(p.numel() * p.element_size() for p in params)


class LayerTimer:
    """Per-layer forward and backward times of a ``torch.nn.Module``, one step at a time.

    A layer is a module with parameters of its own (:func:`parameter_layers`).
    Times are segments of the wall clock, so that a step's layer times add up
    to its forward and backward passes: a layer's forward runs from its
    forward pre-hook to the next layer's (the last one's to the end of the
    root module's forward), so parameterless modules after it (activations,
    pooling) count as its; its backward ends when the last of its gradients is
    accumulated (``register_post_accumulate_grad_hook``) and starts when the
    layer before it in backward order ended (the first, when the gradient of
    the root's output was computed). The layer order is that of the forward
    calls of the first step measured.

    Parameters
    ----------
    model : torch.nn.Module
    """

    def __init__(self, model) -> None:
        _torch()
        self.model = model
        found = parameter_layers(model)
        self.names = [n for n, _ in found]
        # every layer's parameters; a parameter two layers hold (tied weights) is one tensor:
        # timed with the first layer registering it, its bytes go with the first layer called
        self._held = [list(m.parameters(recurse=False)) for _, m in found]
        seen: set[int] = set()
        self._params = [[p for p in ps if id(p) not in seen and not seen.add(id(p))] for ps in self._held]
        self.order: list[int] | None = None  # layer indices in forward-call order (first step)
        self._set_bytes(range(len(found)))
        n = len(found)
        self.fwd_s = [0.0] * n
        self.bwd_s = [0.0] * n
        self._on = False
        self._calls: list[int] = []
        self._open: tuple[int, float] | None = None  # the forward segment under way
        self._bwd_from = 0.0  # where the next backward segment starts
        self._bwd_started = False  # this backward pass's first output gradient was seen
        self._hooked: set[int] = set()  # ids of the parameters with a gradient hook
        self._handles = []
        for i, (_, m) in enumerate(found):
            self._handles.append(m.register_forward_pre_hook(lambda _m, _a, i=i: self._fwd_start(i)))
        self._hook_gradients()
        self._handles.append(model.register_forward_hook(self._fwd_end))

    def _set_bytes(self, order) -> None:
        """Each layer's parameter and trainable-parameter bytes, a shared parameter's with
        the first layer in ``order`` holding it (the first to need it, the last to have its
        gradient complete)."""
        n = len(self._held)
        self.param_bytes, self.grad_bytes = [0] * n, [0] * n
        seen: set[int] = set()
        for i in order:
            mine = [p for p in self._held[i] if id(p) not in seen]
            seen.update(id(p) for p in mine)
            self.param_bytes[i] = _param_bytes(mine)
            self.grad_bytes[i] = _param_bytes(p for p in mine if p.requires_grad)

    def _hook_gradients(self) -> None:
        """A gradient hook on every parameter that now takes gradients and has none yet."""
        for i, ps in enumerate(self._params):
            for p in ps:
                if p.requires_grad and id(p) not in self._hooked:
                    self._hooked.add(id(p))
                    self._handles.append(p.register_post_accumulate_grad_hook(lambda _p, i=i: self._grad(i)))

    def _close_forward(self) -> float:
        """End the open forward segment (its layer gets the time since it began); returns now."""
        now = time.perf_counter()
        if self._open is not None:
            j, t = self._open
            self.fwd_s[j] += now - t
            self._open = None
        return now

    def _fwd_start(self, i: int) -> None:
        if not self._on:
            return
        self._open = (i, self._close_forward())
        self._calls.append(i)

    def _fwd_end(self, _m, _a, out) -> None:
        if not self._on:
            return
        now = self._close_forward()
        self._bwd_from = now
        self._bwd_started = False
        torch = _torch()
        todo = [out]
        while todo:  # the output's tensors: a tensor, or tuples, lists and dicts of them
            x = todo.pop()
            if isinstance(x, torch.Tensor):
                if x.requires_grad:
                    x.register_hook(self._bwd_start)
            elif isinstance(x, (tuple, list)):
                todo.extend(x)
            elif isinstance(x, dict):
                todo.extend(x.values())

    def _bwd_start(self, _grad) -> None:
        if self._on and not self._bwd_started:  # the first output gradient of the pass
            self._bwd_started = True
            self._bwd_from = time.perf_counter()

    def _grad(self, i: int) -> None:
        if not self._on:
            return
        # the time since the last gradient is this layer's: its backward ends at its last
        # gradient (a parameter that gets none in a step takes none of it)
        now = time.perf_counter()
        self.bwd_s[i] += now - self._bwd_from
        self._bwd_from = now

    def start(self) -> None:
        """A step starts: the layers' times count from zero."""
        n = len(self.names)
        self.fwd_s, self.bwd_s = [0.0] * n, [0.0] * n
        self._calls, self._open = [], None
        self._hook_gradients()
        self._on = True

    def stop(self, completed: bool = True) -> None:
        """The step ended (its first completed one fixes the layer order and the bytes of
        each layer's transfers; a step that raised fixes nothing)."""
        self._on = False
        if self.order is None and completed:
            seen = list(dict.fromkeys(self._calls))
            self.order = seen + [i for i in range(len(self.names)) if i not in set(seen)]
            self._set_bytes(self.order)

    def compute_s(self) -> list[float]:
        """The last step's compute durations, seconds, in the order of :meth:`job`'s computes:
        each layer's forward in layer order, then each layer's backward in reverse order."""
        order = self._order()
        return [self.fwd_s[i] for i in order] + [self.bwd_s[i] for i in reversed(order)]

    def _order(self) -> list[int]:
        if self.order is None:
            raise JitschedError("LayerTimer: no step measured yet (start(), a step, stop())")
        return self.order

    def job(self, job_id: str, ps: str, worker: str, *, model: str | None = None) -> Job:
        """One step of the module in parameter-server shape, with the last step's times.

        Per layer ``k`` (in :attr:`order`): ``pull{k}``, its parameters' bytes from
        ``ps`` to ``worker``, before ``fwd{k}``; the forward chain
        ``fwd0 -> fwd1 -> ...``; then the backward chain from the last layer back
        to the first, ``bwd{k}`` on the worker; and after ``bwd{k}``, ``push{k}``,
        its gradients' bytes back to ``ps`` (layers whose parameters all are
        frozen push nothing). The layers' module names are :attr:`names`.
        """
        order = self._order()
        computes, transfers, edges = [], [], []
        for k, i in enumerate(order):
            computes.append(Compute(f"fwd{k}", worker, float(self.fwd_s[i])))
            if self.param_bytes[i]:  # (nothing of its own: its parameters are an earlier layer's)
                transfers.append(Transfer(f"pull{k}", ps, worker, float(self.param_bytes[i])))
                edges.append((f"pull{k}", f"fwd{k}"))
            if k:
                edges.append((f"fwd{k - 1}", f"fwd{k}"))
        prev = f"fwd{len(order) - 1}"
        for k in reversed(range(len(order))):
            i = order[k]
            computes.append(Compute(f"bwd{k}", worker, float(self.bwd_s[i])))
            edges.append((prev, f"bwd{k}"))
            prev = f"bwd{k}"
            if self.grad_bytes[i]:
                transfers.append(Transfer(f"push{k}", worker, ps, float(self.grad_bytes[i])))
                edges.append((f"bwd{k}", f"push{k}"))
        return Job(job_id, tuple(computes), tuple(transfers), tuple(edges), 0.0, 0.0,
                   model or type(self.model).__name__)

    def remove(self) -> None:
        """Take the hooks off the module."""
        for h in self._handles:
            h.remove()
        self._handles = []


class TorchTrainer:
    """A :class:`jitsched.client.sdk.Trainer` for a PyTorch module: its DAG captured from the first step.

    ``with tt.step(): ...`` around each training step (forward, backward and
    optimizer step). The first step measured gives the layer order and the
    declared durations; the job is then registered (:meth:`LayerTimer.job`) and
    every step reports its time and per-layer compute times.

    Parameters
    ----------
    model : torch.nn.Module
    job_id : str
    ps, worker : str
        The cluster hosts of the parameter server and of this worker.
    options : TrainerOptions, optional
    """

    def __init__(self, model, job_id: str, *, ps: str, worker: str, options: TrainerOptions | None = None) -> None:
        self.timer = LayerTimer(model)
        self.job_id, self.ps, self.worker = job_id, ps, worker
        self.options = options or TrainerOptions()
        self.job: Job | None = None
        self.trainer: Trainer | None = None

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Measure the block as one training step and report it."""
        self.timer.start()
        t0 = time.perf_counter()
        completed = False
        try:
            yield
            completed = True
        finally:
            step_s = time.perf_counter() - t0
            self.timer.stop(completed)
            if self.trainer is None and completed:  # a first step that raised fixes no DAG
                self.job = self.timer.job(self.job_id, self.ps, self.worker)
                self.trainer = Trainer(self.job, self.options)
            if self.trainer is not None:
                self.trainer.step_done(step_s, compute_s=self.timer.compute_s())

    @property
    def stats(self) -> TrainerStats:
        """The trainer's counters (:class:`jitsched.client.sdk.TrainerStats`)."""
        return self.trainer.stats if self.trainer is not None else TrainerStats()

    def close(self, timeout_s: float = 10.0) -> None:
        """Close the trainer (``job_finished``) and take the hooks off the module."""
        if self.trainer is not None:
            self.trainer.close(timeout_s)
        self.timer.remove()

    def __enter__(self) -> TorchTrainer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["LayerTimer", "TorchTrainer", "parameter_layers"]
