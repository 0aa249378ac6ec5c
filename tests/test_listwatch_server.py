"""The list/watch stand-in answers as kube-apiserver does, so reflector tests built on it prove something.

Each test speaks plain http.client, as kilter's reflector does, and checks the
wire: status codes, Status bodies, list metadata, event order on the stream.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.listwatch import MERGE_PATCH, NODES, PODS, ListWatchServer, Request, Resource

WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True, installed=False)
TOKEN = "s3cret"


@pytest.fixture
def server() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS, NODES, WORKLOADS]) as s:
        s.too_large_wait_s = 0.2
        yield s


def pod(name: str, *, ns: str = "ns", node: str = "", labels: dict[str, str] | None = None, phase: str = "") -> Any:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}}
    if labels:
        obj["metadata"]["labels"] = labels
    obj["spec"] = {"nodeName": node} if node else {}
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def get(server: ListWatchServer, path: str, *, token: str | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
    headers = {"Accept": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


class Stream:
    """One open watch: the response, read an event (a line) at a time."""

    def __init__(self, server: ListWatchServer, path: str) -> None:
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
        self.conn.request("GET", path, headers={"Accept": "application/json"})
        self.resp = self.conn.getresponse()

    def next(self) -> Any:
        line = self.resp.readline()
        assert line, "the stream ended"
        return json.loads(line)

    def ended(self) -> bool:
        return self.resp.readline() == b""

    def close(self) -> None:
        self.conn.close()


def names(listing: Any) -> list[str]:
    return [item["metadata"]["name"] for item in listing["items"]]


def test_pages_answer_from_the_first_pages_snapshot_while_objects_change(server: ListWatchServer) -> None:
    for name in ("a", "b", "c", "d", "e"):
        server.add(pod(name))
    code, page1 = get(server, "/api/v1/pods?limit=2")
    assert code == 200
    assert page1["kind"] == "PodList" and page1["apiVersion"] == "v1"
    assert names(page1) == ["a", "b"]
    assert all("kind" not in item and "apiVersion" not in item for item in page1["items"])
    snapshot = page1["metadata"]["resourceVersion"]
    assert page1["metadata"]["remainingItemCount"] == 3

    changed = server.update({**pod("c", labels={"x": "y"})})
    server.delete("", "pods", "ns", "d")
    server.add(pod("bb"))
    server.add(pod("f"))

    code, page2 = get(server, f"/api/v1/pods?limit=2&continue={page1['metadata']['continue']}")
    assert code == 200 and names(page2) == ["c", "d"]
    assert page2["metadata"]["resourceVersion"] == snapshot
    assert "labels" not in page2["items"][0]["metadata"]  # c as it was at the snapshot
    code, page3 = get(server, f"/api/v1/pods?limit=2&continue={page2['metadata']['continue']}")
    assert names(page3) == ["e"] and "continue" not in page3["metadata"]
    assert "remainingItemCount" not in page3["metadata"]

    code, now = get(server, "/api/v1/namespaces/ns/pods")
    assert names(now) == ["a", "b", "bb", "c", "e", "f"]
    assert now["metadata"]["resourceVersion"] == str(server.resource_version)
    assert now["items"][3]["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]


def test_a_continue_token_older_than_the_compaction_is_gone_with_an_inconsistent_token(server: ListWatchServer) -> None:
    for name in ("a", "b", "c"):
        server.add(pod(name))
    _, page1 = get(server, "/api/v1/namespaces/ns/pods?limit=1")
    server.add(pod("d"))
    server.compact()
    code, gone = get(server, f"/api/v1/namespaces/ns/pods?limit=1&continue={page1['metadata']['continue']}")
    assert code == 410
    assert gone["reason"] == "Expired" and gone["code"] == 410 and gone["status"] == "Failure"
    assert gone["message"].startswith("The provided continue parameter is too old to display a consistent list result.")
    assert "use the continue token in this response" in gone["message"]
    code, rest = get(server, f"/api/v1/namespaces/ns/pods?continue={gone['metadata']['continue']}")
    assert code == 200 and names(rest) == ["b", "c", "d"]  # the remainder, at the latest revision
    assert rest["metadata"]["resourceVersion"] == str(server.resource_version)


def test_list_resource_version_semantics(server: ListWatchServer) -> None:
    for name in ("a", "b", "c"):
        server.add(pod(name))
    old = server.resource_version
    server.delete("", "pods", "ns", "a")
    code, cached = get(server, "/api/v1/pods?resourceVersion=0&limit=1")
    assert code == 200 and names(cached) == ["b", "c"] and "continue" not in cached["metadata"]
    code, exact = get(server, f"/api/v1/pods?resourceVersion={old}&resourceVersionMatch=Exact")
    assert names(exact) == ["a", "b", "c"] and exact["metadata"]["resourceVersion"] == str(old)
    code, legacy_exact = get(server, f"/api/v1/pods?resourceVersion={old}&limit=5")
    assert names(legacy_exact) == ["a", "b", "c"]
    code, newer = get(server, f"/api/v1/pods?resourceVersion={old}")
    assert names(newer) == ["b", "c"]

    server.compact()
    code, expired = get(server, f"/api/v1/pods?resourceVersion={old}&resourceVersionMatch=Exact")
    assert (code, expired["reason"], expired["message"]) == (
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    )
    ahead = server.resource_version + 5
    code, too_large = get(server, f"/api/v1/pods?resourceVersion={ahead}")
    assert code == 504 and too_large["reason"] == "Timeout"
    assert too_large["message"] == f"Too large resource version: {ahead}, current: {server.resource_version}"
    assert too_large["details"]["causes"] == [
        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
    ]
    _, paged = get(server, "/api/v1/pods?limit=1")
    code, with_rv = get(server, f"/api/v1/pods?resourceVersion=3&continue={paged['metadata']['continue']}")
    assert (code, with_rv["message"]) == (400, "specifying resource version is not allowed when using continue")
    assert get(server, "/api/v1/pods?continue=garbage")[0] == 400
    code, invalid = get(server, "/api/v1/pods?resourceVersionMatch=Exact")
    assert code == 422 and invalid["reason"] == "Invalid"
    assert "resourceVersionMatch is forbidden unless resourceVersion is provided" in invalid["message"]


def test_a_watch_replays_from_its_resource_version_then_streams_and_times_out_cleanly(
    server: ListWatchServer,
) -> None:
    server.add(pod("a"))
    start = server.resource_version
    server.add(pod("b"))
    server.update(pod("a", node="n1"))
    server.add(pod("other", ns="elsewhere"))
    w = Stream(server, f"/api/v1/namespaces/ns/pods?watch=true&resourceVersion={start}&timeoutSeconds=1")
    try:
        assert w.resp.status == 200
        assert w.resp.getheader("Transfer-Encoding") == "chunked"
        assert w.resp.getheader("Content-Type") == "application/json"
        first, second = w.next(), w.next()
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "b")
        assert (second["type"], second["object"]["metadata"]["name"]) == ("MODIFIED", "a")
        assert first["object"]["kind"] == "Pod" and first["object"]["apiVersion"] == "v1"
        gone = server.delete("", "pods", "ns", "b")
        deleted = w.next()
        assert deleted["type"] == "DELETED" and deleted["object"]["metadata"]["name"] == "b"
        assert deleted["object"]["metadata"]["resourceVersion"] == gone["metadata"]["resourceVersion"]
        assert int(gone["metadata"]["resourceVersion"]) == server.resource_version
        began = time.monotonic()
        assert w.ended()  # timeoutSeconds: the terminating chunk, not a cut
        assert time.monotonic() - began < 1.5
    finally:
        w.close()


def test_a_watch_from_zero_starts_with_the_current_state(server: ListWatchServer) -> None:
    server.add(pod("a"))
    server.add(pod("b"))
    server.delete("", "pods", "ns", "a")
    w = Stream(server, "/api/v1/pods?watch=1&resourceVersion=0")
    try:
        event = w.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "b")
        server.add(pod("c"))
        assert w.next()["object"]["metadata"]["name"] == "c"
    finally:
        w.close()


def test_bookmarks_go_only_to_watches_that_asked(server: ListWatchServer) -> None:
    server.add(pod("a"))
    rv = server.resource_version
    asked = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={rv}&allowWatchBookmarks=true")
    plain = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={rv}")
    try:
        server.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})  # moves the global revision
        assert server.bookmark() == 1
        mark = asked.next()
        assert mark == {
            "type": "BOOKMARK",
            "object": {
                "kind": "Pod",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(server.resource_version)},
            },
        }
        server.add(pod("b"))
        assert plain.next()["type"] == "ADDED"  # no BOOKMARK came first
        assert asked.next()["type"] == "ADDED"
    finally:
        asked.close()
        plain.close()


def test_selectors_filter_lists_and_turn_leaving_and_entering_into_deleted_and_added(
    server: ListWatchServer,
) -> None:
    server.add(pod("web1", node="n1", labels={"app": "web", "tier": "a"}))
    server.add(pod("web2", node="n2", labels={"app": "web"}))
    server.add(pod("db", node="n1", labels={"app": "db"}, phase="Running"))
    server.add(pod("done", node="n1", labels={"app": "batch"}, phase="Succeeded"))
    server.add(pod("pending", labels={"app": "web"}))
    cases = {
        "labelSelector=app%3Dweb": ["pending", "web1", "web2"],
        "labelSelector=app%21%3Dweb": ["db", "done"],
        "labelSelector=app+in+%28db%2Cbatch%29": ["db", "done"],
        "labelSelector=app+notin+%28web%29%2C%21tier": ["db", "done"],
        "labelSelector=tier": ["web1"],
        "labelSelector=%21tier": ["db", "done", "pending", "web2"],
        "fieldSelector=spec.nodeName%3Dn1": ["db", "done", "web1"],
        "fieldSelector=spec.nodeName%3D": ["pending"],
        "fieldSelector=spec.nodeName%21%3D%2Cstatus.phase%21%3DSucceeded": ["db", "web1", "web2"],
        "fieldSelector=metadata.name%3Ddb": ["db"],
        "fieldSelector=metadata.namespace%3Dns&labelSelector=app%3Dweb%2Ctier%3Da": ["web1"],
    }
    for query, expected in cases.items():
        code, listing = get(server, f"/api/v1/pods?{query}")
        assert (code, names(listing)) == (200, expected), query
    code, filtered = get(server, "/api/v1/pods?labelSelector=app%3Dweb&limit=1")
    assert "continue" in filtered["metadata"] and "remainingItemCount" not in filtered["metadata"]
    code, bad = get(server, "/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert (code, bad["reason"], bad["message"]) == (400, "BadRequest", "field label not supported: spec.foo")
    code, bad = get(server, "/api/v1/nodes?fieldSelector=spec.nodeName%3Dx")
    assert (code, bad["message"]) == (400, "field label not supported: spec.nodeName")
    code, bad = get(server, "/api/v1/pods?labelSelector=app+in+%28")
    assert code == 400

    rv = server.resource_version
    w = Stream(
        server, f"/api/v1/pods?watch=true&resourceVersion={rv}&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1"
    )
    try:
        server.update(pod("web2", node="n2", labels={"app": "web", "v": "2"}))  # never in view
        leaving = server.update(pod("web1", node="n1", labels={"app": "other"}))
        event = w.next()
        assert event["type"] == "DELETED"
        assert event["object"]["metadata"]["labels"] == {"app": "web", "tier": "a"}  # the last state it matched
        assert event["object"]["metadata"]["resourceVersion"] == leaving["metadata"]["resourceVersion"]
        server.update(pod("pending", node="n1", labels={"app": "web"}))
        event = w.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "pending")
        server.update(pod("pending", node="n1", labels={"app": "web", "ok": "1"}))
        assert w.next()["type"] == "MODIFIED"
        server.delete("", "pods", "ns", "web1")  # already out of view: nothing
        server.delete("", "pods", "ns", "pending")
        event = w.next()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("DELETED", "pending")
    finally:
        w.close()


def test_a_watch_older_than_the_compaction_gets_200_then_a_410_error_event(server: ListWatchServer) -> None:
    server.add(pod("a"))
    old = server.resource_version
    server.add(pod("b"))
    server.compact()
    now = server.resource_version
    w = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={old}&allowWatchBookmarks=true")
    try:
        assert w.resp.status == 200
        assert w.next() == {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": f"too old resource version: {old} ({now})",
                "reason": "Expired",
                "code": 410,
            },
        }
        assert w.ended()
    finally:
        w.close()
    assert server.open_watches() == 0
    fresh = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={now}")  # from the compaction point is fine
    try:
        server.add(pod("c"))
        assert fresh.next()["object"]["metadata"]["name"] == "c"
    finally:
        fresh.close()


def test_drop_watches_cuts_streams_and_graceful_ends_them(server: ListWatchServer) -> None:
    rv = server.resource_version
    cut = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={rv}")
    try:
        server.add(pod("a"))
        assert cut.next()["type"] == "ADDED"
        assert server.drop_watches() == 1
        with pytest.raises(http.client.IncompleteRead):
            cut.resp.read()  # no terminating chunk: the connection just closed
    finally:
        cut.close()
    ended = Stream(server, f"/api/v1/pods?watch=true&resourceVersion={rv}")
    try:
        assert ended.next()["object"]["metadata"]["name"] == "a"
        assert server.drop_watches(graceful=True) == 1
        assert ended.resp.read() == b""
    finally:
        ended.close()
    deadline = time.monotonic() + 1
    while server.open_watches() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.open_watches() == 0


def test_a_crd_installed_later_answers_404_until_then_and_appears_in_discovery(server: ListWatchServer) -> None:
    path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/workloads"
    code, missing = get(server, path)
    assert (code, missing["reason"], missing["message"]) == (
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    assert get(server, "/apis/kueue.x-k8s.io/v1beta2/workloads?watch=true")[0] == 404
    _, groups = get(server, "/apis")
    assert groups == {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
    assert get(server, "/apis/kueue.x-k8s.io/v1beta2")[0] == 404
    with pytest.raises(KeyError):
        server.add({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w"}})

    server.install("kueue.x-k8s.io", "v1beta2", "workloads")
    created = server.add(
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": "w", "namespace": "team"}}
    )
    code, listing = get(server, path)
    assert code == 200 and listing["kind"] == "WorkloadList" and listing["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert names(listing) == ["w"]
    _, groups = get(server, "/apis")
    assert groups["groups"] == [
        {
            "name": "kueue.x-k8s.io",
            "versions": [{"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"}],
            "preferredVersion": {"groupVersion": "kueue.x-k8s.io/v1beta2", "version": "v1beta2"},
        }
    ]
    code, resources = get(server, "/apis/kueue.x-k8s.io/v1beta2")
    assert (
        code == 200 and resources["kind"] == "APIResourceList" and resources["groupVersion"] == "kueue.x-k8s.io/v1beta2"
    )
    assert resources["resources"][0] | {"verbs": []} == {
        "name": "workloads",
        "singularName": "workload",
        "namespaced": True,
        "kind": "Workload",
        "verbs": [],
    }
    assert {"list", "watch"} <= set(resources["resources"][0]["verbs"])
    code, one = get(server, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/workloads/w")
    assert code == 200 and one["metadata"]["uid"] == created["metadata"]["uid"] and one["kind"] == "Workload"
    code, absent = get(server, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team/workloads/nope")
    assert (code, absent["message"]) == (404, 'workloads.kueue.x-k8s.io "nope" not found')


def test_core_discovery_shapes(server: ListWatchServer) -> None:
    code, versions = get(server, "/api")
    assert code == 200 and versions["kind"] == "APIVersions" and versions["versions"] == ["v1"]
    code, core = get(server, "/api/v1")
    assert core["kind"] == "APIResourceList" and core["groupVersion"] == "v1"
    assert [(r["name"], r["namespaced"], r["kind"]) for r in core["resources"]] == [
        ("pods", True, "Pod"),
        ("nodes", False, "Node"),
    ]
    assert get(server, "/api/v1/namespaces/ns/nodes")[0] == 404  # cluster-scoped under a namespace
    assert get(server, "/apis/nope/v1/things")[0] == 404


def test_every_request_needs_the_bearer_token() -> None:
    with ListWatchServer([PODS], token=TOKEN) as server:
        for token in (None, "wrong"):
            code, denied = get(server, "/api/v1/pods", token=token)
            assert (code, denied) == (
                401,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "Unauthorized",
                    "reason": "Unauthorized",
                    "code": 401,
                },
            )
        assert get(server, "/api", token=None)[0] == 401
        assert get(server, "/api/v1/pods", token=TOKEN)[0] == 200
        assert server.requests[0] == Request("GET", "/api/v1/pods", {}, "application/json")


def test_a_rotated_token_refuses_the_old_one_with_401_but_leaves_open_watches_streaming() -> None:
    with ListWatchServer([PODS], token=TOKEN) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
        conn.request("GET", "/api/v1/pods?watch=1", headers={"Authorization": f"Bearer {TOKEN}"})
        watch = conn.getresponse()
        try:
            server.rotate_token("renewed")
            code, denied = get(server, "/api/v1/pods", token=TOKEN)
            assert (code, denied["reason"], denied["code"], denied["message"]) == (
                401,
                "Unauthorized",
                401,
                "Unauthorized",
            )
            assert get(server, "/api/v1/pods", token="renewed")[0] == 200
            server.add(pod("after"))  # the apiserver authenticated the watch when it began, never again
            assert json.loads(watch.readline())["object"]["metadata"]["name"] == "after"
        finally:
            conn.close()
        server.accept_token("next")  # a new token issued while the last one still lives
        assert get(server, "/api/v1/pods", token="renewed")[0] == get(server, "/api/v1/pods", token="next")[0] == 200
        assert [r.token for r in server.requests][-3:] == ["renewed", "renewed", "next"]


def test_requests_are_logged_and_delay_slows_lists_after_their_snapshot(server: ListWatchServer) -> None:
    server.add(pod("a"))
    server.delay_s = 0.2
    began = time.monotonic()
    _, listing = get(server, "/api/v1/pods?limit=500&resourceVersion=0")
    assert time.monotonic() - began >= 0.2 and names(listing) == ["a"]
    assert server.requests[-1] == Request(
        "GET", "/api/v1/pods", {"limit": "500", "resourceVersion": "0"}, "application/json"
    )


def test_a_watch_list_streams_the_state_then_the_initial_events_end_bookmark(server: ListWatchServer) -> None:
    server.add(pod("a"))
    w = Stream(
        server,
        "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion="
        "&allowWatchBookmarks=true",
    )
    try:
        assert w.next()["type"] == "ADDED"
        mark = w.next()
        assert mark["type"] == "BOOKMARK"
        assert mark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        assert mark["object"]["metadata"]["resourceVersion"] == str(server.resource_version)
    finally:
        w.close()
    code, invalid = get(server, "/api/v1/pods?watch=1&sendInitialEvents=true")
    assert (
        code == 422 and "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan" in invalid["message"]
    )


def patch(server: ListWatchServer, path: str, body: Any, *, content_type: str = MERGE_PATCH) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    try:
        conn.request("PATCH", path, raw, {"Accept": "application/json", "Content-Type": content_type})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_a_merge_patch_merges_into_the_object_with_a_new_version_and_a_modified_event(
    server: ListWatchServer,
) -> None:
    created = server.add(pod("p", labels={"app": "x", "tier": "gpu"}))
    start = server.resource_version
    w = Stream(server, f"/api/v1/namespaces/ns/pods?watch=1&resourceVersion={start}")
    try:
        # RFC 7386: objects merge key by key, null removes a key, other values replace.
        change = {"metadata": {"labels": {"tier": None, "rack": "r1"}, "annotations": {"kilter.dev/plan": "{}"}}}
        code, patched = patch(
            server, "/api/v1/namespaces/ns/pods/p", change, content_type=f"{MERGE_PATCH}; charset=utf-8"
        )
        assert code == 200
        meta = patched["metadata"]
        assert meta["labels"] == {"app": "x", "rack": "r1"} and meta["annotations"] == {"kilter.dev/plan": "{}"}
        assert meta["uid"] == created["metadata"]["uid"] and patched["spec"] == created["spec"]
        assert int(meta["resourceVersion"]) == start + 1 == server.resource_version
        event = w.next()
        assert event == {"type": "MODIFIED", "object": patched}
        assert get(server, "/api/v1/namespaces/ns/pods/p") == (200, patched)
        # The same patch again changes nothing: no write, no new version, no event.
        assert patch(server, "/api/v1/namespaces/ns/pods/p", change) == (200, patched)
        assert server.resource_version == start + 1
        server.add(pod("q"))
        assert (w.next()["type"], server.resource_version) == ("ADDED", start + 2)
    finally:
        w.close()


def test_a_patch_is_refused_as_kube_apiserver_refuses_it(server: ListWatchServer) -> None:
    current = server.add(pod("p"))
    path = "/api/v1/namespaces/ns/pods/p"
    code, status = patch(server, "/api/v1/namespaces/ns/pods/nope", {"metadata": {"labels": {"a": "b"}}})
    assert code == 404 and status["reason"] == "NotFound" and status["message"] == 'pods "nope" not found'
    code, status = patch(server, path, [{"op": "add"}], content_type="application/json-patch+json")
    assert code == 415 and status["reason"] == "UnsupportedMediaType" and status["code"] == 415
    assert status["message"].endswith(
        "accepted media types include: application/merge-patch+json, application/apply-patch+yaml"
    )
    code, status = patch(server, path, b"{not json")
    assert code == 400 and status["reason"] == "BadRequest"
    code, status = patch(server, path, {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})
    assert code == 409 and status["reason"] == "Conflict" and "the object has been modified" in status["message"]
    code, status = patch(server, path, {"metadata": {"name": "other"}})
    assert code == 400 and "does not match the name on the URL" in status["message"]
    code, status = patch(server, "/api/v1/namespaces/ns/pods", {"metadata": {}})
    assert code == 405 and status["reason"] == "MethodNotAllowed"
    assert get(server, path) == (200, current)  # none of them wrote anything
    rv = current["metadata"]["resourceVersion"]
    code, patched = patch(server, path, {"metadata": {"resourceVersion": rv, "uid": "forged", "labels": {"a": "b"}}})
    assert code == 200 and patched["metadata"]["uid"] == current["metadata"]["uid"]  # the server owns the uid
