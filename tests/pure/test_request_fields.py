"""Request conversion shared by chat, generate, tokenize and session: one
cache-salt rule, one priority rule, one way to build render options."""

from __future__ import annotations

import pytest
from google.protobuf import json_format, struct_pb2

from tokenwire.server.core.domain import Caller, RenderOptions
from tokenwire.server.core.errors import InvalidArgument, NotFound
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.server.inference.generate.service import build_generate_plan
from tokenwire.server.inference.shared.identity import MAX_REQUEST_ID, check_model, new_request_id
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    messages_to_dicts,
    render_options,
)
from tokenwire.server.inference.shared.sampling import stop_strings
from tokenwire.server.inference.shared.tenant_policy import (
    MAX_CACHE_SALT,
    check_priority,
    pick_cache_salt,
)
from tokenwire.v1 import chat_pb2, generate_pb2, tokenize_pb2

ENGINE = FakeEngine(max_model_len=256)
FCFS = ServerSettings(engine="fake", scheduling_policy="fcfs")
PRIORITY = ServerSettings(engine="fake", scheduling_policy="priority")


def _chat(**fields: object) -> chat_pb2.CreateChatCompletionRequest:
    req = json_format.ParseDict(fields, chat_pb2.CreateChatCompletionRequest())
    req.messages.add(role="user").content.string_value = "hi"
    return req


ANYONE = Caller()
TENANT_T = Caller(salt_prefix="tenant-t")


def _chat_plan(req: chat_pb2.CreateChatCompletionRequest, settings=FCFS, caller=ANYONE):
    return build_chat_plan(req, ENGINE, settings, served_model="fake", caller=caller, stream=False)


def _gen_plan(req: generate_pb2.GenerateRequest, settings=FCFS, caller=ANYONE):
    return build_generate_plan(
        req, ENGINE, settings, served_model="fake", caller=caller, stream=False
    )


# -- cache salt --------------------------------------------------------------
def test_cache_salt_requested_in_order_inside_the_tenant_domain() -> None:
    assert pick_cache_salt(ANYONE, "nv", "root") == "nv"
    assert pick_cache_salt(ANYONE, "", "root") == "root"
    assert pick_cache_salt(ANYONE, "", "") is None
    assert pick_cache_salt(TENANT_T, "nv", "root") == "tenant-t:nv"
    assert pick_cache_salt(TENANT_T, "", "") == "tenant-t"  # always applied


def test_cache_salt_length_limit() -> None:
    assert pick_cache_salt(ANYONE, "x" * MAX_CACHE_SALT) == "x" * MAX_CACHE_SALT
    with pytest.raises(InvalidArgument) as exc:
        pick_cache_salt(ANYONE, "x" * (MAX_CACHE_SALT + 1))
    assert exc.value.param == "cache_salt"


def test_generate_enforces_the_cache_salt_length_like_chat() -> None:
    long_salt = "s" * (MAX_CACHE_SALT + 1)
    with pytest.raises(InvalidArgument) as gen:
        _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6], cache_salt=long_salt))
    with pytest.raises(InvalidArgument) as chat:
        _chat_plan(_chat(cache_salt=long_salt))
    assert gen.value.param == chat.value.param == "cache_salt"
    assert gen.value.message == chat.value.message
    gen_ok = _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6], cache_salt="s"),
                       caller=TENANT_T)
    chat_ok = _chat_plan(_chat(cache_salt="s"), caller=TENANT_T)
    assert gen_ok.request.cache_salt == chat_ok.request.cache_salt == "tenant-t:s"


# -- priority ----------------------------------------------------------------
def test_chat_and_generate_give_the_same_priority_message() -> None:
    with pytest.raises(InvalidArgument) as gen:
        _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6], priority=3))
    with pytest.raises(InvalidArgument) as chat:
        _chat_plan(_chat(priority=3))
    assert gen.value.param == chat.value.param == "priority"
    assert gen.value.message == chat.value.message
    assert "--scheduling-policy priority" in gen.value.message


def test_priority_is_kept_under_the_priority_scheduler() -> None:
    assert check_priority(0, FCFS, ANYONE) == 0
    assert check_priority(-5, PRIORITY, ANYONE) == -5
    gen = _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6], priority=3), PRIORITY)
    chat = _chat_plan(_chat(priority=3), PRIORITY)
    assert gen.request.priority == chat.request.priority == 3


def test_chat_and_generate_plans_have_the_same_shape() -> None:
    chat = _chat_plan(_chat(max_tokens=4))
    gen = _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6]))
    assert type(chat.request) is type(gen.request)
    assert chat.request.stream is gen.request.stream is False
    assert chat.request.params.max_tokens == 4


def test_priority_is_clamped_to_the_callers_range() -> None:
    narrow = Caller(priority_min=0, priority_max=10)
    assert check_priority(-(2**31), PRIORITY, narrow) == 0  # cannot jump the queue
    assert check_priority(99, PRIORITY, narrow) == 10
    assert check_priority(4, PRIORITY, narrow) == 4
    chat = _chat_plan(_chat(priority=-7), PRIORITY, caller=narrow)
    gen = _gen_plan(generate_pb2.GenerateRequest(token_ids=[5, 6], priority=-7), PRIORITY, narrow)
    assert chat.request.priority == gen.request.priority == 0


# -- render options ----------------------------------------------------------
def test_render_options_defaults_and_continue_final_message() -> None:
    assert render_options(chat_pb2.CreateChatCompletionRequest()) == RenderOptions()
    cont = render_options(chat_pb2.CreateChatCompletionRequest(continue_final_message=True))
    assert (cont.add_generation_prompt, cont.continue_final_message) == (False, True)
    off = render_options(tokenize_pb2.TokenizeRequest(add_generation_prompt=False))
    assert off.add_generation_prompt is False


def test_render_options_template_kwargs_and_tools() -> None:
    req = chat_pb2.CreateChatCompletionRequest(chat_template="{{x}}")
    req.chat_template_kwargs.update({"enable_thinking": False, "n": 3})
    tool = req.tools.add(type="function")
    tool.function.name = "f"
    opts = render_options(req, trust_template=True)
    assert opts.chat_template == "{{x}}"
    assert opts.template_kwargs == {"enable_thinking": False, "n": 3}  # 3, not 3.0
    assert opts.tools == [{"type": "function", "function": {"name": "f"}}]
    # tokenize requests convert the same way
    treq = tokenize_pb2.TokenizeRequest(chat_template="{{x}}")
    treq.chat_template_kwargs.update({"enable_thinking": False, "n": 3})
    treq.tools.add(type="function").function.name = "f"
    assert render_options(treq, trust_template=True) == opts


@pytest.mark.parametrize("where", ["root", "kwargs"])
def test_request_templates_are_refused_unless_trusted(where) -> None:
    req = chat_pb2.CreateChatCompletionRequest()
    if where == "root":
        req.chat_template = "{% for i in range(9999999) %}x{% endfor %}"
    else:
        req.chat_template_kwargs.update({"chat_template": "{{ 'x' * 10**10 }}"})
    with pytest.raises(InvalidArgument) as exc:
        render_options(req)
    assert exc.value.param == "chat_template" and exc.value.reason == "REQUEST_TEMPLATE_NOT_ALLOWED"
    assert render_options(req, trust_template=True).chat_template


def test_reserved_template_kwargs_are_stripped() -> None:
    req = chat_pb2.CreateChatCompletionRequest()
    req.chat_template_kwargs.update({"tokenize": True, "return_dict": True, "enable_thinking": True,
                                     "add_generation_prompt": False})
    opts = render_options(req)
    assert opts.template_kwargs == {"enable_thinking": True} and opts.add_generation_prompt


def test_render_flags_conflict() -> None:
    check_render_flags(chat_pb2.CreateChatCompletionRequest(continue_final_message=True))
    with pytest.raises(InvalidArgument) as exc:
        check_render_flags(
            tokenize_pb2.TokenizeRequest(continue_final_message=True, add_generation_prompt=True)
        )
    assert exc.value.param == "continue_final_message"


# -- the rest --------------------------------------------------------------------
def test_model_and_request_id() -> None:
    assert check_model("", "served") == "served"
    assert check_model("served", "served") == "served"
    with pytest.raises(NotFound) as exc:
        check_model("other", "served")
    assert exc.value.param == "model"
    assert new_request_id("gen", "mine") == "mine"
    assert new_request_id("gen", "").startswith("gen-")
    with pytest.raises(InvalidArgument) as exc:
        new_request_id("gen", "x" * (MAX_REQUEST_ID + 1))
    assert exc.value.param == "request_id"


def test_stop_strings() -> None:
    four = ServerSettings(engine="fake", max_stop_strings=4, max_stop_string_chars=8)
    assert stop_strings("stop", None, four) == ([], [])
    assert stop_strings("stop", struct_pb2.Value(string_value="END"), four) == (["END"], [])
    many = struct_pb2.Value()
    many.list_value.extend(["a", "b"])
    assert stop_strings("stop", many, four) == (["a", "b"], [])
    with pytest.raises(InvalidArgument) as exc:
        stop_strings("sampling_params.stop", many,
                     ServerSettings(engine="fake", max_stop_strings=1))
    assert exc.value.param == "sampling_params.stop"
    with pytest.raises(InvalidArgument) as exc:
        stop_strings("stop", struct_pb2.Value(string_value="x" * 9), four)
    assert exc.value.reason == "VALUE_TOO_LONG" and "at most 8 characters" in exc.value.message
    mixed = struct_pb2.Value()
    mixed.list_value.extend(["a", 5, 7])  # integer entries are token ids (Dynamo 2026)
    assert stop_strings("stop", mixed, four) == (["a"], [5, 7])
    bad = struct_pb2.Value()
    bad.list_value.extend(["a", 1.5])
    with pytest.raises(InvalidArgument) as exc:
        stop_strings("stop", bad, four)
    assert "stop[1] must be a string or a token id" in exc.value.message


def test_messages_to_dicts() -> None:
    msgs = [chat_pb2.ChatMessage(role="system"), chat_pb2.ChatMessage(role="assistant")]
    msgs[0].content.string_value = "be brief"
    part = msgs[1].content.list_value.values.add().struct_value
    part.update({"type": "text", "text": "a"})
    call = msgs[1].tool_calls.add(id="c1")
    call.function.name = "f"
    call.function.arguments = "{}"
    assert messages_to_dicts(msgs) == [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "a", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
    ]
    with pytest.raises(InvalidArgument) as exc:
        messages_to_dicts([])
    assert exc.value.param == "messages"
