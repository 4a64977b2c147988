"""Runtime LoRA with several serving processes (control/relay.py): process 0
loads and unloads adapters (one numbering of loads in the shared engine
core) and every other process names the same loads before the call answers;
a reload reaches every process before the engine drops the load it
replaced, an unload before the engine drops the adapter; a process that
missed a push takes process 0's adapters when its mirror sees other names;
the processes' private methods refuse a caller without the relay token.
Two fake-engine "processes" in this test process (tests/unit/control/
test_control_relay.py); on vLLM's shared engine core:
tests/engine/test_frontends_engine.py."""

from __future__ import annotations

import collections.abc
import logging
import time
from pathlib import Path

import grpc
import pytest

from tests.otlp import FAST_EXPORT, Collector
from tests.rpc import chat_request, error_info
from tests.servers import ThreadServer
from tests.unit.control.relay_pair import TOKEN, start_pair
from tokenwire.server.api.tracing import RPC_STATUS
from tokenwire.server.control.relay import PRIVATE_SERVICE, TOKEN_HEADER
from tokenwire.v1 import control_pb2, control_pb2_grpc, models_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture()
def pair(tmp_path, transport) -> collections.abc.Iterator[tuple[ThreadServer, ThreadServer]]:
    (tmp_path / "sockets").mkdir()
    servers = start_pair(tmp_path / "sockets", grpc_transport=transport)
    yield servers[0], servers[1]
    for server in servers:
        server.stop()


def _adapter(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"adapter")
    return str(folder)


def _spans(server: ThreadServer, model: str) -> list[str]:
    with grpc.insecure_channel(server.address) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(model=model, max_tokens=2), timeout=10)
    return [s.version for s in resp.choices[0].weight_versions]


def _models(server: ThreadServer) -> set[str]:
    with grpc.insecure_channel(server.address) as ch:
        listed = service_pb2_grpc.TokenwireServiceStub(ch).ListModels(
            models_pb2.ListModelsRequest(), timeout=10)
    return {m.id for m in listed.data}


def _control(server: ThreadServer, method: str, request) -> object:
    with grpc.insecure_channel(server.address) as ch:
        return getattr(control_pb2_grpc.ControlServiceStub(ch), method)(request, timeout=10)


def _eventually(check, timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "not within the time"
        time.sleep(0.02)


def test_an_adapter_loaded_through_any_process_is_served_by_every_one(pair, tmp_path) -> None:
    leader, follower = pair
    sql = _adapter(tmp_path, "sql")
    answer = _control(follower, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="sql", lora_path=sql))
    assert list(answer.lora_adapters) == ["sql"]
    assert leader.engine.lora_table() == follower.engine.lora_table() == {"sql": (sql, 1)}
    # Right away, on both: the same load, so the same attribution.
    assert _spans(follower, "sql") == _spans(leader, "sql") == ["default+lora:sql@1"]
    assert "sql" in _models(follower) and "sql" in _models(leader)
    poem = _adapter(tmp_path, "poem")
    _control(leader, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="poem", lora_path=poem))
    assert _spans(follower, "poem") == ["default+lora:poem@2"]
    state = _control(follower, "GetControlState", control_pb2.GetControlStateRequest())
    assert sorted(state.state.lora_adapters) == ["poem", "sql"]


def test_a_reload_reaches_every_process_before_the_old_load_goes(pair, tmp_path) -> None:
    leader, follower = pair
    sql = _adapter(tmp_path, "sql")
    _control(follower, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="sql", lora_path=sql))
    seen: list[dict] = []
    drop = leader.engine.drop_replaced_loras

    async def dropping() -> None:  # what process 1 names when the engine drops the old load
        seen.append(follower.engine.lora_table())
        await drop()

    leader.engine.drop_replaced_loras = dropping
    _control(follower, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="sql", lora_path=sql, load_inplace=True))
    assert seen == [{"sql": (sql, 2)}]
    assert _spans(follower, "sql") == _spans(leader, "sql") == ["default+lora:sql@2"]


def test_an_unload_reaches_every_process_before_the_engine_drops_it(pair, tmp_path) -> None:
    leader, follower = pair
    _control(leader, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="sql", lora_path=_adapter(tmp_path, "sql")))
    seen: list[list[str]] = []
    served: list[dict] = []
    remove = leader.engine.remove_lora

    async def removing(name: str) -> None:
        seen.append(follower.engine.lora_names())
        # What a process whose mirror reads process 0's adapters now gets:
        # not the adapter being dropped.
        served.append(leader._running.relay._published_loras())
        await remove(name)

    leader.engine.remove_lora = removing
    answer = _control(follower, "UnloadLoraAdapter", control_pb2.UnloadLoraAdapterRequest(
        lora_name="sql"))
    assert seen == [[]] and served == [{}] and list(answer.lora_adapters) == []
    for server in pair:
        with pytest.raises(grpc.RpcError) as exc:
            _spans(server, "sql")
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_process_that_missed_a_push_takes_the_adapters_from_process_0(pair, tmp_path) -> None:
    leader, follower = pair
    sql = _adapter(tmp_path, "sql")
    _control(leader, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
        lora_name="sql", lora_path=sql))
    follower.engine.adopt_loras({})  # as if the push had not arrived
    _eventually(lambda: follower.engine.lora_table() == {"sql": (sql, 1)})
    assert _spans(follower, "sql") == ["default+lora:sql@1"]


def test_the_private_methods_need_the_socket_and_the_token(pair) -> None:
    leader, follower = pair
    with grpc.insecure_channel(leader.address) as ch:  # the public port, even with the token
        table = ch.unary_unary(f"/{PRIVATE_SERVICE}/LoraTable")
        with pytest.raises(grpc.RpcError) as exc:
            table(b"", metadata=((TOKEN_HEADER, TOKEN),), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    socket = follower.settings.control_sockets[1]
    with grpc.insecure_channel(f"unix:{socket}") as ch:
        adopt = ch.unary_unary(f"/{PRIVATE_SERVICE}/AdoptLoras")
        with pytest.raises(grpc.RpcError) as exc:
            adopt(b'{"evil": ["/etc", 1]}', metadata=((TOKEN_HEADER, "guess"),), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert error_info(exc.value).reason == "RELAY_TOKEN_INVALID"
    assert "evil" not in follower.engine.lora_names()


INFERENCE_KEY, ADMIN_KEY = "inference-key-of-this-test", "admin-key-of-this-test"


def _keyed(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def test_with_api_keys_every_process_follows_a_reload_and_an_unload(
        tmp_path, caplog, monkeypatch, transport) -> None:
    """Issue 42 H-2: with an inference key (and an admin key) the processes'
    private methods (AdoptLoras, LoraTable) are not behind the public key
    check (they check their socket and the relay token), so every process
    names the new load after an in-place reload, and none serves an adapter
    after its unload; on the public port they stay refused. The other
    interceptors (metrics, access log, tracing) pass them through."""
    (tmp_path / "sockets").mkdir()
    sql = _adapter(tmp_path, "sql")
    caplog.set_level(logging.INFO, "tokenwire.access")
    for name, value in FAST_EXPORT.items():
        monkeypatch.setenv(name, value)
    collector = Collector().start()
    leader, follower = servers = start_pair(
        tmp_path / "sockets", api_key=INFERENCE_KEY, admin_api_key=ADMIN_KEY,
        lora_modules=(f"sql={sql}",), otlp_traces_endpoint=collector.endpoint,
        grpc_transport=transport)

    def spans(server: ThreadServer) -> list[str]:
        with grpc.insecure_channel(server.address) as ch:
            resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(model="sql", max_tokens=2), timeout=10,
                metadata=_keyed(INFERENCE_KEY))
        return [s.version for s in resp.choices[0].weight_versions]

    def control(server: ThreadServer, method: str, request) -> object:
        with grpc.insecure_channel(server.address) as ch:
            return getattr(control_pb2_grpc.ControlServiceStub(ch), method)(
                request, timeout=10, metadata=_keyed(ADMIN_KEY))

    try:
        assert spans(leader) == spans(follower) == ["default+lora:sql@1"]
        (tmp_path / "sql" / "adapter_model.safetensors").write_bytes(b"adapter-2")
        control(leader, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
            lora_name="sql", lora_path=sql, load_inplace=True))
        # Before the call answered, not a mirror period later.
        assert leader.engine.lora_table() == follower.engine.lora_table() == {"sql": (sql, 2)}
        assert spans(leader) == spans(follower) == ["default+lora:sql@2"]
        control(follower, "UnloadLoraAdapter", control_pb2.UnloadLoraAdapterRequest(
            lora_name="sql"))
        assert leader.engine.lora_table() == follower.engine.lora_table() == {}
        for server in servers:
            with pytest.raises(grpc.RpcError) as exc:
                spans(server)
            assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        # A process that missed a push reads process 0's table (LoraTable), keyed too.
        control(leader, "LoadLoraAdapter", control_pb2.LoadLoraAdapterRequest(
            lora_name="sql", lora_path=sql))
        follower.engine.adopt_loras({})
        _eventually(lambda: follower.engine.lora_table() == {"sql": (sql, 3)})
        # The public port still refuses the private methods, whatever key is sent.
        with grpc.insecure_channel(leader.address) as ch:
            table = ch.unary_unary(f"/{PRIVATE_SERVICE}/LoraTable")
            for key in (INFERENCE_KEY, ADMIN_KEY):
                with pytest.raises(grpc.RpcError) as exc:
                    table(b"", metadata=(*_keyed(key), (TOKEN_HEADER, TOKEN)), timeout=5)
                assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
        collector.wait_for(lambda spans: any(
            s.name == f"{PRIVATE_SERVICE}/AdoptLoras" and s.attributes.get(RPC_STATUS) == 0
            for s in spans))
        assert "AdoptLoras OK" in caplog.text and "LoraTable OK" in caplog.text
        assert "did not take the LoRA adapters" not in caplog.text
    finally:
        for server in servers:
            server.stop()
        collector.stop()
