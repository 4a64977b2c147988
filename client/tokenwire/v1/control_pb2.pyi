from google.api import annotations_pb2 as _annotations_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ControlState(_message.Message):
    __slots__ = ("paused", "pause_mode", "sleeping", "weight_version", "lora_adapters", "engine_requests", "updates", "last_error", "weight_path", "generation", "load_failed", "requests_ended_by_bound", "bounded_requests", "announced_version", "weight_fingerprint")
    class RequestsEndedByBoundEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MODE_FIELD_NUMBER: _ClassVar[int]
    SLEEPING_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_PATH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    LOAD_FAILED_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_ENDED_BY_BOUND_FIELD_NUMBER: _ClassVar[int]
    BOUNDED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ANNOUNCED_VERSION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    paused: bool
    pause_mode: str
    sleeping: bool
    weight_version: str
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    engine_requests: int
    updates: int
    last_error: str
    weight_path: str
    generation: int
    load_failed: bool
    requests_ended_by_bound: _containers.ScalarMap[str, int]
    bounded_requests: int
    announced_version: str
    weight_fingerprint: str
    def __init__(self, paused: _Optional[bool] = ..., pause_mode: _Optional[str] = ..., sleeping: _Optional[bool] = ..., weight_version: _Optional[str] = ..., lora_adapters: _Optional[_Iterable[str]] = ..., engine_requests: _Optional[int] = ..., updates: _Optional[int] = ..., last_error: _Optional[str] = ..., weight_path: _Optional[str] = ..., generation: _Optional[int] = ..., load_failed: _Optional[bool] = ..., requests_ended_by_bound: _Optional[_Mapping[str, int]] = ..., bounded_requests: _Optional[int] = ..., announced_version: _Optional[str] = ..., weight_fingerprint: _Optional[str] = ...) -> None: ...

class PauseRequest(_message.Message):
    __slots__ = ("mode", "clear_cache")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CLEAR_CACHE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    clear_cache: bool
    def __init__(self, mode: _Optional[str] = ..., clear_cache: _Optional[bool] = ...) -> None: ...

class PauseResponse(_message.Message):
    __slots__ = ("status", "state")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    status: str
    state: ControlState
    def __init__(self, status: _Optional[str] = ..., state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("force",)
    FORCE_FIELD_NUMBER: _ClassVar[int]
    force: bool
    def __init__(self, force: _Optional[bool] = ...) -> None: ...

class ResumeResponse(_message.Message):
    __slots__ = ("status", "state")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    status: str
    state: ControlState
    def __init__(self, status: _Optional[str] = ..., state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class IsPausedRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsPausedResponse(_message.Message):
    __slots__ = ("is_paused",)
    IS_PAUSED_FIELD_NUMBER: _ClassVar[int]
    is_paused: bool
    def __init__(self, is_paused: _Optional[bool] = ...) -> None: ...

class GetControlStateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetControlStateResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: ControlState
    def __init__(self, state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class UpdateWeightsFromPathRequest(_message.Message):
    __slots__ = ("path", "weight_version", "pause_mode", "clear_cache", "expected_fingerprint")
    PATH_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    PAUSE_MODE_FIELD_NUMBER: _ClassVar[int]
    CLEAR_CACHE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    path: str
    weight_version: str
    pause_mode: str
    clear_cache: bool
    expected_fingerprint: str
    def __init__(self, path: _Optional[str] = ..., weight_version: _Optional[str] = ..., pause_mode: _Optional[str] = ..., clear_cache: _Optional[bool] = ..., expected_fingerprint: _Optional[str] = ...) -> None: ...

class UpdateWeightsFromPathResponse(_message.Message):
    __slots__ = ("state", "load_ms", "paused_ms")
    STATE_FIELD_NUMBER: _ClassVar[int]
    LOAD_MS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_MS_FIELD_NUMBER: _ClassVar[int]
    state: ControlState
    load_ms: int
    paused_ms: int
    def __init__(self, state: _Optional[_Union[ControlState, _Mapping]] = ..., load_ms: _Optional[int] = ..., paused_ms: _Optional[int] = ...) -> None: ...

class UpdateWeightsFromDiskRequest(_message.Message):
    __slots__ = ("model_path", "load_format", "weight_version", "flush_cache", "abort_all_requests")
    MODEL_PATH_FIELD_NUMBER: _ClassVar[int]
    LOAD_FORMAT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FLUSH_CACHE_FIELD_NUMBER: _ClassVar[int]
    ABORT_ALL_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    model_path: str
    load_format: str
    weight_version: str
    flush_cache: bool
    abort_all_requests: bool
    def __init__(self, model_path: _Optional[str] = ..., load_format: _Optional[str] = ..., weight_version: _Optional[str] = ..., flush_cache: _Optional[bool] = ..., abort_all_requests: _Optional[bool] = ...) -> None: ...

class UpdateWeightsFromDiskResponse(_message.Message):
    __slots__ = ("success", "message", "state")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    state: ControlState
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ..., state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class InitWeightTransferRequest(_message.Message):
    __slots__ = ("init_info",)
    INIT_INFO_FIELD_NUMBER: _ClassVar[int]
    init_info: _struct_pb2.Struct
    def __init__(self, init_info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class InitWeightTransferResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class StartWeightUpdateRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StartWeightUpdateResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class UpdateWeightsRequest(_message.Message):
    __slots__ = ("update_info", "weight_dir")
    UPDATE_INFO_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DIR_FIELD_NUMBER: _ClassVar[int]
    update_info: _struct_pb2.Struct
    weight_dir: str
    def __init__(self, update_info: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., weight_dir: _Optional[str] = ...) -> None: ...

class UpdateWeightsResponse(_message.Message):
    __slots__ = ("message", "applied", "state")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    message: str
    applied: str
    state: ControlState
    def __init__(self, message: _Optional[str] = ..., applied: _Optional[str] = ..., state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class InitBroadcasterRequest(_message.Message):
    __slots__ = ("host", "port", "rank_offset", "inference_world_size", "timeout", "quantize_in_weight_transfer", "session_id")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    RANK_OFFSET_FIELD_NUMBER: _ClassVar[int]
    INFERENCE_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    QUANTIZE_IN_WEIGHT_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    rank_offset: int
    inference_world_size: int
    timeout: float
    quantize_in_weight_transfer: bool
    session_id: str
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., rank_offset: _Optional[int] = ..., inference_world_size: _Optional[int] = ..., timeout: _Optional[float] = ..., quantize_in_weight_transfer: _Optional[bool] = ..., session_id: _Optional[str] = ...) -> None: ...

class InitBroadcasterResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: str
    def __init__(self, status: _Optional[str] = ...) -> None: ...

class UnsupportedWeightSyncRequest(_message.Message):
    __slots__ = ("body",)
    BODY_FIELD_NUMBER: _ClassVar[int]
    body: _struct_pb2.Struct
    def __init__(self, body: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class UnsupportedWeightSyncResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWorldSizeRequest(_message.Message):
    __slots__ = ("include_dp",)
    INCLUDE_DP_FIELD_NUMBER: _ClassVar[int]
    include_dp: bool
    def __init__(self, include_dp: _Optional[bool] = ...) -> None: ...

class GetWorldSizeResponse(_message.Message):
    __slots__ = ("world_size",)
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    world_size: int
    def __init__(self, world_size: _Optional[int] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ("config_format",)
    CONFIG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    config_format: str
    def __init__(self, config_format: _Optional[str] = ...) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("vllm_config",)
    VLLM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    vllm_config: _struct_pb2.Value
    def __init__(self, vllm_config: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class CollectiveRpcRequest(_message.Message):
    __slots__ = ("method", "timeout", "args", "kwargs")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    KWARGS_FIELD_NUMBER: _ClassVar[int]
    method: str
    timeout: float
    args: _struct_pb2.ListValue
    kwargs: _struct_pb2.Struct
    def __init__(self, method: _Optional[str] = ..., timeout: _Optional[float] = ..., args: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class CollectiveRpcResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[_struct_pb2.Value]
    def __init__(self, results: _Optional[_Iterable[_Union[_struct_pb2.Value, _Mapping]]] = ...) -> None: ...

class FinishWeightUpdateRequest(_message.Message):
    __slots__ = ("weight_version",)
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    weight_version: str
    def __init__(self, weight_version: _Optional[str] = ...) -> None: ...

class FinishWeightUpdateResponse(_message.Message):
    __slots__ = ("message", "state")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    message: str
    state: ControlState
    def __init__(self, message: _Optional[str] = ..., state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class SetWeightVersionRequest(_message.Message):
    __slots__ = ("new_version",)
    NEW_VERSION_FIELD_NUMBER: _ClassVar[int]
    new_version: str
    def __init__(self, new_version: _Optional[str] = ...) -> None: ...

class SetWeightVersionResponse(_message.Message):
    __slots__ = ("success", "new_version")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    NEW_VERSION_FIELD_NUMBER: _ClassVar[int]
    success: bool
    new_version: str
    def __init__(self, success: _Optional[bool] = ..., new_version: _Optional[str] = ...) -> None: ...

class GetWeightInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetWeightInfoResponse(_message.Message):
    __slots__ = ("weight_version",)
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    weight_version: str
    def __init__(self, weight_version: _Optional[str] = ...) -> None: ...

class ResetPrefixCacheRequest(_message.Message):
    __slots__ = ("reset_running_requests",)
    RESET_RUNNING_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    reset_running_requests: bool
    def __init__(self, reset_running_requests: _Optional[bool] = ...) -> None: ...

class ResetPrefixCacheResponse(_message.Message):
    __slots__ = ("success",)
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    success: bool
    def __init__(self, success: _Optional[bool] = ...) -> None: ...

class SleepRequest(_message.Message):
    __slots__ = ("level", "mode")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    level: int
    mode: str
    def __init__(self, level: _Optional[int] = ..., mode: _Optional[str] = ...) -> None: ...

class SleepResponse(_message.Message):
    __slots__ = ("status", "level")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    status: str
    level: int
    def __init__(self, status: _Optional[str] = ..., level: _Optional[int] = ...) -> None: ...

class WakeUpRequest(_message.Message):
    __slots__ = ("tags",)
    TAGS_FIELD_NUMBER: _ClassVar[int]
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tags: _Optional[_Iterable[str]] = ...) -> None: ...

class WakeUpResponse(_message.Message):
    __slots__ = ("status", "tags")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    status: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ...) -> None: ...

class IsSleepingRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IsSleepingResponse(_message.Message):
    __slots__ = ("is_sleeping",)
    IS_SLEEPING_FIELD_NUMBER: _ClassVar[int]
    is_sleeping: bool
    def __init__(self, is_sleeping: _Optional[bool] = ...) -> None: ...

class AbortRequestsRequest(_message.Message):
    __slots__ = ("request_ids",)
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AbortRequestsResponse(_message.Message):
    __slots__ = ("status", "aborted")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ABORTED_FIELD_NUMBER: _ClassVar[int]
    status: str
    aborted: int
    def __init__(self, status: _Optional[str] = ..., aborted: _Optional[int] = ...) -> None: ...

class LoadLoraAdapterRequest(_message.Message):
    __slots__ = ("lora_name", "lora_path", "load_inplace")
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    LORA_PATH_FIELD_NUMBER: _ClassVar[int]
    LOAD_INPLACE_FIELD_NUMBER: _ClassVar[int]
    lora_name: str
    lora_path: str
    load_inplace: bool
    def __init__(self, lora_name: _Optional[str] = ..., lora_path: _Optional[str] = ..., load_inplace: _Optional[bool] = ...) -> None: ...

class LoadLoraAdapterResponse(_message.Message):
    __slots__ = ("message", "lora_adapters")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    message: str
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message: _Optional[str] = ..., lora_adapters: _Optional[_Iterable[str]] = ...) -> None: ...

class UnloadLoraAdapterRequest(_message.Message):
    __slots__ = ("lora_name",)
    LORA_NAME_FIELD_NUMBER: _ClassVar[int]
    lora_name: str
    def __init__(self, lora_name: _Optional[str] = ...) -> None: ...

class UnloadLoraAdapterResponse(_message.Message):
    __slots__ = ("message", "lora_adapters")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LORA_ADAPTERS_FIELD_NUMBER: _ClassVar[int]
    message: str
    lora_adapters: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, message: _Optional[str] = ..., lora_adapters: _Optional[_Iterable[str]] = ...) -> None: ...

class AnnounceWeightVersionRequest(_message.Message):
    __slots__ = ("weight_version",)
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    weight_version: str
    def __init__(self, weight_version: _Optional[str] = ...) -> None: ...

class AnnounceWeightVersionResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: ControlState
    def __init__(self, state: _Optional[_Union[ControlState, _Mapping]] = ...) -> None: ...

class ResetMultimodalCacheRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetMultimodalCacheResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetEncoderCacheRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResetEncoderCacheResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CheckWeightsRequest(_message.Message):
    __slots__ = ("action", "baseline")
    class BaselineEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ACTION_FIELD_NUMBER: _ClassVar[int]
    BASELINE_FIELD_NUMBER: _ClassVar[int]
    action: str
    baseline: _containers.ScalarMap[str, str]
    def __init__(self, action: _Optional[str] = ..., baseline: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CheckWeightsResponse(_message.Message):
    __slots__ = ("checksums", "match", "mismatches", "status")
    class ChecksumsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHECKSUMS_FIELD_NUMBER: _ClassVar[int]
    MATCH_FIELD_NUMBER: _ClassVar[int]
    MISMATCHES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    checksums: _containers.ScalarMap[str, str]
    match: bool
    mismatches: _struct_pb2.ListValue
    status: str
    def __init__(self, checksums: _Optional[_Mapping[str, str]] = ..., match: _Optional[bool] = ..., mismatches: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., status: _Optional[str] = ...) -> None: ...
