"""The access log: one INFO line per finished RPC on the `tokenwire.access`
logger, with the method, status, request id (x-request-id metadata, else
the request's own id), tenant, prompt and completion tokens and latency;
health probes are left out."""

from __future__ import annotations

import collections.abc
import logging
import re
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.rpc import chat_request, error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.server.core.metrics import AccessRecord, logged
from tokenwire.v1 import generate_pb2, service_pb2_grpc

KEYS = """
[[keys]]
key = "sk-alpha-0001"
tenant = "alpha"
"""
LINE = re.compile(r"(\w+) (\w+) request_id=(\S+) tenant=(\S+) prompt_tokens=(\d+) "
                  r"completion_tokens=(\d+) latency_ms=[\d.]+$")


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory, transport) -> collections.abc.Iterator[ThreadServer]:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(KEYS)
    with fake_serving(api_keys_file=str(path), grpc_transport=transport) as running:
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


FORGED = ("r1 tenant=- prompt_tokens=3 completion_tokens=2 latency_ms=1.0\n"
          "2026-11-29 00:00:00,000 tokenwire.access ControlService/Pause OK request_id=ops-1")


@pytest.mark.parametrize("request_id", ["a\nb", "a\rb", FORGED, "tab\there", "nul\x00",
                                        "bidi\u202eoverride", "line\u2028separator"])
def test_a_request_id_with_control_characters_is_refused(
        server: ThreadServer, caplog: pytest.LogCaptureFixture, request_id: str) -> None:
    """Issue 42 L-4: a body request_id holding a newline (or any control or
    format character) is INVALID_ARGUMENT naming request_id, so it cannot
    start an access-log line of the caller's making; one line per RPC."""
    auth = (("authorization", "Bearer sk-alpha-0001"),)
    with caplog.at_level(logging.INFO, logger="tokenwire.access"), \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        generate = generate_pb2.GenerateRequest(token_ids=[5, 6, 7], request_id=request_id)
        generate.sampling_params.max_tokens = 2
        for call, request in ((stub.Generate, generate),
                              (stub.CreateChatCompletion,
                               chat_request(max_tokens=2, request_id=request_id))):
            with pytest.raises(grpc.RpcError) as exc:
                call(request, metadata=auth, timeout=10)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            info = error_info(exc.value)
            assert info.metadata["param"] == "request_id" and info.reason == "INVALID_FORMAT"
        end = time.monotonic() + 5  # (the server writes a line after its answer left)
        while len(_lines(caplog)) < 2 and time.monotonic() < end:
            time.sleep(0.01)
    messages = [r.getMessage() for r in caplog.records if r.name == "tokenwire.access"]
    assert len(messages) == 2 and all("\n" not in m and "Pause" not in m for m in messages)
    assert [LINE.match(m).groups()[:2] for m in messages] == [  # type: ignore[union-attr]
        ("Generate", "INVALID_ARGUMENT"), ("CreateChatCompletion", "INVALID_ARGUMENT")]


def test_a_logged_value_is_one_field_whatever_it_holds() -> None:
    """The access log escapes what it writes of a caller (request id,
    tenant), so no value starts a line or a field of its own even if it
    got past the checks on the way in."""
    assert logged("req-abc_7.x") == "req-abc_7.x"
    for text in (FORGED, "a b", "a\\nb", "tab\t", "é\n"):
        out = logged(text)
        assert out.isprintable() and " " not in out and out != text
        assert out.encode().decode("unicode_escape") == text
    record = AccessRecord("Generate", FORGED, tenant="a\nb")
    assert LINE.match(f"{record.method} OK request_id={logged(record.request_id)} "
                      f"tenant={logged(record.tenant)} prompt_tokens=0 completion_tokens=0 "
                      "latency_ms=0.1")
