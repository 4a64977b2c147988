"""Prompts given as OpenAI's `prompt` / `input` value: a string, a list of
strings, a list of token ids, or a list of id lists (completions and
embeddings read them the same way): each one tokenized or checked, in
order, with the field it came from for errors."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Engine
from tokenwire.server.core.errors import InvalidArgument


@dataclasses.dataclass
class Prompt:
    """One prompt of a completion body: its ids, and its text when it was
    sent as text (echo repeats it as sent)."""

    token_ids: list[int]
    text: str | None
    param: str  # the field it came from, for errors


def _ids(param: str, values: Any, engine: Engine, longest: int, generates: bool) -> list[int]:
    """Token ids from JSON numbers (a struct_pb2 list), checked: whole,
    non-negative, in the vocabulary; the length is checked before the walk."""
    v.prompt_fits(param, len(values), longest, generates)
    out: list[int] = []
    vocab = engine.vocab_size
    for i, x in enumerate(values):
        number = x.number_value
        if not math.isfinite(number) or number < 0 or number != int(number):
            raise InvalidArgument(
                f"{param}[{i}] = {number:g} is not a token id (a non-negative integer)",
                param=param, reason="INVALID_FORMAT",
            )
        if number >= vocab:
            raise InvalidArgument(
                f"{param}[{i}] = {number:g} is not a token id: the vocabulary has {vocab} ids "
                f"(0..{vocab - 1})", param=param, reason="TOKEN_ID_OUT_OF_VOCAB",
            )
        out.append(int(number))
    return out


def _text(param: str, text: str, engine: Engine, add_special: bool, longest: int,
          generates: bool, encode: Callable[[str], list[int]] | None = None) -> list[int]:
    v.text_fits(param, len(text), longest, engine.max_token_chars)
    if not text:
        raise InvalidArgument(f"{param}: the prompt is empty", param=param, reason="PROMPT_EMPTY")
    try:
        ids = (engine.encode(text, add_special_tokens=add_special) if encode is None
               else encode(text))
    except InvalidArgument as exc:
        exc.param = exc.param or param
        raise
    v.prompt_fits(param, len(ids), longest, generates)
    return ids


def prompts_of(value: struct_pb2.Value | None, param: str, engine: Engine, *,
               add_special: bool, most: int, longest: int | None = None,
               generates: bool = True, encode: Callable[[str], list[int]] | None = None,
               ) -> list[Prompt]:
    """The prompts of `value` (the body's field `param`): a string, a list
    of strings, a list of ids, or a list of id lists (at most `most`), each
    at most `longest` ids (default: the context window; with `generates`,
    one less). A text is tokenized by `encode` when given (a pooling
    route's own tokenization), else by the engine's tokenizer."""
    longest = engine.max_model_len if longest is None else longest
    kind = value.WhichOneof("kind") if value is not None else None
    if value is None or kind is None or kind == "null_value":
        raise InvalidArgument(f"{param} is required (a string, a list of strings, a list of "
                              "token ids or a list of id lists)", param=param,
                              reason="FIELD_REQUIRED")
    if kind == "string_value":
        return [Prompt(_text(param, value.string_value, engine, add_special, longest, generates,
                             encode), value.string_value, param)]
    if kind != "list_value":
        raise InvalidArgument(f"{param} must be a string or a list",
                              param=param, reason="INVALID_TYPE")
    items = value.list_value.values
    if not items:
        raise InvalidArgument(f"{param}: the list is empty", param=param, reason="EMPTY_VALUE")
    kinds = {x.WhichOneof("kind") for x in items}
    if kinds == {"number_value"}:
        return [Prompt(_ids(param, items, engine, longest, generates), None, param)]
    if len(kinds) > 1 or kinds.pop() not in ("string_value", "list_value"):
        raise InvalidArgument(
            f"{param}: a list must hold only token ids, only strings or only id lists (not a mix)",
            param=param, reason="INVALID_TYPE",
        )
    if len(items) > most:
        raise InvalidArgument(
            f"{param}: {len(items)} prompts; at most {most} per request "
            "(--max-completion-prompts)", param=param, reason="TOO_MANY_ITEMS",
        )
    prompts = []
    for i, item in enumerate(items):
        at = f"{param}[{i}]"
        if item.HasField("string_value"):
            ids = _text(at, item.string_value, engine, add_special, longest, generates, encode)
            prompts.append(Prompt(ids, item.string_value, at))
            continue
        inner = item.list_value.values
        if any(not x.HasField("number_value") for x in inner):
            raise InvalidArgument(f"{at}: an id list must hold only token ids", param=at,
                                  reason="INVALID_TYPE")
        prompts.append(Prompt(_ids(at, inner, engine, longest, generates), None, at))
    return prompts
