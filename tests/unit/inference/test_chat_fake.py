"""The serving layer on the FakeEngine: ids, deltas, n>1, nvext, salts."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, stream_ids, stream_text
from tokenwire.server.engine.fake.engine import EOS, IM_END
from tokenwire.v1 import generate_pb2, models_pb2, tokenize_pb2

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

ALL_EXTRA = [
    "completion_token_ids",
    "engine_data",
    "prompt_token_ids",
    "timing",
    "stop_reason",
    "worker_id",
]


def test_unary_ids_text_and_usage(fake_stub, fake_engine) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(return_token_ids=True), timeout=10)
    choice = resp.choices[0]
    assert resp.object == "chat.completion"
    assert choice.message.content == "Hello from the fake engine."
    assert choice.token_ids[-1] == EOS, "the terminating EOS id is kept"
    assert (
        fake_engine.decode(list(choice.token_ids), skip_special_tokens=True)
        == choice.message.content
    )
    assert choice.finish_reason == "stop"
    assert not choice.HasField("stop_reason")
    assert list(resp.prompt_token_ids) == fake_engine.requests[-1].prompt_token_ids
    assert resp.usage.prompt_tokens == len(resp.prompt_token_ids)
    assert resp.usage.completion_tokens == len(choice.token_ids)
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_ids_only_when_asked(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(), timeout=10)
    assert not resp.choices[0].token_ids and not resp.prompt_token_ids
    assert not resp.HasField("nvext")


def test_stream_deltas_equal_unary(fake_stub) -> None:
    req = chat_request(return_token_ids=True, stream_options={"include_usage": True})
    unary = fake_stub.CreateChatCompletion(req, timeout=10)
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert list(chunks[0].prompt_token_ids) == list(unary.prompt_token_ids)
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    assert stream_text(chunks)[0] == unary.choices[0].message.content
    # every content chunk carries exactly one new id here (one token per step)
    assert all(len(c.choices[0].token_ids) == 1 for c in chunks[1:-1])
    assert chunks[-1].usage.completion_tokens == len(unary.choices[0].token_ids)
    assert not chunks[-1].choices
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "stop"


def test_n2_per_choice_ids_and_engine_data(fake_stub) -> None:
    req = chat_request(
        n=2, temperature=0.7, nvext={"extra_fields": ALL_EXTRA}, return_token_ids=True
    )
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    assert [c.index for c in resp.choices] == [0, 1]
    ids = [list(c.token_ids) for c in resp.choices]
    assert ids[0] != ids[1]
    for c in resp.choices:
        assert list(c.nvext.completion_token_ids) == list(c.token_ids)
        ed = c.nvext.engine_data
        assert list(ed.completion_token_ids) == list(c.token_ids)
        assert len(ed.completion_logprobs) == len(c.token_ids)
        assert list(ed.prompt_token_ids) == list(resp.prompt_token_ids)
        assert ed.finished
    # n > 1: no ambiguous top-level mirror
    assert not resp.nvext.completion_token_ids
    assert list(resp.nvext.prompt_token_ids) == list(resp.prompt_token_ids)
    assert resp.nvext.worker_id
    t = resp.nvext.timing
    assert t.request_received_seconds <= t.first_token_seconds <= t.finished_seconds


def test_n1_mirror_at_top_level(fake_stub) -> None:
    req = chat_request(nvext={"extra_fields": ["completion_token_ids", "engine_data"]})
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    assert list(resp.nvext.completion_token_ids) == list(resp.choices[0].nvext.completion_token_ids)
    assert resp.nvext.engine_data == resp.choices[0].nvext.engine_data
    assert list(resp.choices[0].token_ids) == list(resp.nvext.completion_token_ids)


def test_stream_n2_final_chunks_carry_cumulative_nvext(fake_stub) -> None:
    req = chat_request(
        n=2, temperature=0.7, nvext={"extra_fields": ["completion_token_ids", "engine_data"]}
    )
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    deltas = stream_ids(chunks)
    finals = {ch.index: ch for c in chunks for ch in c.choices if ch.finish_reason}
    assert set(finals) == {0, 1}
    for i, ch in finals.items():
        assert list(ch.nvext.completion_token_ids) == deltas[i]
        assert list(ch.nvext.engine_data.completion_token_ids) == deltas[i]


def test_stop_token_id_is_kept_and_reported(fake_stub, fake_engine) -> None:
    stop_id = fake_engine.encode("f", add_special_tokens=False)[0]
    resp = fake_stub.CreateChatCompletion(
        chat_request(stop_token_ids=[stop_id], return_token_ids=True), timeout=10
    )
    c = resp.choices[0]
    assert c.token_ids[-1] == stop_id
    assert c.stop_reason.number_value == stop_id
    assert c.message.content == "Hello "


def test_stop_string_reported(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(
        chat_request(stop=["fake"], return_token_ids=True), timeout=10
    )
    c = resp.choices[0]
    assert c.stop_reason.string_value == "fake"
    assert c.message.content == "Hello from the "


def test_logprobs_aligned_with_ids(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(
        chat_request(logprobs=True, top_logprobs=2, return_token_ids=True), timeout=10
    )
    c = resp.choices[0]
    assert [e.token_id for e in c.logprobs.content] == list(c.token_ids)
    assert all(len(e.top_logprobs) == 2 for e in c.logprobs.content)
    assert all(e.HasField("logprob") for e in c.logprobs.content)


def test_token_data_skips_templating(fake_stub, fake_engine) -> None:
    first = fake_stub.CreateChatCompletion(chat_request(return_token_ids=True), timeout=10)
    again = fake_stub.CreateChatCompletion(
        chat_request(
            messages=[{"role": "user", "content": ""}],
            nvext={"token_data": list(first.prompt_token_ids)},
            return_token_ids=True,
        ),
        timeout=10,
    )
    assert list(again.prompt_token_ids) == list(first.prompt_token_ids)
    assert list(again.choices[0].token_ids) == list(first.choices[0].token_ids)


def test_cache_salt_precedence(fake_stub, fake_engine) -> None:
    fake_stub.CreateChatCompletion(chat_request(cache_salt="root"), timeout=10)
    assert fake_engine.requests[-1].cache_salt == "root"
    fake_stub.CreateChatCompletion(
        chat_request(cache_salt="root", nvext={"cache_salt": "nv"}), timeout=10
    )
    assert fake_engine.requests[-1].cache_salt == "nv"
    # x-tenant-id from a caller is ignored unless the server trusts the hop
    # that sets it (tests/unit/security/test_tenancy.py).
    fake_stub.CreateChatCompletion(
        chat_request(cache_salt="root", nvext={"cache_salt": "nv"}),
        metadata=(("x-tenant-id", "tenant"),),
        timeout=10,
    )
    assert fake_engine.requests[-1].cache_salt == "nv"
    fake_stub.CreateChatCompletion(chat_request(cache_salt=""), timeout=10)
    assert fake_engine.requests[-1].cache_salt is None


def test_nvext_fallbacks_and_greedy(fake_stub, fake_engine) -> None:
    fake_stub.CreateChatCompletion(
        chat_request(
            temperature=0.9,
            nvext={
                "greed_sampling": True,
                "top_k": 5,
                "repetition_penalty": 1.2,
                "ignore_eos": True,
                "max_thinking_tokens": 7,
                "agent_hints": {"priority": 3},
            },
            max_tokens=4,
        ),
        timeout=10,
    )
    req = fake_engine.requests[-1]
    p = req.params
    assert (p.temperature, p.top_k, p.repetition_penalty, p.ignore_eos) == (
        0.0,
        5,
        pytest.approx(1.2),
        True,
    )
    assert p.thinking_token_budget == 7 and req.priority == 3
    fake_stub.CreateChatCompletion(
        chat_request(top_k=9, nvext={"top_k": 5}, priority=1, max_tokens=2), timeout=10
    )
    assert fake_engine.requests[-1].params.top_k == 9 and fake_engine.requests[-1].priority == 1


def test_default_max_tokens_is_rest_of_context(fake_stub, fake_engine) -> None:
    fake_stub.CreateChatCompletion(chat_request(), timeout=10)
    req = fake_engine.requests[-1]
    assert req.params.max_tokens == 512 - len(req.prompt_token_ids)


def test_cancelled_stream_frees_engine_request(fake_server, fake_engine) -> None:
    fake_engine.token_delay = 0.02
    try:
        with grpc.insecure_channel(fake_server.address) as ch:
            from tokenwire.v1 import service_pb2_grpc

            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            call = stub.StreamChatCompletion(
                chat_request(ignore_eos=True, max_tokens=400), timeout=30
            )
            got = 0
            for _ in call:
                got += 1
                if got == 5:
                    break
            assert fake_engine.num_unfinished_requests() == 1
            call.cancel()
            deadline = time.monotonic() + 5
            while fake_engine.num_unfinished_requests() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake_engine.num_unfinished_requests() == 0
            assert fake_engine.aborted, "the engine request was aborted"
            stats = stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
            assert stats.engine_requests == 0 and stats.active_calls == 0
    finally:
        fake_engine.token_delay = 0.0


def test_deadline_aborts_engine_request(fake_stub, fake_engine) -> None:
    fake_engine.token_delay = 0.02
    try:
        with pytest.raises(grpc.RpcError) as exc_info:
            fake_stub.CreateChatCompletion(
                chat_request(ignore_eos=True, max_tokens=400), timeout=0.3
            )
        assert exc_info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 5
        while fake_engine.num_unfinished_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_engine.num_unfinished_requests() == 0
    finally:
        fake_engine.token_delay = 0.0


def test_concurrent_streams(fake_stub) -> None:
    results: list[list[int]] = []

    def one() -> None:
        chunks = list(
            fake_stub.StreamChatCompletion(chat_request(return_token_ids=True), timeout=20)
        )
        results.append(stream_ids(chunks)[0])

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r == results[0] for r in results)


def test_generate_unary_and_stream(fake_stub, fake_engine) -> None:
    prompt = fake_engine.encode("hello", add_special_tokens=False)
    req = generate_pb2.GenerateRequest(token_ids=prompt, return_token_ids=True)
    req.sampling_params.max_tokens = 50
    req.sampling_params.logprobs = 1
    unary = fake_stub.Generate(req, timeout=10)
    assert list(unary.prompt_token_ids) == prompt
    c = unary.choices[0]
    assert c.token_ids[-1] == EOS and c.finish_reason == "stop"
    assert [e.token_id for e in c.logprobs.content] == list(c.token_ids)
    assert not c.HasField("text")
    chunks = list(fake_stub.StreamGenerate(req, timeout=10))
    streamed = [t for ch in chunks for choice in ch.choices for t in choice.token_ids]
    assert streamed == list(c.token_ids)
    req.output_mode = "text"
    text = fake_stub.Generate(req, timeout=10)
    assert text.choices[0].text == "Hello from the fake engine."


def test_tokenize_detokenize_models(fake_stub, fake_engine) -> None:
    tok = fake_stub.Tokenize(
        tokenize_pb2.TokenizeRequest(prompt="hey", return_token_strs=True), timeout=5
    )
    assert list(tok.tokens) == fake_engine.encode("hey", add_special_tokens=True)
    assert tok.count == len(tok.tokens) and tok.max_model_len == 512
    assert list(tok.token_strs)[1:] == ["h", "e", "y"]
    chat = fake_stub.Tokenize(
        tokenize_pb2.TokenizeRequest(messages=chat_request().messages), timeout=5
    )
    unary = fake_stub.CreateChatCompletion(chat_request(return_token_ids=True), timeout=10)
    assert list(chat.tokens) == list(unary.prompt_token_ids)
    de = fake_stub.Detokenize(tokenize_pb2.DetokenizeRequest(tokens=tok.tokens[1:]), timeout=5)
    assert de.prompt == "hey"
    models = fake_stub.ListModels(models_pb2.ListModelsRequest(), timeout=5)
    assert models.data[0].id == "fake-model" and models.data[0].max_model_len == 512


def test_tokenize_next_turn_is_the_session_continuation_suffix(fake_stub) -> None:
    """Tokenize(next_turn) gives the ids a Session continuation appends, so
    a client in "tokens" mode needs no copy of the server's turn logic."""
    from tests.session_rpc import RawSession, start_chat

    nxt = [{"role": "user", "content": "And Germany?"}]
    s = RawSession(fake_stub)
    s.send(start_chat("t1", max_tokens=4, return_token_ids=True))
    first = s.until_terminal("t1")[0].chat_result
    s.send(
        start_chat("t2", max_tokens=2, continuation={"previous_request_id": "t1", "messages": nxt})
    )
    done = s.until_terminal("t2")[-1].done
    s.close()
    completion = list(first.choices[0].token_ids)
    req = json_format.ParseDict(
        {"messages": nxt, "next_turn": True, "previous_completion_ids": completion},
        tokenize_pb2.TokenizeRequest(),
    )
    suffix = list(fake_stub.Tokenize(req, timeout=5).tokens)
    assert suffix == list(done.suffix_token_ids) and suffix
    # The end-of-turn id is added only when the completion lacks it.
    def after(ids: list[int]) -> list[int]:
        req.ClearField("previous_completion_ids")
        req.previous_completion_ids.extend(ids)
        return list(fake_stub.Tokenize(req, timeout=5).tokens)

    ended, open_ = after([50, IM_END]), after([50])
    assert open_ == [IM_END, *ended]


def test_integer_stop_entries_are_token_ids(fake_stub, fake_engine) -> None:
    """Dynamo's 2026 wire: integers in `stop` are token ids, merged with
    stop_token_ids; the strings stay stop strings."""
    fake_stub.CreateChatCompletion(
        chat_request(max_tokens=2, stop=["END", 65], stop_token_ids=[66]), timeout=10
    )
    params = fake_engine.requests[-1].params
    assert params.stop == ["END"] and sorted(params.stop_token_ids) == [65, 66]
    gen = json_format.ParseDict(
        {"token_ids": [5, 6], "sampling_params": {"max_tokens": 2, "stop": [67]}},
        generate_pb2.GenerateRequest(),
    )
    fake_stub.Generate(gen, timeout=10)
    assert fake_engine.requests[-1].params.stop_token_ids == [67]
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.CreateChatCompletion(chat_request(max_tokens=2, stop=[10**6]), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "stop" in info.value.details()
