from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from tokenwire.v1 import generate_pb2 as _generate_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateCompletionRequest(_message.Message):
    __slots__ = ("model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "best_of", "logit_bias", "seed", "user", "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "cache_salt", "priority", "return_token_ids", "return_weight_versions", "prompt_logprobs", "request_id", "add_special_tokens", "return_tokens_as_token_ids", "session_id", "kv_transfer_params", "ec_transfer_params", "nvext")
    class LogitBiasEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: float
        def __init__(self, key: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STREAM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    ECHO_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    BEST_OF_FIELD_NUMBER: _ClassVar[int]
    LOGIT_BIAS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
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
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RETURN_WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKENS_AS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    EC_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: _struct_pb2.Value
    suffix: str
    max_tokens: int
    temperature: float
    top_p: float
    n: int
    stream: bool
    stream_options: _chat_pb2.StreamOptions
    logprobs: int
    echo: bool
    stop: _struct_pb2.Value
    presence_penalty: float
    frequency_penalty: float
    best_of: int
    logit_bias: _containers.ScalarMap[int, float]
    seed: int
    user: str
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
    return_token_ids: bool
    return_weight_versions: bool
    prompt_logprobs: int
    request_id: str
    add_special_tokens: bool
    return_tokens_as_token_ids: bool
    session_id: str
    kv_transfer_params: _struct_pb2.Struct
    ec_transfer_params: _struct_pb2.Struct
    nvext: _chat_pb2.NvExtRequest
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., suffix: _Optional[str] = ..., max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., n: _Optional[int] = ..., stream: _Optional[bool] = ..., stream_options: _Optional[_Union[_chat_pb2.StreamOptions, _Mapping]] = ..., logprobs: _Optional[int] = ..., echo: _Optional[bool] = ..., stop: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., best_of: _Optional[int] = ..., logit_bias: _Optional[_Mapping[int, float]] = ..., seed: _Optional[int] = ..., user: _Optional[str] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., min_tokens: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., skip_special_tokens: _Optional[bool] = ..., spaces_between_special_tokens: _Optional[bool] = ..., include_stop_str_in_output: _Optional[bool] = ..., cache_salt: _Optional[str] = ..., priority: _Optional[int] = ..., return_token_ids: _Optional[bool] = ..., return_weight_versions: _Optional[bool] = ..., prompt_logprobs: _Optional[int] = ..., request_id: _Optional[str] = ..., add_special_tokens: _Optional[bool] = ..., return_tokens_as_token_ids: _Optional[bool] = ..., session_id: _Optional[str] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ec_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtRequest, _Mapping]] = ...) -> None: ...

class CompletionLogProbs(_message.Message):
    __slots__ = ("tokens", "token_logprobs", "top_logprobs", "text_offset", "token_ids")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    TEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[str]
    token_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    text_offset: _containers.RepeatedScalarFieldContainer[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, tokens: _Optional[_Iterable[str]] = ..., token_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., top_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., text_offset: _Optional[_Iterable[int]] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CompletionChoice(_message.Message):
    __slots__ = ("index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids", "prompt_token_ids", "prompt_logprobs", "nvext", "weight_versions", "routed_experts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    logprobs: CompletionLogProbs
    finish_reason: str
    stop_reason: _struct_pb2.Value
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    nvext: _chat_pb2.ChoiceNvExt
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    routed_experts: bytes
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., logprobs: _Optional[_Union[CompletionLogProbs, _Mapping]] = ..., finish_reason: _Optional[str] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., token_ids: _Optional[_Iterable[int]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., nvext: _Optional[_Union[_chat_pb2.ChoiceNvExt, _Mapping]] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., routed_experts: _Optional[bytes] = ...) -> None: ...

class CreateCompletionResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint", "nvext", "kv_transfer_params")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[CompletionChoice]
    usage: _common_pb2.Usage
    system_fingerprint: str
    nvext: _chat_pb2.NvExtResponse
    kv_transfer_params: _struct_pb2.Struct
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[CompletionChoice, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtResponse, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class StreamCompletionResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "choices", "usage", "system_fingerprint", "nvext")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    NVEXT_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    choices: _containers.RepeatedCompositeFieldContainer[CompletionChoice]
    usage: _common_pb2.Usage
    system_fingerprint: str
    nvext: _chat_pb2.NvExtResponse
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., choices: _Optional[_Iterable[_Union[CompletionChoice, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., system_fingerprint: _Optional[str] = ..., nvext: _Optional[_Union[_chat_pb2.NvExtResponse, _Mapping]] = ...) -> None: ...

class RenderCompletionResponse(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[_generate_pb2.GenerateRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[_generate_pb2.GenerateRequest, _Mapping]]] = ...) -> None: ...
