"""Shared fixtures: the network-namespace gate of the testbed and tc tests, and the ``alone`` mark."""

from __future__ import annotations

import os

import pytest

from jitsched import netns as netns_mod


@pytest.fixture
def netns_available() -> None:
    """Fail (never skip) when namespaces are unavailable, unless JITSCHED_NO_NETNS=1 asks to skip."""
    if os.environ.get("JITSCHED_NO_NETNS") == "1":
        pytest.skip("JITSCHED_NO_NETNS=1: network-namespace tests disabled by the user")
    try:
        netns_mod.require_netns()
    except netns_mod.NetnsUnavailable as exc:
        pytest.fail(f"network namespaces unavailable: {exc} (set JITSCHED_NO_NETNS=1 to skip)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``alone`` every test that drives kernel networking (it asks for ``netns_available``).

    Those tests name namespaces, bridges and qdiscs of their own and measure real TCP rates;
    scripts/test.sh runs the ``alone`` tests one at a time, after the rest ran on workers.
    """
    for item in items:
        if "netns_available" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.alone)
