from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Model(_message.Message):
    __slots__ = ("id", "object", "created", "owned_by", "root", "max_model_len", "parent")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    OWNED_BY_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    owned_by: str
    root: str
    max_model_len: int
    parent: str
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., owned_by: _Optional[str] = ..., root: _Optional[str] = ..., max_model_len: _Optional[int] = ..., parent: _Optional[str] = ...) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("object", "data")
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    object: str
    data: _containers.RepeatedCompositeFieldContainer[Model]
    def __init__(self, object: _Optional[str] = ..., data: _Optional[_Iterable[_Union[Model, _Mapping]]] = ...) -> None: ...

class GetHealthRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetHealthResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: str
    def __init__(self, status: _Optional[str] = ...) -> None: ...

class GetVersionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetVersionResponse(_message.Message):
    __slots__ = ("version", "tokenwire_version")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TOKENWIRE_VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    tokenwire_version: str
    def __init__(self, version: _Optional[str] = ..., tokenwire_version: _Optional[str] = ...) -> None: ...

class GetServerLoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerLoadResponse(_message.Message):
    __slots__ = ("server_load",)
    SERVER_LOAD_FIELD_NUMBER: _ClassVar[int]
    server_load: int
    def __init__(self, server_load: _Optional[int] = ...) -> None: ...

class GetStatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatsResponse(_message.Message):
    __slots__ = ("engine_requests", "active_calls", "worker_id", "model", "serving", "sessions", "speculative_prefills", "continuation_tokens", "paused", "weight_version", "engine_config")
    ENGINE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CALLS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PREFILLS_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENGINE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    engine_requests: int
    active_calls: int
    worker_id: str
    model: str
    serving: bool
    sessions: int
    speculative_prefills: int
    continuation_tokens: int
    paused: bool
    weight_version: str
    engine_config: EngineConfig
    def __init__(self, engine_requests: _Optional[int] = ..., active_calls: _Optional[int] = ..., worker_id: _Optional[str] = ..., model: _Optional[str] = ..., serving: _Optional[bool] = ..., sessions: _Optional[int] = ..., speculative_prefills: _Optional[int] = ..., continuation_tokens: _Optional[int] = ..., paused: _Optional[bool] = ..., weight_version: _Optional[str] = ..., engine_config: _Optional[_Union[EngineConfig, _Mapping]] = ...) -> None: ...

class EngineConfig(_message.Message):
    __slots__ = ("model", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_model_len", "block_size", "max_num_seqs", "enable_lora", "max_lora_rank", "logprobs_mode", "platform")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    TENSOR_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_PARALLEL_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_SEQS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_LORA_FIELD_NUMBER: _ClassVar[int]
    MAX_LORA_RANK_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_MODE_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    model: str
    dtype: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    max_model_len: int
    block_size: int
    max_num_seqs: int
    enable_lora: bool
    max_lora_rank: int
    logprobs_mode: str
    platform: str
    def __init__(self, model: _Optional[str] = ..., dtype: _Optional[str] = ..., tensor_parallel_size: _Optional[int] = ..., pipeline_parallel_size: _Optional[int] = ..., data_parallel_size: _Optional[int] = ..., max_model_len: _Optional[int] = ..., block_size: _Optional[int] = ..., max_num_seqs: _Optional[int] = ..., enable_lora: _Optional[bool] = ..., max_lora_rank: _Optional[int] = ..., logprobs_mode: _Optional[str] = ..., platform: _Optional[str] = ...) -> None: ...
