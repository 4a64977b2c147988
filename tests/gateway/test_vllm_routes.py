"""vLLM's own server routes on the gateway's REST port, through the real
Envoy (fake engine): `GET /version`, SageMaker's `GET|POST /ping` and
`POST /invocations` (a chat or a completion by the body's keys), and
`GET /load` (requests in flight)."""

from __future__ import annotations

import importlib.metadata
import threading
import time

from tests.gateway.sse import chat_body, sse_json


def vllm_version() -> str:
    import vllm.version  # the test may import vLLM (the server reads package metadata)

    return str(vllm.version.__version__)


def test_version_is_vllms(rest) -> None:
    r = rest.get("/version")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["version"] == vllm_version()
    assert body["tokenwire_version"] == importlib.metadata.version("tokenwire")


def test_ping_answers_as_health(rest) -> None:
    for r in (rest.get("/ping"), rest.post("/ping"), rest.post("/ping", json={})):
        assert r.status_code == 200, r.text
        assert r.json() == rest.get("/health").json() == {"status": "SERVING"}


def test_invocations_with_a_chat_body_is_a_chat(rest) -> None:
    r = rest.post("/invocations", json=chat_body(max_tokens=3))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert body["choices"][0]["logprobs"] is None  # the :json binding, as /v1/chat/completions
    direct = rest.post("/v1/chat/completions", json=chat_body(max_tokens=3)).json()
    assert body["choices"] == direct["choices"] and body.keys() == direct.keys()


def test_invocations_with_a_completion_body_is_a_completion(rest) -> None:
    req = {"model": "fake-model", "prompt": "Hello there", "max_tokens": 3}
    r = rest.post("/invocations", json=req)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "text_completion"
    assert isinstance(body["choices"][0]["text"], str)
    assert body["usage"]["completion_tokens"] == 3


def test_invocations_streams_too(rest) -> None:
    r = rest.post("/invocations", json=chat_body(max_tokens=3, stream=True))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/event-stream"
    chunks = sse_json(r.content)
    assert chunks[0]["object"] == "chat.completion.chunk"
    r = rest.post("/invocations", json={"model": "fake-model", "prompt": "Hi", "max_tokens": 2,
                                        "stream": True})
    assert sse_json(r.content)[0]["object"] == "text_completion"


def test_invocations_nested_keys_do_not_count(rest) -> None:
    """Only top-level keys pick the route: a completion whose `extra` holds
    `messages` stays a completion; a body with neither is 400."""
    req = {"model": "fake-model", "prompt": "Hi", "max_tokens": 2,
           "logit_bias": {}, "user": "messages"}
    assert rest.post("/invocations", json=req).json()["object"] == "text_completion"
    r = rest.post("/invocations", json={"model": "fake-model", "input": {"messages": []}})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "Cannot find suitable handler" in error["message"]


def test_invocations_wrong_types_are_refused_as_on_the_route(rest) -> None:
    r = rest.post("/invocations", json=chat_body(max_tokens="many"))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_tokens"


def test_load_counts_requests_in_flight(rest) -> None:
    r = rest.get("/load")
    assert r.status_code == 200, r.text
    assert r.json() == {"server_load": 0}  # printed although zero
    done = threading.Event()

    def slow_call() -> None:
        try:
            rest.post("/v1/chat/completions", json=chat_body("SLOW", max_tokens=20))
        finally:
            done.set()

    thread = threading.Thread(target=slow_call)
    thread.start()
    seen = 0
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not done.is_set() and not seen:
        seen = rest.get("/load").json()["server_load"]
        time.sleep(0.05)
    thread.join()
    assert seen == 1
    assert rest.get("/load").json() == {"server_load": 0}


def test_probes_need_no_key_as_in_vllm() -> None:
    """vLLM guards only /v1/*: /ping, /version and /load answer without the
    key on a keyed server (tokenwire's open probes), inference needs it."""
    import httpx

    from tests.gateway.envoy_fixture import start_gateway, stop_gateway
    from tests.servers import fake_serving

    with fake_serving(api_key="k3-key", served_model_name="fake-model") as server:
        envoy = start_gateway(server.address)
        try:
            with httpx.Client(base_url=envoy.url, timeout=30) as client:
                assert client.get("/version").json()["version"] == vllm_version()
                assert client.get("/load").json() == {"server_load": 0}
                assert client.get("/ping").status_code == 200
                r = client.post("/invocations", json=chat_body(max_tokens=2))
                assert r.status_code == 401, r.text
                r = client.post("/invocations", json=chat_body(max_tokens=2),
                                headers={"authorization": "Bearer k3-key"})
                assert r.status_code == 200, r.text
        finally:
            stop_gateway(envoy)
