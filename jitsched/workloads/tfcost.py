"""Cost model of TensorFlow ops without a measurement: launch cost, FLOPs and bytes moved on a GPU-like device."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from jitsched.workloads._tfparse import DTYPE_BYTES

if TYPE_CHECKING:  # the importer's graph view; it imports this module, not the other way round
    from jitsched.workloads.tfgraph import _Graph, _Node

# Cost model for compute ops without a measurement, a GPU-like device:
# a fixed launch cost plus FLOPs at sustained fp32 throughput plus bytes
# moved at memory bandwidth. The three constants are assumptions of the
# order of a P100-class GPU (9.3 TFLOP/s fp32 peak, 732 GB/s HBM2).
COST_LAUNCH_S = 5e-6
COST_FLOPS = 8.0e12
COST_MEM_BPS = 500e9


def _flops(g: _Graph, n: _Node) -> float:
    def dims(i: int) -> list[int] | None:
        if i >= len(n.inputs) or n.inputs[i][2]:
            return None
        return g.shape(n.inputs[i][0], n.inputs[i][1])

    out = g.shape(n.name, 0)
    if n.op in ("MatMul", "BatchMatMul", "BatchMatMulV2") and out and len(out) >= 2:
        a = dims(0)
        if a and out[-2] > 0:
            return 2.0 * math.prod(out) * (math.prod(a) / math.prod(out[:-1]))
    if n.op in ("Conv2D", "Conv2DBackpropInput") and out:
        f = dims(1)
        grad = out if n.op == "Conv2D" else dims(2)
        if f and grad and f[-1] > 0:
            return 2.0 * math.prod(grad) * math.prod(f) / f[-1]
    if n.op == "Conv2DBackpropFilter" and out and out[-1] > 0:
        grad = dims(2)
        if grad:
            return 2.0 * math.prod(grad) * math.prod(out) / out[-1]
    return 0.0


def estimate_duration(g: _Graph, n: _Node) -> float:
    """Cost-model duration of op ``n`` in seconds (see the module constants COST_*).

    ``COST_LAUNCH_S + flops / COST_FLOPS + bytes / COST_MEM_BPS``, where FLOPs
    are counted for MatMul and the Conv2D family (2 per multiply-add) and bytes
    are the op's known input and output tensor sizes (4 bytes per element when
    the dtype is unknown). Unknown shapes count as nothing.
    """
    moved = 0
    tensors = [(s, i) for s, i, c in n.inputs if not c]
    shapes = n.attr.get("_output_shapes", {}).get("list", {}).get("shape", [])
    tensors += [(n.name, i) for i in range(max(len(shapes), 1))]
    for s, i in tensors:
        dims = g.shape(s, i)
        if dims is not None:
            moved += math.prod(dims) * DTYPE_BYTES.get(g.dtype(s, i) or "", 4)
    return COST_LAUNCH_S + _flops(g, n) / COST_FLOPS + moved / COST_MEM_BPS

