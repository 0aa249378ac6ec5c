"""The ASGI protocol as kilter's listeners speak it: its types, the one body reader and the one reply.

The extender and the webhooks are bare ASGI apps (no framework; see
``extenders/server.py`` for why) and sibling layers, so what both need of the
protocol sits here, below both, as starlette's ``types.py`` does. A body is
refused as soon as it is known to pass its limit: at once when its
``Content-Length`` says so, else as the bytes arrive, before anything is
joined or decoded, so an oversized request costs at most ``limit_bytes`` of
memory. Saying so (413 and which limit) is each server's own line.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = [
    "BodyRefused",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "is_local_caller",
    "peer_address",
    "read_body",
    "reply",
]

Scope = MutableMapping[str, Any]
"""One connection's request: ``type``, ``path``, ``method``, ``headers`` as (lower-case bytes, bytes) pairs, …"""
Message = MutableMapping[str, Any]
"""One event each way: ``http.request`` with ``body``/``more_body``, ``http.response.start``, …"""
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class BodyRefused(enum.Enum):
    """Why ``read_body`` has no body to give: there is nobody to answer, or the body passes its limit."""

    DISCONNECTED = "disconnected"
    TOO_LARGE = "too large"


async def read_body(
    scope: Scope, receive: Receive, *, limit_bytes: int, feed: Callable[[bytes], None] | None = None
) -> list[bytes] | BodyRefused:
    """The request body as the pieces it arrived in (at least one, maybe empty), or why there is none.

    ``feed`` sees each piece that more pieces follow, as it arrives (a reader that parses while the rest is on
    the wire); the last piece is only in the list, for the caller to feed once its clock runs. The pieces are
    not joined here: a body that came in one piece needs no copy.
    """
    length = _content_length(scope)
    if length is not None and length > limit_bytes:
        return BodyRefused.TOO_LARGE
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return BodyRefused.DISCONNECTED
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit_bytes:
            return BodyRefused.TOO_LARGE
        chunks.append(chunk)
        more = message.get("more_body", False)
        if feed is not None and more:
            feed(chunk)
    return chunks


async def reply(
    send: Send,
    status: int,
    *,
    body: bytes,
    content_type: str = "text/plain",
    timing_s: float | None = None,
    close: bool = False,
) -> None:
    """One whole answer: ``Content-Type``, ``Content-Length``, a ``Server-Timing`` of ``timing_s`` seconds (shown
    in milliseconds) when given, and ``Connection: close`` when the request's own bytes are not to be read on."""
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    if timing_s is not None:
        headers.append((b"server-timing", f"app;dur={timing_s * 1000:.3f}".encode()))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def peer_address(scope: Scope) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The caller's IP address from the scope's ``client`` (host, port); None when the server gave none (a Unix
    socket) or it is not an IP address. An IPv4-mapped IPv6 address (``::ffff:10.0.0.1``) is its IPv4 address,
    so that one rule covers a dual-stack listener."""
    client = scope.get("client")
    if not client:
        return None
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_local_caller(scope: Scope) -> bool:
    """Whether the caller is on this host: a peer on the loopback (127.0.0.0/8, ::1), the default trust rule, or
    no peer at all. A scope without ``client`` is an in-process call (a test, an embedding calling the app):
    uvicorn sets ``client`` on every connection it accepts, so no network caller arrives without one."""
    if "client" not in scope:
        return True
    address = peer_address(scope)
    return address is not None and address.is_loopback


def _content_length(scope: Scope) -> int | None:
    """The declared body size in bytes; None when absent or unreadable (then the bytes themselves are counted)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
