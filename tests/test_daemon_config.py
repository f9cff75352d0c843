"""Tests of the daemon's TOML configuration."""

from __future__ import annotations

import pytest
import tomli_w

from jitsched.config import DaemonConfig, config_doc, load_config, parse_config
from jitsched.dag.model import Cluster
from jitsched.errors import ValidationError

HOSTS = [{"name": "h0", "egress_bps": 1e9, "ingress_bps": 1e9, "address": "198.18.0.1"},
         {"name": "h1", "egress_bps": 1e8, "ingress_bps": 1e9}]


def test_load_full_config(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(tomli_w.dumps({"hosts": HOSTS, "daemon": {"job_endpoint": "tcp://127.0.0.1:7000",
                                                           "metrics_port": 9100},
                                "scheduler": {"slot_s": 0.05, "alpha": 0.6, "objective": "minmax"}}))
    cfg = load_config(p)
    assert cfg.cluster.names == ["h0", "h1"] and cfg.cluster.hosts[0].address == "198.18.0.1"
    assert cfg.cluster.hosts[1].egress_Bps == 1.25e7
    assert (cfg.slot_s, cfg.alpha, cfg.objective, cfg.metrics_port) == (0.05, 0.6, "minmax", 9100)
    assert cfg.job_endpoint == "tcp://127.0.0.1:7000"
    assert load_config_roundtrip(cfg, tmp_path) == cfg


def load_config_roundtrip(cfg: DaemonConfig, tmp_path) -> DaemonConfig:
    p = tmp_path / "rt.toml"
    p.write_text(tomli_w.dumps(config_doc(cfg)))
    return load_config(p)


def test_testbed_style_file_is_enough(tmp_path):
    p = tmp_path / "tb.toml"
    p.write_text("# written by the testbed\n" + tomli_w.dumps({"hosts": HOSTS}))
    cfg = load_config(p)
    assert cfg.policy == "jit" and cfg.slot_s == 0.1 and len(cfg.cluster) == 2


@pytest.mark.parametrize("doc, needle", [
    ({"hosts": HOSTS, "scheduler": {"alpha": 1.5}}, "alpha"),
    ({"hosts": HOSTS, "scheduler": {"slot_s": "fast"}}, "[scheduler].slot_s"),
    ({"hosts": HOSTS, "scheduler": {"slot_s": 0.0}}, "slot_s: must be a number of seconds of at least 0.001"),
    # a slot under 1 ms, a heartbeat under 10 ms: no agent keeps up, the loop does nothing else
    ({"hosts": HOSTS, "scheduler": {"slot_s": 1e-9}}, "slot_s: must be a number of seconds of at least 0.001"),
    ({"hosts": HOSTS, "daemon": {"heartbeat_s": 1e-9}}, "heartbeat_s: must be a number of seconds of at least 0.01"),
    ({"hosts": HOSTS, "daemon": {"heartbeat_s": float("nan")}}, "heartbeat_s: must be positive, got nan"),
    ({"hosts": HOSTS, "scheduler": {"coalesce_s": float("nan")}}, "coalesce_s: must be a finite number"),
    ({"hosts": HOSTS, "scheduler": {"replan_period_s": -1.0}}, "replan_period_s: must be a finite number"),
    ({"hosts": HOSTS, "scheduler": {"objective": "fastest"}}, "objective: expected one of"),
    ({"hosts": HOSTS, "daemon": {"nope": 1}}, "[daemon].nope"),
    ({"hosts": HOSTS, "daemon": {"planner_timeout_s": 0.0}}, "planner_timeout_s: must be positive (inf: never)"),
    ({"hosts": HOSTS, "daemon": {"critical_epsilon": -0.01}}, "[daemon].critical_epsilon: must be a finite number >= 0"),
    ({"hosts": HOSTS, "daemon": {"critical_epsilon": float("inf")}}, "[daemon].critical_epsilon: must be a finite"),
    ({"hosts": HOSTS, "daemon": {"critical_epsilon": float("nan")}}, "[daemon].critical_epsilon: must be a finite"),
    ({"hosts": HOSTS, "daemon": {"critical_epsilon": True}}, "[daemon].critical_epsilon: expected float, got bool"),
    ({"hosts": HOSTS, "daemon": {"critical_floor": 1.0}}, "[daemon].critical_floor: must be within [0, 1)"),
    ({"hosts": HOSTS, "daemon": {"critical_floor": -0.01}}, "[daemon].critical_floor: must be within [0, 1)"),
    ({"hosts": HOSTS, "daemon": {"critical_floor": float("nan")}}, "[daemon].critical_floor: must be within [0, 1)"),
    ({"hosts": HOSTS, "daemon": {"critical_assumed_share": 0.0}}, "[daemon].critical_assumed_share: must be within (0, 1]"),
    ({"hosts": HOSTS, "daemon": {"critical_assumed_share": 1.5}}, "[daemon].critical_assumed_share: must be within (0, 1]"),
    ({"hosts": HOSTS, "daemon": {"critical_assumed_share": float("nan")}}, "[daemon].critical_assumed_share: must be"),
    ({"hosts": HOSTS, "extra": {}}, "extra"),
    ({"hosts": [], "daemon": {"host_join": "allow-list"}}, "no hosts"),
    ({"hosts": HOSTS + [HOSTS[0]]}, "duplicate"),
    ({"hosts": HOSTS, "daemon": {"heartbeat_s": 2.0, "heartbeat_timeout_s": 1.0}}, "heartbeat_timeout_s"),
])
def test_bad_configs_name_the_setting(tmp_path, doc, needle):
    p = tmp_path / "bad.toml"
    p.write_text(tomli_w.dumps(doc))
    with pytest.raises(ValidationError) as ei:
        load_config(p)
    assert needle in str(ei.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ValidationError, match="no such file"):
        load_config(tmp_path / "absent.toml")
    with pytest.raises(ValidationError, match="cannot read .Is a directory"):
        load_config(tmp_path)
    p = tmp_path / "x.toml"
    p.write_text("hosts = [")
    with pytest.raises(ValidationError, match="not valid TOML"):
        load_config(p)
    assert DaemonConfig(cluster=Cluster.uniform(1)).metrics_port == 0
    assert DaemonConfig(cluster=Cluster.uniform(1)).metrics_address == "127.0.0.1"


def test_planning_settings(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(tomli_w.dumps({"hosts": HOSTS, "daemon": {"planner_process": False},
                                "scheduler": {"planning": "full", "joint_replan_s": 2,
                                              "max_planner_duty": 0.5}}))
    cfg = load_config(p)
    assert (cfg.planning, cfg.joint_replan_s, cfg.planner_process) == ("full", 2.0, False)
    assert cfg.max_planner_duty == 0.5
    assert load_config_roundtrip(cfg, tmp_path) == cfg
    default = DaemonConfig(cluster=Cluster.uniform(1))
    assert (default.planning, default.joint_replan_s, default.planner_process) == (
        "incremental", 1.0, True)


@pytest.mark.parametrize("doc, needle", [
    ({"hosts": HOSTS, "scheduler": {"planning": "lazy"}}, "planning"),
    ({"hosts": HOSTS, "scheduler": {"joint_replan_s": -1.0}}, "joint_replan_s"),
    ({"hosts": HOSTS, "scheduler": {"max_increment_transfers": 0}}, "max_increment_transfers"),
    ({"hosts": HOSTS, "scheduler": {"max_planner_duty": 0.0}}, "max_planner_duty"),
    ({"hosts": HOSTS, "scheduler": {"max_planner_duty": 1.5}}, "max_planner_duty"),
    ({"hosts": HOSTS, "daemon": {"planner_process": "yes"}}, "[daemon].planner_process"),
    ({"hosts": HOSTS, "daemon": {"max_jobs": True}}, "[daemon].max_jobs"),
])
def test_bad_planning_settings(tmp_path, doc, needle):
    p = tmp_path / "bad.toml"
    p.write_text(tomli_w.dumps(doc))
    with pytest.raises(ValidationError) as ei:
        load_config(p)
    assert needle in str(ei.value)


@pytest.mark.parametrize("limits, needle", [
    ({"per_client": {"max_jobs": 0}}, "[limits.per_client].max_jobs: must be positive, got 0"),
    ({"per_client": {"max_job": 5}}, "[limits.per_client].max_job: unknown setting"),
    ({"per_client": {"max_jobs": "many"}}, "[limits.per_client].max_jobs: expected int, got str"),
    ({"per_client": 5}, "[limits.per_client]: expected a table"),
    ({"clients": {"alice": {"max_background": -1}}}, "[limits.clients.alice].max_background: must be positive"),
    ({"clients": {"alice": {"max_bytes_in_flight": 1024}}},
     "[limits.clients.alice].max_bytes_in_flight: must be at least max_message_bytes"),
    ({"clients": {"alice": 3}}, "[limits.clients.alice]: expected a table"),
    ({"clients": 3}, "[limits.clients]: expected tables"),
    ({"max_memory_bytes": -1}, "[limits].max_memory_bytes: must be >= 0"),
    ({"max_ended_bytes": 0}, "[limits].max_ended_bytes: must be positive"),
])
def test_bad_quotas_are_one_line_errors(tmp_path, capsys, limits, needle):
    from jitsched.cli import main

    p = tmp_path / "bad.toml"
    p.write_text(tomli_w.dumps({"hosts": HOSTS, "limits": limits}))
    with pytest.raises(ValidationError) as ei:
        load_config(p)
    assert needle in str(ei.value)
    assert main(["daemon", "--config", str(p)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_quotas_per_client_and_per_name(tmp_path, capsys):
    from jitsched.cli import main
    from jitsched.config import ClientQuota
    from jitsched.daemon import Daemon
    from jitsched.keys import init_keys

    p = tmp_path / "q.toml"
    p.write_text(tomli_w.dumps({"hosts": HOSTS, "limits": {
        "per_client": {"max_jobs": 5}, "clients": {"alice": {"max_background": 7}}}}))
    cfg = load_config(p)
    assert cfg.per_client == ClientQuota(max_jobs=5)
    # a named client's table changes only what it sets; the rest is per_client's
    assert cfg.quota("alice") == ClientQuota(max_jobs=5, max_background=7)
    assert cfg.quota("bob") == cfg.quota(None) == cfg.per_client
    assert load_config_roundtrip(cfg, tmp_path) == cfg
    # with keys, a quota for a name no client key has is refused at start
    init_keys(tmp_path / "keys", ["h0", "h1"], ["bob"])
    with pytest.raises(ValidationError, match=r"\[limits.clients.alice\]: no client key 'alice'"):
        Daemon(cfg.with_(keys_dir=str(tmp_path / "keys")))
    assert main(["daemon", "--config", str(p), "--keys", str(tmp_path / "keys")]) == 2
    assert "no client key 'alice'" in capsys.readouterr().err


def test_an_unset_host_leave_follows_a_long_heartbeat_timeout():
    doc = {"hosts": [{"name": "h0", "egress_bps": 1e9, "ingress_bps": 1e9}],
           "daemon": {"heartbeat_timeout_s": 30.0}}
    assert parse_config(doc).host_leave_s == 90.0
    assert parse_config({"hosts": doc["hosts"]}).host_leave_s == 30.0
    with pytest.raises(ValidationError, match="host_leave_s: must exceed heartbeat_timeout_s"):
        parse_config(doc | {"daemon": {"heartbeat_timeout_s": 30.0, "host_leave_s": 20.0}})
