"""Response-side conversion shared by every RPC: domain values -> protobuf
fields (usage, stop reason, weight version spans). Chat-only response building lives in
chat_response.py; generate's in generate_service.py."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.domain import WeightSpan
from tokenwire.v1 import common_pb2


def stop_reason_value(reason: int | str | None) -> struct_pb2.Value | None:
    if reason is None:
        return None
    if isinstance(reason, str):
        return struct_pb2.Value(string_value=reason)
    return struct_pb2.Value(number_value=float(reason))


def usage(prompt_len: int, completion_len: int, cached: int) -> common_pb2.Usage:
    return common_pb2.Usage(
        prompt_tokens=prompt_len,
        completion_tokens=completion_len,
        total_tokens=prompt_len + completion_len,
        prompt_tokens_details=common_pb2.PromptTokensDetails(cached_tokens=cached),
    )


def add_weight_spans(target: Any, spans: list[WeightSpan] | None) -> None:
    """Fill a repeated WeightVersionSpan field (a no-op without spans)."""
    if spans:
        for span in spans:
            target.add(version=span.version, start=span.start, end=span.end)
