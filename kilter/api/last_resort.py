"""A failure no gRPC handler foresaw: logged, counted, and answered ``INTERNAL`` in one line, the server kept.

The handlers map everything a caller can send to ``INVALID_ARGUMENT``,
``NOT_FOUND`` or ``PERMISSION_DENIED``; what still escapes is kilter's own
bug. Without this, grpc answers ``UNKNOWN`` with the exception's text and
nobody counts it. ``INTERNAL`` is the code gRPC reserves for a server's
broken invariant, so a client knows not to retry the same request as if it
had asked wrongly; the count is the HTTP listener's
``kilter_internal_errors_total``, labelled with the RPC's full name.

A request that is not even a message of its method's type (malformed
protobuf) never reaches a handler: gRPC's own reading would raise, log a
traceback and answer ``UNKNOWN`` for every such call, trusted or not. The
interceptor reads it instead: a caller the listener does not trust gets
``PERMISSION_DENIED`` as for any other request, a trusted one
``INVALID_ARGUMENT``, and both are counted (``kilter_grpc_refused_total``).
Log lines are throttled per method, so a flood of bad calls writes one line
a minute, not one per call.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["LastResort"]

log = logging.getLogger("kilter.api")

Count = Callable[[str], None]  # an RPC's full method name -> counted
Refused = Callable[[str, str], None]  # an RPC's full method name, the status code's name -> counted
OPEN_SERVICES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
"""Methods every caller may call (load balancers' health checks, schema browsers): no trust check before them."""
LOG_EVERY_S = 60.0


@dataclass
class _Malformed:
    """A request body that is not a message of its method's type, carried to the handler wrapper so that the trust
    check still comes first."""

    error: str


class Throttle:
    """At most one log line per key every ``every_s``; the next one says how many were left out meanwhile."""

    def __init__(self, every_s: float = LOG_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s = every_s
        self.clock = clock
        self._last: dict[str, tuple[float, int]] = {}

    def allow(self, key: str) -> int | None:
        """None to stay silent; else how many lines for ``key`` were left out since the last one written."""
        now = self.clock()
        last, skipped = self._last.get(key, (float("-inf"), 0))
        if now - last < self.every_s:
            self._last[key] = (last, skipped + 1)
            return None
        self._last[key] = (now, 0)
        return skipped


if TYPE_CHECKING:  # grpc-stubs types the interceptor generic; at run time it is a plain class
    Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    Interceptor = grpc.aio.ServerInterceptor


class LastResort(Interceptor):
    """Wraps every unary and server-streaming handler; health and reflection are covered as well."""

    def __init__(
        self,
        count: Count | None = None,
        *,
        trusted: Callable[[str], bool] = lambda peer: True,
        refused: Refused | None = None,
        max_streams: int = 256,
    ) -> None:
        self.count = count or (lambda method: None)
        self.trusted = trusted
        self.refused = refused or (lambda method, code: None)
        self.throttle = Throttle()
        self.max_streams = max_streams
        self.streams = 0  # server-streaming calls open now (Health.Watch, WatchDecisions)
        # gRPC asks again on every call; a method's handler is the one registered, so it is wrapped once.
        self._wrapped: dict[tuple[str, grpc.RpcMethodHandler[Any, Any]], grpc.RpcMethodHandler[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(details)
        if handler is None:
            return handler
        method: str = details.method
        wrapped = self._wrapped.get((method, handler))
        if wrapped is None:
            wrapped = self._wrapped[(method, handler)] = self._wrap(method, handler)
        return wrapped

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler[Any, Any]) -> grpc.RpcMethodHandler[Any, Any]:
        read = _tolerant(handler.request_deserializer)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=read,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream = handler.unary_stream
            # A streaming handler either yields its messages or writes them (context.write) and returns.
            yields = inspect.isasyncgenfunction(stream)
            wrapped = self._stream(method, stream) if yields else self._unary(method, stream, streaming=True)
            return grpc.unary_stream_rpc_method_handler(
                wrapped,
                request_deserializer=read,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(
        self, method: str, behaviour: Callable[..., Any], *, streaming: bool = False
    ) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            if isinstance(request, _Malformed):
                await self._malformed(method, request, context)
            if streaming:
                await self._open_stream(method, context)
            try:
                return await behaviour(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(method, exc, context)
            finally:
                self.streams -= streaming

        return call

    def _stream(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            if isinstance(request, _Malformed):
                await self._malformed(method, request, context)
            await self._open_stream(method, context)
            try:
                async for item in behaviour(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(method, exc, context)
            finally:
                self.streams -= 1

        return call

    async def _open_stream(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """Count a stream in, or refuse it past ``max_streams``: each open stream holds memory for as long as its
        caller likes, and Health.Watch is open to every caller."""
        if self.streams >= self.max_streams:
            self.refused(method, "RESOURCE_EXHAUSTED")
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, f"{self.max_streams} streams are open, the most kilter keeps"
            )
        self.streams += 1

    async def _malformed(self, method: str, request: _Malformed, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        peer = context.peer()
        if not method.startswith(OPEN_SERVICES) and not self.trusted(peer):
            self.refused(method, "PERMISSION_DENIED")
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, f"caller {peer} is not trusted")
        self.refused(method, "INVALID_ARGUMENT")
        skipped = self.throttle.allow(f"malformed {method}")
        if skipped is not None:
            more = f" ({skipped} more since the last line)" if skipped else ""
            log.warning("%s: a request from %s is not a valid message: %s%s", method, peer, request.error, more)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"the request is not a valid message: {request.error}")

    async def _abort(self, method: str, exc: Exception, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self.count(method)
        skipped = self.throttle.allow(f"internal {method}")
        if skipped is not None:
            more = f" ({skipped} more since the last line)" if skipped else ""
            log.error("%s failed%s", method, more, exc_info=exc)
        line = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in kilter (logged): {line}")


def _tolerant(read: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``read`` (a message type's parser), answering a body it cannot parse with ``_Malformed`` instead of raising
    inside gRPC, which would log a traceback and answer UNKNOWN before any handler or trust check ran."""
    if read is None:
        return None
    parse = read

    def tolerant(raw: bytes) -> Any:
        try:
            return parse(raw)
        except Exception as exc:
            return _Malformed(" ".join(f"{type(exc).__name__}: {exc}".split())[:200])

    return tolerant
