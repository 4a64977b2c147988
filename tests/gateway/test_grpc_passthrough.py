"""Native gRPC clients through the same Envoy listener (HTTP/2 pass-through),
fake engine: unary, server streaming, rich errors, health, reflection."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.gateway.transports import gateway_on
from tests.rpc import chat_request, error_info
from tokenwire.v1 import models_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def gateway(gateway, transport):
    with gateway_on(transport, gateway) as envoy:
        yield envoy


@pytest.fixture(scope="module")
def via_envoy(gateway):
    with grpc.insecure_channel(gateway.address) as channel:
        yield channel


def test_unary_through_envoy_equals_direct(via_envoy, flaky_stub) -> None:
    req = chat_request(model="fake-model", max_tokens=4, seed=3, return_token_ids=True)
    through = service_pb2_grpc.TokenwireServiceStub(via_envoy).CreateChatCompletion(req, timeout=10)
    direct = flaky_stub.CreateChatCompletion(req, timeout=10)
    assert through.choices == direct.choices
    assert through.prompt_token_ids == direct.prompt_token_ids


def test_server_streaming_through_envoy(via_envoy) -> None:
    stub = service_pb2_grpc.TokenwireServiceStub(via_envoy)
    chunks = list(
        stub.StreamChatCompletion(chat_request(model="fake-model", max_tokens=3), timeout=10)
    )
    assert [c.object for c in chunks] == ["chat.completion.chunk"] * 4
    assert chunks[-1].choices[0].finish_reason == "length"


def test_rich_error_details_pass_through(via_envoy) -> None:
    stub = service_pb2_grpc.TokenwireServiceStub(via_envoy)
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateChatCompletion(chat_request(model="nope"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    detail = error_info(info.value)
    assert detail is not None and detail.reason == "MODEL_NOT_FOUND"
    assert detail.metadata["param"] == "model"


def test_error_mid_stream_passes_through(via_envoy) -> None:
    stub = service_pb2_grpc.TokenwireServiceStub(via_envoy)
    got = []
    with pytest.raises(grpc.RpcError) as info:
        for chunk in stub.StreamChatCompletion(
            chat_request(model="fake-model",
                         messages=[{"role": "user", "content": "FAIL_MIDSTREAM"}], max_tokens=20),
            timeout=10,
        ):
            got.append(chunk)
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert len(got) == 4


def test_health_and_stats_through_envoy(via_envoy) -> None:
    health = health_pb2_grpc.HealthStub(via_envoy).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    stats = service_pb2_grpc.TokenwireServiceStub(via_envoy).GetStats(
        models_pb2.GetStatsRequest(), timeout=5
    )
    assert stats.model == "fake-model"


def test_bidirectional_stream_through_envoy(via_envoy) -> None:
    # Server reflection is a bidirectional stream: several requests, each
    # answered on the same open stream.
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(via_envoy)
    asks = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="tokenwire.v1.TokenwireService"
        ),
        reflection_pb2.ServerReflectionRequest(list_services=""),
    ]
    answers = list(stub.ServerReflectionInfo(iter(asks), timeout=10))
    assert len(answers) == 3
    names = {s.name for s in answers[0].list_services_response.service}
    assert "tokenwire.v1.TokenwireService" in names
    assert answers[1].file_descriptor_response.file_descriptor_proto


def _grpcurl() -> str:
    found = shutil.which("grpcurl") or str(
        __import__("pathlib").Path(sys.executable).parent / "grpcurl"
    )
    if not shutil.which(found):
        pytest.skip("grpcurl is not installed")
    return found


def test_grpcurl_through_envoy(gateway) -> None:
    grpcurl = _grpcurl()
    listed = subprocess.run([grpcurl, "-plaintext", gateway.address, "list"], check=True,
                            capture_output=True, text=True, timeout=30).stdout
    assert "tokenwire.v1.TokenwireService" in listed
    body = json.dumps({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 2})
    out = subprocess.run(
        [grpcurl, "-plaintext", "-d", body, gateway.address,
         "tokenwire.v1.TokenwireService/StreamChatCompletion"],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout
    assert out.count('"chat.completion.chunk"') == 3
