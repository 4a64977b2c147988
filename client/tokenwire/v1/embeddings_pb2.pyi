from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CreateEmbeddingRequest(_message.Message):
    __slots__ = ("model", "input", "encoding_format", "dimensions", "user", "use_activation", "add_special_tokens", "truncate_prompt_tokens", "truncation_side", "request_id", "priority", "messages", "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    USE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: _struct_pb2.Value
    encoding_format: str
    dimensions: int
    user: str
    use_activation: bool
    add_special_tokens: bool
    truncate_prompt_tokens: int
    truncation_side: str
    request_id: str
    priority: int
    messages: _containers.RepeatedCompositeFieldContainer[_chat_pb2.ChatMessage]
    add_generation_prompt: bool
    continue_final_message: bool
    chat_template: str
    chat_template_kwargs: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., encoding_format: _Optional[str] = ..., dimensions: _Optional[int] = ..., user: _Optional[str] = ..., use_activation: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., truncation_side: _Optional[str] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_chat_pb2.ChatMessage, _Mapping]]] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., chat_template: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Embedding(_message.Message):
    __slots__ = ("index", "object", "embedding")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    index: int
    object: str
    embedding: _struct_pb2.Value
    def __init__(self, index: _Optional[int] = ..., object: _Optional[str] = ..., embedding: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class CreateEmbeddingResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "data", "usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    data: _containers.RepeatedCompositeFieldContainer[Embedding]
    usage: _common_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., data: _Optional[_Iterable[_Union[Embedding, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("model", "input", "user", "use_activation", "add_special_tokens", "truncate_prompt_tokens", "truncation_side", "request_id", "priority", "messages", "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    USE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: _struct_pb2.Value
    user: str
    use_activation: bool
    add_special_tokens: bool
    truncate_prompt_tokens: int
    truncation_side: str
    request_id: str
    priority: int
    messages: _containers.RepeatedCompositeFieldContainer[_chat_pb2.ChatMessage]
    add_generation_prompt: bool
    continue_final_message: bool
    chat_template: str
    chat_template_kwargs: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., user: _Optional[str] = ..., use_activation: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., truncation_side: _Optional[str] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_chat_pb2.ChatMessage, _Mapping]]] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., chat_template: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Classification(_message.Message):
    __slots__ = ("index", "label", "probs", "num_classes")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    PROBS_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    index: int
    label: str
    probs: _containers.RepeatedScalarFieldContainer[float]
    num_classes: int
    def __init__(self, index: _Optional[int] = ..., label: _Optional[str] = ..., probs: _Optional[_Iterable[float]] = ..., num_classes: _Optional[int] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "data", "usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    data: _containers.RepeatedCompositeFieldContainer[Classification]
    usage: _common_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., data: _Optional[_Iterable[_Union[Classification, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class PoolRequest(_message.Message):
    __slots__ = ("model", "input", "task", "encoding_format", "dimensions", "use_activation", "add_special_tokens", "truncate_prompt_tokens", "truncation_side", "request_id", "priority", "user", "messages", "add_generation_prompt", "continue_final_message", "chat_template", "chat_template_kwargs")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FORMAT_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    USE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    model: str
    input: _struct_pb2.Value
    task: str
    encoding_format: str
    dimensions: int
    use_activation: bool
    add_special_tokens: bool
    truncate_prompt_tokens: int
    truncation_side: str
    request_id: str
    priority: int
    user: str
    messages: _containers.RepeatedCompositeFieldContainer[_chat_pb2.ChatMessage]
    add_generation_prompt: bool
    continue_final_message: bool
    chat_template: str
    chat_template_kwargs: _struct_pb2.Struct
    def __init__(self, model: _Optional[str] = ..., input: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., task: _Optional[str] = ..., encoding_format: _Optional[str] = ..., dimensions: _Optional[int] = ..., use_activation: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., truncation_side: _Optional[str] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ..., user: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_chat_pb2.ChatMessage, _Mapping]]] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., chat_template: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class PoolOutput(_message.Message):
    __slots__ = ("index", "object", "data")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    index: int
    object: str
    data: _struct_pb2.Value
    def __init__(self, index: _Optional[int] = ..., object: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class PoolResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "data", "usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    data: _containers.RepeatedCompositeFieldContainer[PoolOutput]
    usage: _common_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., data: _Optional[_Iterable[_Union[PoolOutput, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("model", "queries", "documents", "items", "data_1", "data_2", "text_1", "text_2", "user", "use_activation", "truncate_prompt_tokens", "truncation_side", "max_tokens_per_query", "max_tokens_per_doc", "instruction", "chat_template_kwargs", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    DATA_1_FIELD_NUMBER: _ClassVar[int]
    DATA_2_FIELD_NUMBER: _ClassVar[int]
    TEXT_1_FIELD_NUMBER: _ClassVar[int]
    TEXT_2_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    USE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_DOC_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    queries: _struct_pb2.Value
    documents: _struct_pb2.Value
    items: _struct_pb2.Value
    data_1: _struct_pb2.Value
    data_2: _struct_pb2.Value
    text_1: _struct_pb2.Value
    text_2: _struct_pb2.Value
    user: str
    use_activation: bool
    truncate_prompt_tokens: int
    truncation_side: str
    max_tokens_per_query: int
    max_tokens_per_doc: int
    instruction: str
    chat_template_kwargs: _struct_pb2.Struct
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., queries: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., documents: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., items: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., data_1: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., data_2: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., text_1: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., text_2: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., user: _Optional[str] = ..., use_activation: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., truncation_side: _Optional[str] = ..., max_tokens_per_query: _Optional[int] = ..., max_tokens_per_doc: _Optional[int] = ..., instruction: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class ScoreData(_message.Message):
    __slots__ = ("index", "object", "score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    object: str
    score: float
    def __init__(self, index: _Optional[int] = ..., object: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class ScoreResponse(_message.Message):
    __slots__ = ("id", "object", "created", "model", "data", "usage")
    ID_FIELD_NUMBER: _ClassVar[int]
    OBJECT_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    object: str
    created: int
    model: str
    data: _containers.RepeatedCompositeFieldContainer[ScoreData]
    usage: _common_pb2.Usage
    def __init__(self, id: _Optional[str] = ..., object: _Optional[str] = ..., created: _Optional[int] = ..., model: _Optional[str] = ..., data: _Optional[_Iterable[_Union[ScoreData, _Mapping]]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ...) -> None: ...

class RerankRequest(_message.Message):
    __slots__ = ("model", "query", "documents", "top_n", "user", "use_activation", "truncate_prompt_tokens", "truncation_side", "max_tokens_per_query", "max_tokens_per_doc", "instruction", "chat_template_kwargs", "request_id", "priority")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOP_N_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    USE_ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATION_SIDE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_QUERY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_PER_DOC_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    model: str
    query: _struct_pb2.Value
    documents: _struct_pb2.Value
    top_n: int
    user: str
    use_activation: bool
    truncate_prompt_tokens: int
    truncation_side: str
    max_tokens_per_query: int
    max_tokens_per_doc: int
    instruction: str
    chat_template_kwargs: _struct_pb2.Struct
    request_id: str
    priority: int
    def __init__(self, model: _Optional[str] = ..., query: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., documents: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., top_n: _Optional[int] = ..., user: _Optional[str] = ..., use_activation: _Optional[bool] = ..., truncate_prompt_tokens: _Optional[int] = ..., truncation_side: _Optional[str] = ..., max_tokens_per_query: _Optional[int] = ..., max_tokens_per_doc: _Optional[int] = ..., instruction: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., request_id: _Optional[str] = ..., priority: _Optional[int] = ...) -> None: ...

class RerankDocument(_message.Message):
    __slots__ = ("text", "multi_modal")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MULTI_MODAL_FIELD_NUMBER: _ClassVar[int]
    text: str
    multi_modal: _struct_pb2.Value
    def __init__(self, text: _Optional[str] = ..., multi_modal: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...

class RerankResult(_message.Message):
    __slots__ = ("index", "document", "relevance_score")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_SCORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    document: RerankDocument
    relevance_score: float
    def __init__(self, index: _Optional[int] = ..., document: _Optional[_Union[RerankDocument, _Mapping]] = ..., relevance_score: _Optional[float] = ...) -> None: ...

class RerankUsage(_message.Message):
    __slots__ = ("prompt_tokens", "total_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    total_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class RerankResponse(_message.Message):
    __slots__ = ("id", "model", "usage", "results")
    ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    model: str
    usage: RerankUsage
    results: _containers.RepeatedCompositeFieldContainer[RerankResult]
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ..., usage: _Optional[_Union[RerankUsage, _Mapping]] = ..., results: _Optional[_Iterable[_Union[RerankResult, _Mapping]]] = ...) -> None: ...

class CohereEmbedRequest(_message.Message):
    __slots__ = ("model", "input_type", "texts", "images", "inputs", "output_dimension", "embedding_types", "truncate", "max_tokens", "priority", "request_id")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_DIMENSION_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_TYPES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    model: str
    input_type: str
    texts: _containers.RepeatedScalarFieldContainer[str]
    images: _containers.RepeatedScalarFieldContainer[str]
    inputs: _struct_pb2.ListValue
    output_dimension: int
    embedding_types: _containers.RepeatedScalarFieldContainer[str]
    truncate: str
    max_tokens: int
    priority: int
    request_id: str
    def __init__(self, model: _Optional[str] = ..., input_type: _Optional[str] = ..., texts: _Optional[_Iterable[str]] = ..., images: _Optional[_Iterable[str]] = ..., inputs: _Optional[_Union[_struct_pb2.ListValue, _Mapping]] = ..., output_dimension: _Optional[int] = ..., embedding_types: _Optional[_Iterable[str]] = ..., truncate: _Optional[str] = ..., max_tokens: _Optional[int] = ..., priority: _Optional[int] = ..., request_id: _Optional[str] = ...) -> None: ...

class CohereApiVersion(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: str
    def __init__(self, version: _Optional[str] = ...) -> None: ...

class CohereBilledUnits(_message.Message):
    __slots__ = ("input_tokens", "image_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    image_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., image_tokens: _Optional[int] = ...) -> None: ...

class CohereMeta(_message.Message):
    __slots__ = ("api_version", "billed_units")
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    BILLED_UNITS_FIELD_NUMBER: _ClassVar[int]
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits
    def __init__(self, api_version: _Optional[_Union[CohereApiVersion, _Mapping]] = ..., billed_units: _Optional[_Union[CohereBilledUnits, _Mapping]] = ...) -> None: ...

class CohereEmbedResponse(_message.Message):
    __slots__ = ("id", "embeddings", "texts", "meta", "response_type")
    ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TEXTS_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    embeddings: _struct_pb2.Struct
    texts: _containers.RepeatedScalarFieldContainer[str]
    meta: CohereMeta
    response_type: str
    def __init__(self, id: _Optional[str] = ..., embeddings: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., texts: _Optional[_Iterable[str]] = ..., meta: _Optional[_Union[CohereMeta, _Mapping]] = ..., response_type: _Optional[str] = ...) -> None: ...
