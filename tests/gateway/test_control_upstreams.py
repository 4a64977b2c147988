"""`--control` in front of one replica only (issue #32, item 4): Envoy sends
each call to one replica of its cluster, so through a multi-replica gateway
`/pause` then `/is_paused` could reach different replicas. The gateway now
refuses `--control` with several upstreams, and with a DNS name (it may
resolve to many: STRICT_DNS, a headless Service), naming `tokenwire control
--fleet`; `tokenwire up --replicas N` runs its gateway without control."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import free_port
from tokenwire.gateway import config, supervisor
from tokenwire.gateway.settings import ADMIN_KEY_ENV, GatewaySettings, check_control

pytestmark = pytest.mark.gateway

FLEET = ("127.0.0.1:50051", "127.0.0.1:50052")


@pytest.mark.parametrize("settings", [
    GatewaySettings(control=True, upstreams=FLEET),
    GatewaySettings(control=True, upstreams=("tokenwire-replicas.default.svc.cluster.local:5",)),
    GatewaySettings(control=True, upstream_host="localhost"),
], ids=["two-replicas", "dns-name", "localhost"])
def test_control_needs_one_upstream_by_ip(settings: GatewaySettings) -> None:
    with pytest.raises(ValueError, match="tokenwire control --fleet") as caught:
        check_control(settings)
    assert "exactly one upstream" in str(caught.value)
    with pytest.raises(ValueError, match="exactly one upstream"):  # nothing renders it
        config.build(settings)


@pytest.mark.parametrize("settings", [
    GatewaySettings(control=True),
    GatewaySettings(control=True, upstreams=("10.0.0.7:50051",)),
    GatewaySettings(control=True, upstreams=("[::1]:50051",)),
    GatewaySettings(upstreams=FLEET),  # a fleet without --control
    GatewaySettings(upstreams=("tokenwire-replicas:50051",)),
])
def test_one_literal_upstream_or_no_control_is_fine(settings: GatewaySettings) -> None:
    check_control(settings)
    assert config.build(settings)["static_resources"]["listeners"]


def test_the_gateway_cli_refuses_control_over_a_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenwire.cli import main
    from tokenwire.gateway.process import EnvoyProcess

    def start(self: EnvoyProcess) -> EnvoyProcess:
        raise AssertionError("the gateway started")

    monkeypatch.setattr(EnvoyProcess, "start", start)
    with pytest.raises(SystemExit, match=r"tokenwire gateway: .*tokenwire control --fleet"):
        main(["gateway", "--control", "--upstreams", *FLEET, "--config-dir", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"tokenwire gateway: .*exactly one upstream"):
        main(["gateway", "--control", "--upstreams", *FLEET, "--print-config"])


def test_up_with_replicas_keeps_control_off_the_gateway(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tokenwire.cli import main

    started: list[GatewaySettings] = []
    monkeypatch.setattr(supervisor, "run", lambda replicas, gateway, **kw: started.append(gateway))
    monkeypatch.setenv(ADMIN_KEY_ENV, "fleet-admin-key")
    base = ["up", "--engine", "fake", "--grpc-port", str(free_port()), "--enable-control"]
    main([*base, "--replicas", "2"])
    assert len(started[0].upstreams) == 2 and started[0].control is False
    assert "tokenwire control --fleet" in capsys.readouterr().err
    main(base)  # one replica: the gateway passes control (the admin key is set)
    assert started[1].control is True and not started[1].upstreams
    with pytest.raises(SystemExit, match="--gateway-inject-admin-key needs one replica"):
        main([*base, "--replicas", "2", "--gateway-inject-admin-key"])
    assert len(started) == 2
    main([*base, "--grpc-host", "localhost"])  # the gateway reaches it by address: control on
    assert started[2].control is True and started[2].upstream_host == "127.0.0.1"
