"""Stream chunks bounded by the message limit (issue #32 item 8): an engine
output that merges many tokens with their top_logprobs (stream_interval,
or vLLM merging the deltas of a slow reader) arrives complete in several
chunks, every id once, in order, with its logprobs, instead of ending the
stream with RESOURCE_EXHAUSTED; and top_logprobs keeps a hard cap even
with vLLM's --max-logprobs -1."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info, stream_ids, stream_text
from tests.servers import fake_serving
from tests.session_rpc import RawSession, start_chat
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import completion_pb2, events_pb2_grpc, generate_pb2, service_pb2_grpc

LIMIT = 64 * 1024
UNCAPPED = 1 << 20  # what --max-logprobs -1 sets tokenwire's cap to (engine/vllm/args.py)
TOP = 20
# One merged output of ~300 tokens x 21 logprob entries: ~130 KB as one chunk.
MERGED = dict(max_tokens=300, ignore_eos=True, stream_options={"stream_interval": 1024})


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def server(transport):
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, max_message_bytes=LIMIT, max_top_logprobs=UNCAPPED,
                      grpc_transport=transport) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), events_pb2_grpc.EventStreamServiceStub(ch)


def _unary_ids(stub, **fields) -> dict[int, list[int]]:
    """The ids the fake engine gives these fields (no logprobs: small)."""
    resp = stub.CreateChatCompletion(chat_request(**fields, return_token_ids=True), timeout=10)
    return {c.index: list(c.token_ids) for c in resp.choices}


def test_a_merged_chat_output_arrives_whole_in_several_chunks(server) -> None:
    stub, _ = server
    fields = dict(MERGED, n=2, temperature=1.0)
    expected = _unary_ids(stub, **fields)
    unary_text = {c.index: c.message.content for c in stub.CreateChatCompletion(
        chat_request(**fields), timeout=10).choices}
    chunks = list(stub.StreamChatCompletion(chat_request(
        **fields, logprobs=True, top_logprobs=TOP, return_token_ids=True), timeout=30))
    assert max(c.ByteSize() for c in chunks) <= LIMIT
    assert stream_ids(chunks) == expected
    assert stream_text(chunks) == unary_text
    for index, ids in expected.items():
        entries = [e for c in chunks for ch in c.choices if ch.index == index
                   for e in ch.logprobs.content]
        assert [e.token_id for e in entries] == ids  # each id with its logprob, once
        assert all(len(e.top_logprobs) == TOP for e in entries)
        with_ids = [c for c in chunks for ch in c.choices if ch.index == index and ch.token_ids]
        assert len(with_ids) > 2, "the merged output was cut into several chunks"
        finishes = [ch.finish_reason for c in chunks for ch in c.choices
                    if ch.index == index and ch.finish_reason]
        assert finishes == ["length"]


def test_a_merged_generate_output_arrives_whole(server) -> None:
    stub, _ = server
    req = json_format.ParseDict({"token_ids": [5, 6, 7], "sampling_params": {
        "max_tokens": 300, "ignore_eos": True}}, generate_pb2.GenerateRequest())
    expected = list(stub.Generate(req, timeout=10).choices[0].token_ids)
    req.sampling_params.logprobs = TOP
    req.stream_options.stream_interval = 1024
    chunks = list(stub.StreamGenerate(req, timeout=30))
    assert max(c.ByteSize() for c in chunks) <= LIMIT
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == expected
    entries = [e for c in chunks for ch in c.choices for e in ch.logprobs.content]
    assert [e.token_id for e in entries] == expected
    assert all(len(e.top_logprobs) >= TOP for e in entries)
    assert len([c for c in chunks if c.choices and c.choices[0].token_ids]) > 2


def test_a_merged_completion_output_arrives_whole(server) -> None:
    stub, _ = server
    req = json_format.ParseDict(
        {"prompt": "Hello", "max_tokens": 300, "ignore_eos": True, "return_token_ids": True},
        completion_pb2.CreateCompletionRequest(),
    )
    expected = list(stub.CreateCompletion(req, timeout=10).choices[0].token_ids)
    req.logprobs = TOP
    req.stream_options.stream_interval = 1024
    chunks = list(stub.StreamCompletion(req, timeout=30))
    assert max(c.ByteSize() for c in chunks) <= LIMIT
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == expected
    assert [t for c in chunks for ch in c.choices for t in ch.logprobs.token_ids] == expected
    tops = [top for c in chunks for ch in c.choices for top in ch.logprobs.top_logprobs]
    assert len(tops) == len(expected) and all(top.struct_value.fields for top in tops)


def _events(bodies) -> list[dict]:
    data = b"".join(b.data for b in bodies)
    events = [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_the_sse_event_stream_arrives_whole(server) -> None:
    stub, events = server
    expected = _unary_ids(stub, **MERGED)[0]
    bodies = list(events.StreamChatCompletionEvents(chat_request(
        **MERGED, logprobs=True, top_logprobs=TOP, return_token_ids=True), timeout=30))
    assert max(b.ByteSize() for b in bodies) <= LIMIT
    chunks = _events(bodies)
    assert not any("error" in c for c in chunks)
    ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])]
    assert ids == expected
    entries = [e for c in chunks for ch in c["choices"]
               for e in (ch.get("logprobs") or {}).get("content", [])]
    assert [e["token_id"] for e in entries] == expected


def test_a_sessions_chunks_arrive_whole(server) -> None:
    stub, _ = server
    expected = _unary_ids(stub, **MERGED)[0]
    s = RawSession(stub)
    s.send(start_chat("big", stream=True, logprobs=True, top_logprobs=TOP,
                      return_token_ids=True, **MERGED))
    got = s.until_terminal("big")
    s.close()
    assert got[-1].WhichOneof("event") == "done", got[-1]
    chunks = [e.chat_chunk for e in got if e.WhichOneof("event") == "chat_chunk"]
    assert stream_ids(chunks)[0] == expected
    assert [e.token_id for c in chunks for ch in c.choices for e in ch.logprobs.content] == expected


@pytest.mark.parametrize(("call", "param"), [
    ("chat", "top_logprobs"), ("completion", "logprobs"), ("generate", "sampling_params.logprobs"),
    ("prompt", "sampling_params.prompt_logprobs"),
])
def test_top_logprobs_keep_a_hard_cap_with_max_logprobs_minus_one(server, call, param) -> None:
    stub, _ = server
    cap = 1024  # sampling_rules.MAX_TOP_LOGPROBS

    def ask(k: int):
        if call == "chat":
            return stub.CreateChatCompletion(
                chat_request(max_tokens=1, logprobs=True, top_logprobs=k), timeout=10)
        if call == "prompt":
            return stub.Generate(json_format.ParseDict({"token_ids": [5], "sampling_params": {
                "max_tokens": 1, "prompt_logprobs": k}}, generate_pb2.GenerateRequest()),
                timeout=10)
        if call == "completion":
            return stub.CreateCompletion(json_format.ParseDict(
                {"prompt": "Hi", "max_tokens": 1, "logprobs": k},
                completion_pb2.CreateCompletionRequest()), timeout=10)
        return stub.Generate(json_format.ParseDict({"token_ids": [5, 6], "sampling_params": {
            "max_tokens": 1, "logprobs": k}}, generate_pb2.GenerateRequest()), timeout=10)

    with pytest.raises(grpc.RpcError) as info:
        ask(cap + 1)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = error_info(info.value)
    assert (detail.reason, detail.metadata["param"]) == ("VALUE_OUT_OF_RANGE", param)
    assert str(cap) in info.value.details()
    ask(cap)  # the cap itself is served


def test_an_output_that_fits_is_handed_through_and_a_long_text_is_cut() -> None:
    from tokenwire.server.core.domain import ChoiceOutput, EngineOutput
    from tokenwire.server.inference.chunk_bounds import ChunkBounds

    engine = FakeEngine()
    small = EngineOutput([ChoiceOutput(0, [70, 71], "ab")], [5], 0, False)
    assert ChunkBounds(engine, TOP, LIMIT).pieces(small) == (small,)  # no copy, no new list
    text = "x" * 50_000
    big = EngineOutput([ChoiceOutput(0, list(range(70, 170)), text, None, "length")],
                       [5], 0, True)
    pieces = ChunkBounds(engine, None, 16 * 1024).pieces(big)
    assert len(pieces) > 3
    assert [t for p in pieces for c in p.choices for t in c.token_ids] == big.choices[0].token_ids
    assert "".join(c.text for p in pieces for c in p.choices) == text
    assert [p.finished for p in pieces] == [False] * (len(pieces) - 1) + [True]
    assert [c.finish_reason for p in pieces for c in p.choices if c.finish_reason] == ["length"]
