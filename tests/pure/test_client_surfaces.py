"""The sync and asyncio client surfaces are one API: every public method of
a sync class exists on its async twin with the same parameters, defaults
and return type (modulo async: Iterator <-> AsyncIterator, Client <->
AsyncClient), over one shared core. Inherited methods count: the RPC
methods come from the generated mixins (tools/gen_client.py)."""

from __future__ import annotations

import inspect
import re

import pytest

from tokenwire.client._common import ClientCore
from tokenwire.client.async_client import AsyncClient
from tokenwire.client.control import AsyncControlClient, ControlClient
from tokenwire.client.conversation import AsyncConversation, Conversation
from tokenwire.client.session import AsyncRequestHandle, AsyncSession, RequestHandle, Session
from tokenwire.client.sync_client import Client

PAIRS = [(Client, AsyncClient), (Conversation, AsyncConversation), (Session, AsyncSession),
         (RequestHandle, AsyncRequestHandle), (ControlClient, AsyncControlClient)]
SYNC_ONLY = {"__iter__"}  # the async side has __aiter__
ASYNC_ONLY = {"open", "__aiter__"}  # an AsyncSession is opened inside the loop


def _members(cls: type) -> dict[str, object]:
    """The class's own and inherited attributes (the nearest definition wins)."""
    members: dict[str, object] = {}
    for klass in reversed(cls.__mro__[:-1]):  # object left out
        members.update(vars(klass))
    return members


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn) for name, fn in _members(cls).items()
        if callable(fn) and (not name.startswith("_") or name in {"__iter__", "__aiter__"})
        and name not in {"__enter__", "__exit__", "__aenter__", "__aexit__"}
    }


def _as_sync(annotation: str) -> str:
    text = str(annotation)
    text = re.sub(r"AsyncGenerator\[(.*), None\]", r"Generator[\1, None, None]", text)
    text = text.replace("AsyncIterator", "Iterator")
    for sync, aio in PAIRS:
        text = re.sub(rf"\b{aio.__name__}\b", sync.__name__, text)
    return text


@pytest.mark.parametrize(("sync", "aio"), PAIRS, ids=[s.__name__ for s, _ in PAIRS])
def test_same_methods_parameters_and_returns(sync: type, aio: type) -> None:
    s, a = _public(sync), _public(aio)
    assert set(s) - SYNC_ONLY == set(a) - ASYNC_ONLY
    for name in set(s) - SYNC_ONLY:
        ps, pa = s[name].parameters, a[name].parameters
        assert [(p.name, p.kind, p.default) for p in ps.values()] == \
            [(p.name, p.kind, p.default) for p in pa.values()], name
        assert [_as_sync(p.annotation) for p in ps.values()] == \
            [_as_sync(p.annotation) for p in pa.values()], name
        assert _as_sync(s[name].return_annotation) == _as_sync(a[name].return_annotation), name


def test_both_clients_share_one_core() -> None:
    assert issubclass(Client, ClientCore) and issubclass(AsyncClient, ClientCore)
    assert Client.__init__.__annotations__.keys() == AsyncClient.__init__.__annotations__.keys()


def test_the_rpc_methods_are_there() -> None:
    """Walking the MRO sees the generated methods (the test above compares them)."""
    assert {"chat", "stream_chat", "complete", "stream_complete", "generate", "stream_generate",
            "tokenize", "detokenize", "list_models", "health", "stats", "session",
            "wait_ready"} <= set(_public(Client))
    assert {"pause", "resume", "state", "update_weights_from_path", "set_weight_version",
            "reset_prefix_cache", "abort_requests", "load_lora_adapter", "unload_lora_adapter",
            "sleep", "wake_up", "init_weight_transfer", "start_weight_update", "update_weights",
            "finish_weight_update", "paused"} <= set(_public(AsyncControlClient))
