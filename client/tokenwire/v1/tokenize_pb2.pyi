from google.protobuf import struct_pb2 as _struct_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenizeRequest(_message.Message):
    __slots__ = ("model", "prompt", "messages", "add_generation_prompt", "continue_final_message", "add_special_tokens", "chat_template", "chat_template_kwargs", "tools", "return_token_strs", "next_turn", "previous_completion_ids")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ADD_GENERATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    CONTINUE_FINAL_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ADD_SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_KWARGS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    RETURN_TOKEN_STRS_FIELD_NUMBER: _ClassVar[int]
    NEXT_TURN_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_COMPLETION_IDS_FIELD_NUMBER: _ClassVar[int]
    model: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[_chat_pb2.ChatMessage]
    add_generation_prompt: bool
    continue_final_message: bool
    add_special_tokens: bool
    chat_template: str
    chat_template_kwargs: _struct_pb2.Struct
    tools: _containers.RepeatedCompositeFieldContainer[_chat_pb2.Tool]
    return_token_strs: bool
    next_turn: bool
    previous_completion_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_chat_pb2.ChatMessage, _Mapping]]] = ..., add_generation_prompt: _Optional[bool] = ..., continue_final_message: _Optional[bool] = ..., add_special_tokens: _Optional[bool] = ..., chat_template: _Optional[str] = ..., chat_template_kwargs: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., tools: _Optional[_Iterable[_Union[_chat_pb2.Tool, _Mapping]]] = ..., return_token_strs: _Optional[bool] = ..., next_turn: _Optional[bool] = ..., previous_completion_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ("count", "max_model_len", "tokens", "token_strs")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_STRS_FIELD_NUMBER: _ClassVar[int]
    count: int
    max_model_len: int
    tokens: _containers.RepeatedScalarFieldContainer[int]
    token_strs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, count: _Optional[int] = ..., max_model_len: _Optional[int] = ..., tokens: _Optional[_Iterable[int]] = ..., token_strs: _Optional[_Iterable[str]] = ...) -> None: ...

class DetokenizeRequest(_message.Message):
    __slots__ = ("model", "tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokens: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, model: _Optional[str] = ..., tokens: _Optional[_Iterable[int]] = ...) -> None: ...

class DetokenizeResponse(_message.Message):
    __slots__ = ("prompt",)
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    prompt: str
    def __init__(self, prompt: _Optional[str] = ...) -> None: ...
