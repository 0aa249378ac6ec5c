"""Whether ``kilter serve``'s ports are free, asked before anything starts.

A listener that cannot bind fails deep inside uvicorn or gRPC's core, after
the state is loaded and the other listeners are up, in several log lines of
theirs. Asked first, a port another process holds is one line naming the flag
that chose it, and kilter exits before it has started anything.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable

from kilter.cli.serve_config import ServeConfig
from kilter.model.errors import ConfigError

__all__ = ["check_free", "listened"]


def listened(config: ServeConfig, *, webhooks: bool) -> list[tuple[str, str, int]]:
    """(flag, address, port) of every TCP listener ``config`` starts: HTTP, webhooks (with a certificate), gRPC."""
    found = [("--http-port", config.address, config.http_port), ("--grpc-port", config.address, config.grpc_port)]
    return [*found, ("--webhook-port", config.address, config.webhook_port)] if webhooks else found


def check_free(listeners: Iterable[tuple[str, str, int]]) -> None:
    """``ConfigError`` for the first (flag, address, port) another socket is listening on, or that needs privileges
    this process lacks; port 0 (the system picks one, or the listener is off) is skipped. Bound as the listeners
    bind (``SO_REUSEADDR``), so a port left in TIME_WAIT by a kilter just stopped is free; any other failure is
    left to the listener itself, which says it in its own words."""
    for flag, address, port in listeners:
        if port == 0:
            continue
        host = "0.0.0.0" if address in ("", "::", "[::]") else address.strip("[]")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise ConfigError(
                        f"{flag} {port}: {host}:{port} is already in use (another kilter serve?); stop it or choose "
                        f"another port with {flag}"
                    ) from None
                if exc.errno == errno.EACCES:
                    raise ConfigError(
                        f"{flag} {port}: binding {host}:{port} needs privileges; choose a port above 1023"
                    ) from None
