"""Start a real Envoy (tokenwire gateway) in front of a test server."""

from __future__ import annotations

import dataclasses

from tests.servers import ROOT, free_port
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.gateway.settings import GatewaySettings


def start_gateway(upstream: str, **overrides: object) -> EnvoyProcess:
    host, port = upstream.rsplit(":", 1)
    settings = GatewaySettings(
        listen_port=free_port(), upstream_host=host, upstream_port=int(port), log_level="info",
    )
    settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    log_path = ROOT / ".cache" / f"test-envoy-{settings.listen_port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")
    envoy = EnvoyProcess(settings, log=log)
    try:
        return envoy.start()
    except Exception:
        log.close()
        raise RuntimeError(f"envoy failed; log:\n{log_path.read_text()[-4000:]}") from None
