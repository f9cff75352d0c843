"""Every CLI command, given bad input, exits 2 with one line naming the problem and no traceback.

Each command of the registry has rows of bad values (a command without rows fails
:func:`test_every_command_has_rows`). The rows run as ``python -m jitsched ...`` in
processes forked, one per row, from one interpreter that imported jitsched once
(0.11 s a row on a 2-core machine where a new interpreter takes 1.8 s): each row's process has its own stdout
and stderr files, its own process group (whatever it starts is found and killed,
and counted against it), and exits as the command would.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from jitsched.cli import build_parser
from jitsched.cli.registry import REGISTRY
from jitsched.keys import init_keys

EXAMPLE = Path(__file__).resolve().parents[1] / "jitsched" / "examples" / "vgg16-4jobs.json"
TRACE = Path(__file__).resolve().parents[1] / "jitsched" / "data" / "coflow-synthetic.txt"
ROW_TIMEOUT_S = 30.0

HOSTS_TOML = ('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n'
              '[[hosts]]\nname = "h1"\negress_bps = 1e9\ningress_bps = 1e9\n')
LOOPBACK = '[daemon]\njob_endpoint = "tcp://127.0.0.1:0"\nagent_endpoint = "tcp://127.0.0.1:0"\n'
# configuration files of the fixture directory: name -> text after the hosts
CONFIGS = {
    "good": LOOPBACK,
    "type": LOOPBACK + '[scheduler]\nslot_s = "fast"\n',
    "slot": LOOPBACK + "[scheduler]\nslot_s = 1e-9\n",
    "heartbeat": '[daemon]\nheartbeat_s = 1e-9\n',
    "nan": "[limits]\nmax_compute_s = nan\n",
    "negative": "[limits]\nmax_jobs = -1\n",
    "policy_option": LOOPBACK + "[scheduler]\npolicy_options = {nope = 1}\n",
    "unknown": "[daemon]\nnope = 1\n",
    "epsilon": LOOPBACK + "critical_epsilon = -0.1\n",
    "epsilon_type": LOOPBACK + 'critical_epsilon = "small"\n',
    "endpoint": '[daemon]\njob_endpoint = "tcp://127.0.0.1:notaport"\nagent_endpoint = "tcp://127.0.0.1:0"\n',
    "host_bps": '[[hosts]]\nname = "h9"\negress_bps = -1\ningress_bps = 1e9\n' + LOOPBACK,
    "port_range": '[daemon]\njob_endpoint = "tcp://127.0.0.1:99999"\nagent_endpoint = "tcp://127.0.0.1:0"\n',
    "no_scheme": '[daemon]\njob_endpoint = "garbage"\nagent_endpoint = "tcp://127.0.0.1:0"\n',
    "same_endpoints": '[daemon]\njob_endpoint = "tcp://127.0.0.1:{port}"\nagent_endpoint = "tcp://127.0.0.1:{port}"\n',
    "in_use": '[daemon]\njob_endpoint = "tcp://127.0.0.1:{port}"\nagent_endpoint = "tcp://127.0.0.1:0"\n',
    "metrics_in_use": LOOPBACK + "metrics_port = {port}\n",
    "metrics_address_type": LOOPBACK + "metrics_address = 1\n",
    "quota": "[limits.per_client]\nmax_jobs = -1\n",
    "quota_unknown_client": LOOPBACK + "[limits.clients.nobody]\nmax_jobs = 5\n",
    "exposed": '[daemon]\njob_endpoint = "tcp://0.0.0.0:0"\nagent_endpoint = "tcp://127.0.0.1:0"\n',
}
NO_HOSTS = {"no_hosts_table": "hosts = 5\n"}  # whole files

# clients and agents get the held port, never a default one another daemon may serve
AGENT = ["agent", "--host", "h0", "--local-dir", "{d}/run", "--daemon", "tcp://127.0.0.1:{port}"]
STATUS = ["status", "--daemon", "tcp://127.0.0.1:{port}"]
ATTACH = ["attach", "j1", "--host", "h0", "--daemon", "tcp://127.0.0.1:{port}", "--timeout-s", "1",
          "--local-dir", "{d}/run"]
OUT = ["-o", "{d}/out.json"]
GEN = ["gen-workload", "--load", "0.5", "--n-jobs", "2", "--hosts", "4"]
SUBMIT = ["submit", "{d}/wl.json", "--daemon", "tcp://127.0.0.1:{port}", "--timeout-s", "1"]
# Testbed rows name a prefix of their own: should a check ever come after the
# privileged work, the row touches no testbed but its own (and fails on its output).
TESTBED = ["testbed", "--prefix", "jsbadin"]

# command -> (argv after ``jitsched``, a fragment the one line must hold); {d} is the
# fixture directory, {port} a TCP port a listening socket of this test holds
BAD: dict[str, list[tuple[list[str], str]]] = {
    "lat": [
        (["lat", "{d}/missing.json"], "missing.json: no such file"),
        (["lat", "{d}/bad.json"], "bad.json: not valid JSON"),
        (["lat", "{d}/bin.json"], "bin.json: not valid JSON"),
        (["lat", "{d}/list.json"], "$: expected an object, got list"),
        (["lat", "{d}/jobs5.json"], "$.cluster: missing required field"),
        (["lat", "{d}"], "Is a directory"),
        (["lat", "{d}/wl.json", "--estimator", "nope"], "argument --estimator: invalid choice: 'nope'"),
    ],
    "plan": [
        (["plan", "{d}/wl.json", "--slot-s", "1e-9"], "--slot-s: must be a number of seconds of at least 0.001"),
        (["plan", "{d}/wl.json", "--slot-s", "nan"], "--slot-s: must be a number of seconds of at least 0.001"),
        (["plan", "{d}/wl.json", "--slot-s", "abc"], "argument --slot-s: invalid float value: 'abc'"),
        (["plan", "{d}/wl.json", "--alpha", "2"], "alpha: must be within [0, 1], got 2.0"),
        (["plan", "{d}/wl.json", "--time-limit-s", "-1"], "--time-limit-s: must be a number > 0, got -1.0"),
        (["plan", "{d}/wl.json", "--iteration-limit", "0"], "--iteration-limit: must be a positive integer, got 0"),
        (["plan", "{d}/missing.json"], "missing.json: no such file"),
    ],
    "sim": [
        (["sim", "{d}/wl.json", "--option", "nope=1"], "policy 'tensorflow': unknown option(s) nope; it takes: none"),
        (["sim", "{d}/wl.json", "--policy", "jit", "--option", "nope=1"], "policy 'jit': unknown option(s) nope"),
        (["sim", "{d}/wl.json", "--policy", "jit", "--option", "slot_s=1e-9"], "slot_s: must be a number of seconds"),
        (["sim", "{d}/wl.json", "--policy", "jit", "--option", "alpha=abc"], "alpha: must be within [0, 1]"),
        (["sim", "{d}/wl.json", "--policy", "jit", "--option", "backfill=2"], "backfill: expected true or false"),
        (["sim", "{d}/wl.json", "--policy", "nope"], "unknown policy 'nope'"),
        (["sim", "{d}/wl.json", "--option", "x"], "--option: expected KEY=VALUE, got 'x'"),
        (["sim", "{d}/wl.json", "--compute-noise", "nan"], "--compute-noise: must be a finite number >= 0"),
        (["sim", "{d}/wl.json", "--seed", "-1"], "argument --seed: a seed is an integer >= 0"),
        (["sim", "{d}/bad.json"], "bad.json: not valid JSON"),
        (["sim"], "missing FILE.json"),
        (["sim", "--coflow-trace", "{d}/missing.txt", "--policy", "sincronia"], "missing.txt: no such file"),
        (["sim", "--coflow-trace", "{d}/trace.txt", "--policy", "sincronia", "--port-bps", "0"],
         "argument --port-bps: must be a positive finite number"),
        (["sim", "--coflow-trace", "{d}/trace.txt", "--policy", "jit"], "--policy: coflow mode supports"),
        (["sim", "{d}/wl.json", "--coflow-trace", "{d}/trace.txt"], "not both"),
    ],
    "testbed": [
        ([*TESTBED, "up", "--hosts", "1"], "--hosts must be in 2..200, got 1"),
        ([*TESTBED, "up", "--link-mbit", "0"], "--link-mbit: must be within [0.1, 10000], got 0.0"),
        ([*TESTBED, "up", "--link-mbit", "nan"], "--link-mbit: must be within"),
        (["testbed", "down", "--prefix", "A B"], "bad prefix 'A B'"),
        ([*TESTBED, "run", "--alpha", "2"], "alpha: must be within [0, 1]"),
        ([*TESTBED, "run", "--seed", "-1"], "seed: must be within [0, inf)"),
        ([*TESTBED, "run", "--runner-procs", "0"], "--runner-procs: must be within [1, inf)"),
        ([*TESTBED, "run", "--scenario", "nope"], "argument --scenario: invalid choice"),
        ([*TESTBED, "measure", "--slot-s", "1e-9"], "--slot-s: must be within [0.001, inf)"),
        ([*TESTBED, "measure", "--slots", "0"], "slots: must be within [1, inf)"),
        ([*TESTBED, "sideways"], "argument action: invalid choice: 'sideways'"),
    ],
    "daemon": [
        (["daemon", "--config", "{d}/missing.toml"], "missing.toml: no such file"),
        (["daemon", "--config", "{d}"], "cannot read (Is a directory)"),
        (["daemon", "--config", "{d}/bad.json"], "bad.json: not valid TOML"),
        (["daemon", "--config", "{d}/c_type.toml"], "[scheduler].slot_s: expected float, got str"),
        (["daemon", "--config", "{d}/c_slot.toml"], "slot_s: must be a number of seconds of at least 0.001"),
        (["daemon", "--config", "{d}/c_heartbeat.toml"], "heartbeat_s: must be a number of seconds of at least 0.01"),
        (["daemon", "--config", "{d}/c_nan.toml"], "[limits].max_compute_s: must be positive, got nan"),
        (["daemon", "--config", "{d}/c_negative.toml"], "[limits].max_jobs: must be positive, got -1"),
        (["daemon", "--config", "{d}/c_policy_option.toml"], "policy 'jit': unknown option(s) nope"),
        (["daemon", "--config", "{d}/c_unknown.toml"], "[daemon].nope: unknown setting"),
        (["daemon", "--config", "{d}/c_epsilon.toml"], "[daemon].critical_epsilon: must be a finite number >= 0"),
        (["daemon", "--config", "{d}/c_epsilon_type.toml"], "[daemon].critical_epsilon: expected float, got str"),
        (["daemon", "--config", "{d}/c_no_hosts_table.toml"], "expected list, got int"),
        (["daemon", "--config", "{d}/c_quota.toml"], "[limits.per_client].max_jobs: must be positive, got -1"),
        (["daemon", "--config", "{d}/c_quota_unknown_client.toml", "--keys", "{d}/keys"],
         "[limits.clients.nobody]: no client key 'nobody'"),
        (["daemon", "--config", "{d}/c_exposed.toml"], "'tcp://0.0.0.0:0' is not a loopback address"),
        (["daemon", "--config", "{d}/c_endpoint.toml"],
         "[daemon].job_endpoint 'tcp://127.0.0.1:notaport': the port must be * or within 0-65535, got 'notaport'"),
        (["daemon", "--config", "{d}/c_host_bps.toml"],
         "daemon: error: hosts[2].egress_bps: capacity must be at least 1 bit/s, got -1"),
        (["daemon", "--config", "{d}/c_port_range.toml"],
         "[daemon].job_endpoint 'tcp://127.0.0.1:99999': the port must be * or within 0-65535, got '99999'"),
        (["daemon", "--config", "{d}/c_no_scheme.toml"], "[daemon].job_endpoint 'garbage': not an endpoint such as"),
        (["daemon", "--config", "{d}/c_same_endpoints.toml"],
         "[daemon].job_endpoint and agent_endpoint: both 'tcp://127.0.0.1:{port}'; the job and agent sockets need"),
        (["daemon", "--config", "{d}/c_in_use.toml"], "job_endpoint 'tcp://127.0.0.1:{port}': cannot bind (Address"),
        (["daemon", "--config", "{d}/c_metrics_in_use.toml"], "metrics_port {port}: cannot serve on 127.0.0.1"),
        (["daemon", "--config", "{d}/c_good.toml", "--metrics-port", "70000"], "--metrics-port: out of range: 70000"),
        (["daemon", "--config", "{d}/c_good.toml", "--metrics-port", "x"], "argument --metrics-port: invalid int"),
        (["daemon", "--config", "{d}/c_good.toml", "--metrics-address", "localhost"],
         "--metrics-address: must be an IPv4 or IPv6 address (127.0.0.1, 0.0.0.0, ::), got 'localhost'"),
        (["daemon", "--config", "{d}/c_metrics_address_type.toml"], "[daemon].metrics_address: expected str, got int"),
        (["daemon", "--config", "{d}/c_good.toml", "--journal", "{d}/missing/j.db"],
         "journal {d}/missing/j.db: directory {d}/missing does not exist"),
        (["daemon", "--config", "{d}/c_good.toml", "--journal", "{d}"], "journal {d}: a directory, not a file"),
        (["daemon", "--config", "{d}/c_good.toml", "--journal", "{d}/wl.json"], "file is not a database"),
        (["daemon", "--config", "{d}/c_good.toml", "--keys", "{d}/nocli"], "no client keys"),
        (["daemon", "--config", "{d}/c_good.toml", "--keys", "{d}/open/keys"], "{d}/open is writable by"),
        (["daemon", "--config", "{d}/c_good.toml", "--keys", "{d}/missing"], "daemon.secret: no such key file"),
        (["daemon"], "the following arguments are required: --config"),
    ],
    "agent": [
        ([*AGENT, "--daemon", "garbage"], "--daemon 'garbage': not an endpoint"),
        ([*AGENT, "--daemon", "tcp://127.0.0.1:notaport"], "the port must be * or within 0-65535"),
        ([*AGENT, "--daemon", "tcp://127.0.0.1:99999"], "--daemon 'tcp://127.0.0.1:99999': the port must be * or within"),
        ([*AGENT, "--host", "a/b"], "--host: 'a/b' cannot name a host"),
        ([*AGENT, "--allow-uid", "-1"], "--allow-uid: a user id is >= 0, got -1"),
        ([*AGENT, "--rto-max-ms", "5"], "--rto-max-ms: must be in 1000..120000"),
        ([*AGENT, "--rto-min-ms", "nan"], "--rto-min-ms: must be in 1..200"),
        ([*AGENT, "--backend", "nope"], "argument --backend: invalid choice"),
        ([*AGENT, "--backend", "tc", "--ingress-share", "0"], "--ingress-share: must be within (0, 1]"),
        ([*AGENT, "--backend", "tc"], "--dev: the tc backend shapes one network device; name it"),
        ([*AGENT, "--backend", "tc", "--dev", "nonexist0"], "--dev 'nonexist0': no such network interface on this host"),
        ([*AGENT, "--backend", "tc", "--background-floor", "1"], "--background-floor: must be within [0, 1), got 1.0"),
        ([*AGENT, "--background-floor", "-0.5"], "--background-floor: must be within [0, 1), got -0.5"),
        ([*AGENT, "--background-floor", "half"], "argument --background-floor: invalid float value: 'half'"),
        ([*AGENT, "--keys", "{d}/missing"], "h0.secret: no such key file"),
        ([*AGENT, "--keys", "{d}/open/keys"], "{d}/open is writable by"),
        ([*AGENT, "--local-dir", "{d}/wl.json"], "cannot make the directory (File exists)"),
        ([*AGENT, "--egress-bps", "-1"], "--egress-bps: must be a positive number of bits/s, got -1.0"),
        ([*AGENT, "--egress-bps", "1e9", "--ingress-bps", "inf"], "--ingress-bps: must be a positive number"),
    ],
    "submit": [
        (["submit", "{d}/missing.json"], "missing.json: no such file"),
        (["submit", "{d}/bad.json"], "bad.json: not valid JSON"),
        (["submit", "{d}/jobs5.json"], "jobs: expected a list of job objects"),
        (["submit", "{d}/list.json"], "list.json: expected a job, a workload or a GraphDef (a JSON object), got list"),
        (["submit", "{d}/trace.txt"], "trace.txt: a GraphDef needs --ps-host and --worker-host"),
        (["submit", "{d}/missing.pbtxt", "--ps-host", "h0", "--worker-host", "h1"], "missing.pbtxt: no such file"),
        ([*SUBMIT, "--daemon", "garbage"], "--daemon 'garbage': not an endpoint such as"),
        ([*SUBMIT, "--daemon", "tcp://127.0.0.1:-5"], "--daemon 'tcp://127.0.0.1:-5': the port must be * or within"),
        ([*SUBMIT, "--timeout-s", "0"], "--timeout-s: must be a positive finite number of seconds"),
        ([*SUBMIT, "--keys", "{d}/keys", "--key-name", "../x"], "client '../x': a key name is"),
        ([*SUBMIT, "--keys", "{d}/keys", "--key-name", "nobody"], "nobody.secret: no such key file"),
        ([*SUBMIT, "--keys", "{d}/open/keys", "--key-name", "c"], "{d}/open is writable by"),
    ],
    "cancel": [
        (["cancel"], "the following arguments are required: JOB_ID"),
        (["cancel", "j1", "--daemon", "garbage"], "--daemon 'garbage': not an endpoint such as"),
        (["cancel", "j1", "--daemon", "tcp://127.0.0.1:{port}", "--timeout-s", "0"],
         "--timeout-s: must be a positive finite number of seconds"),
        (["cancel", "j1", "--daemon", "tcp://127.0.0.1:{port}", "--keys", "{d}/open/keys", "--key-name", "c"],
         "{d}/open is writable by"),
    ],
    "status": [
        ([*STATUS, "--daemon", "garbage"], "--daemon 'garbage': not an endpoint such as"),
        ([*STATUS, "--daemon", "tcp://h:1,tcp://h:70000"], "--daemon 'tcp://h:70000': the port must be * or within"),
        ([*STATUS, "--timeout-s", "nan"], "--timeout-s: must be a positive finite number of seconds, got nan"),
        ([*STATUS, "--timeout-s", "-1"], "--timeout-s: must be a positive finite number of seconds"),
        ([*STATUS, "--timeout-s", "x"], "argument --timeout-s: invalid float value"),
        ([*STATUS, "--keys", "{d}/keys", "--key-name", "nobody"], "nobody.secret: no such key file"),
        ([*STATUS, "--keys", "{d}/open/keys", "--key-name", "c"], "{d}/open is writable by"),
    ],
    "attach": [
        (ATTACH, "name exactly one of --pid, --cgroup and --port"),
        ([*ATTACH, "--pid", "-5"], "--pid: a process id is > 0, got -5"),
        ([*ATTACH, "--port", "70000"], "--port: a TCP port is within 1..65535, got 70000"),
        ([*ATTACH, "--port", "x"], "argument --port: invalid int value: 'x'"),
        ([*ATTACH, "--host", "a/b", "--port", "5"], "--host: 'a/b' cannot name a host"),
        ([*ATTACH, "--port", "5", "--peer", "x"], "--peer 'x': expected ADDR[:PORT]=HOST"),
        ([*ATTACH, "--port", "5", "--daemon", "garbage"], "--daemon 'garbage': not an endpoint such as"),
        ([*ATTACH, "--port", "5", "--timeout-s", "nan"], "--timeout-s: must be a positive finite number"),
        ([*ATTACH, "--detach", "--port", "5"], "--detach takes none of --pid, --cgroup and --port"),
        ([*ATTACH, "--port", "5", "--keys", "{d}/open/keys", "--key-name", "c"], "{d}/open is writable by"),
        (["attach", "--host", "h0"], "the following arguments are required: JOB"),
    ],
    "journal": [
        (["journal", "check", "{d}/missing.db"], "journal {d}/missing.db does not exist"),
        (["journal", "check", "{d}/wl.json"], "journal {d}/wl.json is not an sqlite database"),
        (["journal", "check", "{d}/bin.json"], "is not an sqlite database"),
        (["journal", "check", "{d}"], "journal {d}: a directory, not a file"),
        (["journal", "check", "{d}/wl.json", "{d}/new.db"], "journal check takes one FILE"),
        (["journal", "recover", "{d}/wl.json"], "give the new journal's path"),
        (["journal", "recover", "{d}/wl.json", "{d}/new.db"], "journal {d}/wl.json is not an sqlite database"),
        (["journal", "recover", "{d}/missing.db", "{d}/new.db"], "journal {d}/missing.db does not exist"),
        (["journal", "fix", "{d}/wl.json"], "argument action: invalid choice: 'fix'"),
    ],
    "demo": [
        (["demo", "--seed", "-1"], "argument --seed: a seed is an integer >= 0, got -1"),
        (["demo", "--seed", "x"], "argument --seed: invalid seed value: 'x'"),
        (["demo", "--slow"], "unrecognized arguments: --slow"),
    ],
    "import-tf": [
        (["import-tf", "{d}/missing.pbtxt", *OUT], "missing.pbtxt: no such file"),
        (["import-tf", "{d}/bad.json", *OUT], "bad.json: not valid JSON"),
        (["import-tf", "{d}/bin.json", *OUT], "bin.json: not UTF-8 text"),
        (["import-tf", "{d}/wl.json", *OUT], "the graph has no nodes"),
        (["import-tf", "{d}/missing.pbtxt", *OUT, "--time-scale", "0"], "argument --time-scale: must be a positive"),
        (["import-tf", "{d}/missing.pbtxt", *OUT, "--min-op-s", "nan"], "argument --min-op-s: must be a finite"),
        (["import-tf", "{d}/missing.pbtxt", *OUT, "--bps", "-1"], "argument --bps: must be a positive"),
        (["import-tf", "{d}/missing.pbtxt"], "the following arguments are required: -o/--output"),
    ],
    "gen-workload": [
        (["gen-workload", "--load", "0", "--n-jobs", "2", *OUT], "load must be positive, got 0.0"),
        (["gen-workload", "--load", "nan", "--n-jobs", "2", *OUT], "load must be positive, got nan"),
        (["gen-workload", "--load", "1e300", "--n-jobs", "2", *OUT],
         "load 1e+300 on 100 hosts of 1e+09 bit/s is more jobs a second than a float holds"),
        (["gen-workload", "--load", "0.5", *OUT], "give exactly one of n_jobs and duration_s"),
        ([*GEN, *OUT, "--bps", "0"], "argument --bps: must be a positive finite number, got 0"),
        ([*GEN, *OUT, "--seed", "-1"], "argument --seed: a seed is an integer >= 0"),
        ([*GEN, *OUT, "--models", "nope"], "unknown model 'nope'"),
        ([*GEN, *OUT, "--background-share", "2"], "background_share must be in [0, 1]"),
        (["gen-workload", "--load", "0.5", "--n-jobs", "2", "--hosts", "1", *OUT], "need at least 2 hosts"),
        ([*GEN, "-o", "{d}/missing/out.json"], "out.json: cannot write (No such file or directory)"),
        ([*GEN, "-o", "{d}"], "cannot write (Is a directory)"),
    ],
    "import-coflow": [
        (["import-coflow", "{d}/missing.txt", *OUT], "missing.txt: no such file"),
        (["import-coflow", "{d}/bad.json", *OUT], "bad.json:1: expected '<ports> <coflows>'"),
        (["import-coflow", "{d}/bin.json", *OUT], "bin.json: cannot read"),
        (["import-coflow", "{d}/trace.txt", *OUT, "--bps", "nan"], "argument --bps: must be a positive"),
        (["import-coflow", "{d}/trace.txt", "-o", "{d}/missing/out.json"], "cannot write (No such file or directory)"),
    ],
    "keys": [
        (["keys", "init", "{d}/new", "--clients", " , "], "--clients: no client names"),
        (["keys", "init", "{d}/new", "--hosts", "../x"], "host '../x': a key name is"),
        (["keys", "init", "{d}/new", "--hosts", "a", "--hosts-count", "2"], "--hosts and --hosts-count: give one"),
        (["keys", "init", "{d}/new", "--hosts-count", "-1"], "--hosts-count: must be >= 0, got -1"),
        (["keys", "init", "{d}/open/new"], "{d}/open is writable by"),
        (["keys", "init", "{d}/wl.json/new"], "Not a directory"),
        (["keys", "init", "{d}/keys"], "keys exist already"),
        (["keys", "rotate", "{d}/new"], "argument action: invalid choice: 'rotate'"),
        (["keys", "add", "{d}/keys"], "keys add: name --hosts or --clients to add"),
        (["keys", "add", "{d}/new", "--hosts", "h9"], "no daemon key to add keys beside"),
        (["keys", "add", "{d}/keys", "--hosts", "h0"], "keys exist already"),
    ],
}

ROWS = [(cmd, i, argv, fragment) for cmd, rows in BAD.items() for i, (argv, fragment) in enumerate(rows)]

# Runs each row in a forked child of one interpreter that has imported jitsched:
# the child redirects fds 1 and 2 to files, leads a process group of its own, and
# runs ``python -m jitsched`` through runpy, so it exits (atexit, threads, traceback)
# as that command would. Reads [[argv, ...], ...] and a timeout as JSON on stdin,
# writes one result per row as JSON on stdout.
DRIVER = r"""
import gc, json, os, runpy, signal, sys, tempfile, time
import jitsched.cli
jitsched.cli.build_parser()  # every command module imported once, before the forks,
import jitsched.daemon.server, jitsched.sim, jitsched.testbed.e2e  # with what they import when run
# the objects so far out of the collector's reach: a row's process that collects (at exit,
# say) then writes to none of them, so their pages stay shared (0.06 s a row, not 0.24)
gc.freeze()
rows, timeout_s = json.loads(sys.stdin.read())
results = []
for argv in rows:
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["jitsched", *argv]
        runpy.run_module("jitsched", run_name="__main__")
        os._exit(0)
    t0 = time.monotonic()
    deadline, status, timed_out = t0 + timeout_s, None, False
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
        elif time.monotonic() > deadline:
            timed_out = True
            os.killpg(pid, signal.SIGKILL)
            status = os.waitpid(pid, 0)[1]
        else:
            time.sleep(0.005)
    try:
        os.killpg(pid, 0)  # anything the row started and left behind
        left = True
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        left = False
    streams = []
    for f in (out, err):
        f.seek(0)
        streams.append(f.read().decode("utf-8", "replace"))
        f.close()
    results.append({"rc": os.waitstatus_to_exitcode(status), "stdout": streams[0], "stderr": streams[1],
                    "timed_out": timed_out, "left_processes": left, "elapsed_s": time.monotonic() - t0})
print(json.dumps(results))
"""


def _fill(text: str, d: Path, port: int) -> str:
    return text.replace("{d}", str(d)).replace("{port}", str(port))


def _fixture_dir(d: Path, port: int) -> None:
    shutil.copy(EXAMPLE, d / "wl.json")
    shutil.copy(TRACE, d / "trace.txt")
    (d / "bad.json").write_text("{bad\n")
    (d / "list.json").write_text("[1, 2]\n")
    (d / "jobs5.json").write_text('{"jobs": 5}\n')
    (d / "bin.json").write_bytes(b"\xff\xfe\x00")
    for name, text in CONFIGS.items():
        (d / f"c_{name}.toml").write_text(HOSTS_TOML + _fill(text, d, port))
    for name, text in NO_HOSTS.items():
        (d / f"c_{name}.toml").write_text(text)
    init_keys(d / "keys", ["h0"], ["c"])
    init_keys(d / "nocli", ["h0"], [])
    init_keys(d / "open" / "keys", ["h0"], ["c"])
    os.chmod(d / "open", 0o777)  # anyone may swap the key directory inside


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[tuple[str, int], dict]:
    d = tmp_path_factory.mktemp("bad-inputs")
    # a port this test holds: a daemon binding it finds it in use, a client gets no reply
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    try:
        _fixture_dir(d, port)
        argvs = [[_fill(a, d, port) for a in argv] for _, _, argv, _ in ROWS]
        proc = subprocess.run([sys.executable, "-c", DRIVER], input=json.dumps([argvs, ROW_TIMEOUT_S]),
                              capture_output=True, text=True, timeout=len(ROWS) * ROW_TIMEOUT_S,
                              cwd=d, env={**os.environ, "JITSCHED_RUN_DIR": str(d / "run")})
    finally:
        held.close()
        os.chmod(d / "open", 0o700)
    assert proc.returncode == 0, proc.stderr
    out = {}
    for (cmd, i, _, fragment), res in zip(ROWS, json.loads(proc.stdout), strict=True):
        out[(cmd, i)] = {**res, "fragment": _fill(fragment, d, port)}
    return out


def test_every_command_has_rows():
    build_parser()  # imports every command module, so the registry is complete
    assert sorted(REGISTRY) == sorted(BAD), "each command needs rows of bad input in BAD"
    assert all(len(rows) >= 3 for rows in BAD.values())


@pytest.mark.parametrize(("cmd", "i"), [(cmd, i) for cmd, i, _, _ in ROWS],
                         ids=[f"{cmd}-{i}" for cmd, i, _, _ in ROWS])
def test_bad_input_is_one_line_and_exit_2(results, cmd, i):
    res = results[(cmd, i)]
    argv = " ".join(BAD[cmd][i][0])
    assert not res["timed_out"], f"jitsched {argv}: still running after {ROW_TIMEOUT_S} s"
    assert not res["left_processes"], f"jitsched {argv}: left processes behind"
    err = res["stderr"]
    assert "Traceback" not in err, f"jitsched {argv}:\n{err}"
    assert res["rc"] == 2, f"jitsched {argv}: exit {res['rc']}\n{err}"
    lines = err.splitlines()
    assert len(lines) == 1, f"jitsched {argv}: {len(lines)} lines on stderr:\n{err}"
    prefix = "jitsched: error: " if "jitsched: error:" in lines[0] else f"jitsched {cmd}: error: "
    assert lines[0].startswith(prefix), lines[0]
    assert res["fragment"] in lines[0], f"jitsched {argv}: {lines[0]!r} does not say {res['fragment']!r}"


@pytest.mark.parametrize(("argv", "fragment"), [
    (["sim", "{d}/late.json", "--no-bound"], "job 'j0': arrival_s 1e+16 is after 2**32 s"),
    (["plan", "{d}/span.json"], "the plan's slot grid would span 1,000,016 slots of 0.1 s on 20 ports"),
], ids=["sim-arrival", "plan-grid"])
def test_spans_too_long_to_simulate_or_plan_are_one_line_and_exit_2(tmp_path, argv, fragment):
    from jitsched.dag.model import Cluster, Compute, Job, Transfer, Workload

    cl = Cluster.uniform(10, 1e9)
    for name, arrivals in (("late", (1e16,)), ("span", (0.0, 1e5))):  # span: 10^6 slots of 0.1 s
        jobs = tuple(Job(f"j{k}", (Compute("c", "h1", 0.1),), (Transfer("t", "h0", "h1", 1e8),), (("t", "c"),), at)
                     for k, at in enumerate(arrivals))
        (tmp_path / f"{name}.json").write_text(json.dumps(Workload(cl, jobs).to_dict()))
    proc = subprocess.run([sys.executable, "-m", "jitsched", *(a.replace("{d}", str(tmp_path)) for a in argv)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"jitsched {argv[0]}: error: ") and fragment in lines[0], lines
