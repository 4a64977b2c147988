"""reasoning_content split from <think>...</think> text (with --reasoning-parser),
through the fake engine's parser double and the servicer."""

from __future__ import annotations

from tests.rpc import chat_request, stream_ids
from tokenwire.server.core.parsing import ParserConfig, ParseSpec
from tokenwire.server.engine.fake.parsers import FakeChatParsers, split_reasoning

THINK = [{"role": "user", "content": "Think first. Then greet me."}]


def test_split_reasoning() -> None:
    assert split_reasoning("<think>hmm</think>\n\nHi") == ("hmm", "Hi")
    assert split_reasoning("Hi <think>x</think>") == (None, "Hi <think>x</think>")
    assert split_reasoning("<think>cut off") == ("cut off", "")


def _stream(text: str, size: int) -> tuple[str, str]:
    rp = FakeChatParsers(ParserConfig(reasoning_parser="qwen3")).for_request(ParseSpec())
    assert rp is not None
    parser = rp.stream_parser([])
    thought, content = "", ""
    pieces = [text[i : i + size] for i in range(0, len(text), size)]
    for k, piece in enumerate(pieces):
        d = parser.delta(piece, [], finished=k == len(pieces) - 1)
        if d is not None:
            thought, content = thought + (d.reasoning or ""), content + (d.content or "")
    return thought, content


def test_stream_any_split() -> None:
    text = "<think>The user wants a greeting.</think>\n\nHello!"
    for size in (1, 2, 5, 100):
        assert _stream(text, size) == ("The user wants a greeting.", "Hello!"), size
    assert _stream("<thank you", 3) == ("", "<thank you")


def test_unary_and_stream_reasoning_content(fake_stub) -> None:
    req = chat_request(messages=THINK, return_token_ids=True)
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    m = resp.choices[0].message
    assert (m.reasoning_content, m.content) == ("The user wants a greeting.", "Hello!")
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    thought = "".join(ch.delta.reasoning_content for c in chunks for ch in c.choices)
    content = "".join(ch.delta.content for c in chunks for ch in c.choices)
    assert (thought, content) == (m.reasoning_content, m.content)
    assert stream_ids(chunks)[0] == list(resp.choices[0].token_ids)


def test_reasoning_is_printed_under_both_names(fake_stub) -> None:
    """vLLM 0.32 prints `reasoning`; Dynamo and older vLLM `reasoning_content`:
    both carry the same text, unary and streamed."""
    req = chat_request(messages=THINK)
    m = fake_stub.CreateChatCompletion(req, timeout=10).choices[0].message
    assert m.reasoning == m.reasoning_content == "The user wants a greeting."
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert all(ch.delta.reasoning == ch.delta.reasoning_content
               for c in chunks for ch in c.choices)
    assert "".join(ch.delta.reasoning for c in chunks for ch in c.choices) == m.reasoning


def test_an_earlier_turns_reasoning_reaches_the_template_as_vllm_passes_it() -> None:
    """vLLM's `reasoning` (or the older `reasoning_content`) of an assistant
    turn reaches the template under both names; another role's is dropped."""
    from google.protobuf import json_format

    from tokenwire.server.inference.shared.messages import messages_to_dicts
    from tokenwire.v1 import chat_pb2

    def rendered(msg: dict) -> dict:
        req = json_format.ParseDict({"messages": [msg]}, chat_pb2.CreateChatCompletionRequest())
        return messages_to_dicts(req.messages)[0]

    for key in ("reasoning", "reasoning_content"):
        d = rendered({"role": "assistant", "content": "Hi", key: "thought"})
        assert (d["reasoning"], d["reasoning_content"]) == ("thought", "thought")
        assert "reasoning" not in rendered({"role": "user", "content": "Hi", key: "x"})
    both = rendered({"role": "assistant", "content": "Hi", "reasoning": "new",
                     "reasoning_content": "old"})
    assert both["reasoning"] == both["reasoning_content"] == "new"
