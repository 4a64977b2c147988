from google.api import annotations_pb2 as _annotations_pb2
from google.api import httpbody_pb2 as _httpbody_pb2
from tokenwire.v1 import anthropic_pb2 as _anthropic_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import completion_pb2 as _completion_pb2
from tokenwire.v1 import generate_pb2 as _generate_pb2
from tokenwire.v1 import responses_pb2 as _responses_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
