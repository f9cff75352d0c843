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
