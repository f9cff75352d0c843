"""Tests of ``jitsched sim``'s coflow mode: which policies it takes comes from the registry."""

from __future__ import annotations

import json

import pytest

from jitsched.cli import main
from jitsched.plan.coflow import synthetic_trace_path
from jitsched.policies import POLICIES


def test_flow_only_policies_are_those_registered_without_dags():
    assert sorted(n for n, c in POLICIES.items() if not c.needs_dag) == ["fifo", "sincronia", "tensorflow", "varys"]


@pytest.mark.parametrize("policy", ["jit", "tictac"])
def test_coflow_mode_refuses_a_policy_that_needs_dags(policy, capsys):
    assert main(["sim", "--coflow-trace", str(synthetic_trace_path()), "--policy", policy]) == 2
    assert f"coflow mode supports fifo, sincronia, tensorflow, varys; got {policy!r}" in capsys.readouterr().err


def test_coflow_mode_runs_sincronia(capsys):
    assert main(["sim", "--coflow-trace", str(synthetic_trace_path()), "--policy", "sincronia", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["coflows"] > 0 and out["avg_cct_s"] > 0


def _small_workload(tmp_path):
    from jitsched.workloads.paper import generate_workload

    path = tmp_path / "wl.json"
    path.write_text(json.dumps(generate_workload(0.5, n_jobs=6, n_hosts=3, bps=1e10, seed=0).to_dict()))
    return path


def test_sim_reports_the_lower_bound_unless_told_not_to(tmp_path, capsys, monkeypatch):
    import jitsched.plan.bound

    path = _small_workload(tmp_path)
    assert main(["sim", str(path), "--policy", "jit", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["lower_bound_mean_jct_s"] <= out["mean_jct_s"] * (1 + 1e-9)

    def no_lp(wl):
        raise AssertionError("the bound was computed")

    monkeypatch.setattr(jitsched.plan.bound, "lower_bound_mean_jct", no_lp)
    assert main(["sim", str(path), "--policy", "jit", "--json", "--no-bound"]) == 0
    assert json.loads(capsys.readouterr().out)["lower_bound_mean_jct_s"] is None
    assert main(["sim", str(path), "--policy", "jit", "--no-bound"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert "mean JCT" in first and "lower bound" not in first


@pytest.mark.parametrize("tty", [True, False])
def test_sim_shows_progress_only_on_a_terminal(tmp_path, capsys, monkeypatch, tty):
    import jitsched.sim

    path = _small_workload(tmp_path)
    seen = []
    real = jitsched.sim.simulate

    def spy(*a, **k):
        seen.append(k.get("progress"))
        return real(*a, **k)

    monkeypatch.setattr(jitsched.sim, "simulate", spy)
    monkeypatch.setattr("sys.stderr.isatty", lambda: tty)
    assert main(["sim", str(path), "--policy", "jit", "--json"]) == 0
    assert seen == [tty]
    err = capsys.readouterr().err
    assert ("the lower bound on mean JCT (" in err) is tty


def test_sim_text_mode_reports_a_workload_of_background_flows_only(tmp_path, capsys):
    from jitsched.dag.model import Background, Cluster, Workload

    path = tmp_path / "bg.json"
    bgs = (Background("f", "h0", "h1", 2.5e8, 1.0), Background("g", "h1", "h0", 1.25e8, 2.0))
    path.write_text(json.dumps(Workload(Cluster.uniform(2), (), bgs).to_dict()))
    assert main(["sim", str(path)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "0 jobs, 2 background flows under tensorflow: mean JCT n/a (no DL jobs), makespan 3.000 s"
    assert main(["sim", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mean_jct_s"] is None and out["lower_bound_mean_jct_s"] is None and out["makespan_s"] == 3.0


@pytest.mark.parametrize("as_json", [False, True])
def test_coflow_mode_replays_a_trace_of_local_flows_only(tmp_path, capsys, as_json):
    trace = tmp_path / "local.txt"
    trace.write_text("4 1\n1 0 1 0 1 0:5\n")  # mapper 0 -> reducer 0: never on the network
    assert main(["sim", "--coflow-trace", str(trace), *(["--json"] if as_json else [])]) == 0
    out = capsys.readouterr().out
    if as_json:
        assert json.loads(out) == {"coflows": 0, "avg_cct_s": None, "p95_cct_s": None}
    else:
        assert out.startswith("0 coflows under tensorflow: no flow of the trace crosses the network")


def test_sim_refuses_an_arrival_too_late_to_time_in_one_line(tmp_path, capsys):
    from jitsched.dag.model import Cluster, Job, Transfer, Workload

    path = tmp_path / "late.json"
    jobs = (Job("a", (), (Transfer("t", "h0", "h1", 1e8),), (), 0.0, 0.0, "m"),
            Job("b", (), (Transfer("t", "h0", "h1", 1e8),), (), 1e15, 0.0, "m"))
    path.write_text(json.dumps(Workload(Cluster.uniform(2), jobs).to_dict()))
    assert main(["sim", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["jitsched sim: error: job 'b': arrival_s 1e+15 is after 2**32 s (about 136 years), "
                   "where float seconds are too coarse to time it to the microsecond"]


def _compute_bound_workload(tmp_path, std_s: float = 0.0):
    """Three jobs of two 1-s computes around a 1-MB transfer on two hosts: the computes decide the JCT."""
    from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload

    jobs = tuple(Job(f"j{k}", (Compute("c0", "h0", 1.0, std_s), Compute("c1", "h1", 1.0, std_s)),
                     (Transfer("t", "h0", "h1", 1e6),), (("c0", "t"), ("t", "c1")), 0.0) for k in range(3))
    path = tmp_path / "wl.json"
    path.write_text(json.dumps(Workload(Cluster.uniform(2, bps=1e9), jobs).to_dict()))
    return path


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("how", ["--compute-noise", "declared std"])
def test_sim_lower_bound_holds_for_the_compute_times_the_run_drew(tmp_path, capsys, seed, how):
    # with compute-time noise (--compute-noise, or a std declared per compute) the bound is
    # on the durations the run drew: no run of the workload is under it
    path = _compute_bound_workload(tmp_path, std_s=0.3 if how == "declared std" else 0.0)
    extra = ["--compute-noise", "0.3"] if how == "--compute-noise" else []
    assert main(["sim", str(path), "--policy", "jit", "--seed", str(seed), "--json", *extra]) == 0
    out = json.loads(capsys.readouterr().out)
    assert 0 < out["lower_bound_mean_jct_s"] <= out["mean_jct_s"] * (1 + 1e-9)
