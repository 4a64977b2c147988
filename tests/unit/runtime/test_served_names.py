"""Model naming as vLLM names it (#34 item 1): the default served name is
--model as given, every --served-model-name is accepted and listed, the
first reported; the model folder's name stays an accepted alias."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import struct_pb2

from tests.servers import fake_serving
from tokenwire.server.core.errors import NotFound
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.shared.identity import ServedModel, check_model
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.v1 import chat_pb2, completion_pb2, models_pb2, service_pb2_grpc

HI = chat_pb2.ChatMessage(role="user", content=struct_pb2.Value(string_value="hi"))


def test_the_default_name_is_the_model_argument_as_given() -> None:
    s = ServerSettings(model="/models/x/")
    assert s.resolved_served_name() == "/models/x/"
    assert s.accepted_names() == ("/models/x/", "x")
    hub = ServerSettings(model="Qwen/Qwen3-4B")
    assert hub.served_names() == ("Qwen/Qwen3-4B",)
    assert hub.accepted_names() == ("Qwen/Qwen3-4B", "Qwen3-4B")


def test_the_demo_model_without_model_keeps_its_folder_name() -> None:
    s = ServerSettings()
    assert s.resolved_served_name() == "SmolLM2-135M-Instruct"
    assert s.accepted_names() == ("SmolLM2-135M-Instruct",)


def test_several_served_names_each_accepted_the_first_reported() -> None:
    s = parse_settings(["--engine", "fake", "--model", "/m/policy-7b",
                        "--served-model-name", "policy", "alt"])
    assert s.resolved_served_name() == "policy"
    assert s.served_names() == ("policy", "alt")
    assert s.accepted_names() == ("policy", "alt", "policy-7b")
    served = ServedModel(s.resolved_served_name(), s.accepted_names())
    for name in ("", "policy", "alt", "policy-7b"):
        assert check_model(name, served, ()) == "policy"
    assert check_model("sql", served, ("sql",)) == "sql"
    with pytest.raises(NotFound, match="/m/policy-7b"):
        check_model("/m/policy-7b", served, ())


def test_requests_by_any_name_answer_under_the_first_and_list_models_lists_each() -> None:
    engine = FakeEngine(max_model_len=512, block_size=16)
    with fake_serving(engine, model="/models/fake-dir", served_model_name="first",
                      more_served_names=("second",)) as server, \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        listed = stub.ListModels(models_pb2.ListModelsRequest())
        assert [m.id for m in listed.data] == ["first", "second"]
        for name in ("", "first", "second", "fake-dir"):
            resp = stub.CreateChatCompletion(chat_pb2.CreateChatCompletionRequest(
                model=name, messages=[HI],
                max_tokens=2))
            assert resp.model == "first"
            comp = stub.CreateCompletion(completion_pb2.CreateCompletionRequest(
                model=name, prompt=struct_pb2.Value(string_value="hi"), max_tokens=2))
            assert comp.model == "first"
        with pytest.raises(grpc.RpcError) as err:
            stub.CreateChatCompletion(chat_pb2.CreateChatCompletionRequest(
                model="/models/fake-dir",
                messages=[HI]))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_vllms_flags_name_the_model_as_vllm_does() -> None:
    """`tokenwire serve` on the vLLM engine: the same names from vLLM's own
    argument parser (no engine starts)."""
    pytest.importorskip("vllm")
    demo = parse_settings(["--port", "0"])
    assert demo.resolved_served_name() == "SmolLM2-135M-Instruct"
    assert demo.engine_args["served_model_name"] == ["SmolLM2-135M-Instruct"]
    given = parse_settings(["--model", "/models/x", "--port", "0"])
    assert given.resolved_served_name() == "/models/x"
    assert given.accepted_names() == ("/models/x", "x")
    several = parse_settings(["--model", "/models/x", "--served-model-name", "a", "b"])
    assert several.served_names() == ("a", "b")
    assert several.accepted_names() == ("a", "b", "x")
