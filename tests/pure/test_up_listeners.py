"""`tokenwire up`'s two listeners (issue #45, item 5): vLLM's --host / --port
are the REST listener's (the gateway's), as `vllm serve MODEL --port 8000`
serves REST on 8000; the servers' gRPC listener is --grpc-host /
--grpc-port (default 127.0.0.1:50051), replica i on --grpc-port + i; a vLLM
YAML's `port:` means REST too. `tokenwire serve --port` stays gRPC's."""

from __future__ import annotations

import argparse

import pytest

from tokenwire.gateway.settings import GatewaySettings


def _up(monkeypatch: pytest.MonkeyPatch, *args: str) -> argparse.Namespace:
    from tokenwire.cli import build_parser as top_parser

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    ns, extra = top_parser().parse_known_args(["up", *args])
    ns.extra = extra
    return ns


def _served_ports(ns: argparse.Namespace) -> list[tuple[str, int, str]]:
    """Each replica's address, its `tokenwire serve` port (50051 when the
    flag is left out: serve's default) and its model."""
    from tokenwire.gateway.cli import plan_replicas

    found = []
    for replica in plan_replicas(ns):
        argv = list(replica.argv)
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 50051
        found.append((replica.address, port, argv[argv.index("--model") + 1]))
    return found


def _started(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[list, GatewaySettings]:
    """What `tokenwire up` would start: its replicas and the gateway's settings."""
    from tokenwire import cli
    from tokenwire.gateway import supervisor

    seen: list = []
    monkeypatch.setattr(supervisor, "run",
                        lambda replicas, gateway, **kw: seen.append((replicas, gateway)) or 0)
    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    # --metrics-port given: no probe for free ports (no network here)
    assert cli.main(["up", "--engine", "fake", "--metrics-port", "9400", *args]) == 0
    ((replicas, gateway),) = seen
    return replicas, gateway


def test_port_is_rest_as_in_vllm_serve_and_grpc_has_its_own(monkeypatch) -> None:
    ns = _up(monkeypatch, "Qwen/X", "--port", "8000")
    assert (ns.gateway_listen_host, ns.gateway_listen_port) == ("127.0.0.1", 8000)
    assert _served_ports(ns) == [("127.0.0.1:50051", 50051, "Qwen/X")]
    replicas, gateway = _started(monkeypatch, "--port", "8000")
    assert (gateway.listen_host, gateway.listen_port) == ("127.0.0.1", 8000)
    assert (gateway.upstream_host, gateway.upstream_port) == ("127.0.0.1", 50051)
    assert [r.address for r in replicas] == ["127.0.0.1:50051"]


def test_defaults_are_vllms_rest_port_and_serves_grpc_port(monkeypatch) -> None:
    ns = _up(monkeypatch, "Qwen/X")
    assert (ns.gateway_listen_host, ns.gateway_listen_port) == ("127.0.0.1", 8000)
    assert (ns.host, ns.port) == ("127.0.0.1", 50051)


def test_host_is_the_rest_listeners_and_grpc_host_the_servers(monkeypatch) -> None:
    _, gateway = _started(monkeypatch, "--host", "0.0.0.0", "--port", "8001")
    assert (gateway.listen_host, gateway.listen_port) == ("0.0.0.0", 8001)
    assert gateway.upstream_host == "127.0.0.1"  # the servers stay on loopback
    replicas, gateway = _started(monkeypatch, "--grpc-host", "0.0.0.0", "--grpc-port", "6001")
    assert gateway.listen_host == "127.0.0.1" and gateway.upstream_port == 6001
    assert replicas[0].argv[replicas[0].argv.index("--host") + 1] == "0.0.0.0"
    assert replicas[0].address == "0.0.0.0:6001"


def test_replicas_take_grpc_port_plus_i(monkeypatch) -> None:
    ns = _up(monkeypatch, "Qwen/X", "--replicas", "3", "--grpc-port", "6000", "--port", "8000")
    assert _served_ports(ns) == [(f"127.0.0.1:{6000 + i}", 6000 + i, "Qwen/X") for i in range(3)]
    assert ns.port == 6000 and ns.gateway_listen_port == 8000  # plan_replicas leaves ns as given
    ns = _up(monkeypatch, "Qwen/X", "--replicas", "2")
    assert [a for a, _, _ in _served_ports(ns)] == ["127.0.0.1:50051", "127.0.0.1:50052"]


def test_gateway_listen_flags_stay_aliases(monkeypatch) -> None:
    ns = _up(monkeypatch, "--gateway-listen-port", "8123", "--gateway-listen-host", "::1")
    assert (ns.gateway_listen_host, ns.gateway_listen_port) == ("::1", 8123)
    assert ns.port == 50051


def test_a_vllm_yaml_port_means_rest(tmp_path, monkeypatch) -> None:
    import yaml

    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway.cli import plan_replicas, up_config

    config = tmp_path / "vllm.yaml"
    config.write_text("port: 8001\nhost: 0.0.0.0\ngrpc_port: 7001\nmax-model-len: 1024\n")
    parser = top_parser()
    ns, extra = parser.parse_known_args(["up", *up_config(parser, ["Qwen/X", "--config",
                                                                   str(config)])])
    ns.extra = extra
    assert (ns.gateway_listen_host, ns.gateway_listen_port) == ("0.0.0.0", 8001)
    assert (ns.host, ns.port) == ("127.0.0.1", 7001)
    (replica,) = plan_replicas(ns)
    argv = list(replica.argv)
    assert argv[argv.index("--port") + 1] == "7001" and replica.address == "127.0.0.1:7001"
    served = yaml.safe_load(open(argv[argv.index("--config") + 1]).read())
    assert served == {"max-model-len": 1024}  # neither port reaches `tokenwire serve --config`


@pytest.mark.parametrize(("args", "message"), [
    (["--port", "50051"], "--port 50051 is the REST listener's .* --grpc-port 50051: give"),
    (["--replicas", "2", "--grpc-port", "9000", "--port", "9001"],
     "--port 9001 is the REST listener's .* --grpc-port 9000 to 9001"),
    (["--grpc-port", "0"], "a fixed --grpc-port"),
    (["--port", "0"], "the REST listener a fixed --port"),
])
def test_ports_that_cannot_be_honoured_are_refused(monkeypatch, args, message) -> None:
    from tokenwire.gateway.up_ports import check_ports

    with pytest.raises(SystemExit, match=message):
        check_ports(_up(monkeypatch, *args))


def test_serve_port_stays_grpc() -> None:
    from tokenwire.server.runtime.cli import parse_settings

    settings = parse_settings(["--engine", "fake", "--host", "0.0.0.0", "--port", "8000"])
    assert (settings.host, settings.port) == ("0.0.0.0", 8000)  # the gRPC listener
