"""Property-based fuzzing of request conversion and validation: whatever a
client sends, the server raises only its own validation errors."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenwire.server.core.domain import Caller
from tokenwire.server.core.errors import InvalidArgument, NotFound
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.server.inference.generate.service import build_generate_plan
from tokenwire.server.inference.tokenize_service import detokenize, tokenize
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.v1 import chat_pb2, generate_pb2, tokenize_pb2

ENGINE = FakeEngine(max_model_len=256)
SETTINGS = ServerSettings(engine="fake")
EXPECTED = (InvalidArgument, NotFound)

json_leaf = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**40), 2**40), st.text(max_size=20),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
floats = st.floats(allow_nan=True, allow_infinity=True, width=32)
ints = st.integers(-(2**31), 2**31 - 1)
ids = st.lists(st.integers(0, 2**32 - 1), max_size=40)


def _value(v):
    from google.protobuf import struct_pb2

    out = struct_pb2.Value()
    if v is None:
        out.null_value = 0
    elif isinstance(v, bool):
        out.bool_value = v
    elif isinstance(v, (int, float)):
        out.number_value = float(v)
    elif isinstance(v, str):
        out.string_value = v
    elif isinstance(v, list):
        out.list_value.values.extend(_value(x) for x in v)
    else:
        for k, x in v.items():
            out.struct_value.fields[k].CopyFrom(_value(x))
    return out


@st.composite
def chat_requests(draw):
    req = chat_pb2.CreateChatCompletionRequest()
    req.model = draw(st.sampled_from(["", "fake", "SmolLM2-135M-Instruct", "x" * 300]))
    for _ in range(draw(st.integers(0, 3))):
        m = req.messages.add(
            role=draw(st.sampled_from(["user", "assistant", "system", "tool", "bad", ""]))
        )
        m.content.CopyFrom(_value(draw(json_value)))
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_p",
                 "repetition_penalty"):
        if draw(st.booleans()):
            setattr(req, name, draw(floats))
    for name in ("max_tokens", "max_completion_tokens", "n", "top_logprobs", "top_k", "min_tokens",
                 "priority", "prompt_logprobs"):
        if draw(st.booleans()):
            setattr(req, name, draw(ints))
    if draw(st.booleans()):
        req.logprobs = draw(st.booleans())
    if draw(st.booleans()):
        req.stop.CopyFrom(_value(draw(json_value)))
    if draw(st.booleans()):
        req.tool_choice.CopyFrom(_value(draw(json_value)))
    req.stop_token_ids.extend(draw(ids))
    if draw(st.booleans()):
        req.nvext.token_data.extend(draw(ids))
    req.nvext.extra_fields.extend(draw(st.lists(st.sampled_from(
        ["engine_data", "timing", "bogus", "completion_token_ids", ""]), max_size=3)))
    if draw(st.booleans()):
        req.response_format.type = draw(
            st.sampled_from(["text", "json_object", "json_schema", "xml"])
        )
    if draw(st.booleans()):
        t = req.tools.add(type=draw(st.sampled_from(["function", "code", ""])))
        t.function.name = draw(st.text(max_size=10))
    for k, v in draw(st.dictionaries(st.integers(0, 2**32 - 1), floats, max_size=3)).items():
        req.logit_bias[k] = v
    req.cache_salt = draw(st.text(max_size=20))
    req.continue_final_message = draw(st.booleans())
    return req


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat_requests())
def test_chat_conversion_raises_only_validation_errors(req) -> None:
    try:
        plan = build_chat_plan(
            req, ENGINE, SETTINGS, served_model="fake", caller=Caller(), stream=False
        )
    except EXPECTED as exc:
        assert exc.message
        return
    p = plan.request.params
    assert 1 <= p.n <= SETTINGS.max_n
    assert math.isfinite(p.temperature) and p.temperature >= 0
    assert 0 < p.top_p <= 1
    assert (
        1 <= p.max_tokens
        and len(plan.request.prompt_token_ids) + p.max_tokens <= ENGINE.max_model_len
    )
    assert all(t < ENGINE.vocab_size for t in plan.request.prompt_token_ids)


@settings(max_examples=200, deadline=None)
@given(ids, st.one_of(st.none(), ints), st.one_of(st.none(), floats), st.text(max_size=6))
def test_generate_conversion(token_ids, max_tokens, temperature, mode) -> None:
    req = generate_pb2.GenerateRequest(token_ids=token_ids, output_mode=mode)
    if max_tokens is not None:
        req.sampling_params.max_tokens = max_tokens
    if temperature is not None:
        req.sampling_params.temperature = temperature
    try:
        plan = build_generate_plan(
            req, ENGINE, SETTINGS, served_model="fake", caller=Caller(), stream=False
        )
    except EXPECTED as exc:
        assert exc.message and exc.param
        return
    r = plan.request
    assert r.prompt_token_ids == token_ids  # the prompt is the ids as given
    assert token_ids and all(t < ENGINE.vocab_size for t in token_ids)
    assert 1 <= r.params.max_tokens and len(token_ids) + r.params.max_tokens <= ENGINE.max_model_len
    if max_tokens is not None:
        assert r.params.max_tokens == max_tokens
    assert math.isfinite(r.params.temperature) and r.params.temperature >= 0
    assert plan.output_mode == (mode or "tokens") and plan.output_mode in ("tokens", "text")
    assert r.params.detokenize == (plan.output_mode == "text")
    assert r.stream is False and r.request_id.startswith("gen-")


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=30)), ids)
def test_tokenize_detokenize(prompt, tokens) -> None:
    req = tokenize_pb2.TokenizeRequest()
    if prompt is not None:
        req.prompt = prompt
    try:
        resp = tokenize(req, ENGINE, TurnTemplates(ENGINE), served_model="fake")
    except EXPECTED as exc:
        assert prompt is None and exc.param == "prompt"  # neither prompt nor messages
    else:
        assert prompt is not None
        assert resp.count == len(resp.tokens) and resp.max_model_len == ENGINE.max_model_len
        assert all(0 <= t < ENGINE.vocab_size for t in resp.tokens)
        # add_special_tokens defaults on: BOS, then the text round-trips exactly
        back = detokenize(
            tokenize_pb2.DetokenizeRequest(tokens=resp.tokens[1:]), ENGINE, served_model="fake"
        )
        assert back.prompt == prompt
    in_vocab = all(t < ENGINE.vocab_size for t in tokens)
    try:
        out = detokenize(tokenize_pb2.DetokenizeRequest(tokens=tokens), ENGINE, served_model="fake")
    except EXPECTED as exc:
        assert not in_vocab and exc.param == "tokens"
    else:
        assert in_vocab
        assert out.prompt == ENGINE.decode(list(tokens))


@st.composite
def completion_requests(draw):
    from tokenwire.v1 import completion_pb2

    req = completion_pb2.CreateCompletionRequest()
    if draw(st.booleans()):
        req.prompt.CopyFrom(_value(draw(st.one_of(
            json_value, st.lists(st.integers(-5, 2**33), max_size=30),
            st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
            st.lists(st.lists(st.integers(-5, 300), max_size=8), max_size=5),
            st.lists(st.text(max_size=12), max_size=5)))))
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty", "min_p"):
        if draw(st.booleans()):
            setattr(req, name, draw(floats))
    for name in ("max_tokens", "n", "logprobs", "best_of", "top_k", "min_tokens", "priority",
                 "prompt_logprobs"):
        if draw(st.booleans()):
            setattr(req, name, draw(ints))
    req.echo = draw(st.booleans())
    if draw(st.booleans()):
        req.suffix = draw(st.text(max_size=4))
    if draw(st.booleans()):
        req.stop.CopyFrom(_value(draw(json_value)))
    if draw(st.booleans()):
        req.nvext.token_data.extend(draw(ids))
    req.nvext.extra_fields.extend(draw(st.lists(st.sampled_from(
        ["engine_data", "prompt_logprobs", "bogus", "routed_experts"]), max_size=2)))
    req.return_tokens_as_token_ids = draw(st.booleans())
    return req


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion_requests())
def test_completion_conversion_raises_only_validation_errors(req) -> None:
    from tokenwire.server.inference.completion.request import build_completion_plan

    try:
        plan = build_completion_plan(req, ENGINE, SETTINGS, served_model="fake", caller=Caller(),
                                     stream=False)
    except EXPECTED as exc:
        assert exc.message and exc.param
        return
    assert 1 <= len(plan.requests) <= SETTINGS.max_completion_prompts
    for r in plan.requests:
        p = r.params
        assert 1 <= p.n <= SETTINGS.max_n and p.n == plan.n
        assert r.prompt_token_ids and all(0 <= t < ENGINE.vocab_size for t in r.prompt_token_ids)
        assert 1 <= p.max_tokens and len(r.prompt_token_ids) + p.max_tokens <= ENGINE.max_model_len
        assert math.isfinite(p.temperature) and p.temperature >= 0
    assert len({r.request_id for r in plan.requests}) == len(plan.requests)
