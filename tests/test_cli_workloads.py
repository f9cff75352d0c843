"""Tests of the workload commands: import-tf, gen-workload, import-coflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jitsched.cli import main
from jitsched.dag.model import load_workload
from jitsched.plan.coflow import synthetic_trace_path
from jitsched.workloads.shapes import shape_of
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
                 "bytes": 37.0 * 2**20, "local_flows_dropped": 2, "coflows_dropped": ["5"]}
    assert len(load_workload(out).jobs) == 5


def test_import_coflow_says_which_coflow_it_left_out(tmp_path, capsys):
    # coflow 5 of the shipped trace has one mapper and one reducer on port 6: all local
    assert main(["import-coflow", str(synthetic_trace_path()), "-o", str(tmp_path / "c.json")]) == 0
    line = capsys.readouterr().out.strip()
    assert line == (f"{tmp_path / 'c.json'}: 5 of 6 coflows as jobs on 8 ports, 24 flows, 37.0 MiB "
                    "(2 port-local flows dropped; coflow 5 left out: no flow crosses the network)")


def test_import_coflow_refuses_a_header_of_implausibly_many_ports(tmp_path, capsys):
    trace = tmp_path / "t.txt"
    # one past the bound: 10^8 ports, say, would take minutes and gigabytes to build
    trace.write_text("100001 1\n1 0 1 0 1 1:1.0\n")
    assert main(["import-coflow", str(trace), "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jitsched import-coflow: error: {trace}") and len(err.splitlines()) == 1
    assert "the header declares 100001 ports, more than 100000" in err
    assert not (tmp_path / "c.json").exists()


def test_gen_workload_mixed_shapes(tmp_path, capsys):
    out = tmp_path / "w.json"
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "20", "--hosts", "10",
                 "--models", "lenet,alexnet", "--shape", "mixed", "--workers", "3", "--seed", "1",
                 "-o", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    w = load_workload(out)
    assert set(s["shapes"]) == {"ps", "ps-sharded", "allreduce"} and sum(s["shapes"].values()) == len(w.jobs)
    sharded = next(j for j in w.jobs if "-ps-sharded-" in j.id)
    # two servers by default, three workers
    assert len({t.src for t in sharded.transfers} - {c.host for c in sharded.computes}) == 2
    assert all(len({c.host for c in j.computes}) == 3 for j in w.jobs)


def test_import_tf_expands_the_one_worker_step(tmp_path, capsys):
    src = WORKLOADS / "lenet.graph.json.gz"
    one, ring, shards = (tmp_path / f"{n}.json" for n in ("one", "ring", "shards"))
    assert main(["import-tf", str(src), "-o", str(one)]) == 0
    assert main(["import-tf", str(src), "--shape", "allreduce", "--workers", "3", "-o", str(ring),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["import-tf", str(src), "--shape", "ps-sharded", "--workers", "2", "--servers", "3",
                 "--ps-host", "s", "-o", str(shards)]) == 0
    (job,) = load_workload(one).jobs
    push = sum(t.bytes for t in job.transfers if t.src == "worker")
    w = load_workload(ring)
    assert w.cluster.names == ["worker", "worker1", "worker2"]
    (r,) = w.jobs
    assert len(r.computes) == 3 * len(job.computes)
    assert sum(t.bytes for t in r.transfers if t.src == "worker1") == pytest.approx(2 * 2 / 3 * push)
    w = load_workload(shards)
    assert w.cluster.names == ["s", "s1", "s2", "worker", "worker1"]
    (s,) = w.jobs
    assert sum(t.bytes for t in s.transfers) == pytest.approx(2 * sum(t.bytes for t in job.transfers))


def test_shape_options_that_cannot_be_built_exit_2_in_one_line(tmp_path, capsys):
    for argv, msg in [(["gen-workload", "--load", "0.5", "--n-jobs", "3", "--shape", "allreduce"],
                       "a ring needs at least 2 workers"),
                      (["gen-workload", "--load", "0.5", "--n-jobs", "3", "--hosts", "4", "--shape",
                        "ps-sharded", "--workers", "3"], "need at least 5 hosts"),
                      (["import-tf", str(WORKLOADS / "lenet.graph.json.gz"), "--servers", "2"],
                       "only ps-sharded jobs have more than one server")]:
        assert main([*argv, "-o", str(tmp_path / "x.json")]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.json").exists()


def error_line(capsys) -> str:
    """The one line a refused command wrote on stderr."""
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("cmd, shape", [("gen-workload", "allreduce"), ("gen-workload", "mixed"),
                                        ("import-tf", "allreduce")])
def test_a_ring_with_the_default_one_worker_names_the_workers_flag(tmp_path, capsys, cmd, shape):
    argv = (["gen-workload", "--load", "0.5", "--n-jobs", "3"] if cmd == "gen-workload"
            else ["import-tf", str(WORKLOADS / "lenet.graph.json.gz")])
    assert main([*argv, "--shape", shape, "-o", str(tmp_path / "x.json")]) == 2
    assert error_line(capsys) == (f"jitsched {cmd}: error: --workers: shape {shape}: a ring needs "
                                  "at least 2 workers, got 1; give --workers N with N >= 2")


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers: expected an integer >= 1, got 0"),
    (["--servers", "2"], "--servers: only ps-sharded jobs have more than one server (shape ps)"),
    (["--shape", "mixed", "--workers", "3", "--servers", "1"],
     "--servers: shape mixed: a sharded job needs at least 2 servers, got 1"),
])
def test_shape_errors_name_the_flag(tmp_path, capsys, flags, message):
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "3", *flags,
                 "-o", str(tmp_path / "x.json")]) == 2
    assert error_line(capsys) == f"jitsched gen-workload: error: {message}"


def test_gen_workload_refuses_an_infinite_window(tmp_path, capsys):
    # --hosts 1: a generator that let inf through stops at the host count, not at memory's end
    for value in ("inf", "nan"):
        assert main(["gen-workload", "--load", "0.5", "--duration-s", value, "--hosts", "1",
                     "-o", str(tmp_path / "x.json")]) == 2
        assert error_line(capsys) == ("jitsched gen-workload: error: duration_s must be a finite "
                                      f"number >= 0, got {value}")
    assert main(["gen-workload", "--load=inf", "--n-jobs", "3", "-o", str(tmp_path / "x.json")]) == 2
    assert error_line(capsys) == "jitsched gen-workload: error: load must be finite, got inf"


def test_gen_workload_summary_reads_as_words(tmp_path, capsys):
    out = tmp_path / "w.json"
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "20", "--hosts", "10",
                 "--models", "lenet,alexnet", "--shape", "mixed", "--workers", "3", "--seed", "1",
                 "-o", str(out)]) == 0
    line = capsys.readouterr().out.strip()
    assert not set("{}'") & set(line), line
    w = load_workload(out)
    by_model = {m: sum(j.model == m for j in w.jobs) for m in ("lenet", "alexnet")}
    by_shape = {sh: sum(shape_of(j.id) == sh for j in w.jobs) for sh in ("ps", "ps-sharded", "allreduce")}
    assert line.startswith(
        f"{out}: {len(w.jobs)} DL jobs (lenet {by_model['lenet']}, alexnet {by_model['alexnet']}; "
        f"shapes ps {by_shape['ps']}, ps-sharded {by_shape['ps-sharded']}, "
        f"allreduce {by_shape['allreduce']}), {len(w.background)} file transfers; ")
    # one-worker jobs: no shape counts
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "6", "--hosts", "4", "--models", "lenet",
                 "--background-share", "0", "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"{out}: 6 DL jobs (lenet 6), 0 file transfers; ")


def test_import_tf_refuses_step_stats_that_are_not_step_stats(tmp_path, capsys):
    graph = WORKLOADS / "lenet.graph.json.gz"
    wl = tmp_path / "w.json"
    assert main(["gen-workload", "--load", "0.5", "--n-jobs", "2", "--hosts", "4", "-o", str(wl)]) == 0
    capsys.readouterr()
    for stats in (wl, graph):
        assert main(["import-tf", str(graph), "--step-stats", str(stats),
                     "-o", str(tmp_path / "x.json")]) == 2
        assert error_line(capsys) == (f"jitsched import-tf: error: {stats}: not RunMetadata or "
                                      "StepStats (no step_stats or dev_stats field)")
    assert not (tmp_path / "x.json").exists()


def test_import_tf_refuses_a_corrupt_gzipped_graph(tmp_path, capsys):
    raw = bytearray((WORKLOADS / "lenet.graph.json.gz").read_bytes())
    for i in (len(raw) // 2, len(raw) // 2 + 1):
        raw[i] ^= 0xFF
    g = tmp_path / "g.json.gz"
    g.write_bytes(bytes(raw))
    assert main(["import-tf", str(g), "-o", str(tmp_path / "x.json")]) == 2
    assert error_line(capsys).startswith(f"jitsched import-tf: error: {g}: not a valid gzip file (")


@pytest.mark.parametrize("cmd", [
    ["gen-workload", "--load", "0.5", "--n-jobs", "2", "--hosts", "4"],
    ["import-coflow", str(synthetic_trace_path())],
    ["import-tf", "{graph}"],
])
def test_a_capacity_no_workload_file_holds_is_refused_before_writing(tmp_path, capsys, cmd):
    graph = tmp_path / "g.pbtxt"
    graph.write_text(SMALL_PBTXT)
    out = tmp_path / "w.json"
    argv = [a.replace("{graph}", str(graph)) for a in cmd]
    with pytest.raises(SystemExit) as exc:  # argparse's refusal
        main([*argv, "--bps", "0.5", "-o", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "argument --bps: a host's capacity is at least 1 bit/s, got 0.5" in err[0], err
    assert not out.exists()
    # the least capacity the files take is written, and read back
    assert main([*argv, "--bps", "1", "-o", str(out)]) == 0
    assert {h.egress_bps for h in load_workload(out).cluster.hosts} == {1.0}
