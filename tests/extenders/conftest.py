"""A real ``kilter serve`` on 127.0.0.1 over a snapshot file, and request bodies shaped as kube-scheduler sends them."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from kilter.cli.serve import build_app
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.server import App
from kilter.state.store import ClusterStore
from tests.live_mode import LiveCluster, live_cluster, wait_ready
from tests.topology.builders import CLIQUE, TIER1, node_dict


@dataclass
class Served:
    """kilter serve, its state from a snapshot file or (``cluster``) from a live cluster's list/watch."""

    app: App
    store: ClusterStore
    snapshot: Path | None
    port: int
    tls: ssl.SSLContext | None = None
    cluster: LiveCluster | None = None

    def replace(self, objects: list[dict[str, Any]]) -> None:
        """Change the cluster to ``objects``: rewrite the snapshot, or create/update/delete through the API."""
        if self.cluster is not None:
            self.cluster.replace(objects, seen_by=self.store)
        else:
            assert self.snapshot is not None
            write_snapshot(self.snapshot, objects)

    def connect(self) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls, timeout=10)
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, http.client.HTTPResponse]:
        conn = self.connect()
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body, headers)
            response = conn.getresponse()
            return response.status, response.read(), response
        finally:
            conn.close()

    def post(self, verb: str, body: Any) -> tuple[int, Any]:
        pod = body.get("Pod") if isinstance(body, dict) else None
        if self.cluster is not None and isinstance(pod, dict) and "metadata" in pod:
            self.cluster.ensure_pod(pod)  # kube-scheduler asks only about pods the API server holds
        status, data, _ = self.call("POST", f"/scheduler/{verb}", json.dumps(body).encode())
        return status, json.loads(data) if status == 200 else data.decode()


def pod_json(
    name: str,
    gpus: int = 4,
    *,
    resource: str = "nvidia.com/gpu",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    node: str = "",
) -> dict[str, Any]:
    """A Pod as ``json.Marshal(v1.Pod)`` writes it: camelCase, omitempty fields absent, zero times null."""
    limits = {resource: str(gpus), "cpu": "8", "memory": "64Gi"} if gpus else {"cpu": "1", "memory": "1Gi"}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "uid": uid or f"uid-{name}",
        "resourceVersion": "4711",
        "creationTimestamp": None,
        "labels": labels or {},
    }
    if annotations:
        meta["annotations"] = annotations
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:25.10-py3",
                "resources": {"limits": limits, "requests": limits},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        ],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {},
        "schedulerName": "kilter-scheduler",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending", "qosClass": "Guaranteed"},
    }


def names_args(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def cluster_objects() -> list[dict[str, Any]]:
    """Two GB200 NVL72 racks under one leaf, one busy tray, one cordoned tray, an MI355X node and a CPU node."""
    objects: list[dict[str, Any]] = []
    for rack in ("r1", "r2"):
        for t in range(18):
            name = f"{rack}-t{t:02d}"
            objects.append(node_dict(name, labels={CLIQUE: rack, TIER1: "leaf-a"}, cordoned=name == "r1-t05"))
    objects.append(node_dict("mi-1", product="AMD_Instinct_MI355X", gpus=8, resource="amd.com/gpu"))
    cpu = node_dict("cpu-1")
    cpu["metadata"]["labels"] = {"kubernetes.io/hostname": "cpu-1"}
    cpu["status"]["allocatable"] = {"cpu": "64"}
    objects.append(cpu)
    objects.append(pod_json("busy", 4, node="r2-t00"))
    objects.append(pod_json("half", 2, node="r2-t01"))
    return objects


def write_snapshot(path: Path, objects: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


class _Server:
    def __init__(self, app: Any, tls: tuple[Path, Path] | None, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            loop="uvloop",
            http="httptools",
            lifespan="on",
            access_log=False,
            log_level="warning",
            ssl_certfile=str(tls[0]) if tls else None,
            ssl_keyfile=str(tls[1]) if tls else None,
        )
        if ssl_context is not None:
            config.load()
            config.ssl = ssl_context
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> int:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("kilter serve did not start")
            time.sleep(0.01)
        return self.port

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


TEST_CONFIG = ServeConfig(max_body_bytes=64 * 1024 * 1024, reload_interval_s=0.05)
"""``kilter serve`` as the tests run it: bodies up to 64 MiB, a snapshot file re-read within 50 ms."""


def serve_config(snapshot: Path | None, **overrides: Any) -> ServeConfig:
    """``TEST_CONFIG`` over ``snapshot`` (None: a live cluster in ``overrides``), with ``overrides`` replaced."""
    return dataclasses.replace(TEST_CONFIG, snapshot=snapshot, **overrides)


@contextlib.contextmanager
def serve_snapshot(tmp_path: Path, objects: list[dict[str, Any]] | None = None, **overrides: Any) -> Iterator[Served]:
    """kilter serving ``objects`` (default: the scenario's cluster) from ``tmp_path``/snapshot.json, over HTTP on
    loopback, with ``overrides`` of ``TEST_CONFIG``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects() if objects is None else objects)
    app, store = build_app(serve_config(snapshot, **overrides))
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


@pytest.fixture(params=["snapshot", "live"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    """The scenario's cluster as a snapshot file, and again as a live cluster kilter lists and watches."""
    if request.param == "live":
        with live_cluster(tmp_path, cluster_objects()) as cluster:
            app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
            with _Server(app, None) as port:
                wait_ready(store)
                yield Served(app, store, None, port, cluster=cluster)
        return
    with serve_snapshot(tmp_path) as served:
        yield served


@pytest.fixture
def small_body_server(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path, max_body_bytes=4096) as served:
        yield served


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it (cert, key, CA cert)."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kilter test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kilter")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path, ca_path = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path, ca_path


@pytest.fixture
def tls_served(tmp_path: Path) -> Iterator[Served]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, cluster_objects())
    cert, key, ca = make_certificates(tmp_path)
    app, store = build_app(serve_config(snapshot))
    client = ssl.create_default_context(cafile=str(ca))
    with _Server(app, (cert, key)) as port:
        yield Served(app, store, snapshot, port, tls=client)
