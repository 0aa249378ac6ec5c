"""The gRPC listener over real sockets: plaintext, TLS with the webhook certificate (re-read when its files change),
mutual TLS with --grpc-client-ca, health that follows readiness, reflection, and who may call Placement."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from kilter.api import PlacementServer, Sources
from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from kilter.api.server import PLACEMENT
from kilter.extenders.explain import DecisionLog
from kilter.gangs import GangBook
from kilter.gangs.decisions import DecisionFeed
from kilter.state.store import ClusterStore
from tests.api.serving import serving, wait_for
from tests.extenders.conftest import cluster_objects, make_certificates
from tests.local_http import get_text

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def inventory(stub: pb_grpc.PlacementStub) -> pb.InventoryResponse:
    return stub.Inventory(pb.InventoryRequest(), timeout=10)


def test_plaintext_serves_placement_health_and_reflection(tmp_path: Path) -> None:
    with serving(tmp_path) as s:
        assert sum(p.nodes_total for p in inventory(s.stub()).platforms) == 37  # 2 racks of 18 + 1 MI355X node
        channel = s.channel()
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", PLACEMENT):
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == SERVING
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        (answer,) = reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {svc.name for svc in answer.list_services_response.service}
        assert {"kilter.v1.Placement", "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= names


def test_tls_serves_with_the_webhook_certificate_and_a_plaintext_client_is_refused(tmp_path: Path) -> None:
    with serving(tmp_path, tls=True) as s:
        assert inventory(s.stub(ca=s.certs / "ca.crt")).platforms
        with pytest.raises(grpc.RpcError) as caught:
            inventory(s.stub())
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_rewritten_certificate_is_served_to_the_next_handshake(tmp_path: Path) -> None:
    with serving(tmp_path, tls=True) as s:
        old_ca = tmp_path / "old-ca.crt"
        shutil.copy(s.certs / "ca.crt", old_ca)
        assert inventory(s.stub(ca=old_ca)).platforms
        assert s.placement.credentials is not None
        s.placement.credentials.files.check_every_s = 0.0
        make_certificates(tmp_path)  # a new CA and a new certificate, over the same files
        assert inventory(s.stub(ca=s.certs / "ca.crt")).platforms  # a new channel: a new handshake
        with pytest.raises(grpc.RpcError) as caught:
            inventory(s.stub(ca=old_ca))
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert s.placement.credentials.reloads == 1


def test_a_certificate_caught_half_written_leaves_the_previous_one_in_service(tmp_path: Path) -> None:
    with serving(tmp_path, tls=True) as s:
        assert s.placement.credentials is not None
        s.placement.credentials.files.check_every_s = 0.0
        (tmp_path / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\nMII")
        assert inventory(s.stub(ca=s.certs / "ca.crt")).platforms
        assert s.placement.credentials.reloads == 0


def mtls(tmp_path: Path, **overrides: Any) -> Any:
    # trusting only 10.0.0.0/8: a loopback caller is trusted only by its certificate
    ca = tmp_path / "ca.crt"
    return serving(tmp_path, tls=True, grpc_client_ca=ca, trusted_networks=("10.0.0.0/8",), **overrides)


def test_mutual_tls_trusts_a_client_certificate_the_ca_signed_from_anywhere(tmp_path: Path) -> None:
    with mtls(tmp_path) as s:
        # the server's own certificate, signed by the same CA, serves as the client's
        stub = s.stub(ca=s.certs / "ca.crt", client=(s.certs / "tls.crt", s.certs / "tls.key"))
        assert inventory(stub).platforms


def test_mutual_tls_refuses_a_client_without_a_certificate(tmp_path: Path) -> None:
    with mtls(tmp_path) as s, pytest.raises(grpc.RpcError) as caught:
        inventory(s.stub(ca=s.certs / "ca.crt"))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_refuses_a_certificate_another_ca_signed(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    other_cert, other_key, _ = make_certificates(other)
    with mtls(tmp_path) as s, pytest.raises(grpc.RpcError) as caught:
        inventory(s.stub(ca=s.certs / "ca.crt", client=(other_cert, other_key)))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_caller_outside_the_trusted_networks_is_denied_placement_but_not_health(tmp_path: Path) -> None:
    # kilter on 127.0.0.2 trusting only 10.0.0.0/8; the client connects from 127.0.0.1, which is not in it
    with serving(tmp_path, address="127.0.0.2", trusted_networks=("10.0.0.0/8",)) as s:
        for call in (
            lambda stub: inventory(stub),
            lambda stub: stub.Plan(pb.PlanRequest(job=b"{}"), timeout=10),
            lambda stub: stub.Explain(pb.ExplainRequest(namespace="ml", name="p"), timeout=10),
            lambda stub: next(iter(stub.WatchDecisions(pb.WatchRequest(), timeout=10))),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                call(s.stub())
            assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "127.0.0.1" in (caught.value.details() or "")
        health = health_pb2_grpc.HealthStub(s.channel())
        assert health.Check(health_pb2.HealthCheckRequest(service="")).status == SERVING


@contextmanager
def bare_server(store: ClusterStore) -> Iterator[PlacementServer]:
    """A PlacementServer alone over ``store`` (which may not be loaded yet), in a thread of its own."""
    log = DecisionLog(feed=DecisionFeed())
    assert log.feed is not None
    server = PlacementServer(Sources(store, GangBook(store), log.feed, log.explain), address="127.0.0.1", port=0)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            await server.start()
            started.set()
            await server.wait()

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(20)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)
        thread.join(10)
        loop.close()


def test_health_is_not_serving_until_the_state_is_loaded(tmp_path: Path) -> None:
    store = ClusterStore()
    with bare_server(store) as server:
        channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(service=PLACEMENT)).status == NOT_SERVING
        updates = iter(health.Watch(health_pb2.HealthCheckRequest(service=PLACEMENT), timeout=20))
        assert next(updates).status == NOT_SERVING
        store.replace(cluster_objects())
        assert next(updates).status == SERVING
        assert health.Check(health_pb2.HealthCheckRequest(service="")).status == SERVING


def test_the_inventory_is_the_gangs_inventory_typed(tmp_path: Path) -> None:
    from kilter.gangs import inventory as gangs_inventory

    with serving(tmp_path) as s:
        answer = s.stub().Inventory(pb.InventoryRequest(platform="gb200-nvl72"), timeout=10)
        want = gangs_inventory.take(s.store, platform="gb200-nvl72")
        assert answer.generation == want.generation
        assert [(p.platform, p.gpus_free, tuple(p.free_histogram)) for p in answer.platforms] == [
            (p.platform, p.gpus_free, p.free_histogram) for p in want.platforms
        ]
        assert [(d.domain, d.block, d.gpus_free, d.nodes_healthy, tuple(d.trays)) for d in answer.domains] == [
            (d.domain, d.block, d.gpus_free, d.nodes_healthy, d.trays) for d in want.domains
        ]
        # r1: cordoned tray r1-t05 -> 17 healthy; r2: "busy" (4 GPUs) and "half" (2 of 4) bound
        assert {d.domain: (d.nodes_healthy, d.gpus_free) for d in answer.domains} == {"r1": (17, 68), "r2": (18, 66)}


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.InventoryRequest(platform="TPU-v9"), "platform: unknown platform 'TPU-v9'"),
        (pb.InventoryRequest(block="/"), "block: block must name a block"),
    ],
    ids=["unknown platform", "empty block"],
)
def test_a_bad_inventory_request_is_invalid_argument_naming_the_field(
    tmp_path: Path, request_: pb.InventoryRequest, field: str
) -> None:
    with serving(tmp_path) as s, pytest.raises(grpc.RpcError) as caught:
        s.stub().Inventory(request_, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(field)


def test_the_inventory_follows_a_bind_made_over_http_though_the_state_version_did_not_change(tmp_path: Path) -> None:
    import http.client
    import json

    from tests.extenders.conftest import names_args, pod_json

    def post(s: Any, verb: str, body: dict[str, Any]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=10)
        conn.request("POST", f"/scheduler/{verb}", json.dumps(body).encode(), {"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()

    with serving(tmp_path) as s:
        stub = s.stub()
        before = {d.domain: d.gpus_free for d in inventory(stub).domains}
        assert {d.domain: d.gpus_free for d in inventory(stub).domains} == before  # asked again: same answer
        version = s.store.version
        post(s, "filter", names_args(pod_json("p", 4), ["r1-t00"]))
        post(s, "bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "r1-t00"})
        after = {d.domain: d.gpus_free for d in inventory(stub).domains}
        assert s.store.version == version  # the pod is only assumed: no event reached the state
        assert after == {**before, "r1": before["r1"] - 4}  # 68 - 4 GPUs of the bound pod


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_flood_of_idle_connections_to_the_grpc_port_is_capped_and_takes_nothing_from_the_http_listener(
    tmp_path: Path,
) -> None:
    """kilter and this client share the process here: each client socket is one descriptor on this side, and
    kilter's end of each connection it keeps another; past the cap kilter keeps none, and the handshake deadline
    frees the ones it kept."""
    with serving(tmp_path, max_connections=8, tls_handshake_timeout_s=1.0) as s:
        before = _open_fds()
        flood = [socket.create_connection(("127.0.0.1", s.placement.port), timeout=10) for _ in range(60)]
        try:
            time.sleep(0.5)
            assert _open_fds() - before - len(flood) <= 8, "kilter kept at most its cap of the flood"
            assert get_text(s.http_port, "/healthz").startswith("ok"), "the HTTP listener still answers"
            assert wait_for(lambda: _open_fds() - before - len(flood) == 0), "the handshake deadline freed them"
            health = health_pb2_grpc.HealthStub(s.channel())
            assert health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status == SERVING
        finally:
            for sock in flood:
                sock.close()


def test_open_streams_are_capped_for_every_caller(tmp_path: Path) -> None:
    with serving(tmp_path, max_connections=4) as s:
        health = health_pb2_grpc.HealthStub(s.channel())
        watches = [health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=30) for _ in range(4)]
        try:
            for watch in watches:
                assert next(iter(watch)).status == SERVING
            with pytest.raises(grpc.RpcError) as caught:
                next(iter(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)))
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            watches.pop().cancel()

            def another_opens() -> bool:
                try:
                    again = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10)
                    opened = next(iter(again)).status == SERVING
                    again.cancel()
                    return bool(opened)
                except grpc.RpcError:
                    return False

            assert wait_for(another_opens), "a stream closed makes room for another"
        finally:
            for watch in watches:
                watch.cancel()
