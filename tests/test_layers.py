"""Layers point one way: the import rules between jitsched's parts, checked on the source with ``ast``.

Every import counts, including those inside functions (lazy imports) and
``importlib.import_module`` calls with a literal name: a production host
agent must not load the emulated testbed, the daemon neither, the job
model sits below the LAT pass, and planning below the policies and the
simulator.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (files, forbidden module prefixes, why); file patterns are relative to the repository root
RULES: list[tuple[str, tuple[str, ...], str]] = [
    ("agents/*.py", ("jitsched.testbed", "jitsched.bench"), "a host agent must not load the testbed or the benches"),
    ("jitsched/daemon/*.py", ("jitsched.testbed",), "the daemon must not load the testbed"),
    ("jitsched/*.py", ("jitsched.bench",), "the library never loads the benches (installed beside it as jitsched.bench)"),
    ("jitsched/dag/model.py", ("jitsched.dag.lat",), "the job model sits below the LAT pass"),
    ("jitsched/client/api.py", ("jitsched.agents",), "the client registers flows through jitsched.localreg"),
    ("jitsched/netns.py", ("jitsched.agents", "jitsched.testbed"), "a low layer imports neither side"),
    ("jitsched/localreg.py", ("jitsched.agents", "jitsched.testbed"), "a low layer imports neither side"),
    ("jitsched/plan/*.py", ("jitsched.sim", "jitsched.policies", "jitsched.daemon", "jitsched.testbed"),
     "planning sits below the policies and the simulator, which import it"),
    ("jitsched/policies/*.py", ("jitsched.sim", "jitsched.daemon", "jitsched.testbed"),
     "the policies sit below the simulator and the daemon, which run them"),
    ("jitsched/client/sdk.py", ("jitsched.daemon", "jitsched.agents", "jitsched.testbed"),
     "a training process reaches the daemon and its agent through the client and jitsched.localreg"),
]


def module_name(rel: str) -> str:
    """The dotted name a source file is imported as (``agents/`` and ``bench/`` are installed as ``jitsched.agents`` and ``jitsched.bench``)."""
    parts = list(Path(rel).with_suffix("").parts)
    if parts[0] in ("agents", "bench"):
        parts.insert(0, "jitsched")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_statements(source: str, module: str = "", is_package: bool = False) -> list[tuple[int, set[str]]]:
    """``(line, module names)`` of every import in ``source``, wherever the statement sits.

    ``from a import b`` names both ``a`` and ``a.b`` (``b`` may be a
    submodule); relative imports are resolved against ``module``.
    """
    package = module if is_package else module.rpartition(".")[0]
    out: list[tuple[int, set[str]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.append((node.lineno, {alias.name for alias in node.names}))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            out.append((node.lineno, {base} | {f"{base}.{a.name}" for a in node.names if a.name != "*"}))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "attr", None) == "import_module"
                   or getattr(node.func, "id", None) in ("import_module", "__import__"))):
            out.append((node.lineno, {node.args[0].value}))
    return sorted(out, key=lambda s: s[0])


def imported_modules(source: str, module: str = "", is_package: bool = False) -> set[str]:
    """Every module name ``source`` may import."""
    return set().union(*(names for _, names in import_statements(source, module, is_package)))


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(sources: dict[str, str]) -> list[str]:
    """``file:line: imports X (why)`` per import statement that breaks a rule; ``sources``: relative path -> text."""
    out = []
    for rel, text in sorted(sources.items()):
        statements = import_statements(text, module_name(rel), is_package=rel.endswith("__init__.py"))
        for pattern, forbidden, why in RULES:
            if not fnmatch.fnmatch(rel, pattern):
                continue
            for line, names in statements:
                bad = sorted(n for n in names if any(under(n, p) for p in forbidden))
                if bad:
                    out.append(f"{rel}:{line}: imports {bad[0]} ({why})")
    return out


def repo_sources() -> dict[str, str]:
    files = [p for d in ("agents", "jitsched") for p in (ROOT / d).rglob("*.py")]
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in files}


def test_layers_point_one_way():
    sources = repo_sources()
    # every rule applies to at least one file: a moved or renamed file cannot pass by vanishing
    for pattern, _, _ in RULES:
        assert any(fnmatch.fnmatch(rel, pattern) for rel in sources), pattern
    assert violations(sources) == []


def test_walker_finds_lazy_relative_and_dynamic_imports():
    src = """
import os
from jitsched import testbed
def f():
    from jitsched.testbed.bgtraffic import run
    from ...testbed import scenario
    from . import base
    import jitsched.bench.common as c
    importlib.import_module("jitsched.dag.lat")
    return __import__("json")
"""
    names = imported_modules(src, "jitsched.agents.backends.fake")
    assert {"os", "jitsched", "jitsched.testbed", "jitsched.testbed.bgtraffic", "jitsched.testbed.bgtraffic.run",
            "jitsched.testbed.scenario", "jitsched.agents.backends.base", "jitsched.bench.common", "jitsched.dag.lat",
            "json"} <= names
    # a package's relative imports start at the package itself
    assert "jitsched.agents.backends.tc" in imported_modules("from .tc import TcBackend",
                                                           "jitsched.agents.backends", is_package=True)


@pytest.mark.parametrize("rel, src", [
    ("agents/backends/fake.py", "def f():\n    from jitsched.testbed.bgtraffic import run\n"),
    ("agents/fake.py", "from jitsched import testbed\n"),
    ("agents/fake.py", "import jitsched.bench.common\n"),
    ("jitsched/sim/fake.py", "from jitsched.bench.common import pyplot\n"),
    ("jitsched/daemon/fake.py", "def f():\n    import jitsched.testbed.e2e\n"),
    ("jitsched/dag/model.py", "def topo():\n    from jitsched.dag.lat import topological_order\n"),
    ("jitsched/dag/model.py", "from jitsched.dag import lat\n"),
    ("jitsched/client/api.py", "def f():\n    from jitsched.agents.agent import register_flow\n"),
    ("jitsched/plan/reserve.py", "def f():\n    from jitsched.sim import Simulator\n"),
    ("jitsched/plan/lp.py", "from jitsched.policies.base import SlotSchedule\n"),
    ("jitsched/plan/fake.py", "from ..sim.isolated import isolated_run\n"),
    ("jitsched/policies/reserved.py", "def f():\n    from jitsched.sim.engine import Simulator\n"),
])
def test_a_violation_is_caught(rel, src):
    assert len(violations({rel: src})) == 1


def test_allowed_imports_pass():
    assert violations({
        "agents/backends/fake.py": "from jitsched.netns import ifindex_in\nfrom jitsched.testbedx import y\n",
        "jitsched/testbed/fake.py": "from jitsched.agents.backends.htb import install_shaper\n",
        "jitsched/dag/lat.py": "from jitsched.dag.model import DagArrays\n",
        "jitsched/sim/isolated.py": "from jitsched.plan.reserve import job_windows\n",
        "jitsched/policies/reserved.py": "from jitsched.plan.reserve import ReservationBook\n",
    }) == []
