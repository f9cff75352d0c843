"""Tests of the workload commands: import-tf, gen-workload, import-coflow."""

from __future__ import annotations

import json
from pathlib import Path

from jitsched.cli import main
from jitsched.dag.model import load_workload
from jitsched.plan.coflow import synthetic_trace_path
from tests.test_tfgraph import SMALL_PBTXT

WORKLOADS = Path(__file__).resolve().parents[1] / "bench" / "workloads"


def test_import_tf_json_summary(tmp_path, capsys):
    g = tmp_path / "toy.pbtxt"
    g.write_text(SMALL_PBTXT)
    out = tmp_path / "job.json"
    assert main(["import-tf", str(g), "--ps-host", "h0", "--worker-host", "h1",
                 "-o", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "transfers": 2, "transfer_bytes": 256, "computes": 4, "edges": 6}
    w = load_workload(out)
    assert w.cluster.names == ["h0", "h1"]
    (job,) = w.jobs
    assert job.id == "toy" and {c.host for c in job.computes} == {"h1"}


def test_import_tf_committed_model_with_step_stats(tmp_path, capsys):
    out = tmp_path / "lenet.json.gz"
    assert main(["import-tf", str(WORKLOADS / "lenet.graph.json.gz"), "--step-stats",
                 str(WORKLOADS / "lenet.stepstats.json.gz"), "--time-scale", "0.5",
                 "--job-id", "L", "-o", str(out)]) == 0
    assert "17 transfers" in capsys.readouterr().out
    (job,) = load_workload(out).jobs
    assert job.id == "L" and len(job.transfers) == 17
    assert {t.src for t in job.transfers} == {"ps", "worker"}


def test_import_tf_error_names_the_node(tmp_path, capsys):
    g = tmp_path / "bad.pbtxt"
    g.write_text(SMALL_PBTXT.replace('input: "x" input: "act"', 'input: "x" input: "gone"'))
    assert main(["import-tf", str(g), "-o", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert "import-tf: error: node 'grad': input 'gone' is not a node" in err
    assert not (tmp_path / "o.json").exists()


def test_gen_workload(tmp_path, capsys):
    out = tmp_path / "w.json"
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "12", "--hosts", "8",
                 "--models", "lenet,alexnet", "--background-share", "0.25", "--seed", "2",
                 "-o", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    w = load_workload(out)
    assert s["jobs"] == len(w.jobs) and s["background"] == len(w.background)
    assert s["jobs"] + s["background"] == 12
    assert set(s["models"]) <= {"lenet", "alexnet"} and sum(s["models"].values()) == s["jobs"]
    assert len(w.cluster) == 8


def test_gen_workload_needs_a_bound(tmp_path, capsys):
    assert main(["gen-workload", "--load", "0.5", "-o", str(tmp_path / "w.json")]) == 2
    assert "exactly one of n_jobs and duration_s" in capsys.readouterr().err


def test_import_coflow(tmp_path, capsys):
    out = tmp_path / "c.json"
    assert main(["import-coflow", str(synthetic_trace_path()), "-o", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s == {"ports": 8, "coflows": 6, "jobs": 5, "flows": 24,
                 "bytes": 37.0 * 2**20, "local_flows_dropped": 2}
    assert len(load_workload(out).jobs) == 5
