"""Tests of the agent's options (``jitsched agent``'s flags)."""

from __future__ import annotations

import argparse
import math

import pytest

from jitsched.agents.backends.base import BACKGROUND_FLOOR, FLOW_FLOOR, FLOW_FLOORS_SUM
from jitsched.agents.options import RTO_MAX_MS, RTO_MIN_MS, AgentOptions
from jitsched.errors import ValidationError
from jitsched.optspec import add_options, options_from_args


def parse(*argv: str) -> AgentOptions:
    return options_from_args(add_options(argparse.ArgumentParser(), AgentOptions).parse_args(argv), AgentOptions)


def test_the_flags_defaults_are_the_agents():
    assert parse() == AgentOptions()
    o = AgentOptions()
    assert (o.backend, o.rto_max_ms, o.rto_min_ms, o.leave_on_exit) == ("pacing", RTO_MAX_MS, RTO_MIN_MS, False)
    assert o.backend_options() == {} and o.ingress_options() is None
    assert parse("--leave-on-exit").leave_on_exit
    # Python-only settings are no flags
    with pytest.raises(SystemExit):
        parse("--reconnect-s", "1")


def test_the_tc_backend_orders_the_ingress_too_by_default():
    # the configuration the testbed measures jit with: plans as floors, ingress
    # ordered on an IFB at 98 % of the host's ingress rate
    tc = {"dev": "eth1", "borrow": True, "background_floor": BACKGROUND_FLOOR, "flow_floor": FLOW_FLOOR,
          "flow_floors_sum": FLOW_FLOORS_SUM}
    o = parse("--backend", "tc", "--dev", "eth1")
    assert o.backend_options() == tc
    assert o.ingress_options() == tc | {"share": 0.98}
    o = parse("--backend", "tc", "--dev", "eth1", "--ingress-share", "0.95", "--rto-max-ms", "2000",
              "--rto-min-ms", "0")
    assert o.ingress_options() == tc | {"share": 0.95}
    assert (o.rto_max_ms, o.rto_min_ms) == (2000, 0.0)
    off = parse("--backend", "tc", "--dev", "eth1", "--no-ingress")
    assert not off.enforce_ingress and off.ingress_options() is None
    # the tc backend's own device default (eth0) serves both directions
    assert AgentOptions(backend="tc").ingress_options() == {
        "borrow": True, "background_floor": BACKGROUND_FLOOR, "flow_floor": FLOW_FLOOR,
        "flow_floors_sum": FLOW_FLOORS_SUM, "share": 0.98}
    assert not AgentOptions(backend="record").enforce_ingress


@pytest.mark.parametrize("kw, message", [
    ({"backend": "carrier-pigeon"}, "backend: expected one of pacing, tc, record"),
    ({"ingress": True}, "ingress: needs backend tc"),
    ({"backend": "record", "ingress": True}, "ingress: needs backend tc"),
    ({"backend": "tc", "ingress_share": 0.0}, r"ingress_share: must be within \(0, 1\]"),
    ({"backend": "tc", "ingress_share": 1.01}, "ingress_share: must be within"),
    ({"backend": "tc", "ingress_share": math.nan}, "ingress_share: must be within"),
    ({"rto_max_ms": 1.5}, "rto_max_ms: expected an int or None"),
    ({"ingress": 1}, "ingress: expected a bool"),
    ({"rto_max_ms": 999}, r"rto_max_ms: must be in 1000\.\.120000"),
    ({"rto_max_ms": 120_001}, r"rto_max_ms: must be in 1000\.\.120000"),
    ({"rto_min_ms": 0.5}, r"rto_min_ms: must be in 1\.\.200"),
    ({"rto_min_ms": 201.0}, r"rto_min_ms: must be in 1\.\.200"),
    ({"reconnect_s": 0.0}, r"reconnect_s: must be within \(0, inf\)"),
    ({"leave_on_exit": "yes"}, "leave_on_exit: expected a bool"),
    ({"backend": "tc", "background_floor": 1.0}, r"background_floor: must be within \[0, 1\), got 1.0"),
    ({"backend": "tc", "background_floor": -0.1}, r"background_floor: must be within \[0, 1\)"),
    ({"backend": "tc", "background_floor": math.nan}, "background_floor: must be within"),
    ({"backend": "tc", "flow_floor": 1.0}, r"flow_floor: must be within \[0, 1\), got 1.0"),
    ({"backend": "tc", "flow_floor": -0.001}, r"flow_floor: must be within \[0, 1\)"),
    ({"flow_floor": math.nan}, "flow_floor: must be within"),
    ({"flow_floor": True}, "flow_floor: "),
    ({"backend": "tc", "flow_floors_sum": 1.0}, r"flow_floors_sum: must be within \[0, 1\), got 1.0"),
    ({"backend": "tc", "dl_dscp": "64"}, "dl_dscp: expected DSCP values 0-63 separated by commas, got '64'"),
    ({"backend": "tc", "dl_dscp": "af41"}, "dl_dscp: expected DSCP values 0-63"),
    ({"backend": "tc", "dl_dscp": ","}, "dl_dscp: expected DSCP values 0-63"),
])
def test_bad_options_are_refused_naming_the_field(kw, message):
    with pytest.raises(ValidationError, match=message):
        AgentOptions(**kw)


def test_the_background_floor_reaches_both_tc_backends():
    o = parse("--backend", "tc", "--background-floor", "0.25")
    assert o.backend_options()["background_floor"] == o.ingress_options()["background_floor"] == 0.25
    assert parse("--backend", "tc", "--background-floor", "0").backend_options()["background_floor"] == 0.0
    # the other backends have no background class to guarantee
    assert "background_floor" not in parse("--background-floor", "0.3").backend_options()


def test_the_dl_marks_reach_both_tc_backends_as_tos_bytes():
    o = parse("--backend", "tc", "--dl-dscp", "34, 46")  # AF41 and EF
    assert o.backend_options()["dl_tos"] == o.ingress_options()["dl_tos"] == (0x88, 0xB8)
    assert "dl_tos" not in parse("--backend", "tc").backend_options()  # default: no DL class
    assert "dl_tos" not in parse("--dl-dscp", "34").backend_options()  # pacing has no classes


def test_the_flow_floor_reaches_both_tc_backends():
    o = parse("--backend", "tc", "--flow-floor", "0.004")
    assert o.backend_options()["flow_floor"] == o.ingress_options()["flow_floor"] == 0.004
    assert parse("--backend", "tc", "--flow-floor", "0").backend_options()["flow_floor"] == 0.0
    o = parse("--backend", "tc", "--flow-floors-sum", "0")
    assert o.backend_options()["flow_floors_sum"] == o.ingress_options()["flow_floors_sum"] == 0.0
    # pacing floors its flows itself
    assert "flow_floor" not in parse("--flow-floor", "0.01").backend_options()
