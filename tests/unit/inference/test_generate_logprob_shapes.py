"""Generate logprobs in both shapes clients parse (issue #14 item 2):
vLLM 0.32's `token_id` and the earlier `"token": "token_id:N"`, in every
entry (sampled and alternatives); text mode names tokens by text and bytes."""

from __future__ import annotations

from google.protobuf import json_format

from tokenwire.v1 import generate_pb2

PROMPT = [1, 75, 104, 33]


def _generate(stub, **extra):
    req = json_format.ParseDict(
        {
            "token_ids": PROMPT,
            "sampling_params": {"max_tokens": 4, "logprobs": 2, "ignore_eos": True},
            **extra,
        },
        generate_pb2.GenerateRequest(),
    )
    resp = stub.Generate(req, timeout=10)
    return resp, json_format.MessageToDict(resp, preserving_proto_field_name=True)


def _ids_old_client(choice: dict) -> list[int]:
    """A client written for earlier vLLM: requires "token": "token_id:N"."""
    out = []
    for entry in choice["logprobs"]["content"]:
        kind, _, number = entry["token"].partition(":")
        assert kind == "token_id", entry
        out.append(int(number))
    return out


def _ids_new_client(choice: dict) -> list[int]:
    """A client written for vLLM 0.32: reads token_id."""
    return [entry["token_id"] for entry in choice["logprobs"]["content"]]


def test_both_kinds_of_client_parse_the_same_ids(fake_stub) -> None:
    resp, body = _generate(fake_stub)
    choice = body["choices"][0]
    assert _ids_old_client(choice) == _ids_new_client(choice) == list(resp.choices[0].token_ids)
    for entry in choice["logprobs"]["content"]:
        for alt in entry["top_logprobs"]:
            assert alt["token"] == f"token_id:{alt['token_id']}"


def test_text_mode_names_tokens_by_text_and_bytes(fake_stub, fake_engine) -> None:
    resp, body = _generate(fake_stub, output_mode="text")
    for entry, tid in zip(body["choices"][0]["logprobs"]["content"], resp.choices[0].token_ids,
                          strict=True):
        assert entry["token_id"] == tid
        assert entry["token"] == fake_engine.token_text(tid)
        assert bytes(entry["bytes"]) == fake_engine.token_bytes(tid)
    assert resp.choices[0].text == fake_engine.decode(list(resp.choices[0].token_ids))
