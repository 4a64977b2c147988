"""CreateEmbeddingRequest / ClassifyRequest / PoolRequest (proto) -> a
validated PoolPlan (domain).

The input is read as a completion's prompt is (inference/shared/prompts.py):
a string, a list of strings, a list of ids or a list of id lists; each
input becomes its own PoolRequest, "<id>-<i>" in a batch. An input may fill
the window (nothing is generated); a longer one is cut when the body asks
(truncate_prompt_tokens, truncation_side), else refused. vLLM's chat form
(`messages` instead of `input`: a reward model scoring a conversation) is
one input, the conversation rendered by the chat template."""

from __future__ import annotations

import dataclasses
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.pooling import PoolRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    messages_to_dicts,
    render_options,
)
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.shared.prompts import Prompt, prompts_of
from tokenwire.server.inference.shared.tenant_policy import check_priority

ENCODINGS = ("float", "base64")
SIDES = ("right", "left")
TASKS = ("embed", "classify", "token_embed", "token_classify")  # vLLM's, for /pooling
PREFIXES = {"embed": "embd", "classify": "classify"}  # the response id's; /pooling: "pool"


@dataclasses.dataclass
class PoolPlan:
    id: str
    model: str
    requests: list[PoolRequest]  # one per input, in input order
    encoding: str = "float"  # embeddings: "float" or "base64"
    param: str = "input"  # the field the inputs came from ("messages": a conversation)
    numbers: int = 0  # /pooling: the numbers its token-level rows hold (0: not token-level)


def _embedding_options(req: Any) -> tuple[str, int | None]:
    encoding = req.encoding_format or "float"
    if encoding not in ENCODINGS:
        raise InvalidArgument(f"encoding_format must be one of {list(ENCODINGS)}, got "
                              f"{encoding!r}", param="encoding_format",
                              reason="VALUE_NOT_ALLOWED")
    if req.HasField("dimensions") and req.dimensions < 1:
        raise InvalidArgument("dimensions must be at least 1", param="dimensions",
                              reason="VALUE_OUT_OF_RANGE")
    return encoding, req.dimensions if req.HasField("dimensions") else None


def kept(req: Any, engine: Engine) -> tuple[int | None, str]:
    side = req.truncation_side or "right"
    if side not in SIDES:
        raise InvalidArgument(f"truncation_side must be one of {list(SIDES)}, got {side!r}",
                              param="truncation_side", reason="VALUE_NOT_ALLOWED")
    if not req.HasField("truncate_prompt_tokens"):
        return None, side
    keep = req.truncate_prompt_tokens
    if keep == -1:
        return engine.max_model_len, side
    if not 1 <= keep <= engine.max_model_len:
        raise InvalidArgument(
            f"truncate_prompt_tokens must be -1 or 1..{engine.max_model_len} (the context "
            f"window), got {keep}", param="truncate_prompt_tokens", reason="VALUE_OUT_OF_RANGE")
    return keep, side


def _conversation(req: Any, engine: Engine, settings: ServerSettings, longest: int | None
                  ) -> Prompt:
    """vLLM's chat form of a pooling body: the messages rendered with the
    chat template (no generation prompt unless asked; special tokens on top
    only when asked), one prompt; its ids are cut like an id list's."""
    if req.HasField("input"):
        raise InvalidArgument("give input or messages, not both", param="messages",
                              reason="FIELDS_CONFLICT")
    param, chars = rendered_chars(req)
    v.text_fits(param, chars, longest or engine.max_model_len, engine.max_token_chars)
    check_render_flags(req)
    options = render_options(req, trust_template=settings.trust_request_chat_template)
    add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else False
    options = dataclasses.replace(
        options, add_generation_prompt=add_gen and not options.continue_final_message)
    ids = engine.render_chat(messages_to_dicts(req.messages), options)
    if req.HasField("add_special_tokens") and req.add_special_tokens:
        ids = engine.encode("", add_special_tokens=True) + ids
    return Prompt(ids, None, "messages")


def tokenize_cut(req: Any) -> tuple[int | None, str | None]:
    """The body's truncate_prompt_tokens and truncation_side as vLLM's
    tokenization takes them (None: not given; checked by `kept`)."""
    truncate = req.truncate_prompt_tokens if req.HasField("truncate_prompt_tokens") else None
    return truncate, req.truncation_side or None


def _pooling_task(req: Any) -> str:
    if req.task and req.task not in TASKS:
        raise InvalidArgument(f"task must be one of {list(TASKS)} (or unset: the model's "
                              f"default), got {req.task!r}", param="task",
                              reason="VALUE_NOT_ALLOWED")
    return str(req.task)


def build_pool_plan(req: Any, engine: Engine, settings: ServerSettings, *, task: str | None,
                    served_model: str, caller: Caller) -> PoolPlan:
    """The plan of a CreateEmbeddingRequest (`task` "embed"), a
    ClassifyRequest ("classify") or a PoolRequest (None: its own `task`)."""
    model = check_model(req.model, served_model, engine.lora_names())
    prefix = PREFIXES.get(task or "", "pool")
    if task is None:
        task = _pooling_task(req)
    fields = req.DESCRIPTOR.fields_by_name
    encoding, dimensions = (_embedding_options(req) if "encoding_format" in fields
                            else ("float", None))
    keep, side = kept(req, engine)
    add_special = req.add_special_tokens if req.HasField("add_special_tokens") else True
    # With truncation, an input may be longer than the window before it is
    # cut (as vLLM's), up to 4 windows: no caller makes the server tokenize
    # unbounded text.
    # A text is tokenized as vLLM's pooling routes tokenize it (with
    # truncation: the tokenizer's own, special tokens kept; an id list is cut).
    truncate, given_side = tokenize_cut(req)
    longest = None if keep is None else 4 * engine.max_model_len
    if req.messages:
        prompts = [_conversation(req, engine, settings, longest)]
    else:
        prompts = prompts_of(req.input if req.HasField("input") else None, "input", engine,
                             add_special=add_special, most=settings.max_completion_prompts,
                             longest=longest, generates=False,
                             encode=lambda text: engine.pooling_tokens(
                                 text, add_special_tokens=add_special, truncate=truncate,
                                 side=given_side))
    response_id = new_request_id(prefix, req.request_id, caller.request_id)
    priority = check_priority(req.priority, settings, caller)
    lora = lora_of(model, served_model)
    requests = []
    for i, prompt in enumerate(prompts):
        ids = prompt.token_ids
        if keep is not None and len(ids) > keep:
            ids = ids[:keep] if side == "right" else ids[len(ids) - keep:]
        v.prompt_fits(prompt.param, len(ids), engine.max_model_len, generates=False)
        requests.append(PoolRequest(
            request_id=response_id if len(prompts) == 1 else f"{response_id}-{i}",
            prompt_token_ids=ids, task=task, dimensions=dimensions,
            only_pooling_task=prefix == "pool",
            use_activation=req.use_activation if req.HasField("use_activation") else None,
            priority=priority, lora=lora, tenant=caller.tenant,
        ))
    return PoolPlan(response_id, model, requests, encoding,
                    "messages" if req.messages else "input")
