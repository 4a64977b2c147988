"""deploy/kubernetes/inference-pool*.yaml (issue #44 item 3), checked offline:
the core kinds against the Kubernetes schemas (kubernetes-validate); the
InferencePool and the picker's EndpointPickerConfig, which it does not know,
against JSON schemas written from the documented API (tests/unit/deploy/data,
sources in each file); every plugin type one llm-d registers, every scorer in
a profile, every reference defined; the pool selects the StatefulSet's pods on
their serving port as h2c, readiness is the gRPC health that drops while
paused or warming, and the picker scrapes the replicas' metrics port. No
cluster here: nothing in this file was applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.servers import ROOT

DEPLOY = ROOT / "deploy" / "kubernetes"
DATA = Path(__file__).parent / "data"
Docs = dict[tuple[str, str], dict[str, Any]]


def _load(name: str) -> Docs:
    return {(d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all((DEPLOY / name).read_text())}


@pytest.fixture(scope="module")
def pool_docs() -> Docs:
    return _load("inference-pool.yaml")


@pytest.fixture(scope="module")
def fleet() -> Docs:
    return _load("tokenwire.yaml")


@pytest.fixture(scope="module")
def picker_config(pool_docs) -> dict[str, Any]:
    return yaml.safe_load(pool_docs[("ConfigMap", "tokenwire-epp")]["data"]["epp-config.yaml"])


@pytest.fixture(scope="module")
def registered() -> dict[str, list[str]]:
    return {k: v for k, v in json.loads((DATA / "llm_d_plugins.json").read_text()).items()
            if not k.startswith("$")}


def _schema(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


def _flags(args: list[str]) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


CRD_KINDS = {"InferencePool", "Gateway", "HTTPRoute"}


def test_core_kinds_fit_the_kubernetes_schema() -> None:
    version = kubernetes_validate.latest_version()
    kinds = set()
    for name in ("inference-pool.yaml", "inference-pool-gateway.yaml"):
        for doc in _load(name).values():
            kinds.add(doc["kind"])
            if doc["kind"] not in CRD_KINDS:
                kubernetes_validate.validate(doc, version, strict=True)
    assert {"ConfigMap", "Deployment", "Service", "ServiceAccount", "Role", "RoleBinding",
            "NetworkPolicy", "InferencePool"} <= kinds


def test_the_pool_fits_its_schema_and_the_schema_bites(pool_docs) -> None:
    schema = _schema("inferencepool.v1.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    pool = pool_docs[("InferencePool", "tokenwire-pool")]
    jsonschema.validate(pool, schema)
    numbers = [p["number"] for p in pool["spec"]["targetPorts"]]
    assert len(set(numbers)) == len(numbers)  # the CRD's CEL rule: unique port numbers
    ref = pool["spec"]["endpointPickerRef"]
    assert ref.get("kind", "Service") != "Service" or "port" in ref  # CEL: a Service needs a port
    for broken in ({**pool["spec"], "appProtocol": "grpc"},
                   {k: v for k, v in pool["spec"].items() if k != "endpointPickerRef"},
                   {**pool["spec"], "targetPorts": []}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**pool, "spec": broken}, schema)


def test_the_pool_selects_the_replicas_on_their_serving_port_as_h2c(pool_docs, fleet) -> None:
    pool = pool_docs[("InferencePool", "tokenwire-pool")]["spec"]
    replicas = fleet[("StatefulSet", "tokenwire")]
    labels = replicas["spec"]["template"]["metadata"]["labels"]
    assert pool["selector"]["matchLabels"].items() <= labels.items()
    for kind, name in pool_docs:  # no picker pod or other tokenwire pod joins the pool
        doc = pool_docs[(kind, name)]
        if kind == "Deployment":
            pod = doc["spec"]["template"]["metadata"]["labels"]
            assert not pool["selector"]["matchLabels"].items() <= pod.items()
    gateway_pod = fleet[("Deployment", "tokenwire-gateway")]["spec"]["template"]["metadata"]
    assert not pool["selector"]["matchLabels"].items() <= gateway_pod["labels"].items()
    server = _container(replicas)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    flags = _flags(server["args"])
    assert [p["number"] for p in pool["targetPorts"]] == [ports["grpc"]] == [int(flags["port"])]
    assert pool["appProtocol"] == "kubernetes.io/h2c"


def test_readiness_drops_while_paused_or_warming(fleet) -> None:
    """The picker lists Ready pods only (GIE's pod reconciler: IsPodReady): a
    replica is Ready by its grpc.health.v1 answer, NOT_SERVING while it loads
    and warms up, drains, or (--unhealthy-while-paused) is paused."""
    server = _container(fleet[("StatefulSet", "tokenwire")])
    assert "--unhealthy-while-paused" in server["args"]
    grpc_port = int(_flags(server["args"])["port"])
    assert server["readinessProbe"]["grpc"]["port"] == grpc_port
    assert server["startupProbe"]["grpc"]["port"] == grpc_port
    assert "grpc" not in server["livenessProbe"]  # paused is alive


def test_the_picker_scrapes_the_replicas_metrics_port(pool_docs, fleet, picker_config) -> None:
    server = _container(fleet[("StatefulSet", "tokenwire")])
    metrics_port = int(_flags(server["args"])["metrics-port"])
    assert {p["name"]: p["containerPort"] for p in server["ports"]}["metrics"] == metrics_port
    epp = _container(pool_docs[("Deployment", "tokenwire-epp")])
    flags = _flags(epp["args"])
    assert int(flags["model-server-metrics-port"]) == metrics_port
    (source,) = [p for p in picker_config["plugins"] if p["type"] == "metrics-data-source"]
    assert source["parameters"]["path"] == "/metrics"  # tokenwire's page (core/metrics.py)
    assert flags["pool-name"] == "tokenwire-pool"
    assert flags["pool-group"] == "inference.networking.k8s.io"
    assert flags["config-file"].startswith(epp["volumeMounts"][0]["mountPath"] + "/")
    assert flags["config-file"].rsplit("/", 1)[1] in pool_docs[
        ("ConfigMap", "tokenwire-epp")]["data"]


def test_the_picker_config_fits_and_names_only_registered_plugins(
        picker_config, registered) -> None:
    schema = _schema("endpointpickerconfig.v1alpha1.schema.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(picker_config, schema)
    known = {t for types in registered.values() for t in types}
    names = {}
    for plugin in picker_config["plugins"]:
        assert plugin["type"] in known, plugin["type"]
        name = plugin.get("name", plugin["type"])  # (the loader's default name)
        assert name not in names, f"duplicate plugin name {name}"
        names[name] = plugin["type"]
    (profile,) = picker_config["schedulingProfiles"]
    refs = [p["pluginRef"] for p in profile["plugins"]]
    assert set(refs) <= names.keys(), "a profile references an undefined plugin"
    scorers = {n for n, t in names.items() if t in registered["scorer"]}
    assert scorers <= set(refs), "every scorer is in a profile"
    assert {names[n] for n in scorers} == {
        "prefix-cache-scorer", "queue-scorer", "kv-cache-utilization-scorer",
        "session-affinity-scorer"}
    assert all(p.get("weight", 0) > 0 for p in profile["plugins"] if p["pluginRef"] in scorers)
    assert sum(names[r] in registered["picker"] for r in refs) == 1, "one picker"
    assert picker_config["parser"]["pluginRef"] in names
    parsers = {t for t in names.values() if t in registered["parser"]}
    assert {"openai-parser", "vllmgrpc-parser"} <= parsers


def test_the_picker_may_read_what_it_watches_and_nothing_cluster_wide(pool_docs) -> None:
    role = pool_docs[("Role", "tokenwire-epp")]
    granted = {(g, r) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] if set(rule["verbs"]) == {"get", "watch", "list"}}
    assert {("", "pods"), ("inference.networking.k8s.io", "inferencepools")} <= granted
    binding = pool_docs[("RoleBinding", "tokenwire-epp")]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    deployment = pool_docs[("Deployment", "tokenwire-epp")]["spec"]["template"]["spec"]
    assert [s["name"] for s in binding["subjects"]] == [deployment["serviceAccountName"]]
    assert not any(kind.startswith("Cluster") for kind, _ in pool_docs)


def test_the_route_and_the_policies_name_the_pool_and_the_gateway(pool_docs) -> None:
    route_docs = _load("inference-pool-gateway.yaml")
    gateway = route_docs[("Gateway", "tokenwire-inference")]
    (rule,) = route_docs[("HTTPRoute", "tokenwire-inference")]["spec"]["rules"]
    (backend,) = rule["backendRefs"]
    assert (backend["group"], backend["kind"], backend["name"]) == (
        "inference.networking.k8s.io", "InferencePool", "tokenwire-pool")
    pool = pool_docs[("InferencePool", "tokenwire-pool")]["spec"]
    picker = pool_docs[("Service", "tokenwire-epp")]
    assert picker["metadata"]["name"] == pool["endpointPickerRef"]["name"]
    assert pool["endpointPickerRef"]["port"]["number"] in [p["port"] for p in
                                                           picker["spec"]["ports"]]
    proxy = {"gateway.networking.k8s.io/gateway-name": gateway["metadata"]["name"]}
    servers = pool_docs[("NetworkPolicy", "tokenwire-inference-pool")]["spec"]
    assert servers["podSelector"]["matchLabels"] == pool["selector"]["matchLabels"]
    admitted = {(peer["podSelector"]["matchLabels"].get("app.kubernetes.io/component",
                                                        str(peer["podSelector"]["matchLabels"])),
                 port["port"]) for rule in servers["ingress"] for peer in rule["from"]
                for port in rule["ports"]}
    assert admitted == {(str(proxy), "grpc"), ("endpoint-picker", "metrics")}
