"""Tests of jitsched.dag.model: validation errors one by one, round trips, CSR arrays."""

from __future__ import annotations

import copy
import gzip
import json
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitsched.dag.model as model
from jitsched.dag.model import (
    BEST_EFFORT,
    COMPUTE,
    CRITICAL,
    NORMAL,
    TRANSFER,
    compile_jobs,
    critical_path_s,
    load_workload,
    parse_workload,
    read_input_bytes,
    read_json,
    save_workload,
)
from jitsched.errors import ValidationError
from tests.dags import job, workload

GOOD = {
    "cluster": {"hosts": [{"name": "h0", "egress_bps": 1e9, "ingress_bps": 1e9},
                          {"name": "h1", "egress_bps": 1e9, "ingress_bps": 1e9}]},
    "jobs": [{"id": "j0", "arrival_s": 0.5, "priority": 1,
              "computes": [{"id": "c1", "host": "h1", "duration_s": 0.01}],
              "transfers": [{"id": "t1", "src": "h0", "dst": "h1", "bytes": 1000}],
              "edges": [["t1", "c1"]]}],
    "background": [{"id": "f0", "src": "h1", "dst": "h0", "bytes": 5e6, "arrival_s": 1.0}],
}


def mutated(fn):
    obj = copy.deepcopy(GOOD)
    fn(obj)
    return obj


def test_good_workload_parses():
    w = parse_workload(GOOD)
    assert [h.name for h in w.cluster.hosts] == ["h0", "h1"]
    assert w.cluster.egress_Bps.tolist() == [1.25e8, 1.25e8]
    j = w.jobs[0]
    assert (j.id, j.arrival_s, j.priority) == ("j0", 0.5, 1.0)
    assert j.transfers[0].bytes == 1000.0 and j.edges == (("t1", "c1"),)
    assert w.background[0].bytes == 5e6


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o["jobs"][0]["transfers"][0].update(bytes=0), r"jobs\[0\].transfers\[0\].bytes: size must be positive"),
    (lambda o: o["jobs"][0]["transfers"][0].update(bytes=-5), r"size must be positive.*'t1'"),
    (lambda o: o["cluster"]["hosts"][0].update(egress_bps=0), r"cluster.hosts\[0\].egress_bps: capacity must be at least 1 bit/s"),
    (lambda o: o["cluster"]["hosts"][0].update(egress_bps=5e-324), r"cluster.hosts\[0\].egress_bps: capacity must be at least"),
    (lambda o: o["cluster"]["hosts"][1].update(ingress_bps=-1), r"hosts\[1\].ingress_bps"),
    (lambda o: o["jobs"][0]["computes"][0].update(duration_s=-0.1), r"computes\[0\].duration_s: negative duration.*'c1'"),
    (lambda o: o["jobs"][0]["computes"][0].update(host="h9"), r"computes\[0\].host: unknown host 'h9'"),
    (lambda o: o["jobs"][0]["transfers"][0].update(dst="nowhere"), r"transfers\[0\].dst: unknown host 'nowhere'"),
    (lambda o: o["jobs"][0]["transfers"][0].update(dst="h0"), r"src and dst are the same host"),
    (lambda o: o["jobs"][0]["edges"].append(["t1", "zz"]), r"edges\[1\]: edge to unknown node 'zz'"),
    (lambda o: o["jobs"][0]["edges"].append(["c1", "t1"]), r"cycle through node '(c1|t1)'"),
    (lambda o: o["jobs"][0]["edges"].append(["c1", "c1"]), r"self-loop on node 'c1'"),
    (lambda o: o["jobs"][0]["computes"].append({"id": "t1", "host": "h0", "duration_s": 1}), r"duplicate node id 't1'"),
    (lambda o: o["jobs"].append(copy.deepcopy(o["jobs"][0])), r"jobs\[1\].id: duplicate job id 'j0'"),
    (lambda o: o["background"][0].update(id="j0"), r"background\[0\].id: duplicate id 'j0'"),
    (lambda o: o["cluster"]["hosts"].append(dict(o["cluster"]["hosts"][0])), r"duplicate host name 'h0'"),
    (lambda o: o["jobs"][0]["transfers"][0].update(color="red"), r"jobs\[0\].transfers\[0\].color: unknown field"),
    (lambda o: o.update(extra=1), r"\$.extra: unknown field"),
    (lambda o: o["jobs"][0].update(bogus=[]), r"jobs\[0\].bogus: unknown field"),
    (lambda o: o["jobs"][0]["transfers"][0].update(bytes="10"), r"bytes: expected a number, got str"),
    (lambda o: o["jobs"][0]["transfers"][0].update(bytes=True), r"bytes: expected a number, got bool"),
    (lambda o: o["jobs"][0]["computes"][0].update(duration_s=float("nan")), r"duration_s: must be finite"),
    (lambda o: o["jobs"][0].update(id=7), r"jobs\[0\].id: expected str, got int"),
    (lambda o: o["jobs"][0].update(edges=[["t1"]]), r"edges\[0\]: expected a pair"),
    (lambda o: o["jobs"][0].update(computes={}), r"computes: expected list, got dict"),
    (lambda o: o["jobs"][0]["transfers"][0].pop("src"), r"transfers\[0\].src: missing required field"),
    (lambda o: o.pop("cluster"), r"\$.cluster: missing required field"),
    (lambda o: o["cluster"].update(hosts=[]), r"cluster.hosts: the cluster has no hosts"),
    (lambda o: o["jobs"][0].update(arrival_s=-1), r"arrival_s: must be >= 0"),
    (lambda o: o["background"][0].update(bytes=0), r"background\[0\].bytes: size must be positive"),
    (lambda o: o["background"][0].update(src="hx"), r"background\[0\].src: unknown host 'hx'"),
    (lambda o: o["jobs"][0].update(computes=[], transfers=[], edges=[]), r"the job has no nodes"),
    (lambda o: o["jobs"][0].update({"class": "urgent"}),
     r"^jobs\[0\].class: expected one of critical, normal, best-effort, got 'urgent'$"),
    (lambda o: o["jobs"][0].update({"class": 0}), r"^jobs\[0\].class: expected str, got int$"),
])
def test_validation_errors_name_the_problem(mutate, message):
    with pytest.raises(ValidationError, match=message):
        parse_workload(mutated(mutate))


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o["jobs"][0]["transfers"][0].update(src="hx"), r"^jobs\[0\].transfers\[0\].src: unknown host 'hx' \(node 't1'\)$"),
    (lambda o: o["jobs"][0]["edges"].append(["zz", "c1"]), r"^jobs\[0\].edges\[1\]: edge to unknown node 'zz'$"),
    (lambda o: o["jobs"][0]["edges"].append(["t1", 3]), r"^jobs\[0\].edges\[1\]: expected a pair of node ids"),
    (lambda o: o["jobs"][0]["computes"][0].update(id=""), r"^jobs\[0\].computes\[0\].id: must not be empty$"),
    (lambda o: o["jobs"][0]["computes"][0].update(std_s=-1), r"^jobs\[0\].computes\[0\].std_s: negative std -1.0"),
    (lambda o: o["jobs"][0]["transfers"].append({"id": "c1", "src": "h0", "dst": "h1", "bytes": 1}),
     r"^jobs\[0\].transfers\[1\].id: duplicate node id 'c1'$"),
])
def test_node_errors_name_their_field_path_exactly(mutate, message):
    with pytest.raises(ValidationError, match=message):
        parse_workload(mutated(mutate))


def test_a_map_of_subclassed_values_parses_as_the_plain_one():
    # numpy numbers, tuples for pairs and str subclasses take the full check, with the same result
    class Name(str):
        pass

    odd = mutated(lambda o: o["jobs"][0].update(
        computes=[{"id": Name("c1"), "host": "h1", "duration_s": np.float64(0.01)}],
        transfers=[{"id": "t1", "src": Name("h0"), "dst": "h1", "bytes": np.float64(1000)}],
        edges=[("t1", Name("c1")), ["t1", "c1"]]))
    assert parse_workload(odd) == parse_workload(GOOD)


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from(["", "h0", "x"]), st.lists(st.integers(), max_size=2),
                   st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "host", "src", "dst", "bytes", "duration_s", "std_s", "extra"]),
                       VALUES, max_size=6))
def test_the_fast_node_check_passes_exactly_what_the_full_check_passes(obj):
    # on maps of builtin types the check without messages and the one with them agree
    for spec, required in ((model._COMPUTE_FIELDS, model._COMPUTE_REQUIRED),
                           (model._TRANSFER_FIELDS, model._TRANSFER_REQUIRED)):
        try:
            model._check_map(obj, "x", spec, required)
            full = True
        except ValidationError:
            full = False
        assert model._plain(obj, spec, required) == full, (obj, spec)


def test_cycle_names_a_node_on_the_cycle_not_behind_it():
    # a -> b -> c -> b ; d hangs behind the cycle: the message must name b or c
    jobs = [job("j", computes=[("a", "h0", 1), ("b", "h0", 1), ("c", "h0", 1), ("d", "h0", 1)],
                edges=[("a", "b"), ("b", "c"), ("c", "b"), ("c", "d")])]
    with pytest.raises(ValidationError, match=r"cycle through node '(b|c)'"):
        workload(jobs)


def test_round_trip_json_and_gzip(tmp_path):
    w = parse_workload(GOOD)
    for name in ("w.json", "w.json.gz"):
        p = tmp_path / name
        save_workload(w, p)
        assert load_workload(p) == w


def test_class_absent_is_normal_and_written_back_only_when_not_normal():
    w = parse_workload(GOOD)
    assert w.jobs[0].job_class == "normal"
    assert "class" not in w.to_dict()["jobs"][0]
    assert w.to_dict()["jobs"] == GOOD["jobs"]
    obj = mutated(lambda o: o["jobs"].extend([
        copy.deepcopy(o["jobs"][0]) | {"id": "j1", "class": "critical"},
        copy.deepcopy(o["jobs"][0]) | {"id": "j2", "class": "best-effort"},
        copy.deepcopy(o["jobs"][0]) | {"id": "j3", "class": "normal"}]))
    w = parse_workload(obj)
    assert [j.job_class for j in w.jobs] == ["normal", "critical", "best-effort", "normal"]
    out = w.to_dict()["jobs"]
    assert [j.get("class") for j in out] == [None, "critical", "best-effort", None]
    assert parse_workload(w.to_dict()) == w
    dag = compile_jobs(w.jobs, w.cluster)
    assert dag.job_class.dtype == np.int8
    assert dag.job_class.tolist() == [NORMAL, CRITICAL, BEST_EFFORT, NORMAL]


def test_load_reports_bad_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text("{not json")
    with pytest.raises(ValidationError, match="not valid JSON"):
        load_workload(p)
    with pytest.raises(ValidationError, match="no such file"):
        load_workload(tmp_path / "missing.json")


def corrupt_gzips(tmp_path, data: bytes) -> list:
    """Gzip files of ``data`` broken four ways: truncated, deflate data or CRC bytes flipped, not gzip."""
    gz = gzip.compress(data, mtime=0)
    out = []
    for name, flips, raw in (("trunc", (), gz[: len(gz) // 2]), ("flip", (len(gz) // 2,), gz),
                             ("crc", (len(gz) - 8,), gz), ("plain", (), data)):
        raw = bytearray(raw)
        for i in flips:
            raw[i] ^= 0xFF
            raw[i + 1] ^= 0xFF
        out.append(tmp_path / f"{name}.json.gz")
        out[-1].write_bytes(bytes(raw))
    return out


def test_load_refuses_a_truncated_or_corrupt_gzip_in_words(tmp_path):
    # digits compress poorly: the flipped bytes land inside a Huffman-coded block
    # (zlib.error), not in a run the CRC alone would catch
    data = json.dumps(mutated(lambda o: o["jobs"][0].update(
        {"model": " ".join(str(i * i) for i in range(5000))}))).encode()
    for p in corrupt_gzips(tmp_path, data):
        with pytest.raises(ValidationError, match=rf"^{re.escape(str(p))}: not a valid gzip file \(.+\)$"):
            load_workload(p)
        # the reader the TensorFlow importer shares
        with pytest.raises(ValidationError, match="not a valid gzip file"):
            read_input_bytes(p)


def test_load_says_a_directory_is_one(tmp_path):
    with pytest.raises(ValidationError, match=r"cannot read \(Is a directory\)$") as err:
        load_workload(tmp_path)
    assert "JSON" not in str(err.value)


def test_read_json_refuses_nesting_too_deep_to_decode(tmp_path):
    p = tmp_path / "deep.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValidationError, match="not valid JSON \\(nested too deeply\\)"):
        read_json(p)


def test_repeated_edges_are_one_dependency():
    w = workload([job("j", computes=[("c", "h1", 1)], transfers=[("t", "h0", "h1", 10)],
                      edges=[("t", "c"), ("t", "c")])])
    assert w.jobs[0].edges == (("t", "c"),)


def test_compile_jobs_csr_and_topological_order():
    w = workload([
        job("a", computes=[("c1", "h1", 1), ("c2", "h1", 2)],
            transfers=[("t1", "h0", "h1", 10), ("t2", "h1", "h0", 20)],
            edges=[("t1", "c1"), ("c1", "c2"), ("c2", "t2")]),
        job("b", computes=[("x", "h2", 1)], transfers=[("y", "h3", "h2", 5)], edges=[("y", "x")]),
    ])
    d = compile_jobs(w.jobs, w.cluster)
    assert d.n_nodes == 6 and d.n_jobs == 2
    assert d.job_ptr.tolist() == [0, 4, 6]
    assert d.kind.tolist() == [COMPUTE, COMPUTE, TRANSFER, TRANSFER, COMPUTE, TRANSFER]
    assert d.src.tolist() == [-1, -1, 0, 1, -1, 3] and d.host.tolist()[:2] == [1, 1]
    pos = {v: k for k, v in enumerate(d.topo.tolist())}
    for v in range(d.n_nodes):
        for w_ in d.succ_idx[d.succ_ptr[v]:d.succ_ptr[v + 1]]:
            assert pos[v] < pos[int(w_)]
            assert v in d.pred_idx[d.pred_ptr[w_]:d.pred_ptr[w_ + 1]]
    # job-contiguous order
    assert d.job_of[d.topo].tolist() == sorted(d.job_of[d.topo].tolist())
    assert d.node("b", "y") == 5
    assert np.array_equal(d.arrival, [0.0, 0.0])


def test_native_format_is_json_serialisable():
    w = parse_workload(GOOD)
    assert parse_workload(json.loads(json.dumps(w.to_dict()))) == w


def test_kernel_constants_agree_with_python():
    """src_cython/_common.pxd and the Python constants name the same node kinds and states."""
    from jitsched.errors import load_kernel
    from jitsched.policies.base import DONE, RUNNING, WAITING

    assert load_kernel("_lat").COMMON_CONSTANTS == {
        "COMPUTE": COMPUTE, "TRANSFER": TRANSFER, "WAITING": WAITING, "RUNNING": RUNNING, "DONE": DONE}


def test_critical_path_by_hand():
    # a(1) -> b(2) -> d(1), a -> c(5) -> d; e(0.5) alone: a, c, d = 7
    took = {"a": 1.0, "b": 2.0, "c": 5.0, "d": 1.0, "e": 0.5}
    edges = [("a", "b"), ("b", "d"), ("a", "c"), ("c", "d")]
    assert critical_path_s(took, edges) == 7.0
    assert critical_path_s({"e": 0.5}, []) == 0.5
    assert critical_path_s({}, []) == 0.0


@pytest.mark.parametrize("field", ["arrival_s", "priority", "transfers.bytes", "computes.duration_s",
                                   "cluster.egress_bps", "background.bytes"])
def test_an_integer_beyond_any_float_is_refused_in_words(field):
    big = 10 ** 400  # json.loads gives an int; as a float it overflows
    def put(o):
        where, _, key = field.rpartition(".")
        target = {"": o["jobs"][0], "transfers": o["jobs"][0]["transfers"][0],
                  "computes": o["jobs"][0]["computes"][0], "cluster": o["cluster"]["hosts"][0],
                  "background": o["background"][0]}[where]
        target[key] = big
    with pytest.raises(ValidationError, match=rf"\.{field.rpartition('.')[2]}: must be finite, "
                                              r"got an integer of 401 digits$"):
        parse_workload(mutated(put))


def test_read_json_refuses_an_integer_of_too_many_digits(tmp_path):
    p = tmp_path / "digits.json"
    p.write_text('{"cluster": {"hosts": []}, "n": ' + "9" * 5000 + "}")
    with pytest.raises(ValidationError, match=r"digits\.json: not valid JSON \(.*4300 digits"):
        read_json(p)


def test_save_workload_gzip_is_the_same_bytes_every_time(tmp_path, monkeypatch):
    import time

    w = parse_workload(GOOD)
    p = tmp_path / "w.json.gz"
    save_workload(w, p)
    first = p.read_bytes()
    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.0)  # a later clock
    save_workload(w, p)
    assert p.read_bytes() == first
    assert gzip.decompress(first) == json.dumps(w.to_dict()).encode()


def test_save_workload_that_fails_leaves_the_old_file_and_no_other(tmp_path, monkeypatch):
    w = parse_workload(GOOD)
    p = tmp_path / "w.json"
    p.write_text("old")
    p.chmod(0o640)

    def full(*_a, **_k):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(model.json, "dump", full)
    with pytest.raises(ValidationError, match=r"w\.json: cannot write \(No space left on device\)$"):
        save_workload(w, p)
    assert p.read_text() == "old" and sorted(tmp_path.iterdir()) == [p]
    with pytest.raises(ValidationError, match="cannot write"):
        save_workload(w, tmp_path / "new.json")
    assert sorted(tmp_path.iterdir()) == [p]
    monkeypatch.undo()
    save_workload(w, p)
    assert load_workload(p) == w and (p.stat().st_mode & 0o777) == 0o640
    assert sorted(tmp_path.iterdir()) == [p]


def test_save_workload_writes_through_a_symlink_and_into_a_device(tmp_path):
    w = parse_workload(GOOD)
    real = tmp_path / "real.json"
    (tmp_path / "link.json").symlink_to("real.json")
    save_workload(w, tmp_path / "link.json")
    assert (tmp_path / "link.json").is_symlink() and load_workload(real) == w
    save_workload(w, "/dev/null")
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
