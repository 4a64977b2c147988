"""An abandoned stream (its consumer closes it) aborts the engine request
and frees its admission slot at once, not when the garbage collector runs."""

from __future__ import annotations

import pytest

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.server.inference.chat.service import stream_chat
from tokenwire.server.inference.generate.service import build_generate_plan, stream_generate
from tokenwire.v1 import chat_pb2, common_pb2, generate_pb2

SETTINGS = ServerSettings(engine="fake", max_model_len=512)


@pytest.fixture()
def engines() -> tuple[FakeEngine, GuardedEngine]:
    fake = FakeEngine(max_model_len=512, token_delay=0.001)
    return fake, GuardedEngine(fake, Admission(8, 0), Metrics())


async def test_closing_a_generate_stream_aborts_at_once(engines) -> None:
    fake, guarded = engines
    req = generate_pb2.GenerateRequest(
        token_ids=[10, 11],
        sampling_params=common_pb2.SamplingParams(max_tokens=200, ignore_eos=True),
    )
    plan = build_generate_plan(
        req, guarded, SETTINGS, served_model="m", caller=Caller(), stream=True
    )  # type: ignore[arg-type]
    stream = stream_generate(guarded, plan)  # type: ignore[arg-type]
    await anext(stream)
    assert fake.running and guarded.admission.requests == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert not fake.running and fake.aborted == [plan.request.request_id]
    assert guarded.admission.requests == 0


async def test_closing_a_chat_stream_aborts_at_once(engines) -> None:
    fake, guarded = engines
    req = chat_pb2.CreateChatCompletionRequest(max_tokens=200, ignore_eos=True)
    req.messages.add(role="user").content.string_value = "hi"
    plan = build_chat_plan(req, guarded, SETTINGS, served_model="m", caller=Caller(),
                           stream=True)  # type: ignore[arg-type]
    stream = stream_chat(guarded, plan, worker_id="w")  # type: ignore[arg-type]
    await anext(stream)
    await anext(stream)
    await stream.aclose()  # type: ignore[attr-defined]
    assert not fake.running and fake.aborted == [plan.request.request_id]
    assert guarded.admission.requests == 0


def _completion_plan(guarded: GuardedEngine, prompt: list, stream: bool):  # type: ignore[type-arg]
    from google.protobuf import json_format

    from tokenwire.server.inference.completion.request import build_completion_plan
    from tokenwire.v1 import completion_pb2

    req = json_format.ParseDict({"prompt": prompt, "max_tokens": 200, "ignore_eos": True},
                                completion_pb2.CreateCompletionRequest())
    return build_completion_plan(
        req,
        guarded,
        SETTINGS,
        served_model="m",
        caller=Caller(),  # type: ignore[arg-type]
        stream=stream,
    )


async def test_closing_a_batch_completion_stream_aborts_every_prompt(engines) -> None:
    from tokenwire.server.inference.completion.service import stream_completion

    fake, guarded = engines
    plan = _completion_plan(guarded, [[10, 11], [12], [13, 14, 15]], stream=True)
    stream = stream_completion(guarded, plan, worker_id="w")  # type: ignore[arg-type]
    await anext(stream)
    assert guarded.admission.requests == 3
    await stream.aclose()  # type: ignore[attr-defined]
    assert not fake.running and sorted(fake.aborted) == sorted(r.request_id for r in plan.requests)
    assert guarded.admission.requests == 0


async def test_a_failing_prompt_aborts_its_batch(engines) -> None:
    from tokenwire.server.core.errors import ResourceExhausted
    from tokenwire.server.inference.completion.service import run_completion

    fake, _ = engines
    tight = GuardedEngine(fake, Admission(2, 0), Metrics())  # room for two of three prompts
    plan = _completion_plan(tight, [[10, 11], [12], [13, 14, 15]], stream=False)
    with pytest.raises(ResourceExhausted):
        await run_completion(tight, plan, worker_id="w")  # type: ignore[arg-type]
    assert not fake.running and tight.admission.requests == 0
