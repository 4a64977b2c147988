"""The registry of fronts (inference/fronts.py) is the one place a kind is
named: every SessionStart request is a kind, and each kind's chunks and
results have their SessionResponse fields."""

from __future__ import annotations

from tokenwire.server.inference.fronts import KINDS
from tokenwire.v1 import session_pb2


def test_every_session_request_is_a_kind_with_its_event_fields() -> None:
    starts = {f.name for f in session_pb2.SessionStart.DESCRIPTOR.oneofs_by_name["request"].fields}
    assert set(KINDS) == starts == {"chat", "completion", "generate"}
    events = session_pb2.SessionResponse.DESCRIPTOR.fields_by_name
    for name in KINDS:
        assert f"{name}_chunk" in events and f"{name}_result" in events


def test_a_continuation_prompt_goes_where_each_kind_reads_ids() -> None:
    chat = KINDS["chat"].with_prompt(session_pb2.SessionStart().chat, [1, 2])
    completion = KINDS["completion"].with_prompt(session_pb2.SessionStart().completion, [3])
    generate = KINDS["generate"].with_prompt(session_pb2.SessionStart().generate, [4, 5])
    assert list(chat.nvext.token_data) == [1, 2]
    assert list(completion.nvext.token_data) == [3]
    assert list(generate.token_ids) == [4, 5]
