"""`tokenwire up`'s ports: its two listeners' (REST: the gateway's --host /
--port, as `vllm serve`'s; gRPC: the servers' --grpc-host / --grpc-port, one
a replica) checked against each other, and the free block its servers'
/metrics take when no --metrics-port is given."""

from __future__ import annotations

import argparse


def check_ports(ns: argparse.Namespace) -> None:
    """SystemExit when `tokenwire up`'s ports cannot be honoured: a port of 0
    (the servers' are probed, the gateway's is waited on), or the REST port
    among the servers' gRPC ports (--port is REST's here, as in `vllm
    serve`; it was the servers' before)."""
    if ns.port == 0:
        raise SystemExit("tokenwire up: give the servers a fixed --grpc-port (not 0)")
    if ns.gateway_listen_port == 0:
        raise SystemExit("tokenwire up: give the REST listener a fixed --port (not 0)")
    if ns.port <= ns.gateway_listen_port < ns.port + max(1, ns.replicas):
        raise SystemExit(
            f"tokenwire up: --port {ns.gateway_listen_port} is the REST listener's (the "
            f"gateway's, as `vllm serve --port`), and the servers' gRPC takes --grpc-port "
            f"{ns.port}" + (f" to {ns.port + ns.replicas - 1}" if ns.replicas > 1 else "")
            + ": give them different ports (gRPC also answers on the REST port)")


def free_ports(count: int, host: str) -> int:
    """The first of `count` consecutive free ports on `host`, drawn below the
    kernel's ephemeral range where it is known (Linux): a port in that range
    can be taken by any outgoing connection (Envoy's, a client's) between
    this probe and the server's bind; below it only a listener can."""
    import pathlib
    import random
    import socket

    try:
        low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 0
    draw = random.Random()
    for attempt in range(256):
        if low > 10_000 + count and attempt < 192:
            base = draw.randrange(10_000, low - count)
        else:
            with socket.socket() as probe:
                probe.bind((host, 0))
                base = int(probe.getsockname()[1])
        if base + count > 65536:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                held.append(socket.socket())
                held[-1].bind((host, port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise SystemExit(f"tokenwire up: no {count} free ports in a row on {host} for the servers' "
                     "/metrics: give --metrics-port")
