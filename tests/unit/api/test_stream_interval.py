"""stream_options.stream_interval: k tokens per chunk, every id kept, the
tail sent as soon as the choice finishes (fake engine; the real-engine
variant is in tests/engine/test_real_engine.py)."""

from __future__ import annotations

from tests.rpc import chat_request, stream_ids, stream_text
from tokenwire.v1 import generate_pb2


def _per_chunk(chunks) -> list[int]:
    return [len(c.choices[0].token_ids) for c in chunks if c.choices and c.choices[0].token_ids]


def test_chat_chunks_carry_k_ids_and_every_id(fake_stub) -> None:
    fields = dict(max_tokens=10, ignore_eos=True, return_token_ids=True)
    unary = fake_stub.CreateChatCompletion(chat_request(**fields), timeout=10)
    chunks = list(
        fake_stub.StreamChatCompletion(
            chat_request(**fields, stream_options={"stream_interval": 4, "include_usage": True}),
            timeout=10,
        )
    )
    assert _per_chunk(chunks) == [1, 4, 4, 1]  # the first token at once, then every 4
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    assert stream_text(chunks)[0] == unary.choices[0].message.content
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals == ["length"]
    assert chunks[-1].usage.completion_tokens == 10


def test_chat_interval_one_is_a_chunk_per_token(fake_stub) -> None:
    chunks = list(
        fake_stub.StreamChatCompletion(
            chat_request(
                max_tokens=5,
                ignore_eos=True,
                return_token_ids=True,
                stream_options={"stream_interval": 1},
            ),
            timeout=10,
        )
    )
    assert _per_chunk(chunks) == [1, 1, 1, 1, 1]


def test_chat_tail_goes_out_when_the_choice_stops_early(fake_stub) -> None:
    # The fake engine's reply ends with EOS well before 64 tokens.
    chunks = list(
        fake_stub.StreamChatCompletion(
            chat_request(
                max_tokens=64, return_token_ids=True, stream_options={"stream_interval": 64}
            ),
            timeout=10,
        )
    )
    sizes = _per_chunk(chunks)
    assert len(sizes) == 2 and sizes[0] == 1 and 1 < sizes[1] < 63
    assert chunks[-1].choices[0].finish_reason == "stop" or any(
        c.choices and c.choices[0].finish_reason == "stop" for c in chunks
    )


def test_generate_stream_interval(fake_stub) -> None:
    req = generate_pb2.GenerateRequest(token_ids=[5, 6, 7])
    req.sampling_params.max_tokens = 7
    req.sampling_params.ignore_eos = True
    unary = fake_stub.Generate(req, timeout=10)
    req.stream_options.stream_interval = 3
    chunks = list(fake_stub.StreamGenerate(req, timeout=10))
    sizes = [len(c.choices[0].token_ids) for c in chunks if c.choices]
    assert sizes == [1, 3, 3]
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == list(
        unary.choices[0].token_ids
    )
