"""Tokenizer operations on a Hugging Face tokenizer: chat rendering, exact
token bytes, cached single-token text. No vLLM import: the engine adapter
hands its tokenizer in."""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import RenderOptions

if TYPE_CHECKING:
    from tokenwire.server.core.settings import ServerSettings

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


def load_chat_template(given: str) -> str | None:
    """--chat-template as vLLM takes it: a file's text, else the template
    itself (text holding Jinja's "{", "}" or a line break); ValueError for
    a name that is neither. Empty: None (the model's own template)."""
    if not given:
        return None
    path = pathlib.Path(given)
    try:
        return path.read_text()
    except OSError as err:
        if any(c in given for c in "{}\n"):
            return given
        raise ValueError(f"--chat-template {given!r}: no such file ({err.strerror}), and not a "
                         "template (give a file, or the Jinja text itself)") from None


@dataclasses.dataclass(frozen=True)
class ChatTemplateDefaults:
    """The server's chat-template flags (vLLM's): --chat-template,
    --default-chat-template-kwargs (under each request's
    chat_template_kwargs) and --chat-template-content-format."""

    template: str | None = None
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    content_format: str = "auto"  # string: text content; openai: parts; auto: detected

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> ChatTemplateDefaults:
        """ValueError naming the flag at fault."""
        kwargs: Any = settings.default_chat_template_kwargs or {}
        if isinstance(kwargs, str):
            try:
                kwargs = json.loads(kwargs)
            except json.JSONDecodeError as err:
                raise ValueError(f"--default-chat-template-kwargs: not JSON ({err})") from None
        if not isinstance(kwargs, dict):
            raise ValueError("--default-chat-template-kwargs: give a JSON object, such as "
                             '\'{"enable_thinking": false}\'')
        return cls(load_chat_template(settings.chat_template), kwargs,
                   settings.chat_template_content_format)


def _as_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """--chat-template-content-format openai: each text content as one
    content part, as vLLM hands such templates their messages."""
    return [{**m, "content": [{"type": "text", "text": m["content"]}]}
            if isinstance(m.get("content"), str) else m for m in messages]


class TokenizerOps:
    def __init__(self, tokenizer: Any, defaults: ChatTemplateDefaults | None = None, *,
                 detect_format: Callable[[str | None, Any], str] | None = None):
        """`detect_format(template, tools)`: the content format of a template
        (vLLM's detection) for --chat-template-content-format auto; without
        it auto renders text content."""
        self._tok = tokenizer
        self._defaults = defaults or ChatTemplateDefaults()
        self._detect = detect_format
        self._detected: dict[tuple[str | None, bool], str] = {}
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

    def content_format(self, template: str | None, tools: Any) -> str:
        """"string" or "openai": the flag's, or for auto the template's
        (detected once per template and tools-or-not)."""
        given = self._defaults.content_format
        if given != "auto" or self._detect is None:
            return "openai" if given == "openai" else "string"
        key = (template, bool(tools))
        found = self._detected.get(key)
        if found is None:
            found = self._detected[key] = self._detect(template, tools)
        return found

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        defaults = self._defaults
        # The server's --default-chat-template-kwargs under the request's own.
        kwargs: dict[str, Any] = {**defaults.kwargs, **options.template_kwargs}
        if options.tools:
            kwargs["tools"] = options.tools
        template = options.chat_template or defaults.template  # the request's (trusted) first
        if template:
            kwargs["chat_template"] = template
        if self.content_format(template, options.tools) == "openai":
            messages = _as_parts(messages)
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
