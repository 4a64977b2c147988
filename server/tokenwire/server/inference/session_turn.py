"""A Session request's domain steps around its kind's plan and run
(api/session.py runs the stream): its continuation resolved where the
request's own rendering would run (`continuation`), the earlier turn's
cache salt and images carried into the new plan (`carry_over`), and the
finished turn stored for the next one (`keep`)."""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import keeping_tensors
from tokenwire.server.inference.continuation import (
    ResolvedContinuation,
    chosen_turn,
    continue_turn,
    continue_turn_with_media,
    media_messages,
)
from tokenwire.server.inference.continuation_store import StoredTurn
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import AnyKind
from tokenwire.server.inference.offload import OFFLOAD_CHARS
from tokenwire.server.inference.shared.messages import has_request_template
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.turns import PLACEHOLDER, placed_error
from tokenwire.v1 import session_pb2


async def continuation(plane: DataPlane, c: session_pb2.Continuation, kind: AnyKind, req: Any,
                       *, session_id: str, request_id: str, running: Container[str],
                       tenant: str | None) -> ResolvedContinuation:
    """The continuation's prompt: the stored turn looked up; the next
    messages rendered where the request's own rendering would run
    (inference/offload.py: the template thread, within its time bound, for
    a request's own template; the prompt thread when large; both with their
    queue limits; inline when small)."""
    engine = plane.engine
    chars = rendered_chars(c)[1] + kind.continuation_chars(req)  # counted, not converted
    if c.messages:  # rendered: the cheap length limit first, as for a chat request
        v.text_fits("continuation.messages", chars, engine.max_model_len, engine.max_token_chars)
    completion, turn = chosen_turn(c, session_id=session_id, request_id=request_id,
                                   running=running, store=plane.store)
    trust = plane.settings.trust_request_chat_template
    messages = media_messages(c)
    if messages is not None:  # next messages with images: the engine renders them
        options = kind.continuation_options(req, trust_template=trust)
        template = await plane.offload.run(lambda: plane.turns.get(options),
                                           own_template=has_request_template(req), heavy=False)
        try:
            with keeping_tensors():  # stored with the turn for the next one
                rendered = await engine.render_chat_media([*PLACEHOLDER, *messages], options,
                                                          tenant=tenant)
        except InvalidArgument as err:
            raise placed_error(err, "continuation.") from err
        return continue_turn_with_media(turn, completion, template, rendered, engine=engine)

    def resolve() -> ResolvedContinuation:
        options = kind.continuation_options(req, trust_template=trust)
        return continue_turn(c, turn, completion, options=options, turns=plane.turns,
                             engine=engine)

    return await plane.offload.run(
        resolve, own_template=bool(c.messages) and has_request_template(req),
        heavy=chars > OFFLOAD_CHARS)


def carry_over(plan: Any, cont: ResolvedContinuation) -> None:
    """The earlier turn's cache salt (unless the request names its own) and
    images (under the longer prompt) into `plan`'s engine request."""
    request = plan.request
    if request.cache_salt is None:
        request.cache_salt = cont.cache_salt
    if cont.media is not None:
        if request.multimodal is not None:
            raise InvalidArgument(
                "a continuation of a turn with images keeps its images: give no "
                "content_parts or features with it", param="continuation",
                reason="FIELDS_CONFLICT")
        request.multimodal = cont.media.extended(list(request.prompt_token_ids))


def keep(plane: DataPlane, plan: Any, outcome: RunOutcome, *, session_id: str,
         request_id: str) -> bool:
    """Store the finished turn for a continuation; whether it was stored. (A
    completion batch is not one turn: not stored. A turn with images is
    stored with them, as the engine prepared them.)"""
    media = plan.request.multimodal
    if not outcome.prompt_ids or (media is not None
                                  and list(outcome.prompt_ids) != media.prompt_token_ids):
        return False
    turn = StoredTurn.of(outcome.prompt_ids, outcome.completions, plan.request.cache_salt, media)
    return plane.store.put(session_id, request_id, turn)
