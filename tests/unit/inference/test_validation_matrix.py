"""Every malformed request gets INVALID_ARGUMENT (or NOT_FOUND) naming the
field, before the engine is called; the server keeps serving."""

from __future__ import annotations

import grpc
import pytest

from tests.cases import CHAT_CASES, GENERATE_CASES
from tests.rpc import chat_request, error_info, field_violations
from tokenwire.v1 import generate_pb2, models_pb2, tokenize_pb2

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

USER = [{"role": "user", "content": "hi"}]

@pytest.mark.parametrize(
    ("fields", "code", "param"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
@pytest.mark.parametrize("rpc", ["CreateChatCompletion", "StreamChatCompletion"])
def test_chat_rejects(fake_stub, fake_engine, rpc, fields, code, param) -> None:
    before = len(fake_engine.requests)
    req = chat_request(**fields)
    with pytest.raises(grpc.RpcError) as exc_info:
        call = getattr(fake_stub, rpc)(req, timeout=10)
        if rpc.startswith("Stream"):
            list(call)
    err = exc_info.value
    assert err.code().name == code, err.details()
    info = error_info(err)
    assert info is not None and info.domain == "tokenwire.dev"
    assert info.metadata["param"] == param
    # AIP-193: the reason names the cause, not the status code.
    assert info.reason not in grpc.StatusCode.__members__, info.reason
    # The same reason and param as plain trailers (what the gateway reads).
    trailers = dict(err.trailing_metadata())
    assert (trailers["tokenwire-reason"], trailers["tokenwire-param"]) == (info.reason, param)
    if code == "INVALID_ARGUMENT":  # a google.rpc.BadRequest field violation too
        (violation,) = field_violations(err)
        assert (violation.field, violation.reason) == (param, info.reason)
    assert param.split("[")[0].split(".")[0] in err.details()
    assert len(fake_engine.requests) == before, "validation must happen before the engine"
    # The server keeps serving.
    ok = fake_stub.CreateChatCompletion(chat_request(max_tokens=3), timeout=10)
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.parametrize(
    ("fields", "param"), [c[1:] for c in GENERATE_CASES], ids=[c[0] for c in GENERATE_CASES]
)
def test_generate_rejects(fake_stub, fields, param) -> None:
    from google.protobuf import json_format

    req = json_format.ParseDict(fields, generate_pb2.GenerateRequest())
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Generate(req, timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc_info.value)
    assert info is not None and info.metadata["param"] == param


def test_tokenize_rejects_both_or_neither(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Tokenize(tokenize_pb2.TokenizeRequest(), timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_detokenize_rejects_beyond_vocab(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Detokenize(tokenize_pb2.DetokenizeRequest(tokens=[5, 100000]), timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc_info.value).metadata["param"] == "tokens"


def _nan_chat(where: str):
    req = chat_request(messages=USER)
    if where == "tool_choice":
        req.tool_choice.struct_value.update({"type": "function"})
        req.tool_choice.struct_value.fields["x"].number_value = float("nan")
    elif where == "chat_template_kwargs":
        req.chat_template_kwargs.fields["x"].number_value = float("inf")
    else:  # a tool's parameters
        tool = req.tools.add(type="function")
        tool.function.name = "f"
        tool.function.parameters.fields["maximum"].number_value = float("-inf")
    return req


@pytest.mark.parametrize(("where", "param"), [
    ("tool_choice", "tool_choice"), ("chat_template_kwargs", "chat_template_kwargs"),
    ("tools", "tools[0].function.parameters")])
def test_non_finite_numbers_in_json_fields_are_named(fake_stub, where, param) -> None:
    """gRPC can carry NaN and infinities in a Struct, which JSON cannot."""
    with pytest.raises(grpc.RpcError) as err:
        fake_stub.CreateChatCompletion(_nan_chat(where), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(err.value)
    assert info is not None and (info.reason, info.metadata["param"]) == (
        "VALUE_NOT_FINITE", param)


def test_health_still_serving(fake_stub) -> None:
    assert fake_stub.GetHealth(models_pb2.GetHealthRequest(), timeout=5).status == "SERVING"
