"""Tokenizer operations on a Hugging Face tokenizer: chat rendering, exact
token bytes, cached single-token text. No vLLM import: the engine adapter
hands its tokenizer in."""

from __future__ import annotations

import functools
import re
from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import RenderOptions

_BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode table (byte-level BPE)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


class TokenizerOps:
    def __init__(self, tokenizer: Any):
        self._tok = tokenizer
        self.size = len(tokenizer)
        self._special_ids = set(getattr(tokenizer, "all_special_ids", []) or [])
        self._text_cache: dict[int, str] = {}
        self._bytes_cache: dict[int, bytes] = {}

    @property
    def raw(self) -> Any:
        return self._tok

    def max_token_chars(self) -> int:
        """The longest vocabulary entry, in the tokenizer's own spelling
        (byte-level BPE spells each byte as one character, SentencePiece a
        space as one): an upper bound on the characters one token covers."""
        vocab = self._tok.get_vocab()
        return max(8, max((len(piece) for piece in vocab), default=1))

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._tok.decode(token_ids, skip_special_tokens=skip_special_tokens))

    def token_text(self, token_id: int) -> str:
        text = self._text_cache.get(token_id)
        if text is None:
            text = self.decode([token_id])
            self._text_cache[token_id] = text
        return text

    def token_bytes(self, token_id: int) -> bytes:
        data = self._bytes_cache.get(token_id)
        if data is None:
            data = self._exact_bytes(token_id)
            self._bytes_cache[token_id] = data
        return data

    def _exact_bytes(self, token_id: int) -> bytes:
        if token_id in self._special_ids:
            return self.token_text(token_id).encode()
        piece = self._tok.convert_ids_to_tokens(token_id)
        if isinstance(piece, str):
            m = _BYTE_TOKEN.match(piece)
            if m:  # SentencePiece byte fallback
                return bytes([int(m.group(1), 16)])
            table = _byte_decoder()
            if piece and all(ch in table for ch in piece):  # byte-level BPE
                return bytes(table[ch] for ch in piece)
            if "▁" in piece:  # SentencePiece word boundary
                return piece.replace("▁", " ").encode()
        return self.token_text(token_id).encode()

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        kwargs: dict[str, Any] = dict(options.template_kwargs)
        if options.tools:
            kwargs["tools"] = options.tools
        if options.chat_template:
            kwargs["chat_template"] = options.chat_template
        try:
            text = self._tok.apply_chat_template(
                messages,
                tokenize=False,
                add_generation_prompt=options.add_generation_prompt,
                continue_final_message=options.continue_final_message,
                **kwargs,
            )
        except Exception as exc:  # template errors are the request's fault
            raise errors.InvalidArgument(
                f"the chat template could not render these messages: {exc}",
                param="messages",
                reason="TEMPLATE_ERROR",
            ) from exc
        if not isinstance(text, str):
            raise errors.Internal("chat template did not return text", reason="TEMPLATE_ERROR")
        if options.max_text_chars is not None and len(text) > options.max_text_chars:
            raise errors.InvalidArgument(
                f"the chat template rendered {len(text)} characters, more than can fit the "
                f"context window ({options.max_text_chars})", param="messages",
                reason="PROMPT_TOO_LONG",
            )
        # The template already holds any BOS it wants: add no special tokens.
        return self.encode(text, add_special_tokens=False)
