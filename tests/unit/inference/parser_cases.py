"""What the tests of vLLM's parsers share (test_vllm_parsers.py,
test_reasoning_and_tool_flags.py): the demo model, a tool and a
Hermes-format reply with a <think> thought and a call; the demo model's
tokenizer (`demo_tokenizer`, skipped when the model is not built)."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

MODEL = pathlib.Path(__file__).resolve().parents[3] / ".models" / "SmolLM2-135M-Instruct"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
HERMES = ('<think>Paris, then.</think>Sure.<tool_call>\n{"name": "get_weather", '
          '"arguments": {"city": "Paris"}}\n</tool_call>')


def demo_tokenizer() -> Any:
    if not (MODEL / "tokenizer.json").exists():
        pytest.skip("the demo model is not built (make model)")
    from vllm.tokenizers import get_tokenizer

    return get_tokenizer(str(MODEL))
