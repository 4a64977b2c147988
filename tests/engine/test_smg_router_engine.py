"""smg's router in front of tokenwire on the real engine (the session's
real_server, the demo model): the openai SDK through smg answers what
tokenwire answers itself (greedy), streamed and not; a conversation's next
turn hits the prefix cache; and vLLM's gRPC engine service gives the exact
ids tokenwire.v1's Generate gives for the same prompt."""

from __future__ import annotations

import collections.abc

import grpc
import openai
import pytest
from smg_grpc_proto.generated import vllm_engine_pb2 as pb
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as pb_grpc

from tests.rpc import chat_request
from tests.servers import ROOT, ProcessServer
from tests.smg_router import Router
from tokenwire.v1 import generate_pb2

DEMO = ROOT / ".models" / "SmolLM2-135M-Instruct"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def smg(real_server: ProcessServer, tmp_path_factory) -> collections.abc.Iterator[Router]:
    with grpc.insecure_channel(real_server.address) as ch:
        info = pb_grpc.VllmEngineStub(ch).GetModelInfo(pb.GetModelInfoRequest(), timeout=10)
    router = Router([real_server.address], DEMO, tmp_path_factory.mktemp("smg") / "smg.log",
                    model=info.served_model_name)
    try:
        router.wait_ready(120)
        yield router
    finally:
        router.stop()


@pytest.fixture(scope="module")
def client(smg: Router) -> openai.OpenAI:
    return openai.OpenAI(base_url=smg.url + "/v1", api_key="none", max_retries=0)


def test_smg_answers_what_tokenwire_answers(smg, client, real_stub) -> None:
    own = real_stub.CreateChatCompletion(chat_request(max_tokens=16, temperature=0), timeout=60)
    via = client.chat.completions.create(model=smg.model, messages=QUESTION, max_tokens=16,
                                         temperature=0)
    assert via.choices[0].message.content == own.choices[0].message.content
    assert via.usage.prompt_tokens == own.usage.prompt_tokens
    assert via.usage.completion_tokens == own.usage.completion_tokens
    text = ""
    for chunk in client.chat.completions.create(model=smg.model, messages=QUESTION, max_tokens=16,
                                                temperature=0, stream=True):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    assert text == own.choices[0].message.content


def test_a_next_turn_through_smg_hits_the_prefix_cache(smg, client) -> None:
    history = [{"role": "system", "content": "You answer in one short sentence. " * 8},
               {"role": "user", "content": "Name a river."}]
    first = client.chat.completions.create(model=smg.model, messages=history, max_tokens=8,
                                           temperature=0)
    history += [{"role": "assistant", "content": first.choices[0].message.content},
                {"role": "user", "content": "And a lake?"}]
    second = client.chat.completions.create(model=smg.model, messages=history, max_tokens=8,
                                            temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens // 32 * 32


def test_the_engine_service_gives_tokenwires_exact_ids(real_server, real_stub) -> None:
    chat = real_stub.CreateChatCompletion(
        chat_request(max_tokens=12, temperature=0, return_token_ids=True), timeout=60)
    prompt = list(chat.prompt_token_ids)
    own = real_stub.Generate(generate_pb2.GenerateRequest(
        token_ids=prompt, sampling_params={"max_tokens": 12, "temperature": 0, "logprobs": 1}),
        timeout=60)
    with grpc.insecure_channel(real_server.address) as ch:
        engine = pb_grpc.VllmEngineStub(ch)
        request = pb.GenerateRequest(
            request_id="smg-exact", tokenized=pb.TokenizedInput(input_ids=prompt), stream=True,
            sampling_params=pb.SamplingParams(max_tokens=12, temperature=0.0, logprobs=1,
                                              skip_special_tokens=True))
        resps = list(engine.Generate(request, timeout=60))
    ids = [t for r in resps if r.HasField("chunk") for t in r.chunk.token_ids]
    logprobs = [v for r in resps if r.HasField("chunk")
                for v in r.chunk.output_logprobs.token_logprobs]
    assert ids == list(own.choices[0].token_ids) == list(chat.choices[0].token_ids)
    assert logprobs == pytest.approx([c.logprob for c in own.choices[0].logprobs.content],
                                     abs=1e-4)
    (done,) = [r.complete for r in resps if r.HasField("complete")]
    assert done.completion_tokens == len(ids) and done.prompt_tokens == len(prompt)
