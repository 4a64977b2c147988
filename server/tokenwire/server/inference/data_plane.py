"""The data plane: what every inference call shares, built once at start-up
(app.build_data_plane) for every front end (the gRPC servicers, the Session
stream): the engine, settings, serving state, continuation store, turn
templates, prefiller, tenancy, the offload threads, the served model's name
and the worker id; plus tokenize / detokenize, which are not request kinds.

What a request does is its front's (inference/fronts.py: one object per
front, each in its own package; a generating kind's shared steps in
inference/kind_base.py). Front ends go through the fronts:

    plan = await CHAT.plan(plane, request, caller=..., stream=True)
    outcome = RunOutcome()
    async for chunk in CHAT.stream(plane, plan, outcome): ...
    CHAT.after(plane, plan, outcome)   # speculative prefill of the next turn

A kind's stream returns its own async generator (no wrapping layer), so the
per-token path is exactly chat/service.py's stream_chat (ChatStreamBuilder),
completion's stream_completion, generate's stream_generate.
"""

from __future__ import annotations

from tokenwire.server.core.domain import Engine
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.continuation_store import ContinuationStore
from tokenwire.server.inference.offload import Offload
from tokenwire.server.inference.prefill import Prefiller
from tokenwire.server.inference.shared.identity import ServedModel
from tokenwire.server.inference.tokenize_service import detokenize, tokenize_call
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.server.security.tenancy import Tenancy
from tokenwire.v1 import tokenize_pb2


class DataPlane:
    def __init__(
        self,
        engine: Engine,
        settings: ServerSettings,
        state: ServingState,
        *,
        store: ContinuationStore,
        turns: TurnTemplates,
        prefiller: Prefiller,
        tenancy: Tenancy,
    ):
        self.engine = engine
        self.settings = settings
        self.state = state
        self.store = store
        self.turns = turns
        self.prefiller = prefiller
        self.tenancy = tenancy
        self.offload = Offload(settings.request_template_timeout_seconds,
                               settings.max_offload_queue)
        # Reported under vLLM's first served name; every name accepted.
        self.served_model = ServedModel(settings.resolved_served_name(),
                                        settings.accepted_names())
        self.worker_id = settings.resolved_worker_id()

    # -- tokenizer -------------------------------------------------------
    async def tokenize(self, req: tokenize_pb2.TokenizeRequest) -> tokenize_pb2.TokenizeResponse:
        return await tokenize_call(
            req, self.engine, self.turns, self.offload, served_model=self.served_model,
            trust_template=self.settings.trust_request_chat_template,
        )

    def detokenize(self, req: tokenize_pb2.DetokenizeRequest) -> tokenize_pb2.DetokenizeResponse:
        return detokenize(req, self.engine, served_model=self.served_model)
