"""Tests of the coflow-benchmark trace reader on the shipped synthetic trace and bad input."""

from __future__ import annotations

import pytest

from jitsched.dag.model import Cluster, parse_workload
from jitsched.errors import ValidationError
from jitsched.plan.coflow import (
    MB_BYTES,
    Flow,
    coflow_workload,
    read_coflow_trace,
    synthetic_trace_path,
)

MB = MB_BYTES


def test_synthetic_trace_flows():
    tr = read_coflow_trace(synthetic_trace_path())
    assert tr.n_ports == 8 and [c.id for c in tr.coflows] == ["1", "2", "3", "4", "5", "6"]
    by_id = {c.id: c for c in tr.coflows}
    assert [c.arrival_s for c in tr.coflows] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.5]
    assert by_id["1"].flows == (Flow(0, 1, 1.0 * MB),)
    assert by_id["2"].flows == (Flow(2, 4, 4.0 * MB), Flow(3, 4, 4.0 * MB))
    # reducer-major, each reducer's MB split evenly over the three mappers
    assert by_id["3"].flows == tuple(Flow(m, 5, 1.0 * MB) for m in (0, 1, 2)) + tuple(
        Flow(m, 6, 0.5 * MB) for m in (0, 1, 2))
    # mapper 3 -> reducer 3 stays on its port: dropped
    assert by_id["4"].flows == (Flow(4, 3, 1.0 * MB), Flow(3, 7, 2.0 * MB), Flow(4, 7, 2.0 * MB))
    assert by_id["5"].flows == () and by_id["5"].reducers == ((6, 10.0 * MB),)
    assert len(by_id["6"].flows) == 12
    assert by_id["6"].bytes == pytest.approx(18.5 * MB)
    assert (tr.local_flows, tr.local_bytes) == (2, 11.0 * MB)


def test_synthetic_trace_as_workload():
    w = coflow_workload(synthetic_trace_path())
    assert w.cluster.names == [f"p{i}" for i in range(8)]
    assert all(h.egress_bps == 1e9 and h.ingress_bps == 1e9 for h in w.cluster.hosts)
    assert [j.id for j in w.jobs] == ["coflow-1", "coflow-2", "coflow-3", "coflow-4", "coflow-6"]
    assert all(j.edges == () and j.computes == () for j in w.jobs)
    assert sum(len(j.transfers) for j in w.jobs) == 24
    c4 = w.job("coflow-4")
    assert [(t.id, t.src, t.dst, t.bytes) for t in c4.transfers] == [
        ("f0:4-3", "p4", "p3", 1.0 * MB), ("f1:3-7", "p3", "p7", 2.0 * MB),
        ("f2:4-7", "p4", "p7", 2.0 * MB)]
    assert w.job("coflow-6").arrival_s == 1.5
    # the native validator accepts it unchanged
    assert parse_workload(w.to_dict()) == w


def test_workload_on_a_given_cluster_and_capacity():
    tr = read_coflow_trace(synthetic_trace_path())
    w = coflow_workload(tr, bps=10e9, host_prefix="rack")
    assert w.cluster.names[0] == "rack0" and w.cluster.hosts[0].egress_bps == 10e9
    w2 = coflow_workload(tr, cluster=Cluster.uniform(10, 1e9, prefix="h"))
    assert w2.job("coflow-1").transfers[0].dst == "h1"
    with pytest.raises(ValidationError, match="3 hosts, the trace 8 ports"):
        coflow_workload(tr, cluster=Cluster.uniform(3))


def test_mb_unit_is_configurable():
    tr = read_coflow_trace(synthetic_trace_path(), mb_bytes=1e6)
    assert tr.coflows[0].flows[0].bytes == 1e6


@pytest.mark.parametrize("text, pattern", [
    ("", r"empty trace"),
    ("8\n", r":1: expected '<ports> <coflows>'"),
    ("8 2\n1 0 1 0 1 1:1.0\n", r"header says 2 coflows, found 1"),
    ("8 1\n1 0 1 9 1 1:1.0\n", r":2: mapper port '9' is not in 0..7"),
    ("8 1\n1 0 1 0 1 8:1.0\n", r":2: reducer port '8'"),
    ("8 1\n1 0 1 0 1 1:x\n", r":2: reducer entry '1:x'"),
    ("8 1\n1 0 1 0 1 1\n", r"is not 'port:MB'"),
    ("8 1\n1 0 1 0 2 1:1.0\n", r"declares 2 reducers but lists 1"),
    ("8 1\n1 -5 1 0 1 1:1.0\n", r"arrival time \(ms\) must be >= 0"),
    ("8 1\n1 0 0 1 1:1.0\n", r"has no mappers"),
    ("8 1\n1 0 3 0 1\n", r"declares 3 mappers but the line ends"),
    ("8 1\n1 0 1 0 1 1:-2\n", r"size must be >= 0"),
    ("8 2\n1 0 1 0 1 1:1.0\n1 5 1 0 1 1:1.0\n", r":3: duplicate coflow id '1'"),
    ("8 1\n1 0 1.5 0 1 1:1.0\n", r":2: mapper count '1.5' is not a whole number >= 0"),
    ("8 1\n1 0 1 0 1e0 1:1.0\n", r":2: reducer count '1e0' is not a whole number >= 0"),
    # one past the bound (10^8 would be refused as cheaply, before any host is built)
    ("100001 1\n1 0 1 0 1 1:1.0\n", r":1: the header declares 100001 ports, more than 100000"),
    # digits other than ASCII ones ("²".isdigit() is true; int("²") is an error)
    ("8 ²\n", r":1: expected '<ports> <coflows>', got '8 ²'"),
    ("8 1\n1 0 ² 0 1 1:1.0\n", r":2: mapper count '²' is not a whole number >= 0"),
    ("8 1\n1 0 1 ² 1 1:1.0\n", r":2: mapper port '²' is not in 0..7"),
    ("8 1\n1 0 1 0 1 ²:1.0\n", r":2: reducer port '²' is not in 0..7"),
])
def test_malformed_traces(tmp_path, text, pattern):
    p = tmp_path / "t.txt"
    p.write_text(text)
    with pytest.raises(ValidationError, match=pattern):
        read_coflow_trace(p)


def test_missing_file(tmp_path):
    with pytest.raises(ValidationError, match="no such file"):
        read_coflow_trace(tmp_path / "none.txt")


def test_the_public_trace_check_reads_the_format_and_finds_a_wrong_trace(tmp_path, capsys):
    # bench/tools/check_fb_trace.py checks the reader on the public FB2010 trace, which the
    # project does not ship; here on a trace of the same format that is not it
    from jitsched.bench.tools.check_fb_trace import main

    p = tmp_path / "t.txt"
    p.write_text("150 2\n1 0 1 22 1 65:1.0\n2 10833 2 104 132 1 140:48.0\n")
    assert main([str(p)]) == 1
    out, err = capsys.readouterr()
    assert "150 ports, 2 coflows, 3 network flows, 0 local" in out
    assert "2 coflows, not 150 and 526" in err
