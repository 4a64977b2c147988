"""Adversarial client `features` on the real tiny VLM (Trust IV H-1): 64
malformed or adversarial items (tests/vlm_features.py `malformed_features`:
fields missing, extra or another family's, dtypes, shapes, zero tiles,
NaN/inf, masks, counts that disagree with the placeholders, hashes,
modalities, bytes that are not vLLM's msgpack), each sent over REST
(`POST /inference/v1/generate` through a real Envoy) and over gRPC
(Generate, typed `mm_features` where the item has that form, vLLM's JSON
`features` otherwise). Each is refused with INVALID_ARGUMENT / 400 naming a
`features` field, or runs; health stays SERVING throughout (polled every
50 ms); afterwards the same server process answers a normal image chat.
Before Trust IV the first item (no `pixel_attention_mask`) killed the
engine core and the server exited."""

from __future__ import annotations

import threading

import grpc
import httpx
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import TINY_VLM
from tests.servers import ProcessServer
from tokenwire.v1 import generate_pb2, service_pb2_grpc


class HealthWatch:
    """grpc.health.v1 polled every 50 ms on its own channel: every answer
    that was not SERVING (or no answer within 2 s) is kept."""

    def __init__(self, address: str):
        self.address = address
        self.bad: list[str] = []
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with grpc.insecure_channel(self.address) as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            while not self._stop.wait(0.05):
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
                    if status != health_pb2.HealthCheckResponse.SERVING:
                        self.bad.append(health_pb2.HealthCheckResponse.ServingStatus.Name(status))
                except grpc.RpcError as exc:
                    self.bad.append(str(exc.code()))
                self.polls += 1

    def __enter__(self) -> HealthWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def typed(features: dict) -> dict | None:
    """The typed gRPC form of vLLM's features JSON, where the lists agree."""
    items = []
    try:
        for m, hashes in features["mm_hashes"].items():
            for h, p, k in zip(hashes, features["mm_placeholders"][m],
                               features["kwargs_data"][m], strict=True):
                items.append({"modality": m, "hash": h, "placeholder": p, "kwargs_data": k})
    except (KeyError, ValueError):
        return None
    return {"items": items}


def test_no_feature_item_stops_the_engine(vlm_server: ProcessServer, vlm_gateway_url: str) -> None:
    from tests.vlm_features import malformed_features, vllm_features

    ref = vllm_features()
    cases = malformed_features()
    assert len(cases) >= 50
    sampling = {"max_tokens": 2, "temperature": 0}
    ran = refused = 0
    with HealthWatch(vlm_server.address) as health, \
            grpc.insecure_channel(vlm_server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        for label, ids, features in cases:
            body = {"model": str(TINY_VLM), "token_ids": ids, "features": features,
                    "sampling_params": sampling}
            rest = httpx.post(f"{vlm_gateway_url}/inference/v1/generate", json=body, timeout=120)
            form = typed(features)
            msg = {"token_ids": ids, "sampling_params": sampling,
                   **({"mm_features": form} if form else {"features": features})}
            try:
                answer = stub.Generate(json_format.ParseDict(msg, generate_pb2.GenerateRequest()),
                                       timeout=120)
                code = grpc.StatusCode.OK
            except grpc.RpcError as exc:
                code, answer = exc.code(), dict(exc.trailing_metadata() or ())
            if rest.status_code == 200:
                ran += 1
                assert code == grpc.StatusCode.OK, (label, code)
                assert rest.json()["choices"][0]["token_ids"], label
                assert answer.choices[0].token_ids, label
            else:
                refused += 1
                assert rest.status_code == 400, (label, rest.status_code, rest.text[:300])
                error = rest.json()["error"]
                assert error["param"].startswith("features"), (label, error)
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (label, code)
                assert answer["tokenwire-param"].startswith(("features", "mm_features")), label
        # A normal image chat on the same server process, through Envoy.
        chat = httpx.post(f"{vlm_gateway_url}/v1/chat/completions", json={
            "model": str(TINY_VLM), "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": ref["url"]}},
                {"type": "text", "text": "What is this?"}]}]}, timeout=120)
    assert chat.status_code == 200, chat.text[:300]
    assert chat.json()["usage"]["completion_tokens"] > 0
    assert health.polls > 20 and health.bad == []
    assert vlm_server.proc is None or vlm_server.proc.poll() is None  # the same process
    assert refused >= 50 and ran >= 4
