"""ControlService across several serving processes (--api-server-count N
with --enable-control).

The processes share one port, so a control call lands on any of them.
Process 0 runs every control operation: one lock orders them, one client of
the shared engine core carries them out, and one record keeps the pause
mode, update count and last error. Every other process relays ControlService
calls to process 0 over a private Unix socket, byte for byte with the
caller's metadata and deadline (access is checked where the call arrived,
and again by process 0), and mirrors process 0's paused flag and weight
version: it polls them, and process 0 tells every other process to read
them again after each control call that changed them (and after a weight
change, before generation resumes), so a call sent right after an update is
not refused by a process that has not looked yet. A bounded request, or a
call whose x-min-weight-version this process would refuse, reads them again
only when the last read is older than a mirror period (FRESH_S), and then
shares one read with every other call waiting for it (issue #32 item 10:
one control-state call per request to process 0 capped throughput under RL
load, where every request carries a bound). Tokens carry the engine core's
own version spans, exact in every process.

AbortRequests is the exception: each process holds its own requests, so the
process the call reaches aborts its own and asks every other process to
abort theirs (marked with LOCAL_HEADER: that process only).

Runtime LoRA: process 0 loads and unloads adapters in the shared engine core
(one numbering of loads), and pushes the adapters it serves (name -> folder,
load number) to every other process, which then name the same loads
(`AdoptLoras` of the sockets' own service, PRIVATE_SERVICE). A reload pushes
before the engine drops the load it replaced, and an unload before the
engine drops the adapter, so no process sends a request naming a load the
engine core no longer holds (vLLM's workers would load it again from its
folder under the old number: tokens mislabelled). A process whose push
failed reads the table from process 0 (`LoraTable`) when its mirror sees
other adapter names.

The sockets have their own credential: the parent makes a random token per
launch and gives it to every serving process ($TOKENWIRE_CONTROL_RELAY_TOKEN);
a ControlService call that arrives on a socket without it is refused
(UNAUTHENTICATED, RELAY_TOKEN_INVALID), so a local process that reaches a
socket cannot run control as a relay would. The sockets are also mode 0600
in a 0700 folder of the parent's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor

from tokenwire.server.control.servicer import ControlServicer
from tokenwire.server.core.errors import Unauthenticated, abort_with
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.security.auth import RELAY_SERVICE
from tokenwire.v1 import control_pb2
from tokenwire.wire import LOCAL_ABORT_HEADER as LOCAL_HEADER
from tokenwire.wire import RELAY_REFRESH_HEADER as REFRESH_HEADER
from tokenwire.wire import RELAY_TOKEN_HEADER as TOKEN_HEADER

log = logging.getLogger("tokenwire.control")

SERVICE = control_pb2.DESCRIPTOR.services_by_name["ControlService"]
TOKEN_ENV = "TOKENWIRE_CONTROL_RELAY_TOKEN"
MIRROR_PERIOD_S = 0.2
# A read of process 0's state this recent is current (every change is
# pushed to the other processes before the control call that made it
# answers; a push that failed is caught up by the mirror within a period).
FRESH_S = MIRROR_PERIOD_S
# The sockets' own methods, between serving processes only (raw JSON bytes;
# not a ControlService method, not in the contract). Not behind the inference
# key (security/auth.py): each checks the socket and the relay token.
PRIVATE_SERVICE = RELAY_SERVICE
_SKIP_METADATA = ("user-agent", LOCAL_HEADER, TOKEN_HEADER)
_NO_TOKEN = Unauthenticated(
    "a call on a serving process's private control socket needs the relay token of this launch",
    param=TOKEN_HEADER, reason="RELAY_TOKEN_INVALID",
)


def new_token() -> str:
    """A launch's relay token (the parent makes it; every process reads it)."""
    return secrets.token_urlsafe(32)


def token_from_environment() -> str:
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise RuntimeError(f"control across serving processes needs ${TOKEN_ENV} (set by the "
                           "parent process, runtime/frontends.py)")
    return token


def on_socket(context: grpc.aio.ServicerContext) -> bool:
    """Whether the call came in on a private Unix socket (not the gRPC port)."""
    return str(context.peer() or "").startswith("unix:")


class ControlRelay:
    """This process's ControlService when several processes serve."""

    def __init__(self, index: int, sockets: tuple[str, ...], local: ControlServicer,
                 state: ServingState, *, token: str, admin_key: str = "",
                 on_paused: Callable[[bool], Awaitable[None]] | None = None):
        if not token:
            raise ValueError("the relay needs its token")
        self.index = index
        self.sockets = sockets
        self.local = local
        self.state = state
        self._token = token.encode()
        self._relay_md = ((TOKEN_HEADER, token),)
        self._admin = [("authorization", f"Bearer {admin_key}")] if admin_key else []
        self._on_paused = on_paused
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._refreshing = asyncio.Lock()  # one read of process 0's state at a time
        self._clock = time.monotonic
        self._read_at = -float("inf")  # when the last successful read started
        self._shared: asyncio.Future[None] | None = None  # the serving path's read in flight
        self._told: tuple[object, ...] | None = None  # (process 0) the state last pushed
        self._published: dict[str, tuple[str, int]] | None = None  # (process 0) LoRA pushed

    @property
    def leader(self) -> bool:
        return self.index == 0

    def handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """Every ControlService method, on raw message bytes."""
        return {method.name: grpc.unary_unary_rpc_method_handler(self._method(method))
                for method in SERVICE.methods}

    def private_handlers(self) -> dict[str, grpc.RpcMethodHandler]:
        """The methods only another serving process calls (on its socket,
        with the launch's token): AdoptLoras, LoraTable."""
        def private(run: Callable[[bytes], bytes]) -> grpc.RpcMethodHandler:
            async def call(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
                if not (on_socket(context) and self._token_ok(context)):
                    await abort_with(context, _NO_TOKEN)
                return run(raw)
            return grpc.unary_unary_rpc_method_handler(call)

        return {
            "AdoptLoras": private(self._adopt_loras),
            "LoraTable": private(lambda _raw: json.dumps(self._published_loras()).encode()),
        }

    def serve_on(self, server: grpc.aio.Server) -> None:
        """Both services on `server` as registered methods (the gRPC port's
        server, and the sockets' when that is another one): pygrpc-native
        serves registered unary methods itself, so their callers' addresses
        are their own, never its fallback socket's."""
        server.add_registered_method_handlers(SERVICE.full_name, self.handlers())
        server.add_registered_method_handlers(PRIVATE_SERVICE, self.private_handlers())

    @property
    def _engine(self) -> Any:
        return self.local.plane.engine

    def _published_loras(self) -> dict[str, tuple[str, int]]:
        """(Process 0) the adapters last pushed (between an unload's push
        and the engine dropping the adapter, not the engine's names: a
        process that reads them then must not take the adapter back)."""
        return self._published if self._published is not None else self._engine.lora_table()

    def _adopt_loras(self, raw: bytes) -> bytes:
        table = {str(name): (str(path), int(number))
                 for name, (path, number) in json.loads(raw).items()}
        self._engine.adopt_loras(table)
        return b""

    def _method(self, method: MethodDescriptor) -> Callable[[bytes, Any], Awaitable[bytes]]:
        request_type = message_factory.GetMessageClass(method.input_type)
        run_here = getattr(self.local, method.name)
        name = method.name

        async def call(raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
            if on_socket(context) and not self._token_ok(context):
                await abort_with(context, _NO_TOKEN)
            if name == "AbortRequests":
                return await self._abort(raw, context)
            if not self.leader and name == "GetControlState" and on_socket(context) and any(
                    k == REFRESH_HEADER for k, _ in context.invocation_metadata() or ()):
                await self.refresh()  # process 0 changed the weights: end what they break here
                return await self._relay(0, name, raw, context)  # (read already)
            if self.leader:
                try:
                    response = await run_here(request_type.FromString(raw), context)
                finally:  # a change (or a failed one's label) is read everywhere first
                    if name != "GetControlState" and self._snapshot() != self._told:
                        # (Not for the reads: the other processes' own reads of
                        # this state must not wait on a push to themselves.)
                        await self.tell_followers()
                return bytes(response.SerializeToString())
            answer = await self._relay(0, name, raw, context)
            await self._refresh_now_quietly()  # the caller's next call here sees what it did
            return answer

        return call

    def _token_ok(self, context: grpc.aio.ServicerContext) -> bool:
        sent = [v for k, v in context.invocation_metadata() or () if k == TOKEN_HEADER]
        return len(sent) == 1 and isinstance(sent[0], str) and \
            hmac.compare_digest(sent[0].encode(), self._token)

    def _channel(self, index: int) -> grpc.aio.Channel:
        channel = self._channels.get(index)
        if channel is None:
            channel = grpc.aio.insecure_channel(f"unix:{self.sockets[index]}")
            self._channels[index] = channel
        return channel

    async def _relay(self, index: int, name: str, raw: bytes, context: grpc.aio.ServicerContext,
                     extra: tuple[tuple[str, str], ...] = ()) -> bytes:
        metadata = [(k, v) for k, v in (context.invocation_metadata() or ())
                    if not k.startswith((":", "grpc-")) and k not in _SKIP_METADATA]
        call = self._channel(index).unary_unary(f"/{SERVICE.full_name}/{name}")
        try:
            return bytes(await call(raw, metadata=[*metadata, *self._relay_md, *extra],
                                    timeout=context.time_remaining()))
        except grpc.aio.AioRpcError as err:  # the status as process `index` gave it
            await context.abort(err.code(), err.details() or "",
                                trailing_metadata=tuple(err.trailing_metadata() or ()))
            raise AssertionError("unreachable") from err

    async def _abort(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        request = control_pb2.AbortRequestsRequest.FromString(raw)
        mine = await self.local.AbortRequests(request, context)
        local_only = on_socket(context) and any(  # from another process (token checked)
            k == LOCAL_HEADER for k, _ in context.invocation_metadata() or ())
        if local_only:
            return bytes(mine.SerializeToString())
        others = [i for i in range(len(self.sockets)) if i != self.index]
        answers = await asyncio.gather(*(
            self._relay(i, "AbortRequests", raw, context, ((LOCAL_HEADER, "1"),)) for i in others
        ))
        total = mine.aborted + sum(control_pb2.AbortRequestsResponse.FromString(a).aborted
                                   for a in answers)
        if request.request_ids:  # as vLLM answers: the ids asked
            total = len(request.request_ids)
        return bytes(control_pb2.AbortRequestsResponse(status="aborted", aborted=total)
                     .SerializeToString())

    async def tell_followers(self) -> None:
        """(Process 0, after a weight change, before generation resumes) have
        every other process read the new version and generation now, so each
        ends its own bounded requests the change breaks before any token of
        the new weights is sampled (core/weight_bounds.py). Also after every
        control call that changed the state they mirror (version, generation,
        announced version, paused flag), so none serves a stale one while
        its reads count as fresh."""
        self._told = self._snapshot()
        request = control_pb2.GetControlStateRequest().SerializeToString()

        async def tell(index: int) -> None:
            call = self._channel(index).unary_unary(f"/{SERVICE.full_name}/GetControlState")
            try:
                await call(request, metadata=[*self._admin, *self._relay_md, (REFRESH_HEADER, "1")],
                           timeout=5.0)
            except grpc.aio.AioRpcError as err:  # its mirror catches up within a period
                log.warning("control: process %d did not read the new weights' state: %s",
                            index, err.details())

        await asyncio.gather(*(tell(i) for i in range(len(self.sockets)) if i != self.index))

    async def publish_loras(self, table: dict[str, tuple[str, int]]) -> None:
        """(Process 0, under the control lock) every other process serves
        `table`'s adapters before this call returns; one that does not answer
        reads them from process 0 when its mirror sees other names."""
        self._published = dict(table)
        body = json.dumps(table).encode()

        async def push(index: int) -> None:
            call = self._channel(index).unary_unary(f"/{PRIVATE_SERVICE}/AdoptLoras")
            try:
                await call(body, metadata=self._relay_md, timeout=5.0)
            except grpc.aio.AioRpcError as err:
                log.warning("control: process %d did not take the LoRA adapters: %s",
                            index, err.details())

        await asyncio.gather(*(push(i) for i in range(len(self.sockets)) if i != self.index))

    async def _read_loras(self) -> None:
        call = self._channel(0).unary_unary(f"/{PRIVATE_SERVICE}/LoraTable")
        self._adopt_loras(await call(b"", metadata=self._relay_md, timeout=2.0))

    def _snapshot(self) -> tuple[object, ...]:
        s = self.state
        return (s.weight_version, s.generation, s.bounds.announced, s.paused)

    # -- mirroring process 0's state (the other processes) -------------------
    async def _read_state(self) -> control_pb2.ControlState:
        call = self._channel(0).unary_unary(
            f"/{SERVICE.full_name}/GetControlState",
            request_serializer=control_pb2.GetControlStateRequest.SerializeToString,
            response_deserializer=control_pb2.GetControlStateResponse.FromString,
        )
        return (await call(control_pb2.GetControlStateRequest(),
                           metadata=[*self._admin, *self._relay_md], timeout=2.0)).state

    async def refresh(self) -> None:
        """Read process 0's paused flag and weight version now."""
        async with self._refreshing:
            started = self._clock()
            state = await self._read_state()
            self._read_at = started
            if state.weight_version != self.state.weight_version:
                self.state.weight_version = state.weight_version
            # Weight bounds (core/weight_bounds.py): this process's bounded
            # requests end once it sees the update that breaks them (up to a
            # mirror period after process 0 ended its own, before resuming).
            self.state.bounds.announced = state.announced_version
            if state.generation != self.state.generation:
                self.state.generation = state.generation
                await self.local.plane.follow_bounds()
            if state.paused != self.state.paused:
                self.state.paused = state.paused
                if self._on_paused is not None:
                    await self._on_paused(state.paused)
            if sorted(state.lora_adapters) != self._engine.lora_names():
                await self._read_loras()  # a push that did not arrive

    async def refresh_quietly(self) -> None:
        """The serving path's read (ServingState.refresh: a bounded request,
        a call whose x-min-weight-version would be refused): none while the
        last read is fresh (FRESH_S), else one read shared by every caller
        that waits meanwhile. Keeps the last state if process 0 does not
        answer."""
        if self._shared is None:
            if self._clock() - self._read_at < FRESH_S:
                return
            self._shared = asyncio.ensure_future(self._shared_read())
        await asyncio.shield(self._shared)  # one caller's cancellation ends only its wait

    async def _shared_read(self) -> None:
        try:
            await self._refresh_now_quietly()
        finally:
            self._shared = None

    async def _refresh_now_quietly(self) -> None:
        """refresh(), keeping the last state if process 0 does not answer."""
        try:
            await self.refresh()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("control state from process 0 not read: %s", exc)

    async def mirror(self, period: float = MIRROR_PERIOD_S) -> None:
        """Follow process 0's state until cancelled."""
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # process 0 starting or stopping: try again
                log.debug("control state from process 0 not read: %s", exc)
            await asyncio.sleep(period)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
