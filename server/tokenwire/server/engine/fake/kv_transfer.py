"""The fake engine's KV connector: what a P/D-disaggregating router's
handshake (`kv_transfer_params`) gets back, deterministically, so tests can
follow it through every front (the handshake asked is in
`FakeEngine.requests`). Shaped as vLLM's NIXL connector answers on the
prefill side: a request marked `do_remote_decode` returns the handoff a
decode worker reads (`do_remote_prefill`, the engine id, the request id,
the prompt's block ids); any other handshake (a decode side's, which
consumed it) returns nothing, as does a request without one (vLLM: no
connector)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.domain import EngineRequest

ENGINE_ID = "tokenwire-fake"


def kv_answer(request: EngineRequest, cached: int, block_size: int) -> dict[str, Any] | None:
    """The connector's answer for a finished request (None: nothing)."""
    given = request.params.kv_transfer_params
    if not given or not given.get("do_remote_decode"):
        return None
    blocks = -(-len(request.prompt_token_ids) // block_size)
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": ENGINE_ID,
        "remote_request_id": request.request_id,
        "remote_block_ids": list(range(blocks)),
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
        "tp_size": 1,
        "remote_prefill_cached_tokens": cached,
    }
