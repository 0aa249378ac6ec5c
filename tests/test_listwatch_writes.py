"""The list/watch test server's create (POST) and update (PUT) answer as kube-apiserver does: 409 AlreadyExists for
a taken name, 409 Conflict for a stale resourceVersion, the server's own fields kept, watchers told."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiError, ApiServer
from tests.listwatch import SECRETS, ListWatchServer

TOKEN = "writes"
COLLECTION = "/api/v1/namespaces/ns/secrets"
OBJECT = f"{COLLECTION}/keys"
Obj = dict[str, Any]


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([SECRETS], token=TOKEN) as server:
        yield server


@pytest.fixture
def api(cluster: ListWatchServer) -> ApiServer:
    # The test drives the server itself: not kilter's own calls (tests/config/test_rbac_proof.py counts those).
    return ApiServer(
        "http", cluster.host, cluster.port, {"Authorization": f"Bearer {TOKEN}"}, user_agent="listwatch-tests"
    )


def a_secret(value: bytes = b"one", **meta: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "keys", **meta},
        "data": {"keys": base64.b64encode(value).decode()},
    }


def refusal(api: ApiServer, method: str, path: str, body: Obj) -> tuple[int, str]:
    with pytest.raises(ApiError) as caught:
        api.call(method, path, body)
    return caught.value.code, str(caught.value)


def test_a_create_stores_the_object_with_the_servers_own_fields_and_a_second_is_already_exists(
    api: ApiServer, cluster: ListWatchServer
) -> None:
    created = api.call("POST", COLLECTION, a_secret(uid="mine", creationTimestamp="1970-01-01T00:00:00Z"))
    meta = created["metadata"]
    assert meta["namespace"] == "ns" and meta["uid"] != "mine" and meta["creationTimestamp"] != "1970-01-01T00:00:00Z"
    assert meta["resourceVersion"] == str(cluster.resource_version)
    assert api.call("GET", OBJECT) == created
    assert refusal(api, "POST", COLLECTION, a_secret(b"two")) == (
        409,
        'API server answered 409: secrets "keys" already exists',
    )
    assert api.call("GET", OBJECT) == created


def test_an_update_on_a_stale_resource_version_is_a_conflict_and_writes_nothing(api: ApiServer) -> None:
    created = api.call("POST", COLLECTION, a_secret())
    first = {**a_secret(b"two"), "metadata": dict(created["metadata"])}
    updated = api.call("PUT", OBJECT, first)
    assert updated["metadata"]["resourceVersion"] != created["metadata"]["resourceVersion"]
    assert updated["metadata"]["uid"] == created["metadata"]["uid"]
    stale = {**a_secret(b"three"), "metadata": dict(created["metadata"])}
    code, message = refusal(api, "PUT", OBJECT, stale)
    assert code == 409 and "the object has been modified" in message
    assert api.call("GET", OBJECT) == updated


def test_an_update_without_a_resource_version_is_unconditional_and_one_that_changes_nothing_writes_nothing(
    api: ApiServer, cluster: ListWatchServer
) -> None:
    api.call("POST", COLLECTION, a_secret())
    updated = api.call("PUT", OBJECT, a_secret(b"two"))
    version = cluster.resource_version
    assert updated["metadata"]["resourceVersion"] == str(version)
    assert api.call("PUT", OBJECT, a_secret(b"two")) == updated
    assert cluster.resource_version == version


@pytest.mark.parametrize(
    ("method", "path", "body", "code", "words"),
    [
        pytest.param("PUT", OBJECT, a_secret(), 404, 'secrets "keys" not found', id="update of an absent object"),
        pytest.param("PUT", f"{COLLECTION}/other", a_secret(), 400, "does not match the name", id="another name"),
        pytest.param("POST", COLLECTION, a_secret(namespace="elsewhere"), 400, "namespace", id="another namespace"),
        pytest.param("POST", COLLECTION, a_secret(resourceVersion="7"), 500, "should not be set", id="a version"),
        pytest.param("POST", COLLECTION, {"kind": "Secret", "metadata": {}}, 422, "name", id="no name"),
        pytest.param(
            "POST", COLLECTION, {**a_secret(), "data": {"keys": "not base64!"}}, 400, "base64", id="not base64"
        ),
    ],
)
def test_writes_the_apiserver_refuses_are_refused(
    api: ApiServer, method: str, path: str, body: Obj, code: int, words: str
) -> None:
    got, message = refusal(api, method, path, body)
    assert got == code and words in message


def test_watchers_see_a_create_as_added_and_an_update_as_modified(api: ApiServer, cluster: ListWatchServer) -> None:
    start = cluster.resource_version
    api.call("POST", COLLECTION, a_secret())
    api.call("PUT", OBJECT, a_secret(b"two"))
    conn, response = api.stream(f"{COLLECTION}?watch=1&resourceVersion={start}", timeout_s=5.0)
    try:
        events = [json.loads(response.readline()) for _ in range(2)]
    finally:
        conn.close()
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED"]
