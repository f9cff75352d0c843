"""Tests of the TensorFlow graph importer: hand-written GraphDefs (JSON and pbtxt), errors, committed models."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched.dag.model import Cluster, Host, compile_jobs, parse_job
from jitsched.errors import ValidationError
from jitsched.workloads.paper import MODELS, import_exported_model, model_template
from jitsched.workloads.tfgraph import (
    COST_FLOPS,
    COST_LAUNCH_S,
    COST_MEM_BPS,
    import_tf_graph,
    job_summary,
    parse_task,
    read_graphdef,
    read_step_stats,
)

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "bench" / "workloads"
PS = "/job:ps/replica:0/task:0/device:CPU:0"
WK = "/job:worker/replica:0/task:0/device:CPU:0"


def shape(*dims):
    return {"dim": [{"size": str(d)} for d in dims]}


def out_shapes(*shapes):
    return {"_output_shapes": {"list": {"shape": list(shapes)}}}


def node(name, op, inputs=(), device=WK, **attr):
    d = {"name": name, "op": op, "device": device, "attr": attr}
    if inputs:
        d["input"] = list(inputs)
    return d


F32 = {"type": "DT_FLOAT"}


def small_graph():
    """A one-layer parameter-server step: read W, forward, backward, push the gradient.

    The variable has no _output_shapes (its ``shape`` attribute gives the size
    through the read Identity); the gradient goes through a contracted
    Identity; a NoOp with a control input orders ``post`` after ``fwd``.
    """
    return {"node": [
        node("W", "VariableV2", device=PS, dtype=F32, shape={"shape": shape(8, 4)}),
        node("W/read", "Identity", ["W"], device=PS, T=F32),
        node("lr", "Const", device=PS, dtype=F32, **out_shapes(shape())),
        node("x", "Placeholder", dtype=F32, **out_shapes(shape(2, 8))),
        node("fwd", "MatMul", ["x", "W/read"], T=F32, **out_shapes(shape(2, 4))),
        node("act", "Relu", ["fwd"], T=F32, **out_shapes(shape(2, 4))),
        node("grad", "MatMul", ["x", "act"], T=F32, **out_shapes(shape(8, 4))),
        node("grad/id", "Identity", ["grad"], T=F32, **out_shapes(shape(8, 4))),
        node("apply", "ApplyGradientDescent", ["W", "lr", "grad/id"], device=PS, T=F32,
             **out_shapes(shape(8, 4))),
        node("barrier", "NoOp", ["^fwd"]),
        node("post", "Relu", ["act", "^barrier"], T=F32, **out_shapes(shape(2, 4))),
    ]}


SMALL_PBTXT = r"""
# the same graph as small_graph(), in text form
node {
  name: "W" op: "VariableV2" device: "/job:ps/replica:0/task:0/device:CPU:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "shape" value { shape { dim { size: 8 } dim { size: 4 } } } }
}
node { name: "W/read" op: "Identity" input: "W" device: "/job:ps/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } } }
node < name: 'lr' op: "Const" device: "/job:ps/replica:0/task:0/device:CPU:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { } } } } >
node { name: "x" op: "Placeholder" device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "dtype" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape [{ dim { size: 2 } dim { size: 8 } }] } } } }
node { name: "fwd" op: "MatMul" input: ["x", "W/read"]
  device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 2 } dim { size: 4 } } } } } }
node { name: "act" op: "Relu" input: "fwd" device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "T" value: { type: 1 } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 2 } dim { size: 4 } } } } } }
node { name: "grad" op: "MatMul" input: "x" input: "act"
  device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 8 } dim { size: 4 } } } } } }
node { name: "grad/id" op: "Identity" input: "grad"
  device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 8 } dim { size: 4 } } } } } }
node { name: "apply" op: "ApplyGradientDescent" input: "W" input: "lr" input: "grad/id"
  device: "/job:ps/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 8 } dim { size: 4 } } } } } }
node { name: "barrier" op: "NoOp" input: "^fwd" device: "/job:worker/replica:0/task:0/device:CPU:0" }
node { name: "post" op: "Relu" input: "act" input: "^barrier"
  device: "/job:worker/replica:0/task:0/device:CPU:0"
  attr { key: "T" value { type: DT_FLOAT } }
  attr { key: "_output_shapes" value { list { shape { dim { size: 2 } dim { size: 4 } } } } } }
versions { producer: 1087 }
"""

READ = "W/read:0>worker:0"
PUSH = "grad/id:0>ps:0"


def test_small_graph_structure():
    job = import_tf_graph(small_graph(), job_id="j")
    assert {c.id for c in job.computes} == {"fwd", "act", "grad", "post"}
    assert {c.host for c in job.computes} == {"worker"}
    assert {t.id: (t.src, t.dst, t.bytes) for t in job.transfers} == {
        READ: ("ps", "worker", 8 * 4 * 4),  # size from the variable's shape attribute
        PUSH: ("worker", "ps", 8 * 4 * 4),
    }
    # Identity (grad/id) is contracted: the push depends on grad; the NoOp is
    # contracted: post depends on fwd through the control edge.
    assert set(job.edges) == {(READ, "fwd"), ("fwd", "act"), ("act", "grad"),
                              ("grad", PUSH), ("act", "post"), ("fwd", "post")}
    assert job_summary(job) == {"transfers": 2, "transfer_bytes": 256, "computes": 4, "edges": 6}


def test_pbtxt_and_json_give_the_same_job(tmp_path):
    a = import_tf_graph(small_graph())
    p = tmp_path / "g.pbtxt"
    p.write_text(SMALL_PBTXT)
    assert import_tf_graph(p) == a
    gz = tmp_path / "g.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(small_graph()).encode()))
    assert import_tf_graph(gz) == a
    gzt = tmp_path / "g.pbtxt.gz"
    gzt.write_bytes(gzip.compress(SMALL_PBTXT.encode()))
    assert import_tf_graph(gzt) == a


def test_pbtxt_strings_escapes_and_adjacent_literals(tmp_path):
    p = tmp_path / "g.pbtxt"
    p.write_text('node { name: "a" "b\\x2fc" op: "NoOp" device: \'/job:worker\' }\n')
    (n,) = read_graphdef(p)
    assert n["name"] == "ab/c" and n["op"] == "NoOp" and n["device"] == "/job:worker"


def test_json_snake_case_field_names_are_accepted():
    g = small_graph()
    for n in g["node"]:
        if n["name"] == "lr":
            n["attr"]["_output_shapes"] = {"list": {"shape": [{"unknown_rank": False}]}}
    job = import_tf_graph(g)
    assert len(job.transfers) == 2


def test_computes_are_on_mapped_hosts_and_job_is_valid():
    job = import_tf_graph(small_graph(), hosts={"ps": "h1", "/job:worker/task:0": "h7"},
                          job_id="x", arrival_s=2.5, model="toy")
    assert {c.host for c in job.computes} == {"h7"}
    assert {(t.src, t.dst) for t in job.transfers} == {("h1", "h7"), ("h7", "h1")}
    cluster = Cluster((Host("h1", 1e9, 1e9), Host("h7", 1e9, 1e9)))
    assert parse_job(job.to_dict(), cluster) == job
    assert job.arrival_s == 2.5 and job.model == "toy"


def test_one_transfer_per_tensor_and_destination_task():
    g = small_graph()
    g["node"] += [
        node("fwd2", "Relu", ["W/read"], T=F32, **out_shapes(shape(8, 4))),
        node("other", "Relu", ["W/read"], device="/job:worker/task:1", T=F32,
             **out_shapes(shape(8, 4))),
        # another device of the same task: no network transfer
        node("gpu", "Relu", ["act"], device="/job:worker/replica:0/task:0/device:GPU:0",
             T=F32, **out_shapes(shape(2, 4))),
    ]
    job = import_tf_graph(g)
    reads = [t for t in job.transfers if t.id.startswith("W/read:0")]
    assert sorted((t.id, t.dst) for t in reads) == [(READ, "worker"), ("W/read:0>worker:1", "worker1")]
    assert {(READ, "fwd"), (READ, "fwd2")} <= set(job.edges)
    assert ("act", "gpu") in job.edges
    assert len(job.transfers) == 3


def test_output_index_and_contracted_chain_keep_dependencies():
    g = {"node": [
        node("v", "VariableV2", device=PS, dtype=F32, shape={"shape": shape(3)}),
        node("split", "Unpack", ["v"], device=PS, T=F32, **out_shapes(shape(), shape(), shape())),
        node("a", "Neg", ["split:2"], T=F32, **out_shapes(shape())),
        node("c1", "Identity", ["a"], T=F32),
        node("c2", "NoOp", ["^c1"]),
        node("c3", "Identity", ["a", "^c2"], T=F32),
        node("b", "Neg", ["c3"], T=F32, **out_shapes(shape())),
    ]}
    job = import_tf_graph(g)
    assert [(t.id, t.bytes) for t in job.transfers] == [("split:2>worker:0", 4.0)]
    assert set(job.edges) == {("split:2>worker:0", "a"), ("a", "b")}


def test_control_input_across_tasks_is_a_dependency_without_data():
    g = small_graph()
    g["node"].append(node("after_apply", "Relu", ["act", "^apply"], T=F32,
                          **out_shapes(shape(2, 4))))
    job = import_tf_graph(g)
    assert len(job.transfers) == 2
    # apply (ps, contracted) stands for the push it waits on
    assert (PUSH, "after_apply") in job.edges


def test_step_stats_times_scale_and_floor(tmp_path):
    stats = {"stepStats": {"devStats": [
        {"device": WK, "nodeStats": [
            {"nodeName": "fwd", "allStartMicros": "10", "allEndRelMicros": "1000"},
            {"nodeName": "act", "allEndRelMicros": "1", "allEndRelNanos": "1500"},
            {"nodeName": "RecvTensor", "allEndRelMicros": "99999"},
        ]},
        {"device": WK + "/stream:all", "nodeStats": [
            {"nodeName": "fwd", "allEndRelMicros": "400"},
        ]},
    ]}}
    p = tmp_path / "rm.json"
    p.write_text(json.dumps(stats))
    assert read_step_stats(p) == {"fwd": 1e-3, "act": 1.5e-6}
    job = import_tf_graph(small_graph(), p, time_scale=0.5, min_op_s=1e-6)
    dur = {c.id: c.duration_s for c in job.computes}
    assert dur["fwd"] == pytest.approx(0.5e-3)
    assert dur["act"] == pytest.approx(1e-6)  # 0.75 us floored at 1 us
    # no measurement: the cost model
    grad = COST_LAUNCH_S + 2 * 8 * 4 * 2 / COST_FLOPS + (2 * 8 + 2 * 4 + 8 * 4) * 4 / COST_MEM_BPS
    assert dur["grad"] == pytest.approx(grad)
    # a bare StepStats message and the text form are read too
    p2 = tmp_path / "ss.pbtxt"
    p2.write_text('dev_stats { device: "d" node_stats { node_name: "fwd" all_end_rel_micros: 7 } }')
    assert read_step_stats(p2) == {"fwd": 7e-6}


@pytest.mark.parametrize("content, message", [
    ({"cluster": {"hosts": []}, "jobs": []}, "not RunMetadata or StepStats (no step_stats or dev_stats field)"),
    ({"node": []}, "not RunMetadata or StepStats"),
    ({"stepStats": {}}, "step_stats has no dev_stats: it times no op"),
    ({"devStats": [{"device": WK, "nodeStats": [{"allEndRelMicros": "5"}]}]},
     "the step stats time no op"),
])
def test_step_stats_that_time_no_op_are_refused(tmp_path, content, message):
    p = tmp_path / "stats.json"
    p.write_text(json.dumps(content))
    with pytest.raises(ValidationError, match=re.escape(f"{p}: {message}")):
        read_step_stats(p)
    with pytest.raises(ValidationError, match=re.escape(message)):
        import_tf_graph(small_graph(), p)


def test_step_stats_of_another_graph_are_refused(tmp_path):
    p = tmp_path / "stats.json"
    p.write_text(json.dumps({"devStats": [{"device": WK, "nodeStats": [
        {"nodeName": "conv9", "allEndRelMicros": "5"}]}]}))
    with pytest.raises(ValidationError, match="the step stats time none of the graph's ops "
                                              "\\(they time 'conv9', ...\\)"):
        import_tf_graph(small_graph(), p)


def test_cost_model_counts_conv_flops():
    g = {"node": [
        node("k", "VariableV2", device=PS, dtype=F32, shape={"shape": shape(3, 3, 16, 32)}),
        node("x", "Placeholder", dtype=F32, **out_shapes(shape(1, 10, 10, 16))),
        node("conv", "Conv2D", ["x", "k"], T=F32, **out_shapes(shape(1, 10, 10, 32))),
    ]}
    (c,) = import_tf_graph(g).computes
    flops = 2 * 10 * 10 * 32 * 3 * 3 * 16
    moved = (10 * 10 * 16 + 3 * 3 * 16 * 32 + 10 * 10 * 32) * 4
    assert c.duration_s == pytest.approx(COST_LAUNCH_S + flops / COST_FLOPS + moved / COST_MEM_BPS)


@pytest.mark.parametrize("spec, expected", [
    ("ps", ("ps", 0)), ("worker:3", ("worker", 3)), ("/job:ps/task:2", ("ps", 2)),
    ("/job:worker/replica:0/task:1/device:GPU:0", ("worker", 1)),
    ("/device:CPU:0", ("localhost", 0)), ("/job:ps", ("ps", 0)),
])
def test_parse_task(spec, expected):
    t = parse_task(spec)
    assert (t.job, t.task) == expected


@pytest.mark.parametrize("spec", ["", "ps:x", "/job:ps/task:a", "/job:/task:0"])
def test_parse_task_rejects(spec):
    with pytest.raises(ValidationError):
        parse_task(spec)


# --------------------------------------------------------------------------- malformed graphs


def _edit(fn):
    g = small_graph()
    fn({n["name"]: n for n in g["node"]}, g)
    return g


@pytest.mark.parametrize("edit, pattern", [
    (lambda n, g: n["fwd"].update(input=["x", "nope"]), r"node 'fwd': input 'nope' is not a node"),
    (lambda n, g: n["W/read"]["attr"].pop("T"), r"node 'W/read': output 0 .*unknown dtype"),
    (lambda n, g: n["W/read"]["attr"].update(T={"type": "DT_STRING"}),
     r"node 'W/read'.*DT_STRING has no fixed size"),
    (lambda n, g: n["W"]["attr"].update(shape={"shape": {"dim": [{"size": "-1"}, {"size": "4"}]}}),
     r"node 'W/read': output 0 \(consumed by 'fwd' on /job:worker/task:0\): unknown shape"),
    (lambda n, g: n["W"]["attr"].pop("shape"), r"node 'W/read'.*unknown shape"),
    (lambda n, g: n["grad/id"]["attr"].update(_output_shapes={"list": {"shape": [{"unknownRank": True}]}})
     or n["grad/id"]["attr"].pop("T"), r"node 'grad/id'.*unknown dtype"),
    (lambda n, g: [x.update(device=WK) for x in g["node"]], r"no cross-task edge"),
    (lambda n, g: n["act"].update(input=["post"]), r"cycle"),
    (lambda n, g: g["node"].append(dict(n["x"])), r"node 'x': duplicate node name"),
    (lambda n, g: n["fwd"].pop("op"), r"node 'fwd': no op"),
    (lambda n, g: n["fwd"].update(device="/job:worker/task:z"), r"bad task index"),
])
def test_malformed_graphs_name_the_node(edit, pattern):
    with pytest.raises(ValidationError, match=pattern):
        import_tf_graph(_edit(edit))


def test_resource_handle_across_tasks_is_rejected():
    g = {"node": [
        node("h", "VarHandleOp", device=PS, dtype=F32, shape={"shape": shape(2)}),
        node("r", "ReadVariableOp", ["h"], dtype=F32),
        node("y", "Neg", ["r"], T=F32),
    ]}
    with pytest.raises(ValidationError, match=r"node 'h'.*resource handle"):
        import_tf_graph(g)
    # placed where TensorFlow's placer puts it (with the variable) it imports
    g["node"][1]["device"] = PS
    (t,) = import_tf_graph(g).transfers
    assert t.bytes == 8  # shape through ReadVariableOp to the handle's shape attribute


def test_tasks_on_one_host_are_rejected():
    with pytest.raises(ValidationError, match=r"both mapped to host 'h'"):
        import_tf_graph(small_graph(), hosts={"ps": "h", "worker": "h"})


def test_bad_files(tmp_path):
    with pytest.raises(ValidationError, match="no such file"):
        import_tf_graph(tmp_path / "missing.json")
    bad = tmp_path / "bad.pbtxt"
    bad.write_text('node {\n  name: "a"\n  op "NoOp"\n}\n')
    with pytest.raises(ValidationError, match=r"bad.pbtxt:3: expected ':' or '\{'"):
        import_tf_graph(bad)
    unclosed = tmp_path / "unclosed.pbtxt"
    unclosed.write_text('node { name: "a"')
    with pytest.raises(ValidationError, match=r"missing '\}'"):
        import_tf_graph(unclosed)
    badjson = tmp_path / "bad.json"
    badjson.write_text('{"node": [')
    with pytest.raises(ValidationError, match="not valid JSON"):
        import_tf_graph(badjson)
    with pytest.raises(ValidationError, match="no nodes"):
        import_tf_graph({"node": []})
    with pytest.raises(ValidationError, match="time_scale"):
        import_tf_graph(small_graph(), time_scale=0)


@settings(max_examples=40, deadline=None)
@given(layers=st.integers(1, 6), widths=st.lists(st.integers(1, 64), min_size=7, max_size=7))
def test_random_layer_chains(layers, widths):
    """A chain of dense layers: one read and one push per layer, sizes from the shapes."""
    nodes = [node("x", "Placeholder", dtype=F32, **out_shapes(shape(2, widths[0])))]
    prev, expected = "x", 0
    for i in range(layers):
        a, b = widths[i], widths[i + 1]
        nodes += [
            node(f"w{i}", "VariableV2", device=PS, dtype=F32, shape={"shape": shape(a, b)}),
            node(f"mm{i}", "MatMul", [prev, f"w{i}"], T=F32, **out_shapes(shape(2, b))),
            node(f"g{i}", "MatMul", [prev, f"mm{i}"], T=F32, **out_shapes(shape(a, b))),
            node(f"apply{i}", "ApplyGradientDescent", [f"w{i}", f"g{i}"], device=PS, T=F32),
        ]
        prev = f"mm{i}"
        expected += 2 * a * b * 4
    job = import_tf_graph({"node": nodes})
    assert len(job.transfers) == 2 * layers
    assert sum(t.bytes for t in job.transfers) == expected
    assert len(job.computes) == 2 * layers
    cluster = Cluster((Host("ps", 1e9, 1e9), Host("worker", 1e9, 1e9)))
    compile_jobs([parse_job(job.to_dict(), cluster)], cluster)


# --------------------------------------------------------------------------- committed models


def readme_table() -> dict[str, dict[str, float]]:
    """The per-model numbers of bench/workloads/README.md's table."""
    rows = {}
    for line in (WORKLOADS / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] in MODELS:
            rows[cells[0]] = {"transfers": int(cells[2]), "mib": float(cells[3]),
                              "computes": int(cells[6]), "tf_sends": int(cells[8])}
    return rows


def test_readme_lists_every_model():
    assert set(readme_table()) == set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_committed_model_imports_as_documented(name):
    job = import_exported_model(name, WORKLOADS)
    row = readme_table()[name]
    meta = json.loads((WORKLOADS / f"{name}.meta.json").read_text())
    assert len(job.transfers) == row["transfers"]
    assert sum(t.bytes for t in job.transfers) / 2**20 == pytest.approx(row["mib"], abs=0.051)
    assert len(job.computes) == row["computes"]
    # the importer finds exactly the cross-task sends TensorFlow's runtime made
    assert len(job.transfers) == meta["tf_cross_task_sends"] == row["tf_sends"]
    # both directions: every variable read has a gradient or statistics push back
    assert {t.src for t in job.transfers} == {"ps", "worker"}
    assert all(c.host == "worker" and c.duration_s >= COST_LAUNCH_S for c in job.computes)
    # the packaged template is this very import
    assert model_template(name) == job
    cluster = Cluster((Host("ps", 1e9, 1e9), Host("worker", 1e9, 1e9)))
    compile_jobs([parse_job(job.to_dict(), cluster)], cluster)


def test_committed_parameter_reads_match_the_models():
    """Every variable is read from the PS once: the models' parameter counts (all variables,
    batch-norm moving statistics included, as Keras's model summaries count them)."""
    params = {"lenet": 3_274_634, "alexnet": 61_100_840, "vgg16": 138_357_544,
              "inception_v3": 23_851_784, "resnet152": 60_419_944}
    for name, count in params.items():
        reads = [t for t in model_template(name).transfers if t.src == "ps"]
        assert sum(t.bytes for t in reads) == 4 * count, name
    # the paper's 12.5 MB for LeNet is its 3,274,634 float32 parameters in MiB
    assert math.isclose(4 * params["lenet"] / 2**20, 12.49, abs_tol=0.01)
    # and its 932 ResNet152 transfers are exactly the parameter reads
    assert sum(t.src == "ps" for t in model_template("resnet152").transfers) == 932


def test_split_modules_are_reexported():
    """Parser and cost model live in their own modules; jitsched.workloads.tfgraph still offers their names."""
    from jitsched.workloads import _tfparse, tfcost, tfgraph

    assert tfgraph.read_graphdef is _tfparse.read_graphdef
    assert tfgraph.read_step_stats is _tfparse.read_step_stats
    assert tfgraph.DTYPE_BYTES is _tfparse.DTYPE_BYTES
    assert tfgraph.estimate_duration is tfcost.estimate_duration
    assert (tfgraph.COST_LAUNCH_S, tfgraph.COST_FLOPS, tfgraph.COST_MEM_BPS) == \
        (tfcost.COST_LAUNCH_S, tfcost.COST_FLOPS, tfcost.COST_MEM_BPS)
    assert all(hasattr(tfgraph, name) for name in tfgraph.__all__)


def test_an_imported_step_expands_to_many_workers():
    from jitsched.workloads.shapes import ShapeOptions, expand_job, shape_hosts

    job = import_tf_graph(small_graph(), job_id="j")
    opts = ShapeOptions("allreduce", 2)
    servers, workers = shape_hosts("allreduce", opts)
    ring = expand_job(job, "allreduce", servers, workers, options=opts)
    assert workers == ["worker", "worker1"] and not servers
    # the read is gone (each worker holds W); one bucket of the 128-byte gradient, 2 steps of 64 bytes per worker
    assert sorted((t.id, t.src, t.dst, t.bytes) for t in ring.transfers) == [
        ("ar0/s0/w0", "worker", "worker1", 64.0), ("ar0/s0/w1", "worker1", "worker", 64.0),
        ("ar0/s1/w0", "worker", "worker1", 64.0), ("ar0/s1/w1", "worker1", "worker", 64.0)]
    assert ("w1/grad", "ar0/s0/w1") in ring.edges and ("w0/fwd", "w0/post") in ring.edges
    assert not any(b == "w0/fwd" for _, b in ring.edges)  # fwd starts at once: W is local
    ps = expand_job(job, "ps", ["ps"], workers)
    assert {(t.id, t.src, t.dst) for t in ps.transfers} == {
        (f"w0/{READ}", "ps", "worker"), (f"w1/{READ}", "ps", "worker1"),
        (f"w0/{PUSH}", "worker", "ps"), (f"w1/{PUSH}", "worker1", "ps")}


@pytest.mark.parametrize("name, text, message", [
    ("g.pbtxt", 'node { name: "a\\x" op: "NoOp" }\n', r"g\.pbtxt:1: bad escape in the string"),
    ("g.pbtxt", 'node {\n name: "a\\u12" op: "NoOp" }\n', r"g\.pbtxt:2: bad escape in the string"),
    ("g.pbtxt", "node " + "{ attr " * 50_000 + "}" * 50_000, r"g\.pbtxt: messages nested too deeply"),
    ("g.json", '{"node": ' + "[" * 100_000 + "]" * 100_000 + "}", r"not valid JSON \(nested too deeply\)"),
    ("g.json", '{"node": [{"name": "a", "op": "X", "attr": {"T": {"i": ' + "9" * 5000 + "}}}}]}",
     r"not valid JSON \(.*4300 digits"),
    # a list where a message belongs
    ("g.json", '{"node": [[1, 2]]}', r"node: expected a message, got list"),
    ("g.json", '{"node": [{"name": "a", "op": "Const", "attr": [[1]]}]}', r"attr: expected a message, got list"),
])
def test_a_graph_the_parsers_cannot_hold_is_refused_in_words(tmp_path, name, text, message):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(ValidationError, match=message):
        read_graphdef(p)


def test_an_input_index_or_task_of_non_ascii_digits_is_refused_in_words():
    assert parse_task("/job:ps/task:1").task == 1
    with pytest.raises(ValidationError, match="bad task index"):
        parse_task("/job:ps/task:²")
    with pytest.raises(ValidationError, match="bad TensorFlow task"):
        parse_task("ps:²")
    g = {"node": [{"name": "a", "op": "NoOp"}, {"name": "b", "op": "NoOp", "input": ["a:²"]}]}
    with pytest.raises(ValidationError, match=r"input 'a:²' is not a node of the graph"):
        import_tf_graph(g)
