"""POST /v1/responses through Envoy (fake engine) with the official openai
SDK: `responses.create` and `responses.stream` / `create(stream=True)`
unchanged, the Response's JSON in full, and errors in OpenAI's shape
naming the Responses field."""

from __future__ import annotations

import json

import openai
import pytest

from tests.gateway.conftest import MODEL

pytestmark = pytest.mark.gateway


@pytest.fixture(scope="module")
def client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)


def test_create_unary(client) -> None:
    resp = client.responses.create(model=MODEL, input="Hello", instructions="Be brief.",
                                   max_output_tokens=16, metadata={"k": "v"})
    assert resp.id.startswith("resp_") and resp.object == "response"
    assert resp.status in ("completed", "incomplete") and resp.model == MODEL
    assert resp.output[0].type == "message" and resp.output_text
    assert resp.output[0].content[0].annotations == []
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens
    assert resp.instructions == "Be brief." and resp.metadata == {"k": "v"}
    assert resp.error is None and resp.previous_response_id is None


def test_unary_json_keys(rest) -> None:
    r = rest.post("/v1/responses", json={"model": MODEL, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["incomplete_details"] is None or body["status"] == "incomplete"
    assert body["error"] is None and body["tools"] == [] and body["tool_choice"] == "auto"


def test_stream_helper(client) -> None:
    with client.responses.stream(model=MODEL, input="Hello", max_output_tokens=16) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds and kinds[-1] == "response.completed"
    assert final.output_text and final.usage.output_tokens > 0


def test_create_stream_true(client) -> None:
    events = list(client.responses.create(model=MODEL, input="Hello", max_output_tokens=16,
                                          stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e for e in events if e.type == "response.output_text.done"]
    assert done and done[0].text == text
    assert events[-1].type == "response.completed"
    assert events[-1].response.output[0].content[0].text == text


@pytest.mark.parametrize(("fields", "param"), [
    ({"max_output_tokens": 10**6}, "max_output_tokens"),
    ({"previous_response_id": "resp_1"}, "previous_response_id"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
])
def test_bad_field_is_a_400_in_openai_shape(client, rest, fields, param) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model=MODEL, **{"input": "Hello", **fields})
    err = info.value.body
    assert err["param"] == param and err["type"] == "invalid_request_error"
    streamed = rest.post("/v1/responses", json={"model": MODEL, "input": "Hello",
                                                "stream": True, **fields})
    assert streamed.status_code == 400
    assert json.loads(streamed.text)["error"]["param"] == param


def test_midstream_failure_is_an_error_event(rest) -> None:
    r = rest.post("/v1/responses", json={"model": MODEL, "input": "FAIL_MIDSTREAM",
                                         "stream": True})
    assert r.status_code == 200
    frames = [f for f in r.text.split("\n\n") if f]
    events = [json.loads(f.split("\ndata: ", 1)[1]) for f in frames]
    assert events[0]["type"] == "response.created"
    last = events[-1]
    assert last["type"] == "error" and last["message"] and last["code"]
    assert last["sequence_number"] == events[-2]["sequence_number"] + 1
    assert "[DONE]" not in r.text


def test_overload_before_start_is_an_http_error(client) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        client.responses.create(model=MODEL, input="OVERLOAD", stream=True)
    assert info.value.status_code in (429, 503)
