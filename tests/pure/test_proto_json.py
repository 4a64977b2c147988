"""proto_json prints every tokenwire.v1 message as protobuf's own JSON
printer does with the transcoder's options (field names kept, enums by name,
absent fields omitted): random messages of every type, compared with
``json_format.MessageToDict``."""

from __future__ import annotations

import base64
import json
import math
import random

import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.descriptor import FieldDescriptor as F

from tokenwire.server.inference.shared import proto_json
from tokenwire.v1 import (
    chat_pb2,
    common_pb2,
    completion_pb2,
    control_pb2,
    generate_pb2,
    models_pb2,
    session_pb2,
    tokenize_pb2,
)

FILES = [chat_pb2, common_pb2, completion_pb2, control_pb2, generate_pb2, models_pb2, session_pb2,
         tokenize_pb2]
TYPES = sorted({m.full_name: m for f in FILES for m in f.DESCRIPTOR.message_types_by_name.values()}
               .items())
FLOATS = [0.0, -0.0, 1.0, -0.5, 0.1, 1e-8, 3.4e38, -123.456, math.inf, -math.inf, -2.3025851]


def _value(rng: random.Random, depth: int) -> struct_pb2.Value:
    kind = rng.randrange(6 if depth < 2 else 4)
    v = struct_pb2.Value()
    if kind == 0:
        v.null_value = struct_pb2.NULL_VALUE
    elif kind == 1:
        v.number_value = rng.choice([0.0, 1.0, -7.0, 0.25, 2.0**60, 1e-3])
    elif kind == 2:
        v.string_value = rng.choice(["", "x", 'q"\\\u2603\n'])
    elif kind == 3:
        v.bool_value = rng.random() < 0.5
    elif kind == 4:
        for i in range(rng.randrange(3)):
            v.struct_value.fields[f"k{i}"].CopyFrom(_value(rng, depth + 1))
    else:
        v.list_value.values.extend(_value(rng, depth + 1) for _ in range(rng.randrange(3)))
    return v


def _scalar(rng: random.Random, field):
    t = field.type
    if t == F.TYPE_BOOL:
        return rng.random() < 0.5
    if t == F.TYPE_STRING:
        return rng.choice(["", "a", "caf\u00e9 \u2603", 'quote " back \\ nl \n', "</script>"])
    if t == F.TYPE_BYTES:
        return rng.choice([b"", b"\x00\x01\xff", b"npy" * 7])
    if t == F.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values])
    if t in (F.TYPE_FLOAT, F.TYPE_DOUBLE):
        return rng.choice(FLOATS)
    if t in (F.TYPE_UINT32, F.TYPE_FIXED32):
        return rng.choice([0, 1, 4294967295])
    if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return rng.choice([0, -1, 2147483647])
    if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return rng.choice([0, 2**63 + 5])
    return rng.choice([0, -(2**62)])  # signed 64-bit


def _fill(msg, rng: random.Random, depth: int = 0) -> None:
    for field in msg.DESCRIPTOR.fields:
        if rng.random() < 0.3:
            continue
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map:
            target = getattr(msg, field.name)
            value_field = field.message_type.fields_by_name["value"]
            for i in range(rng.randrange(3)):
                key = (
                    f"k{i}" if field.message_type.fields_by_name["key"].type == F.TYPE_STRING else i
                )
                if value_field.type == F.TYPE_MESSAGE:
                    if value_field.message_type.full_name == "google.protobuf.Value":
                        target[key].CopyFrom(_value(rng, depth))
                    elif depth < 3:
                        _fill(target[key], rng, depth + 1)
                else:
                    target[key] = _scalar(rng, value_field)
        elif field.type == F.TYPE_MESSAGE:
            name = field.message_type.full_name
            if depth >= 3 and name.startswith("tokenwire."):
                continue
            count = rng.randrange(3) if field.is_repeated else 1
            for _ in range(count):
                if name == "google.protobuf.Value":
                    item = _value(rng, depth)
                elif name == "google.protobuf.Struct":
                    item = (
                        _value(rng, 1).struct_value if rng.random() < 0.5 else struct_pb2.Struct()
                    )
                elif name == "google.protobuf.ListValue":
                    item = struct_pb2.ListValue(values=[_value(rng, 1)])
                else:
                    item = None
                if field.is_repeated:
                    target = getattr(msg, field.name).add()
                else:
                    target = getattr(msg, field.name)
                    target.SetInParent()
                if item is not None:
                    target.CopyFrom(item)
                elif not name.startswith("google.protobuf."):
                    _fill(target, rng, depth + 1)
        elif field.is_repeated:
            getattr(msg, field.name).extend(_scalar(rng, field) for _ in range(rng.randrange(4)))
        else:
            setattr(msg, field.name, _scalar(rng, field))


def _normal(obj):
    """JSON-equal, with NaN-free floats compared as numbers (1 == 1.0)."""
    return json.loads(json.dumps(obj))


@pytest.mark.parametrize(("name", "descriptor"), TYPES, ids=[n for n, _ in TYPES])
def test_every_message_type_prints_as_protobuf_does(name, descriptor) -> None:
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(descriptor)
    rng = random.Random(name)
    for _ in range(30):
        msg = cls()
        _fill(msg, rng)
        want = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        got = json.loads(proto_json.to_json(msg))
        assert _normal(got) == _normal(want), msg


def test_values_follow_proto3_json() -> None:
    chunk = chat_pb2.StreamChatCompletionResponse(id="x", created=0)
    choice = chunk.choices.add(index=0)  # optional: zero printed
    choice.logprobs.content.add(token="a", logprob=-2.3025851, bytes=[97])
    choice.logprobs.content.add(token="b", logprob=-math.inf)
    got = json.loads(proto_json.to_json(chunk))
    assert got == {"id": "x", "choices": [{"index": 0, "logprobs": {"content": [
        {"token": "a", "logprob": -2.3025851, "bytes": [97]},
        {"token": "b", "logprob": "-Infinity"},
    ]}}]}
    value = struct_pb2.Value(number_value=3.0)
    assert proto_json.to_json(value) == b"3"
    assert proto_json.to_json(struct_pb2.Value(null_value=0)) == b"null"
    assert proto_json._bytes(b"\xff\x00") == base64.b64encode(b"\xff\x00").decode()
