"""Export one parameter-server training step of LeNet/AlexNet/VGG16/InceptionV3/ResNet152 from TensorFlow.

Needs TensorFlow (``pip install .[tf]``) and tf_keras (Keras 2, which still builds
graph-mode models). Usage::

    python bench/tools/export_tf_graph.py --out bench/workloads [--batch 32] [MODEL ...]

For each model it writes, gzip-compressed, ``<model>.graph.json.gz`` (the
GraphDef of the step in protobuf JSON, every node's device set to the one
TensorFlow's placer assigned, attributes stripped to those the importer reads),
``<model>.stepstats.json.gz`` (RunMetadata of the traced step, node names and
times only) and ``<model>.meta.json`` (batch size, TF version, measured CPU
matrix-multiply throughput, TensorFlow's own count of cross-task sends).

Two in-process TensorFlow servers (``/job:ps/task:0`` and
``/job:worker/task:0``) talk over the loopback interface only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

MODELS = ("lenet", "alexnet", "vgg16", "inception_v3", "resnet152")
# Attributes the importer reads; everything else (constant values, strides,
# padding, initializer seeds...) only makes the files larger.
KEEP_ATTRS = ("_output_shapes", "T", "dtype", "shape", "DstT", "out_type", "U", "Tout")
WORKER = "/job:worker/task:0"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(name: str, batch: int, tf, keras):
    """Build ``name`` on placeholders; return (inputs, labels, logits, model updates)."""
    L = keras.layers
    if name == "lenet":
        # The convolutional MNIST network of TensorFlow's classic tutorial:
        # two 5x5 conv + 2x2 max-pool stages, a 1024-unit layer, dropout, 10 classes.
        shape, classes = (28, 28, 1), 10
        x = tf.compat.v1.placeholder(tf.float32, (batch, *shape), name="images")
        h = L.Conv2D(32, 5, padding="same", activation="relu")(x)
        h = L.MaxPooling2D(2)(h)
        h = L.Conv2D(64, 5, padding="same", activation="relu")(h)
        h = L.MaxPooling2D(2)(h)
        h = L.Flatten()(h)
        h = L.Dense(1024, activation="relu")(h)
        h = L.Dropout(0.5)(h, training=True)
        logits = L.Dense(classes)(h)
        updates = []
    elif name == "alexnet":
        # Single-tower AlexNet (64-192-384-256-256 filters, two 4096 layers).
        shape, classes = (227, 227, 3), 1000
        x = tf.compat.v1.placeholder(tf.float32, (batch, *shape), name="images")
        h = L.Conv2D(64, 11, strides=4, activation="relu")(x)
        h = L.MaxPooling2D(3, 2)(h)
        h = L.Conv2D(192, 5, padding="same", activation="relu")(h)
        h = L.MaxPooling2D(3, 2)(h)
        for f in (384, 256, 256):
            h = L.Conv2D(f, 3, padding="same", activation="relu")(h)
        h = L.MaxPooling2D(3, 2)(h)
        h = L.Flatten()(h)
        for _ in range(2):
            h = L.Dense(4096, activation="relu")(h)
            h = L.Dropout(0.5)(h, training=True)
        logits = L.Dense(classes)(h)
        updates = []
    else:
        ctor, shape = {"vgg16": (keras.applications.VGG16, (224, 224, 3)),
                       "inception_v3": (keras.applications.InceptionV3, (299, 299, 3)),
                       "resnet152": (keras.applications.ResNet152, (224, 224, 3))}[name]
        classes = 1000
        x = tf.compat.v1.placeholder(tf.float32, (batch, *shape), name="images")
        keras.backend.set_learning_phase(1)  # batch norm in training mode
        m = ctor(weights=None, input_tensor=x, classes=classes, classifier_activation=None)
        logits = m.output
        updates = list(m.updates)  # batch-norm moving statistics
    y = tf.compat.v1.placeholder(tf.int32, (batch,), name="labels")
    return x, y, logits, updates, shape, classes


def cpu_matmul_flops(tf, n: int = 2048, reps: int = 5) -> float:
    """Measured fp32 matrix-multiply throughput of this CPU under TensorFlow, FLOP/s."""
    g = tf.Graph()
    with g.as_default():
        a = tf.random.uniform((n, n))
        b = tf.random.uniform((n, n))
        av, bv = tf.Variable(a), tf.Variable(b)
        c = tf.reduce_sum(tf.matmul(av, bv))
        with tf.compat.v1.Session(graph=g, config=_config(tf)) as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(c)
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                s.run(c)
                best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def _config(tf):
    from tensorflow.core.protobuf import rewriter_config_pb2

    cfg = tf.compat.v1.ConfigProto()
    # One op at a time, each on all cores: per-op times are not inflated by
    # ops competing for the two cores.
    cfg.inter_op_parallelism_threads = 1
    cfg.intra_op_parallelism_threads = 0
    # Grappler off: node names in the step stats and partition graphs are the
    # GraphDef's own, and no op is fused or folded away.
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    cfg.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    cfg.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    return cfg


def export(name: str, out: Path, batch: int, gflops: float) -> dict:
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from google.protobuf import json_format

    tf.compat.v1.disable_eager_execution()
    ports = _free_port(), _free_port()
    spec = tf.train.ClusterSpec({"ps": [f"localhost:{ports[0]}"], "worker": [f"localhost:{ports[1]}"]})
    cfg = _config(tf)
    tf.distribute.Server(spec, job_name="ps", task_index=0, config=cfg, start=True)
    worker = tf.distribute.Server(spec, job_name="worker", task_index=0, config=cfg, start=True)
    g = tf.Graph()
    with g.as_default():
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=1, worker_device=WORKER)
        with tf.compat.v1.device(setter):
            x, y, logits, updates, shape, classes = build(name, batch, tf, keras)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            opt = tf.compat.v1.train.GradientDescentOptimizer(0.01)
            step = tf.group(opt.minimize(loss), *updates, name="train_step")
            init = tf.compat.v1.global_variables_initializer()
        graph_def = g.as_graph_def(add_shapes=True)
    rng = np.random.default_rng(0)
    feed = {x: rng.random((batch, *shape), dtype=np.float32),
            y: rng.integers(0, classes, batch).astype(np.int32)}
    with tf.compat.v1.Session(worker.target, graph=g, config=cfg) as sess:
        sess.run(init)
        sess.run(step, feed)  # warm-up: allocation and kernel selection
        opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
                                       output_partition_graphs=True)
        md = tf.compat.v1.RunMetadata()
        t0 = time.perf_counter()
        sess.run(step, feed, options=opts, run_metadata=md)
        wall = time.perf_counter() - t0
    placed, sends = {}, set()
    for pg in md.partition_graphs:
        for n in pg.node:
            if n.op == "_Send":
                if n.attr["send_device"].s != n.attr["recv_device"].s:
                    sends.add((n.input[0], n.attr["recv_device"].s.decode()))
            elif not n.op.startswith("_"):
                placed[n.name] = n.device
    keep = []
    for n in graph_def.node:
        if n.name in placed:
            n.device = placed[n.name]
        elif n.op != "Placeholder":
            continue  # not part of the training step (initializers, savers...)
        for key in list(n.attr):
            if key not in KEEP_ATTRS:
                del n.attr[key]
        keep.append(n)
    del graph_def.node[:]
    graph_def.node.extend(keep)
    names = {n.name for n in keep}
    # Control edges across tasks get sends of generated dummy tensors; only
    # sends of the graph's own tensors move data.
    data_sends = sorted((t, d) for t, d in sends if t.split(":")[0] in names)
    with gzip.open(out / f"{name}.graph.json.gz", "wt", encoding="utf-8") as fh:
        fh.write(json_format.MessageToJson(graph_def, indent=None))
    for dev in md.step_stats.dev_stats:
        for ns in dev.node_stats:
            keep_fields = {f: getattr(ns, f) for f in ("node_name", "all_start_micros",
                           "op_start_rel_micros", "op_end_rel_micros", "all_end_rel_micros",
                           "all_start_nanos", "op_start_rel_nanos", "op_end_rel_nanos",
                           "all_end_rel_nanos")}
            ns.Clear()
            for f, v in keep_fields.items():
                setattr(ns, f, v)
    slim = tf.compat.v1.RunMetadata()
    slim.step_stats.CopyFrom(md.step_stats)
    with gzip.open(out / f"{name}.stepstats.json.gz", "wt", encoding="utf-8") as fh:
        fh.write(json_format.MessageToJson(slim, indent=None))
    meta = {"model": name, "batch": batch, "input_shape": list(shape), "classes": classes,
            "tensorflow": tf.__version__, "cpu_matmul_gflops": round(gflops, 2),
            "traced_step_wall_s": round(wall, 3), "step_nodes": len(keep),
            "tf_cross_task_sends": len(data_sends)}
    (out / f"{name}.meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)} (default all)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "workloads")
    ap.add_argument("--batch", type=int, default=32, help="images per step (default 32)")
    ap.add_argument("--gflops", type=float, default=None,
                    help="CPU matmul GFLOP/s to record instead of measuring it")
    args = ap.parse_args(argv)
    models = args.models or list(MODELS)
    bad = [m for m in models if m not in MODELS]
    if bad:
        ap.error(f"unknown model(s) {', '.join(bad)}; choose from {', '.join(MODELS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.gflops is None:
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        args.gflops = cpu_matmul_flops(tf) / 1e9
        print(f"CPU fp32 matmul: {args.gflops:.1f} GFLOP/s", flush=True)
    if len(models) > 1:
        # One process per model: the in-process servers keep every variable
        # they ever held until the process ends.
        for name in models:
            subprocess.run([sys.executable, __file__, name, "--out", str(args.out),
                            "--batch", str(args.batch), "--gflops", str(args.gflops)], check=True)
        return 0
    meta = export(models[0], args.out, args.batch, args.gflops)
    print(json.dumps(meta), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
