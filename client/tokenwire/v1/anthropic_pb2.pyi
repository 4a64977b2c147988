from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AnthropicMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: _struct_pb2.Value
    def __init__(self, role: _Optional[str] = ..., content: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class AnthropicTool(_message.Message):
    __slots__ = ("name", "description", "input_schema", "type", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema: _struct_pb2.Struct
    type: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., type: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class AnthropicToolChoice(_message.Message):
    __slots__ = ("type", "name", "disable_parallel_tool_use")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DISABLE_PARALLEL_TOOL_USE_FIELD_NUMBER: _ClassVar[int]
    type: str
    name: str
    disable_parallel_tool_use: bool
    def __init__(self, type: _Optional[str] = ..., name: _Optional[str] = ..., disable_parallel_tool_use: _Optional[bool] = ...) -> None: ...

class CreateMessageRequest(_message.Message):
    __slots__ = ("model", "messages", "system", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "stream", "tools", "tool_choice", "metadata", "thinking", "session_id", "output_config", "cache_salt", "chat_template_kwargs", "return_token_ids", "nvext", "kv_transfer_params", "ec_transfer_params")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCES_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CONFIG_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    EC_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[AnthropicMessage]
    system: _struct_pb2.Value
    max_tokens: int
    stop_sequences: _containers.RepeatedScalarFieldContainer[str]
    temperature: float
    top_p: float
    top_k: int
    stream: bool
    tools: _containers.RepeatedCompositeFieldContainer[AnthropicTool]
    tool_choice: AnthropicToolChoice
    metadata: _struct_pb2.Struct
    thinking: _struct_pb2.Struct
    session_id: str
    output_config: _struct_pb2.Struct
    cache_salt: str
    chat_template_kwargs: _struct_pb2.Struct
    return_token_ids: bool
    nvext: _chat_pb2.NvExtRequest
    kv_transfer_params: _struct_pb2.Struct
    ec_transfer_params: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[AnthropicMessage, _Mapping]]] = ..., system: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., max_tokens: _Optional[int] = ..., stop_sequences: _Optional[_Iterable[str]] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., stream: _Optional[bool] = ..., tools: _Optional[_Iterable[_Union[AnthropicTool, _Mapping]]] = ..., tool_choice: _Optional[_Union[AnthropicToolChoice, _Mapping]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., thinking: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., session_id: _Optional[str] = ..., output_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., cache_salt: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., return_token_ids: _Optional[bool] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtRequest, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ec_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class AnthropicContentBlock(_message.Message):
    __slots__ = ("type", "text", "id", "name", "input", "thinking", "signature")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: str
    id: str
    name: str
    input: _struct_pb2.Struct
    thinking: str
    signature: str
    def __init__(self, type: _Optional[str] = ..., text: _Optional[str] = ..., id: _Optional[str] = ..., name: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., thinking: _Optional[str] = ..., signature: _Optional[str] = ...) -> None: ...

class AnthropicUsage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_read_input_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ...) -> None: ...

class CreateMessageResponse(_message.Message):
    __slots__ = ("id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage", "prompt_token_ids", "token_ids", "weight_versions", "nvext", "kv_transfer_params")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    role: str
    content: _containers.RepeatedCompositeFieldContainer[AnthropicContentBlock]
    model: str
    stop_reason: str
    stop_sequence: str
    usage: AnthropicUsage
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    nvext: _chat_pb2.NvExtResponse
    kv_transfer_params: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., role: _Optional[str] = ..., content: _Optional[_Iterable[_Union[AnthropicContentBlock, _Mapping]]] = ..., model: _Optional[str] = ..., stop_reason: _Optional[str] = ..., stop_sequence: _Optional[str] = ..., usage: _Optional[_Union[AnthropicUsage, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtResponse, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CountMessageTokensRequest(_message.Message):
    __slots__ = ("model", "messages", "system", "tools", "tool_choice", "thinking", "output_config")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CONFIG_FIELD_NUMBER: _ClassVar[int]
    model: str
    messages: _containers.RepeatedCompositeFieldContainer[AnthropicMessage]
    system: _struct_pb2.Value
    tools: _containers.RepeatedCompositeFieldContainer[AnthropicTool]
    tool_choice: AnthropicToolChoice
    thinking: _struct_pb2.Struct
    output_config: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[AnthropicMessage, _Mapping]]] = ..., system: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[AnthropicTool, _Mapping]]] = ..., tool_choice: _Optional[_Union[AnthropicToolChoice, _Mapping]] = ..., thinking: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output_config: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CountMessageTokensResponse(_message.Message):
    __slots__ = ("input_tokens",)
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ...) -> None: ...

class MessageStreamDelta(_message.Message):
    __slots__ = ("type", "text", "partial_json", "thinking", "signature", "stop_reason", "stop_sequence")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_JSON_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    type: str
    text: str
    partial_json: str
    thinking: str
    signature: str
    stop_reason: str
    stop_sequence: str
    def __init__(self, type: _Optional[str] = ..., text: _Optional[str] = ..., partial_json: _Optional[str] = ..., thinking: _Optional[str] = ..., signature: _Optional[str] = ..., stop_reason: _Optional[str] = ..., stop_sequence: _Optional[str] = ...) -> None: ...

class MessageStreamEvent(_message.Message):
    __slots__ = ("type", "message", "index", "content_block", "delta", "usage", "token_ids", "weight_versions", "nvext")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CONTENT_BLOCK_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    type: str
    message: CreateMessageResponse
    index: int
    content_block: AnthropicContentBlock
    delta: MessageStreamDelta
    usage: AnthropicUsage
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    nvext: _chat_pb2.NvExtResponse
    def __init__(self, type: _Optional[str] = ..., message: _Optional[_Union[CreateMessageResponse, _Mapping]] = ..., index: _Optional[int] = ..., content_block: _Optional[_Union[AnthropicContentBlock, _Mapping]] = ..., delta: _Optional[_Union[MessageStreamDelta, _Mapping]] = ..., usage: _Optional[_Union[AnthropicUsage, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtResponse, _Mapping]] = ...) -> None: ...
