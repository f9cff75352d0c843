"""Tests of the core CLI commands: lat and plan, JSON output and exit codes."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jitsched.cli import COMMAND_MODULE, COMMAND_MODULES, build_parser, main
from jitsched.cli.registry import COMMANDS, REGISTRY

EXAMPLE = Path(__file__).resolve().parents[1] / "jitsched" / "examples" / "vgg16-4jobs.json"


def test_lat_json(capsys, tmp_path):
    assert main(["lat", str(EXAMPLE), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"vgg16-0", "vgg16-1", "vgg16-2", "vgg16-3"}
    assert len(out["vgg16-0"]) == 32 and all(v > 0 for v in out["vgg16-0"].values())


def test_plan_json(capsys):
    assert main(["plan", str(EXAMPLE), "--slot-s", "0.1", "--alpha", "1.0",
                 "--objective", "minmax", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("status", "objective_value", "peak_utilization", "slot_s", "rates",
                "leftover_bytes_per_s", "late", "build_s", "solve_s"):
        assert key in out
    assert out["status"] == "optimal"
    assert sum(len(r) for r in out["rates"].values()) == 4 * 32
    r = out["rates"]["vgg16-0"]["read_w13"]
    assert isinstance(r["start_slot"], int) and all(x >= 0 for x in r["bytes_per_s"])


def test_plan_json_states_the_time_of_slot_0(capsys, tmp_path):
    # the slot grid starts at the earliest arrival (3.0 s), not at 0: job b, arriving
    # at 5.0 s, cannot be served before slot (5.0 - 3.0) / 0.5 = 4
    hosts = [{"name": n, "egress_bps": 8e9, "ingress_bps": 8e9} for n in ("h0", "h1")]
    jobs = [{"id": job, "arrival_s": arrival,
             "transfers": [{"id": "t", "src": "h0", "dst": "h1", "bytes": 1e8}],
             "computes": [{"id": "c", "host": "h1", "duration_s": 0.5}], "edges": [["t", "c"]]}
            for job, arrival in (("a", 3.0), ("b", 5.0))]
    p = tmp_path / "two.json"
    p.write_text(json.dumps({"cluster": {"hosts": hosts}, "jobs": jobs}))
    assert main(["plan", str(p), "--slot-s", "0.5", "--alpha", "1.0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["origin_s"] == 3.0
    assert out["rates"]["b"]["t"]["start_slot"] >= 4
    assert main(["plan", str(p), "--slot-s", "0.5"]) == 0
    assert "from t=3 s" in capsys.readouterr().out


def test_plan_iteration_limit_gives_a_fallback_plan_and_iterations(capsys):
    # the example is light enough for the lowest-peak plan, proven optimal without a solve
    assert main(["plan", str(EXAMPLE), "--alpha", "1.0", "--json"]) == 0
    proven = json.loads(capsys.readouterr().out)
    assert proven["status"] == "optimal" and proven["iterations"] == 0
    # a solve that must end optimal gets time enough on a loaded machine (the default 5 s
    # ran out at a load of 6-9 on two cores): only the iteration limit is under test
    assert main(["plan", str(EXAMPLE), "--alpha", "1.0", "--no-lowest-peak", "--time-limit-s", "120",
                 "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["status"] == "optimal" and full["iterations"] > 1
    assert full["objective_value"] == pytest.approx(proven["objective_value"], rel=1e-6)
    assert main(["plan", str(EXAMPLE), "--alpha", "1.0", "--no-lowest-peak", "--iteration-limit", "1",
                 "--time-limit-s", "120", "--json"]) == 0
    cut = json.loads(capsys.readouterr().out)
    assert cut["status"] == "fallback"
    assert sum(len(r) for r in cut["rates"].values()) == 4 * 32


def test_plan_human_output(capsys):
    assert main(["plan", str(EXAMPLE)]) == 0
    assert "transfers scheduled" in capsys.readouterr().out


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"),
    ('{"cluster": {"hosts": []}}', "no hosts"),
    ('{"cluster": {"hosts": [{"name": "a", "egress_bps": 1, "ingress_bps": 1}]}, "jobs": [{"id": "j", '
     '"computes": [{"id": "c", "host": "zz", "duration_s": 1}]}]}', "unknown host 'zz'"),
])
def test_bad_input_exits_2_with_one_line(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "jitsched", "plan", str(p), "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr


def test_bad_option_value_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "jitsched", "plan", str(EXAMPLE), "--alpha", "3"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "alpha" in proc.stderr and "Traceback" not in proc.stderr


def test_plan_json_stdout_is_only_json_in_a_fresh_process():
    # HiGHS prints a banner when a process builds its first solver object: it must not
    # land in the JSON a caller pipes into another program, nor as noise on stderr
    # (--no-lowest-peak: the LP is solved, not proven unneeded)
    proc = subprocess.run([sys.executable, "-m", "jitsched", "plan", str(EXAMPLE), "--json", "--no-lowest-peak"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "optimal"
    assert "HiGHS" not in proc.stderr, proc.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    # `jitsched lat FILE --json | head -c 1`: the pipe closes before the output is written
    read, write = os.pipe()
    os.close(read)
    proc = subprocess.run([sys.executable, "-m", "jitsched", "lat", str(EXAMPLE), "--json"],
                          stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(write)
    assert proc.returncode == 141
    assert proc.stderr == ""


def test_a_full_output_device_is_one_line_and_exit_1():
    # `jitsched lat FILE > /dev/full`: every write of the output fails with ENOSPC
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "jitsched", "lat", str(EXAMPLE)],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == "jitsched lat: error: cannot write the output (No space left on device)\n"


def one_error_line(capsys) -> str:
    """The one line a refused command wrote on stderr (and nothing on stdout)."""
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("cmd", ["lat", "plan", "sim"])
def test_a_truncated_or_corrupt_gzipped_workload_is_refused_in_one_line(tmp_path, capsys, cmd):
    gz = gzip.compress(EXAMPLE.read_bytes(), mtime=0)
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0xFF
    flipped[len(gz) // 2 + 1] ^= 0xFF
    for name, raw in (("trunc.json.gz", gz[: len(gz) // 2]), ("flip.json.gz", bytes(flipped))):
        p = tmp_path / name
        p.write_bytes(raw)
        assert main([cmd, str(p)]) == 2
        assert one_error_line(capsys).startswith(f"jitsched {cmd}: error: {p}: not a valid gzip file (")


def test_a_directory_for_a_workload_is_named_a_directory(tmp_path, capsys):
    assert main(["lat", str(tmp_path)]) == 2
    line = one_error_line(capsys)
    assert line == f"jitsched lat: error: {tmp_path}: cannot read (Is a directory)"


@pytest.mark.parametrize("argv, line", [
    (["sim", str(EXAMPLE), "--bogus"],
     "jitsched sim: error: unrecognized arguments: --bogus (see jitsched sim --help)"),
    (["plan", str(EXAMPLE), "--nope", "1"],
     "jitsched plan: error: unrecognized arguments: --nope 1 (see jitsched plan --help)"),
    (["--bogus"],
     "jitsched: error: unrecognized arguments: --bogus; a COMMAND comes first (see jitsched --help)"),
    ([], "jitsched: error: the following arguments are required: COMMAND (see jitsched --help)"),
])
def test_an_unknown_flag_points_to_the_help_of_its_command(capsys, argv, line):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert one_error_line(capsys) == line


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_each_command_module_registers_the_commands_it_lists():
    build_parser()
    assert {name: cmd.run.__module__ for name, cmd in REGISTRY.items()} == COMMAND_MODULE
    assert {name: cmd.help for name, cmd in REGISTRY.items()} == {n: h for n, (_, h) in COMMANDS.items()}
    # the full parser and the listing one name them alike, in the table's order
    full, listing = _subparsers(build_parser()), _subparsers(build_parser(listing=True))
    assert list(full.choices) == list(listing.choices) == list(COMMANDS)
    assert [n for names in COMMAND_MODULES.values() for n in names] == list(COMMANDS)
    assert [a.help for a in full._choices_actions] == [a.help for a in listing._choices_actions]


def test_the_parser_of_one_command_lists_the_others(capsys):
    # `jitsched --help lat` shows the whole list, though only lat's module is imported
    one = _subparsers(build_parser("cancel"))
    assert list(one.choices) == list(COMMANDS)
    assert one.choices["cancel"].get_default("_run") is REGISTRY["cancel"].run
    assert one.choices["lat"].get_default("_run") is None and len(one.choices["lat"]._actions) == 1  # -h
    with pytest.raises(SystemExit) as exit_:
        main(["--help", "cancel"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in COMMANDS), out


def test_a_command_its_table_does_not_give_to_its_module_is_refused():
    from jitsched.cli.registry import register

    with pytest.raises(RuntimeError, match="'nope' is not declared in COMMANDS"):
        register("nope")(lambda args: 0)
    assert "nope" not in REGISTRY


def test_the_command_list_imports_no_command_module():
    # `jitsched --help` in a fresh process lists every command from the table alone
    code = ("import sys; from jitsched.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit as e:\n    rc = e.code\n"
            "mods = [m for m in sys.modules if m.startswith('jitsched.cli.') and m != 'jitsched.cli.registry']\n"
            "print(rc, mods + [m for m in ('scipy', 'numpy') if m in sys.modules], file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stderr.splitlines() == ["0 []"], proc.stderr
    assert all(f"    {name}" in proc.stdout for name in COMMANDS), proc.stdout


def test_a_command_imports_only_its_own_module():
    # a client command in a fresh process: neither the planner, the daemon's server nor SciPy
    code = ("import sys; from jitsched.cli import main; rc = main(['cancel', 'j1', '--daemon', 'garbage']); "
            "heavy = ('scipy', 'jitsched.plan.planner', 'jitsched.daemon.server', 'jitsched.cli.sim'); "
            "print(rc, [m for m in heavy if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["2 []"], proc.stderr
    assert "--daemon 'garbage': not an endpoint" in proc.stderr
