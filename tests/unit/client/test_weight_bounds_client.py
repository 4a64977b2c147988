"""The client's weight-bound keywords (issue #26): exact_weight_version and
max_weight_lag by the same names on chat, complete and generate, sync and
async (chat and completion carry them in nvext, Generate at its root)."""

from __future__ import annotations

import asyncio

import pytest

from tests.servers import ThreadServer
from tokenwire.client import AsyncClient, Client
from tokenwire.client.errors import InvalidArgumentError, UnavailableError

# method -> (its keywords, where the server reads the bound)
CALLS = {
    "chat": ({"messages": "Hi", "max_tokens": 2}, "nvext."),
    "complete": ({"prompt": "Hi", "max_tokens": 2}, "nvext."),
    "generate": ({"token_ids": [5, 6], "sampling_params": {"max_tokens": 2}}, ""),
}


@pytest.mark.parametrize("method", ["chat", "complete", "generate"])
def test_sync_keywords(fake_server: ThreadServer, method: str) -> None:
    version = fake_server._running.state.weight_version  # type: ignore[attr-defined]
    kw, prefix = CALLS[method]
    with Client(fake_server.address, timeout=30) as client:
        call = getattr(client, method)
        assert call(**kw, exact_weight_version=version).choices[0].finish_reason == "length"
        assert call(**kw, max_weight_lag=0).choices[0].finish_reason == "length"
        assert call(**kw, salt_cache_by_version=True).choices[0].finish_reason == "length"
        with pytest.raises(UnavailableError) as refused:
            call(**kw, exact_weight_version=version + "-other")
        assert refused.value.reason == "WEIGHT_VERSION_MISMATCH"
        assert refused.value.param == prefix + "exact_weight_version"
        with pytest.raises(InvalidArgumentError) as bad:
            call(**kw, max_weight_lag=-1)
        assert (bad.value.reason, bad.value.param) == (
            "VALUE_OUT_OF_RANGE",
            prefix + "max_weight_lag",
        )


@pytest.mark.parametrize("method", ["chat", "complete", "generate"])
def test_async_keywords(fake_server: ThreadServer, method: str) -> None:
    version = fake_server._running.state.weight_version  # type: ignore[attr-defined]
    kw, prefix = CALLS[method]

    async def main() -> None:
        async with AsyncClient(fake_server.address, timeout=30) as client:
            call = getattr(client, method)
            assert (await call(**kw, exact_weight_version=version)).choices[
                0
            ].finish_reason == "length"
            with pytest.raises(UnavailableError) as refused:
                await call(**kw, exact_weight_version=version + "-other")
            assert refused.value.param == prefix + "exact_weight_version"
            with pytest.raises(InvalidArgumentError) as bad:
                await call(**kw, exact_weight_version="")
            assert (bad.value.reason, bad.value.param) == (
                "EMPTY_VALUE",
                prefix + "exact_weight_version",
            )

    asyncio.run(main())
