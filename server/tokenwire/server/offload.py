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
  (their size is bounded by the cheap length check before).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import TypeVar

from tokenwire.server.errors import InvalidArgument

T = TypeVar("T")
OFFLOAD_CHARS = 32_768  # prompts longer than this are prepared on a worker thread


class Offload:
    def __init__(self, template_timeout: float):
        self.template_timeout = template_timeout
        self._prompts = concurrent.futures.ThreadPoolExecutor(1, "tokenwire-prompts")
        self._templates = concurrent.futures.ThreadPoolExecutor(1, "tokenwire-templates")

    async def prompt(self, fn: Callable[[], T]) -> T:
        """Run `fn` (a large prompt's preparation) on the prompt thread."""
        return await asyncio.get_running_loop().run_in_executor(self._prompts, fn)

    async def template(self, fn: Callable[[], T]) -> T:
        """Run `fn` (a request template's rendering) on the template thread,
        within the time bound."""
        future = asyncio.get_running_loop().run_in_executor(self._templates, fn)
        try:
            return await asyncio.wait_for(future, self.template_timeout)
        except TimeoutError:
            raise InvalidArgument(
                f"chat_template: rendering the request's template took more than "
                f"{self.template_timeout:g}s (--request-template-timeout-seconds)",
                param="chat_template", reason="TEMPLATE_TIMEOUT",
            ) from None

    def shutdown(self) -> None:
        for pool in (self._prompts, self._templates):
            pool.shutdown(wait=False, cancel_futures=True)
