"""The registry of fronts (inference/fronts.py) is the one place a kind is
named: every SessionStart request is a kind, and each kind's chunks and
results have their SessionResponse fields."""

from __future__ import annotations

from smg_grpc_proto.generated import vllm_engine_pb2, vllm_engine_pb2_grpc

from tokenwire.server.api.servicer import EventStreamServicer, TokenwireServicer
from tokenwire.server.api.vllm_engine import VllmEngineServicer
from tokenwire.server.inference.front import Front
from tokenwire.server.inference.fronts import FRONTS, KINDS
from tokenwire.v1 import (
    events_pb2,
    events_pb2_grpc,
    service_pb2,
    service_pb2_grpc,
    session_pb2,
)

SERVICE = service_pb2.DESCRIPTOR.services_by_name["TokenwireService"]
EVENTS = events_pb2.DESCRIPTOR.services_by_name["EventStreamService"]
# TokenwireService's RPCs that are no front: what the server serves, and the Session.
NOT_FRONTS = {"ListModels", "GetHealth", "GetVersion", "GetServerLoad", "GetStats", "Session"}
# vLLM's gRPC engine service (smg-grpc-proto): what a router asks of a worker.
ENGINE = vllm_engine_pb2.DESCRIPTOR.services_by_name["VllmEngine"]
ENGINE_NOT_FRONTS = {"HealthCheck", "GetModelInfo", "GetServerInfo", "GetLoads", "GetTokenizer",
                     "Abort", "FlushCache", "StartProfile", "StopProfile", "SubscribeKvEvents"}
TOKENWIRE_FRONTS = [e for e in FRONTS if e.unary]


def test_every_rpc_is_a_registry_line_or_a_named_non_front() -> None:
    grpc_rpcs = [name for e in FRONTS for name in (e.unary, e.stream) if name]
    sse_rpcs = [name for e in FRONTS for name in (e.events, e.json) if name]
    assert len(set(grpc_rpcs)) == len(grpc_rpcs) and len(set(sse_rpcs)) == len(sse_rpcs)
    assert set(SERVICE.methods_by_name) == set(grpc_rpcs) | NOT_FRONTS
    assert set(EVENTS.methods_by_name) == set(sse_rpcs)
    engine_rpcs = [name for e in FRONTS for name in (e.engine_unary, e.engine_stream) if name]
    assert set(ENGINE.methods_by_name) == set(engine_rpcs) | ENGINE_NOT_FRONTS


def test_a_front_serves_tokenwire_or_the_engine_service() -> None:
    for e in FRONTS:
        tokenwire = any((e.unary, e.stream, e.events, e.json))
        engine = any((e.engine_unary, e.engine_stream))
        assert tokenwire != engine, e
        if e.engine_stream:
            assert ENGINE.methods_by_name[e.engine_stream].server_streaming
            assert type(e.front).stream is not Front.stream
        if e.engine_unary:
            assert not ENGINE.methods_by_name[e.engine_unary].server_streaming


def test_a_fronts_rpcs_take_one_request_and_stream_where_they_say() -> None:
    for e in TOKENWIRE_FRONTS:
        assert e.unary is not None, e
        request = SERVICE.methods_by_name[e.unary].input_type
        assert not SERVICE.methods_by_name[e.unary].server_streaming
        if e.stream:
            assert SERVICE.methods_by_name[e.stream].input_type is request
            assert SERVICE.methods_by_name[e.stream].server_streaming
            assert type(e.front).stream is not Front.stream, f"{e.unary}: no stream"
        for name, streams in ((e.events, True), (e.json, False)):
            if name:
                assert EVENTS.methods_by_name[name].input_type is request
                assert EVENTS.methods_by_name[name].server_streaming is streams
                assert e.front.wire is not None, f"{name}: the front has no wire"


def test_both_servicers_serve_every_rpc() -> None:
    for servicer, base, service in (
            (TokenwireServicer, service_pb2_grpc.TokenwireServiceServicer, SERVICE),
            (EventStreamServicer, events_pb2_grpc.EventStreamServiceServicer, EVENTS),
            (VllmEngineServicer, vllm_engine_pb2_grpc.VllmEngineServicer, ENGINE)):
        for name in service.methods_by_name:
            assert getattr(servicer, name) is not getattr(base, name), f"{name} unserved"


def test_every_session_request_is_a_kind_with_its_event_fields() -> None:
    starts = {f.name for f in session_pb2.SessionStart.DESCRIPTOR.oneofs_by_name["request"].fields}
    assert set(KINDS) == starts == {"chat", "completion", "generate"}
    events = session_pb2.SessionResponse.DESCRIPTOR.fields_by_name
    for name in KINDS:
        assert f"{name}_chunk" in events and f"{name}_result" in events


def test_a_continuation_prompt_goes_where_each_kind_reads_ids() -> None:
    chat = KINDS["chat"].with_prompt(session_pb2.SessionStart().chat, [1, 2])
    completion = KINDS["completion"].with_prompt(session_pb2.SessionStart().completion, [3])
    generate = KINDS["generate"].with_prompt(session_pb2.SessionStart().generate, [4, 5])
    assert list(chat.nvext.token_data) == [1, 2]
    assert list(completion.nvext.token_data) == [3]
    assert list(generate.token_ids) == [4, 5]
