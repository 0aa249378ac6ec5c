"""Servers for the load benchmarks: ``kilter serve``'s apps in a process of their own, on an ephemeral port.

The server runs in a spawned process so the load generator never shares its
interpreter; the parent learns the port through a pipe and waits for
``/readyz`` before measuring.
"""

from __future__ import annotations

import http.client
import multiprocessing
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import uvicorn

from kilter.cli.serve_config import ServeConfig

__all__ = ["run_on_ephemeral_port", "serve_config", "server_process"]


# The full-Node filter posts 500 Nodes (~8.4 MB): past the 8 MiB NodeNames default, as a cluster in full-Node
# mode (``nodeCacheCapable: false``) would raise it with ``--max-body-bytes``.
FULL_NODE_BODY_BYTES = 64 * 1024 * 1024


def serve_config(snapshot: Path) -> ServeConfig:
    """What ``kilter serve --snapshot FILE --max-body-bytes 64Mi`` runs with: its defaults, with room for the
    full-Node filter."""
    return ServeConfig(snapshot=snapshot, max_body_bytes=FULL_NODE_BODY_BYTES)


def run_on_ephemeral_port(config: uvicorn.Config, port_out: Connection) -> None:
    """In the child: bind 127.0.0.1:0, tell the parent the port, serve until terminated."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port_out.send(sock.getsockname()[1])
    port_out.close()
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def server_process(
    target: Callable[..., None], args: tuple[Any, ...], *, tls: ssl.SSLContext | None = None
) -> Iterator[tuple[int, int, float]]:
    """(port, pid, seconds until ready) of ``target(*args, port_out)`` in a spawned process; SIGTERM on exit."""
    ctx = multiprocessing.get_context("spawn")
    port_in, port_out = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=target, args=(*args, port_out), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    port_out.close()
    try:
        if not port_in.poll(180):
            raise RuntimeError("the server process did not report its port")
        port: int = port_in.recv()
        deadline = time.monotonic() + 60
        while True:
            if not proc.is_alive():
                raise RuntimeError(f"the server process exited with {proc.exitcode}")
            try:
                conn = (
                    http.client.HTTPSConnection("127.0.0.1", port, context=tls, timeout=5)
                    if tls is not None
                    else http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                )
                conn.request("GET", "/readyz")
                status = conn.getresponse().status
                conn.close()
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the server never became ready")
            time.sleep(0.05)
        assert proc.pid is not None
        yield port, proc.pid, time.perf_counter() - t0
    finally:
        port_in.close()
        proc.terminate()
        proc.join(15)
        if proc.is_alive():
            proc.kill()
            proc.join()
