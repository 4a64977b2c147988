"""Client features' kwargs_data decoded with vLLM's own MsgpackDecoder but
never with its pickle extension (even where the operator allows pickle for
vLLM's IPC) and only vLLM's field factories by name: bytes a caller sent
are data, each refusal an INVALID_ARGUMENT naming the item."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.vllm.mm_features import VllmMultimodal


def decode(raw: bytes):  # type: ignore[no-untyped-def]
    media = object.__new__(VllmMultimodal)
    media._decoder = None
    return media._decode(raw, "features.kwargs_data.image[0]")


def test_a_vllm_item_decodes() -> None:
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.v1.serial_utils import MsgpackEncoder

    (raw,) = MsgpackEncoder(size_threshold=2**62).encode(MultiModalKwargsItem.dummy(8))
    assert decode(bytes(raw))["dummy"].numel() == 8


def test_pickle_is_refused_even_when_vllm_allows_it(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    evil = msgspec.msgpack.encode(msgspec.msgpack.Ext(1, pickle.dumps(print)))
    with pytest.raises(InvalidArgument) as info:
        decode(evil)
    assert info.value.param == "features.kwargs_data.image[0]"


def test_only_vllms_field_factories() -> None:
    body = {"dummy": {"data": None, "field": ["__init_subclass__", {}]}}
    with pytest.raises(InvalidArgument):
        decode(msgspec.msgpack.encode(body))
