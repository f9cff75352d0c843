"""Tests of the daemon-side commands of the CLI (``jitsched agent`` options)."""

from __future__ import annotations

import pytest

from jitsched.cli import main


@pytest.mark.parametrize("value", ["5", "999", "200000"])
def test_agent_refuses_an_rto_cap_outside_the_kernels_range(value, tmp_path):
    with pytest.raises(SystemExit, match=r"jitsched agent: rto_max_ms must be in 1000\.\.120000"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
              "--local-dir", str(tmp_path), "--rto-max-ms", value])


@pytest.mark.parametrize("value", ["0.5", "250"])
def test_agent_refuses_an_rto_floor_outside_1_to_200_ms(value, tmp_path):
    with pytest.raises(SystemExit, match=r"jitsched agent: rto_min_ms must be in 1\.\.200"):
        main(["agent", "--host", "h0", "--daemon", "tcp://127.0.0.1:1", "--backend", "record",
              "--local-dir", str(tmp_path), "--rto-min-ms", value])
