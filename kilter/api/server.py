"""The gRPC listener: ``kilter.v1.Placement``, ``grpc.health.v1.Health`` and server reflection on one port.

It runs as a ``grpc.aio`` server in the event loop of ``kilter serve``'s HTTP
listeners, so it answers from the very state they decide on. Health says
NOT_SERVING until that state is loaded (what ``/readyz`` says with 503) and
SERVING after, for the whole server ("") and for ``kilter.v1.Placement``;
a load balancer or a peer region's pool can probe it with any standard
health client. Reflection lists both services, so generic clients
(grpcurl, grpcui) need no copy of the .proto. Health and reflection answer
everyone; Placement answers whom ``Sources.trusted`` trusts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.api.last_resort import Count, LastResort, Refused
from kilter.api.servicer import MAX_JOB_BYTES, PlacementServicer, Sources
from kilter.api.tls import ReloadingCredentials

__all__ = ["MAX_RECEIVE_BYTES", "PLACEMENT", "READY_POLL_S", "PlacementServer", "Service"]

log = logging.getLogger("kilter.api")

PLACEMENT = pb.DESCRIPTOR.services_by_name["Placement"].full_name
MAX_RECEIVE_BYTES = 2 * MAX_JOB_BYTES
"""Largest request gRPC reads: a job up to twice its cap is read and refused in-protocol (INVALID_ARGUMENT naming
``job``); anything larger gRPC itself refuses (RESOURCE_EXHAUSTED) before a byte of it reaches kilter."""
IDLE_TIMEOUT_S = 300.0
"""A connection with no call in flight this long is closed (gRPC's max_connection_idle): clients and pool peers
reconnect on their next call, and a connection nobody uses stops holding a descriptor."""
READY_POLL_S = 0.25
"""How often health looks at readiness: a flag read, so cheap; a load balancer probes far less often."""


class _Health(Protocol):
    """What is used of grpc_health's asyncio servicer (grpc-stubs 1.53 predates ``health.aio``)."""

    async def set(self, service: str, status: int) -> None: ...

    async def enter_graceful_shutdown(self) -> None: ...


@dataclass(frozen=True)
class Service:
    """Another service on the same listener (the pool's exchange): its full name, for health and reflection, and
    how to add its servicer to a server."""

    name: str
    add: Callable[[grpc.aio.Server], None]


class PlacementServer:
    """One gRPC listener on ``address:port`` (port 0: any free one, see ``port`` after ``start``), plain or TLS."""

    def __init__(
        self,
        sources: Sources,
        *,
        address: str,
        port: int,
        credentials: ReloadingCredentials | None = None,
        ready: Callable[[], bool] | None = None,
        internal_error: Count | None = None,
        refused: Refused | None = None,
        services: Sequence[Service] = (),
        max_connections: int = 256,
        handshake_timeout_s: float = 5.0,
    ) -> None:
        self.sources = sources
        self.services = tuple(services)
        self.address = address
        self.port = port
        self.credentials = credentials
        self.ready = ready or (lambda: sources.store.ready)
        self.internal_error = internal_error
        self.refused = refused
        self.max_connections = max_connections
        self.handshake_timeout_s = handshake_timeout_s
        self.health: _Health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop it serves on, once started
        self._server: grpc.aio.Server | None = None
        self._watch: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Bind and start serving (in the running loop); the bound port. InputError-free: a port in use raises
        RuntimeError from gRPC, which ``kilter serve`` reports."""
        last_resort = LastResort(
            self.internal_error, trusted=self.sources.trusted, refused=self.refused, max_streams=self.max_connections
        )
        server = grpc.aio.server(
            interceptors=[last_resort],
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                ("grpc.so_reuseport", 0),
                # A cap on open connections (TCP accepts past it are closed at once), a deadline on the TLS and
                # HTTP/2 handshake, and one on idleness: without them each idle TCP connection held a descriptor
                # for as long as its peer liked, and enough of them took the other listeners' descriptors.
                ("grpc.max_allowed_incoming_connections", self.max_connections),
                ("grpc.server_handshake_timeout_ms", round(self.handshake_timeout_s * 1000)),
                ("grpc.max_connection_idle_ms", round(IDLE_TIMEOUT_S * 1000)),
            ],
        )
        pb_grpc.add_PlacementServicer_to_server(PlacementServicer(self.sources), server)
        for service in self.services:
            service.add(server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names = (PLACEMENT, *(s.name for s in self.services))
        health_name = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
        reflection.enable_server_reflection((*names, health_name, reflection.SERVICE_NAME), server)
        target = f"{_host(self.address)}:{self.port}"
        if self.credentials is None:
            bound = server.add_insecure_port(target)
        else:
            bound = server.add_secure_port(target, self.credentials.credentials)
        if bound == 0:
            raise RuntimeError(f"gRPC listener could not bind {target}")
        await self._set(self.ready())
        await server.start()
        self._server, self.port = server, bound
        self.loop = asyncio.get_running_loop()
        self._watch = asyncio.get_running_loop().create_task(self._follow_readiness(), name="grpc-health")
        log.info("gRPC placement API on %s:%d (%s)", self.address, bound, "TLS" if self.credentials else "plaintext")
        return bound

    async def _set(self, ready: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if ready else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", PLACEMENT, *(s.name for s in self.services)):
            await self.health.set(service, status)

    async def _follow_readiness(self) -> None:
        shown = self.ready()
        while True:
            await asyncio.sleep(READY_POLL_S)
            now = self.ready()
            if now != shown:
                await self._set(now)
                shown = now

    async def stop(self, grace_s: float | None = 1.0) -> None:
        """Stop taking calls; open streams (WatchDecisions) end after ``grace_s``."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._server is not None:
            await self.health.enter_graceful_shutdown()
            await self._server.stop(grace_s)

    async def wait(self) -> None:
        """Until the server stops."""
        if self._server is not None:
            await self._server.wait_for_termination()


def _host(address: str) -> str:
    """An address as gRPC's target syntax wants it: IPv6 in brackets; 0.0.0.0 and :: as every interface."""
    if address in ("0.0.0.0", "::", ""):
        return "[::]"
    return f"[{address}]" if ":" in address and not address.startswith("[") else address
