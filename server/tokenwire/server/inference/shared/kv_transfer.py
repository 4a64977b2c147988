"""vLLM's disaggregation handshakes on chat, completion and generate bodies:
`kv_transfer_params` read into the domain as vLLM's servers pass it to the
engine (chat: the decode side's forwarded prompt ids taken out, as vLLM's
renderer does), the KV connector's answer put in the response, and
`ec_transfer_params` (encoder-cache disaggregation) refused by name."""

from __future__ import annotations

import logging
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.shared.messages import struct_to_dict

log = logging.getLogger("tokenwire.requests")

KV = "kv_transfer_params"
REUSED_IDS = KV + ".prompt_token_ids"


def read_kv_transfer(req: Any, *, pass_empty: bool = False) -> dict[str, Any] | None:
    """The body's handshake as the engine gets it (integral numbers as
    ints), or None: unset, or an empty object where vLLM's chat and
    completion servers pass none (`pass_empty`: Generate passes `{}`).
    `ec_transfer_params` is refused first."""
    if req.HasField("ec_transfer_params"):
        raise InvalidArgument(
            "ec_transfer_params: encoder-cache disaggregation is not supported (tokenwire "
            "serves the encoder and the decoder in one engine); drop it",
            param="ec_transfer_params", reason="UNSUPPORTED_FIELD")
    if not req.HasField(KV):
        return None
    params = struct_to_dict(getattr(req, KV), KV)
    return params if params or pass_empty else None


def reused_prompt_ids(params: dict[str, Any] | None, *, media: bool) -> list[int] | None:
    """Chat's decode-side reuse (vLLM's renderer): `prompt_token_ids` taken
    out of the handshake (the engine never sees them) and, unless the
    messages have media (rendered instead, as vLLM), returned as the
    prompt. Must be a non-empty list of non-negative integers (the vocabulary
    is checked with the prompt)."""
    if not params or "prompt_token_ids" not in params:
        return None
    ids = params.pop("prompt_token_ids")
    if ids is None or media:
        return None
    if (not isinstance(ids, list) or not ids
            or any(type(x) is not int or x < 0 for x in ids)):
        raise InvalidArgument(
            f"{REUSED_IDS} must be a non-empty list of non-negative integers",
            param=REUSED_IDS, reason="INVALID_TYPE")
    return ids


def put_kv_answer(target: struct_pb2.Struct, params: dict[str, Any] | None) -> None:
    """The connector's answer in the response's Struct (unset when None;
    an answer JSON cannot hold is dropped with a warning, as smg's servicer)."""
    if params is None:
        return
    answer = struct_pb2.Struct()
    try:
        answer.update(params)
    except (TypeError, ValueError) as exc:
        log.warning("dropping kv_transfer_params JSON cannot hold: %s", exc)
        return
    target.CopyFrom(answer)
    target.SetInParent()  # an empty answer prints {}
