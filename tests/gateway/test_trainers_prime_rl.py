"""prime-rl and verifiers unchanged against tokenwire (issue #28). Neither
installs from the package index here (prime-rl is not published; verifiers
pulls a large agent stack), so these replay their exact requests and
response handling, read from their source:

- prime-rl src/prime_rl/utils/client.py @ 559b44772 (2026-08-21): the
  orchestrator's admin calls (/v1/models, /health, /pause?mode=keep&
  clear_cache=false, /update_weights {"weight_dir"}, /resume,
  /load_lora_adapter, /v1/unload_lora_adapter, each raise_for_status) and
  prefill_logprobs (/inference/v1/generate + prompt_logprobs, validated with
  vLLM's own GenerateResponse model, then flattened); its server's
  GET /liveness and the X-data-parallel-rank header.
- verifiers verifiers/legacy/clients/openai_chat_completions_token_client.py
  @ a60a606ec (2026-08-21): /tokenize with messages (TokenizeResponse:
  count, max_model_len, tokens) and POST /v1/chat/completions/tokens
  {model, messages, tools, tokens, max_completion_tokens, logprobs,
  return_token_ids} parsed as openai's ChatCompletion."""

from __future__ import annotations

import collections.abc
from pathlib import Path

import httpx
import pytest
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, TypeAdapter

from tests.gateway.trainers import ADMIN, MODEL, trainer_gateway
from tokenwire.server.engine.fake.engine import FakeEngine


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[str, FakeEngine]]:
    with trainer_gateway() as pair:
        yield pair


@pytest.fixture(scope="module")
def admin(served: tuple[str, FakeEngine]) -> collections.abc.Iterator[httpx.Client]:
    # prime-rl's setup_admin_clients: base URL without /v1, the key as a bearer token
    with httpx.Client(base_url=served[0], headers=ADMIN, timeout=60) as client:
        yield client


def _admin_post(client: httpx.Client, path: str, **kwargs: object) -> httpx.Response:
    response = client.post(path, **kwargs)  # type: ignore[arg-type]
    response.raise_for_status()  # prime-rl's _admin_post: any non-2xx fails the step
    return response


def test_prime_rl_weight_update_cycle(admin: httpx.Client, served: tuple[str, FakeEngine],
                                      tmp_path: Path) -> None:
    engine = served[1]
    assert admin.get("/v1/models").json()["data"][0]["id"] == MODEL
    assert admin.get("/health").status_code == 200
    assert admin.get("/liveness").status_code == 200
    _admin_post(admin, "/pause", params={"mode": "keep", "clear_cache": "false"})
    assert admin.get("/is_paused").json() == {"is_paused": True}
    step = tmp_path / "step_3"
    step.mkdir()
    r = _admin_post(admin, "/update_weights", json={"weight_dir": step.as_posix()})
    body = r.json()
    assert body["applied"] == "weight_dir" and body["state"]["weight_path"] == str(step.resolve())
    assert engine.loaded_paths[-1] == str(step.resolve())
    _admin_post(admin, "/resume")
    assert admin.get("/is_paused").json() == {"is_paused": False}  # the caller's pause: it resumes


def test_update_weights_bad_bodies(admin: httpx.Client, tmp_path: Path) -> None:
    r = admin.post("/update_weights", json={"weight_dir": str(tmp_path / "missing")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "weight_dir"
    r = admin.post(
        "/update_weights", json={"weight_dir": str(tmp_path), "update_info": {"names": []}}
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "fields_conflict"
    r = admin.post("/update_weights", json={"weight_dir": 3})
    assert r.status_code == 400 and r.json()["error"]["param"] == "weight_dir"
    # vLLM's body on the same path takes the weight-transfer path (here: not started)
    r = admin.post("/update_weights", json={"update_info": {"names": ["w"]}})
    assert r.json()["error"]["code"] == "weight_transfer_not_started", r.text
    with httpx.Client(base_url=str(admin.base_url), timeout=30) as anonymous:
        assert (
            anonymous.post("/update_weights", json={"weight_dir": str(tmp_path)}).status_code == 401
        )


def test_prime_rl_lora_routes(admin: httpx.Client, tmp_path: Path) -> None:
    _admin_post(
        admin, "/load_lora_adapter", json={"lora_name": "a1", "lora_path": tmp_path.as_posix()}
    )
    assert "a1" in admin.get("/tokenwire/v1/control/state").json()["state"]["lora_adapters"]
    _admin_post(admin, "/v1/unload_lora_adapter", json={"lora_name": "a1"})
    _admin_post(
        admin, "/skyrl/v1/load_lora_adapter", json={"lora_name": "a2", "lora_path": str(tmp_path)}
    )
    _admin_post(admin, "/v1/unload_lora_adapter", json={"lora_name": "a2"})


def test_prime_rl_prefill_logprobs(served: tuple[str, FakeEngine]) -> None:
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateResponse

    token_ids = [70, 71, 72, 73]
    with httpx.Client(base_url=served[0], timeout=60) as client:
        http_response = client.post("/inference/v1/generate", json={
            "model": MODEL, "token_ids": token_ids,
            "sampling_params": {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0,
                                "prompt_logprobs": 1},
        }, headers={"X-data-parallel-rank": "0"})
    assert http_response.status_code == 200, http_response.text
    # prime-rl: GenerateResponse.model_validate_json; in vLLM 0.32 here GenerateResponse is
    # the union of the tokens and text responses, so the same validation via a TypeAdapter
    response = TypeAdapter(GenerateResponse).validate_json(http_response.content)
    flat: list[float] = []
    for entry in response.prompt_logprobs or []:
        if not entry:
            flat.append(0.0)
            continue
        first = next(iter(entry.values()))
        lp = first.logprob if hasattr(first, "logprob") else first.get("logprob")
        flat.append(float(lp) if lp is not None else 0.0)
    assert len(flat) == len(token_ids) and flat[0] == 0.0 and all(v < 0 for v in flat[1:])
    # the prompt token itself is in each entry (its logprob, not an alternative's)
    assert all(t in e for e, t in zip(response.prompt_logprobs[1:], token_ids[1:], strict=True))


class TokenizeResponse(BaseModel):  # verifiers' model, as it parses /tokenize
    count: int
    max_model_len: int
    tokens: list[int]
    token_strs: list[str] | None = None


def test_verifiers_token_client_turn(served: tuple[str, FakeEngine]) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with httpx.Client(base_url=served[0], timeout=60) as client:
        first = ChatCompletion.model_validate_json(client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": messages, "max_completion_tokens": 3, "logprobs": True,
            "return_token_ids": True}).content)
        prompt_ids = first.model_extra["prompt_token_ids"]  # type: ignore[index]
        completion_ids = first.choices[0].model_extra["token_ids"]  # type: ignore[index]
        bridge = TokenizeResponse.model_validate_json(client.post("/tokenize", json={
            "model": MODEL, "messages": [{"role": "user", "content": "and then?"}], "tools": None,
            "add_generation_prompt": True}).content)
        assert bridge.count == len(bridge.tokens) > 0 and bridge.max_model_len == 512
        tokens = [*prompt_ids, *completion_ids, *bridge.tokens]
        raw = client.post("/v1/chat/completions/tokens", json={
            "model": MODEL, "messages": [*messages, {"role": "assistant", "content": "x"},
                                         {"role": "user", "content": "and then?"}],
            "tools": None, "tokens": tokens, "max_completion_tokens": 3, "logprobs": True,
            "return_token_ids": True})
    assert raw.status_code == 200, raw.text
    second = ChatCompletion.model_validate_json(raw.content)
    # the given ids, not a render
    assert second.model_extra["prompt_token_ids"] == tokens  # type: ignore[index]
    assert second.choices[0].logprobs is not None
    assert all(e.top_logprobs == [] for e in second.choices[0].logprobs.content or [])


def test_chat_tokens_bad_input(served: tuple[str, FakeEngine]) -> None:
    with httpx.Client(base_url=served[0], timeout=60) as client:
        r = client.post("/v1/chat/completions/tokens", json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], "tokens": [1, 2],
            "nvext": {"token_data": [3]}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"
        r = client.post("/v1/chat/completions/tokens", json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], "tokens": [10 ** 7]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"
        r = client.post("/v1/chat/completions/tokens", json={
            "model": MODEL, "messages": [{"role": "user", "content": "x"}], "tokens": "1,2"})
        assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"


def test_prime_rl_broadcast_needs_its_worker_extension(admin: httpx.Client) -> None:
    body = {"host": "10.0.0.1", "port": 29501, "rank_offset": 0, "inference_world_size": 1,
            "timeout": 1200, "quantize_in_weight_transfer": False}
    r = admin.post("/init_broadcaster", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "worker_extension_required"
    assert "--worker-extension-cls" in r.json()["error"]["message"]


def test_prime_rl_broadcast_through_its_worker_extension(tmp_path: Path) -> None:
    """With the operator's allow list, /init_broadcaster and /update_weights
    {weight_dir} reach prime-rl's worker methods as its own server calls them."""
    allow = ("init_broadcaster", "update_weights_from_path")
    with trainer_gateway(collective_rpc_allow=allow) as (url, engine), \
            httpx.Client(base_url=url, headers=ADMIN, timeout=60) as admin:
        _admin_post(admin, "/init_broadcaster", json={
            "host": "10.0.0.1", "port": 29501, "rank_offset": 2, "inference_world_size": 4,
            "timeout": 1200, "quantize_in_weight_transfer": False})
        assert engine.rpcs[-1] == ("init_broadcaster",
                                   ["10.0.0.1", 29501, 2, 4, 1200, False, "default"], {})
        r = _admin_post(admin, "/update_weights", json={"weight_dir": tmp_path.as_posix()})
        assert r.json()["applied"] == "weight_dir:update_weights_from_path"
        assert engine.rpcs[-1] == ("update_weights_from_path", [tmp_path.as_posix()], {})
        assert engine.loaded_paths == []  # the worker extension loads, not tokenwire
