"""The Anthropic Messages API through the real Envoy, with the official
`anthropic` SDK as the client (fake engine with Hermes tools and <think>
reasoning): messages.create, messages.stream and messages.count_tokens work
unchanged, its `x-api-key` is the server's API key, and errors come in
Anthropic's shape."""

from __future__ import annotations

import collections.abc

import anthropic
import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine

KEY = "sk-anthropic-test"
TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
HI = [{"role": "user", "content": "Hi"}]
# The fake engine's parsers, as tests/conftest.py's fake_server has them
# (where the settings have the parser flags).
PARSERS = {k: v for k, v in {"reasoning_parser": "fake", "tool_call_parser": "hermes",
                             "enable_auto_tool_choice": True}.items()
           if k in ServerSettings.__dataclass_fields__}


@pytest.fixture(scope="module")
def url() -> collections.abc.Iterator[str]:
    with fake_serving(FakeEngine(max_model_len=512), served_model_name="fake-model",
                      api_key=KEY, **PARSERS) as server:
        envoy = start_gateway(server.address)
        try:
            yield envoy.url
        finally:
            stop_gateway(envoy)


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=KEY, max_retries=0)


def test_create_text(client) -> None:
    msg = client.messages.create(model="fake-model", max_tokens=200, messages=HI)
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.content[0].type == "text" and msg.content[0].text == "Hello from the fake engine."
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0


def test_create_stop_sequence_and_system(client) -> None:
    msg = client.messages.create(model="fake-model", max_tokens=200, messages=HI,
                                 system="Be brief.", stop_sequences=["fake"])
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", "fake")
    assert msg.content[0].text == "Hello from the "


def test_create_tool_use_then_tool_result(client) -> None:
    msg = client.messages.create(model="fake-model", max_tokens=200, messages=HI, tools=TOOLS)
    assert msg.stop_reason == "tool_use"
    use = next(b for b in msg.content if b.type == "tool_use")
    assert use.id.startswith("toolu_") and use.name == "get_weather"
    assert use.input == {"city": "Paris"}
    follow = client.messages.create(model="fake-model", max_tokens=200, messages=[
        *HI, {"role": "assistant", "content": msg.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "sunny"}]}])
    assert follow.content


def test_create_thinking(client) -> None:
    msg = client.messages.create(model="fake-model", max_tokens=200,
                                 messages=[{"role": "user", "content": "Think first."}])
    assert [b.type for b in msg.content] == ["thinking", "text"]
    assert msg.content[0].thinking == "The user wants a greeting."


def test_stream_text(client) -> None:
    with client.messages.stream(model="fake-model", max_tokens=200, messages=HI) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "message_delta" in kinds
    assert final.content[0].text == "Hello from the fake engine."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0


def test_token_in_token_out_through_the_sdk(client) -> None:
    """return_token_ids and nvext through Envoy's transcoder (extra_body):
    the ids on the Message and on the stream's events; a second turn sent as
    ids (nvext.token_data, no messages) hits the prefix cache."""
    ask = {"return_token_ids": True, "nvext": {"extra_fields": ["engine_data"]}}
    msg = client.messages.create(model="fake-model", max_tokens=200, messages=HI,
                                 extra_body=ask)
    extra = msg.model_extra or {}
    ids = extra["token_ids"]
    assert len(ids) == msg.usage.output_tokens and extra["prompt_token_ids"]
    assert extra["nvext"]["engine_data"]["completion_token_ids"] == ids
    with client.messages.stream(model="fake-model", max_tokens=200, messages=HI,
                                extra_body=ask) as stream:
        streamed = [t for event in stream
                    if event.type in ("content_block_delta", "message_delta")
                    for t in (event.model_extra or {}).get("token_ids", [])]
    assert streamed == ids
    history = extra["prompt_token_ids"] + ids
    second = client.messages.create(model="fake-model", max_tokens=200, messages=[],
                                    extra_body={"return_token_ids": True,
                                                "nvext": {"token_data": history}})
    assert (second.model_extra or {})["prompt_token_ids"] == history
    assert second.usage.cache_read_input_tokens and second.usage.cache_read_input_tokens > 0


def test_stream_tool_use(client) -> None:
    with client.messages.stream(model="fake-model", max_tokens=200, messages=HI,
                                tools=TOOLS) as stream:
        final = stream.get_final_message()
    use = next(b for b in final.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_count_tokens(client) -> None:
    counted = client.messages.count_tokens(model="fake-model", messages=HI)
    msg = client.messages.create(model="fake-model", max_tokens=200, messages=HI)
    # count_tokens counts the whole prompt; input_tokens leaves out the
    # cache reads (vLLM's and Anthropic's split)
    assert counted.input_tokens == msg.usage.input_tokens + (
        msg.usage.cache_read_input_tokens or 0) > 0


def test_vllm_keys_through_the_sdk(client) -> None:
    """vLLM's Messages keys as the SDK sends and reads them: kv_transfer_params
    in (extra_body) and the connector's answer out (model_extra), output_config's
    format as structured output, the usage split on the stream's message_delta."""
    prefill = {"do_remote_decode": True, "do_remote_prefill": False}
    msg = client.messages.create(model="fake-model", max_tokens=1, messages=HI,
                                 extra_body={"kv_transfer_params": prefill})
    answer = (msg.model_extra or {})["kv_transfer_params"]
    assert answer["do_remote_prefill"] is True and type(answer["remote_port"]) is int
    plain = client.messages.create(model="fake-model", max_tokens=5, messages=HI)
    assert "kv_transfer_params" not in (plain.model_extra or {})
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    shaped = client.messages.create(model="fake-model", max_tokens=5, messages=HI, extra_body={
        "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": schema}}})
    assert shaped.stop_reason in ("end_turn", "max_tokens")
    with client.messages.stream(model="fake-model", max_tokens=200, messages=HI) as stream:
        events = list(stream)
        final = stream.get_final_message()
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.cache_read_input_tokens is None  # whole prompt, as vLLM's
    cached = final.usage.cache_read_input_tokens or 0
    assert cached > 0 and final.usage.input_tokens == start.message.usage.input_tokens - cached
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="fake-model", max_tokens=5, messages=HI,
                               extra_body={"output_config": {"effort": "extreme"}})
    assert "output_config.effort" in info.value.body["error"]["message"]


def test_bad_field_is_anthropics_400(client) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="fake-model", max_tokens=0, messages=HI)
    assert info.value.status_code == 400
    assert info.value.body["type"] == "error"
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="fake-model", max_tokens=200, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "url", "url": "http://x"}}]}])
    # an image block now goes through chat's image path: to a text-only
    # model it is refused naming the block's source
    message = info.value.body["error"]["message"]
    assert "messages[0].content[0].source.url" in message and "text only" in message


def test_stream_bad_field_and_wrong_type(url: str) -> None:
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    r = httpx.post(f"{url}/v1/messages", headers=headers, json={
        "model": "fake-model", "max_tokens": 200, "messages": HI, "stream": True,
        "tool_choice": {"type": "sometimes"}})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"
    assert "tool_choice.type" in r.json()["error"]["message"]
    r = httpx.post(f"{url}/v1/messages", headers=headers, json={
        "model": "fake-model", "max_tokens": 200, "messages": "Hi"})
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "error" and "messages" in r.json()["error"]["message"]


def test_wrong_key_is_authentication_error(url: str) -> None:
    bad = anthropic.Anthropic(base_url=url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as info:
        bad.messages.create(model="fake-model", max_tokens=10, messages=HI)
    assert info.value.body["error"]["type"] == "authentication_error"


def test_unknown_model_is_not_found(client) -> None:
    with pytest.raises(anthropic.NotFoundError) as info:
        client.messages.create(model="nope", max_tokens=10, messages=HI)
    assert info.value.body["error"]["type"] == "not_found_error"
