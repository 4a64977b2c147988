"""Chat's `reasoning_effort` and Responses' `reasoning.effort` as vLLM 0.32
passes them: into the chat template's kwargs (reasoning_effort over a
chat_template_kwargs one; enable_thinking from it unless the body's kwargs
set it: the kwargs vLLM's ChatCompletionRequest.build_chat_params gives,
compared here key for key), and for a harmony model into the system
message (tests/unit/engine/test_harmony.py). A value outside vLLM's set is
INVALID_ARGUMENT naming the field, on the fake engine's server."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.unit.inference.agent_cases import response_request
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.responses.request import to_chat
from tokenwire.server.inference.shared.messages import REASONING_EFFORTS, render_options
from tokenwire.v1 import chat_pb2, service_pb2_grpc, tokenize_pb2

HI = [{"role": "user", "content": "Hi"}]
# Only the renderer's own keys differ: vLLM's build_chat_params adds them to
# the kwargs; tokenwire's RenderOptions carries them as fields.
RENDERER_KEYS = {"add_generation_prompt", "continue_final_message", "documents"}


def _chat(**body: Any) -> chat_pb2.CreateChatCompletionRequest:
    return json_format.ParseDict({"model": "fake-model", "messages": HI, **body},
                                 chat_pb2.CreateChatCompletionRequest())


def _vllm_kwargs(**body: Any) -> dict[str, Any]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate({"model": "m", "messages": HI, **body})
    params = request.build_chat_params(None, "auto")
    return {k: v for k, v in params.chat_template_kwargs.items() if k not in RENDERER_KEYS}


@pytest.mark.parametrize("body", [
    {},
    {"reasoning_effort": "high"},
    {"reasoning_effort": "none"},
    {"reasoning_effort": "minimal"},
    {"reasoning_effort": "max"},
    {"reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False}},
    {"reasoning_effort": "none", "chat_template_kwargs": {"enable_thinking": True}},
    {"reasoning_effort": "low", "chat_template_kwargs": {"reasoning_effort": "high", "x": "y"}},
    {"chat_template_kwargs": {"reasoning_effort": "high"}},
], ids=lambda b: ",".join(f"{k}={v}" for k, v in b.items()) or "unset")
def test_template_kwargs_are_vllms(body) -> None:
    options = render_options(_chat(**body))
    assert options.template_kwargs == _vllm_kwargs(**body)
    assert options.reasoning_effort == body.get("reasoning_effort")  # (harmony's: only the field)


def test_the_values_are_vllms_and_others_are_refused() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    allowed = ChatCompletionRequest.model_fields["reasoning_effort"].annotation
    assert set(REASONING_EFFORTS) == {v for arg in allowed.__args__
                                      for v in getattr(arg, "__args__", ())}
    with pytest.raises(InvalidArgument) as err:
        render_options(_chat(reasoning_effort="extreme"))
    assert err.value.param == "reasoning_effort" and err.value.reason == "VALUE_NOT_ALLOWED"
    assert render_options(tokenize_pb2.TokenizeRequest()).reasoning_effort is None


def test_responses_reasoning_effort_is_chats() -> None:
    chat = to_chat(response_request(reasoning={"effort": "low", "summary": "auto"}), stream=False)
    assert chat.reasoning_effort == "low"
    assert render_options(chat).template_kwargs == {"reasoning_effort": "low",
                                                     "enable_thinking": True}
    for unset in ({}, {"reasoning": {}}, {"reasoning": {"effort": None}}):
        assert not to_chat(response_request(**unset), stream=False).HasField("reasoning_effort")
    for bad in ("extreme", 3):
        with pytest.raises(InvalidArgument) as err:
            to_chat(response_request(reasoning={"effort": bad}), stream=False)
        assert err.value.param == "reasoning.effort"


@pytest.fixture(scope="module")
def stub(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


def test_the_server_answers_a_good_effort_and_names_a_bad_one(stub) -> None:
    ok = stub.CreateChatCompletion(_chat(reasoning_effort="low", max_tokens=2), timeout=10)
    assert ok.choices[0].finish_reason == "length"
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateChatCompletion(_chat(reasoning_effort="extreme", max_tokens=2), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(err.value)
    assert info is not None and info.reason == "VALUE_NOT_ALLOWED"
    assert info.metadata["param"] == "reasoning_effort"
    resp = stub.CreateResponse(response_request(model="fake-model", max_output_tokens=2,
                                                reasoning={"effort": "high"}), timeout=10)
    assert resp.status == "incomplete"
    assert json_format.MessageToDict(resp.reasoning)["effort"] == "high"  # echoed
    with pytest.raises(grpc.RpcError) as bad:
        stub.CreateResponse(response_request(model="fake-model",
                                             reasoning={"effort": "extreme"}), timeout=10)
    info = error_info(bad.value)
    assert info is not None and info.metadata["param"] == "reasoning.effort"

