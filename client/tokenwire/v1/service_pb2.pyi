from google.api import annotations_pb2 as _annotations_pb2
from tokenwire.v1 import anthropic_pb2 as _anthropic_pb2
from tokenwire.v1 import chat_pb2 as _chat_pb2
from tokenwire.v1 import completion_pb2 as _completion_pb2
from tokenwire.v1 import embeddings_pb2 as _embeddings_pb2
from tokenwire.v1 import generate_pb2 as _generate_pb2
from tokenwire.v1 import models_pb2 as _models_pb2
from tokenwire.v1 import responses_pb2 as _responses_pb2
from tokenwire.v1 import session_pb2 as _session_pb2
from tokenwire.v1 import sglang_pb2 as _sglang_pb2
from tokenwire.v1 import tokenize_pb2 as _tokenize_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
