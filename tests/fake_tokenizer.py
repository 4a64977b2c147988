"""A Hugging Face tokenizer folder that tokenizes as the fake engine does
(engine/fake/engine.py: id = byte + 3; 0 <unk>, 1 <|im_start|>, 2
<|im_end|> = EOS; its ChatML template), built at test time, so a router
that tokenizes itself (smg) can front fake-engine replicas."""

from __future__ import annotations

import json
import pathlib

CHATML = (
    "{% if tools %}<|im_start|>system\ntools: {% for t in tools %}{{ t['function']['name'] }}"
    "{% if not loop.last %},{% endif %}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def build(folder: pathlib.Path, max_model_len: int = 512) -> pathlib.Path:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    vocab.update({c: b + 3 for b, c in _byte_chars().items()})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<unk>", "<|im_start|>", "<|im_end|>")])
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHATML,
        "eos_token": "<|im_end|>", "unk_token": "<unk>", "model_max_length": max_model_len,
        "add_bos_token": False, "add_eos_token": False,
    }))
    (folder / "chat_template.jinja").write_text(CHATML)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 300,
        "eos_token_id": 2, "bos_token_id": 1, "max_position_embeddings": max_model_len,
    }))
    return folder
