"""The command registry the jitsched CLI is generated from, and the argument and output helpers its commands share."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arg:
    """One argparse argument: positional names/flags and keyword options."""

    flags: tuple[str, ...]
    options: dict = field(default_factory=dict)


def arg(*flags: str, **options) -> Arg:
    return Arg(tuple(flags), options)


def emit_json(obj) -> None:
    """``obj`` as one line of compact JSON on stdout."""
    json.dump(obj, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


def seed(text: str) -> int:
    """A random seed from the command line: an integer >= 0 (argparse ``type``)."""
    value = int(text)  # argparse reports a ValueError as "invalid seed value"
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {value}")
    return value


def positive(text: str) -> float:
    """A positive finite number from the command line (argparse ``type``)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0 from the command line (argparse ``type``)."""
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


@dataclass(frozen=True)
class Command:
    """A CLI command: its name, one-line help, arguments and handler ``(args) -> exit code``."""

    name: str
    help: str
    args: tuple[Arg, ...]
    run: Callable[[argparse.Namespace], int]


# Every command: the module that registers it and its one-line help, in the order --help
# lists them. The command line reads this table to list the commands (`jitsched --help`, an
# unknown command) without importing their modules, which bring NumPy, SciPy and the
# planner: a second on a 2-core machine before the list could show.
COMMANDS: dict[str, tuple[str, str]] = {
    "lat": ("jitsched.cli.core", "Latest arrival time of every transfer (all jobs of FILE planned together)."),
    "plan": ("jitsched.cli.core", "Plan per-slot rates for the DAG transfers of FILE (LAT + bandwidth LP)."),
    "sim": ("jitsched.cli.sim",
            "Simulate FILE (or a coflow trace) under one scheduling policy and report JCTs and metrics."),
    "testbed": ("jitsched.cli.testbed",
                "Emulated cluster on this machine (network namespaces, HTB-shaped links; needs root)."),
    "daemon": ("jitsched.cli.daemon",
               "Run the scheduling daemon (job and agent ZeroMQ sockets, planner, metrics)."),
    "agent": ("jitsched.cli.daemon", "Run the host agent of HOST: receive per-slot schedules and enforce them."),
    "submit": ("jitsched.cli.daemon",
               "Submit a job (native JSON job or workload, or a TensorFlow GraphDef) to the daemon."),
    "cancel": ("jitsched.cli.daemon", "Cancel running jobs this client submitted: their transfers leave the plan."),
    "status": ("jitsched.cli.daemon", "Jobs, agents and the last plan, as the daemon sees them."),
    "attach": ("jitsched.cli.daemon",
               "Schedule a job's TCP connections on HOST without code in the application: name its processes, "
               "cgroup or ports; HOST's agent finds their connections and ranks them."),
    "demo": ("jitsched.cli.daemon",
             "End-to-end demo on loopback: daemon, pacing agents, a Poisson stream of model DAGs."),
    "import-tf": ("jitsched.cli.workloads",
                  "Import one training step of a TensorFlow GraphDef as a native-format job."),
    "gen-workload": ("jitsched.cli.workloads",
                     "Generate the paper's §4.1 job stream (DL models + file transfers)."),
    "import-coflow": ("jitsched.cli.workloads",
                      "Convert a coflow-benchmark trace into a native workload (one job per coflow)."),
    "keys": ("jitsched.cli.keys",
             "Manage CURVE keys: `keys init DIR` writes the daemon's key pair and one per host and client; "
             "`keys add DIR` adds hosts' and clients' pairs beside them."),
    "journal": ("jitsched.cli.journal",
                "Check a daemon journal (`journal check FILE`: exit 0 sound, 1 damaged) or salvage it "
                "(`journal recover FILE NEW`)."),
}

REGISTRY: dict[str, Command] = {}


def register(name: str, *args: Arg):
    """Decorator: register ``fn(args) -> int`` as the command ``name`` of :data:`COMMANDS`
    (its help comes from there), with the arguments ``args``."""

    def deco(fn: Callable[[argparse.Namespace], int]):
        if name in REGISTRY:
            raise RuntimeError(f"command {name!r} registered twice")
        if COMMANDS.get(name, ("",))[0] != fn.__module__:
            raise RuntimeError(f"command {name!r} is not declared in COMMANDS as a command of {fn.__module__}")
        REGISTRY[name] = Command(name, COMMANDS[name][1], tuple(args), fn)
        return fn

    return deco
