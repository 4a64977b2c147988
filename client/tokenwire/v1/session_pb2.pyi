from google.rpc import code_pb2 as _code_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import completion_pb2 as _completion_pb2
from tokenwire.v1 import generate_pb2 as _generate_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SessionRequest(_message.Message):
    __slots__ = ("start", "cancel", "close")
    START_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    start: SessionStart
    cancel: SessionCancel
    close: SessionClose
    def __init__(self, start: _Optional[_Union[SessionStart, _Mapping]] = ..., cancel: _Optional[_Union[SessionCancel, _Mapping]] = ..., close: _Optional[_Union[SessionClose, _Mapping]] = ...) -> None: ...

class SessionStart(_message.Message):
    __slots__ = ("request_id", "chat", "generate", "completion", "continuation")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHAT_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    chat: _chat_pb2.CreateChatCompletionRequest
    generate: _generate_pb2.GenerateRequest
    completion: _completion_pb2.CreateCompletionRequest
    continuation: Continuation
    def __init__(self, request_id: _Optional[str] = ..., chat: _Optional[_Union[_chat_pb2.CreateChatCompletionRequest, _Mapping]] = ..., generate: _Optional[_Union[_generate_pb2.GenerateRequest, _Mapping]] = ..., completion: _Optional[_Union[_completion_pb2.CreateCompletionRequest, _Mapping]] = ..., continuation: _Optional[_Union[Continuation, _Mapping]] = ...) -> None: ...

class Continuation(_message.Message):
    __slots__ = ("previous_request_id", "choice_index", "suffix_token_ids", "messages")
    PREVIOUS_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHOICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    previous_request_id: str
    choice_index: int
    suffix_token_ids: _containers.RepeatedScalarFieldContainer[int]
    messages: _containers.RepeatedCompositeFieldContainer[_chat_pb2.ChatMessage]
    def __init__(self, previous_request_id: _Optional[str] = ..., choice_index: _Optional[int] = ..., suffix_token_ids: _Optional[_Iterable[int]] = ..., messages: _Optional[_Iterable[_Union[_chat_pb2.ChatMessage, _Mapping]]] = ...) -> None: ...

class SessionCancel(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class SessionClose(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ("request_id", "chat_chunk", "chat_result", "generate_chunk", "generate_result", "completion_chunk", "completion_result", "done", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CHAT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    CHAT_RESULT_FIELD_NUMBER: _ClassVar[int]
    GENERATE_CHUNK_FIELD_NUMBER: _ClassVar[int]
    GENERATE_RESULT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_CHUNK_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_RESULT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    chat_chunk: _chat_pb2.StreamChatCompletionResponse
    chat_result: _chat_pb2.CreateChatCompletionResponse
    generate_chunk: _generate_pb2.GenerateResponse
    generate_result: _generate_pb2.GenerateResponse
    completion_chunk: _completion_pb2.StreamCompletionResponse
    completion_result: _completion_pb2.CreateCompletionResponse
    done: SessionRequestDone
    error: SessionRequestError
    def __init__(self, request_id: _Optional[str] = ..., chat_chunk: _Optional[_Union[_chat_pb2.StreamChatCompletionResponse, _Mapping]] = ..., chat_result: _Optional[_Union[_chat_pb2.CreateChatCompletionResponse, _Mapping]] = ..., generate_chunk: _Optional[_Union[_generate_pb2.GenerateResponse, _Mapping]] = ..., generate_result: _Optional[_Union[_generate_pb2.GenerateResponse, _Mapping]] = ..., completion_chunk: _Optional[_Union[_completion_pb2.StreamCompletionResponse, _Mapping]] = ..., completion_result: _Optional[_Union[_completion_pb2.CreateCompletionResponse, _Mapping]] = ..., done: _Optional[_Union[SessionRequestDone, _Mapping]] = ..., error: _Optional[_Union[SessionRequestError, _Mapping]] = ...) -> None: ...

class SessionRequestDone(_message.Message):
    __slots__ = ("continuable", "prompt_token_ids", "suffix_token_ids", "speculative_prefill")
    CONTINUABLE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_PREFILL_FIELD_NUMBER: _ClassVar[int]
    continuable: bool
    prompt_token_ids: _containers.RepeatedScalarFieldContainer[int]
    suffix_token_ids: _containers.RepeatedScalarFieldContainer[int]
    speculative_prefill: bool
    def __init__(self, continuable: _Optional[bool] = ..., prompt_token_ids: _Optional[_Iterable[int]] = ..., suffix_token_ids: _Optional[_Iterable[int]] = ..., speculative_prefill: _Optional[bool] = ...) -> None: ...

class SessionRequestError(_message.Message):
    __slots__ = ("code", "message", "param", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARAM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: _code_pb2.Code
    message: str
    param: str
    reason: str
    def __init__(self, code: _Optional[_Union[_code_pb2.Code, str]] = ..., message: _Optional[str] = ..., param: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...
