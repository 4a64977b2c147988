"""Images on the other message-in routes (issue #36) on the fake engine,
through chat's image path: the Responses API's input_image parts, the
Messages API's image blocks (base64 and url sources, count_tokens counting
the expanded ids) and Tokenize with image messages give the same expanded
ids as chat's image_url parts; bad images are INVALID_ARGUMENT naming the
API's own field."""

from __future__ import annotations

import base64
import collections.abc
import io
import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from PIL import Image

from tests.servers import fake_serving
from tokenwire.server.engine.fake import media
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import (
    anthropic_pb2,
    chat_pb2,
    events_pb2_grpc,
    responses_pb2,
    service_pb2_grpc,
    tokenize_pb2,
)


def refused(call: Any, req: Any) -> tuple[str, str]:
    """The INVALID_ARGUMENT's reason and field (its ErrorInfo)."""
    with pytest.raises(grpc.RpcError) as info:
        call(req, timeout=10)
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    for detail in rpc_status.from_call(err).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            ei = error_details_pb2.ErrorInfo()
            detail.Unpack(ei)
            return ei.reason, ei.metadata["param"]
    raise AssertionError("no ErrorInfo")


def png(w: int = 8, h: int = 6) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


B64 = base64.b64encode(png()).decode()
URL = "data:image/png;base64," + B64


@pytest.fixture(scope="module")
def vlm() -> collections.abc.Iterator[tuple[Any, Any]]:
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    with fake_serving(engine, served_model_name="fake-model") as server, \
            grpc.insecure_channel(server.address) as channel:
        yield (service_pb2_grpc.TokenwireServiceStub(channel),
               events_pb2_grpc.EventStreamServiceStub(channel))


def chat_ids(stub: Any) -> tuple[list[int], dict[str, Any]]:
    """The expanded prompt chat gives for "Look:" + the image + "?"."""
    req = json_format.ParseDict(
        {"model": "fake-model", "max_tokens": 3, "return_token_ids": True,
         "messages": [{"role": "user", "content": [
             {"type": "text", "text": "Look:"},
             {"type": "image_url", "image_url": {"url": URL}},
             {"type": "text", "text": "?"}]}]},
        chat_pb2.CreateChatCompletionRequest())
    resp = stub.CreateChatCompletion(req, timeout=10)
    return list(resp.prompt_token_ids), json_format.MessageToDict(resp.mm_placeholders)


def responses(content: Any, **body: Any) -> responses_pb2.CreateResponseRequest:
    return json_format.ParseDict(
        {"model": "fake-model", "max_output_tokens": 3, "return_token_ids": True,
         "input": [{"role": "user", "content": content}], **body},
        responses_pb2.CreateResponseRequest())


def input_image(url: str = URL, **extra: Any) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url, "detail": "auto", **extra}


def messages(*blocks: dict[str, Any], **body: Any) -> anthropic_pb2.CreateMessageRequest:
    return json_format.ParseDict(
        {"model": "fake-model", "max_tokens": 3,
         "messages": [{"role": "user", "content": list(blocks)}], **body},
        anthropic_pb2.CreateMessageRequest())


def image_block(data: str = B64, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                        "data": data}}


# -- Responses --------------------------------------------------------------

def test_responses_input_image_runs_as_chat_with_its_placeholders(vlm) -> None:
    stub, events = vlm
    ids, places = chat_ids(stub)
    assert ids.count(media.IMAGE) == media.EMBEDS
    req = responses([{"type": "input_text", "text": "Look:"}, input_image(),
                     {"type": "input_text", "text": "?"}])
    resp = stub.CreateResponse(req, timeout=10)
    assert list(resp.prompt_token_ids) == ids
    assert json_format.MessageToDict(resp.mm_placeholders) == places
    assert resp.usage.input_tokens == len(ids)
    assert len(resp.output_token_ids) == 3
    # REST's JSON (CreateResponseJson) and the streamed response.completed.
    body = json.loads(events.CreateResponseJson(req, timeout=10).data)
    assert body["prompt_token_ids"] == ids and body["mm_placeholders"] == places
    assert body["usage"]["input_tokens"] == len(ids)
    data = b"".join(b.data for b in events.StreamResponseEvents(req, timeout=10)).decode()
    done = [json.loads(f.split("data: ", 1)[1]) for f in data.split("\n\n")
            if f.startswith("event: response.completed")]
    assert done[0]["response"]["mm_placeholders"] == places
    assert done[0]["response"]["prompt_token_ids"] == ids


def test_responses_without_token_ids_has_no_extras(vlm) -> None:
    _, events = vlm
    req = responses([input_image()])
    req.ClearField("return_token_ids")
    body = json.loads(events.CreateResponseJson(req, timeout=10).data)
    assert "prompt_token_ids" not in body and "mm_placeholders" not in body
    assert body["usage"]["input_tokens"] > media.EMBEDS


@pytest.mark.parametrize("content,reason,param", [
    ([input_image("data:image/png;base64,bm90IGFuIGltYWdl")], "MEDIA_INVALID",
     "input[0].content[0].image_url"),
    ([{"type": "input_text", "text": "x"}, input_image("http://169.254.169.254/x")],
     "MEDIA_URL_NOT_ALLOWED", "input[0].content[1].image_url"),
    ([input_image(), input_image(), input_image()], "TOO_MANY_ITEMS",
     "input[0].content[2].image_url"),
    ([{"type": "input_image", "file_id": "file-123", "detail": "auto"}], "FEATURE_DISABLED",
     "input[0].content[0].file_id"),
    ([input_image("ftp://x/y.png")], "MEDIA_URL_NOT_ALLOWED", "input[0].content[0].image_url"),
    ([input_image(detail="huge")], "VALUE_NOT_ALLOWED", "input[0].content[0].detail"),
])
def test_responses_bad_images_name_the_input_field(vlm, content, reason, param) -> None:
    stub, _ = vlm
    # (an instructions message first: the chat message index is not the input index)
    req = responses(content, instructions="Be brief.")
    assert refused(stub.CreateResponse, req) == (reason, param)
    assert len(stub.CreateResponse(responses([input_image()]), timeout=10).output_token_ids) == 3


def test_responses_image_to_a_text_only_model(fake_stub) -> None:
    req = responses([input_image()])
    req.model = ""
    assert refused(fake_stub.CreateResponse, req) == (
        "UNSUPPORTED_MODALITY", "input[0].content[0].image_url")


# -- Anthropic Messages -----------------------------------------------------

def test_messages_image_blocks_run_as_chat_and_count_the_expanded_ids(vlm) -> None:
    stub, events = vlm
    ids, _ = chat_ids(stub)
    req = messages({"type": "text", "text": "Look:"}, image_block(),
                   {"type": "text", "text": "?"})
    resp = stub.CreateMessage(req, timeout=10)
    assert resp.usage.input_tokens + resp.usage.cache_read_input_tokens == len(ids)
    assert resp.stop_reason == "max_tokens"
    count = anthropic_pb2.CountMessageTokensRequest(model="fake-model")
    count.messages.extend(req.messages)
    assert stub.CountMessageTokens(count, timeout=10).input_tokens == len(ids)
    # Streamed: message_start's usage counts the expanded prompt too.
    data = b"".join(b.data for b in events.StreamMessageEvents(req, timeout=10)).decode()
    start = json.loads(data.split("\n\n")[0].split("data: ", 1)[1])
    assert start["message"]["usage"]["input_tokens"] == len(ids)


def test_messages_after_a_tool_result_name_the_image_block(vlm) -> None:
    """A user turn's tool_result blocks become tool messages before its
    text and images: an error still names the image block."""
    stub, _ = vlm
    req = json_format.ParseDict({"model": "fake-model", "max_tokens": 3, "messages": [
        {"role": "user", "content": "Call it."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f",
                                           "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "done"},
            {"type": "text", "text": "And this?"},
            image_block(base64.b64encode(b"not an image").decode())]}]},
        anthropic_pb2.CreateMessageRequest())
    assert refused(stub.CreateMessage, req) == ("MEDIA_INVALID",
                                                "messages[2].content[2].source.data")


def chat_prompt(stub: Any, messages_: list[dict[str, Any]],
                placeholders: list[dict[str, Any]] | None = None) -> list[int]:
    """The expanded prompt chat gives for these messages (and its
    placeholders, appended to `placeholders`)."""
    req = json_format.ParseDict({"model": "fake-model", "max_tokens": 3,
                                 "return_token_ids": True, "messages": messages_},
                                chat_pb2.CreateChatCompletionRequest())
    resp = stub.CreateChatCompletion(req, timeout=10)
    if placeholders is not None:
        placeholders.append(json_format.MessageToDict(resp.mm_placeholders))
    return list(resp.prompt_token_ids)


TOOL_CALL = {"role": "assistant", "tool_calls": [
    {"id": "t1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}]}


def tool_turn(result: Any, *after: dict[str, Any]) -> anthropic_pb2.CreateMessageRequest:
    return json_format.ParseDict({"model": "fake-model", "max_tokens": 3, "messages": [
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot",
                                           "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": result}, *after]}]},
        anthropic_pb2.CreateMessageRequest())


def test_messages_tool_result_images_follow_the_tool_message(vlm) -> None:
    """A tool_result's image blocks (a computer-use screenshot) run as vLLM's
    Messages API puts them: the tool message with the result's text, then a
    user message with its images, then the turn's own text."""
    stub, events = vlm
    expected = chat_prompt(stub, [
        {"role": "user", "content": "Take a screenshot."}, TOOL_CALL,
        {"role": "tool", "tool_call_id": "t1", "content": "here\nit is"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
        {"role": "user", "content": [{"type": "text", "text": "What now?"}]}])
    assert expected.count(media.IMAGE) == media.EMBEDS
    req = tool_turn([{"type": "text", "text": "here"}, image_block(),
                     {"type": "text", "text": "it is"}], {"type": "text", "text": "What now?"})
    usage = stub.CreateMessage(req, timeout=10).usage  # (input_tokens: the uncached part)
    assert usage.input_tokens + usage.cache_read_input_tokens == len(expected)
    count = anthropic_pb2.CountMessageTokensRequest(model="fake-model")
    count.messages.extend(req.messages)
    assert stub.CountMessageTokens(count, timeout=10).input_tokens == len(expected)
    data = b"".join(b.data for b in events.StreamMessageEvents(req, timeout=10)).decode()
    start = json.loads(data.split("\n\n")[0].split("data: ", 1)[1])
    assert start["message"]["usage"]["input_tokens"] == len(expected)


@pytest.mark.parametrize("result,reason,param", [
    ([{"type": "text", "text": "x"}, image_block(base64.b64encode(b"nope").decode())],
     "MEDIA_INVALID", "messages[2].content[0].content[1].source.data"),
    ([image_block(media_type="application/pdf")], "UNSUPPORTED_MEDIA_TYPE",
     "messages[2].content[0].content[0].source.media_type"),
    ([{"type": "image", "source": {"type": "url", "url": "http://169.254.169.254/x"}}],
     "MEDIA_URL_NOT_ALLOWED", "messages[2].content[0].content[0].source.url"),
    ([{"type": "document", "source": {}}], "VALUE_NOT_ALLOWED",
     "messages[2].content[0].content[0].type"),
    ([{"type": "text", "text": 7}], "INVALID_TYPE", "messages[2].content[0].content[0].text"),
    ([image_block()] * 3, "TOO_MANY_ITEMS", "messages[2].content[0].content[2].source.data"),
])
def test_messages_bad_tool_result_images_name_the_block(vlm, result, reason, param) -> None:
    stub, _ = vlm
    assert refused(stub.CreateMessage, tool_turn(result)) == (reason, param)
    assert stub.CreateMessage(tool_turn([image_block()]), timeout=10).usage.input_tokens > 0


def tool_output(output: Any) -> responses_pb2.CreateResponseRequest:
    return json_format.ParseDict(
        {"model": "fake-model", "max_output_tokens": 3, "return_token_ids": True,
         "instructions": "Be brief.", "input": [
             {"role": "user", "content": "Take a screenshot."},
             {"type": "function_call", "call_id": "t1", "name": "shot", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "t1", "output": output}]},
        responses_pb2.CreateResponseRequest())


def test_responses_function_call_output_images_in_the_tool_message(vlm) -> None:
    """A function_call_output's input_image parts stay in the tool message
    (vLLM passes the output as the tool message's content)."""
    stub, _ = vlm
    places: list[dict[str, Any]] = []
    expected = chat_prompt(stub, [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Take a screenshot."}, TOOL_CALL,
        {"role": "tool", "tool_call_id": "t1", "content": [
            {"type": "text", "text": "here:"}, {"type": "image_url", "image_url": {"url": URL}}]}],
        places)
    assert expected.count(media.IMAGE) == media.EMBEDS
    resp = stub.CreateResponse(tool_output([{"type": "input_text", "text": "here:"},
                                            input_image()]), timeout=10)
    assert list(resp.prompt_token_ids) == expected
    assert json_format.MessageToDict(resp.mm_placeholders) == places[0]
    # A plain string output is still a plain tool message.
    text = stub.CreateResponse(tool_output("done"), timeout=10)
    assert media.IMAGE not in text.prompt_token_ids


@pytest.mark.parametrize("output,reason,param", [
    ([input_image("data:image/png;base64,bm90IGFuIGltYWdl")], "MEDIA_INVALID",
     "input[2].output[0].image_url"),
    ([{"type": "input_text", "text": "x"}, input_image("http://169.254.169.254/x")],
     "MEDIA_URL_NOT_ALLOWED", "input[2].output[1].image_url"),
    ([input_image(), {"type": "input_file", "file_id": "f"}], "VALUE_NOT_ALLOWED",
     "input[2].output[1].type"),
])
def test_responses_bad_function_call_output_images(vlm, output, reason, param) -> None:
    stub, _ = vlm
    assert refused(stub.CreateResponse, tool_output(output)) == (reason, param)


@pytest.mark.parametrize("block,reason,param", [
    (image_block(media_type="application/pdf"), "UNSUPPORTED_MEDIA_TYPE",
     "messages[0].content[0].source.media_type"),
    (image_block(data="!!!not base64!!!"), "MEDIA_INVALID",
     "messages[0].content[0].source.data"),
    ({"type": "image", "source": {"type": "url", "url": "https://evil.example/a.png"}},
     "MEDIA_URL_NOT_ALLOWED", "messages[0].content[0].source.url"),
    ({"type": "image", "source": {"type": "file", "file_id": "file_1"}}, "VALUE_NOT_ALLOWED",
     "messages[0].content[0].source.type"),
    ({"type": "image"}, "FIELD_REQUIRED", "messages[0].content[0].source"),
])
def test_messages_bad_images_name_the_block(vlm, block, reason, param) -> None:
    stub, _ = vlm
    assert refused(stub.CreateMessage, messages(block)) == (reason, param)


def test_messages_url_source_on_the_allow_list_and_too_many(vlm) -> None:
    stub, _ = vlm
    # The fake's --allowed-media-domains: fetched (the fake reads the URL's bytes).
    allowed = {"type": "image", "source": {"type": "url", "url": "https://images.example/a"}}
    assert stub.CreateMessage(messages(allowed), timeout=10).usage.input_tokens > 0
    three = [image_block()] * 3
    assert refused(stub.CreateMessage, messages(*three)) == (
        "TOO_MANY_ITEMS", "messages[0].content[2].source.data")
    count = anthropic_pb2.CountMessageTokensRequest(model="fake-model")
    count.messages.extend(messages(*three).messages)
    assert refused(stub.CountMessageTokens, count) == (
        "TOO_MANY_ITEMS", "messages[0].content[2].source.data")


def test_messages_image_to_a_text_only_model(fake_stub) -> None:
    req = messages(image_block())
    req.model = ""
    assert refused(fake_stub.CreateMessage, req) == (
        "UNSUPPORTED_MODALITY", "messages[0].content[0].source.data")


# -- Tokenize ---------------------------------------------------------------

def tokenize_req(*parts: Any, **body: Any) -> tokenize_pb2.TokenizeRequest:
    return json_format.ParseDict(
        {"model": "fake-model", "messages": [{"role": "user", "content": list(parts)}], **body},
        tokenize_pb2.TokenizeRequest())


def test_tokenize_messages_with_an_image_gives_the_expanded_ids(vlm) -> None:
    stub, _ = vlm
    ids, _ = chat_ids(stub)
    req = tokenize_req({"type": "text", "text": "Look:"},
                       {"type": "image_url", "image_url": {"url": URL}},
                       {"type": "text", "text": "?"}, return_token_strs=True)
    resp = stub.Tokenize(req, timeout=10)
    assert list(resp.tokens) == ids and resp.count == len(ids)
    assert len(resp.token_strs) == len(ids)


def test_tokenize_bad_images_name_the_field(vlm, fake_stub) -> None:
    stub, _ = vlm
    bad = tokenize_req({"type": "image_url", "image_url": {"url": "http://10.0.0.1/a.png"}})
    assert refused(stub.Tokenize, bad) == ("MEDIA_URL_NOT_ALLOWED",
                                           "messages[0].content[0].image_url.url")
    text_only = tokenize_req({"type": "image_url", "image_url": {"url": URL}})
    text_only.model = ""
    assert refused(fake_stub.Tokenize, text_only) == ("UNSUPPORTED_MODALITY",
                                                      "messages[0].content[0]")
    turn = tokenize_req({"type": "text", "text": "Now:"},
                        {"type": "image_url", "image_url": {"url": "http://10.0.0.1/a.png"}},
                        next_turn=True)  # named in the caller's messages, not the probe's
    assert refused(stub.Tokenize, turn) == ("MEDIA_URL_NOT_ALLOWED",
                                            "messages[0].content[1].image_url.url")


def test_tokenize_next_turn_with_an_image_gives_the_expanded_suffix(vlm) -> None:
    """next_turn with an image: what follows an earlier completion, the new
    image expanded once (the suffix a Session continuation runs)."""
    stub, _ = vlm
    text = tokenize_req({"type": "text", "text": "Now:"}, next_turn=True,
                        previous_completion_ids=[72, 105])
    shot = tokenize_req({"type": "text", "text": "Now:"},
                        {"type": "image_url", "image_url": {"url": URL}}, next_turn=True,
                        previous_completion_ids=[72, 105])
    plain, with_image = (list(stub.Tokenize(r, timeout=10).tokens) for r in (text, shot))
    at = with_image.index(media.IMAGE_START)
    assert with_image[at:at + len(media.EXPAND)] == media.EXPAND
    assert with_image.count(media.IMAGE_START) == 1
    assert with_image[:at] == plain[:at]  # the same end of turn and opener before it


# -- Render (vLLM's /v1/messages/render, /v1/responses/render) ---------------

def test_messages_and_responses_render_as_their_chat_renders(vlm) -> None:
    """RenderMessage / RenderResponse: the Generate request the body runs as
    (its chat's render: the expanded ids and vLLM's features of the image),
    and Generate runs it on the same prompt; errors name the API's fields."""
    stub, _ = vlm
    ids, places = chat_ids(stub)
    chat_render = stub.RenderChatCompletion(json_format.ParseDict(
        {"model": "fake-model", "max_tokens": 3, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "Look:"}, {"type": "image_url", "image_url": {"url": URL}},
            {"type": "text", "text": "?"}]}]}, chat_pb2.CreateChatCompletionRequest()))
    msg = stub.RenderMessage(messages({"type": "text", "text": "Look:"}, image_block(),
                                      {"type": "text", "text": "?"}))
    resp = stub.RenderResponse(responses([{"type": "input_text", "text": "Look:"},
                                          input_image(), {"type": "input_text", "text": "?"}]))
    for rendered in (msg, resp):
        assert list(rendered.token_ids) == ids == list(chat_render.token_ids)
        assert json_format.MessageToDict(rendered.features) == json_format.MessageToDict(
            chat_render.features)
        assert rendered.sampling_params.max_tokens == 3
        gen = stub.Generate(rendered, timeout=10)
        assert list(gen.prompt_token_ids) == ids
        assert json_format.MessageToDict(gen.mm_placeholders) == places
    assert refused(stub.RenderMessage, messages(image_block(media_type="application/pdf"))) == (
        "UNSUPPORTED_MEDIA_TYPE", "messages[0].content[0].source.media_type")
    assert refused(stub.RenderResponse, responses([input_image("ftp://x/y.png")])) == (
        "MEDIA_URL_NOT_ALLOWED", "input[0].content[0].image_url")
    text = stub.RenderMessage(messages({"type": "text", "text": "hi"}))
    assert not text.HasField("features") and len(text.token_ids) > 0
