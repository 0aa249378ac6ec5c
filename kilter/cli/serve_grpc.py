"""The gRPC listener of ``kilter serve``: its flags, its wiring to the extender's state, and running it beside
the HTTP listeners in one event loop.

The servicer lives in ``kilter.api`` and may not import the extenders, so
what it reads from them is handed in here: the extender's ``DecisionLog``
(explain records, and the decision feed that ``WatchDecisions`` follows,
which Volcano's notes publish to as well) and Volcano's notes. The
certificate is the webhooks' (``--tls-cert-file``/``--tls-key-file``),
re-read when its files change.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import uvicorn

from kilter.api import PlacementServer, ReloadingCredentials, Sources
from kilter.api.server import Service
from kilter.cli.serve_config import DEFAULTS, ServeConfig
from kilter.extenders.server import App
from kilter.gangs.decisions import DecisionFeed
from kilter.state.store import ClusterStore
from kilter.webhooks.admissioncheck import Controller

__all__ = ["add_grpc_arguments", "peer_client", "placement_server", "serve_all"]


def add_grpc_arguments(p: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    p.add_argument(
        "--grpc-port",
        type=int,
        default=d.grpc_port,
        help=f"gRPC listener port (default {d.grpc_port}; 0: off): kilter.v1.Placement (Plan, Explain, Inventory, "
        "WatchDecisions), grpc.health.v1.Health and reflection; TLS with --tls-cert-file/--tls-key-file, else "
        "plaintext. Placement answers --trusted-networks (or, with --grpc-client-ca, verified clients); health "
        "and reflection answer everyone",
    )
    p.add_argument(
        "--grpc-client-ca",
        type=Path,
        help="require gRPC client certificates signed by this CA (PEM); their holders are trusted from any address",
    )


def peer_client(peer: str) -> tuple[str, int] | None:
    """gRPC's ``context.peer()`` (``ipv4:10.0.0.1:5000``, ``ipv6:[::1]:5000``) as an ASGI ``client``; None for
    anything else (a Unix socket), which no network rule trusts."""
    family, _, rest = peer.partition(":")
    host, _, port = rest.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if family not in ("ipv4", "ipv6") or not port.isdigit():
        return None
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None
    return host, int(port)


def placement_server(
    config: ServeConfig, app: App, store: ClusterStore, *, port: int | None = None, services: Sequence[Service] = ()
) -> PlacementServer | None:
    """The gRPC listener over ``app``'s state (None with ``--grpc-port 0``); ``port`` replaces the config's (tests
    pass 0: any free port)."""
    if config.grpc_port == 0:
        return None
    credentials = None
    if config.tls_cert_file is not None and config.tls_key_file is not None:
        credentials = ReloadingCredentials(config.tls_cert_file, config.tls_key_file, client_ca=config.grpc_client_ca)
    log = app.extender.log
    if log.feed is None:
        log.feed = DecisionFeed()
    if app.volcano is not None:
        app.volcano.notes.feed = log.feed
    rule = config.grpc_trust_rule

    def trusted(peer: str) -> bool:
        return rule({"client": peer_client(peer)})

    notes: Callable[[str], dict[str, str] | None] | None = app.volcano.notes.get if app.volcano is not None else None
    sources = Sources(store, app.extender.gangs, log.feed, log.explain, notes=notes, trusted=trusted)
    bind = config.grpc_port if port is None else port

    def internal_error(method: str) -> None:
        app.metrics.internal_errors.labels(method).inc()

    def refused(method: str, code: str) -> None:
        app.metrics.grpc_refused.labels(method, code).inc()

    return PlacementServer(
        sources,
        address=config.address,
        port=bind,
        credentials=credentials,
        internal_error=internal_error,
        refused=refused,
        services=services,
        max_connections=config.max_connections,
        handshake_timeout_s=config.listener_limits.handshake_timeout_s,
    )


async def serve_all(
    servers: list[uvicorn.Server],
    controller: Controller | None,
    placement: PlacementServer | None = None,
    loops: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> None:
    """Run every listener (and the controller, and ``loops``: the pool's rounds); when one listener stops (a
    signal, a failed bind), stop all."""
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    runs: list[Callable[[], Coroutine[Any, Any, None]]] = [controller.run] if controller is not None else []
    background = [asyncio.create_task(run()) for run in (*runs, *loops)]
    if placement is not None:
        try:
            await placement.start()
        except BaseException:
            for s in servers:
                s.should_exit = True
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        tasks.append(asyncio.create_task(placement.wait()))
    await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    if placement is not None:
        await placement.stop()
    await asyncio.gather(*tasks, return_exceptions=True)
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
