"""CPU-heavy request preparation off the event loop.

Rendering a chat template and tokenizing a prompt are pure CPU. Small
requests (the common case) are prepared inline: a thread hop would cost
more than it saves. Two kinds go to a worker thread, so the event loop
keeps serving every stream and health check meanwhile:

* requests carrying their own chat template (only with
  --trust-request-chat-template): one thread of their own, and a time
  bound (--request-template-timeout-seconds; past it the caller gets
  INVALID_ARGUMENT TEMPLATE_TIMEOUT). Python cannot stop a running thread,
  so a runaway template keeps that one thread busy; later request
  templates queue behind it and time out too, while everything else goes
  on. The rendered text is also bounded in size before it is tokenized.
* large prompts (over OFFLOAD_CHARS characters): one thread, no time bound
  (their size is bounded by the cheap length check before, which runs
  first on the thread).

A request's weight is found by a bounded look (prompt_chars.weighs_over:
every string in the body counts; a body of more items than it looks at,
many messages, blocks, inputs or documents, counts as heavy), so weighing
costs the event loop a few hundred fields at most, whatever the body. The
same rule serves a body of any shape (`prepare`): chat, completion,
generate, tokenize, the pooling routes (inputs, documents,
conversations), and a Messages or Responses body before its conversion to
a chat.

The same rule serves every rendering a request causes, not only its own
prompt's (`Offload.run`): a Session continuation's next messages and the
turn template a speculative prefill probes (inference/turns.py) render with
the request's template and tools.

Each thread's queue is bounded too (--max-offload-queue requests waiting
for it or on it): beyond, the caller gets RESOURCE_EXHAUSTED
OFFLOAD_QUEUE_FULL with a retry hint, as admission refuses a full server,
instead of the queue (and the request bodies it holds) growing without end.
A request counts until its work really ends (a timed-out template still
running on its thread counts).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tokenwire.server.core.admission import RETRY_AFTER_SECONDS
from tokenwire.server.core.errors import InvalidArgument, ResourceExhausted
from tokenwire.server.inference.shared.messages import has_request_template
from tokenwire.server.inference.shared.prompt_chars import weighs_over

T = TypeVar("T")
OFFLOAD_CHARS = 32_768  # prompts longer than this are prepared on a worker thread


class _Worker:
    """One worker thread and its bounded queue."""

    def __init__(self, name: str, max_queue: int):
        self.name = name
        self.max_queue = max_queue
        self.pending = 0  # submitted and not yet ended (queued or running)
        self._lock = threading.Lock()  # `pending` drops on the worker thread
        self._pool = concurrent.futures.ThreadPoolExecutor(1, f"tokenwire-{name}")

    def submit(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        with self._lock:
            if self.max_queue and self.pending >= self.max_queue:
                raise ResourceExhausted(
                    f"the server is full: {self.pending} requests wait for its {self.name} "
                    f"thread (limit {self.max_queue}, --max-offload-queue); retry later",
                    reason="OFFLOAD_QUEUE_FULL", retry_after=RETRY_AFTER_SECONDS,
                )
            self.pending += 1
        future = self._pool.submit(fn)
        future.add_done_callback(self._ended)  # run, failed, or cancelled while queued
        return asyncio.wrap_future(future)

    def _ended(self, _: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self.pending -= 1

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Offload:
    def __init__(self, template_timeout: float, max_queue: int = 0):
        self.template_timeout = template_timeout
        self.prompts = _Worker("prompts", max_queue)
        self.templates = _Worker("templates", max_queue)

    async def prompt(self, fn: Callable[[], T]) -> T:
        """Run `fn` (a large prompt's preparation) on the prompt thread."""
        return await self.prompts.submit(fn)

    async def prepare(self, req: Any, fn: Callable[[], T]) -> T:
        """Run a request's own preparation `fn` (validation, converting,
        rendering, tokenizing): with its own template on the template
        thread, when its body weighs over OFFLOAD_CHARS (a bounded look) on
        the prompt thread, else inline (as `run`). `req`: a protobuf
        request of any shape."""
        return await self.run(fn, own_template=has_request_template(req),
                              heavy=weighs_over((req,), OFFLOAD_CHARS))

    async def run(self, fn: Callable[[], T], *, own_template: bool, heavy: bool) -> T:
        """Run `fn` (rendering, tokenizing) where its weight says: with a
        request's own template on the template thread, within the time
        bound; when `heavy` (over OFFLOAD_CHARS) on the prompt thread; else
        inline. Both threads' queue limits apply."""
        if own_template:
            return await self.template(fn)
        if heavy:
            return await self.prompt(fn)
        return fn()

    async def template(self, fn: Callable[[], T]) -> T:
        """Run `fn` (a request template's rendering) on the template thread,
        within the time bound."""
        future = self.templates.submit(fn)
        try:
            return await asyncio.wait_for(future, self.template_timeout)
        except TimeoutError:
            raise InvalidArgument(
                f"chat_template: rendering the request's template took more than "
                f"{self.template_timeout:g}s (--request-template-timeout-seconds)",
                param="chat_template", reason="TEMPLATE_TIMEOUT",
            ) from None

    def shutdown(self) -> None:
        for worker in (self.prompts, self.templates):
            worker.shutdown()
