"""The registry of request kinds: chat, completion, generate, each one
object (a `RequestKind`, inference/kind_base.py) living in its own package
(chat/kind.py, completion/kind.py, generate/kind.py).

The servicers, the event streams and the Session look a kind up — in KINDS
by name (SessionStart's `request` oneof; SessionResponse's `<name>_chunk` /
`<name>_result`) or use CHAT, COMPLETION, GENERATE — instead of branching on
it. A new kind is one package (its plan, run, stream and kind.py) and one
entry here."""

from __future__ import annotations

from tokenwire.server.inference.anthropic.kind import AnthropicKind
from tokenwire.server.inference.chat.kind import CHAT
from tokenwire.server.inference.completion.kind import COMPLETION
from tokenwire.server.inference.generate.kind import GENERATE
from tokenwire.server.inference.kind_base import AnyKind
from tokenwire.server.inference.responses.kind import ResponsesKind

KINDS: dict[str, AnyKind] = {kind.name: kind for kind in (CHAT, COMPLETION, GENERATE)}

# Anthropic's Messages API, run as a chat (the chat kind handed in: kinds
# never import one another). Not a Session kind (not in KINDS).
ANTHROPIC = AnthropicKind(CHAT)

# OpenAI's Responses API, run as a chat (the chat kind handed in, as for
# ANTHROPIC). Not a Session kind (not in KINDS).
RESPONSES = ResponsesKind(CHAT)
