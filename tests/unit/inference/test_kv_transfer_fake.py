"""vLLM's P/D-disaggregation handshake (`kv_transfer_params`, issue #45
item 4) on the fake engine, whose connector answers a prefill side
(`do_remote_decode`) as vLLM's NIXL connector does (engine/fake/kv_transfer.py):
the handshake reaches the engine as given, the answer comes back on the
unary chat, completion and Generate (not on stream chunks, as vLLM's), the
REST JSON prints it (null without one, as vLLM's `model_dump()`), chat's
decode side takes the forwarded `prompt_token_ids` as its prompt, and
`ec_transfer_params` / `return_prompt_text` are refused by name."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.kv_transfer import ENGINE_ID
from tokenwire.server.inference.shared.openai_wire import response_json
from tokenwire.v1 import completion_pb2, generate_pb2

PREFILL = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
           "remote_block_ids": None, "remote_host": None, "remote_port": None}


def _answer(msg: Any) -> dict[str, Any] | None:
    """The response's kv_transfer_params as the REST JSON prints it."""
    return json.loads(response_json(msg))["kv_transfer_params"]


def _completion(**fields: Any) -> completion_pb2.CreateCompletionRequest:
    return json_format.ParseDict({"model": "fake-model", "prompt": "hello there",
                                  "max_tokens": 3, **fields},
                                 completion_pb2.CreateCompletionRequest())


def _generate(**fields: Any) -> generate_pb2.GenerateRequest:
    return json_format.ParseDict({"model": "fake-model", "token_ids": [1, 75, 80, 90],
                                  "sampling_params": {"max_tokens": 2}, **fields},
                                 generate_pb2.GenerateRequest())


def test_chat_prefill_side_returns_the_handoff(fake_stub, fake_engine: FakeEngine) -> None:
    req = chat_request(max_tokens=1, request_id="pd-chat-1", kv_transfer_params=PREFILL,
                       return_token_ids=True)
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    given = fake_engine.requests[-1].params.kv_transfer_params
    assert given == PREFILL and isinstance(given["remote_port"], type(None))  # as sent
    answer = _answer(resp)
    blocks = -(-len(resp.prompt_token_ids) // 16)
    assert answer == {
        "do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": ENGINE_ID,
        "remote_request_id": "pd-chat-1", "remote_block_ids": list(range(blocks)),
        "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1,
        "remote_prefill_cached_tokens": resp.usage.prompt_tokens_details.cached_tokens,
    }
    assert type(answer["remote_port"]) is int  # integral numbers print as integers


def test_decode_side_reuses_the_forwarded_prompt_ids(fake_stub, fake_engine: FakeEngine) -> None:
    prefill = fake_stub.CreateChatCompletion(chat_request(
        max_tokens=1, return_token_ids=True, kv_transfer_params=PREFILL), timeout=10)
    handoff = _answer(prefill)
    # A P/D proxy sends the handoff, with the prefill side's ids, to the decode side;
    # its messages say something else: the forwarded ids are the prompt (vLLM's reuse).
    ids = list(prefill.prompt_token_ids)
    decode = fake_stub.CreateChatCompletion(chat_request(
        messages=[{"role": "user", "content": "not what was prefilled"}], max_tokens=3,
        return_token_ids=True, kv_transfer_params={**handoff, "prompt_token_ids": ids}),
        timeout=10)
    assert list(decode.prompt_token_ids) == ids
    sent = fake_engine.requests[-1]
    assert sent.prompt_token_ids == ids
    assert sent.params.kv_transfer_params == handoff  # the ids taken out, the rest as sent
    assert _answer(decode) is None  # a decode side answers nothing


def test_forwarded_ids_alone_leave_no_handshake(fake_stub, fake_engine: FakeEngine) -> None:
    fake_stub.CreateChatCompletion(chat_request(
        max_tokens=1, kv_transfer_params={"prompt_token_ids": [75, 80]}), timeout=10)
    assert fake_engine.requests[-1].prompt_token_ids == [75, 80]
    assert fake_engine.requests[-1].params.kv_transfer_params is None


def test_forwarded_ids_are_ignored_with_media_in_the_messages(fake_stub,
                                                              fake_engine: FakeEngine) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(grpc.RpcError) as exc:  # rendered (and refused: the fake takes no image)
        fake_stub.CreateChatCompletion(chat_request(
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}],
            max_tokens=1, kv_transfer_params={"prompt_token_ids": [75, 80]}), timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc.value)
    assert info is not None and info.metadata["param"] != "kv_transfer_params.prompt_token_ids"


@pytest.mark.parametrize("bad", [[], [1.5], [-1], "1,2", [999999]])
def test_bad_forwarded_ids_are_refused_naming_them(fake_stub, bad: Any) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        fake_stub.CreateChatCompletion(chat_request(
            max_tokens=1, kv_transfer_params={"prompt_token_ids": bad}), timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc.value)
    assert info is not None
    assert info.metadata["param"] == "kv_transfer_params.prompt_token_ids", exc.value.details()


def test_no_handshake_no_answer_and_rest_prints_null(fake_stub, fake_engine: FakeEngine) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(max_tokens=1), timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params is None
    assert not resp.HasField("kv_transfer_params") and _answer(resp) is None
    # an empty object is not passed on chat and completion (vLLM's `if kv_transfer_params:`)
    fake_stub.CreateChatCompletion(chat_request(max_tokens=1, kv_transfer_params={}), timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params is None


def test_streamed_chat_passes_it_and_chunks_carry_none(fake_stub,
                                                       fake_engine: FakeEngine) -> None:
    chunks = list(fake_stub.StreamChatCompletion(chat_request(
        max_tokens=2, stream=True, kv_transfer_params=PREFILL), timeout=10))
    assert fake_engine.requests[-1].params.kv_transfer_params == PREFILL
    assert chunks and all("kv_transfer_params" not in json_format.MessageToDict(c)
                          for c in chunks)


def test_completion_batch_answers_the_first_prompts(fake_stub, fake_engine: FakeEngine) -> None:
    resp = fake_stub.CreateCompletion(_completion(
        prompt=["one", "two"], request_id="pd-cmpl", kv_transfer_params=PREFILL), timeout=10)
    sent = fake_engine.requests[-2:]
    assert all(r.params.kv_transfer_params == PREFILL for r in sent)
    answer = _answer(resp)
    assert answer is not None and answer["remote_request_id"] == "pd-cmpl-0"
    # completions keep forwarded ids in the handshake (vLLM reuses them on chat only)
    fake_stub.CreateCompletion(_completion(kv_transfer_params={"prompt_token_ids": [75]}),
                               timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params == {"prompt_token_ids": [75]}
    assert fake_engine.requests[-1].prompt_token_ids != [75]


def test_generate_round_trip_and_empty_object(fake_stub, fake_engine: FakeEngine) -> None:
    resp = fake_stub.Generate(_generate(request_id="pd-gen", kv_transfer_params=PREFILL),
                              timeout=10)
    answer = _answer(resp)
    assert answer is not None and answer["remote_request_id"] == "pd-gen"
    assert answer["remote_block_ids"] == [0]
    fake_stub.Generate(_generate(kv_transfer_params={}), timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params == {}  # vLLM's generate passes {}
    plain = fake_stub.Generate(_generate(), timeout=10)
    assert _answer(plain) is None


def test_render_answers_the_handshake(fake_stub) -> None:
    rendered = fake_stub.RenderChatCompletion(chat_request(
        max_tokens=1, kv_transfer_params={**PREFILL, "prompt_token_ids": [75, 80]}), timeout=10)
    assert list(rendered.token_ids) == [75, 80]
    assert json_format.MessageToDict(rendered.kv_transfer_params) == PREFILL


@pytest.mark.parametrize(("rpc", "request_", "param"), [
    ("CreateChatCompletion", chat_request(ec_transfer_params={"x": 1}), "ec_transfer_params"),
    ("CreateChatCompletion", chat_request(return_prompt_text=True), "return_prompt_text"),
    ("CreateCompletion", _completion(ec_transfer_params={}), "ec_transfer_params"),
    ("Generate", _generate(ec_transfer_params={"x": 1}), "ec_transfer_params"),
])
def test_what_is_not_served_is_refused_by_name(fake_stub, rpc: str, request_: Any,
                                               param: str) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        getattr(fake_stub, rpc)(request_, timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc.value)
    assert info is not None and info.reason == "UNSUPPORTED_FIELD"
    assert info.metadata["param"] == param and param in exc.value.details()


def test_return_prompt_text_false_is_accepted(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(max_tokens=1, return_prompt_text=False),
                                          timeout=10)
    assert resp.choices


def test_prompt_logprobs_minus_one_is_refused_by_name(fake_stub) -> None:
    """vLLM's -1 (every vocabulary entry per position) is refused: at most
    --max-logprobs, as logprobs (docs/contract.md, vLLM's response keys)."""
    with pytest.raises(grpc.RpcError) as exc:
        fake_stub.CreateChatCompletion(chat_request(max_tokens=1, prompt_logprobs=-1),
                                       timeout=10)
    info = error_info(exc.value)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info is not None and info.metadata["param"] == "prompt_logprobs"
    assert info.reason == "VALUE_OUT_OF_RANGE"
