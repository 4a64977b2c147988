"""The SGLang shim's meta_info (issue #32, LOW): weight_version stays SGLang's
field (the version that sampled the last token), and weight_versions lists
every span, so a /generate that straddled an update shows it."""

from __future__ import annotations

import time

import grpc
from google.protobuf import json_format

from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.generate.sglang import from_generate
from tokenwire.v1 import control_pb2, control_pb2_grpc, generate_pb2, service_pb2_grpc, sglang_pb2


def _spans(meta) -> list[tuple[str, int, int]]:
    return [(s.version, s.start, s.end) for s in meta.weight_versions]


def test_a_generate_that_straddled_an_update_reports_every_span(tmp_path) -> None:
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    with fake_serving(engine, enable_control=True) as server, \
            grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
        request = json_format.ParseDict({
            "rid": "slime-1", "input_ids": [70, 71, 72],
            "sampling_params": {"max_new_tokens": 120, "ignore_eos": True},
        }, sglang_pb2.SglangGenerateRequest())
        answer = service_pb2_grpc.TokenwireServiceStub(ch).SglangGenerate.future(
            request, timeout=60
        )
        deadline = time.monotonic() + 30
        while engine.progress.get("slime-1", 0) < 5:
            assert time.monotonic() < deadline, "the request did not start"
            time.sleep(0.01)
        control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
            path=str(tmp_path), weight_version="v2", pause_mode="keep"), timeout=30)
        out = answer.result()
    meta = out.meta_info
    assert meta.id == "slime-1" and len(out.output_ids) == 120
    assert meta.weight_version == "v2", "SGLang's field: the last token's version"
    spans = _spans(meta)
    assert [s[0] for s in spans] == ["v1", "v2"]
    assert spans[0][1] == 0 and spans[0][2] == spans[1][1] and spans[1][2] == 120


def test_one_version_is_one_span_and_a_scored_prompt_has_none() -> None:
    req = sglang_pb2.SglangGenerateRequest(input_ids=[1, 2])
    resp = generate_pb2.GenerateResponse(request_id="r")
    choice = resp.choices.add(token_ids=[5, 6], finish_reason="length")
    choice.weight_versions.add(version="v1", start=0, end=2)
    meta = from_generate(req, resp).meta_info
    assert meta.weight_version == "v1" and _spans(meta) == [("v1", 0, 2)]
    scored = sglang_pb2.SglangGenerateRequest(input_ids=[1, 2])
    scored.sampling_params.max_new_tokens = 0
    meta = from_generate(scored, resp).meta_info
    assert meta.weight_version == "v1" and _spans(meta) == []
