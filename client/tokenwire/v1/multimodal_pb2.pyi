from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageInput(_message.Message):
    __slots__ = ("data", "mime_type", "url")
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    mime_type: str
    url: str
    def __init__(self, data: _Optional[bytes] = ..., mime_type: _Optional[str] = ..., url: _Optional[str] = ...) -> None: ...

class ContentPart(_message.Message):
    __slots__ = ("text", "image")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    text: str
    image: ImageInput
    def __init__(self, text: _Optional[str] = ..., image: _Optional[_Union[ImageInput, _Mapping]] = ...) -> None: ...

class PlaceholderRange(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class MultiModalPlaceholders(_message.Message):
    __slots__ = ("image",)
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    image: _containers.RepeatedCompositeFieldContainer[PlaceholderRange]
    def __init__(self, image: _Optional[_Iterable[_Union[PlaceholderRange, _Mapping]]] = ...) -> None: ...

class TokenMediaPart(_message.Message):
    __slots__ = ("type", "url", "uuid", "image")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    type: str
    url: str
    uuid: str
    image: ImageInput
    def __init__(self, type: _Optional[str] = ..., url: _Optional[str] = ..., uuid: _Optional[str] = ..., image: _Optional[_Union[ImageInput, _Mapping]] = ...) -> None: ...

class MultiModalFeatureItem(_message.Message):
    __slots__ = ("modality", "hash", "placeholder", "kwargs_data")
    MODALITY_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    KWARGS_DATA_FIELD_NUMBER: _ClassVar[int]
    modality: str
    hash: str
    placeholder: PlaceholderRange
    kwargs_data: bytes
    def __init__(self, modality: _Optional[str] = ..., hash: _Optional[str] = ..., placeholder: _Optional[_Union[PlaceholderRange, _Mapping]] = ..., kwargs_data: _Optional[bytes] = ...) -> None: ...

class MultiModalFeatures(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[MultiModalFeatureItem]
    def __init__(self, items: _Optional[_Iterable[_Union[MultiModalFeatureItem, _Mapping]]] = ...) -> None: ...
