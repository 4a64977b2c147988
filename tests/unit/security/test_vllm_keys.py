"""vLLM's keys: $VLLM_API_KEY read when --api-key is not given, and
--api-key taking several values (each accepted), on the fake engine."""

from __future__ import annotations

import grpc
import pytest

from tests.rpc import chat_request, error_info
from tests.servers import ThreadServer
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.v1 import service_pb2_grpc


def _calls(settings, good: list[str], bad: list[str | None]) -> None:
    server = ThreadServer(settings, FakeEngine(max_model_len=512)).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            for key in bad:
                meta = (("authorization", f"Bearer {key}"),) if key else ()
                with pytest.raises(grpc.RpcError) as exc_info:
                    stub.CreateChatCompletion(chat_request(max_tokens=2), metadata=meta,
                                              timeout=10)
                assert exc_info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert error_info(exc_info.value).reason == "API_KEY_INVALID"
            for key in good:
                ok = stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10,
                                               metadata=(("authorization", f"Bearer {key}"),))
                assert ok.choices
    finally:
        server.stop()


def _settings(*flags: str):
    return parse_settings(["--engine", "fake", "--port", "0", "--max-model-len", "512", *flags])


def test_vllm_api_key_environment_keys_the_server(monkeypatch) -> None:
    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.setenv("VLLM_API_KEY", "sk-from-vllm-env")
    settings = _settings()
    assert settings.api_keys() == ("sk-from-vllm-env",)
    _calls(settings, good=["sk-from-vllm-env"], bad=[None, "wrong"])


def test_api_key_flag_wins_over_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-env")
    monkeypatch.setenv("TOKENWIRE_API_KEY", "sk-tw-env")
    assert _settings("--api-key", "sk-flag").api_keys() == ("sk-flag",)
    monkeypatch.delenv("TOKENWIRE_API_KEY")
    assert _settings().api_keys() == ("sk-env",)


def test_several_api_keys_each_accepted(monkeypatch) -> None:
    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    settings = _settings("--api-key", "sk-one", "sk-two")
    assert settings.api_keys() == ("sk-one", "sk-two")
    _calls(settings, good=["sk-one", "sk-two"], bad=[None, "sk-three"])


def test_no_key_anywhere_is_open(monkeypatch) -> None:
    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert _settings().api_keys() == ()
