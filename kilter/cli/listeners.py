"""What a connection to ``kilter serve`` may cost: read deadlines, a TLS handshake deadline and a cap per listener.

uvicorn's httptools protocol has an idle keep-alive timeout but no deadline on
reading a request, and ``limit_concurrency`` answers 503, a 5xx kilter never
sends. Without deadlines, a client that sends half a header, a body a byte a
minute, or finishes a TLS handshake and says nothing holds a file descriptor
for as long as it likes, and a few hundred such clients on the webhook port
once left the extender port refusing connections (a lowered file limit, shared
by both). So each listener runs ``GuardedHttp``, uvicorn's protocol with:

* a connection cap: past ``max_connections`` open connections (counted from
  the TCP accept, TLS handshakes included) a new one is aborted at once. Not
  answered: an answer means reading a request, the very cost the cap bounds,
  and the only fitting status would be 503. kube-scheduler, Volcano and the
  apiserver treat a refused connection like any failed call (and retry);
* on the HTTP listener, a share of that cap kept for trusted peers
  (``ListenerLimits.trusted_reserve``): /healthz answers everyone, so without
  it any pod that reaches the port could hold every slot with keep-alive
  probes and fail kube-scheduler's every filter call. A peer is classed at
  accept by address (``TrustRule.trusts_peer``); under ``--http-client-ca`` a
  peer outside ``--trusted-networks`` counts as untrusted until its handshake
  verifies a certificate, then as trusted: counting unverified handshakes as
  trusted would hand the reserve to anyone who can start one. The webhook
  listener has no trust rule (the apiserver may connect from any address), so
  its cap stays shared by all;
* TLS done here (``loop.start_tls``) rather than by the loop's server, so that
  the handshake has its own deadline and is counted against the cap;
* a header deadline (from the connection's start, or a keep-alive request's
  first byte, to its last header) and a body deadline (from there to the last
  body byte). A connection that misses one is aborted: its fd is free at once
  (a TLS close would wait for the peer's close_notify);
* a response deadline, as long as the body's: from a request's last byte to
  its answer's last byte taken by the socket (a client that stops reading a
  large answer would otherwise hold its connection, and the answer, forever);
* a size limit on a request's line and headers (httptools keeps them whole,
  however long): past 64 KiB the answer is 431 and a close;
* uvicorn's own idle keep-alive timeout between requests.

Each listener's open connections and the connections it closed, by reason,
are counted (``ListenerReading``, shown in the HTTP listener's /metrics): the
tests assert those, not clocks. The listener owns these rules, not the apps:
they hold for every path, before any app sees a request. Past 400 lines on
purpose: the cap, the protocol that counts it and the trust rule that classes
its peers are one seam, read together.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import ipaddress
import logging
import resource
import ssl
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast, get_args

import uvicorn
import uvloop
import uvloop.loop
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kilter.model.asgi import Scope, peer_address
from kilter.model.errors import InputError

__all__ = [
    "CLOSE_REASONS",
    "FILE_RESERVE",
    "Guard",
    "GuardedHttp",
    "ListenerLimits",
    "ListenerReading",
    "TrustRule",
    "ensure_file_limit",
    "listener_config",
    "split_networks",
]

log = logging.getLogger("kilter.serve")

FILE_RESERVE = 128
"""File descriptors kept beyond the listeners' caps: the state feed, the API server, the snapshot, logs."""

CloseReason = Literal[
    "cap",
    "untrusted-cap",
    "shed-idle",
    "handshake",
    "header-timeout",
    "body-timeout",
    "response-timeout",
    "headers-too-large",
]
CLOSE_REASONS: tuple[CloseReason, ...] = get_args(CloseReason)


@dataclass(frozen=True)
class ListenerLimits:
    """How long a connection may take to deliver a request, and how many a listener holds (seconds, counts)."""

    header_timeout_s: float = 10.0
    """From a connection's start (after TLS), or a keep-alive request's first byte, to its last header."""
    body_timeout_s: float = 30.0
    """From the last header to the last body byte: 256 MiB at ~70 Mbit/s; every client of kilter gives up sooner
    (kube-scheduler 2 s, Volcano 1 s, the apiserver at most 30 s). Also from the last body byte to the answer's
    last byte handed to the socket."""
    handshake_timeout_s: float = 5.0
    """TLS handshake, and TLS shutdown (close_notify) on a graceful close: milliseconds on a cluster network."""
    keep_alive_s: float = 15.0
    """Idle time between requests on a kept-alive connection before it is closed."""
    max_connections: int = 256
    """Open connections of one listener, handshakes included; more are aborted at accept."""
    max_header_bytes: int = 64 * 1024
    """Request line and headers of one request: kilter's callers send well under 4 KiB (Go's server allows 1 MiB,
    nginx 32 KiB); past it the answer is 431 and a close."""

    @property
    def trusted_reserve(self) -> int:
        """Connections of ``max_connections`` only trusted peers may take (64 of the default 256): a quarter, and
        at least 16 while that leaves untrusted peers half. A quarter grows with a cap raised for more callers;
        16 covers kube-scheduler's and Volcano's kept-alive connections with binds in flight and a debug session.
        Untrusted peers (kubelet probes, Prometheus) keep at least half, and one connection under a cap of 1."""
        cap = self.max_connections
        return max(cap // 4, min(16, cap // 2))


@dataclass
class Guard:
    """One listener's limits, its TLS context (None: plain HTTP), its trust rule (None: every peer shares the
    whole cap), and its counts: ``open`` counts every connection, ``untrusted`` those of untrusted peers."""

    name: str
    limits: ListenerLimits
    tls: ssl.SSLContext | None = None
    trust: TrustRule | None = None
    open: int = 0
    untrusted: int = 0
    closed: dict[str, int] = field(default_factory=dict)
    idle: dict[GuardedHttp, None] = field(default_factory=dict)
    """Sheddable connections waiting for their next request (or their first), longest waiting first."""

    def close(self, reason: CloseReason) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1

    def refusal(self, untrusted: bool) -> CloseReason | None:
        """Why a new connection is refused at accept, None if it fits."""
        if untrusted and self.untrusted >= self.limits.max_connections - self.limits.trusted_reserve:
            return "untrusted-cap"
        return "cap" if self.open >= self.limits.max_connections else None

    def shed_idle(self) -> bool:
        """Close the sheddable connection idle longest, to make room for a new one; False when none is idle.

        A connection between requests costs its peer nothing to keep, so a peer that holds many open can fill
        a cap with them; a kubelet probe, which opens a fresh connection each time, would then be refused until
        the keep-alive timeout. Shedding the idle first makes room for it at once: a peer keeping connections
        open must keep them busy, and the header and body deadlines bound that."""
        for connection in self.idle:
            self.close("shed-idle")
            connection.shed()
            return True
        return False


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol under a listener's ``Guard`` (set per listener by ``listener_config``)."""

    guard: ClassVar[Guard]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._counted = False
        self._untrusted = False  # counted in guard.untrusted
        self._tls_started = False
        self._header_bytes = 0
        self._refused = False  # answered 431: the rest of what the client sends is dropped

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        guard = self.guard
        if self._tls_started:  # the TLS layer, its handshake done
            self._trust_verified_peer(transport)
            self._start(transport)
            return
        untrusted = guard.trust is not None and not guard.trust.trusts_peer(transport.get_extra_info("peername"))
        refusal = guard.refusal(untrusted)
        if refusal is not None and not (guard.shed_idle() and guard.refusal(untrusted) is None):
            guard.close(refusal)
            transport.abort()
            return
        guard.open += 1
        self._counted = True
        if untrusted:
            guard.untrusted += 1
            self._untrusted = True
        if guard.tls is None:
            self._start(transport)
            return
        # The TLS layer takes over the TCP connection now, before the loop reads its first byte (it starts
        # reading when this returns), and calls connection_made again once the handshake is done.
        self._tls_started = True
        handshake: asyncio.Future[None] = self.loop.create_future()
        handshake.add_done_callback(self._handshake_done)
        limits = guard.limits
        tls = _tls_protocol(self.loop)(
            self.loop,
            self,
            guard.tls,
            handshake,
            server_side=True,
            ssl_handshake_timeout=limits.handshake_timeout_s,
            ssl_shutdown_timeout=limits.handshake_timeout_s,
        )
        transport.set_protocol(tls)
        tls.connection_made(transport)

    def _trust_verified_peer(self, transport: asyncio.Transport) -> None:
        """Under ``--http-client-ca`` a finished handshake verified the peer's certificate (``CERT_REQUIRED``), so
        ``TrustRule`` trusts it: its connection leaves the untrusted count for the trusted one."""
        trust = self.guard.trust
        if self._untrusted and trust is not None and trust.client_certs and transport.get_extra_info("peercert"):
            self._untrusted = False
            self.guard.untrusted -= 1
            self.guard.idle.pop(self, None)

    def _handshake_done(self, handshake: asyncio.Future[None]) -> None:
        """A handshake that failed, passed its deadline or lost its peer: uvicorn never saw the connection."""
        if handshake.cancelled() or handshake.exception() is not None:
            self.guard.close("handshake")
            self._uncount()

    def _start(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._arm("header-timeout")
        self._idle(True)

    def _idle(self, idle: bool) -> None:
        """Mark the connection as waiting for a request (sheddable, if its peer is untrusted or the listener
        trusts no one in particular) or as busy with one."""
        if idle and (self._untrusted or self.guard.trust is None):
            self.guard.idle[self] = None
        else:
            self.guard.idle.pop(self, None)

    def shed(self) -> None:
        """Give up this connection's place at once (a newcomer takes it now, not once the loop reports the
        close) and abort it."""
        self._idle(False)
        self._disarm()
        self._uncount()
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._idle(False)
        self._disarm()
        self._uncount()
        if self.transport is not None:  # None: aborted at accept, uvicorn never saw it
            super().connection_lost(exc)

    def _uncount(self) -> None:
        if self._counted:
            self._counted = False
            self.guard.open -= 1
        if self._untrusted:
            self._untrusted = False
            self.guard.untrusted -= 1

    def on_message_begin(self) -> None:
        self._idle(False)
        if self._deadline is None:  # a keep-alive request's first byte
            self._arm("header-timeout")
        self._header_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if self._count_header_bytes(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._count_header_bytes(len(name) + len(value)):
            super().on_header(name, value)

    def _count_header_bytes(self, size: int) -> bool:
        """Whether the request line and headers are still within ``max_header_bytes``; past it, the connection
        is answered 431 and closed (httptools itself keeps every byte of an endless header until the deadline)."""
        if self._refused:
            return False
        self._header_bytes += size
        if self._header_bytes <= self.guard.limits.max_header_bytes:
            return True
        self._refused = True
        self._disarm()
        self.guard.close("headers-too-large")
        message = f"request line and headers above {self.guard.limits.max_header_bytes} bytes\n".encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            + f"content-length: {len(message)}\r\n\r\n".encode()
            + message
        )
        self.transport.close()
        return False

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._arm("body-timeout")
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._arm("response-timeout")
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # uvicorn calls this once the answer is handed to the transport, flushed or not; an answer still in the
        # write buffer keeps its deadline (and a close on keep-alive would wait for the flush forever).
        if self.transport.get_write_buffer_size() == 0:
            self._disarm()
        super().on_response_complete()
        if self.transport is not None and not self.transport.is_closing():
            self._idle(True)

    def _arm(self, reason: CloseReason) -> None:
        self._disarm()
        limits = self.guard.limits
        delay = limits.header_timeout_s if reason == "header-timeout" else limits.body_timeout_s  # body, response
        self._deadline = self.loop.call_later(delay, self._expire, reason)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self, reason: CloseReason) -> None:
        self._deadline = None
        transport = self.transport
        if transport is None:
            return
        unsent = transport.get_write_buffer_size()
        if reason == "response-timeout" and self.cycle.response_complete and unsent == 0:
            return  # answered and taken in time
        if transport.is_closing() and unsent == 0:
            return  # already on its way out
        self.guard.close(reason)
        transport.abort()  # over TLS this aborts the TCP connection under it too


def _tls_protocol(loop: asyncio.AbstractEventLoop) -> Any:
    """The loop's own TLS protocol class (uvloop's is native, and its transports take a fast path for it)."""
    if isinstance(loop, uvloop.Loop):
        return getattr(uvloop.loop, "SSLProtocol")  # noqa: B009 - not in uvloop's stubs
    return asyncio.sslproto.SSLProtocol


def listener_config(
    app: Any,
    guard: Guard,
    *,
    host: str,
    port: int,
    lifespan: Literal["on", "off"],
    log_level: str,
) -> uvicorn.Config:
    """A uvicorn listener for ``app`` under ``guard``: httptools on uvloop, no WebSocket upgrade (kilter serves
    none, and an unanswered upgrade would be uvicorn's 500), TLS from the guard."""
    protocol = cast(type[GuardedHttp], type(f"GuardedHttp_{guard.name}", (GuardedHttp,), {"guard": guard}))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=protocol,
        ws="none",
        lifespan=lifespan,
        access_log=False,
        log_level=log_level,
        log_config=None,  # kilter's own handler (``logs.configure``): one format for the whole pod
        timeout_keep_alive=max(1, round(guard.limits.keep_alive_s)),
    )
    config.load()
    return config


def ensure_file_limit(connections: int) -> int:
    """Raise the soft file limit so that ``connections`` (all listeners' caps) plus ``FILE_RESERVE`` fit; the
    limit now in force. Refuses (``InputError``) when even the hard limit is too low: a cap the process cannot
    honour would let one listener's flood take the other's descriptors."""
    needed = connections + FILE_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise InputError(
            f"--max-connections: {connections} connections need {needed} file descriptors, the limit is {hard}"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed


class TrustRule:
    """Who may call ``/scheduler/*``, ``/volcano/*`` and ``/debug/*``: peers in ``networks``, and every peer of a
    listener that verified a client certificate (``client_certs``: the handshake already refused the rest). The
    peer is the connection's, never a header (``X-Forwarded-For`` is anyone's to write). A scope without
    ``client`` is an in-process call (``asgi.is_local_caller``)."""

    def __init__(
        self, networks: Sequence[str], *, client_certs: bool = False, flag: str = "--trusted-networks"
    ) -> None:
        self.networks = tuple(_network(n, flag) for n in networks)
        self.client_certs = client_certs

    def __call__(self, scope: Scope) -> bool:
        if self.client_certs or "client" not in scope:  # every caller passed the handshake; an in-process call
            return True
        return self._holds(peer_address(scope))

    def trusts_peer(self, peername: object) -> bool:
        """Whether a connection's peer (a transport's ``peername``) is in ``networks``, by address alone: at
        accept no certificate has been seen yet."""
        if not isinstance(peername, tuple) or len(peername) < 2:
            return False  # not an IP socket
        return self._holds(peer_address({"client": peername[:2]}))

    def _holds(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
        return address is not None and any(address in n for n in self.networks)


def _network(text: str, flag: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise InputError(f"{flag}: {text!r} is not a CIDR such as 10.244.0.0/16") from None


class ListenerReading(Collector):
    """The guards' counts at scrape time: open connections and closed ones by reason, per listener."""

    def __init__(self, guards: Iterable[Guard]) -> None:
        self.guards = list(guards)

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        open_ = GaugeMetricFamily(
            "kilter_listener_connections_open", "Open connections, TLS handshakes included", labels=["listener"]
        )
        closed = CounterMetricFamily(
            "kilter_listener_connections_closed",
            "Connections kilter closed: over the cap, over untrusted peers' share of it, failed or slow TLS "
            "handshake, header, body or response deadline, headers past their size limit",
            labels=["listener", "reason"],
        )
        for guard in self.guards:
            open_.add_metric([guard.name], guard.open)
            for reason in CLOSE_REASONS:
                closed.add_metric([guard.name, reason], guard.closed.get(reason, 0))
        yield open_
        yield closed


def split_networks(text: str) -> tuple[str, ...]:
    """``--trusted-networks``' comma-separated CIDRs, blanks dropped."""
    return tuple(part.strip() for part in text.split(",") if part.strip())
