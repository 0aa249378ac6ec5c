"""The live feed against a list/watch server that keeps the API contract: paging, bookmarks, 410, drops, late CRDs.

Each test runs kilter's real reflectors (threads doing HTTP) and applies
their batches on an asyncio loop, then compares the store with what the
server holds — nothing lost, nothing twice.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from kilter.kube.api import ApiError, ApiServer
from kilter.kube.protobuf import ACCEPT
from kilter.model.core_v1 import Node, Pod
from kilter.state.live import LiveFeed, default_resources
from kilter.state.reflector import Reflector
from kilter.state.reflector import WatchedResource as Watched
from kilter.state.store import ClusterStore, object_key
from kilter.topology.catalog import BUILTIN, Catalog
from tests.listwatch import NODES, PODS, ListWatchServer, Resource
from tests.topology.builders import node_dict

WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True, installed=False)
TOKEN = "live-token"
CATALOG = Catalog(BUILTIN)


def gpu_pod(name: str, *, node: str = "", gpus: int = 4, phase: str = "") -> dict[str, Any]:
    resources = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [
                {"name": "c", "image": "x", "env": [{"name": "A", "value": "1"}], "resources": {"limits": resources}}
            ],
        },
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }


class Harness:
    """A feed on its own event loop thread; ``settled`` waits until the store matches a condition."""

    def __init__(
        self,
        server: ListWatchServer,
        *,
        api_type: type[ApiServer] = ApiServer,
        plurals: tuple[str, ...] = ("nodes", "pods", "workloads"),
        **options: Any,
    ) -> None:
        self.store = ClusterStore(catalog=CATALOG)
        api = api_type("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {TOKEN}"})
        resources = [r for r in default_resources(CATALOG) if r.plural in plurals]
        self.feed = LiveFeed(api, self.store, resources, **options)
        self.loop = asyncio.new_event_loop()
        self.loop.call_soon(self.feed.start, self.loop)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        future = asyncio.run_coroutine_threadsafe(_call(fn), self.loop)
        return future.result(timeout=10)

    def settled(self, condition: Callable[[ClusterStore], bool], timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.on_loop(lambda: condition(self.store)):
                return
            time.sleep(0.02)
        raise AssertionError(f"not settled; feed status {self.feed.status()}")

    def names(self, kind: str) -> set[str]:
        return set(self.on_loop(lambda: {k[3] for k in self.store.objects if k[1] == kind}))

    def close(self) -> None:
        self.feed.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


async def _call(fn: Callable[[], Any]) -> Any:
    return fn()


@pytest.fixture
def server() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS, NODES, WORKLOADS], token=TOKEN) as s:
        yield s


@pytest.fixture
def harness(server: ListWatchServer) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(**options: Any) -> Harness:
        options.setdefault("page_size", 3)
        options.setdefault("absent_retry_s", 0.1)
        options.setdefault("backoff_s", (0.01, 0.05))
        made.append(Harness(server, **options))
        return made[-1]

    yield make
    for h in made:
        h.close()


def test_paged_lists_then_watch_events_reach_the_store(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    for i in range(10):
        server.add(node_dict(f"n{i}"))
    server.add(gpu_pod("p0", node="n0"))
    h = harness()
    h.settled(lambda s: s.ready)
    assert h.names("Node") == {f"n{i}" for i in range(10)}
    list_calls = [r for r in server.requests if r.path == "/api/v1/nodes" and "watch" not in r.query]
    assert len(list_calls) == 4 and all(r.query["limit"] == "3" for r in list_calls)  # 10 nodes in pages of 3
    server.add(node_dict("n10"))
    server.delete("", "nodes", None, "n3")
    uid = server.add(gpu_pod("p1", node="n1"))["metadata"]["uid"]
    h.settled(lambda s: {k[3] for k in s.objects if k[1] == "Node"} == {*(f"n{i}" for i in range(11))} - {"n3"})
    h.settled(lambda s: s.fleet() is not None and (b := s.booking(uid)) is not None and b.gpus == 4)


def test_pods_that_ask_for_no_gpu_or_have_ended_never_stay(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    server.add(node_dict("n0"))
    server.add(gpu_pod("cpu", node="n0", gpus=0))
    server.add(gpu_pod("gpu", node="n0"))
    h = harness()
    h.settled(lambda s: s.ready)
    assert h.names("Pod") == {"gpu"}
    stored = h.on_loop(lambda: h.store.pod_named("ml", "gpu"))
    assert isinstance(stored, Pod) and stored.spec.node_name == "n0"  # typed from the wire: no managedFields, no env
    done = gpu_pod("gpu", node="n0", phase="Succeeded")
    server.update(done)  # leaves the watch's field selector: the server sends DELETED
    h.settled(lambda s: s.pod_named("ml", "gpu") is None)
    h.settled(lambda s: s.fleet().bitmap.node_free_gpus(s.fleet().node_index["n0"]) == 4)


def pods_by_name(store: ClusterStore) -> dict[str, Pod]:
    return {p.metadata.name: p for p in store.pods()}


class JsonApi(ApiServer):
    """Asks for JSON whatever the reflector prefers: how a server without protobuf answers."""

    def call_raw(self, method: str, path: str, *, accept: str = "application/json") -> tuple[bytes, str]:
        return super().call_raw(method, path, accept="application/json")


def test_pods_and_nodes_are_listed_as_protobuf_and_the_store_is_the_same_as_from_json(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    for i in range(4):
        server.add(node_dict(f"n{i}"))
    for i in range(7):
        server.add(gpu_pod(f"p{i}", node=f"n{i % 4}" if i % 3 else "", gpus=1 + i % 2))
    stores: list[dict[str, Pod]] = []
    for api_type in (ApiServer, JsonApi):
        h = harness(api_type=api_type)
        h.settled(lambda s: s.ready)
        stores.append(h.on_loop(partial(pods_by_name, h.store)))
    assert stores[0] == stores[1] and len(stores[0]) == 7
    asked = {(r.path, r.accept) for r in server.requests if r.query.get("limit")}
    assert {("/api/v1/pods", ACCEPT), ("/api/v1/nodes", ACCEPT), ("/api/v1/pods", "application/json")} <= asked


def test_a_pod_kilter_cannot_read_is_skipped_without_holding_up_the_others(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    server.add(node_dict("n0"))
    for name in ("a", "b", "c", "d"):
        server.add(gpu_pod(name, node="n0", gpus=1))
    odd = gpu_pod("odd", node="n0", gpus=1)
    odd["metadata"]["labels"] = ["not", "a", "map"]  # only JSON can carry it: protobuf's item skip is test_protobuf's
    server.add(odd)
    h = harness(page_size=10, api_type=JsonApi)
    h.settled(lambda s: s.ready)
    assert h.names("Pod") == {"a", "b", "c", "d"}
    pods = next(r for r in h.feed.reflectors if r.resource.plural == "pods")
    assert pods.unreadable == 1  # the odd pod, counted once
    h.settled(lambda s: s.fleet().bitmap.node_free_gpus(s.fleet().node_index["n0"]) == 0)


def test_a_pod_that_turns_unreadable_on_the_watch_is_forgotten_and_the_watch_goes_on(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    server.add(node_dict("n0"))
    server.add(gpu_pod("a", node="n0", gpus=1))
    h = harness()
    h.settled(lambda s: s.ready and s.pod_named("ml", "a") is not None)
    odd = gpu_pod("a", node="n0", gpus=1)
    odd["metadata"]["labels"] = ["not", "a", "map"]
    server.update(odd)
    server.add(gpu_pod("b", node="n0", gpus=2))  # after the unreadable event: still arrives
    h.settled(lambda s: s.pod_named("ml", "a") is None and s.pod_named("ml", "b") is not None)
    h.settled(lambda s: s.fleet().bitmap.node_free_gpus(s.fleet().node_index["n0"]) == 2)
    pods = next(r for r in h.feed.reflectors if r.resource.plural == "pods")
    assert pods.unreadable == 1  # the update that turned "a" unreadable, counted once
    assert pods.lists == 1 and pods.last_error == ""  # no relist, no retry loop on the bad event


def send_raw_event(server: ListWatchServer, plural: str, line: bytes) -> None:
    """Put ``line`` on every open watch of ``plural`` as it stands (the test server encodes what it holds with
    Python's json, which refuses objects this deep)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with server._lock:
            watches = [w for w in server._watches if w.resource.plural == plural]
            for watch in watches:
                watch.out.put(line)
        if watches:
            return
        time.sleep(0.02)
    raise AssertionError(f"no watch of {plural} opened")


def test_a_watch_event_nested_100000_deep_is_skipped_and_counted_and_the_watch_goes_on(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    server.add(node_dict("n0"))
    h = harness(api_type=JsonApi)
    h.settled(lambda s: s.ready)
    deep = b"[" * 100_000 + b"]" * 100_000
    pod = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"deep","namespace":"ml","resourceVersion":"2"}'
    send_raw_event(server, "pods", b'{"type":"ADDED","object":' + pod + b',"spec":{"x":' + deep + b"}}}\n")
    server.add(gpu_pod("b", node="n0", gpus=2))  # after the unreadable event: still arrives
    h.settled(lambda s: s.pod_named("ml", "b") is not None)
    pods = next(r for r in h.feed.reflectors if r.resource.plural == "pods")
    assert pods.unreadable == 1 and pods.lists == 1 and pods.last_error == ""
    assert h.on_loop(lambda: h.store.pod_named("ml", "deep")) is None


def test_a_dropped_watch_resumes_from_the_last_version_without_a_relist(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    server.add(node_dict("n0"))
    h = harness()
    h.settled(lambda s: s.ready)
    nodes = next(r for r in h.feed.reflectors if r.resource.plural == "nodes")
    assert server.drop_watches() >= 1
    server.add(node_dict("n1"))
    h.settled(lambda s: s.node_named("n1") is not None)
    assert nodes.lists == 1 and nodes.watches >= 2
    resumed = [r for r in server.requests if r.path == "/api/v1/nodes" and r.query.get("watch") == "1"][-1]
    assert int(resumed.query["resourceVersion"]) >= 1


def test_a_watch_too_old_for_the_server_relists_without_losing_or_doubling(
    server: ListWatchServer, harness: Callable[..., Harness]
) -> None:
    for i in range(5):
        server.add(node_dict(f"n{i}"))
    h = harness()
    h.settled(lambda s: s.ready)
    nodes = next(r for r in h.feed.reflectors if r.resource.plural == "nodes")
    h.feed.stop()  # miss everything that happens now
    server.delete("", "nodes", None, "n0")
    server.add(node_dict("n9"))
    server.compact()
    for r in h.feed.reflectors:  # back from the old version, which the server no longer has
        r.start()
    h.settled(lambda s: {k[3] for k in s.objects if k[1] == "Node"} == {"n1", "n2", "n3", "n4", "n9"})
    assert nodes.lists == 2  # 410 on the watch: listed again


@dataclass(frozen=True)
class CompactingApi(ApiServer):
    """Compacts the server's history after the first list page, as etcd may while a big list is paged."""

    server: ListWatchServer | None = None
    pages: list[str] = field(default_factory=list)

    def call_raw(self, method: str, path: str, *, accept: str = "application/json") -> tuple[bytes, str]:
        raw = super().call_raw(method, path, accept=accept)
        self.pages.append(path)
        if len(self.pages) == 1 and self.server is not None:
            self.server.delete("", "nodes", None, "n0")
            self.server.add(node_dict("n9"))
            self.server.compact()
        return raw


def test_a_continue_token_that_expires_mid_list_lists_again_without_losing_or_doubling(
    server: ListWatchServer,
) -> None:
    for i in range(7):
        server.add(node_dict(f"n{i}"))
    api = CompactingApi("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {TOKEN}"}, server=server)
    nodes = next(r for r in default_resources(CATALOG) if r.plural == "nodes")
    got = Reflector(api, nodes, lambda batch: None, page_size=2).list_once()
    names = [object_key(o)[3] for o in got]
    assert sorted(names) == ["n1", "n2", "n3", "n4", "n5", "n6", "n9"]  # the world after the change, once each
    assert sum("continue=" not in p for p in api.pages) == 2  # the first page, then the relist's first page


def test_a_crd_installed_later_is_found_and_listed(server: ListWatchServer, harness: Callable[..., Harness]) -> None:
    h = harness()
    h.settled(lambda s: s.ready)  # absent resources do not hold readiness back
    workloads = next(r for r in h.feed.reflectors if r.resource.plural == "workloads")
    assert workloads.state == "absent"
    server.install("kueue.x-k8s.io", "v1beta2", "workloads")
    server.add(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "ml"},
            "spec": {},
        }
    )
    h.settled(lambda s: s.get("kueue.x-k8s.io", "Workload", "ml", "w") is not None)
    assert workloads.version == "v1beta2"


def test_readiness_waits_for_every_first_list(server: ListWatchServer, harness: Callable[..., Harness]) -> None:
    server.add(node_dict("n0"))
    server.delay_s = 0.5
    h = harness()
    time.sleep(0.2)
    assert not h.on_loop(lambda: h.store.ready)
    h.settled(lambda s: s.ready)
    status = h.feed.status()
    assert (
        status["nodes"]["synced"]
        and status["pods"]["synced"]
        and status["workloads.kueue.x-k8s.io"]["state"] == "absent"
    )


def test_a_refusing_server_is_retried_with_backoff(server: ListWatchServer) -> None:
    store = ClusterStore(catalog=CATALOG)
    api = ApiServer("http", "127.0.0.1", server.port, {"Authorization": "Bearer wrong"})
    feed = LiveFeed(api, store, [Watched("", ("v1",), "nodes", "Node")], backoff_s=(0.01, 0.05))
    loop = asyncio.new_event_loop()
    feed.start(loop)
    time.sleep(0.3)
    feed.stop()
    loop.close()
    status = feed.status()["nodes"]
    assert not status["synced"] and "401" in str(status["lastError"])
    assert 2 <= sum(1 for r in server.requests if r.path.startswith("/api")) < 100


@dataclass(frozen=True)
class RefusingWatchApi(ApiServer):
    """Answers the first watch with HTTP 410 itself (not as a watch ERROR event), as a proxy in front may."""

    refused: list[str] = field(default_factory=list)

    def stream(self, path: str, *, timeout_s: float) -> Any:
        if not self.refused:
            self.refused.append(path)
            raise ApiError(410, "too old resource version")
        return super().stream(path, timeout_s=timeout_s)


def test_a_watch_refused_with_http_410_lists_again(server: ListWatchServer) -> None:
    for i in range(3):
        server.add(node_dict(f"n{i}"))
    api = RefusingWatchApi("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {TOKEN}"})
    reflector = Reflector(api, Watched("", ("v1",), "nodes", "Node", typed=Node), lambda batch: None)
    reflector.start()
    try:
        deadline = time.monotonic() + 10
        while reflector.lists < 2 or reflector.state != "watching":
            assert time.monotonic() < deadline, reflector.last_error
            time.sleep(0.02)
    finally:
        reflector.stop()
    assert api.refused and reflector.last_error == ""  # no backoff loop on the same version: listed again
