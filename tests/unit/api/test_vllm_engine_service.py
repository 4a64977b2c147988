"""vLLM's gRPC engine service (`vllm.grpc.engine.VllmEngine`, smg-grpc-proto)
served by tokenwire on the fake engine: the shape smg's router reads (ids
exactly once, completes, logprobs, n), the shared rules of every front
(x-request-id, INVALID_ARGUMENT naming the field, weight bounds from the
metadata, admission), Abort by request id within the caller's tenant, and
what a router asks of a worker (health while paused, model and server
facts, loads, the tokenizer); the operator's calls are refused."""

from __future__ import annotations

import collections.abc
import io
import json
import pathlib
import time
import zipfile

import grpc
import pytest
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import vllm_engine_pb2 as pb
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as pb_grpc

from tests import fake_tokenizer
from tests.rpc import error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.server.engine.fake.engine import REPLIES, FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc

KEYS = """
[[keys]]
key = "sk-alpha-0001"
tenant = "alpha"

[[keys]]
key = "sk-beta-0001"
tenant = "beta"
"""
ALPHA = (("authorization", "Bearer sk-alpha-0001"),)
BETA = (("authorization", "Bearer sk-beta-0001"),)


def ids(text: str) -> list[int]:
    return [b + 3 for b in text.encode()]


def gen(rid: str = "", *, stream: bool = True, prompt: str = "hello there", **sampling
        ) -> pb.GenerateRequest:
    sampling.setdefault("max_tokens", 8)
    return pb.GenerateRequest(request_id=rid, tokenized=pb.TokenizedInput(input_ids=ids(prompt)),
                              sampling_params=pb.SamplingParams(**sampling), stream=stream)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> pathlib.Path:
    return fake_tokenizer.build(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def served(tokenizer) -> collections.abc.Iterator[tuple[FakeEngine, ThreadServer]]:
    engine = FakeEngine(max_model_len=512)
    engine.tokenizer_path = str(tokenizer)
    with fake_serving(engine, served_model_name="fake-model", enable_control=True,
                      unhealthy_while_paused=True) as server:
        yield engine, server


@pytest.fixture(scope="module")
def stub(served) -> collections.abc.Iterator[pb_grpc.VllmEngineStub]:
    with grpc.insecure_channel(served[1].address) as ch:
        yield pb_grpc.VllmEngineStub(ch)


@pytest.fixture(scope="module")
def control(served) -> collections.abc.Iterator[control_pb2_grpc.ControlServiceStub]:
    with grpc.insecure_channel(served[1].address) as ch:
        yield control_pb2_grpc.ControlServiceStub(ch)


def test_a_stream_sends_every_id_once_then_a_complete(stub) -> None:
    resps = list(stub.Generate(gen("s1", max_tokens=10), timeout=10))
    chunks = [r.chunk for r in resps if r.HasField("chunk")]
    (done,) = [r.complete for r in resps if r.HasField("complete")]
    assert resps[-1].HasField("complete")
    streamed = [t for c in chunks for t in c.token_ids]
    assert streamed == ids(REPLIES[0])[:10]
    assert sum(c.completion_tokens for c in chunks) == 10
    assert (done.finish_reason, done.completion_tokens, list(done.output_ids)) == ("length", 10, [])
    assert done.prompt_tokens == len(ids("hello there"))
    unary = list(stub.Generate(gen("s2", max_tokens=10, stream=False), timeout=10))
    assert len(unary) == 1 and list(unary[0].complete.output_ids) == streamed


def test_eos_and_a_stop_token_are_the_matched_stop(stub) -> None:
    (done,) = [r.complete for r in stub.Generate(gen(max_tokens=100, stream=False), timeout=10)]
    assert done.finish_reason == "stop" and done.WhichOneof("matched_stop") is None  # EOS
    stop = ids(REPLIES[0])[4]  # "o"
    (done,) = [r.complete for r in stub.Generate(
        gen(max_tokens=100, stream=False, stop_token_ids=[stop]), timeout=10)]
    assert (done.finish_reason, done.matched_token_id) == ("stop", stop)
    assert list(done.output_ids) == ids(REPLIES[0])[:5]  # (vLLM keeps a stop id)


def test_logprobs_and_n_choices(stub) -> None:
    resps = list(stub.Generate(gen(max_tokens=5, logprobs=2, n=2, temperature=1.0), timeout=10))
    by_index: dict[int, list[int]] = {}
    for r in resps:
        if r.HasField("chunk"):
            lp = r.chunk.output_logprobs
            assert list(lp.token_ids) == list(r.chunk.token_ids)
            assert all(len(t.token_ids) == 2 for t in lp.top_logprobs)
            by_index.setdefault(r.chunk.index, []).extend(r.chunk.token_ids)
    assert by_index == {0: ids(REPLIES[0])[:5], 1: ids(REPLIES[1])[:5]}
    assert sorted(r.complete.index for r in resps if r.HasField("complete")) == [0, 1]


def test_x_request_id_names_the_engine_request(served, stub) -> None:
    engine, _ = served
    list(stub.Generate(gen(), metadata=(("x-request-id", "rid-smg"),), timeout=10))
    assert engine.requests[-1].request_id == "vllm-rid-smg"
    list(stub.Generate(gen("router-7"), timeout=10))
    assert engine.requests[-1].request_id == "router-7"


@pytest.mark.parametrize(("request_", "param"), [
    (gen(prompt="") , "tokenized"),
    (pb.GenerateRequest(text="hello"), "tokenized"),
    (pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=[999])), "tokenized.input_ids"),
    (gen(max_tokens=100000), "sampling_params.max_tokens"),
    (gen(n=2, temperature=0.0), "sampling_params.n"),
    (gen(logprobs=1000), "sampling_params.logprobs"),
    (gen(json_schema="{not json"), "sampling_params.json_schema"),
    (pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=[5]),
                        kv_transfer_params_json="[1]"), "kv_transfer_params_json"),
    (pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=[5]),
                        kv_transfer_params_json="{nope"), "kv_transfer_params_json"),
    (pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=[5]),
                        kv_transfer_params=pb.KvTransferParams(remote_host="h")),
     "kv_transfer_params"),
    (pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=[5]),
                        mm_inputs=pb.MultimodalInputs(mm_hashes=["x"])), "mm_inputs"),
])
def test_bad_input_is_invalid_argument_naming_the_field(stub, request_, param) -> None:
    if param == "tokenized" and request_.HasField("tokenized"):
        request_.ClearField("tokenized")  # (no ids at all)
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Generate(request_, timeout=10))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, exc.value.details()
    info = error_info(exc.value)
    assert info is not None and info.metadata["param"] == param, exc.value.details()
    assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy  # still serving


def test_kv_transfer_handshake_round_trip_as_vllms_servicer(served, stub) -> None:
    """A P/D router's handshake (kv_transfer_params_json) reaches the engine
    as sent; the prefill side's handoff comes back on the complete, as JSON
    and, naming a host and port, the legacy typed mirror (smg's servicer)."""
    engine = served[0]
    sent = {"do_remote_decode": True, "do_remote_prefill": False, "remote_port": None}
    for stream in (False, True):
        req = gen(f"pd-{stream}", stream=stream, max_tokens=2)
        req.kv_transfer_params_json = json.dumps(sent)
        resps = list(stub.Generate(req, timeout=10))
        assert engine.requests[-1].params.kv_transfer_params == sent
        (done,) = [r.complete for r in resps if r.HasField("complete")]
        answer = json.loads(done.kv_transfer_params_json)
        assert answer["do_remote_prefill"] is True and answer["remote_request_id"] == f"pd-{stream}"
        assert (done.kv_transfer_params.remote_host, done.kv_transfer_params.remote_port) == (
            answer["remote_host"], answer["remote_port"])
    # the legacy typed field (Mooncake's host and port) is read as vLLM's servicer reads it
    req = gen("pd-legacy", stream=False, max_tokens=1)
    req.kv_transfer_params.CopyFrom(pb.KvTransferParams(remote_host="10.0.0.7", remote_port=17))
    (resp,) = list(stub.Generate(req, timeout=10))
    assert engine.requests[-1].params.kv_transfer_params == {"remote_host": "10.0.0.7",
                                                              "remote_port": 17}
    assert not resp.complete.HasField("kv_transfer_params_json")  # not a prefill handoff
    # none, or an empty object: nothing passed, nothing answered
    req = gen("pd-none", stream=False, max_tokens=1)
    req.kv_transfer_params_json = "{}"
    (resp,) = list(stub.Generate(req, timeout=10))
    assert engine.requests[-1].params.kv_transfer_params is None
    assert not resp.complete.HasField("kv_transfer_params_json")
    assert not resp.complete.HasField("kv_transfer_params")


def test_a_weight_bound_in_the_metadata_is_honoured_retry_safe(served, stub, control) -> None:
    engine, _ = served
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    before = len(engine.requests)
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Generate(gen(), metadata=(("x-exact-weight-version", "v0"),), timeout=10))
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(exc.value).reason == "WEIGHT_VERSION_MISMATCH"
    assert len(engine.requests) == before, "refused before any engine work"
    ok = list(stub.Generate(gen(), metadata=(("x-exact-weight-version", "v1"),), timeout=10))
    assert ok[-1].complete.finish_reason == "length"


def test_abort_ends_a_running_call_and_frees_its_engine_request(served, stub) -> None:
    engine, _ = served
    engine.token_delay = 0.05
    try:
        call = stub.Generate(gen("long-1", max_tokens=400, ignore_eos=True), timeout=30)
        first = next(call)
        assert first.HasField("chunk")
        stub.Abort(pb.AbortRequest(request_ids=["long-1", "not-running"]), timeout=5)
        with pytest.raises(grpc.RpcError) as exc:
            list(call)
        assert exc.value.code() == grpc.StatusCode.CANCELLED
        deadline = time.monotonic() + 5
        while "long-1" in engine.running and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "long-1" not in engine.running
    finally:
        engine.token_delay = 0.0


def test_the_same_running_id_twice_is_refused(served, stub) -> None:
    engine, _ = served
    engine.token_delay = 0.05
    try:
        call = stub.Generate(gen("twice", max_tokens=200, ignore_eos=True), timeout=30)
        next(call)
        with pytest.raises(grpc.RpcError) as exc:
            list(stub.Generate(gen("twice"), timeout=10))
        assert error_info(exc.value).reason == "DUPLICATE_REQUEST_ID"
        call.cancel()
    finally:
        engine.token_delay = 0.0


def test_a_paused_replica_reports_unhealthy_and_paused(stub, control) -> None:
    assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy
    control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
    try:
        health = stub.HealthCheck(pb.HealthCheckRequest(), timeout=5)
        assert not health.healthy and "paused" in health.message
        assert stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5).is_paused
    finally:
        control.Resume(control_pb2.ResumeRequest(), timeout=10)
    assert stub.HealthCheck(pb.HealthCheckRequest(), timeout=5).healthy
    assert not stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5).is_paused


def test_model_and_server_facts_and_loads(served, stub, tokenizer) -> None:
    engine, _ = served
    info = stub.GetModelInfo(pb.GetModelInfoRequest(), timeout=5)
    assert (info.served_model_name, info.max_context_length, info.vocab_size) == (
        "fake-model", 512, 300)
    assert info.is_generation and list(info.eos_token_ids) == [2]
    assert info.tokenizer_path == str(tokenizer)
    server = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=5)
    assert server.block_size == engine.block_size and server.data_parallel_size == 1
    loads = stub.GetLoads(pb.GetLoadsRequest(), timeout=5)
    assert loads.dp_rank_count == 1 and loads.loads[0].num_running_reqs == 0


def test_get_tokenizer_streams_the_tokenizer_folder(stub, tokenizer) -> None:
    chunks = list(stub.GetTokenizer(common_pb2.GetTokenizerRequest(), timeout=10))
    data = b"".join(c.data for c in chunks)
    assert chunks[-1].sha256 and all(not c.sha256 for c in chunks[:-1])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.read("tokenizer.json") == (tokenizer / "tokenizer.json").read_bytes()
        assert "tokenizer_config.json" in archive.namelist()


def test_the_operators_calls_are_refused(stub) -> None:
    for call, request in ((stub.FlushCache, common_pb2.FlushCacheRequest()),
                          (stub.StartProfile, common_pb2.StartProfileRequest()),
                          (stub.StopProfile, common_pb2.StopProfileRequest())):
        with pytest.raises(grpc.RpcError) as exc:
            call(request, timeout=5)
        assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=5))
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # no KV events here


@pytest.fixture(scope="module")
def keyed(tmp_path_factory) -> collections.abc.Iterator[tuple[FakeEngine, pb_grpc.VllmEngineStub]]:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(KEYS)
    engine = FakeEngine(max_model_len=512, token_delay=0.05)
    with fake_serving(engine, api_keys_file=str(path)) as server, \
            grpc.insecure_channel(server.address) as ch:
        yield engine, pb_grpc.VllmEngineStub(ch)


def test_keys_hold_and_a_tenant_aborts_only_its_own(keyed) -> None:
    engine, stub = keyed
    with pytest.raises(grpc.RpcError) as exc:
        list(stub.Generate(gen(), timeout=10))
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    call = stub.Generate(gen("shared-id", max_tokens=60, ignore_eos=True), metadata=ALPHA,
                         timeout=30)
    next(call)
    stub.Abort(pb.AbortRequest(request_ids=["shared-id"]), metadata=BETA, timeout=5)
    rest = list(call)  # alpha's call runs to its end
    assert rest[-1].complete.finish_reason == "length"
    assert engine.requests[-1].tenant == "alpha"


def test_embed_on_a_pooling_model() -> None:
    engine = FakeEngine(max_model_len=512)
    engine.pooling = True
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.VllmEngineStub(ch)
        resp = stub.Embed(pb.EmbedRequest(request_id="e1",
                                          tokenized=pb.TokenizedInput(input_ids=ids("hi"))),
                          timeout=10)
        assert resp.embedding_dim == len(resp.embedding) > 0 and resp.prompt_tokens == 2
        assert engine.pooled[-1].request_id == "e1"
    generating = FakeEngine()
    with fake_serving(generating) as server, grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.VllmEngineStub(ch).Embed(pb.EmbedRequest(
                tokenized=pb.TokenizedInput(input_ids=[5])), timeout=10)
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION


