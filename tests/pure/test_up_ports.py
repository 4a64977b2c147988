"""`tokenwire up` numbers its servers' /metrics ports from one free block when
no --metrics-port is given: the block lies below the kernel's ephemeral range
(where an outgoing connection cannot take a port between the probe and the
server's bind) and every port of it is free."""

from __future__ import annotations

import pathlib
import socket

from tokenwire.gateway.up_ports import free_ports


def test_free_block_is_bindable_and_below_the_ephemeral_range() -> None:
    low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for count in (1, 4):
        base = free_ports(count, "127.0.0.1")
        assert base + count <= low
        held = []
        try:
            for port in range(base, base + count):
                held.append(socket.socket())
                held[-1].bind(("127.0.0.1", port))
        finally:
            for sock in held:
                sock.close()

