from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from tokenwire.v1 import multimodal_pb2 as _multimodal_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResponseTool(_message.Message):
    __slots__ = ("type", "name", "description", "parameters", "strict")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    type: str
    name: str
    description: str
    parameters: _struct_pb2.Struct
    strict: bool
    def __init__(self, type: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., strict: _Optional[bool] = ...) -> None: ...

class CreateResponseRequest(_message.Message):
    __slots__ = ("model", "input", "instructions", "tools", "tool_choice", "max_output_tokens", "temperature", "top_p", "metadata", "user", "stream", "store", "previous_response_id", "parallel_tool_calls", "reasoning", "text", "truncation", "service_tier", "top_logprobs", "include", "background", "max_tool_calls", "stream_options", "prompt_cache_key", "top_k", "min_p", "repetition_penalty", "seed", "presence_penalty", "frequency_penalty", "stop", "stop_token_ids", "ignore_eos", "skip_special_tokens", "include_stop_str_in_output", "logit_bias", "cache_salt", "priority", "chat_template_kwargs", "request_id", "session_id", "return_token_ids", "include_reasoning", "nvext", "kv_transfer_params", "ec_transfer_params")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STREAM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_CACHE_KEY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_STOP_STR_IN_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_REASONING_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    EC_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: _struct_pb2.Value
    instructions: str
    tools: _containers.RepeatedCompositeFieldContainer[ResponseTool]
    tool_choice: _struct_pb2.Value
    max_output_tokens: int
    temperature: float
    top_p: float
    metadata: _containers.ScalarMap[str, str]
    user: str
    stream: bool
    store: bool
    previous_response_id: str
    parallel_tool_calls: bool
    reasoning: _struct_pb2.Struct
    text: _struct_pb2.Struct
    truncation: str
    service_tier: str
    top_logprobs: int
    include: _containers.RepeatedScalarFieldContainer[str]
    background: bool
    max_tool_calls: int
    stream_options: _struct_pb2.Struct
    prompt_cache_key: str
    top_k: int
    min_p: float
    repetition_penalty: float
    seed: int
    presence_penalty: float
    frequency_penalty: float
    stop: _struct_pb2.Value
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    ignore_eos: bool
    skip_special_tokens: bool
    include_stop_str_in_output: bool
    logit_bias: _containers.ScalarMap[int, float]
    cache_salt: str
    priority: int
    chat_template_kwargs: _struct_pb2.Struct
    request_id: str
    session_id: str
    return_token_ids: bool
    include_reasoning: bool
    nvext: _chat_pb2.NvExtRequest
    kv_transfer_params: _struct_pb2.Struct
    ec_transfer_params: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., instructions: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ResponseTool, _Mapping]]] = ..., tool_choice: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., max_output_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., metadata: _Optional[_Mapping[str, str]] = ..., user: _Optional[str] = ..., stream: _Optional[bool] = ..., store: _Optional[bool] = ..., previous_response_id: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., reasoning: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., truncation: _Optional[str] = ..., service_tier: _Optional[str] = ..., top_logprobs: _Optional[int] = ..., include: _Optional[_Iterable[str]] = ..., background: _Optional[bool] = ..., max_tool_calls: _Optional[int] = ..., stream_options: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., prompt_cache_key: _Optional[str] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., stop: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., ignore_eos: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., include_stop_str_in_output: _Optional[bool] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., cache_salt: _Optional[str] = ..., priority: _Optional[int] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., return_token_ids: _Optional[bool] = ..., include_reasoning: _Optional[bool] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtRequest, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ec_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ResponseContent(_message.Message):
    __slots__ = ("type", "text", "annotations", "logprobs")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: str
    annotations: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, type: _Optional[str] = ..., text: _Optional[str] = ..., annotations: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class ResponseOutputItem(_message.Message):
    __slots__ = ("type", "id", "status", "role", "content", "call_id", "name", "arguments", "summary")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    status: str
    role: str
    content: _containers.RepeatedCompositeFieldContainer[ResponseContent]
    call_id: str
    name: str
    arguments: str
    summary: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., status: _Optional[str] = ..., role: _Optional[str] = ..., content: _Optional[_Iterable[_Union[ResponseContent, _Mapping]]] = ..., call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., summary: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class ResponseUsage(_message.Message):
    __slots__ = ("input_tokens", "input_tokens_details", "output_tokens", "output_tokens_details", "total_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_DETAILS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_DETAILS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    input_tokens_details: _struct_pb2.Struct
    output_tokens: int
    output_tokens_details: _struct_pb2.Struct
    total_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., input_tokens_details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output_tokens: _Optional[int] = ..., output_tokens_details: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class ResponseIncompleteDetails(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class CreateResponseResponse(_message.Message):
    __slots__ = ("id", "object", "created_at", "status", "model", "output", "usage", "incomplete_details", "instructions", "metadata", "temperature", "top_p", "max_output_tokens", "parallel_tool_calls", "tool_choice", "tools", "user", "truncation", "service_tier", "store", "reasoning", "text", "top_logprobs", "max_tool_calls", "background", "system_fingerprint", "prompt_token_ids", "output_token_ids", "mm_placeholders", "weight_versions", "nvext", "kv_transfer_params")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_DETAILS_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_FIELD_NUMBER: _ClassVar[int]
    SERVICE_TIER_FIELD_NUMBER: _ClassVar[int]
    STORE_FIELD_NUMBER: _ClassVar[int]
    REASONING_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MM_PLACEHOLDERS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created_at: int
    status: str
    model: str
    output: _containers.RepeatedCompositeFieldContainer[ResponseOutputItem]
    usage: ResponseUsage
    incomplete_details: ResponseIncompleteDetails
    instructions: str
    metadata: _containers.ScalarMap[str, str]
    temperature: float
    top_p: float
    max_output_tokens: int
    parallel_tool_calls: bool
    tool_choice: _struct_pb2.Value
    tools: _containers.RepeatedCompositeFieldContainer[ResponseTool]
    user: str
    truncation: str
    service_tier: str
    store: bool
    reasoning: _struct_pb2.Struct
    text: _struct_pb2.Struct
    top_logprobs: int
    max_tool_calls: int
    background: bool
    system_fingerprint: str
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    output_token_ids: _containers.RepeatedScalarFieldContainer[int]
    mm_placeholders: _multimodal_pb2.MultiModalPlaceholders
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    nvext: _chat_pb2.NvExtResponse
    kv_transfer_params: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created_at: _Optional[int] = ..., status: _Optional[str] = ..., model: _Optional[str] = ..., output: _Optional[_Iterable[_Union[ResponseOutputItem, _Mapping]]] = ..., usage: _Optional[_Union[ResponseUsage, _Mapping]] = ..., incomplete_details: _Optional[_Union[ResponseIncompleteDetails, _Mapping]] = ..., instructions: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., parallel_tool_calls: _Optional[bool] = ..., tool_choice: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[ResponseTool, _Mapping]]] = ..., user: _Optional[str] = ..., truncation: _Optional[str] = ..., service_tier: _Optional[str] = ..., store: _Optional[bool] = ..., reasoning: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., text: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., top_logprobs: _Optional[int] = ..., max_tool_calls: _Optional[int] = ..., background: _Optional[bool] = ..., system_fingerprint: _Optional[str] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., output_token_ids: _Optional[_Iterable[int]] = ..., mm_placeholders: _Optional[_Union[_multimodal_pb2.MultiModalPlaceholders, _Mapping]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtResponse, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class ResponseStreamEvent(_message.Message):
    __slots__ = ("type", "sequence_number", "response", "output_index", "item", "item_id", "content_index", "part", "delta", "text", "arguments", "name", "logprobs", "token_ids")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_INDEX_FIELD_NUMBER: _ClassVar[int]
    PART_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    type: str
    sequence_number: int
    response: CreateResponseResponse
    output_index: int
    item: ResponseOutputItem
    item_id: str
    content_index: int
    part: ResponseContent
    delta: str
    text: str
    arguments: str
    name: str
    logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[str] = ..., sequence_number: _Optional[int] = ..., response: _Optional[_Union[CreateResponseResponse, _Mapping]] = ..., output_index: _Optional[int] = ..., item: _Optional[_Union[ResponseOutputItem, _Mapping]] = ..., item_id: _Optional[str] = ..., content_index: _Optional[int] = ..., part: _Optional[_Union[ResponseContent, _Mapping]] = ..., delta: _Optional[str] = ..., text: _Optional[str] = ..., arguments: _Optional[str] = ..., name: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...
