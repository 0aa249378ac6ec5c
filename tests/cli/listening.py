"""``kilter serve``'s listeners as ``run`` composes them, on 127.0.0.1 in a thread, for tests that need sockets."""

from __future__ import annotations

import dataclasses
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
import uvloop

from kilter.cli import serve
from kilter.cli.listeners import Guard
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.server import App
from tests.extenders.conftest import cluster_objects, make_certificates, write_snapshot


@dataclass
class Listening:
    """Both listeners of one ``kilter serve``: their ports, guards, and a client TLS context trusting its CA."""

    app: App
    http_port: int
    webhook_port: int
    http: Guard
    webhooks: Guard
    client_tls: ssl.SSLContext
    certs: Path


def _port(server: uvicorn.Server) -> int:
    sockets = server.servers[0].sockets
    port: int = sockets[0].getsockname()[1]
    return port


@contextmanager
def listening(tmp_path: Path, **overrides: Any) -> Iterator[Listening]:
    """``kilter serve`` over the test cluster with a certificate, both listeners on ephemeral ports of
    ``address`` (127.0.0.1 unless overridden), the ``ServeConfig`` fields in ``overrides`` replaced."""
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    cert, key, ca = make_certificates(tmp_path)
    base = ServeConfig(snapshot=snapshot, address="127.0.0.1", http_port=0, webhook_port=0, reload_interval_s=0.05)
    config = dataclasses.replace(base, tls_cert_file=cert, tls_key_file=key, **overrides)
    tls = serve.tls_files(config)
    app, store = serve.build_app(config)
    servers, guards = serve.listeners(config, app, store, tls)
    thread = threading.Thread(target=uvloop.run, args=(serve._serve_all(servers, None),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not all(s.started for s in servers):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("kilter serve did not start")
        time.sleep(0.01)
    client = ssl.create_default_context(cafile=str(ca))
    try:
        yield Listening(app, _port(servers[0]), _port(servers[1]), guards[0], guards[1], client, tmp_path)
    finally:
        for s in servers:
            s.should_exit = True
        thread.join(timeout=10)


def closed_by_server(sock: socket.socket | ssl.SSLSocket, *, within_s: float = 10.0) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) before ``within_s`` passes: the hang detector is the
    client's timeout, not a clock compared to the server's deadline."""
    sock.settimeout(within_s)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, ssl.SSLEOFError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def wait_for(condition: Any, *, within_s: float = 10.0) -> bool:
    """Poll ``condition()`` until it holds or ``within_s`` passes (for counts the server updates on its loop)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
