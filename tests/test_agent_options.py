"""Tests of the agent's options (``jitsched agent``'s flags)."""

from __future__ import annotations

import argparse

import pytest

from jitsched.agents.options import AgentOptions
from jitsched.errors import ValidationError
from jitsched.optspec import add_options, options_from_args


def parse(*argv: str) -> AgentOptions:
    return options_from_args(add_options(argparse.ArgumentParser(), AgentOptions).parse_args(argv), AgentOptions)


def test_defaults_leave_the_agents_own_defaults_in_place():
    assert parse() == AgentOptions()
    assert AgentOptions().agent_kwargs() == {"backend": "pacing", "backend_options": {}}


def test_ingress_gets_the_device_and_the_links_idle_rate():
    o = parse("--backend", "tc", "--dev", "eth1", "--ingress", "--link-mbit", "100", "--rto-max-ms", "2000",
              "--rto-min-ms", "0")
    assert o.agent_kwargs() == {"backend": "tc", "backend_options": {"dev": "eth1"},
                                "ingress": {"dev": "eth1", "idle_rate_Bps": 12.5e6},
                                "rto_max_ms": 2000, "rto_min_ms": 0.0}
    assert AgentOptions(backend="tc", dev="eth1", ingress=True).agent_kwargs()["ingress"] == {"dev": "eth1"}


@pytest.mark.parametrize("kw, message", [
    ({"backend": "carrier-pigeon"}, "backend: expected one of pacing, tc, record"),
    ({"ingress": True}, "ingress: needs backend tc and a dev"),
    ({"backend": "tc", "ingress": True}, "ingress: needs backend tc and a dev"),
    ({"backend": "tc", "dev": "eth0", "link_mbit": 100.0}, "link_mbit: must be a positive rate, with ingress"),
    ({"backend": "tc", "dev": "eth0", "ingress": True, "link_mbit": -1.0}, "link_mbit: must be a positive"),
    ({"rto_max_ms": 1.5}, "rto_max_ms: expected an int or None"),
    ({"ingress": 1}, "ingress: expected a bool"),
])
def test_bad_options_are_refused_naming_the_field(kw, message):
    with pytest.raises(ValidationError, match=message):
        AgentOptions(**kw)
