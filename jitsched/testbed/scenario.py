"""Testbed workloads: the scenarios (the paper's DL jobs and file transfers) and workload files, byte sizes scaled to the link rate, and their fluid-simulator prediction."""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass, replace

import numpy as np

from jitsched.dag.model import Background, Cluster, Host, Job, Transfer, Workload
from jitsched.errors import ValidationError
from jitsched.plan import DEFAULT_SLOT_S
from jitsched.testbed import DEFAULT_LINK_MBIT, MAX_HOSTS, Testbed, TestbedError
from jitsched.testbed.bgtraffic import BackgroundFlow
from jitsched.testbed.measure import GOODPUT
from jitsched.workloads.shapes import SHAPES

PAPER_LINK_BPS = 1e9  # the paper's links; byte sizes scale by link rate / this
PAPER_MODELS = ("lenet", "alexnet", "vgg16", "inception_v3", "resnet152")
PAPER_FILE_GBIT = (5.0, 10.0, 20.0, 30.0, 40.0)  # file-transfer jobs of the paper's §4.1, at 1 Gbit/s


@dataclass(frozen=True)
class Scenario:
    """A testbed workload: DL training iterations and unscheduled file transfers on a small cluster.

    Byte sizes (DAG transfers and files alike) are the paper's multiplied by
    ``link_mbit`` / 1000, so every transfer takes as long on the testbed's
    links as on the paper's 1 Gbit/s ones and the compute/communication
    balance is kept. Compute times are the packaged DAGs' own (GPU-scaled).

    Attributes
    ----------
    hosts : int
        Emulated hosts.
    jobs : int
        DL jobs, models in equal shares (each model ``jobs / len(models)``
        times, rounded, in a seeded random order), parameter server and worker
        on random distinct hosts, Poisson arrivals at ``rate_per_s``.
    rate_per_s : float
        DL job arrival rate, jobs/s.
    models : tuple of str
        Model DAGs (:data:`jitsched.workloads.MODELS`).
    files : int
        File transfers between random distinct hosts, sizes in equal shares of ``file_gbit``.
    file_gbit : tuple of float
        File sizes at the paper's 1 Gbit/s, Gbit (scaled like the DAG bytes).
    file_lead_s : float
        The first file starts at 0 s and the first DL job ``file_lead_s``
        later, so background is already moving when jobs arrive; the other
        files arrive uniformly over ``[0, last job arrival]``.
    link_mbit : float
        Link rate each way, Mbit/s.
    bulk_share : float
        An unannounced constant-rate stream (UDP, which does not yield as TCP
        does) of this share of the link, for the whole run, from the host DL
        transfers use least into the one they use most (0: none).
    critical_model : str
        "" (none), or the model of one more job, ``<model>-critical``, submitted
        as ``critical``: parameter server on the first host, worker on the
        second, arriving at the median arrival of the other jobs. Its files
        all start at 0 s, each on one of its four ports in turn (out of its
        server, into its worker, out of its worker, into its server; the other
        end one of the remaining hosts), and :func:`jitsched.testbed.e2e.run_scenario`
        runs it alone first for its isolated JCT (:mod:`jitsched.testbed.classes`).
    shape : str
        ``"ps"``: each DL job one parameter server and one worker; ``"ps-sharded"``:
        its tensors sharded over ``servers`` servers with the other hosts its
        workers; ``"allreduce"``: a ring all-reduce over all the hosts;
        ``"mixed"``: the three in equal shares, a ``ps`` job then one server
        with every other host its worker. Hosts in a seeded random order per
        job (:func:`jitsched.workloads.shapes.expand_job`).
    servers : int
        Parameter servers of a ``ps-sharded`` job.
    """

    hosts: int
    jobs: int
    rate_per_s: float
    models: tuple[str, ...]
    files: int
    file_gbit: tuple[float, ...] = PAPER_FILE_GBIT
    file_lead_s: float = 2.0
    link_mbit: float = DEFAULT_LINK_MBIT
    bulk_share: float = 0.0
    critical_model: str = ""
    shape: str = "ps"
    servers: int = 1


SCENARIOS: dict[str, Scenario] = {
    # about 30 s of jobs per policy: the three models with few transfers (the
    # runner opens one TCP connection per transfer; Inception and ResNet152
    # open 850 and 2000), two of each, among 40-80 s worth of files
    "quick": Scenario(hosts=4, jobs=6, rate_per_s=0.5, models=("lenet", "alexnet", "vgg16"),
                      files=3, file_gbit=(5.0, 10.0, 20.0)),
    # the paper's five models in equal shares and its five file sizes
    "paper-mini": Scenario(hosts=8, jobs=15, rate_per_s=0.5, models=PAPER_MODELS, files=10),
    # quick's jobs, no files, and most of the busiest host's ingress taken by traffic no agent
    # schedules: planned on the line rate, transfers into it arrive after their LATs
    "live-capacity": Scenario(hosts=4, jobs=6, rate_per_s=0.5, models=("lenet", "alexnet", "vgg16"),
                              files=0, bulk_share=0.85),
    # a critical VGG16 among quick's normal jobs and four files of 20 Gbit (scaled: 20 s of
    # the link each), one on each of its ports; measured alone first, then among them
    "classes": Scenario(hosts=4, jobs=6, rate_per_s=0.5, models=("lenet", "alexnet", "vgg16"),
                        files=4, file_gbit=(20.0,), critical_model="vgg16"),
    # jobs of two parameter servers and two workers on the four hosts: a worker takes its
    # tensors from both servers at once, which per-sender ranks would serve one after the other
    "sharded": Scenario(hosts=4, jobs=4, rate_per_s=0.5, models=("alexnet", "vgg16"), files=0,
                        shape="ps-sharded", servers=2),
    # the same jobs as ring all-reduces over the four hosts, in a random order per job
    "rings": Scenario(hosts=4, jobs=4, rate_per_s=0.5, models=("alexnet", "vgg16"), files=0,
                      shape="allreduce"),
    # two jobs of each shape: a server with three workers, two servers with two workers, a
    # ring of four; a ring's pairs each carry a whole port's bytes where a server's port is
    # split over its workers, which jit's keys weigh (jitsched.policies.jit.ring_hosts)
    "mixed": Scenario(hosts=4, jobs=6, rate_per_s=0.5, models=("alexnet", "vgg16"), files=0,
                      shape="mixed", servers=2),
}

# Modules of the daemon side that `testbed run` drives.
REQUIRED_MODULES = ("jitsched.daemon", "jitsched.client.runner", "jitsched.agents.agent")


def get_scenario(name: str) -> Scenario:
    """The scenario called ``name``; raise TestbedError naming the known ones otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise TestbedError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def scale_job(job: Job, scale: float) -> Job:
    """``job`` with every transfer's bytes multiplied by ``scale`` (at least 1 byte; compute times kept)."""
    transfers = tuple(Transfer(t.id, t.src, t.dst, max(1.0, float(round(t.bytes * scale))))
                      for t in job.transfers)
    return replace(job, transfers=transfers)


def _equal_shares(rng: np.random.Generator, items: tuple, n: int) -> list:
    # every item ceil/floor(n / len) times, in random order: a small sample keeps the mix
    pool = [items[k % len(items)] for k in range(n)]
    return [pool[i] for i in rng.permutation(n)]


def build_workload(tb_or_hosts: Testbed | int, link_mbit: float, scenario: str, seed: int = 0
                   ) -> tuple[Workload, list[BackgroundFlow]]:
    """The scenario's DL jobs (native format) and its file transfers, for a testbed.

    Parameters
    ----------
    tb_or_hosts : Testbed or int
        The testbed (host names and addresses) or a host count (names ``h0..``).
    link_mbit : float
        Link rate, Mbit/s; sets the byte scale (``link_mbit`` / 1000).
    scenario : str
        A key of :data:`SCENARIOS`.
    seed : int
        Same seed, same workload.

    Returns
    -------
    (Workload, list of BackgroundFlow)
        Jobs ``<model>-<k>`` and files ``file-<k>``; arrival times in seconds from the run's start.
    """
    from jitsched.workloads.paper import load_model_job

    sc = get_scenario(scenario)
    if isinstance(tb_or_hosts, Testbed):
        names = [h.name for h in tb_or_hosts.hosts]
        addrs = [h.address for h in tb_or_hosts.hosts]
    else:
        names = [f"h{i}" for i in range(tb_or_hosts)]
        addrs = [None] * tb_or_hosts
    bps = link_mbit * 1e6
    cluster = Cluster(tuple(Host(n, bps, bps, a) for n, a in zip(names, addrs, strict=True)))
    rng = np.random.default_rng(seed)
    scale = bps / PAPER_LINK_BPS
    arrivals = np.cumsum(rng.exponential(1.0 / sc.rate_per_s, size=sc.jobs))
    arrivals -= arrivals[0] if len(arrivals) else 0.0
    models = _equal_shares(rng, sc.models, sc.jobs)
    hosts = [rng.choice(len(names), size=2, replace=False) for _ in range(sc.jobs)]
    lead = sc.file_lead_s if sc.files else 0.0
    arrivals += lead
    span = float(arrivals[-1]) if len(arrivals) else 0.0
    sizes = _equal_shares(rng, sc.file_gbit, sc.files)
    if sc.critical_model:
        bg = critical_files(names, [g * 1e9 / 8 * scale for g in sizes])
    else:
        bg = []
        for k, gbit in enumerate(sizes):
            s, d = rng.choice(len(names), size=2, replace=False)
            at = float(rng.uniform(0.0, span)) if k else 0.0
            bg.append(BackgroundFlow(f"file-{k}", names[s], names[d], gbit * 1e9 / 8 * scale, at))
    jobs = [scale_job(load_model_job(m, names[ps], names[w], f"{m}-{k}", float(a)), scale)
            for k, (m, (ps, w), a) in enumerate(zip(models, hosts, arrivals, strict=True))]
    if sc.shape == "mixed":
        shapes = _equal_shares(rng, SHAPES, sc.jobs)
        jobs = [_shaped(job, [names[i] for i in rng.permutation(len(names))], shape,
                        sc.servers if shape == "ps-sharded" else 1)
                for job, shape in zip(jobs, shapes, strict=True)]
    elif sc.shape != "ps":
        jobs = [_shaped(job, [names[i] for i in rng.permutation(len(names))], sc.shape, sc.servers)
                for job in jobs]
    if sc.critical_model:
        at = float(np.median(arrivals)) if len(arrivals) else lead
        crit = load_model_job(sc.critical_model, names[0], names[1], f"{sc.critical_model}-critical", at)
        jobs.append(replace(scale_job(crit, scale), job_class="critical"))
    return Workload(cluster, tuple(jobs)), bg


def file_scenario(wl: Workload, link_mbit: float) -> Scenario:
    """The :class:`Scenario` a workload of one's own (:func:`on_testbed`) runs as: its hosts,
    jobs and background flows at ``link_mbit`` (no arrival rate or models: the jobs are the file's)."""
    return Scenario(hosts=len(wl.cluster), jobs=len(wl.jobs), rate_per_s=0.0, models=(),
                    files=len(wl.background), link_mbit=link_mbit)


def on_testbed(wl: Workload, tb_or_hosts: Testbed | int, link_mbit: float
               ) -> tuple[Workload, list[BackgroundFlow]]:
    """A workload of one's own (native format) as a testbed runs it.

    Its i-th host runs as the testbed's i-th (``h<i>``); every byte count, of
    transfers and background flows alike, is multiplied by ``link_mbit`` over
    the workload's link rate, so each transfer takes as long on the testbed as
    on the workload's links (compute times and arrivals kept), as the
    scenarios' bytes are.

    Parameters
    ----------
    wl : Workload
        Its hosts all of one link rate, the same each way.
    tb_or_hosts : Testbed or int
        A testbed of ``len(wl.cluster)`` hosts, or that count (names ``h0..``).
    link_mbit : float
        The testbed's link rate, Mbit/s.

    Returns
    -------
    (Workload, list of BackgroundFlow)
        The jobs (ids kept) and the background flows as the testbed's files.

    Raises
    ------
    ValidationError
        If the hosts' rates differ or the workload has no jobs.
    TestbedError
        If the testbed's host count is not the workload's, or a testbed cannot have it.
    """
    names = [h.name for h in tb_or_hosts.hosts] if isinstance(tb_or_hosts, Testbed) else [
        f"h{i}" for i in range(tb_or_hosts)]
    addrs = [h.address for h in tb_or_hosts.hosts] if isinstance(tb_or_hosts, Testbed) else [None] * len(names)
    if len(names) != len(wl.cluster):
        raise TestbedError(f"the workload has {len(wl.cluster)} hosts, the testbed {len(names)}")
    if not 2 <= len(names) <= MAX_HOSTS:
        raise TestbedError(f"a testbed has 2 to {MAX_HOSTS} hosts; the workload has {len(names)}")
    if not wl.jobs:
        raise ValidationError("the workload has no jobs to run")
    rates = {r for h in wl.cluster.hosts for r in (h.egress_bps, h.ingress_bps)}
    if len(rates) != 1:
        raise ValidationError("a testbed's links are all of one rate, the same each way; the workload's hosts "
                              f"have {', '.join(f'{r:g}' for r in sorted(rates))} bit/s")
    scale = link_mbit * 1e6 / rates.pop()
    name = dict(zip(wl.cluster.names, names, strict=True))
    jobs = tuple(scale_job(replace(
        j, computes=tuple(replace(c, host=name[c.host]) for c in j.computes),
        transfers=tuple(replace(t, src=name[t.src], dst=name[t.dst]) for t in j.transfers)), scale)
        for j in wl.jobs)
    bps = link_mbit * 1e6
    cluster = Cluster(tuple(Host(n, bps, bps, a) for n, a in zip(names, addrs, strict=True)))
    bg = [BackgroundFlow(b.id, name[b.src], name[b.dst], max(1.0, float(round(b.bytes * scale))), b.arrival_s)
          for b in wl.background]
    return Workload(cluster, jobs), bg


def _shaped(job: Job, hosts: list[str], shape: str, servers: int) -> Job:
    """``job`` (one server, one worker) as ``shape``: its tensors on the first ``servers`` of
    ``hosts`` (one for ``ps``) with the rest its workers, or a ring all-reduce over ``hosts``
    in their order."""
    from jitsched.workloads.shapes import expand_job

    if shape == "allreduce":
        if len(hosts) < 3:
            raise TestbedError(f"a ring all-reduce scenario needs at least 3 hosts, got {len(hosts)}")
        return expand_job(job, "allreduce", [], hosts)
    if len(hosts) <= servers:
        raise TestbedError(f"{servers} parameter servers need at least {servers + 1} hosts, got {len(hosts)}")
    return expand_job(job, shape, hosts[:servers], hosts[servers:])


def critical_files(names: list[str], sizes: list[float]) -> list[BackgroundFlow]:
    """Files ``file-<k>`` of ``sizes`` bytes, all from 0 s, on a critical job's ports in turn.

    The job's parameter server is ``names[0]`` and its worker ``names[1]``: file
    ``k`` leaves the server, enters the worker, leaves the worker, enters the
    server (``k`` mod 4), its other end one of the remaining hosts: with two of
    them, no two of the first four files share a port.
    """
    others = names[2:]
    if not others:
        raise TestbedError("a critical job's files need a third host")
    out = []
    for k, size in enumerate(sizes):
        o = others[((k + 1) // 2) % len(others)]
        src, dst = ((names[0], o), (o, names[1]), (names[1], o), (o, names[0]))[k % 4]
        out.append(BackgroundFlow(f"file-{k}", src, dst, size, 0.0))
    return out


def bulk_path(wl: Workload) -> tuple[str, str]:
    """(source, destination) of a scenario's bulk stream: from the host the jobs' transfers
    touch least into the one whose ingress they use most."""
    names = wl.cluster.names
    into = dict.fromkeys(names, 0.0)
    touch = dict.fromkeys(names, 0.0)
    for job in wl.jobs:
        for t in job.transfers:
            into[t.dst] += t.bytes
            touch[t.src] += t.bytes
            touch[t.dst] += t.bytes
    dst = max(names, key=lambda h: (into[h], h))
    src = min((h for h in names if h != dst), key=lambda h: (touch[h], h))
    return src, dst


def sim_workload(wl: Workload, bg: list[BackgroundFlow]) -> Workload:
    """The testbed workload as the fluid simulator sees it: the files become background flows."""
    return replace(wl, background=tuple(Background(b.id, b.src, b.dst, b.bytes, b.arrival_s) for b in bg))


def background_contention(wl: Workload, bg: list[BackgroundFlow], spans: dict[str, dict[str, list[float]]],
                          files: dict[str, dict]) -> dict[str, dict[str, float]]:
    """DL bytes that crossed each file's ports while the file was moving.

    On a saturated port bytes are conserved: every DL byte that leaves the
    file's sender (or enters its receiver) during the file's life is a byte
    the file did not send then. So a policy that finishes DL jobs sooner by
    sending their bytes earlier lengthens the files whose lives those bytes
    now fall into; this is the figure that shows it.

    Parameters
    ----------
    wl : Workload
        The run's jobs (arrival times, seconds from the run's start).
    bg : list of BackgroundFlow
    spans : dict
        Per job, per transfer ``[start, duration]``, seconds from the job's
        arrival (``run_scenario(...)["details"]["transfers"]``).
    files : dict
        Per file id, at least ``start_s`` and ``end_s`` (seconds from the
        run's start; for a file still moving, when it was last seen, as
        :meth:`jitsched.testbed.bgtraffic.Generator.snapshot` gives it). Files the
        receivers never saw, or without both times, are left out.

    Returns
    -------
    dict
        Per file: ``egress_dl_mb`` and ``ingress_dl_mb``, DL megabytes (1e6
        bytes) leaving the file's source host / entering its destination host
        within ``[start_s, end_s]``, each transfer's bytes spread evenly over
        its span; ``life_s``, the file's duration.
    """
    out: dict[str, dict[str, float]] = {}
    for f in bg:
        r = files.get(f.id) or {}
        if r.get("end_s") is None or r.get("start_s") is None:
            continue
        t0, t1 = float(r["start_s"]), float(r["end_s"])
        mb = {"egress_dl_mb": 0.0, "ingress_dl_mb": 0.0}
        for job in wl.jobs:
            got = spans.get(job.id, {})
            for t in job.transfers:
                if t.id not in got or (t.src != f.src and t.dst != f.dst):
                    continue
                start, dur = got[t.id]
                a = job.arrival_s + float(start)
                b = a + float(dur)
                if b <= a:  # instantaneous: all of it or none
                    inside = t.bytes / 1e6 if t0 <= a <= t1 else 0.0
                else:
                    inside = t.bytes / 1e6 * max(0.0, min(b, t1) - max(a, t0)) / (b - a)
                # a transfer on the file's very path shares both of its ports
                mb["egress_dl_mb"] += inside if t.src == f.src else 0.0
                mb["ingress_dl_mb"] += inside if t.dst == f.dst else 0.0
        out[f.id] = mb | {"life_s": t1 - t0}
    return out


def predict(scenario: str, seed: int = 0, link_mbit: float | None = None, *, slot_s: float = DEFAULT_SLOT_S,
            alpha: float | None = None, job_order: str | None = None, dl_share: float | None = None,
            ingress_share: float = 1.0, baselines: tuple[str, ...] = (), announce_files: bool = False,
            background_floor: float = 0.0, workload: tuple[Workload, list[BackgroundFlow]] | None = None) -> dict:
    """What the fluid simulator expects of the scenario: ``tensorflow`` (fair sharing) vs ``jit``.

    The same jobs and files as :func:`build_workload`, on links that carry
    TCP payload at :data:`jitsched.testbed.measure.GOODPUT` of their rate
    (whole frames at MTU 1500: the testbed's byte counts are payload), under
    each testbed policy's daemon policy
    (:data:`jitsched.testbed.options.DAEMON_POLICY`):
    ``tensorflow``, the reference, is the simulator's per-flow max-min fair
    network, the ideal of the testbed's ``none`` policy, and ``jit`` the
    daemon's policy with the testbed's settings (None: the policy's default)
    as its agents enforce it: DL transfers by strict priority (no group
    lends its slack: a daemon's ranks do not, ``ranked_options``), background
    after all of them (``bg_weight=inf``: the daemon does not know the files),
    sharing what the DL flows leave max-min fair, with every host's ingress
    at ``ingress_share`` of its link rate (the agents' ingress shaping,
    :data:`jitsched.agents.backends.base.INGRESS_SHARE`; the agents lift
    it while a host has no inbound flow to order, which the simulator does
    not, so it predicts the files a little low). Each testbed policy in
    ``baselines`` (``sincronia``, ``tictac``, ``varys``) is simulated as its
    agents enforce it too: its order (Varys's without its MADD rates),
    background after every job (``background="last"``), the same ingress. With ``announce_files`` the
    files told the daemon their sizes (:class:`TestbedOptions`'s
    ``announce_files``): jit ranks them with its own ``bg_weight`` and
    Sincronia as coflows, as they do in the simulator; TicTac still puts
    them last. ``background_floor`` is the agents' (``jitsched agent
    --background-floor``): the files they do not rank are guaranteed that
    share of each port they use while DL flows are backlogged there
    (``bg_floor`` of the simulator's jit and baselines; files the daemon
    ranks are not in the agents' background class and get no floor).
    ``workload``, the jobs and files of :func:`on_testbed`, stands for the
    scenario's (``scenario``, ``seed`` and ``link_mbit`` are then not read).

    Returns
    -------
    dict
        ``jct_ratio_tf_over_jit`` (ratio of mean JCTs), ``mean_speedup``
        (mean over jobs of TF JCT / JIT JCT) and per policy ``mean_jct_s``,
        ``jct_s`` (per job), ``jct_by_model_s``, ``background_slowdown`` and
        ``background_mbit_mean`` (the files' mean goodput, Mbit/s of payload
        as the testbed counts it).
    """
    # the planner, the policies and the simulator: imported by the prediction only
    from jitsched.plan.planner import scale_cluster
    from jitsched.policies import make_policy
    from jitsched.sim import simulate
    from jitsched.testbed.options import BASELINES, DAEMON_POLICY

    if workload is None:
        sc = get_scenario(scenario)
        workload = build_workload(sc.hosts, link_mbit or sc.link_mbit, scenario, seed)
    # the testbed's transfers count TCP payload, which takes GOODPUT of each link's bytes
    w = sim_workload(*workload)
    w = replace(w, cluster=scale_cluster(w.cluster, GOODPUT, GOODPUT))
    out: dict = {}
    jit_opts = {"slot_s": slot_s} if announce_files else {"slot_s": slot_s, "bg_weight": math.inf,
                                                          "bg_floor": background_floor}
    jit_opts |= {k: v for k, v in (("alpha", alpha), ("job_order", job_order), ("dl_share", dl_share))
                 if v is not None}
    # the simulator's counterpart of each testbed policy is its daemon's policy
    sim_jit, sim_none = DAEMON_POLICY["jit"], DAEMON_POLICY["none"]
    jit_opts |= make_policy(sim_jit).ranked_options()
    if not 0.0 < ingress_share <= 1.0:
        raise ValidationError(f"ingress_share: must be within (0, 1], got {ingress_share!r}")
    w_jit = w if ingress_share == 1.0 else replace(w, cluster=scale_cluster(w.cluster, 1.0, ingress_share))
    runs = [(sim_jit, w_jit, jit_opts), (sim_none, w, {})]
    for name in baselines:
        if name not in BASELINES:
            raise ValidationError(f"baselines: expected testbed baselines, got {name!r}")
        pol = make_policy(DAEMON_POLICY[name])
        ranks_files = announce_files and pol.ranks_background()
        last = {"background": "last"} | ({} if announce_files else {"bg_floor": background_floor})
        runs.append((DAEMON_POLICY[name], w_jit,
                     ({"background": "coflows"} if ranks_files else last) | pol.ranked_options()))
    for pol, wl_pol, opts in runs:
        r = simulate(wl_pol, pol, policy_options=opts)
        out[pol] = {"mean_jct_s": float(np.mean(r.jct_s)),
                    "jct_s": {j: float(x) for j, x in zip(r.job_ids, r.jct_s, strict=True)},
                    "jct_by_model_s": r.jct_by_model(),
                    "background_slowdown": float(np.mean(r.bg_slowdown)) if len(r.bg_slowdown) else None,
                    # files' mean goodput as the testbed measures it: payload
                    "background_mbit_mean": (float(np.mean(r.bg_size * 8 / r.bg_jct_s)) / 1e6
                                             if len(r.bg_jct_s) else None)}
    tf, jit = out[sim_none], out[sim_jit]
    out["jct_ratio_tf_over_jit"] = tf["mean_jct_s"] / jit["mean_jct_s"]
    out["mean_speedup"] = float(np.mean([tf["jct_s"][j] / jit["jct_s"][j] for j in jit["jct_s"]]))
    return out


def require_daemon_side() -> None:
    """Raise TestbedError naming the daemon-side modules ``testbed run`` needs that are not installed."""
    missing = [m for m in REQUIRED_MODULES if _find(m) is None]
    if missing:
        raise TestbedError(
            "testbed run drives the jitsched daemon, host agents and job runners; "
            f"not in this installation yet: {', '.join(missing)}")


def _find(mod: str):
    try:
        return importlib.util.find_spec(mod)
    except ModuleNotFoundError:
        return None
