"""The client's method table for tools/gen_client.py: each RPC's Python
name, parameters, request and result (Method), per service (Service), and
the RPCs the client leaves out with the reason (not_exposed). A new RPC
fails gen_client until it is in the table or not_exposed."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Method:
    """One RPC method. `params` None: the request as a message, an
    OpenAI-style dict and/or keyword fields (build); otherwise the Python
    parameters before `timeout`, and `request` the expression building the
    request ({In}: its type). `result` wraps the response ({}); `returns` is
    then its annotation."""

    rpc: str
    name: str
    doc: str
    params: str | None = None
    request: str | None = None
    result: str = "{}"
    returns: str | None = None
    operator: bool = False  # sent with the admin key when the client has one


@dataclasses.dataclass(frozen=True)
class Service:
    proto_module: str  # tokenwire.v1.<module>
    out: str  # the generated module in tokenwire.client
    name: str
    mixin: str  # the sync mixin's name; the async one is Async<mixin>
    doc: str
    call: str  # the I/O method a unary RPC goes through
    metadata: bool  # the methods take extra `metadata=`
    methods: tuple[Method, ...]
    not_exposed: dict[str, str]  # RPC -> why the client has no generated method


STATE = "control_pb2.ControlState"

SERVICES = (
    Service(
        "service_pb2", "_service_methods", "TokenwireService", "ServiceMethods",
        "TokenwireService's unary and server-streaming RPCs, for Client and AsyncClient.",
        call="_unary", metadata=True,
        methods=(
            Method("CreateChatCompletion", "chat", "CreateChatCompletion."),
            Method("StreamChatCompletion", "stream_chat",
                   "StreamChatCompletion: chunks with text and token-id deltas."),
            Method("CreateCompletion", "complete", "CreateCompletion: a prompt, or a batch."),
            Method("StreamCompletion", "stream_complete", "StreamCompletion."),
            Method("Generate", "generate", "Generate from token ids."),
            Method("StreamGenerate", "stream_generate", "StreamGenerate."),
            Method("CreateEmbedding", "embed", "Embed texts, id lists or a conversation."),
            Method("Classify", "classify", "Classify texts, id lists or a conversation."),
            Method("Pool", "pool", "Pool texts, id lists or a conversation for a task."),
            Method("CohereEmbed", "cohere_embed", "Cohere's embed v2."),
            Method("Score", "score", "Score documents against queries."),
            Method("Rerank", "rerank", "Order documents by relevance to a query."),
            Method("Tokenize", "tokenize", "Tokenize a prompt or chat messages."),
            Method("Detokenize", "detokenize", "Detokenize ids: their text.",
                   params='tokens: Sequence[int], *, model: str = ""', returns="str",
                   request="{In}(tokens=list(tokens), model=model)", result="str({}.prompt)"),
            Method("ListModels", "list_models", "List the served models.", params=""),
            Method("GetHealth", "health", "Serving status.", params=""),
            Method("GetStats", "stats", "Live counters (the operator's: sent with the admin key "
                   "when the client has one).", params="", operator=True),
        ),
        not_exposed={
            "Session": "a bidirectional stream: Client.session() (session.py)",
            **dict.fromkeys(("RenderCompletion", "RenderChatCompletion", "RenderMessage",
                             "RenderResponse"), "vLLM's /render: not in the client's surface"),
            "SglangGenerate": "SGLang's /generate shape for trainers (docs/trainers.md); "
                              "generate() is the client's",
            "FinishSession": "SkyRL's /finish_session, an acknowledgement (docs/trainers.md)",
            "GetVersion": "vLLM's GET /version, for REST probes (docs/gateway.md)",
            "GetServerLoad": "vLLM's GET /load, for REST load balancers; stats() has more",
            "CreateMessage": "Anthropic's Messages API for agents (the anthropic SDK is its "
                             "client: docs/agents.md)",
            "CountMessageTokens": "Anthropic's /v1/messages/count_tokens (the anthropic SDK)",
            "StreamMessage": "the Messages API's typed events (the anthropic SDK streams them "
                             "over REST: docs/agents.md)",
            "CreateResponse": "OpenAI's Responses API for agents (the openai SDK is its client: "
                              "docs/agents.md)",
            "StreamResponse": "the Responses API's typed events (the openai SDK streams them "
                              "over REST: docs/agents.md)",
        },
    ),
    Service(
        "control_pb2", "_control_methods", "ControlService", "ControlMethods",
        "ControlService's RPCs (the admin key, no retries), for the control clients.",
        call="_call", metadata=False,
        methods=(
            Method("Pause", "pause",
                   'Pause generation: "abort", "wait" or "keep" in-flight requests.',
                   params='mode: str = "abort", *, clear_cache: bool = True',
                   request="{In}(mode=mode, clear_cache=clear_cache)",
                   result="{}.state", returns=STATE),
            Method("Resume", "resume",
                   "Resume generation. After a failed weight load the server refuses "
                   "(FAILED_PRECONDITION, WEIGHTS_FAILED_LOAD) unless `force`: the weights may be "
                   'mixed (their tokens carry the "+failed-load" version).',
                   params="*, force: bool = False",
                   # force is optional: unset unless asked
                   request="{In}(force=True) if force else {In}()",
                   result="{}.state", returns=STATE),
            Method("GetControlState", "state",
                   "The control state: paused, weight version and folder, a failed load.",
                   params="", result="{}.state", returns=STATE),
            Method("UpdateWeightsFromPath", "update_weights_from_path",
                   "Reload weights in place from a checkpoint folder on the server.",
                   params='path: str, version: str = "", *, pause_mode: str = "keep", '
                          'clear_cache: bool = True, expected_fingerprint: str = ""',
                   request="{In}(path=path, weight_version=version, pause_mode=pause_mode, "
                           "clear_cache=clear_cache, expected_fingerprint=expected_fingerprint)"),
            Method("SetWeightVersion", "set_weight_version", "Name the weights in use.",
                   params="version: str", request="{In}(new_version=version)", returns="None"),
            Method("ResetPrefixCache", "reset_prefix_cache", "Reset the prefix cache.",
                   params="*, reset_running_requests: bool = True",
                   request="{In}(reset_running_requests=reset_running_requests)",
                   result="bool({}.success)", returns="bool"),
            Method("ResetMultimodalCache", "reset_mm_cache", "Drop the multimodal processor "
                   "cache.", params="", returns="None"),
            Method("ResetEncoderCache", "reset_encoder_cache", "Drop the encoder cache.",
                   params="", returns="None"),
            Method("CheckWeights", "check_weights",
                   "vLLM's weight checker: checksum, compare (with a baseline) or reset."),
            Method("AbortRequests", "abort_requests",
                   "Abort these requests (none given: every request in flight).",
                   params="request_ids: Sequence[str] = ()",
                   request="{In}(request_ids=list(request_ids))",
                   result="int({}.aborted)", returns="int"),
            Method("LoadLoraAdapter", "load_lora_adapter",
                   "Load a LoRA adapter; the adapters loaded after it.",
                   params="name: str, path: str, *, load_inplace: bool = False",
                   request="{In}(lora_name=name, lora_path=path, load_inplace=load_inplace)",
                   result="list({}.lora_adapters)", returns="list[str]"),
            Method("UnloadLoraAdapter", "unload_lora_adapter",
                   "Unload a LoRA adapter; the adapters left.", params="name: str",
                   request="{In}(lora_name=name)",
                   result="list({}.lora_adapters)", returns="list[str]"),
            Method("Sleep", "sleep", "Offload weights / KV cache (GPU only).",
                   params="level: int = 1", request="{In}(level=level)", returns="None"),
            Method("WakeUp", "wake_up", "Wake up; whether the engine is awake.",
                   params="tags: Sequence[str] = ()", request="{In}(tags=list(tags))",
                   result='{}.status == "awake"', returns="bool"),
            Method("InitWeightTransfer", "init_weight_transfer", "Set up a weight transfer.",
                   params="init_info: Mapping[str, Any]",
                   request="{In}(init_info=struct(init_info))", returns="None"),
            Method("StartWeightUpdate", "start_weight_update", "Begin a weight update.",
                   params="", returns="None"),
            Method("UpdateWeights", "update_weights", "Send one batch of weights.",
                   params="update_info: Mapping[str, Any]",
                   request="{In}(update_info=struct(update_info))", returns="None"),
            Method("FinishWeightUpdate", "finish_weight_update",
                   "End a weight update (under `version`, when given).",
                   params='version: str = ""', request="{In}(weight_version=version)",
                   returns="None"),
            Method("AnnounceWeightVersion", "announce_weight_version",
                   "Announce the version an update is about to load (empty: withdraw): until "
                   "committed here, requests with max_weight_lag 0 are refused here.",
                   params="version: str", request="{In}(weight_version=version)",
                   result="{}.state", returns=STATE),
        ),
        not_exposed={
            "IsPaused": "state() answers it",
            "GetWeightInfo": "state() answers it",
            "IsSleeping": "not in the client's surface",
            "UpdateWeightsFromDisk": "update_weights_from_path is the client's",
            "GetWorldSize": "vLLM's route for trainers (docs/trainers.md)",
            "GetServerInfo": "vLLM's route for trainers (docs/trainers.md)",
            "CollectiveRpc": "vLLM's route for trainers' worker extensions (docs/trainers.md)",
            "InitBroadcaster":
                "prime-rl's route, passed to its worker extension (docs/trainers.md)",
            "UnsupportedWeightSync": "routes that answer FAILED_PRECONDITION (docs/trainers.md)",
        },
    ),
)
