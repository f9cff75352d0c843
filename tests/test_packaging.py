"""What pyproject.toml declares matches the tree: package data that exists, matplotlib only where
figures are drawn (an extra, with a clear message when it is missing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _requirement_names(reqs: list[str]) -> set[str]:
    return {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower()
            for r in reqs}


def test_every_package_data_glob_matches_a_file():
    setuptools = PYPROJECT["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {})
    for package, globs in setuptools["package-data"].items():
        folder = ROOT / package_dir.get(package, package.replace(".", "/"))
        for pattern in globs:
            assert any(p.is_file() for p in folder.glob(pattern)), f"{package}: {pattern!r} matches no file"


def test_matplotlib_is_an_extra_not_a_dependency():
    project = PYPROJECT["project"]
    assert "matplotlib" not in _requirement_names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "matplotlib" in _requirement_names(extras["bench"])
    assert "matplotlib" in _requirement_names(extras["test"])  # the suite draws the benches' figures


def test_jitsched_imports_without_matplotlib():
    # every module of the installed package (CLI, demo, daemon, agents, testbed, adapters)
    # loads with matplotlib and torch made unimportable
    code = """
import importlib, pkgutil, sys
sys.modules["matplotlib"] = None
sys.modules["torch"] = None
import jitsched, jitsched.agents
for pkg in (jitsched, jitsched.agents):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
print("ok")
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


@pytest.fixture
def no_matplotlib(monkeypatch):
    """matplotlib made unimportable (``import matplotlib`` raises ModuleNotFoundError)."""
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


def test_pyplot_without_matplotlib_says_how_to_install_it(no_matplotlib):
    from jitsched.bench.common import pyplot, require_matplotlib

    for fn in (require_matplotlib, pyplot):
        with pytest.raises(ImportError, match=r"pip install 'jitsched\[bench\]'"):
            fn()


def test_bench_figures_without_matplotlib_fail_before_running(no_matplotlib, tmp_path, capsys):
    from jitsched.bench import bench_testbed
    from jitsched.bench.paper.__main__ import main as paper_main

    for main, argv in ((bench_testbed.main, ["--replot", str(tmp_path / "x.json"), "--figure", "f.png"]),
                       # (a saved output that does not exist: should the check go, nothing runs)
                       (bench_testbed.main, ["--replot", str(tmp_path / "x.json"), "--tradeoff", "t.png"]),
                       (paper_main, ["--scale", "tiny", "--out", str(tmp_path / "out")])):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert "pip install 'jitsched[bench]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # bench.paper stopped before its first step


def test_the_sdist_carries_every_kernel_source(tmp_path):
    # setup.py cythonizes src_cython/*.pyx: an sdist needs them and the shared
    # .pxd, and not the .c a local build left (possibly older than the .pyx)
    import tarfile

    # as a packager builds it: PEP 517 through `build`, with the build requirements of the
    # pinned test toolchain (Cython, numpy, setuptools) rather than a download per run
    subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {Path(n).name for n in tar.getnames() if "/src_cython/" in n}
    wanted = {p.name for p in (ROOT / "src_cython").iterdir() if p.suffix in (".pyx", ".pxd")}
    assert wanted and wanted <= names
    assert not {n for n in names if n.endswith(".c")}, "generated C in the sdist (MANIFEST.in excludes it)"


def test_the_test_lock_pins_every_dependency_and_tool():
    # scripts/test.sh installs requirements/test.txt with --no-deps: a dependency missing from
    # it would be missing from the suite's environment (pip check then fails the run)
    lock = {}
    for line in (ROOT / "requirements" / "test.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.split(";")[0].partition("==")
            assert version.strip(), f"{line!r} is not pinned with =="
            lock[name.strip().lower().replace("_", "-")] = version.strip()
    project = PYPROJECT["project"]
    wanted = _requirement_names(project["dependencies"] + project["optional-dependencies"]["test"])
    wanted |= _requirement_names(PYPROJECT["build-system"]["requires"]) | {"build", "pip"}
    missing = {n.replace("_", "-") for n in wanted} - set(lock)
    assert not missing, f"requirements/test.txt does not pin {sorted(missing)}"


def test_a_test_that_hangs_fails_by_itself_and_the_rest_run(request, tmp_path):
    # pyproject.toml gives every test a time limit (pytest-timeout, SIGALRM): a test blocked
    # for good on a lock (as a test waiting on a dead pool worker is) fails, named, and the
    # tests after it run; the limit is shortened here to keep this test short
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) >= 120
    (tmp_path / "test_hang.py").write_text(
        "import threading\n"
        "def test_blocked():\n"
        "    lock = threading.Lock()\n"
        "    lock.acquire()\n"
        "    lock.acquire()\n"
        "def test_after():\n"
        "    pass\n", encoding="utf-8")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path),
                          "-o", "timeout=3", str(tmp_path / "test_hang.py")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAILED test_hang.py::test_blocked - Failed: Timeout" in res.stdout, res.stdout
    assert "1 failed, 1 passed" in res.stdout
