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


# What a bench's --help must not import: the solver, the simulator, the policies, the
# planner and the plotting library are for its measurements, which --help makes none of.
HEAVY = ("scipy", "highspy", "jitsched.sim", "jitsched.policies", "jitsched.plan.planner", "matplotlib")
# Entry points whose module constants come from the policy registry (bench.paper's
# policies, bench_order's jit variants): registering a policy imports its module.
HEAVY_HELP = {"bench/bench_order.py", "bench/paper"}

_HELP_IMPORTS = """
import runpy, sys
mod = sys.argv[1]
sys.argv = [mod, "--help"]
try:
    runpy.run_module(mod, run_name="__main__", alter_sys=True)
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print(sorted(m for m in {heavy!r} if m in sys.modules))
"""


@pytest.fixture(scope="module")
def help_imports() -> dict[str, subprocess.CompletedProcess]:
    """Each entry point's ``--help`` as a module, and what it imported of :data:`HEAVY`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    code = _HELP_IMPORTS.format(heavy=HEAVY)

    def run(entry: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, _as_module(entry)[1]], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    with concurrent.futures.ThreadPoolExecutor(max_workers=(os.cpu_count() or 1) + 1) as pool:
        return dict(zip(ENTRY_POINTS, pool.map(run, ENTRY_POINTS), strict=True))


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e not in HEAVY_HELP])
def test_help_imports_none_of_the_measurements_modules(entry, help_imports):
    res = help_imports[entry]
    assert res.returncode == 0, res.stderr
    assert "usage:" in res.stdout
    assert res.stdout.splitlines()[-1] == "[]", (entry, res.stdout.splitlines()[-1])
