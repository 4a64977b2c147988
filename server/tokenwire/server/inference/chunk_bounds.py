"""A stream's chunks kept under the gRPC message limit (issue #32 item 8).

One engine output can carry many tokens: stream_interval holds k of them
back, and vLLM merges the deltas a slow reader has not taken yet. Built as
one chunk, with a logprob entry and its top_logprobs alternatives per
token, it could pass the message limit and end the stream with
RESOURCE_EXHAUSTED, the ids lost to the client. `ChunkBounds.pieces` hands
an output through as it is when even its worst case fits (one length per
choice: the per-token path stays as it was); otherwise it cuts it into
pieces the stream builders take as they take outputs, each estimated under
half the limit:

1. the prompt's piece (no ids): the first output's prompt ids, prompt
   logprobs and completion's echo, each kind's first message, alone;
2. per choice, runs of its ids with their logprobs, in order; the choice's
   text with its last run (or alone, in runs of characters, when long);
3. the finish (finish and stop reasons, weight spans, routed experts, the
   whole-completion nvext the builders add to it), in a last piece of no ids.

So every id reaches the client exactly once, in order, with its logprobs,
in more chunks; the SSE event streams and a Session's chunk events carry
the same chunks. Sizes are estimated as JSON (the SSE rendering, the
largest): ids, text and logprob entries by their token's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenwire.server.core.domain import ChoiceOutput, Engine, EngineOutput, PositionLogprobs

DEFAULT_MESSAGE_LIMIT = 16 * 1024 * 1024  # ServerSettings.max_message_bytes's default
ID_BYTES = 12  # an id in token_ids / completion_token_ids, with its separator
ENTRY_BYTES = 96  # a logprob entry's fixed fields ("token_id:N", logprob, rank, keys)
BYTES_PER_TOKEN_BYTE = 10  # a token's byte as escaped text (<= 6) and in `bytes` (<= 4)
BYTES_PER_CHAR = 6  # a text character, JSON-escaped at worst


class ChunkBounds:
    """The bound of one stream's chunks (`limit`: the message limit)."""

    def __init__(self, engine: Engine, logprobs: int | None, limit: int = DEFAULT_MESSAGE_LIMIT):
        self._engine = engine
        self.budget = max(limit // 2, 1)  # the rest: the chunk's own fields, a Session's event
        longest = engine.max_token_chars * 4  # bytes (UTF-8)
        # Entries per position: the sampled token and up to k + 1 alternatives.
        entries = 0 if logprobs is None else logprobs + 2
        worst = (ID_BYTES + BYTES_PER_CHAR * engine.max_token_chars
                 + entries * (ENTRY_BYTES + BYTES_PER_TOKEN_BYTE * longest))
        self.safe_tokens = self.budget // worst  # an output this long fits unexamined

    def pieces(self, out: EngineOutput) -> Sequence[EngineOutput]:
        """`out` as the outputs its chunks are built from: itself when it
        surely fits (the common case), else its pieces (the module's doc)."""
        choices = out.choices
        tokens = (len(choices[0].token_ids) if len(choices) == 1
                  else sum(len(c.token_ids) for c in choices))
        if tokens <= self.safe_tokens:
            return (out,)
        return self.split(out)

    def split(self, out: EngineOutput) -> list[EngineOutput]:
        def piece(choices: list[ChoiceOutput]) -> EngineOutput:
            return EngineOutput(choices, out.prompt_token_ids, out.num_cached_tokens, False,
                                times=out.times)

        head = piece([_part(c, [], "", None) for c in out.choices])
        head.prompt_logprobs = out.prompt_logprobs
        pieces = [head]
        for c in out.choices:
            runs, last_size = self._runs(c)
            text = c.text
            text_alone = bool(text) and last_size + BYTES_PER_CHAR * len(text) > self.budget
            for k, (start, end) in enumerate(runs):
                last = k == len(runs) - 1
                lps = None if c.logprobs is None else c.logprobs[start:end]
                pieces.append(piece([_part(c, c.token_ids[start:end],
                                           text if last and not text_alone else "", lps)]))
            if text_alone:
                step = max(self.budget // BYTES_PER_CHAR, 1)
                pieces.extend(piece([_part(c, [], text[i:i + step], None)])
                              for i in range(0, len(text), step))
        ending = [c for c in out.choices if c.finish_reason is not None]
        if ending or out.finished:
            tail = piece([_part(c, [], "", None, finish=True) for c in ending])
            tail.finished = out.finished
            pieces.append(tail)
        return pieces

    def _runs(self, c: ChoiceOutput) -> tuple[list[tuple[int, int]], int]:
        """`c`'s ids cut into runs (start, end) under the budget, at least
        one id each; and the last run's estimated size."""
        runs: list[tuple[int, int]] = []
        start = size = 0
        lps = c.logprobs
        for i, tid in enumerate(c.token_ids):
            cost = self._cost(tid, lps[i] if lps is not None and i < len(lps) else None)
            if size and size + cost > self.budget:
                runs.append((start, i))
                start, size = i, 0
            size += cost
        runs.append((start, len(c.token_ids)))
        return runs, size

    def _cost(self, token_id: int, pos: PositionLogprobs | None) -> int:
        token_bytes = self._engine.token_bytes
        cost = ID_BYTES + BYTES_PER_CHAR * len(token_bytes(token_id))
        if pos is not None:
            for tid in (pos.token_id, *(cand.token_id for cand in pos.top)):
                cost += ENTRY_BYTES + BYTES_PER_TOKEN_BYTE * len(token_bytes(tid))
        return cost


def _part(c: ChoiceOutput, ids: list[int], text: str, lps: list[PositionLogprobs] | None,
          finish: bool = False) -> ChoiceOutput:
    """A piece of choice `c`: some of its ids (and their logprobs) or text;
    with `finish`, its finish (finish_reason and what comes with it)."""
    if lps is None and c.logprobs is not None:
        lps = []  # logprobs were asked: an empty list, as the engine sends
    if not finish:
        return ChoiceOutput(c.index, ids, text, lps)
    return ChoiceOutput(c.index, ids, text, lps, c.finish_reason, c.stop_reason,
                        c.weight_versions, c.routed_experts)
