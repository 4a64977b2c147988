"""A Session client that sends but never reads (issue #11 item 3): the
outbox is bounded in bytes and the server stops reading the client, so the
client's sends stall instead of the server's memory growing; once it
reads, every started request still gets its one terminal event."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from tests.servers import ThreadServer
from tests.session_rpc import start_chat
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import service_pb2_grpc

SENT = 10_000
# ~8 KB per start and per error event (the error names the model): the
# HTTP/2 windows on both sides hold at most a few MB, a thousand or so.
MODEL = "no-such-model-" + "x" * 8000


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def test_a_client_that_never_reads_stops_being_read(transport) -> None:
    server = ThreadServer(
        ServerSettings(engine="fake", port=0, max_model_len=512, session_max_buffered_bytes=4096,
                       grpc_transport=transport),
        FakeEngine(max_model_len=512),
    ).start()
    pulled = 0
    done = threading.Event()

    def requests():
        nonlocal pulled
        for i in range(SENT):  # cheap failing starts: an unknown model, errors at once
            pulled += 1
            yield start_chat(f"r{i}", model=MODEL)
        done.wait(60)

    try:
        with grpc.insecure_channel(server.address) as ch:
            call = service_pb2_grpc.TokenwireServiceStub(ch).Session(requests(), timeout=60)
            # The client reads nothing; wait until its sends stop moving.
            last, deadline = -1, time.monotonic() + 60
            while pulled != last and time.monotonic() < deadline:
                last = pulled
                time.sleep(1.5)
            # Stalled short of the end: the server stopped reading (without
            # back-pressure it goes on taking every start and queueing errors).
            assert pulled < SENT, pulled
            # Reading resumes the flow: one error event per start, none lost.
            errors = 0
            for event in call:
                assert (
                    event.WhichOneof("event") == "error" and event.error.reason == "MODEL_NOT_FOUND"
                )
                errors += 1
                if errors == SENT:
                    break
            done.set()
            call.cancel()
            assert pulled == SENT and errors == SENT
    finally:
        done.set()
        server.stop()
