"""vLLM's weight checker (CheckWeights, `POST /weight_checker`) and its
cache resets (`/reset_mm_cache`, `/reset_encoder_cache`) on the fake
engine: checksums of every parameter, a compare against a baseline (a
weight sync checked), and "reset" zeroing the weights only while paused —
labelled as a failed load, so Resume is refused and nothing is attributed
to the old version until a load succeeds."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc


def _check(control, **fields) -> control_pb2.CheckWeightsResponse:
    return control.CheckWeights(control_pb2.CheckWeightsRequest(**fields), timeout=10)


def _refused(call) -> tuple[str, str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    info = error_info(exc.value)
    return exc.value.code().name, info.metadata.get("param", ""), info.reason


def test_checksum_compare_and_a_paused_reset(tmp_path: Path) -> None:
    engine = FakeEngine(max_model_len=256)
    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=256,
                                         enable_control=True), engine).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            control = control_pb2_grpc.ControlServiceStub(ch)
            control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"),
                                     timeout=5)
            sums = dict(_check(control, action="checksum").checksums)
            assert sorted(sums) == ["dp0:pp0:pcp0:tp0:embed.weight",
                                    "dp0:pp0:pcp0:tp0:head.weight"]
            same = _check(control, action="compare", baseline=sums)
            assert same.match and list(same.mismatches) == []
            assert json_format.MessageToDict(same, preserving_proto_field_name=True) == {
                "match": True, "mismatches": []}  # vLLM's keys, the empty list too
            # Zeros only while nothing is sampled.
            assert _refused(lambda: _check(control, action="reset")) == (
                "FAILED_PRECONDITION", "action", "GENERATION_NOT_PAUSED")
            assert not engine.zeroed
            control.Pause(control_pb2.PauseRequest(mode="abort"), timeout=5)
            assert _check(control, action="reset").status == "reset" and engine.zeroed
            state = control.GetControlState(control_pb2.GetControlStateRequest(),
                                            timeout=5).state
            assert state.paused and state.load_failed
            assert state.weight_version == "v1+failed-load" == engine.version
            differ = _check(control, action="compare", baseline=sums)
            assert not differ.match and list(differ.mismatches) == sorted(sums)
            assert _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5))[2] == (
                "WEIGHTS_FAILED_LOAD")
            # A load that succeeds ends it (the trainer's sync, checked by compare).
            control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(tmp_path), weight_version="v2"), timeout=10)
            control.Resume(control_pb2.ResumeRequest(), timeout=5)
            state = control.GetControlState(control_pb2.GetControlStateRequest(),
                                            timeout=5).state
            assert not state.load_failed and state.weight_version == "v2"
            loaded = dict(_check(control, action="checksum").checksums)
            assert loaded != sums and _check(control, action="compare", baseline=loaded).match
            # Bad input names the field and changes nothing.
            assert _refused(lambda: _check(control, action="scrub")) == (
                "INVALID_ARGUMENT", "action", "VALUE_NOT_ALLOWED")
            assert _refused(lambda: _check(control, action="compare")) == (
                "INVALID_ARGUMENT", "baseline", "FIELD_REQUIRED")
            # The cache resets reach the engine.
            control.ResetMultimodalCache(control_pb2.ResetMultimodalCacheRequest(), timeout=5)
            control.ResetEncoderCache(control_pb2.ResetEncoderCacheRequest(), timeout=5)
            assert engine.cache_resets == ["mm", "encoder"]
    finally:
        server.stop()


def test_the_checker_is_the_operators() -> None:
    """An admin route like every control call: the inference key does not open it."""
    engine = FakeEngine(max_model_len=256)
    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=256,
                                         enable_control=True, api_key="sk-user",
                                         admin_api_key="sk-admin"), engine).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            control = control_pb2_grpc.ControlServiceStub(ch)
            user = (("authorization", "Bearer sk-user"),)
            for call in (lambda: control.CheckWeights(control_pb2.CheckWeightsRequest(
                             action="checksum"), timeout=5, metadata=user),
                         lambda: control.ResetEncoderCache(
                             control_pb2.ResetEncoderCacheRequest(), timeout=5, metadata=user)):
                assert _refused(call)[0] in ("PERMISSION_DENIED", "UNAUTHENTICATED")
            admin = (("authorization", "Bearer sk-admin"),)
            assert control.CheckWeights(control_pb2.CheckWeightsRequest(action="checksum"),
                                        timeout=5, metadata=admin).checksums
    finally:
        server.stop()
