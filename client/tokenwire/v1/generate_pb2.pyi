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

class GenerateRequest(_message.Message):
    __slots__ = ("model", "token_ids", "sampling_params", "request_id", "cache_salt", "priority", "return_token_ids", "output_mode", "stream", "stream_options", "data_parallel_rank", "session_id", "exact_weight_version", "max_weight_lag", "salt_cache_by_version", "content_parts", "features", "mm_features", "kv_transfer_params", "ec_transfer_params")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_PARAMS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    STREAM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    DATA_PARALLEL_RANK_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EXACT_WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_WEIGHT_LAG_FIELD_NUMBER: _ClassVar[int]
    SALT_CACHE_BY_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PARTS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    MM_FEATURES_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    EC_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    model: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    sampling_params: _common_pb2.SamplingParams
    request_id: str
    cache_salt: str
    priority: int
    return_token_ids: bool
    output_mode: str
    stream: bool
    stream_options: _chat_pb2.StreamOptions
    data_parallel_rank: int
    session_id: str
    exact_weight_version: str
    max_weight_lag: int
    salt_cache_by_version: bool
    content_parts: _containers.RepeatedCompositeFieldContainer[_multimodal_pb2.TokenMediaPart]
    features: _struct_pb2.Struct
    mm_features: _multimodal_pb2.MultiModalFeatures
    kv_transfer_params: _struct_pb2.Struct
    ec_transfer_params: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., sampling_params: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., request_id: _Optional[str] = ..., cache_salt: _Optional[str] = ..., priority: _Optional[int] = ..., return_token_ids: _Optional[bool] = ..., output_mode: _Optional[str] = ..., stream: _Optional[bool] = ..., stream_options: _Optional[_Union[_chat_pb2.StreamOptions, _Mapping]] = ..., data_parallel_rank: _Optional[int] = ..., session_id: _Optional[str] = ..., exact_weight_version: _Optional[str] = ..., max_weight_lag: _Optional[int] = ..., salt_cache_by_version: _Optional[bool] = ..., content_parts: _Optional[_Iterable[_Union[_multimodal_pb2.TokenMediaPart, _Mapping]]] = ..., features: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., mm_features: _Optional[_Union[_multimodal_pb2.MultiModalFeatures, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., ec_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class GenerateTopLogProb(_message.Message):
    __slots__ = ("token_id", "logprob", "rank", "token", "bytes")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    rank: int
    token: str
    bytes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., rank: _Optional[int] = ..., token: _Optional[str] = ..., bytes: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerateLogProbsContent(_message.Message):
    __slots__ = ("token_id", "logprob", "rank", "token", "bytes", "top_logprobs", "non_finite")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    NON_FINITE_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    rank: int
    token: str
    bytes: _containers.RepeatedScalarFieldContainer[int]
    top_logprobs: _containers.RepeatedCompositeFieldContainer[GenerateTopLogProb]
    non_finite: bool
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ..., rank: _Optional[int] = ..., token: _Optional[str] = ..., bytes: _Optional[_Iterable[int]] = ..., top_logprobs: _Optional[_Iterable[_Union[GenerateTopLogProb, _Mapping]]] = ..., non_finite: _Optional[bool] = ...) -> None: ...

class GenerateLogProbs(_message.Message):
    __slots__ = ("content",)
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: _containers.RepeatedCompositeFieldContainer[GenerateLogProbsContent]
    def __init__(self, content: _Optional[_Iterable[_Union[GenerateLogProbsContent, _Mapping]]] = ...) -> None: ...

class GenerateChoice(_message.Message):
    __slots__ = ("index", "token_ids", "logprobs", "finish_reason", "stop_reason", "text", "weight_versions", "routed_experts")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    index: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: GenerateLogProbs
    finish_reason: str
    stop_reason: _struct_pb2.Value
    text: str
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    routed_experts: bytes
    def __init__(self, index: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Union[GenerateLogProbs, _Mapping]] = ..., finish_reason: _Optional[str] = ..., stop_reason: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., text: _Optional[str] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ..., routed_experts: _Optional[bytes] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "model", "created", "choices", "usage", "prompt_token_ids", "output_mode", "prompt_logprobs", "mm_placeholders", "kv_transfer_params")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    CHOICES_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_MODE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MM_PLACEHOLDERS_FIELD_NUMBER: _ClassVar[int]
    KV_TRANSFER_PARAMS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    created: int
    choices: _containers.RepeatedCompositeFieldContainer[GenerateChoice]
    usage: _common_pb2.Usage
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    output_mode: str
    prompt_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    mm_placeholders: _multimodal_pb2.MultiModalPlaceholders
    kv_transfer_params: _struct_pb2.Struct
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., created: _Optional[int] = ..., choices: _Optional[_Iterable[_Union[GenerateChoice, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., output_mode: _Optional[str] = ..., prompt_logprobs: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ..., mm_placeholders: _Optional[_Union[_multimodal_pb2.MultiModalPlaceholders, _Mapping]] = ..., kv_transfer_params: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...
