"""What the fake-engine tests of the agent fronts share
(test_agent_token_io.py, test_agent_fronts_vllm.py): Messages and Responses
requests from their JSON bodies, and a typed SSE body's events."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format

from tokenwire.v1 import anthropic_pb2, responses_pb2


def message_request(default_max_tokens: int, /, **body: Any
                    ) -> anthropic_pb2.CreateMessageRequest:
    body.setdefault("max_tokens", default_max_tokens)
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return json_format.ParseDict(body, anthropic_pb2.CreateMessageRequest())


def response_request(**body: Any) -> responses_pb2.CreateResponseRequest:
    body.setdefault("input", "Hi")
    return json_format.ParseDict(body, responses_pb2.CreateResponseRequest())


def typed_sse(data: bytes) -> list[dict[str, Any]]:
    """Each `event: T` / `data: {...}` frame's object (its type checked)."""
    out = []
    for frame in data.decode().split("\n\n"):
        if frame:
            head, body = frame.split("\n", 1)
            out.append(json.loads(body[len("data: "):]))
            assert out[-1]["type"] == head[len("event: "):]
    return out
