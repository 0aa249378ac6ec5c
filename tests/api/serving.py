"""``kilter serve``'s HTTP and gRPC listeners as ``run`` composes them, on 127.0.0.1 in a thread, for tests that
call the gRPC API with grpcio clients and make decisions through the HTTP verbs."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import uvloop

from kilter.api import PlacementServer
from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.cli import serve, serve_grpc
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.server import App
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects, make_certificates, write_snapshot


@dataclass
class Serving:
    app: App
    store: ClusterStore
    http_port: int
    placement: PlacementServer
    certs: Path

    @property
    def target(self) -> str:
        return f"{self.placement.address}:{self.placement.port}"

    def channel(self, *, ca: Path | None = None, client: tuple[Path, Path] | None = None) -> grpc.Channel:
        """A channel to the gRPC listener: plaintext, or TLS trusting ``ca`` (with a client certificate)."""
        if ca is None:
            return grpc.insecure_channel(self.target)
        key, chain = (client[1].read_bytes(), client[0].read_bytes()) if client is not None else (None, None)
        credentials = grpc.ssl_channel_credentials(ca.read_bytes(), private_key=key, certificate_chain=chain)
        return grpc.secure_channel(self.target, credentials)

    def stub(self, **kwargs: Any) -> pb_grpc.PlacementStub:
        return pb_grpc.PlacementStub(self.channel(**kwargs))


@contextmanager
def serving(
    tmp_path: Path, *, objects: list[dict[str, Any]] | None = None, tls: bool = False, **overrides: Any
) -> Iterator[Serving]:
    """kilter serving ``objects`` (default: the extender tests' cluster; ``demo=True`` the demo fleet) with its gRPC
    listener on an ephemeral port, TLS with a fresh CA's certificate when ``tls``, ``overrides`` of ServeConfig."""
    snapshot = None
    if not overrides.get("demo"):
        snapshot = tmp_path / "snapshot.json"
        write_snapshot(snapshot, cluster_objects() if objects is None else objects)
    cert, key, _ = make_certificates(tmp_path)
    base = ServeConfig(snapshot=snapshot, address="127.0.0.1", http_port=0, webhook_port=0, reload_interval_s=0.05)
    if tls:
        base = dataclasses.replace(base, tls_cert_file=cert, tls_key_file=key)
    config = dataclasses.replace(base, **overrides)
    app, store = serve.build_app(config)
    servers, _ = serve.listeners(config, app, store, serve.tls_files(config))
    placement = serve_grpc.placement_server(config, app, store, port=0)
    assert placement is not None
    thread = threading.Thread(target=uvloop.run, args=(serve_grpc.serve_all(servers, None, placement),), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not all(s.started for s in servers) or placement.loop is None:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("kilter serve did not start")
        time.sleep(0.01)
    sockets = servers[0].servers[0].sockets
    try:
        yield Serving(app, store, sockets[0].getsockname()[1], placement, tmp_path)
    finally:
        for s in servers:
            s.should_exit = True
        thread.join(timeout=10)


def wait_for(condition: Any, *, within_s: float = 10.0) -> bool:
    """Poll ``condition()`` until it holds or ``within_s`` passes (for what the server does on its own loop)."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Watch:
    """A WatchDecisions stream, read one message at a time (grpc-stubs types the call as iterable only)."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._messages: Iterator[pb.WatchResponse] = iter(call)

    def next(self) -> pb.WatchResponse:
        return next(self._messages)

    def cancel(self) -> None:
        self._call.cancel()


def watch(stub: pb_grpc.PlacementStub, namespace: str = "") -> Watch:
    return Watch(stub.WatchDecisions(pb.WatchRequest(namespace=namespace)))
