"""kilter's webhook listener over real HTTPS on 127.0.0.1, and AdmissionReviews shaped as kube-apiserver sends them."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from kilter.cli.serve import webhook_app
from kilter.kube.api import connect
from kilter.state.live import LiveFeed, default_resources
from kilter.state.store import ClusterStore
from kilter.webhooks.server import WebhookApp
from kilter.webhooks.tls import ReloadingTLS
from tests.extenders.conftest import _Server, cluster_objects, make_certificates, pod_json
from tests.live_mode import LiveCluster, live_cluster, wait_ready

KILTER_USER = "system:serviceaccount:kube-system:kilter-scheduler"


@dataclass
class Hooks:
    """The webhook listener, its state from objects given at once or (``cluster``) from a live cluster."""

    app: WebhookApp
    store: ClusterStore
    tls: ReloadingTLS
    port: int
    client: ssl.SSLContext
    certs: Path
    cluster: LiveCluster | None = None

    def replace(self, objects: list[dict[str, Any]]) -> None:
        """Change the cluster to ``objects`` and wait until kilter's state shows it."""
        if self.cluster is None:
            self.store.replace(objects)
            return
        self.cluster.replace(objects, seen_by=self.store)

    def review(self, path: str, review: dict[str, Any]) -> dict[str, Any]:
        status, data = self.post(path, json.dumps(review).encode())
        assert status == 200, data
        answer: dict[str, Any] = json.loads(data)
        return answer

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.client, timeout=10)
        try:
            conn.request("POST", f"{path}?timeout=10s", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


def workload_wl(check: dict[str, Any]) -> dict[str, Any]:
    """Workload ml/wl (uid-wl) of one 2-pod set ``main`` as Kueue admitted it, with kilter's admission check as
    ``check`` says (its state, and podSetUpdates once kilter wrote them)."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml", "uid": "uid-wl"},
        "spec": {
            "queueName": "team",
            "podSets": [{"name": "main", "count": 2, "template": {"spec": pod_json("x")["spec"]}}],
        },
        "status": {"admissionChecks": [{"name": "kilter", "lastTransitionTime": "2026-12-01T10:00:00Z", **check}]},
    }


def admission_review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
    user: str = "alice@example.com",
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
) -> dict[str, Any]:
    """A review as kube-apiserver writes it: every field of AdmissionRequest, null where unset."""
    target = obj if obj is not None else old
    assert target is not None
    group, _, version = target["apiVersion"].rpartition("/")
    kind = target["kind"]
    resource = kind.lower() + "s" if not kind.endswith("s") else kind.lower() + "es"
    meta = target.get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": user, "uid": "u-1", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": {"kind": f"{operation.title()}Options", "apiVersion": "meta.k8s.io/v1"},
        },
    }


class _WithFeed:
    """The webhook app with a live feed started on its loop, as ``kilter serve`` feeds every listener's state."""

    def __init__(self, app: WebhookApp, feed: LiveFeed) -> None:
        self.app, self.feed = app, feed

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.feed.start(asyncio.get_running_loop())
        await self.app(scope, receive, send)


def start(tmp_path: Path, objects: list[dict[str, Any]], *, mode: str = "snapshot") -> Iterator[Hooks]:
    cert, key, ca = make_certificates(tmp_path)
    tls = ReloadingTLS(cert, key, check_every_s=0.0)
    client = ssl.create_default_context(cafile=str(ca))
    store = ClusterStore()
    app = webhook_app(store, [KILTER_USER])
    if mode == "live":
        with live_cluster(tmp_path, objects) as cluster:
            feed = LiveFeed(connect(cluster.kubeconfig), store, default_resources(store.catalog))
            try:
                with _Server(_WithFeed(app, feed), None, ssl_context=tls.context) as port:
                    wait_ready(store)
                    yield Hooks(app, store, tls, port, client, tmp_path, cluster)
            finally:
                feed.stop()
        return
    store.replace(objects)
    store.fleet()
    with _Server(app, None, ssl_context=tls.context) as port:
        yield Hooks(app, store, tls, port, client, tmp_path)


@pytest.fixture(params=["snapshot", "live"])
def hooks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hooks]:
    """The scenario's cluster given at once, and again as a live cluster kilter lists and watches."""
    yield from start(tmp_path, cluster_objects(), mode=request.param)


__all__ = ["KILTER_USER", "Hooks", "admission_review", "start", "uvicorn", "workload_wl"]
