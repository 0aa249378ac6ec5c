"""What a flood of idle TCP connections to the gRPC port costs ``kilter serve`` (issue #37, item 1).

In process (the server in a thread, as the API tests run it): 1,100 connections that never speak, against the
default cap of 256. Reported: the descriptors kilter held for them at the peak and once the handshake deadline
passed, how long ``/healthz`` on the HTTP listener took meanwhile, and whether gRPC health answered afterwards.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.api.serving import serving
from tests.local_http import get_text

__all__ = ["grpc_flood"]

FLOOD = 1_100


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def grpc_flood() -> dict[str, Any]:
    """Descriptors kilter holds for the flood, and how the other listener and gRPC health fare."""
    with TemporaryDirectory() as tmp, serving(Path(tmp), tls_handshake_timeout_s=2.0) as s:
        before = _fds()
        flood = [socket.create_connection(("127.0.0.1", s.placement.port), timeout=10) for _ in range(FLOOD)]
        try:
            time.sleep(0.5)
            held_peak = _fds() - before - len(flood)
            started = time.perf_counter()
            healthz = get_text(s.http_port, "/healthz").strip()
            healthz_ms = (time.perf_counter() - started) * 1000
            time.sleep(3.0)
            held_after = _fds() - before - len(flood)
            check = health_pb2_grpc.HealthStub(s.channel()).Check(health_pb2.HealthCheckRequest(), timeout=10)
        finally:
            for sock in flood:
                sock.close()
    return {
        "connections": FLOOD,
        "cap": 256,
        "held_by_kilter_at_peak": held_peak,
        "held_after_handshake_deadline": held_after,
        "healthz": healthz,
        "healthz_ms": round(healthz_ms, 2),
        "grpc_health_after": health_pb2.HealthCheckResponse.ServingStatus.Name(check.status),
    }
