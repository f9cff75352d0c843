"""Every bench entry point starts as ``python bench/NAME.py``, as ``python -m bench.NAME`` and as the installed ``jitsched.bench.NAME`` (``--help`` only: nothing measured)."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def _entry_points() -> list[str]:
    """The bench scripts (files with a ``__main__`` block) and packages (``__main__.py``), as paths
    relative to the root: bench/*.py, bench/tools/*.py, bench/paper."""
    out = []
    for path in sorted([*BENCH.glob("*.py"), *BENCH.glob("tools/*.py")]):
        if 'if __name__ == "__main__":' in path.read_text():
            out.append(path.relative_to(ROOT).as_posix())
    out += sorted(p.parent.relative_to(ROOT).as_posix() for p in BENCH.glob("*/__main__.py"))
    return out


ENTRY_POINTS = _entry_points()


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    return subprocess.run([sys.executable, *args, "--help"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_entry_points_found():
    assert {"bench/bench_lat.py", "bench/bench_lp.py", "bench/bench_scale.py", "bench/bench_sim.py",
            "bench/bench_daemon.py", "bench/bench_faults.py", "bench/paper"} <= set(ENTRY_POINTS)


def _as_module(entry: str) -> list[str]:
    return ["-m", entry.removesuffix(".py").replace("/", ".")]


@pytest.fixture(scope="module")
def helps() -> dict[tuple[str, str], subprocess.CompletedProcess]:
    """Every entry point's ``--help``, as a script and as a module, run a few at a time: each
    is an interpreter importing its bench, a second of one core for most."""
    runs = {(entry, form): [entry] if form == "script" else _as_module(entry)
            for entry in ENTRY_POINTS for form in ("script", "module")}
    with concurrent.futures.ThreadPoolExecutor(max_workers=(os.cpu_count() or 1) + 1) as pool:
        done = {key: pool.submit(_run, args, ROOT) for key, args in runs.items()}
        return {key: f.result() for key, f in done.items()}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_runs_as_script(entry, helps):
    res = helps[entry, "script"]
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_runs_as_module(entry, helps):
    res = helps[entry, "module"]
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout


def test_script_runs_from_another_folder(tmp_path):
    """The script form does not depend on the working directory: its imports come from the installed jitsched."""
    res = _run([str(BENCH / "bench_lat.py")], tmp_path)
    assert res.returncode == 0, res.stderr


def test_runs_as_installed_module_from_another_folder(tmp_path):
    res = _run(["-m", "jitsched.bench.paper"], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout


def test_no_bench_edits_the_import_path():
    """One mechanism runs the benches as scripts: they import the installed ``jitsched.bench``."""
    edits = [p.relative_to(ROOT).as_posix() for p in BENCH.rglob("*.py") if "sys.path" in p.read_text()]
    assert edits == []
