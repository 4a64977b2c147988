"""The access log: one INFO line per finished RPC on the `tokenwire.access`
logger, with the method, status, request id (x-request-id metadata, else
the request's own id), tenant, prompt and completion tokens and latency;
health probes are left out."""

from __future__ import annotations

import collections.abc
import logging
import re

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.rpc import chat_request
from tests.servers import ThreadServer, fake_serving
from tokenwire.v1 import service_pb2_grpc

KEYS = """
[[keys]]
key = "sk-alpha-0001"
tenant = "alpha"
"""
LINE = re.compile(r"(\w+) (\w+) request_id=(\S+) tenant=(\S+) prompt_tokens=(\d+) "
                  r"completion_tokens=(\d+) latency_ms=[\d.]+$")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> collections.abc.Iterator[ThreadServer]:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(KEYS)
    with fake_serving(api_keys_file=str(path)) as running:
        yield running


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, ...]]:
    return [LINE.match(r.getMessage()).groups()  # type: ignore[union-attr]
            for r in caplog.records if r.name == "tokenwire.access"]


def test_one_line_per_rpc_with_id_tenant_tokens_and_status(
        server: ThreadServer, caplog: pytest.LogCaptureFixture) -> None:
    auth = (("authorization", "Bearer sk-alpha-0001"),)
    with caplog.at_level(logging.INFO, logger="tokenwire.access"), \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        resp = stub.CreateChatCompletion(chat_request(max_tokens=3, ignore_eos=True),
                                         metadata=(*auth, ("x-request-id", "req-abc")), timeout=10)
        streamed = list(stub.StreamChatCompletion(chat_request(max_tokens=2, ignore_eos=True),
                                                  metadata=auth, timeout=10))
        with pytest.raises(grpc.RpcError):
            stub.CreateChatCompletion(chat_request(max_tokens=-1), metadata=auth, timeout=10)
        health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
    lines = _lines(caplog)
    assert len(lines) == 3, lines  # the health probe is not logged
    unary, stream, bad = lines
    prompt = str(resp.usage.prompt_tokens)
    assert unary == ("CreateChatCompletion", "OK", "req-abc", "alpha", prompt, "3")
    assert stream[:2] == ("StreamChatCompletion", "OK") and stream[3:] == ("alpha", prompt, "2")
    assert stream[2] == streamed[0].id  # no x-request-id: the request's own id
    assert bad[:2] == ("CreateChatCompletion", "INVALID_ARGUMENT") and bad[4:] == ("0", "0")
