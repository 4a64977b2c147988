"""The rules every front shares hold for every front of the registry
(inference/fronts.py), on the fake engine, over gRPC and over
EventStreamService (the server's side of REST: the bytes the gateway
passes through):

- the call's `x-request-id` names the engine request(s) and, where the
  API's answer carries the request's id, the answer;
- a streamed answer (typed and SSE) arrives whole, and an SSE stream idle
  past --sse-keep-alive-interval gets vLLM's keep-alive comment first;
- bad input is INVALID_ARGUMENT naming the field before any byte, and a
  started SSE stream that fails ends with the API's own error event;
- the printed JSON twin answers what the unary RPC answers.

A sample body per RPC is required (SAMPLES): a new front fails here until
it has one, and is then held to the same rules."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.front import Entry
from tokenwire.server.inference.fronts import FRONTS
from tokenwire.server.inference.pooling.kind import PooledFront
from tokenwire.v1 import events_pb2, events_pb2_grpc, service_pb2, service_pb2_grpc

COMMENT = b": keep-alive\n\n"
DELAY = 0.15  # seconds per token: an SSE stream's first output comes that late
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "ignore_eos": True}

# A valid body and a body refused naming `param`, per unary RPC.
SAMPLES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "CreateChatCompletion": (CHAT, {**CHAT, "temperature": -1}, "temperature"),
    "RenderChatCompletion": (CHAT, {**CHAT, "temperature": -1}, "temperature"),
    "CreateCompletion": ({"prompt": "Hi", "max_tokens": 3, "ignore_eos": True},
                         {"prompt": "Hi", "max_tokens": -2}, "max_tokens"),
    "RenderCompletion": ({"prompt": "Hi"}, {"prompt": "Hi", "max_tokens": -2}, "max_tokens"),
    "Generate": ({"token_ids": [5, 6, 7], "sampling_params": {"max_tokens": 3,
                                                              "ignore_eos": True}},
                 {"token_ids": []}, "token_ids"),
    "SglangGenerate": ({"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2}},
                       {"input_ids": []}, "input_ids"),
    "FinishSession": ({"session_id": "s-1"}, {}, "session_id"),
    "CreateMessage": ({"max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]},
                      {"max_tokens": 3, "messages": []}, "messages"),
    "CountMessageTokens": ({"messages": [{"role": "user", "content": "Hi"}]},
                           {"messages": []}, "messages"),
    "RenderMessage": ({"max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]},
                      {"max_tokens": 3, "messages": []}, "messages"),
    "CreateResponse": ({"input": "Hi", "max_output_tokens": 3},
                       {"input": "Hi", "temperature": -1}, "temperature"),
    "RenderResponse": ({"input": "Hi"}, {"input": "Hi", "temperature": -1}, "temperature"),
    "CreateEmbedding": ({"input": ["a b", "c"]}, {"input": []}, "input"),
    "Classify": ({"input": ["a b"]}, {"input": []}, "input"),
    "Pool": ({"input": ["a b"]}, {"input": []}, "input"),
    "CohereEmbed": ({"texts": ["a b"]},
                    {"texts": ["a b"], "embedding_types": ["int4"]}, "embedding_types"),
    "Score": ({"queries": "a", "documents": ["b", "c"]}, {"queries": "a"}, "queries"),
    "Rerank": ({"query": "a", "documents": ["b", "c"]}, {"documents": ["b"]}, "query"),
    "Tokenize": ({"prompt": "Hi there"}, {"prompt": "Hi", "messages": [
        {"role": "user", "content": "Hi"}]}, "prompt"),
    "Detokenize": ({"tokens": [5, 6]}, {"tokens": [4_000_000_000]}, "tokens"),
}
# Fronts whose answer carries no id of the request. (A Response's id is
# `resp_<random>` whatever the header, as vLLM's; its engine request is named.)
NO_ANSWER_ID = {"FinishSession", "CountMessageTokens", "Tokenize", "Detokenize", "Score",
                "RenderCompletion", "RenderMessage", "RenderResponse", "RenderChatCompletion",
                "CreateResponse"}
# Fronts that send no engine request (their answer is their preparation).
NO_ENGINE = {"FinishSession", "CountMessageTokens", "Tokenize", "Detokenize",
             "RenderCompletion", "RenderMessage", "RenderResponse", "RenderChatCompletion"}
# How each API's stream ends.
ENDS = {"StreamChatCompletionEvents": b"data: [DONE]\n\n",
        "StreamCompletionEvents": b"data: [DONE]\n\n",
        "StreamGenerateEvents": b"data: [DONE]\n\n",
        "StreamMessageEvents": b'{"type":"message_stop"}\n\n',
        "StreamResponseEvents": b'"type":"response.completed"'}

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["TokenwireService"]
_EVENTS = events_pb2.DESCRIPTOR.services_by_name["EventStreamService"]


def _request(rpc: str, body: dict[str, Any], **more: Any) -> Any:
    message = _SERVICE.methods_by_name[rpc].input_type._concrete_class()
    return json_format.ParseDict({**body, **more}, message)


def _pools(entry: Entry) -> bool:
    return isinstance(entry.front, PooledFront)


def _ids(entry: Entry) -> str:
    return entry.unary or ""


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[bool, tuple[FakeEngine, Any, Any]]]:
    """A generating fake (keep-alive every 50 ms, a token every 150 ms) and a
    pooling one (a classifier, so /classify runs too), each with both stubs."""
    gen = FakeEngine(max_model_len=512, token_delay=DELAY)
    pool = FakeEngine(max_model_len=512)
    pool.pooling = True
    with fake_serving(gen, sse_keep_alive_interval=0.05, served_model_name="m") as a, \
            fake_serving(pool, served_model_name="m") as b, \
            grpc.insecure_channel(a.address) as ca, grpc.insecure_channel(b.address) as cb:
        yield {False: (gen, service_pb2_grpc.TokenwireServiceStub(ca),
                       events_pb2_grpc.EventStreamServiceStub(ca)),
               True: (pool, service_pb2_grpc.TokenwireServiceStub(cb),
                      events_pb2_grpc.EventStreamServiceStub(cb))}


def test_every_unary_rpc_has_a_sample() -> None:
    assert {e.unary for e in FRONTS if e.unary} == set(SAMPLES)


@pytest.fixture(autouse=True)
def classifier(request, servers) -> Iterator[None]:
    """The pooling fake serves as a classifier for Classify (its first task)."""
    entry = request.node.callspec.params.get("entry") if hasattr(request.node, "callspec") \
        else None
    engine = servers[True][0]
    served = engine.pool_tasks
    if entry is not None and entry.unary == "Classify":
        engine.pool_tasks = ("classify", "embed")
    yield
    engine.pool_tasks = served


def _engine_ids(engine: FakeEngine, pools: bool) -> list[str]:
    return [r.request_id for r in (engine.pooled if pools else engine.requests)]


@pytest.mark.parametrize("entry", [e for e in FRONTS if e.unary], ids=_ids)
def test_x_request_id_names_the_engine_request_and_the_answer(servers, entry) -> None:
    engine, stub, _ = servers[_pools(entry)]
    rpc = entry.unary
    assert rpc is not None
    rid = f"rid-{rpc.lower()}"
    before = len(_engine_ids(engine, _pools(entry)))
    resp = getattr(stub, rpc)(_request(rpc, SAMPLES[rpc][0]), metadata=(("x-request-id", rid),),
                              timeout=10)
    sent = _engine_ids(engine, _pools(entry))[before:]
    if rpc in NO_ENGINE:
        assert sent == []
    else:
        assert sent and all(rid in i for i in sent), sent
    if rpc not in NO_ANSWER_ID:
        named = {f.name: v for f, v in resp.ListFields()}
        answer_id = named.get("id") or named.get("request_id") or named["meta_info"].id
        assert rid in answer_id, named.keys()


@pytest.mark.parametrize("entry", [e for e in FRONTS if e.unary], ids=_ids)
def test_bad_input_is_invalid_argument_naming_the_field(servers, entry) -> None:
    _, stub, events = servers[_pools(entry)]
    rpc = entry.unary
    assert rpc is not None
    _, bad, param = SAMPLES[rpc]
    calls = [lambda: getattr(stub, rpc)(_request(rpc, bad), timeout=10)]
    if entry.stream:
        calls.append(lambda: list(getattr(stub, entry.stream)(_request(rpc, bad), timeout=10)))
    if entry.events:
        calls.append(lambda: list(getattr(events, entry.events)(_request(rpc, bad), timeout=10)))
    if entry.json:
        calls.append(lambda: getattr(events, entry.json)(_request(rpc, bad), timeout=10))
    for call in calls:
        with pytest.raises(grpc.RpcError) as exc:
            call()
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value.details()
        info = error_info(exc.value)
        assert info is not None and param in info.metadata["param"], exc.value.details()


STREAMING = [e for e in FRONTS if e.stream]


@pytest.mark.parametrize("entry", STREAMING, ids=_ids)
def test_a_typed_stream_is_named_by_x_request_id(servers, entry) -> None:
    engine, stub, _ = servers[False]
    rid = f"rid-{entry.stream.lower()}"
    before = len(engine.requests)
    chunks = list(getattr(stub, entry.stream)(
        _request(entry.unary, SAMPLES[entry.unary][0]), metadata=(("x-request-id", rid),),
        timeout=10))
    assert chunks
    assert [rid in r.request_id for r in engine.requests[before:]] == [True]


SSE = [e for e in FRONTS if e.events]


def _blocks(bodies: list[Any]) -> list[bytes]:
    data = b"".join(b.data for b in bodies)
    assert data.endswith(b"\n\n")
    return [block + b"\n\n" for block in data.split(b"\n\n")[:-1]]


@pytest.mark.parametrize("entry", SSE, ids=_ids)
def test_an_idle_sse_stream_gets_keep_alives_then_its_whole_answer(servers, entry) -> None:
    engine, _, events = servers[False]
    rid = f"rid-{entry.events.lower()}"
    bodies = list(getattr(events, entry.events)(
        _request(entry.unary, SAMPLES[entry.unary][0]), metadata=(("x-request-id", rid),),
        timeout=10))
    assert bodies[0].content_type == "text/event-stream"
    blocks = _blocks(bodies)
    assert blocks[0] == COMMENT, "a keep-alive before the engine's first output"
    assert ENDS[entry.events] in blocks[-1]
    assert rid in engine.requests[-1].request_id


@pytest.mark.parametrize("entry", SSE, ids=_ids)
def test_a_started_stream_that_fails_ends_with_the_apis_error_event(entry) -> None:
    wire = entry.front.wire
    err = InvalidArgument("max_tokens: too many", param="max_tokens", reason="VALUE_OUT_OF_RANGE")
    last = {"type": "response.in_progress", "sequence_number": 4}
    frame = wire.error_event(err, last)
    events = [block for block in frame.split(b"\n\n") if block]
    body = json.loads(events[0].split(b"data: ", 1)[1])
    if entry.events == "StreamMessageEvents":  # Anthropic's error event
        assert events[0].startswith(b"event: error\n")
        assert body == {"type": "error", "error": {
            "type": "invalid_request_error", "message": "max_tokens: too many"}}
    elif entry.events == "StreamResponseEvents":  # OpenAI Responses' numbered error event
        assert events[0].startswith(b"event: error\n")
        assert body == {"type": "error", "sequence_number": 5, "code": "value_out_of_range",
                        "message": "max_tokens: too many", "param": "max_tokens"}
    else:  # OpenAI's error object, then [DONE]
        assert body["error"]["param"] == "max_tokens" and body["error"]["code"]
        assert events[-1] == b"data: [DONE]"


JSON = [e for e in FRONTS if e.json]


@pytest.mark.parametrize("entry", JSON, ids=_ids)
def test_the_printed_json_is_the_unary_answer(servers, entry) -> None:
    _, stub, events = servers[False]
    req = _request(entry.unary, SAMPLES[entry.unary][0])
    typed = json_format.MessageToDict(getattr(stub, entry.unary)(req, timeout=10),
                                      preserving_proto_field_name=True)
    body = getattr(events, entry.json)(req, timeout=10)
    assert body.content_type == "application/json"
    printed = json.loads(body.data)
    for key in ("model", "object", "type", "role"):
        if key in typed:
            assert printed[key] == typed[key]
