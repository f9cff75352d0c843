"""Every shell command documented in README.md and docs/*.md runs, or is parsed by its program."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = ("bash", "sh", "shell", "console")

# The one list of documented commands that the suite does not execute as written, with the
# reason. "parse": the program's own argument parser reads the whole command line (unknown
# options and bad values fail) but nothing runs. "skip": not checked here, for the reason given.
# Every other documented command runs for real in a scratch directory.
EXCEPTIONS: list[tuple[str, str, str]] = [
    (r"^pip install \.", "skip",
     "installs into the interpreter running the suite; the fresh-clone check installs it"),
    (r"^bash scripts/test\.sh", "skip", "this suite's own entry point"),
    (r"^jitsched demo\b", "parse", "about a minute of real daemon, agents and jobs; tests/test_demo.py runs it"),
    (r"^jitsched (daemon|agent)\b", "parse",
     "long-running services; tests/test_daemon*.py and tests/test_agent.py start them"),
    (r"^jitsched (submit|status|attach)\b", "parse",
     "need a running daemon at the documented address; tests/test_cli_daemon.py runs them against one"),
    (r"^jitsched journal\b", "parse",
     "reads a daemon's journal file; tests/test_daemon_journal.py checks and recovers sound and damaged ones"),
    (r"^jitsched sim --coflow-trace fb50-offline\.txt", "parse",
     "the public FB2010 coflow trace is not shipped; tests/test_coflow.py replays it when it is beside the checkout"),
    (r"^jitsched testbed (up|down|measure|run)\b", "parse",
     "needs root and builds network namespaces; tests/test_testbed*.py run it"),
    (r"^python -m jitsched\.examples\.torch_ps\b", "parse",
     "two ranks that wait for each other and a daemon; tests/test_adapters_pytorch.py runs them"),
    (r"^python -m bench\.paper\b", "parse", "the paper's figures take many minutes even with --quick"),
    (r"^jitsched keys add\b", "parse",
     "adds to a key directory `keys init` wrote; tests/test_daemon_hosts.py adds a host's key while a daemon runs"),
    (r"^kubectl\b", "skip",
     "needs a Kubernetes cluster; tests/test_deploy.py validates the manifests against the Kubernetes schemas"),
    (r"^(podman|docker) build\b", "skip",
     "needs a container engine and the network for the base image; tests/test_deploy.py checks what it copies"),
    (r"^python (-m bench\.|bench/)", "parse",
     "benchmarks take minutes; tests/test_bench_*.py run each at a tiny scale"),
]

# Placeholders the docs use for the reader's own files, and the shipped file standing in for each.
PLACEHOLDERS = {
    "FILE.json": "jitsched/examples/vgg16-4jobs.json",
    "JOB.json": "jitsched/examples/vgg16-4jobs.json",
    "GRAPH.json.gz": "bench/workloads/lenet.graph.json.gz",
    "STATS.json.gz": "bench/workloads/lenet.stepstats.json.gz",
    "TRACE.txt": "jitsched/data/coflow-synthetic.txt",
}


@dataclass(frozen=True)
class DocCommand:
    source: str  # "README.md:79"
    line: str    # the command, continuation lines joined, comment removed

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.line)


def documented_commands() -> list[DocCommand]:
    """Every command of every shell-fenced block, split at ``&&``, in document order."""
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
            if m.group(1) not in SHELL_FENCES:
                continue
            first = text[:m.start()].count("\n") + 2
            body = m.group(2).replace("\\\n", " ")
            for i, raw in enumerate(body.splitlines()):
                words = shlex.split(raw, comments=True)
                if not words:
                    continue
                parts: list[list[str]] = [[]]
                for w in words:
                    if w == "&&":
                        parts.append([])
                    else:
                        parts[-1].append(w)
                for part in parts:
                    out.append(DocCommand(f"{doc.relative_to(ROOT)}:{first + i}", shlex.join(part)))
    return out


def how(cmd: DocCommand) -> tuple[str, str]:
    for pattern, mode, reason in EXCEPTIONS:
        if re.search(pattern, cmd.line):
            return mode, reason
    return "run", ""


COMMANDS = documented_commands()
CHECKED = [c for c in COMMANDS if how(c)[0] != "skip"]


def test_the_docs_have_commands_and_every_exception_matches_one():
    assert len(COMMANDS) >= 10
    for pattern, mode, reason in EXCEPTIONS:
        assert mode in ("parse", "skip") and reason
        assert any(re.search(pattern, c.line) for c in COMMANDS), f"exception {pattern!r} matches no command"


class _Parsed(Exception):
    pass


def _parse_only(argv: list[str]) -> None:
    """Run the program's ``main`` with argument parsing as its only step."""
    if argv[0] == "jitsched":
        module, args = "jitsched.cli", argv[1:]
    elif argv[:2] == ["python", "-m"]:
        module, args = argv[2], argv[3:]
    elif argv[0] == "python" and argv[1].endswith(".py"):
        module, args = argv[1][:-3].replace("/", "."), argv[2:]
    else:
        raise AssertionError(f"no parser known for {argv[0]!r}")
    mod = importlib.import_module(module)
    if not hasattr(mod, "main"):
        mod = importlib.import_module(module + ".__main__")
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        raise _Parsed(original(self, args, namespace))

    def never_run(args):
        raise AssertionError("the command ran: its parsing went past the parse_args this test stops")

    # a jitsched command whose parsing escaped the stop above would run for real (a testbed
    # as root, say): every registered command's handler refuses to, whatever parses it
    from jitsched.cli import build_parser
    from jitsched.cli.registry import REGISTRY
    build_parser()  # every command registered before the handlers are swapped
    handlers = dict(REGISTRY)
    REGISTRY.update({name: dataclasses.replace(cmd, run=never_run) for name, cmd in handlers.items()})
    argparse.ArgumentParser.parse_args = parse_then_stop
    try:
        mod.main(args)
    except _Parsed:
        return
    except SystemExit as exc:
        raise AssertionError(f"the parser refused it (exit {exc.code})") from None
    finally:
        argparse.ArgumentParser.parse_args = original
        REGISTRY.update(handlers)
    raise AssertionError("main() returned without parsing its arguments")


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess:
    for name, path in PLACEHOLDERS.items():
        line = re.sub(rf"(?<![\w/.]){re.escape(name)}", shlex.quote(str(ROOT / path)), line)
    line = re.sub(r"(?<![\w/])jitsched/examples/", f"{ROOT}/jitsched/examples/", line)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT))
    return subprocess.run(["bash", "-euo", "pipefail", "-c", line], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("cmd", CHECKED, ids=[f"{c.source} {c.line[:60]}" for c in CHECKED])
def test_documented_command(cmd: DocCommand, tmp_path):
    if how(cmd)[0] == "parse":
        _parse_only(cmd.argv)
        return
    # commands of one block may read what an earlier one wrote (gen-workload -o w.json, then
    # sim w.json): run the block's earlier commands first, in the same directory
    for earlier in COMMANDS[:COMMANDS.index(cmd)]:
        if earlier.source.split(":")[0] == cmd.source.split(":")[0] and how(earlier)[0] == "run" \
                and _writes(earlier) & _reads(cmd):
            assert _run(earlier.line, tmp_path).returncode == 0
    proc = _run(cmd.line, tmp_path)
    assert proc.returncode == 0, f"{cmd.source}: `{cmd.line}` exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr


def _writes(cmd: DocCommand) -> set[str]:
    argv = cmd.argv
    return {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-o", "--out", "--output")}


def _reads(cmd: DocCommand) -> set[str]:
    return set(cmd.argv[1:])


def test_every_documented_daemon_configuration_loads(tmp_path):
    """Each ``toml`` block of the docs is a whole daemon configuration that loads as written."""
    from jitsched.config import load_config

    blocks = [(doc, m.group(1)) for doc in DOCS
              for m in re.finditer(r"^```toml\n(.*?)^```", doc.read_text(encoding="utf-8"), re.S | re.M)]
    assert blocks
    for doc, text in blocks:
        path = tmp_path / "cluster.toml"
        path.write_text(text, encoding="utf-8")
        cfg = load_config(path)
        assert cfg.cluster.hosts, f"{doc.relative_to(ROOT)}: a configuration without hosts"


def test_a_rotted_option_fails_the_parse_check():
    with pytest.raises(AssertionError, match="refused"):
        _parse_only(["jitsched", "gen-workload", "--no-such-option", "1"])
    with pytest.raises(AssertionError, match="refused"):
        _parse_only(["python", "-m", "bench.bench_lat", "--no-such-option"])


# Development history belongs to git, not to the docs: the docs say what jitsched is and
# does now. Each pattern names one kind of history; "round trip", "around" and a
# command's --rounds option are not history.
HISTORY_WORDS: list[tuple[str, str]] = [
    (r"\bsessions?\b", "a development session"),
    (r"(?<![-\w])rounds?\b(?![- ](?:trips?|robin)\b)", "a development round"),
    (r"\bhelpers?\b", "a helper"),
    (r"\bwe tried\b|\btried and not kept\b", "what was tried"),
    (r"\bsince commit\b", "a change's history"),
    (r"\bpreviously\b", "what the code did before"),
    (r"\bissues? #?\d+\b", "an issue reference"),
    (r"(?<![\w&/])#\d+\b", "an issue reference"),
]


def history_words(text: str) -> list[tuple[int, str, str]]:
    """``(line, matched text, what it is)`` for every history word in ``text``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, what in HISTORY_WORDS:
            for m in re.finditer(pattern, line, re.I):
                out.append((n, m.group(0), what))
    return out


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_the_docs_carry_no_development_history(doc: Path):
    found = history_words(doc.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{doc.relative_to(ROOT)}:{n}: {word!r} ({what})" for n, word, what in found)


def test_the_history_check_tells_history_from_ordinary_words():
    for text in ("measured in session 19", "the second round of runs", "Rounds 3-4", "a helper wrote it",
                 "we tried a cap", "tried and not kept: a pool", "faster since commit abc123",
                 "previously a thread", "see issue 44", "fixed in #12", "Issue #7"):
        assert history_words(text), text
    for text in ("a round trip per transfer", "a round-trip time", "round-robin", "around 5 %",
                 "rounded up to a slot", "bench_daemon.py --rounds 3", "docs/results.md#figures",
                 "the LAT is rounded", "`_Session` resends", "&#35;"):
        assert not history_words(text), text


# In code, comments and help text: the history words that have no ordinary use there
# ("session", "round" and "helper" name code things: _Session, round trips, helper processes).
CODE_HISTORY_WORDS: list[tuple[str, str]] = [
    (r"\bsessions? \d+\b", "a development session"),
    (r"\bwe tried\b|\btried and not kept\b", "what was tried"),
    (r"\bsince commit\b", "a change's history"),
    (r"\bissues? #?\d+\b", "an issue reference"),
]
CODE = sorted(p for d in ("jitsched", "agents", "bench", "src_cython", "scripts") for p in (ROOT / d).rglob("*")
              if p.suffix in (".py", ".pyx", ".pxd", ".sh") and "__pycache__" not in p.parts)


def test_the_code_carries_no_development_history():
    found = []
    for path in CODE:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, what in CODE_HISTORY_WORDS:
                for m in re.finditer(pattern, line, re.I):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {m.group(0)!r} ({what})")
    assert len(CODE) > 50 and not found, "\n".join(found)


LONG_MODULE_LINES = 500
LONG_MODULE_MARK = "One module although past 500 lines:"


def test_every_long_module_says_at_its_top_why_it_is_one():
    """A code module past 500 lines gives, above its first import, the reason it is not split."""
    long_ = [p for p in CODE if p.suffix in (".py", ".pyx")
             and len(p.read_text(encoding="utf-8").splitlines()) > LONG_MODULE_LINES]

    def head(path: Path) -> str:
        lines = path.read_text(encoding="utf-8").splitlines()
        first = next(i for i, line in enumerate(lines) if re.match(r"(from|import|cimport) ", line))
        return "\n".join(lines[:first])

    silent = [str(p.relative_to(ROOT)) for p in long_ if LONG_MODULE_MARK not in head(p)]
    assert len(long_) > 10 and not silent, silent
