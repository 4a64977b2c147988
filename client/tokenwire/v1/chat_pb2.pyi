from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from tokenwire.v1 import multimodal_pb2 as _multimodal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FunctionDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: _struct_pb2.Struct
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., strict: _Optional[bool] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("type", "function")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    type: str
    function: FunctionDefinition
    def __init__(self, type: _Optional[str] = ..., function: _Optional[_Union[FunctionDefinition, _Mapping]] = ...) -> None: ...

class FunctionCall(_message.Message):
    __slots__ = ("name", "arguments")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    arguments: str
    def __init__(self, name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("id", "type", "function", "index")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    function: FunctionCall
    index: int
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., function: _Optional[_Union[FunctionCall, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", "parts", "reasoning")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: _struct_pb2.Value
    name: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    tool_call_id: str
    reasoning_content: str
    parts: _containers.RepeatedCompositeFieldContainer[_multimodal_pb2.ContentPart]
    reasoning: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., name: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., tool_call_id: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[_multimodal_pb2.ContentPart, _Mapping]]] = ..., reasoning: _Optional[str] = ...) -> None: ...

class StreamOptions(_message.Message):
    __slots__ = ("include_usage", "continuous_usage_stats", "stream_interval")
    INCLUDE_USAGE_FIELD_NUMBER: _ClassVar[int]
    CONTINUOUS_USAGE_STATS_FIELD_NUMBER: _ClassVar[int]
    STREAM_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    include_usage: bool
    continuous_usage_stats: bool
    stream_interval: int
    def __init__(self, include_usage: _Optional[bool] = ..., continuous_usage_stats: _Optional[bool] = ..., stream_interval: _Optional[int] = ...) -> None: ...

class JsonSchemaFormat(_message.Message):
    __slots__ = ("name", "description", "schema", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    schema: _struct_pb2.Struct
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., strict: _Optional[bool] = ...) -> None: ...

class ResponseFormat(_message.Message):
    __slots__ = ("type", "json_schema")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    type: str
    json_schema: JsonSchemaFormat
    def __init__(self, type: _Optional[str] = ..., json_schema: _Optional[_Union[JsonSchemaFormat, _Mapping]] = ...) -> None: ...

class AgentHints(_message.Message):
    __slots__ = ("priority", "speculative_prefill", "osl", "strict_priority")
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PREFILL_FIELD_NUMBER: _ClassVar[int]
    OSL_FIELD_NUMBER: _ClassVar[int]
    STRICT_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    priority: int
    speculative_prefill: bool
    osl: int
    strict_priority: int
    def __init__(self, priority: _Optional[int] = ..., speculative_prefill: _Optional[bool] = ..., osl: _Optional[int] = ..., strict_priority: _Optional[int] = ...) -> None: ...

class NvExtRequest(_message.Message):
    __slots__ = ("token_data", "extra_fields", "cache_salt", "greed_sampling", "use_raw_prompt", "ignore_eos", "top_k", "repetition_penalty", "max_thinking_tokens", "agent_hints", "annotations", "dp_rank", "exact_weight_version", "max_weight_lag", "salt_cache_by_version", "content_parts", "features", "mm_features")
    TOKEN_DATA_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELDS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    GREED_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    USE_RAW_PROMPT_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MAX_THINKING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    AGENT_HINTS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    DP_RANK_FIELD_NUMBER: _ClassVar[int]
    EXACT_WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_WEIGHT_LAG_FIELD_NUMBER: _ClassVar[int]
    SALT_CACHE_BY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PARTS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    MM_FEATURES_FIELD_NUMBER: _ClassVar[int]
    token_data: _containers.RepeatedScalarFieldContainer[int]
    extra_fields: _containers.RepeatedScalarFieldContainer[str]
    cache_salt: str
    greed_sampling: bool
    use_raw_prompt: bool
    ignore_eos: bool
    top_k: int
    repetition_penalty: float
    max_thinking_tokens: int
    agent_hints: AgentHints
    annotations: _containers.RepeatedScalarFieldContainer[str]
    dp_rank: int
    exact_weight_version: str
    max_weight_lag: int
    salt_cache_by_version: bool
    content_parts: _containers.RepeatedCompositeFieldContainer[_multimodal_pb2.TokenMediaPart]
    features: _struct_pb2.Struct
    mm_features: _multimodal_pb2.MultiModalFeatures
    def __init__(self, token_data: _Optional[_Iterable[int]] = ..., extra_fields: _Optional[_Iterable[str]] = ..., cache_salt: _Optional[str] = ..., greed_sampling: _Optional[bool] = ..., use_raw_prompt: _Optional[bool] = ..., ignore_eos: _Optional[bool] = ..., top_k: _Optional[int] = ..., repetition_penalty: _Optional[float] = ..., max_thinking_tokens: _Optional[int] = ..., agent_hints: _Optional[_Union[AgentHints, _Mapping]] = ..., annotations: _Optional[_Iterable[str]] = ..., dp_rank: _Optional[int] = ..., exact_weight_version: _Optional[str] = ..., max_weight_lag: _Optional[int] = ..., salt_cache_by_version: _Optional[bool] = ..., content_parts: _Optional[_Iterable[_Union[_multimodal_pb2.TokenMediaPart, _Mapping]]] = ..., features: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., mm_features: _Optional[_Union[_multimodal_pb2.MultiModalFeatures, _Mapping]] = ...) -> None: ...

class CreateChatCompletionRequest(_message.Message):
    __slots__ = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty", "logprobs", "top_logprobs", "stream", "stream_options", "user", "tools", "tool_choice", "response_format", "logit_bias", "parallel_tool_calls", "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "cache_salt", "priority", "chat_template_kwargs", "add_generation_prompt", "continue_final_message", "return_token_ids", "return_weight_versions", "prompt_logprobs", "request_id", "add_special_tokens", "chat_template", "session_id", "return_tokens_as_token_ids", "tokens", "include_reasoning", "reasoning_effort", "echo", "kv_transfer_params", "ec_transfer_params", "return_prompt_text", "nvext")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STREAM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FORMAT_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    MIN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RETURN_WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKENS_AS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REASONING_FIELD_NUMBER: _ClassVar[int]
    REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    EC_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    RETURN_PROMPT_TEXT_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[ChatMessage]
    max_tokens: int
    max_completion_tokens: int
    temperature: float
    top_p: float
    n: int
    stop: _struct_pb2.Value
    seed: int
    presence_penalty: float
    frequency_penalty: float
    logprobs: bool
    top_logprobs: int
    stream: bool
    stream_options: StreamOptions
    user: str
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    tool_choice: _struct_pb2.Value
    response_format: ResponseFormat
    logit_bias: _containers.ScalarMap[int, float]
    parallel_tool_calls: bool
    top_k: int
    min_p: float
    repetition_penalty: float
    min_tokens: int
    ignore_eos: bool
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    include_stop_str_in_output: bool
    cache_salt: str
    priority: int
    chat_template_kwargs: _struct_pb2.Struct
    add_generation_prompt: bool
    continue_final_message: bool
    return_token_ids: bool
    return_weight_versions: bool
    prompt_logprobs: int
    request_id: str
    add_special_tokens: bool
    chat_template: str
    session_id: str
    return_tokens_as_token_ids: bool
    tokens: _containers.RepeatedScalarFieldContainer[int]
    include_reasoning: bool
    reasoning_effort: str
    echo: bool
    kv_transfer_params: _struct_pb2.Struct
    ec_transfer_params: _struct_pb2.Struct
    return_prompt_text: bool
    nvext: NvExtRequest
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[ChatMessage, _Mapping]]] = ..., max_tokens: _Optional[int] = ..., max_completion_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., n: _Optional[int] = ..., stop: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., logprobs: _Optional[bool] = ..., top_logprobs: _Optional[int] = ..., stream: _Optional[bool] = ..., stream_options: _Optional[_Union[StreamOptions, _Mapping]] = ..., user: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ..., tool_choice: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., response_format: _Optional[_Union[ResponseFormat, _Mapping]] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., parallel_tool_calls: _Optional[bool] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., min_tokens: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ..., include_stop_str_in_output: _Optional[bool] = ..., cache_salt: _Optional[str] = ..., priority: _Optional[int] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., return_token_ids: _Optional[bool] = ..., return_weight_versions: _Optional[bool] = ..., prompt_logprobs: _Optional[int] = ..., request_id: _Optional[str] = ..., add_special_tokens: _Optional[bool] = ..., chat_template: _Optional[str] = ..., session_id: _Optional[str] = ..., return_tokens_as_token_ids: _Optional[bool] = ..., tokens: _Optional[_Iterable[int]] = ..., include_reasoning: _Optional[bool] = ..., reasoning_effort: _Optional[str] = ..., echo: _Optional[bool] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ec_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., return_prompt_text: _Optional[bool] = ..., nvext: _Optional[_Union[NvExtRequest, _Mapping]] = ...) -> None: ...

class ResponseMessage(_message.Message):
    __slots__ = ("role", "content", "reasoning_content", "tool_calls", "reasoning")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    reasoning_content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    reasoning: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., reasoning: _Optional[str] = ...) -> None: ...

class ChoiceNvExt(_message.Message):
    __slots__ = ("completion_token_ids", "engine_data", "stop_reason")
    COMPLETION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_DATA_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    completion_token_ids: _containers.RepeatedScalarFieldContainer[int]
    engine_data: _common_pb2.EngineData
    stop_reason: _struct_pb2.Value
    def __init__(self, completion_token_ids: _Optional[_Iterable[int]] = ..., engine_data: _Optional[_Union[_common_pb2.EngineData, _Mapping]] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class NvExtResponse(_message.Message):
    __slots__ = ("completion_token_ids", "engine_data", "prompt_token_ids", "timing", "stop_reason", "worker_id", "prompt_logprobs")
    COMPLETION_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_DATA_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    completion_token_ids: _containers.RepeatedScalarFieldContainer[int]
    engine_data: _common_pb2.EngineData
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    timing: _common_pb2.Timing
    stop_reason: _struct_pb2.Value
    worker_id: str
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, completion_token_ids: _Optional[_Iterable[int]] = ..., engine_data: _Optional[_Union[_common_pb2.EngineData, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., timing: _Optional[_Union[_common_pb2.Timing, _Mapping]] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., worker_id: _Optional[str] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class ChatCompletionChoice(_message.Message):
    __slots__ = ("index", "message", "finish_reason", "stop_reason", "logprobs", "token_ids", "nvext", "weight_versions", "routed_experts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    message: ResponseMessage
    finish_reason: str
    stop_reason: _struct_pb2.Value
    logprobs: _common_pb2.ChoiceLogProbs
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    nvext: ChoiceNvExt
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    routed_experts: bytes
    def __init__(self, index: _Optional[int] = ..., message: _Optional[_Union[ResponseMessage, _Mapping]] = ..., finish_reason: _Optional[str] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., logprobs: _Optional[_Union[_common_pb2.ChoiceLogProbs, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., nvext: _Optional[_Union[ChoiceNvExt, _Mapping]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., routed_experts: _Optional[bytes] = ...) -> None: ...

class CreateChatCompletionResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint", "prompt_token_ids", "prompt_logprobs", "nvext", "mm_placeholders", "kv_transfer_params")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    MM_PLACEHOLDERS_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[ChatCompletionChoice]
    usage: _common_pb2.Usage
    system_fingerprint: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    nvext: NvExtResponse
    mm_placeholders: _multimodal_pb2.MultiModalPlaceholders
    kv_transfer_params: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[ChatCompletionChoice, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., nvext: _Optional[_Union[NvExtResponse, _Mapping]] = ..., mm_placeholders: _Optional[_Union[_multimodal_pb2.MultiModalPlaceholders, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ChatCompletionDelta(_message.Message):
    __slots__ = ("role", "content", "reasoning_content", "tool_calls", "reasoning")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    REASONING_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    reasoning_content: str
    tool_calls: _containers.RepeatedCompositeFieldContainer[ToolCall]
    reasoning: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ..., reasoning_content: _Optional[str] = ..., tool_calls: _Optional[_Iterable[_Union[ToolCall, _Mapping]]] = ..., reasoning: _Optional[str] = ...) -> None: ...

class ChatCompletionChunkChoice(_message.Message):
    __slots__ = ("index", "delta", "finish_reason", "stop_reason", "logprobs", "token_ids", "nvext", "weight_versions", "routed_experts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    delta: ChatCompletionDelta
    finish_reason: str
    stop_reason: _struct_pb2.Value
    logprobs: _common_pb2.ChoiceLogProbs
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    nvext: ChoiceNvExt
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    routed_experts: bytes
    def __init__(self, index: _Optional[int] = ..., delta: _Optional[_Union[ChatCompletionDelta, _Mapping]] = ..., finish_reason: _Optional[str] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., logprobs: _Optional[_Union[_common_pb2.ChoiceLogProbs, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., nvext: _Optional[_Union[ChoiceNvExt, _Mapping]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., routed_experts: _Optional[bytes] = ...) -> None: ...

class StreamChatCompletionResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint", "prompt_token_ids", "nvext", "prompt_logprobs", "mm_placeholders")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MM_PLACEHOLDERS_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[ChatCompletionChunkChoice]
    usage: _common_pb2.Usage
    system_fingerprint: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    nvext: NvExtResponse
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    mm_placeholders: _multimodal_pb2.MultiModalPlaceholders
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[ChatCompletionChunkChoice, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., nvext: _Optional[_Union[NvExtResponse, _Mapping]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., mm_placeholders: _Optional[_Union[_multimodal_pb2.MultiModalPlaceholders, _Mapping]] = ...) -> None: ...
