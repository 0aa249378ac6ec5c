"""What kilter assumes of a real kube-apiserver and could only check against the list/watch test server here.

Each test drives kilter's own code (reflector, binder, plan recorder, leader
elector, event recorder) against a real API server; tests/e2e/README.md lists
the assumptions and which test checks each.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any
from urllib.parse import urlencode

import msgspec
import pytest

from kilter.extenders.binder import ApiBinder
from kilter.gangs import PlanKeys, records
from kilter.gangs.recorder import PlanRecorder
from kilter.kube import protobuf
from kilter.kube.api import MERGE_PATCH, ApiError, ApiServer
from kilter.kube.events import EventRecorder, Involved
from kilter.kube.leader import LeaderElector
from kilter.model.annotations import TOPOLOGY_ACK
from kilter.model.core_v1 import Node, Pod
from kilter.state.live import ENDED
from kilter.state.reflector import Reflector, WatchedResource, _ListPage
from tests.e2e.conftest import pending_pod
from tests.topology.builders import CLIQUE


def _node(api: ApiServer) -> str:
    nodes = api.call("GET", "/api/v1/nodes")["items"]
    assert nodes, "the cluster has no node"
    return str(nodes[0]["metadata"]["name"])


def _create_pods(api: ApiServer, namespace: str, count: int) -> list[dict[str, object]]:
    return [api.call("POST", f"/api/v1/namespaces/{namespace}/pods", pending_pod(f"p{i}")) for i in range(count)]


def test_a_paged_pods_list_with_the_phase_selector_arrives_typed_and_whole(api: ApiServer, namespace: str) -> None:
    _create_pods(api, namespace, 5)
    pods = WatchedResource(
        "", ("v1",), "pods", "Pod", field_selector=f"metadata.namespace={namespace},{ENDED}", typed=Pod
    )
    listed = Reflector(api, pods, lambda batch: None, page_size=2).list_once()
    assert sorted(p.metadata.name for p in listed if isinstance(p, Pod)) == [f"p{i}" for i in range(5)]


def test_pods_and_nodes_listed_as_protobuf_decode_to_the_views_their_json_gives(api: ApiServer, namespace: str) -> None:
    _create_pods(api, namespace, 3)
    for resource, path in (
        (
            WatchedResource("", ("v1",), "pods", "Pod", field_selector=f"metadata.namespace={namespace}", typed=Pod),
            "pods",
        ),
        (WatchedResource("", ("v1",), "nodes", "Node", typed=Node), "nodes"),
    ):
        _, media = api.call_raw("GET", f"/api/v1/{path}?limit=500", accept=protobuf.ACCEPT)
        assert protobuf.is_protobuf(media), media  # kube-apiserver serves core/v1 as protobuf
        listed = [o for o in Reflector(api, resource, lambda batch: None).list_once() if isinstance(o, Node | Pod)]
        as_json = api.call_raw("GET", f"/api/v1/{path}?limit=500")[0]
        page: _ListPage[Any] = msgspec.json.decode(as_json, type=_ListPage[resource.typed])  # type: ignore[name-defined]
        by_name = {o.metadata.name: o for o in page.items or []}
        assert listed and all(by_name.get(o.metadata.name) == o for o in listed)


def test_a_watch_from_a_version_long_gone_is_410(api: ApiServer) -> None:
    query = urlencode({"watch": 1, "resourceVersion": "1", "allowWatchBookmarks": "true", "timeoutSeconds": 5})
    try:
        conn, response = api.stream(f"/api/v1/pods?{query}", timeout_s=30)
    except ApiError as exc:
        assert exc.code == 410  # the reflector lists again on this too
        return
    try:
        line = response.readline()
    finally:
        conn.close()
    assert b'"ERROR"' in line and b"410" in line, line[:300]


def test_binding_is_once_and_a_retry_to_the_same_node_is_done(api: ApiServer, namespace: str) -> None:
    created = _create_pods(api, namespace, 1)[0]
    uid = str(created["metadata"]["uid"])  # type: ignore[index]
    node = _node(api)
    binder = ApiBinder(api)
    binder.bind(namespace, "p0", uid, node)
    binder.bind(namespace, "p0", uid, node)  # the first answer "lost": the 409 is read as done
    pod = api.call("GET", f"/api/v1/namespaces/{namespace}/pods/p0")
    assert pod["spec"]["nodeName"] == node
    with pytest.raises(ApiError) as refused:
        binder.bind(namespace, "p0", uid, node + "-other")
    assert refused.value.code == 409


def test_a_plan_record_is_a_merge_patch_of_one_annotation(api: ApiServer, namespace: str) -> None:
    _create_pods(api, namespace, 1)
    path = f"/api/v1/namespaces/{namespace}/pods/p0"
    api.call("PATCH", path, {"metadata": {"annotations": {"team": "a"}}}, content_type=MERGE_PATCH)
    keys = PlanKeys.ephemeral(announce=False)
    recorder = PlanRecorder(api, keys=keys)
    record = records.PlanRecord(f"{namespace}/gang/g", time.time(), (("node-a", 4),))
    uid = api.call("GET", path)["metadata"]["uid"]
    recorder._write(record.gang, [(path, records.encode(record, keys=keys, uid=uid))])
    pod = api.call("GET", path)
    assert pod["metadata"]["annotations"]["team"] == "a"  # the patch touched only kilter's annotation
    assert records.read_object(pod, where=path, keys=keys) == records.decode(records.encode(record), where=path)


def test_a_lease_passes_to_the_next_replica_when_the_leader_stops(api: ApiServer, namespace: str) -> None:
    first = LeaderElector(
        api, namespace, "kilter", "replica-a", lease_duration_s=6, renew_deadline_s=4, retry_period_s=1
    )
    second = LeaderElector(
        api, namespace, "kilter", "replica-b", lease_duration_s=6, renew_deadline_s=4, retry_period_s=1
    )
    first.start()
    try:
        deadline = time.monotonic() + 20
        while not first.is_leader:
            assert time.monotonic() < deadline, first.last_error
            time.sleep(0.1)
        second.start()
        time.sleep(3)
        assert not second.is_leader and second.holder == "replica-a"
        first.stop()  # releases the Lease
        deadline = time.monotonic() + 10
        while not second.is_leader:
            assert time.monotonic() < deadline, second.last_error
            time.sleep(0.1)
    finally:
        first.stop()
        second.stop()


def test_an_event_shows_where_kubectl_describe_looks(api: ApiServer, namespace: str) -> None:
    created = _create_pods(api, namespace, 1)[0]
    uid = str(created["metadata"]["uid"])  # type: ignore[index]
    recorder = EventRecorder(api)
    future = recorder.record(Involved("v1", "Pod", namespace, "p0", uid), "KilterE2E", "checked end to end")
    assert future is not None
    future.result(timeout=30)
    recorder.close()
    selector = urlencode({"fieldSelector": f"involvedObject.name=p0,involvedObject.uid={uid}"})
    events = api.call("GET", f"/api/v1/namespaces/{namespace}/events?{selector}")["items"]
    assert [e["reason"] for e in events] == ["KilterE2E"]


def test_a_group_the_server_does_not_serve_is_absent_not_an_error(api: ApiServer) -> None:
    missing = WatchedResource("e2e.kilter.dev", ("v1",), "widgets", "Widget")
    assert Reflector(api, missing, lambda batch: None).list_once() == []


def test_a_kubelet_may_set_a_clique_label_on_its_own_node_but_never_the_topology_acknowledgement(
    api: ApiServer,
) -> None:
    """NodeRestriction, as kilter's fabric rules assume it: a node identity may relabel its own Node outside
    ``kubernetes.io`` (so a clique claim proves nothing), and may add, change or remove no label under
    ``node-restriction.kubernetes.io``, where ``TOPOLOGY_ACK`` lives; a person (the test's own credentials) may."""
    name = _node(api)
    path = f"/api/v1/nodes/{name}"
    as_node = dataclasses.replace(api, headers={**api.headers, **_impersonating_node(name)})

    def labels(**values: str | None) -> dict[str, Any]:
        return {"metadata": {"labels": values}}

    try:
        as_node.call("PATCH", path, labels(**{CLIQUE: "e2e-claimed.1"}), content_type=MERGE_PATCH)
        assert api.call("GET", path)["metadata"]["labels"][CLIQUE] == "e2e-claimed.1"
        for before, after in ((None, "e2e-claimed.1"), ("e2e-acked.1", "e2e-claimed.1"), ("e2e-acked.1", None)):
            api.call("PATCH", path, labels(**{TOPOLOGY_ACK: before}), content_type=MERGE_PATCH)
            with pytest.raises(ApiError) as refused:  # adding, changing, removing
                as_node.call("PATCH", path, labels(**{TOPOLOGY_ACK: after}), content_type=MERGE_PATCH)
            assert refused.value.code == 403
            assert api.call("GET", path)["metadata"]["labels"].get(TOPOLOGY_ACK) == before
    finally:
        api.call("PATCH", path, labels(**{CLIQUE: None, TOPOLOGY_ACK: None}), content_type=MERGE_PATCH)


def _impersonating_node(name: str) -> dict[str, str]:
    """The headers that make the test's credentials act as the node's kubelet (who NodeRestriction restricts)."""
    return {"Impersonate-User": f"system:node:{name}", "Impersonate-Group": "system:nodes"}
