"""The client library (tokenwire.client) against a fake-engine server:
every RPC, typed errors, deadlines, retries, sessions, conversations."""

from __future__ import annotations

import asyncio
import collections.abc
import itertools
import threading
import time

import grpc
import pytest

from tests.servers import ThreadServer, fake_serving
from tokenwire.client import (
    AsyncClient,
    AsyncConversation,
    Client,
    Conversation,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    RequestCancelledError,
    RetryPolicy,
    TokenwireError,
    UnavailableError,
)
from tokenwire.client.errors import from_session_error
from tokenwire.server.engine.fake.engine import EOS, FakeEngine
from tokenwire.v1 import session_pb2


@pytest.fixture(scope="module")
def client(fake_server: ThreadServer) -> collections.abc.Iterator[Client]:
    with Client(fake_server.address, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def flaky_server() -> collections.abc.Iterator[ThreadServer]:
    """A server whose serving flag tests may flip, on a slow fake engine."""
    with fake_serving(
        FakeEngine(max_model_len=512, token_delay=0.01), served_model_name="fake-model"
    ) as server:
        yield server


def test_every_unary_rpc(client: Client, fake_engine: FakeEngine) -> None:
    resp = client.chat(messages="Hi", max_tokens=50, return_token_ids=True)
    assert resp.choices[0].message.content == "Hello from the fake engine."
    assert resp.choices[0].token_ids[-1] == EOS
    gen = client.generate(token_ids=[1, 50, 51], sampling_params={"max_tokens": 3})
    assert len(gen.choices[0].token_ids) == 3
    tok = client.tokenize(prompt="abc", add_special_tokens=False)
    assert list(tok.tokens) == fake_engine.encode("abc", False)
    assert client.detokenize(tok.tokens) == "abc"
    assert client.list_models().data[0].id == "fake-model"
    assert client.health().status == "SERVING"
    assert client.stats().serving
    client.wait_ready(timeout=5)


def test_streams_and_request_forms(client: Client) -> None:
    chunks = list(
        client.stream_chat({"messages": [{"role": "user", "content": "Hi"}]}, return_token_ids=True)
    )
    ids = [t for c in chunks for ch in c.choices for t in ch.token_ids]
    unary = client.chat(client_request := _proto_request(), return_token_ids=True)
    assert client_request.return_token_ids is False, "the caller's message is not modified"
    assert ids == list(unary.choices[0].token_ids)
    gen = list(client.stream_generate(token_ids=[1, 50], sampling_params={"max_tokens": 4}))
    assert sum(len(c.choices[0].token_ids) for c in gen if c.choices) == 4


def _proto_request():
    from tokenwire.v1 import chat_pb2

    req = chat_pb2.CreateChatCompletionRequest()
    req.messages.add(role="user").content.string_value = "Hi"
    return req


def test_typed_errors_carry_reason_and_param(client: Client) -> None:
    with pytest.raises(InvalidArgumentError) as exc_info:
        client.chat(messages="Hi", max_tokens=-1)
    err = exc_info.value
    assert err.code == grpc.StatusCode.INVALID_ARGUMENT and err.param == "max_tokens"
    assert err.reason == "VALUE_OUT_OF_RANGE" and "max_tokens" in err.message
    assert "max_tokens" in str(err)
    with pytest.raises(NotFoundError) as exc_info:
        client.chat(messages="Hi", model="other")
    assert exc_info.value.reason == "MODEL_NOT_FOUND" and exc_info.value.param == "model"
    with pytest.raises(InvalidArgumentError):
        list(client.stream_chat(messages="Hi", top_logprobs=3))
    assert isinstance(
        from_session_error(session_pb2.SessionRequestError(code=9, message="m")),
        FailedPreconditionError,
    )


def test_deadline_is_enforced(flaky_server: ThreadServer) -> None:
    with Client(flaky_server.address) as c:
        with pytest.raises(DeadlineExceededError):
            c.chat(messages="Hi", ignore_eos=True, max_tokens=200, timeout=0.2)
        with pytest.raises(DeadlineExceededError):
            list(c.stream_chat(messages="Hi", ignore_eos=True, max_tokens=200, timeout=0.2))


def _not_serving_for(server: ThreadServer, seconds: float) -> threading.Thread:
    running = server._running
    server.call(running.set_serving(False))  # type: ignore[attr-defined]

    def back() -> None:
        time.sleep(seconds)
        server.call(running.set_serving(True))  # type: ignore[attr-defined]

    t = threading.Thread(target=back)
    t.start()
    return t


def test_retries_unavailable_until_serving(flaky_server: ThreadServer) -> None:
    retry = RetryPolicy(max_attempts=8, initial_backoff=0.1, max_backoff=0.3)
    with Client(flaky_server.address, retry=retry) as c:
        t = _not_serving_for(flaky_server, 0.6)
        start = time.monotonic()
        assert c.chat(messages="Hi", max_tokens=2).choices[0].finish_reason == "length"
        assert time.monotonic() - start >= 0.5, "it waited for the server"
        t.join()
        t = _not_serving_for(flaky_server, 0.6)
        chunks = list(c.stream_chat(messages="Hi", max_tokens=2))
        assert chunks
        t.join()


def test_no_retry_when_unsafe_or_disabled(flaky_server: ThreadServer) -> None:
    with Client(flaky_server.address, retry=RetryPolicy(max_attempts=1)) as c:
        t = _not_serving_for(flaky_server, 0.5)
        with pytest.raises(UnavailableError):
            c.chat(messages="Hi", max_tokens=2)
        t.join()
    policy = RetryPolicy()
    assert not policy.should_retry(InvalidArgumentError("x"), 1)
    assert policy.should_retry(UnavailableError("dead", reason="ENGINE_DEAD"), 1)  # Trust IV 7
    assert policy.should_retry(UnavailableError("x"), 1) and not policy.should_retry(
        UnavailableError("x"), 3
    )
    assert not policy.should_retry(DeadlineExceededError("x"), 1)


def test_sync_session_results_continuation_cancel_errors(
    client: Client, fake_engine: FakeEngine
) -> None:
    with client.session() as s:
        h1 = s.start_chat(messages="Hi", return_token_ids=True, request_id="one")
        r1 = h1.result()
        assert r1.done.continuable and r1.chat is not None
        h2 = s.start_chat(continue_from="one", messages="More?", stream=True, return_token_ids=True)
        chunks = [ev.chat_chunk for ev in h2]
        r2 = h2.result()
        assert chunks and r2.chat_chunks == chunks
        t1, t2 = r1.tokens, r2.tokens
        assert (
            t2.prompt_ids[: len(t1.prompt_ids) + len(t1.completion_ids)]
            == t1.prompt_ids + t1.completion_ids
        )
        assert t2.prompt_ids == list(r2.done.prompt_token_ids)
        bad = s.start_chat(messages="Hi", max_tokens=-1)
        with pytest.raises(InvalidArgumentError) as exc_info:
            bad.result()
        assert exc_info.value.param == "max_tokens"
        with pytest.raises(NotFoundError) as exc_info:
            s.start_chat(continue_from="nope").result()
        assert exc_info.value.reason == "CONTINUATION_NOT_FOUND"
        g = s.start_generate(token_ids=[1, 50], sampling_params={"max_tokens": 3}).result()
        assert len(g.tokens.completion_ids) == 3


def test_sync_session_cancel_and_close(flaky_server: ThreadServer) -> None:
    with Client(flaky_server.address) as c:
        s = c.session()
        long = s.start_chat(messages="Hi", ignore_eos=True, max_tokens=300, stream=True)
        other = s.start_chat(messages="Hi", max_tokens=3)
        next(iter(long))
        long.cancel()
        with pytest.raises(RequestCancelledError):
            long.result(timeout=10)
        assert other.result(timeout=10).done.continuable
        pending = s.start_chat(messages="Hi", ignore_eos=True, max_tokens=300)
        s.close()
        with pytest.raises(RequestCancelledError):
            pending.result(timeout=10)
        with pytest.raises(RequestCancelledError):
            s.start_chat(messages="Hi")
        deadline = time.monotonic() + 5
        while c.stats().engine_requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c.stats().engine_requests == 0


def test_session_level_failure_raises_on_open_handles(flaky_server: ThreadServer) -> None:
    client = Client(flaky_server.address)
    s = client.session()
    s.start_chat(messages="Hi", ignore_eos=True, max_tokens=400, request_id="dup")
    h = s.start_chat(messages="Hi", request_id="dup")
    with pytest.raises(TokenwireError) as exc_info:
        h.result(timeout=10)
    assert exc_info.value.reason in ("DUPLICATE_REQUEST_ID", "REQUEST_CANCELLED")
    s.close()
    assert s.failure is not None and s.failure.reason == "DUPLICATE_REQUEST_ID"
    client.close()


@pytest.mark.parametrize("mode", ["session", "tokens"])
def test_conversation_three_turns_keeps_ids(client: Client, mode: str) -> None:
    with Conversation(client, mode=mode, system="Be brief.", max_tokens=40) as conv:
        conv.send("What is the capital of France?")
        conv.send("And of Germany?")
        streamed = list(conv.stream("Which is bigger?"))
    assert streamed and len(conv.turns) == 3
    for a, b in itertools.pairwise(conv.turns):
        assert (
            b.prompt_ids[: len(a.prompt_ids) + len(a.completion_ids)]
            == a.prompt_ids + a.completion_ids
        )
        assert b.prompt_ids == a.prompt_ids + a.completion_ids + b.suffix_ids
    for t in conv.turns:
        assert len(t.logprobs) == len(t.completion_ids) > 0 and t.completion_ids[-1] == EOS
        assert t.text == "Hello from the fake engine."
    assert conv.turns[0].suffix_ids == conv.turns[0].prompt_ids


def test_conversation_modes_give_identical_prompts(client: Client) -> None:
    turns = {}
    for mode in ("session", "tokens"):
        with Conversation(client, mode=mode, max_tokens=40) as conv:
            for q in ("One?", "Two?", "Three?"):
                conv.send(q)
            conv.send(suffix_ids=[1, 50, 2])
            turns[mode] = [t.prompt_ids for t in conv.turns]
    assert turns["session"] == turns["tokens"]


async def test_async_client_session_and_conversation(fake_server: ThreadServer) -> None:
    async with AsyncClient(fake_server.address, timeout=30) as c:
        resp = await c.chat(messages="Hi", return_token_ids=True)
        assert resp.choices[0].token_ids[-1] == EOS
        chunks = [ch async for ch in c.stream_chat(messages="Hi")]
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert (await c.tokenize(prompt="a", add_special_tokens=False)).count == 1
        assert await c.detokenize([100]) == "a"
        assert (await c.list_models()).data and (await c.health()).status == "SERVING"
        with pytest.raises(InvalidArgumentError):
            await c.chat(messages="Hi", temperature=-1)
        async with c.session() as s:
            handles = [await s.start_chat(messages="Hi", max_tokens=5) for _ in range(5)]
            results = await asyncio.gather(*(h.result() for h in handles))
            assert all(r.done.continuable for r in results)
            cont = await s.start_chat(
                continue_from=handles[0].request_id, messages="again", return_token_ids=True
            )
            events = [ev async for ev in cont]
            assert events[0].WhichOneof("event") == "chat_result"
            with pytest.raises(NotFoundError):
                await (await s.start_chat(continue_from="missing")).result()
        for mode in ("session", "tokens"):
            async with AsyncConversation(c, mode=mode, max_tokens=30) as conv:
                await conv.send("Q1")
                await conv.send("Q2")
                chunks = [ch async for ch in conv.stream("Q3")]
            assert chunks
            a, b, c3 = conv.turns
            assert (
                b.prompt_ids[: len(a.prompt_ids) + len(a.completion_ids)]
                == a.prompt_ids + a.completion_ids
            )
            assert (
                c3.prompt_ids[: len(b.prompt_ids) + len(b.completion_ids)]
                == b.prompt_ids + b.completion_ids
            )


async def test_async_session_cancel(flaky_server: ThreadServer) -> None:
    async with AsyncClient(flaky_server.address) as c:
        async with c.session() as s:
            h = await s.start_chat(messages="Hi", ignore_eos=True, max_tokens=300, stream=True)
            async for _ in h:
                break
            await h.cancel()
            with pytest.raises(RequestCancelledError):
                await h.result()
            pending = await s.start_chat(messages="Hi", ignore_eos=True, max_tokens=300)
        with pytest.raises(RequestCancelledError):
            await pending.result()


def test_api_key_tls_and_retry_info(tmp_path, monkeypatch) -> None:
    from tests.cases import self_signed
    from tokenwire.client import ResourceExhaustedError, UnauthenticatedError

    cert, key, pem = self_signed(tmp_path)
    tls = {"root_certificates": pem, "options": [("grpc.ssl_target_name_override", "localhost")]}
    with fake_serving(FakeEngine(max_model_len=512, token_delay=0.01), api_key="sekret",
                      tls_cert=cert, tls_key=key, max_concurrent_requests=1) as server:
        monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
        with Client(server.address, **tls) as c, pytest.raises(UnauthenticatedError) as exc_info:
            c.chat(messages="Hi", max_tokens=2)
        assert exc_info.value.reason == "API_KEY_INVALID"
        monkeypatch.setenv("TOKENWIRE_API_KEY", "sekret")
        with Client(server.address, retry=RetryPolicy(max_attempts=1), **tls) as c:
            assert c.chat(messages="Hi", max_tokens=2).choices
            long = c.stream_chat(messages="Hi", ignore_eos=True, max_tokens=60)
            next(long)  # holds the one admission slot for about 0.6 s
            with pytest.raises(ResourceExhaustedError) as exc_info:
                c.chat(messages="Hi", max_tokens=2)
            assert exc_info.value.retry_after == 1.0
            with Client(
                server.address, retry=RetryPolicy(max_attempts=3, initial_backoff=0.01), **tls
            ) as patient:
                start = time.monotonic()
                assert patient.chat(messages="Hi", max_tokens=2).choices
                assert time.monotonic() - start >= 0.9, "the server's RetryInfo delay was honoured"
            long.close()


def test_complete_and_stream_complete(client: Client) -> None:
    resp = client.complete(prompt=[70, 71, 72], max_tokens=4, return_token_ids=True)
    assert list(resp.choices[0].prompt_token_ids) == [70, 71, 72]
    chunks = list(client.stream_complete({"prompt": [70, 71, 72], "max_tokens": 4},
                                         return_token_ids=True))
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == list(
        resp.choices[0].token_ids
    )


async def test_async_complete(fake_server: ThreadServer) -> None:
    async with AsyncClient(fake_server.address, timeout=30) as c:
        resp = await c.complete(prompt=["ab", "cd"], max_tokens=2)
        assert [ch.index for ch in resp.choices] == [0, 1]
        ids = [
            t
            async for chunk in c.stream_complete(prompt="ab", max_tokens=2, return_token_ids=True)
            for ch in chunk.choices
            for t in ch.token_ids
        ]
        assert len(ids) == 2


def test_session_completion_continues(client: Client) -> None:
    with client.session() as s:
        first = s.start_completion(prompt=[70, 71], max_tokens=3, return_token_ids=True).result()
        assert first.done.continuable and first.completion is not None
        ids = list(first.completion.choices[0].token_ids)
        nxt = s.start_completion(continue_from=first.request_id, suffix_ids=[72], max_tokens=2,
                                 return_token_ids=True, stream=True).result()
        prompt = [p for c in nxt.completion_chunks for ch in c.choices for p in ch.prompt_token_ids]
        assert prompt == [70, 71, *ids, 72]


def test_conversation_with_an_image_keeps_it_in_every_mode() -> None:
    """A conversation that starts with an image (the fake VLM): the session
    mode's continuations keep the server-side image, the tokens mode sends
    it again as nvext.content_parts with the ids: both give the same
    prompts, the image expanded once, in place."""
    import base64
    import io

    from PIL import Image

    from tokenwire.server.engine.fake import media

    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (1, 2, 3)).save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    look = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    prompts = {}
    with fake_serving(engine, served_model_name="fake-model") as server:
        client = Client(server.address)
        for mode in ("session", "tokens"):
            with Conversation(client, mode=mode, max_tokens=6) as conv:
                conv.send(look)
                conv.send("And now?")
                conv.send(suffix_ids=[1, 50, 2])
                prompts[mode] = [t.prompt_ids for t in conv.turns]
        client.close()
    assert prompts["session"] == prompts["tokens"]
    for prompt in prompts["session"]:
        assert prompt.count(media.IMAGE_START) == 1 and prompt.count(media.IMAGE) == media.EMBEDS


def test_conversation_with_a_new_image_each_turn_in_every_mode() -> None:
    """An agent's conversation with a new screenshot in a later turn: the
    session mode continues with the new image's message (the server expands
    it after the stored turn), the tokens mode gets the expanded suffix from
    Tokenize next_turn and sends every image so far as content_parts with
    the ids: both give the same prompts, each image expanded once, in order."""
    import base64
    import io

    from PIL import Image

    from tokenwire.server.engine.fake import media

    def shot(color: tuple[int, int, int], text: str) -> list[dict]:
        buf = io.BytesIO()
        Image.new("RGB", (8, 6), color).save(buf, "PNG")
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
        return [{"role": "user", "content": [{"type": "text", "text": text},
                                             {"type": "image_url", "image_url": {"url": url}}]}]

    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    prompts, places = {}, {}
    with fake_serving(engine, served_model_name="fake-model") as server:
        client = Client(server.address)
        for mode in ("session", "tokens"):
            with Conversation(client, mode=mode, max_tokens=6) as conv:
                conv.send(shot((1, 2, 3), "Look:"))
                conv.send(shot((200, 2, 3), "And now?"))
                conv.send("Done?")
                prompts[mode] = [t.prompt_ids for t in conv.turns]
            places[mode] = engine.requests[-1].multimodal.placeholders
        client.close()
    assert prompts["session"] == prompts["tokens"]
    assert [p.count(media.IMAGE_START) for p in prompts["session"]] == [1, 2, 2]
    last = prompts["session"][-1]
    assert places["session"] == places["tokens"]
    assert [last[o:o + n] for o, n in places["session"]["image"]] == [media.EXPAND] * 2
