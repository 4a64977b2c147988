"""Per-request engine routing on the fake engine: a data-parallel rank from
the body or the metadata (vLLM's and Dynamo's names), and the engine's
sampling defaults (its generation config) for fields a request leaves unset."""

from __future__ import annotations

import collections.abc

import grpc
import pytest

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import common_pb2, generate_pb2, service_pb2_grpc


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[service_pb2_grpc.TokenwireServiceStub, FakeEngine]]:
    engine = FakeEngine(max_model_len=512)
    engine.data_parallel_size = 2
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def _gen(**kw) -> generate_pb2.GenerateRequest:
    return generate_pb2.GenerateRequest(
        token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2), **kw
    )


def test_dp_rank_from_body_or_metadata(served) -> None:
    stub, engine = served
    stub.CreateChatCompletion(chat_request(max_tokens=2, nvext={"dp_rank": 1}), timeout=10)
    assert engine.requests[-1].data_parallel_rank == 1
    stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10,
                              metadata=(("x-data-parallel-rank", "1"),))
    assert engine.requests[-1].data_parallel_rank == 1
    stub.Generate(_gen(), timeout=10, metadata=(("x-dynamo-dp-rank", "0"),))
    assert engine.requests[-1].data_parallel_rank == 0
    stub.Generate(_gen(data_parallel_rank=1), timeout=10, metadata=(("x-data-parallel-rank", "0"),))
    assert engine.requests[-1].data_parallel_rank == 1  # the body wins
    stub.Generate(_gen(), timeout=10)
    assert engine.requests[-1].data_parallel_rank is None  # vLLM balances


@pytest.mark.parametrize(("call", "param"), [
    (lambda s: s.CreateChatCompletion(chat_request(max_tokens=2, nvext={"dp_rank": 2}), timeout=10),
     "nvext.dp_rank"),
    (lambda s: s.Generate(_gen(data_parallel_rank=5), timeout=10), "data_parallel_rank"),
    (lambda s: s.Generate(_gen(), timeout=10, metadata=(("x-data-parallel-rank", "two"),)),
     "x-data-parallel-rank"),
])
def test_bad_dp_rank_is_invalid_argument(served, call, param) -> None:
    stub, _ = served
    with pytest.raises(grpc.RpcError) as exc:
        call(stub)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == param


def test_generation_config_defaults_fill_unset_fields_only(served) -> None:
    stub, engine = served
    engine.generation_defaults = {"temperature": 0.0, "top_p": 0.5, "max_new_tokens": 7}
    try:
        stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
        p = engine.requests[-1].params
        assert (p.temperature, p.top_p) == (0.0, 0.5)
        stub.CreateChatCompletion(chat_request(max_tokens=2, temperature=0.7), timeout=10)
        assert engine.requests[-1].params.temperature == pytest.approx(0.7)
        stub.Generate(_gen(), timeout=10)
        assert engine.requests[-1].params.top_p == 0.5
    finally:
        engine.generation_defaults = {}
    stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
    assert engine.requests[-1].params.temperature == 1.0  # OpenAI's default


def test_generate_min_tokens_above_max_tokens_is_invalid_argument(served) -> None:
    stub, _ = served
    req = generate_pb2.GenerateRequest(
        token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2, min_tokens=5))
    with pytest.raises(grpc.RpcError) as exc:
        stub.Generate(req, timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == "sampling_params.min_tokens"


def test_request_chat_templates_are_refused_without_trust(served) -> None:
    stub, _ = served
    from tokenwire.v1 import tokenize_pb2

    bomb = "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"
    with pytest.raises(grpc.RpcError) as exc:
        stub.CreateChatCompletion(chat_request(max_tokens=2, chat_template=bomb), timeout=10)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == "chat_template"
    req = tokenize_pb2.TokenizeRequest(chat_template=bomb)
    req.messages.add(role="user").content.string_value = "hi"
    with pytest.raises(grpc.RpcError) as exc:
        stub.Tokenize(req, timeout=10)
    assert error_info(exc.value).metadata["param"] == "chat_template"
    assert (
        stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10).choices[0].finish_reason
    )


def test_no_paths_or_exception_text_reach_callers(served) -> None:
    stub, engine = served
    from tokenwire.v1 import models_pb2

    models = stub.ListModels(models_pb2.ListModelsRequest(), timeout=5).data
    assert all("/" not in m.root for m in models)

    async def boom(request):  # an engine bug with a secret in its message
        raise RuntimeError("/secret/path/weights.bin leaked")
        yield  # pragma: no cover

    real = engine.generate
    engine.generate = boom  # type: ignore[method-assign]
    try:
        with pytest.raises(grpc.RpcError) as exc:
            stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
    finally:
        engine.generate = real  # type: ignore[method-assign]
    assert exc.value.code() == grpc.StatusCode.INTERNAL
    assert "secret" not in exc.value.details() and "incident" in exc.value.details()
