"""A failure no gRPC handler foresaw: logged, counted, and answered ``INTERNAL`` in one line, the server kept.

The handlers map everything a caller can send to ``INVALID_ARGUMENT``,
``NOT_FOUND`` or ``PERMISSION_DENIED``; what still escapes is kilter's own
bug. Without this, grpc answers ``UNKNOWN`` with the exception's text and
nobody counts it. ``INTERNAL`` is the code gRPC reserves for a server's
broken invariant, so a client knows not to retry the same request as if it
had asked wrongly; the count is the HTTP listener's
``kilter_internal_errors_total``, labelled with the RPC's full name.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc

__all__ = ["LastResort"]

log = logging.getLogger("kilter.api")

Count = Callable[[str], None]  # an RPC's full method name -> counted


if TYPE_CHECKING:  # grpc-stubs types the interceptor generic; at run time it is a plain class
    Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    Interceptor = grpc.aio.ServerInterceptor


class LastResort(Interceptor):
    """Wraps every unary and server-streaming handler; health and reflection are covered as well."""

    def __init__(self, count: Count | None = None) -> None:
        self.count = count or (lambda method: None)
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
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            stream = handler.unary_stream
            # A streaming handler either yields its messages or writes them (context.write) and returns.
            yields = inspect.isasyncgenfunction(stream)
            wrapped = self._stream(method, stream) if yields else self._unary(method, stream)
            return grpc.unary_stream_rpc_method_handler(
                wrapped,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _unary(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                return await behaviour(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(method, exc, context)

        return call

    def _stream(self, method: str, behaviour: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
        async def call(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            try:
                async for item in behaviour(request, context):
                    yield item
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await self._abort(method, exc, context)

        return call

    async def _abort(self, method: str, exc: Exception, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        log.error("%s failed", method, exc_info=exc)
        self.count(method)
        line = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error in kilter (logged): {line}")
