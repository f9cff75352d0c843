"""Daemon-side commands: ``daemon``, ``agent``, ``submit``, ``status``, ``attach`` and ``demo``."""

# One module although past 500 lines: the daemon-side commands share their
# argument checks (endpoints, hosts, keys) and their run-until-signal loop.

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from jitsched.agents.options import AgentOptions
from jitsched.cli.registry import arg, emit_json, register, seed
from jitsched.errors import ValidationError
from jitsched.optspec import argument_specs, options_from_args
from jitsched.protocol import FOLLOWER

DEFAULT_JOB_ENDPOINT = "tcp://127.0.0.1:5555"
DEFAULT_AGENT_ENDPOINT = "tcp://127.0.0.1:5556"
# status --replicas: the role shown for an endpoint that did not answer
UNREACHABLE = "unreachable"


def _keys_arg(who: str):
    return arg("--keys", default=None, metavar="DIR",
               help=f"CURVE key directory (`jitsched keys init`): connect with {who}'s key pair "
                    "and the daemon's public key (default: plaintext, for a daemon on loopback)")


JOB_DAEMON_ARG = arg("--daemon", default=DEFAULT_JOB_ENDPOINT,
                     help=f"job endpoint (default {DEFAULT_JOB_ENDPOINT}); daemon replicas: their job "
                          "endpoints separated by commas")
KEY_NAME_ARG = arg("--key-name", default="client", metavar="NAME",
                   help="this client's name in the key directory (default client); "
                        "only the key that submitted a job may report on or cancel it")


def check_endpoint(endpoint: str, flag: str) -> None:
    """Refuse what ZeroMQ cannot connect to (no ``tcp://host:port``, ``ipc://`` or
    ``inproc://`` address): ValidationError naming ``flag``. Nothing is sent. Several
    endpoints separated by commas (daemon replicas) are each checked."""
    import zmq

    from jitsched.protocol import endpoint_problem, split_endpoints

    for ep in split_endpoints(endpoint) or [endpoint]:
        why = endpoint_problem(ep)
        if why:
            raise ValidationError(f"{flag} {ep!r}: {why}")
    ctx = zmq.Context()
    try:
        for ep in split_endpoints(endpoint) or [endpoint]:
            sock = ctx.socket(zmq.DEALER)
            try:
                sock.connect(ep)
            except zmq.ZMQError as exc:
                raise ValidationError(f"{flag} {ep!r}: not an endpoint such as tcp://127.0.0.1:5556 "
                                      f"({zmq.strerror(exc.errno)})") from None
            finally:
                sock.close(0)
    finally:
        ctx.term()


def _check_dev(dev: str | None) -> None:
    # the tc backend rewrites the device's qdiscs: only the one the operator names, and one
    # that exists, before the agent registers (a typo would fail only once a daemon answers)
    import socket

    if not dev:
        raise ValidationError("--dev: the tc backend shapes one network device; name it (--dev eth0)")
    try:
        socket.if_nametoindex(dev)
    except OSError:
        raise ValidationError(f"--dev {dev!r}: no such network interface on this host") from None


def _check_host(host: str) -> None:
    # the name is part of the agent's local socket's file name
    if not host or "/" in host or "\0" in host:
        raise ValidationError(f"--host: {host!r} cannot name a host (empty, or a / in it)")


# how `status` words an agent's own counts (jitsched.protocol.AGENT_COUNTS): a verb, a noun
# counted, the rest; "daemons" is left out (meeting a restarted daemon is no fault)
AGENT_COUNT_WORDS = {"fenced": ("refused", "message", "of a deposed leader"),
                     "stale": ("ignored", "schedule", "older than its own"),
                     "dropped": ("dropped its schedule in", "silence", "of the daemon"),
                     "bad_messages": ("refused", "malformed daemon message", ""),
                     "tickets_refused": ("refused", "local request", "without a valid ticket")}


def _agent_counts(counts: dict) -> str:
    """An agent's non-zero counts in words, after a "; "; "" if there are none."""
    said = [" ".join(filter(None, (verb, _count(counts[k], noun), rest)))
            for k, (verb, noun, rest) in AGENT_COUNT_WORDS.items() if counts.get(k)]
    return f"; {', '.join(said)}" if said else ""


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 ("1 job", "0 jobs", "2 announced flows")."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr,
                        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")


def _until_signal(stop: threading.Event, alive=lambda: True) -> None:
    """Wait until SIGINT or SIGTERM sets ``stop`` or ``alive()`` is false; the process's
    previous handlers are back after (a caller that runs a command in-process, or a
    process it forks, would otherwise ignore SIGTERM)."""
    old = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stop.wait(0.5) and alive():
            pass
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@register(
    "daemon",
    arg("--config", required=True, metavar="C.toml", help="TOML cluster and daemon configuration"),
    arg("--metrics-port", type=int, default=None, help="Prometheus port (overrides the config; 0 = off)"),
    arg("--metrics-address", default=None, metavar="ADDRESS",
        help="address the Prometheus port listens on (overrides the config; default 127.0.0.1: the "
             "metrics answer without keys)"),
    arg("--keys", default=None, metavar="DIR",
        help="CURVE key directory (`jitsched keys init`; overrides [security] keys_dir): only its "
             "hosts' keys may register agents, only its clients' keys may submit"),
    arg("--insecure", action="store_true",
        help="serve endpoints that are not loopback without keys (plaintext, anyone may submit "
             "or register; [security] insecure)"),
    arg("--journal", default=None, metavar="PATH",
        help="sqlite journal of jobs and their progress (overrides [daemon] journal): a daemon "
             "restarted with the same file resumes every unfinished job"),
    arg("--quiet", action="store_true", help="log warnings only"),
)
def cmd_daemon(args: argparse.Namespace) -> int:
    from jitsched.config import load_config
    from jitsched.daemon import Daemon
    from jitsched.daemon.metrics import metrics_url

    _logging(not args.quiet)
    over: dict = {}
    if args.metrics_port is not None:
        over["metrics_port"] = args.metrics_port
    if args.metrics_address is not None:
        over["metrics_address"] = args.metrics_address
    if args.keys:
        over["keys_dir"] = str(Path(args.keys).expanduser())
    if args.insecure:
        over["insecure"] = True
    if args.journal:
        over["journal"] = str(Path(args.journal).expanduser())
    cfg = load_config(args.config, **over)
    if cfg.etcd_endpoints:
        return _replica(cfg)
    d = Daemon(cfg)
    try:
        d.start()
    except BaseException:
        d.stop()  # the journal, the key handler's thread, the planner: nothing left behind
        raise
    print(f"jitsched daemon: jobs {d.job_endpoint}, agents {d.agent_endpoint}, "
          + ("CURVE keys from " + cfg.keys_dir if cfg.keys_dir else "plaintext")
          + (f", metrics {metrics_url(cfg.metrics_address, d.metrics_port)}" if d.metrics_port else "")
          + (f", journal {cfg.journal} ({_count(len(d.state.restored), 'job')}, "
             f"{_count(d.state.background.counts['restored'], 'announced flow')} resumed)" if cfg.journal else ""),
          flush=True)
    return _serve(d)


def _serve(service) -> int:
    """Run a started daemon or replica until a signal or its failure; the exit status."""
    from jitsched.daemon.solver import describe

    stop = threading.Event()
    try:
        _until_signal(stop, lambda: service.running)
    finally:
        service.stop()
    if service.failure is not None:
        # the loop or a thread it needs died (traceback in the log): exit non-zero at
        # once, so that a supervisor restarts the daemon (with a journal, its jobs resume)
        print(f"jitsched daemon: stopped: {describe(service.failure)}", file=sys.stderr)
        return 1
    return 0


def _replica(cfg) -> int:
    """``jitsched daemon`` with ``[ha] etcd_endpoints``: one replica, following or leading."""
    from jitsched.daemon.replica import Replica

    r = Replica(cfg).start()
    print(f"jitsched daemon: replica on etcd {', '.join(cfg.etcd_endpoints)} (prefix {cfg.etcd_prefix}), "
          f"jobs {cfg.job_endpoint}, agents {cfg.agent_endpoint}; follows until elected", flush=True)
    return _serve(r)


@register(
    "agent",
    arg("--host", required=True, help="this host's name in the daemon's cluster"),
    arg("--daemon", default=DEFAULT_AGENT_ENDPOINT, help=f"agent endpoint (default {DEFAULT_AGENT_ENDPOINT}); daemon replicas: their "
                                                            "agent endpoints separated by commas"),
    _keys_arg("this host"),
    arg("--local-dir", default=None, metavar="DIR",
        help="directory of the local flow-registration socket (default $JITSCHED_RUN_DIR, "
             "$XDG_RUNTIME_DIR/jitsched-agents, /run/jitsched-agents for root, else "
             "<tmp>/jitsched-agents-<uid>)"),
    arg("--allow-uid", type=int, action="append", default=[], metavar="UID",
        help="a user besides root and the agent's own whose jobs may register flows (repeatable)"),
    *[arg(*flags, **kw) for flags, kw in argument_specs(AgentOptions)],
    arg("--egress-bps", type=float, default=None, metavar="BPS",
        help="this host's egress capacity, bits/s: a host the daemon's configuration lacks joins with it"),
    arg("--ingress-bps", type=float, default=None, metavar="BPS",
        help="this host's ingress capacity, bits/s (default: --egress-bps)"),
    arg("--address", default=None, help="this host's address, for a host that joins (peers of attached jobs)"),
    arg("--quiet", action="store_true", help="log warnings only"),
)
def cmd_agent(args: argparse.Namespace) -> int:
    """Exit status 2 when the daemon refuses the registration for good (an unknown host,
    another host's key), 1 when the agent failed otherwise."""
    from jitsched.agents.agent import Agent, RegistrationRefused

    _logging(not args.quiet)
    _check_host(args.host)
    bad_uids = [u for u in args.allow_uid if u < 0]
    if bad_uids:
        raise ValidationError(f"--allow-uid: a user id is >= 0, got {bad_uids[0]}")
    check_endpoint(args.daemon, "--daemon")
    opts = options_from_args(args, AgentOptions)
    if opts.backend == "tc":
        _check_dev(opts.dev)
    for name in ("egress_bps", "ingress_bps"):
        v = getattr(args, name)
        if v is not None and not 0 < v < float("inf"):
            raise ValidationError(f"--{name.replace('_', '-')}: must be a positive number of bits/s, got {v!r}")
    join = {"egress_bps": args.egress_bps, "address": args.address,
            "ingress_bps": args.ingress_bps if args.ingress_bps is not None else args.egress_bps}
    a = Agent(args.host, args.daemon, opts, keys=args.keys, local_dir=args.local_dir,
              allowed_uids=args.allow_uid, join=join)
    a.start()
    ingress = f" + tc-ingress at {opts.ingress_share:g} of the ingress rate" if opts.enforce_ingress else ""
    if opts.backend == "tc":
        ingress += f", background floor {opts.background_floor:g} of each port"
    print(f"jitsched agent {args.host}: daemon {args.daemon}, backend {opts.backend}{ingress}, "
          f"{'CURVE' if a.keys is not None else 'plaintext'}, local socket {a.local_name}", flush=True)
    stop = threading.Event()
    try:
        _until_signal(stop, lambda: a.running)
    finally:
        a.stop()
    if isinstance(a.failure, RegistrationRefused):
        raise a.failure  # the operator's --host or key: one line, exit 2
    if a.failure is not None:
        # the ingress is ordered by default with tc: a host that cannot (no ifb module,
        # say) should learn that the egress alone is one flag away
        hint = (" (while ordering the ingress, on by default with tc: --no-ingress orders the egress only)"
                if opts.enforce_ingress and a.backend is not None and a.in_backend is None else "")
        print(f"jitsched agent {args.host}: stopped: {type(a.failure).__name__}: {a.failure}{hint}",
              file=sys.stderr)
        return 1
    return 0


@register(
    "submit",
    arg("file", metavar="JOB.json|GRAPH", help="native job map, native workload (all its jobs), or GraphDef"),
    JOB_DAEMON_ARG,
    arg("--ps-host", default=None, help="GraphDef: host of the parameter server task"),
    arg("--worker-host", default=None, help="GraphDef: host of the worker task"),
    arg("--timeout-s", type=float, default=10.0, help="reply timeout in seconds"),
    _keys_arg("this client"),
    KEY_NAME_ARG,
    arg("--json", action="store_true", help="print {job_ids: [...]}"),
)
def cmd_submit(args: argparse.Namespace) -> int:
    """Submit the jobs of ``args.file`` in order; stop at the first the daemon refuses.

    Jobs before a refused one stay submitted: stdout (or ``--json``) lists them, and
    the error line names the refused job and how many were not sent.
    """
    from jitsched.client import Client, load_graph_job
    from jitsched.protocol import RemoteError

    jobs = _jobs_of(args, load_graph_job)
    ids: list[str] = []
    failure: tuple[int, Exception] | None = None
    check_endpoint(args.daemon, "--daemon")
    with Client(args.daemon, timeout_s=args.timeout_s, keys=args.keys, key_name=args.key_name) as c:
        for k, job in enumerate(jobs):
            try:
                ids.append(c.submit_job(job))
            except (RemoteError, TimeoutError) as exc:
                failure = (k, exc)
                break
    out: dict = {"job_ids": ids}
    if failure is not None:
        k, exc = failure
        name = jobs[k].get("id") if isinstance(jobs[k].get("id"), str) else None
        out |= {"failed": {"index": k, "id": name, "error": str(exc)}, "not_sent": len(jobs) - k - 1}
    if args.json:
        emit_json(out)
    else:
        for i in ids:
            print(f"submitted {i}")
    if failure is None:
        return 0
    what = f"job {name!r}" if name else f"job {k + 1}"
    if len(jobs) > 1:
        what += f" ({k + 1} of {len(jobs)})"
    # a timeout leaves the job's fate unknown (exit 1); a refusal is the input's (exit 2)
    verb = "got no reply for" if isinstance(exc, TimeoutError) else "daemon refused"
    done = (f"; submitted before it: {', '.join(ids)}" if ids else "")
    left = f"; not sent: {len(jobs) - k - 1}" if k + 1 < len(jobs) else ""
    print(f"jitsched submit: error: {verb} {what}: {exc}{done}{left}", file=sys.stderr)
    return 1 if isinstance(exc, TimeoutError) else 2


def _jobs_of(args: argparse.Namespace, load_graph_job) -> list[dict]:
    """The job maps ``submit`` sends: a native job, every job of a native workload (``.json``
    or ``.json.gz``), or a GraphDef (JSON with ``node``, or protobuf text) as one job."""
    from jitsched.dag.model import read_json

    p = Path(args.file)
    if p.suffix == ".json" or p.name.endswith(".json.gz"):
        obj = read_json(p)
        if not isinstance(obj, dict):
            raise ValidationError(f"{p}: expected a job, a workload or a GraphDef (a JSON object), "
                                  f"got {type(obj).__name__ if obj is not None else 'null'}")
        if "jobs" in obj and "computes" not in obj:
            # a workload file: submit each job
            jobs = obj["jobs"]
            if not isinstance(jobs, list) or not all(isinstance(j, dict) for j in jobs):
                raise ValidationError(f"{p}: jobs: expected a list of job objects")
            if not jobs:
                raise ValidationError(f"{p}: the workload has no jobs to submit")
            return jobs
        if "node" not in obj:
            return [obj]
    elif p.is_dir():
        raise ValidationError(f"{p}: cannot read (Is a directory)")
    elif not p.exists():
        raise ValidationError(f"{p}: no such file")
    if not (args.ps_host and args.worker_host):
        raise ValidationError(f"{p}: a GraphDef needs --ps-host and --worker-host")
    return [load_graph_job(p, ps_host=args.ps_host, worker_host=args.worker_host).to_dict()]


def _replicas(args: argparse.Namespace) -> int:
    """``status --replicas``: each endpoint's role, a line each (or one JSON map by endpoint)."""
    from jitsched.client import Client
    from jitsched.protocol import MsgType, split_endpoints

    out: dict[str, dict] = {}
    for ep in split_endpoints(args.daemon):
        try:
            with Client(ep, timeout_s=args.timeout_s, keys=args.keys, key_name=args.key_name) as c:
                out[ep] = c.request(MsgType.STATUS, {"replica": True})
        except TimeoutError as exc:
            out[ep] = {"role": UNREACHABLE, "error": str(exc)}
    if args.json:
        emit_json(out)
    else:
        for ep, r in out.items():
            print(f"{ep}: {_replica_line(r)}")
    return 1 if any(r["role"] == UNREACHABLE for r in out.values()) else 0


def _replica_line(r: dict) -> str:
    """One replica's answer to ``status --replicas``, as its line says it."""
    from jitsched.daemon.logs import escape

    if r["role"] == UNREACHABLE:
        return f"UNREACHABLE ({escape(r['error'])})"
    leader = r.get("leader")
    seen = (f"leader {leader['job_endpoint']} epoch {leader['epoch']}" if leader
            else "no leader elected" if not r.get("etcd_error") else "no leader known")
    return (f"{r['role']}, epoch {r['epoch']}"
            + (f", sees {seen}, {r['leaderships']} leaderships so far" if r["role"] == FOLLOWER else "")
            + (f", ETCD UNREACHABLE: {escape(r['etcd_error'])}" if r.get("etcd_error") else "")
            + (f", LEADING FAILED {r['lead_failures']} times, last: {escape(r['last_lead_failure'])}"
               if r.get("lead_failures") else ""))


@register(
    "cancel",
    arg("job_ids", nargs="+", metavar="JOB_ID", help="the id each job was submitted with"),
    JOB_DAEMON_ARG,
    arg("--timeout-s", type=float, default=10.0, help="reply timeout in seconds"),
    _keys_arg("this client"),
    KEY_NAME_ARG,
    arg("--json", action="store_true", help="print {jobs: {JOB_ID: {state} or {error, message}}}"),
)
def cmd_cancel(args: argparse.Namespace) -> int:
    """Exit status 0 when every job was cancelled or had ended already, 2 when the daemon
    refused one (an unknown id, another client's job), 1 when it did not answer."""
    from jitsched.client import Client
    from jitsched.daemon.logs import escape  # ids and errors come from clients: one line each
    from jitsched.protocol import RemoteError

    check_endpoint(args.daemon, "--daemon")
    out: dict[str, dict] = {}
    with Client(args.daemon, timeout_s=args.timeout_s, keys=args.keys, key_name=args.key_name) as c:
        for jid in args.job_ids:
            try:
                out[jid] = {"state": c.cancel_job(jid)["state"]}
            except RemoteError as exc:
                out[jid] = {"error": exc.code, "message": exc.message}
            except TimeoutError as exc:
                out[jid] = {"error": "timeout", "message": str(exc)}
                break
    if args.json:
        emit_json({"jobs": out})
    for jid, r in out.items():
        if "error" in r:
            print(f"jitsched cancel: error: {escape(jid)}: {r['error']}: {escape(r['message'])}", file=sys.stderr)
        elif not args.json:
            # a job that had finished or failed keeps that end
            print(f"cancelled {escape(jid)}" if r["state"] == "cancelled" else f"{escape(jid)}: already {r['state']}")
    if any(r.get("error") == "timeout" for r in out.values()):
        return 1
    return 2 if any("error" in r for r in out.values()) else 0


@register(
    "status",
    JOB_DAEMON_ARG,
    arg("--timeout-s", type=float, default=5.0, help="reply timeout in seconds"),
    _keys_arg("this client"),
    KEY_NAME_ARG,
    arg("--json", action="store_true", help="print the status map as JSON"),
    arg("--replicas", action="store_true",
        help="ask each endpoint of --daemon for its own role instead: leader, follower (and the "
             "leader it sees, whether etcd answers it) or single; exit 1 if one does not answer"),
)
def cmd_status(args: argparse.Namespace) -> int:
    from jitsched.client import Client
    from jitsched.daemon.logs import escape  # ids and errors come from clients: one line each

    check_endpoint(args.daemon, "--daemon")
    if args.replicas:
        return _replicas(args)
    with Client(args.daemon, timeout_s=args.timeout_s, keys=args.keys, key_name=args.key_name) as c:
        try:
            st = c.status()
        except TimeoutError as exc:
            print(f"jitsched status: {exc}", file=sys.stderr)
            return 1
    if args.json:
        emit_json(st)
        return 0
    p = st.get("plan") or {}
    if st.get("epoch"):
        print(f"leader of daemon replicas, epoch {st['epoch']}")
    print(f"plan seq {p.get('seq', 0)}: {p.get('jobs', 0)} jobs, {p.get('flows', 0)} flows, "
          f"{p.get('late', 0)} planned late, solve {p.get('solve_s', 0) * 1e3:.1f} ms")
    if "planner" in st:
        print(f"planner: {escape(st['planner'])}, {st.get('plans_failed', 0)} plans failed"
              + (f" (last: {escape(st['last_plan_error'])})" if st.get("last_plan_error") else ""))
    hs = st.get("hosts")
    if hs:
        print(f"hosts: {hs['in_cluster']} in the cluster ({hs['configured']} configured, join "
              f"{hs['host_join']}), {len(hs['joined'])} joined, {len(hs['left'])} left"
              + "".join(f"\n  joined {escape(h)} {j['egress_bps'] / 1e9:g}/{j['ingress_bps'] / 1e9:g} Gbit/s"
                        for h, j in sorted(hs["joined"].items()))
              + "".join(f"\n  left   {escape(h)}: {escape(x['why'])}" for h, x in sorted(hs["left"].items())))
    crit_floor = (st.get("critical") or {}).get("floor")
    for h, a in sorted(st["agents"].items()):
        print(f"  agent {h:<8} {'up' if a['up'] else 'DOWN':<5} backend {a['backend']:<7} "
              f"acked {a['acked_seq']}"
              # what critical jobs' reservations on its ports are planned on
              + (f", reserves {a['reservable']:.3g} of its ports (floor {a['background_floor']:g}"
                 + (f", {crit_floor:g} while a critical job holds them"
                    if crit_floor is not None and crit_floor < a["background_floor"] and a.get("holds_floor")
                    else "")
                 + f", payload {a['payload_share']:.3g})" if a["reservable"] != 1.0 else "")
              + (f", keeping {a['floor_held']:g} for unranked traffic while a critical job holds its ports"
                 if a.get("floor_held") is not None else "")
              + (f" CLOCK OFF by {a['clock_offset_s']:+.3f} s (corrected by the agent)" if a.get("clock_off") else "")
              + (f" NOT ACKING seq {a['seq']} (re-sends stopped after {a['resends']})"
                 if a.get("resends_stopped") else "")
              + (" CAPS NOT ENFORCED (its backend cannot hold traffic towards reserved hosts)"
                 if a.get("caps_unenforced") else f" capping traffic to {_count(a['caps_held'], 'reserved host')}"
                 if a.get("caps_held") else "")
              + _agent_counts(a.get("counts") or {}))
        att = a.get("attached") or {}
        for j, x in sorted((att.get("jobs") or {}).items()):
            print(f"    attached {escape(j):<20} {_count(x['conns'], 'connection')} ({x['scheduled']} scheduled, "
                  f"{x['unmapped']} to unknown peers), rank {x['rank']}, {x['bytes_sent'] / 1e6:.1f} MB sent, "
                  f"{x['bytes_classified'] / 1e6:.1f} MB classified")
        if att.get("scan_errors"):
            print(f"    attach scans failed: {att['scan_errors']} of {att['scans'] + att['scan_errors']}")
    for j, s in st["jobs"].items():
        jct = f"JCT {s['jct_s']:.2f} s" if s["jct_s"] is not None else ""
        print(f"  job {escape(j):<20} {s['state']:<10} transfers {s['transfers_done']}/{s['transfers']} {jct}"
              + (f" owner {escape(s['owner'])}" if s.get("owner") else "")
              + (f" critical: {s['guarantee']}" if s.get("guarantee") else "")
              + (f" AT RISK: {escape(s['at_risk'])}" if s.get("at_risk") else "")
              + (f" ERROR {escape(s['error'])}" if s.get("error") else ""))
        rec = s.get("recurring")
        if rec:
            print(f"    recurring {escape(j)}: {rec.get('iterations', 0)} iterations"
                  + (f", mean {rec['iteration_s_mean']:.3f} s, p95 {rec['iteration_s_p95']:.3f} s"
                     if rec.get("iteration_s_mean") is not None else "")
                  + (f", estimates off by {100 * rec['estimate_error']:.1f} %"
                     if rec.get("estimate_error") is not None else "")
                  + (f", LEARNED ESTIMATES PAST THE LIMITS {rec['estimates_over_limits']} times (planned "
                     "with the last within them)" if rec.get("estimates_over_limits") else ""))
    bg = st.get("background") or {}
    if bg.get("announced") or bg.get("restored"):
        print(f"  background: {_count(bg['held'], 'announced flow')} held ({bg['announced']} announced, "
              + (f"{bg['restored']} resumed from the journal, " if bg.get("restored") else "")
              + f"{bg['finished']} finished, {bg['expired']} expired unfinished"
              + (f", {bg['dropped']} dropped with their host" if bg.get("dropped") else "") + ")")
    if st.get("jobs_omitted"):
        print(f"  ({st['jobs_omitted']} older ended jobs not listed)")
    if st.get("jobs_pruned"):
        print(f"  ({st['jobs_pruned']} ended jobs pruned after their retention, "
              f"{st.get('pages', 1)} status pages)")
    crit = st.get("critical") or {}
    if any(crit.get(k) for k in ("reserved", "refused", "admitted_as_normal", "met", "missed")):
        print(f"  critical jobs (JCT within {1 + crit.get('epsilon', 0.0):g}x isolated): "
              f"{crit.get('reserved', 0)} holding reservations, {crit.get('refused', 0)} refused (no reservation "
              f"on what other critical jobs reserve could hold them), {crit.get('admitted_as_normal', 0)} admitted "
              f"as normal instead; {crit.get('met', 0)} finished within it, {crit.get('missed', 0)} did not"
              + (f", OVERDUE now: {', '.join(escape(j) for j in crit['overdue'])}" if crit.get("overdue") else "")
              + (f", AT RISK (reserved on more than an agent can give): "
                 f"{', '.join(escape(j) for j in crit['at_risk'])}" if crit.get("at_risk") else "")
              + (f"; {_count(crit['hosts_held'], 'host')} held" if crit.get("hosts_held") else "")
              + (" (the others' unranked traffic into each held to "
                 + ", ".join(f"{escape(h)} {cap * 8e-6:.3g} Mbit/s" for h, cap in sorted(crit["caps_Bps"].items()))
                 + ")" if crit.get("caps_Bps") else "")
              + (f", their agents keeping {crit['floor']:g} for unranked traffic" if crit.get("hosts_held")
                 and crit.get("floor") is not None else "")
              + (f", NOT CAPPED (no address): {', '.join(escape(h) for h in crit['hosts_unaddressed'])}"
                 if crit.get("hosts_unaddressed") else ""))
    if st.get("journal_errors"):
        print(f"  JOURNAL: {st['journal_errors']} writes failed (last: {escape(st.get('journal_last_error', ''))}); "
              "submissions are refused until it can be written"
              + (f"; {st['journal_held']} writes held, not yet durable" if st.get("journal_held") else ""))
    for j, why in (st.get("jobs_not_resumed") or {}).items():
        print(f"  job {escape(j)} not resumed after the restart: {escape(why)}")
    loop = st.get("loop") or {}
    if loop.get("loop_errors"):
        print(f"  loop: {loop['loop_errors']} messages failed inside the daemon (contained; see its log)")
    for title, counts in (("loop", loop), ("agents", st.get("agent_counts") or {})):
        refused = {k: v for k, v in counts.items()
                   if v and ("refused" in k or "dropped" in k or "failed" in k or "stopped" in k or "down" in k)}
        if refused:
            print(f"  {title}: " + ", ".join(f"{k} {v}" for k, v in sorted(refused.items())))
    for name, use in (st.get("clients") or {}).items():
        # each client's use of its quota: setting used/quota
        print(f"  client {escape(name)}: " + ", ".join(f"{k.removeprefix('max_')} {u}/{q}" for k, (u, q) in use.items()))
    mem = st.get("memory")
    if mem:
        print(f"  memory: {mem['rss_bytes'] / 2**20:.0f} MiB resident of {mem['ceiling_bytes'] / 2**20:.0f} MiB "
              f"(max_memory_bytes), ended jobs ~{mem['ended_job_bytes'] / 2**20:.1f} MiB"
              + (f", {mem['refused']} submissions refused for memory" if mem.get("refused") else ""))
    return 0


@register(
    "attach",
    arg("job", metavar="JOB", help="the job's id in the daemon (submitted with this client's key)"),
    arg("--host", required=True, help="the host whose agent classifies the connections; run this there"),
    arg("--pid", type=int, action="append", default=[], metavar="PID",
        help="a process of the job; the children it forks are the job's too (repeatable)"),
    arg("--cgroup", default=None, metavar="PATH", help="a cgroup v2 directory under /sys/fs/cgroup: its "
                                                       "processes and those of the cgroups below it"),
    arg("--port", type=int, action="append", default=[], metavar="PORT",
        help="connections with this local or remote TCP port (repeatable)"),
    arg("--peer", action="append", default=[], metavar="ADDR[:PORT]=HOST",
        help="the host a remote address (and port) belongs to, besides the addresses the daemon's "
             "cluster gives the job's hosts (repeatable)"),
    arg("--detach", action="store_true", help="undo this user's attachments of JOB on HOST"),
    JOB_DAEMON_ARG,
    arg("--timeout-s", type=float, default=5.0, help="reply timeout in seconds"),
    _keys_arg("this client"),
    KEY_NAME_ARG,
    arg("--local-dir", default=None, metavar="DIR", help="directory of the agent's local socket "
                                                         "(as `jitsched agent --local-dir`)"),
    arg("--json", action="store_true", help="print the agent's reply as JSON"),
)
def cmd_attach(args: argparse.Namespace) -> int:
    """The daemon checks the job is this client's; the agent, that the processes are this user's."""
    from jitsched.client import Client
    from jitsched.localreg import attach, detach, local_address

    named = [n for n, v in (("--pid", args.pid), ("--cgroup", args.cgroup), ("--port", args.port)) if v]
    if len(named) != (0 if args.detach else 1):
        raise ValidationError("name exactly one of --pid, --cgroup and --port" if not args.detach
                              else "--detach takes none of --pid, --cgroup and --port")
    _check_host(args.host)
    if any(p <= 0 for p in args.pid):
        raise ValidationError(f"--pid: a process id is > 0, got {min(args.pid)}")
    bad_ports = [p for p in args.port if not 0 < p < 65536]
    if bad_ports:
        raise ValidationError(f"--port: a TCP port is within 1..65535, got {bad_ports[0]}")
    peers: dict[str, str] = {}
    for p in args.peer:
        addr, eq, host = p.partition("=")
        if not (eq and addr and host):
            raise ValidationError(f"--peer {p!r}: expected ADDR[:PORT]=HOST")
        peers[addr] = host
    check_endpoint(args.daemon, "--daemon")
    with Client(args.daemon, timeout_s=args.timeout_s, keys=args.keys, key_name=args.key_name) as c:
        try:
            # the ticket is for this user: the agent checks it against the caller's uid
            known = c.attach_job(args.job, args.host, uid=os.geteuid())
        except TimeoutError as exc:
            print(f"jitsched attach: {exc}", file=sys.stderr)
            return 1
    # a peer named as a host the job does not use could never be ranked: its group is no one's
    strangers = sorted({h for h in peers.values() if h not in known.get("hosts", ())})
    if strangers and "hosts" in known:
        raise ValidationError(f"--peer: {', '.join(map(repr, strangers))} not among job {args.job!r}'s hosts "
                              f"({', '.join(known['hosts'])})")
    where = local_address(args.host, "", args.local_dir)
    flow_job = known["job_id"]  # the id the job's flows go by in the agents' schedules (client-scoped)
    if args.detach:
        got = detach(where, flow_job, timeout_s=args.timeout_s)
    else:
        got = attach(where, flow_job, pids=args.pid or None, cgroup=args.cgroup, ports=args.port or None,
                     peers=known["peers"] | peers, ticket=known.get("ticket"), timeout_s=args.timeout_s)
    if args.json:
        emit_json(got)
    elif args.detach:
        print(f"detached job {args.job} on {args.host}: {_count(got['detached'], 'attachment')} removed")
    else:
        print(f"attached job {args.job} on {args.host}: {_count(got['attachments'], 'attachment')}, "
              f"{_count(got['conns'], 'connection')} found now")
    return 0


@register(
    "demo",
    arg("--quick", action="store_true", help="about 15 s instead of about 35 s"),
    arg("--seed", type=seed, default=0, help="workload seed"),
    arg("--json", action="store_true",
        help="print {jobs, completed, plans_failed, planner, lat_hit_rate, mean_jct_s, solve_s_p50} "
             "(progress on stderr)"),
)
def cmd_demo(args: argparse.Namespace) -> int:
    """Exit status 1 when a job did not complete or a plan failed."""
    from jitsched.demo import SUMMARY_KEYS, demo_exit_code, print_lines, run_demo, stderr_lines

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    out = run_demo(quick=args.quick, seed=args.seed, say=stderr_lines if args.json else print_lines)
    if args.json:
        emit_json({k: out[k] for k in SUMMARY_KEYS})
    return demo_exit_code(out)
