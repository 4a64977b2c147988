"""`tokenwire chat` (interactive multi-turn) and `tokenwire complete`
(one shot), on the client library.

Text streams as it arrives. ``--show-tokens`` prints one line per token
instead (id, logprob, probability, the token's text, alternatives),
colored by probability. ``--json`` prints one JSON object per turn (text,
prompt/completion ids, logprobs) for scripts. Multi-turn chat keeps the
exact ids of each turn: turn N+1 continues turn N token for token (a
Session continuation, or ``--mode tokens`` for explicit token ids).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from tokenwire.client._common import DEFAULT_TARGET
from tokenwire.client.conversation import Conversation, Turn
from tokenwire.client.errors import TokenwireError
from tokenwire.client.sync_client import Client
from tokenwire.v1 import chat_pb2

RESET, DIM, BOLD = "\033[0m", "\033[2m", "\033[1m"
GREEN, YELLOW, RED, CYAN = "\033[32m", "\033[33m", "\033[31m", "\033[36m"
EXIT_WORDS = {"/exit", "/quit", "exit", "quit"}


def add_chat_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    chat = sub.add_parser(
        "chat", help="interactive multi-turn chat against a tokenwire server",
        description="Chat turn by turn; each turn continues the previous one token for token. "
        "Reads one user message per line (interactive or piped); /exit or EOF ends.",
    )
    _common_flags(chat)
    chat.add_argument("--mode", choices=("session", "tokens"), default="session",
                      help="send turn N+1 as a Session continuation (default) or as token ids")
    chat.set_defaults(func=run_chat)
    complete = sub.add_parser(
        "complete", help="one chat completion (prompt from the arguments or stdin)",
    )
    complete.add_argument("prompt", nargs="*", help="the user message (default: read stdin)")
    _common_flags(complete)
    complete.set_defaults(func=run_complete, mode="tokens")


def _common_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=os.environ.get("TOKENWIRE_SERVER", DEFAULT_TARGET),
                   help=f"server address (default $TOKENWIRE_SERVER or {DEFAULT_TARGET})")
    p.add_argument("--system", help="a system message")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens per answer (default 256)")
    p.add_argument("--temperature", type=float, help="sampling temperature (server default 1.0)")
    p.add_argument("--top-p", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("--show-tokens", action="store_true",
                   help="show every token: id, logprob, probability, text (colored)")
    p.add_argument("--top-logprobs", type=int, default=0,
                   help="with --show-tokens: also show this many alternatives per token")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per turn (text, ids, logprobs) and nothing else")
    p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--cache-salt", help="salt the prefix cache (per tenant)")
    p.add_argument("--speculative-prefill", action="store_true",
                   help="ask the server to warm the next turn's prefix after each turn")
    p.add_argument("--timeout", type=float, default=300.0, help="deadline per turn in seconds")
    p.add_argument("--api-key", help="API key (default $TOKENWIRE_API_KEY), sent as a bearer token")
    p.add_argument("--tls", action="store_true", help="connect over TLS (system roots)")
    p.add_argument("--tls-ca", help="PEM file of the CA to trust (implies --tls)")


class Printer:
    """Streams one turn to a terminal: text, or one line per token."""

    def __init__(self, out: TextIO, *, show_tokens: bool, color: bool):
        self.out = out
        self.show_tokens = show_tokens
        self.color = color
        self.position = 0

    def paint(self, text: str, *codes: str) -> str:
        return "".join(codes) + text + RESET if self.color and codes else text

    def begin(self) -> None:
        self.position = 0
        if self.show_tokens:
            self.out.write(
                self.paint(f"{'#':>4} {'id':>6} {'logprob':>9} {'prob':>7}  token\n", DIM)
            )

    def chunk(self, chunk: chat_pb2.StreamChatCompletionResponse) -> None:
        for choice in chunk.choices:
            if choice.index != 0:
                continue
            if not self.show_tokens:
                self.out.write(choice.delta.content)
                continue
            entries = list(choice.logprobs.content)
            for i, tid in enumerate(choice.token_ids):
                self._token_line(tid, entries[i] if i < len(entries) else None)
        self.out.flush()

    def _token_line(self, tid: int, entry: Any) -> None:
        if entry is None:
            self.out.write(f"{self.position:>4} {tid:>6}\n")
        else:
            lp = entry.logprob
            p = math.exp(lp)
            shade = GREEN if p >= 0.5 else YELLOW if p >= 0.1 else RED
            text = self.paint(repr(entry.token), BOLD, shade)
            line = (f"{self.position:>4} {self.paint(f'{tid:>6}', CYAN)} {lp:>9.4f} "
                    f"{self.paint(f'{p:>6.1%}', shade)}  {text}")
            alts = [a for a in entry.top_logprobs if a.token_id != tid]
            if alts:
                shown = ", ".join(f"{a.token!r} {math.exp(a.logprob):.1%}" for a in alts)
                line += self.paint(f"   alt: {shown}", DIM)
            self.out.write(line + "\n")
        self.position += 1

    def end(self, turn: Turn) -> None:
        if not self.show_tokens:
            self.out.write("\n")
        summary = (
            f"[{len(turn.prompt_ids)} prompt ids ({turn.cached_tokens} cached), "
            f"{len(turn.completion_ids)} completion ids, finish {turn.finish_reason}]"
        )
        if self.show_tokens:
            self.out.write(self.paint(summary, DIM) + "\n")
        self.out.flush()


def turn_json(n: int, turn: Turn) -> str:
    return json.dumps({
        "turn": n,
        "request_id": turn.request_id,
        "text": turn.text,
        "finish_reason": turn.finish_reason,
        "prompt_ids": turn.prompt_ids,
        "completion_ids": turn.completion_ids,
        "logprobs": turn.logprobs,
        "suffix_ids": turn.suffix_ids,
        "cached_tokens": turn.cached_tokens,
    })


def _client(ns: argparse.Namespace) -> Client:
    roots = None
    if ns.tls_ca:
        with open(ns.tls_ca, "rb") as f:
            roots = f.read()
    return Client(ns.server, timeout=ns.timeout, api_key=ns.api_key, tls=ns.tls,
                  root_certificates=roots)


def _conversation(ns: argparse.Namespace, client: Client) -> Conversation:
    fields: dict[str, Any] = {"max_tokens": ns.max_tokens}
    for name in ("temperature", "top_p", "seed"):
        if getattr(ns, name) is not None:
            fields[name] = getattr(ns, name)
    if ns.top_logprobs:
        fields["top_logprobs"] = ns.top_logprobs
    return Conversation(
        client, mode=ns.mode, system=ns.system, cache_salt=ns.cache_salt,
        speculative_prefill=ns.speculative_prefill, **fields,
    )


def _use_color(ns: argparse.Namespace, out: TextIO) -> bool:
    if ns.color == "auto":
        return out.isatty() and "NO_COLOR" not in os.environ
    return bool(ns.color == "always")


def _one_turn(conv: Conversation, message: str, printer: Printer | None, n: int) -> Turn:
    if printer is None:  # --json: no streaming output
        turn = conv.send(message)
        print(turn_json(n, turn), flush=True)
        return turn
    printer.begin()
    stream = conv.stream(message)
    try:
        for chunk in stream:
            printer.chunk(chunk)
    except KeyboardInterrupt:
        stream.close()  # cancels the request in the engine
        printer.out.write("\n[interrupted]\n")
        raise
    turn = conv.turns[-1]
    printer.end(turn)
    return turn


def run_chat(ns: argparse.Namespace, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    stdin = stdin or sys.stdin
    out = out or sys.stdout
    interactive = stdin.isatty() and not ns.json
    printer = (
        None if ns.json else Printer(out, show_tokens=ns.show_tokens, color=_use_color(ns, out))
    )
    paint: Callable[[str, str], str] = (
        printer.paint if printer is not None else (lambda text, *codes: text)
    )
    with _client(ns) as client, _conversation(ns, client) as conv:
        if interactive:
            out.write(paint(f"tokenwire chat with {ns.server} — /exit or Ctrl-D to leave\n", DIM))
        while True:
            if interactive:
                out.write(paint("you> ", BOLD))
                out.flush()
            line = stdin.readline()
            if not line:
                break
            message = line.rstrip("\n")
            if not message.strip():
                continue
            if message.strip() in EXIT_WORDS:
                break
            if interactive:
                out.write(paint("assistant> ", BOLD))
            try:
                _one_turn(conv, message, printer, len(conv.turns) + 1)
            except KeyboardInterrupt:
                if not interactive:
                    return 130
            except TokenwireError as exc:
                print(f"error: {exc}", file=sys.stderr)
                if not interactive:
                    return 1
    return 0


def run_complete(
    ns: argparse.Namespace, stdin: TextIO | None = None, out: TextIO | None = None
) -> int:
    out = out or sys.stdout
    message = " ".join(ns.prompt) if ns.prompt else (stdin or sys.stdin).read().strip()
    if not message:
        print("error: give a prompt as arguments or on stdin", file=sys.stderr)
        return 2
    printer = (
        None if ns.json else Printer(out, show_tokens=ns.show_tokens, color=_use_color(ns, out))
    )
    try:
        with _client(ns) as client, _conversation(ns, client) as conv:
            _one_turn(conv, message, printer, 1)
    except TokenwireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
