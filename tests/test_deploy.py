"""The Kubernetes manifests (deploy/kubernetes/) against the Kubernetes JSON schemas (offline,
the schemas kubernetes-validate ships), and against jitsched itself: the daemon's TOML loads,
the containers' command lines parse, every Secret and ConfigMap they mount is there, and the
container build copies files that exist."""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from jitsched.config import SECTIONS, parse_config
from tests.test_docs import _parse_only

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# what `kubectl apply -f deploy/kubernetes/` applies, and the shape of the Secrets it mounts
# (beside it, so that applying the directory never overwrites real keys with placeholders)
MANIFESTS = [*sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")), ROOT / "deploy" / "secrets.example.yaml"]
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
# the newest Kubernetes release whose schemas the pinned kubernetes-validate ships
K8S_VERSION = kubernetes_validate.latest_version()


def _docs() -> list[tuple[str, dict]]:
    out = []
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is not None:
                out.append((f"{path.name}:{doc['kind']}/{doc['metadata']['name']}", doc))
    return out


DOCS = _docs()


def _one(kind: str, name: str) -> dict:
    got = [d for _, d in DOCS if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(got) == 1, f"{kind}/{name}: {len(got)} manifests"
    return got[0]


def _pod(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def test_the_manifests_hold_the_deployment():
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in DOCS}
    assert {("StatefulSet", "etcd"), ("StatefulSet", "jitsched-daemon"), ("DaemonSet", "jitsched-agent"),
            ("ConfigMap", "jitsched-daemon-config"), ("Namespace", "jitsched")} <= kinds
    assert sum(1 for k, _ in kinds if k == "Secret") == 4


@pytest.mark.parametrize("where,doc", DOCS, ids=[w for w, _ in DOCS])
def test_every_manifest_is_valid_against_the_kubernetes_schemas(where, doc):
    # strict: a field the schema does not know fails too (a misspelt key is silently ignored
    # by the API server otherwise)
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    if doc["kind"] != "Namespace":
        assert doc["metadata"]["namespace"] == "jitsched", where


def test_the_schema_check_refuses_a_broken_manifest():
    bad = copy.deepcopy(_one("DaemonSet", "jitsched-agent"))
    _pod(bad)["containers"][0]["ports"] = [{"containerPort": "5556"}]
    with pytest.raises(kubernetes_validate.ValidationError, match="integer"):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)
    bad = copy.deepcopy(_one("DaemonSet", "jitsched-agent"))
    _pod(bad)["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="hostNetwrok"):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


@pytest.mark.parametrize("where,doc", [(w, d) for w, d in DOCS if "selector" in d.get("spec", {})
                                       and "template" in d["spec"]], ids=lambda x: x if isinstance(x, str) else "")
def test_every_workload_selects_its_own_pods(where, doc):
    labels = doc["spec"]["template"]["metadata"]["labels"]
    assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items(), where


def test_every_secret_and_configmap_mounted_is_declared():
    declared = {(d["kind"], d["metadata"]["name"]) for _, d in DOCS}
    for where, doc in DOCS:
        if "template" not in doc.get("spec", {}):
            continue
        for vol in _pod(doc).get("volumes", []):
            if "secret" in vol:
                assert ("Secret", vol["secret"]["secretName"]) in declared, where
            if "configMap" in vol:
                assert ("ConfigMap", vol["configMap"]["name"]) in declared, where


def test_the_agents_run_on_the_node_network_with_net_admin_and_their_node_name():
    ds = _one("DaemonSet", "jitsched-agent")
    pod = _pod(ds)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    agent = pod["containers"][0]
    assert "NET_ADMIN" in agent["securityContext"]["capabilities"]["add"]
    env = {e["name"]: e for e in agent["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--host=$(NODE_NAME)" in agent["args"] and "--leave-on-exit" in agent["args"]


def _expanded(container: dict) -> list[str]:
    """The container's arguments as Kubernetes expands them (``$(VAR)`` from its env)."""
    env = {e["name"]: e.get("value", f"placeholder-{e['name'].lower()}") for e in container.get("env", [])}
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in container["args"]]


def test_the_containers_command_lines_parse_with_jitsched():
    for kind, name in (("StatefulSet", "jitsched-daemon"), ("DaemonSet", "jitsched-agent")):
        for c in _pod(_one(kind, name))["containers"]:
            _parse_only(["jitsched", *_expanded(c)])


def test_the_daemon_config_loads_and_names_the_etcd_members():
    cm = _one("ConfigMap", "jitsched-daemon-config")
    doc = tomllib.loads(cm["data"]["daemon.toml"])
    daemon = _one("StatefulSet", "jitsched-daemon")
    assert daemon["spec"]["replicas"] >= 2
    etcd = _one("StatefulSet", "etcd")
    want = [f"http://etcd-{i}.etcd.jitsched.svc:2379" for i in range(etcd["spec"]["replicas"])]
    assert doc["ha"]["etcd_endpoints"] == want
    # the [ha] table is read by the daemons that replicate on etcd; the rest as any daemon does
    cfg = parse_config(doc if "ha" in SECTIONS else {k: v for k, v in doc.items() if k != "ha"})
    assert cfg.host_join == "open" and len(cfg.cluster) == 0 and cfg.keys_dir
    mounts = {m["mountPath"] for m in _pod(daemon)["containers"][0]["volumeMounts"]}
    assert any(cfg.keys_dir.startswith(m) for m in mounts)
    ports = {p["containerPort"] for p in _pod(daemon)["containers"][0]["ports"]}
    assert {int(cfg.job_endpoint.rsplit(":", 1)[1]), int(cfg.agent_endpoint.rsplit(":", 1)[1]),
            cfg.metrics_port} == ports
    # the metrics answer a scraper on the pod's address, where its annotations say
    assert cfg.metrics_address == "0.0.0.0"
    notes = daemon["spec"]["template"]["metadata"]["annotations"]
    assert (notes["prometheus.io/scrape"], int(notes["prometheus.io/port"])) == ("true", cfg.metrics_port)
    agent_args = _expanded(_pod(_one("DaemonSet", "jitsched-agent"))["containers"][0])
    endpoints = next(a for a in agent_args if a.startswith("--daemon=")).split("=", 1)[1].split(",")
    assert endpoints == [f"tcp://jitsched-daemon-{i}.jitsched-daemon.jitsched.svc:5556"
                         for i in range(daemon["spec"]["replicas"])]


def test_the_container_build_copies_what_exists_and_the_manifests_run_its_image():
    text = CONTAINERFILE.read_text(encoding="utf-8")
    copied = [w for line in text.splitlines() if line.startswith("COPY ") and "--from" not in line
              for w in line.split()[1:-1]]
    assert copied and all((ROOT / w).exists() for w in copied), copied
    # the wheel builds from the copied files alone: every package's directory (through
    # pyproject's package-dir) and every kernel's source is among them
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    top = {w.rstrip("/").removeprefix("./") for w in copied}
    dirs = tool["package-dir"]
    for pkg in tool["packages"]:
        root = next(p for p in sorted(dirs, key=len, reverse=True) if pkg == p or pkg.startswith(p + "."))
        path = Path(dirs[root], *pkg.removeprefix(root).split(".")[1:])
        assert path.parts[0] in top, f"{pkg} lives in {path}, which the build does not copy ({sorted(top)})"
    assert "src_cython" in top and {"setup.py", "pyproject.toml", "MANIFEST.in"} <= top
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert f"-t jitsched:{version} " in text
    images = {c["image"] for _, d in DOCS if "template" in d.get("spec", {})
              for c in _pod(d)["containers"] + _pod(d).get("initContainers", []) if "jitsched" in c["image"]}
    assert images == {f"jitsched:{version}"}
