"""slime and AReaL unchanged against tokenwire (issue #28): SGLang's native
`POST /generate` and the SGLang / AReaL control routes. Neither framework
installs here (they need CUDA builds of SGLang / Megatron), so these replay
their exact requests and response handling, read from their source:

- slime slime/rollout/sglang_rollout.py, on_policy_distillation.py and
  slime/backends/sglang_utils/sglang_engine.py @ 624b824a8 (2026-08-21):
  /generate {input_ids, sampling_params, return_logprob} reading
  meta_info.output_token_logprobs ([logprob, id, _]), text, finish_reason
  ["type"], weight_version, prompt/completion/cached tokens; the teacher's
  scoring (max_new_tokens 0, logprob_start_len 0, input_token_logprobs[1:]);
  /pause_generation {}, GET /flush_cache (until 200), /continue_generation {},
  GET /get_weight_version, GET /health_generate.
- AReaL areal/engine/sglang_remote.py and vllm_remote.py @ 4aef98d8d
  (2026-05-21): SGLang /generate (stop_token_ids, frequency_penalty,
  image_data null, stream false) and /update_weights_from_disk {model_path,
  abort_all_requests}; the vLLM path /v1/completions {prompt: ids,
  return_tokens_as_token_ids, logprobs 0, use_beam_search false} parsing
  "token_id:N", /areal_update_weights {model_path},
  /areal_pause_generation, /areal_continue_generation.
Also vLLM's /collective_rpc: admin only, allowed methods only."""

from __future__ import annotations

import collections.abc
from pathlib import Path

import httpx
import pytest

from tests.gateway.trainers import ADMIN, trainer_gateway
from tokenwire.server.engine.fake.engine import FakeEngine

PROMPT = [70, 71, 72, 73, 74]


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[str, FakeEngine]]:
    with trainer_gateway(
        collective_rpc_allow=("update_weights_from_path", "liveness_probe")
    ) as pair:
        yield pair


@pytest.fixture(scope="module")
def client(served: tuple[str, FakeEngine]) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def admin(served: tuple[str, FakeEngine]) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60, headers=ADMIN) as c:
        yield c


def test_slime_rollout_generate(client: httpx.Client) -> None:
    sampling_params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": 6,
                       "stop_token_ids": [], "skip_special_tokens": False, "no_stop_trim": True,
                       "sampling_seed": 7}
    r = client.post("/generate", json={"sampling_params": sampling_params, "return_logprob": True,
                                       "input_ids": PROMPT}, headers={"X-SMG-Routing-Key": "s1"})
    assert r.status_code == 200, r.text
    output = r.json()
    meta = output["meta_info"]
    new_tokens = [item[1] for item in meta["output_token_logprobs"]]
    new_logprobs = [item[0] for item in meta["output_token_logprobs"]]
    assert new_tokens == output["output_ids"] and len(new_tokens) == 6
    assert all(lp <= 0 for lp in new_logprobs) and isinstance(output["text"], str)
    assert meta["finish_reason"]["type"] == "length" and meta["finish_reason"]["length"] == 6
    assert meta["weight_version"] == "default"
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 6}]  # every span
    assert (meta.get("prompt_tokens", 0), meta.get("completion_tokens", 0)) == (5, 6)
    assert meta.get("cached_tokens", 0) >= 0 and meta["id"]


def test_slime_teacher_scoring(client: httpx.Client) -> None:
    payload = {"input_ids": PROMPT, "sampling_params": {"temperature": 1.0, "max_new_tokens": 0,
                                                        "skip_special_tokens": False},
               "return_logprob": True, "logprob_start_len": 0}
    r = client.post("/generate", json=payload)
    assert r.status_code == 200, r.text
    reward = r.json()
    teacher = [item[0] for item in reward["meta_info"]["input_token_logprobs"][1:]]
    assert [item[1] for item in reward["meta_info"]["input_token_logprobs"]] == PROMPT
    assert reward["meta_info"]["input_token_logprobs"][0][0] is None
    assert len(teacher) == 4 and all(lp <= 0 for lp in teacher)
    assert reward.get("output_ids", []) == [] and reward["text"] == ""  # nothing generated reported


def test_areal_sglang_generate(client: httpx.Client) -> None:
    payload = {"input_ids": PROMPT, "image_data": None, "return_logprob": True, "stream": False,
               "sampling_params": {"top_p": 1.0, "top_k": 100, "max_new_tokens": 4,
                                   "temperature": 0.0, "stop_token_ids": [2], "ignore_eos": False,
                                   "skip_special_tokens": True, "frequency_penalty": 0.0}}
    meta = client.post("/generate", json=payload).json()["meta_info"]
    stop_reason = meta["finish_reason"]["type"]
    output_tokens = [x[1] for x in meta["output_token_logprobs"]]
    output_logprobs = [x[0] for x in meta["output_token_logprobs"]]
    assert stop_reason in ("length", "stop") and len(output_tokens) == len(output_logprobs) >= 1


def test_generate_bad_input_names_sglang_fields(client: httpx.Client) -> None:
    def error(body: dict) -> dict:
        r = client.post("/generate", json=body)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    assert error({"input_ids": PROMPT, "sampling_params": {"max_new_tokens": -1}})["param"] == \
        "sampling_params.max_new_tokens"
    assert error({"input_ids": [10 ** 7]})["param"] == "input_ids"
    assert error({"text": "hello"})["param"] == "text"
    assert error({"input_ids": PROMPT, "stream": True})["param"] == "stream"
    assert error({"input_ids": PROMPT, "image_data": ["x"]})["param"] == "image_data"
    assert (
        error({"input_ids": PROMPT, "return_logprob": True, "logprob_start_len": 9})["param"]
        == "logprob_start_len"
    )
    assert error({"input_ids": "1 2"})["param"] == "input_ids"
    assert error({"input_ids": PROMPT, "sampling_params": {"n": 2}})["param"] == "sampling_params.n"


def test_slime_weight_update_sequence(
    admin: httpx.Client, client: httpx.Client, tmp_path: Path
) -> None:
    r = admin.post("/pause_generation", json={})
    r.raise_for_status()
    assert admin.get("/is_paused").json() == {"is_paused": True}
    for _ in range(3):  # slime retries GET /flush_cache until it answers 200
        if admin.get("/flush_cache").status_code == 200:
            break
    else:
        raise AssertionError("flush_cache never answered 200")
    r = admin.post(
        "/update_weights_from_disk", json={"model_path": str(tmp_path), "abort_all_requests": True}
    )
    assert r.status_code == 200 and r.json()["success"] is True
    admin.post("/continue_generation", json={}).raise_for_status()
    assert admin.get("/is_paused").json() == {"is_paused": False}
    assert admin.get("/get_weight_version").json()["weight_version"]  # slime's get_weight_version
    assert client.get("/health_generate").status_code == 200  # slime's health check
    # the in-place mode SGLang names is vLLM's keep
    admin.post("/pause_generation", json={"mode": "in_place"}).raise_for_status()
    assert admin.get("/tokenwire/v1/control/state").json()["state"]["pause_mode"] == "keep"
    admin.post("/continue_generation", json={}).raise_for_status()
    r = admin.post("/pause_generation", json={"mode": "someday"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "mode"
    assert client.post("/pause_generation", json={}).status_code == 401  # control: the admin's


def test_areal_vllm_path(admin: httpx.Client, client: httpx.Client, tmp_path: Path) -> None:
    payload = {"top_p": 1.0, "top_k": -1, "max_tokens": 4, "temperature": 1.0, "stop_token_ids": [],
               "ignore_eos": False, "skip_special_tokens": True, "return_tokens_as_token_ids": True,
               "logprobs": 0, "use_beam_search": False, "stream": False, "prompt": PROMPT}
    r = client.post("/v1/completions", json=payload)
    assert r.status_code == 200, r.text
    meta_info = r.json()["choices"][0]
    output_tokens = [int(t.split(":")[1]) for t in meta_info["logprobs"]["tokens"]]
    output_logprobs = meta_info["logprobs"]["token_logprobs"]
    assert len(output_tokens) == len(output_logprobs) == 4 and meta_info["finish_reason"]
    admin.post("/areal_pause_generation", json={}).raise_for_status()
    r = admin.post("/areal_update_weights", json={"model_path": str(tmp_path)})
    assert r.status_code == 200 and r.json()["success"] is True
    admin.post("/areal_continue_generation", json={}).raise_for_status()
    assert admin.get("/is_paused").json() == {"is_paused": False}


def test_collective_rpc_admin_and_allowed_only(admin: httpx.Client, client: httpx.Client,
                                               served: tuple[str, FakeEngine]) -> None:
    r = admin.post("/collective_rpc", json={"method": "liveness_probe", "args": ["/w"],
                                            "kwargs": {"k": "v"}, "timeout": 30})
    assert r.status_code == 200, r.text
    assert r.json() == {"results": [{"method": "liveness_probe", "args": ["/w"],
                                     "kwargs": {"k": "v"}}]}
    assert served[1].rpcs[-1] == ("liveness_probe", ["/w"], {"k": "v"})
    # A weight-changing worker method, even allowed, is not a raw collective_rpc:
    # it would skip the pause, label, generation and cache reset of a weight load.
    r = admin.post("/collective_rpc", json={"method": "update_weights_from_path", "args": ["/w"]})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "weight_change_route_required"
    assert "/update_weights {weight_dir}" in r.json()["error"]["message"]
    assert served[1].rpcs[-1] == ("liveness_probe", ["/w"], {"k": "v"})
    r = admin.post("/collective_rpc", json={"method": "execute_model"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "collective_rpc_not_allowed"
    r = admin.post("/collective_rpc", json={"method": "liveness_probe", "timeout": -1})
    assert r.status_code == 400 and r.json()["error"]["param"] == "timeout"
    assert client.post("/collective_rpc", json={"method": "liveness_probe"}).status_code == 401
    assert admin.get("/get_world_size", params={"include_dp": "false"}).json() == {"world_size": 1}


@pytest.mark.parametrize("path", ["/update_weights_from_distributed", "/init_weights_update_group",
                                  "/update_weights_from_tensor",
                                  "/areal_init_weights_update_group"])
def test_gpu_weight_groups_we_do_not_speak(
    admin: httpx.Client, client: httpx.Client, path: str
) -> None:
    body = {"names": ["w"], "dtypes": ["bfloat16"], "shapes": [[2, 2]], "group_name": "g"}
    r = admin.post(path, json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "weight_sync_unsupported", r.text
    assert "/update_weights_from_disk" in r.json()["error"]["message"]
    assert client.post(path, json=body).status_code == 401


@pytest.mark.parametrize(("method", "path", "body", "param"), [
    ("POST", "/collective_rpc", {}, "method"),
    ("POST", "/collective_rpc", {"method": "liveness_probe", "args": "x"}, "args"),
    ("POST", "/init_broadcaster", {"host": "h", "port": "not-a-port"}, "port"),
    ("POST", "/areal_update_weights", {}, "model_path"),
    ("POST", "/update_weights", {}, "update_info"),
    ("GET", "/get_world_size?include_dp=maybe", None, "include_dp"),
    ("GET", "/server_info?config_format=xml", None, "config_format"),
])
def test_new_control_routes_bad_input(admin: httpx.Client, method: str, path: str,
                                      body: dict | None, param: str) -> None:
    r = admin.request(method, path, json=body)
    assert r.status_code == 400, r.text
    assert (
        r.json()["error"]["param"] == param and r.json()["error"]["type"] == "invalid_request_error"
    )


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "return_tokens_as_token_ids": "yes"}, "return_tokens_as_token_ids"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "logprobs": True,
                              "top_logprobs": 99}, "top_logprobs"),
    ("/finish_session?session_id=", None, "session_id"),
])
def test_new_data_routes_bad_input(
    client: httpx.Client, path: str, body: dict | None, param: str
) -> None:
    r = client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
