"""Several serving processes (--api-server-count N): one Python event loop
is one core's worth of frontend work, so N processes share the gRPC port
(SO_REUSEPORT: the kernel spreads connections over them) and, with vLLM,
one engine core (vLLM's multi-API-server mode, started by
engine.vllm.launcher.run_shared_engine). With the fake engine each process has its
own fake engine (for measuring the frontend alone).

What is per process: connections (a channel, and so a Session stream,
lives on one process), admission limits (a tenant's caps too), continuation
stores, metrics (--metrics-port P gives process i the port P + i). The
tenant salt secret is shared: a tenant has one cache domain in all of them
(tenancy.share_secret). With --enable-control,
process 0 runs every control operation and the others relay to it over
private Unix sockets (control/relay.py; docs/frontends.md). The fake engines
share no engine core, so they take no control with N > 1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import os
import pathlib
import signal
import sys
import tempfile
from typing import Any

from tokenwire.server.core.settings import ServerSettings

log = logging.getLogger(__name__)


def _own(settings: ServerSettings, index: int) -> ServerSettings:
    """Process `index`'s settings: its own metrics port and index."""
    port = settings.metrics_port + index if settings.metrics_port else 0
    return dataclasses.replace(settings, metrics_port=port, process_index=index)


def _run(settings: ServerSettings, factory: Any) -> None:
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from tokenwire.server.runtime.app import serve

    sys.exit(asyncio.run(serve(settings, factory)))


def vllm_worker(listen_address: str, sock: Any, settings: ServerSettings,
                client_config: dict[str, Any]) -> None:
    """One serving process over the shared vLLM engine core (the target
    vLLM's APIServerProcessManager starts; `sock` is vLLM's HTTP socket,
    unused: gRPC binds the shared port itself)."""
    from tokenwire.server.engine.vllm.adapter import VllmEngine

    _run(_own(settings, int(client_config["client_index"])),
         lambda s: VllmEngine(s, client_config))


def fake_worker(settings: ServerSettings, index: int) -> None:
    """One serving process with its own fake engine."""
    from tokenwire.server.runtime.app import make_engine

    _run(_own(settings, index), make_engine)


def control_sockets(settings: ServerSettings, folder: str) -> ServerSettings:
    """Control across the processes: each one's private socket in `folder`
    (mkdtemp's: 0700, this user only), and this launch's relay token in the
    environment every serving process inherits (control/relay.py)."""
    from tokenwire.server.control.relay import TOKEN_ENV, new_token

    os.chmod(folder, 0o700)
    os.environ[TOKEN_ENV] = new_token()
    sockets = tuple(str(pathlib.Path(folder) / f"p{i}.sock")
                    for i in range(settings.api_server_count))
    return dataclasses.replace(settings, control_sockets=sockets)


def run(settings: ServerSettings) -> int:
    """Run settings.api_server_count serving processes until SIGTERM/SIGINT."""
    if settings.port == 0:
        raise SystemExit("tokenwire serve: --api-server-count > 1 needs a fixed --port")
    from tokenwire.server.security.tenancy import share_secret

    share_secret()  # one tenant salt secret for every process (security/tenancy.py)
    if settings.engine != "fake":
        from tokenwire.server.engine.vllm.launcher import run_shared_engine

        with tempfile.TemporaryDirectory(prefix="tokenwire-control-") as folder:
            if settings.enable_control:  # process 0 runs control; the others relay to it
                settings = control_sockets(settings, folder)
            run_shared_engine(settings, vllm_worker)
        return 0
    if settings.enable_control:
        raise SystemExit("tokenwire serve: --enable-control with --api-server-count > 1 needs the "
                         "vLLM engine (fake engines share no engine core to control)")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=fake_worker, args=(settings, i), name=f"tokenwire-{i}")
             for i in range(settings.api_server_count)]
    for proc in procs:
        proc.start()

    def forward(signum: int, frame: object) -> None:  # each process stops gracefully
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                os.kill(proc.pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    for proc in procs:
        proc.join()
    return max((p.exitcode or 0) for p in procs)

