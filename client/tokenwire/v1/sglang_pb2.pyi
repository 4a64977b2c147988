from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FinishSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class FinishSessionResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: str
    def __init__(self, status: _Optional[str] = ...) -> None: ...

class SglangSamplingParams(_message.Message):
    __slots__ = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "stop_token_ids", "stop", "ignore_eos", "skip_special_tokens", "min_new_tokens", "spaces_between_special_tokens", "no_stop_trim", "sampling_seed", "n")
    MAX_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    MIN_P_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    REPETITION_PENALTY_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    SKIP_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MIN_NEW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SPACES_BETWEEN_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NO_STOP_TRIM_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_SEED_FIELD_NUMBER: _ClassVar[int]
    N_FIELD_NUMBER: _ClassVar[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    frequency_penalty: float
    presence_penalty: float
    repetition_penalty: float
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    stop: _struct_pb2.Value
    ignore_eos: bool
    skip_special_tokens: bool
    min_new_tokens: int
    spaces_between_special_tokens: bool
    no_stop_trim: bool
    sampling_seed: int
    n: int
    def __init__(self, max_new_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., top_k: _Optional[int] = ..., min_p: _Optional[float] = ..., frequency_penalty: _Optional[float] = ..., presence_penalty: _Optional[float] = ..., repetition_penalty: _Optional[float] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., stop: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., ignore_eos: _Optional[bool] = ..., skip_special_tokens: _Optional[bool] = ..., min_new_tokens: _Optional[int] = ..., spaces_between_special_tokens: _Optional[bool] = ..., no_stop_trim: _Optional[bool] = ..., sampling_seed: _Optional[int] = ..., n: _Optional[int] = ...) -> None: ...

class SglangGenerateRequest(_message.Message):
    __slots__ = ("input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len", "top_logprobs_num", "stream", "rid", "image_data", "return_routed_experts", "lora_path", "session_id")
    INPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_PARAMS_FIELD_NUMBER: _ClassVar[int]
    RETURN_LOGPROB_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_START_LEN_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_NUM_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    RID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_DATA_FIELD_NUMBER: _ClassVar[int]
    RETURN_ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    LORA_PATH_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    input_ids: _containers.RepeatedScalarFieldContainer[int]
    text: str
    sampling_params: SglangSamplingParams
    return_logprob: bool
    logprob_start_len: int
    top_logprobs_num: int
    stream: bool
    rid: str
    image_data: _struct_pb2.Value
    return_routed_experts: bool
    lora_path: str
    session_id: str
    def __init__(self, input_ids: _Optional[_Iterable[int]] = ..., text: _Optional[str] = ..., sampling_params: _Optional[_Union[SglangSamplingParams, _Mapping]] = ..., return_logprob: _Optional[bool] = ..., logprob_start_len: _Optional[int] = ..., top_logprobs_num: _Optional[int] = ..., stream: _Optional[bool] = ..., rid: _Optional[str] = ..., image_data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., return_routed_experts: _Optional[bool] = ..., lora_path: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class SglangFinishReason(_message.Message):
    __slots__ = ("type", "matched", "length", "message")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    type: str
    matched: _struct_pb2.Value
    length: int
    message: str
    def __init__(self, type: _Optional[str] = ..., matched: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., length: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SglangMetaInfo(_message.Message):
    __slots__ = ("id", "finish_reason", "prompt_tokens", "completion_tokens", "cached_tokens", "output_token_logprobs", "input_token_logprobs", "output_top_logprobs", "weight_version", "e2e_latency", "routed_experts", "weight_versions")
    ID_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKEN_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    E2E_LATENCY_FIELD_NUMBER: _ClassVar[int]
    ROUTED_EXPERTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    id: str
    finish_reason: SglangFinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    output_token_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    input_token_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    output_top_logprobs: _containers.RepeatedCompositeFieldContainer[_struct_pb2.ListValue]
    weight_version: str
    e2e_latency: float
    routed_experts: str
    weight_versions: _containers.RepeatedCompositeFieldContainer[_common_pb2.WeightVersionSpan]
    def __init__(self, id: _Optional[str] = ..., finish_reason: _Optional[_Union[SglangFinishReason, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_token_logprobs: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., input_token_logprobs: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., output_top_logprobs: _Optional[_Iterable[_Union[_struct_pb2.ListValue, _Mapping]]] = ..., weight_version: _Optional[str] = ..., e2e_latency: _Optional[float] = ..., routed_experts: _Optional[str] = ..., weight_versions: _Optional[_Iterable[_Union[_common_pb2.WeightVersionSpan, _Mapping]]] = ...) -> None: ...

class SglangGenerateResponse(_message.Message):
    __slots__ = ("text", "output_ids", "meta_info")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_IDS_FIELD_NUMBER: _ClassVar[int]
    META_INFO_FIELD_NUMBER: _ClassVar[int]
    text: str
    output_ids: _containers.RepeatedScalarFieldContainer[int]
    meta_info: SglangMetaInfo
    def __init__(self, text: _Optional[str] = ..., output_ids: _Optional[_Iterable[int]] = ..., meta_info: _Optional[_Union[SglangMetaInfo, _Mapping]] = ...) -> None: ...
