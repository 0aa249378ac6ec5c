"""Kubernetes protobuf as kube-apiserver writes it: the encoder's bytes, and the list/watch server's negotiation.

The golden bytes were worked out by hand from the wire rules (field numbers from
upstream's generated.proto, what is written when from its generated.pb.go), not
produced by the encoder.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from bench import coldstart
from kilter.kube import protobuf
from kilter.model.core_v1 import Pod
from tests.kube_protobuf import MAGIC, MEDIA_TYPE, encode, envelope
from tests.listwatch import NODES, PODS, ListWatchServer, Resource, _negotiate

WORKLOADS = Resource("kueue.x-k8s.io", "v1beta2", "workloads", "Workload", namespaced=True)
PREFER_PROTOBUF = "application/vnd.kubernetes.protobuf, application/json"  # what client-go sends

TINY_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "creationTimestamp": "1970-01-02T00:00:00Z",
        "labels": {"b": "2", "a": "1"},
    },
    "spec": {"containers": [{"name": "c", "image": "i"}], "priority": -1},
    "status": {"phase": "Running"},
}
# Go writes every field it holds by value, zero or not; pointers, lists and maps only when set.
TINY_POD_BYTES = bytes.fromhex(
    "0a 29"  # metadata, 41 bytes
    " 0a 01 70  12 00  1a 02 6e 73  22 00  2a 00  32 00  38 00"  # name p, generateName, namespace ns, .. generation 0
    " 42 06 08 80 a3 05 10 00"  # creationTimestamp {seconds 86400, nanos 0}
    " 5a 06 0a 01 61 12 01 31  5a 06 0a 01 62 12 01 32"  # labels, keys sorted: a=1, b=2
    " 12 44"  # spec, 68 bytes
    " 12 1a"  # containers[0], 26 bytes
    " 0a 01 63  12 01 69  2a 00  42 00  6a 00  72 00"  # name c, image i, workingDir, resources {}, 13 and 14 ""
    " 80 01 00  88 01 00  90 01 00  a2 01 00"  # stdin, stdinOnce, tty false; terminationMessagePolicy
    " 1a 00  32 00  42 00  4a 00  52 00  58 00  60 00  68 00"  # restartPolicy .. nodeName, hostNetwork/PID/IPC
    " 82 01 00  8a 01 00  9a 01 00  c2 01 00"  # hostname, subdomain, schedulerName, priorityClassName
    " c8 01 ff ff ff ff ff ff ff ff ff 01"  # priority -1: ten bytes, two's complement
    " 1a 1a"  # status, 26 bytes: phase Running, then "" for 3 4 5 6 9 11 14 and observedGeneration 0
    " 0a 07 52 75 6e 6e 69 6e 67  1a 00  22 00  2a 00  32 00  4a 00  5a 00  72 00  88 01 00"
)
TINY_LIST_BODY = (
    bytes.fromhex(
        "6b 38 73 00"  # k8s\0
        " 0a 0d 0a 02 76 31 12 07 50 6f 64 4c 69 73 74"  # typeMeta {apiVersion v1, kind PodList}
        " 12 99 01"  # raw, 153 bytes: the PodList
        " 0a 07 0a 00 12 01 37 1a 00"  # metadata {selfLink, resourceVersion 7, continue}
        " 12 8d 01"  # items[0], 141 bytes
    )
    + TINY_POD_BYTES
    + bytes.fromhex("1a 00 22 00")  # contentEncoding, contentType
)


def uvarint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if byte < 0x80:
            return value, i


def records(data: bytes) -> dict[int, list[int | bytes]]:
    """The fields of one message by number: a varint's value, a length-delimited field's bytes."""
    out: dict[int, list[int | bytes]] = {}
    i = 0
    while i < len(data):
        key, i = uvarint(data, i)
        value: int | bytes
        if key & 7 == 0:
            value, i = uvarint(data, i)
        else:
            assert key & 7 == 2, f"wire type {key & 7}"
            size, i = uvarint(data, i)
            value, i = data[i : i + size], i + size
        out.setdefault(key >> 3, []).append(value)
    return out


def unwrap(body: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, raw) of an enveloped body."""
    assert body.startswith(MAGIC)
    unknown = records(body[len(MAGIC) :])
    type_meta = records(unknown[1][0])  # type: ignore[arg-type]
    assert unknown[3] == [b""] and unknown[4] == [b""]
    return type_meta[1][0].decode(), type_meta[2][0].decode(), unknown[2][0]  # type: ignore[union-attr,return-value]


# --- the encoder ----------------------------------------------------------------------------------------------


def test_a_tiny_pod_is_the_bytes_go_writes() -> None:
    assert encode(TINY_POD, "Pod") == TINY_POD_BYTES


def test_a_tiny_list_envelope_is_the_bytes_go_writes() -> None:
    listing = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}, "items": [TINY_POD]}
    assert envelope(encode(listing, "PodList"), "v1", "PodList") == TINY_LIST_BODY


@pytest.mark.parametrize(
    ("obj", "message", "where"),
    [
        ({"metadata": {"nmae": "p"}}, "Pod", "ObjectMeta has no field 'nmae'"),
        ({"spec": {"containers": [{"name": "c", "imagePullPolcy": "Always"}]}}, "Pod", "Container has no field"),
        ({"spec": {"ephemeralContainers": []}}, "Pod", "PodSpec has no field 'ephemeralContainers'"),
        ({"kind": "Node"}, "NodeSpec", "NodeSpec has no field 'kind'"),  # only typed objects carry kind
        ({"metadata": {"labels": {"a": 1}}}, "Node", "ObjectMeta.labels: expected a string"),
        ({"spec": {"priority": "high"}}, "Pod", "PodSpec.priority: expected an integer"),
        ({"items": {}}, "PodList", "PodList.items: expected a list"),
        ({}, "ConfigMap", "no protobuf message 'ConfigMap'"),
    ],
)
def test_what_the_table_does_not_know_raises_instead_of_being_dropped(obj: Any, message: str, where: str) -> None:
    with pytest.raises(ValueError, match=re.escape(where)):
        encode(obj, message)


def test_map_entries_go_out_in_sorted_key_order_whatever_the_dicts_order() -> None:
    cpu = "0a 0a 0a 03 63 70 75 12 03 0a 01 32"  # {key cpu, value Quantity {string "2"}}
    memory = "0a 0f 0a 06 6d 65 6d 6f 72 79 12 05 0a 03 31 47 69"  # {key memory, value Quantity {string "1Gi"}}
    assert encode({"limits": {"memory": "1Gi", "cpu": "2"}}, "ResourceRequirements") == bytes.fromhex(cpu + memory)
    assert encode({"limits": {"cpu": "2", "memory": "1Gi"}}, "ResourceRequirements") == bytes.fromhex(cpu + memory)


def test_negative_ints_take_ten_bytes_and_times_keep_whole_seconds() -> None:
    terminated = {"exitCode": -1, "reason": "Error", "startedAt": None}
    assert encode(terminated, "ContainerStateTerminated") == bytes.fromhex(
        "08 ff ff ff ff ff ff ff ff ff 01"  # exitCode -1 (an int32, sign-extended as Go does)
        " 10 00  1a 05 45 72 72 6f 72  22 00"  # signal 0, reason Error, message
        " 2a 00  32 00  3a 00"  # startedAt null and finishedAt absent: zero Times, empty; containerID
    )
    at_eight = bytes.fromhex("0a 08 08 80 96 b5 c9 06 10 00")  # {seconds 1764576000, nanos 0}
    for when in ("2025-12-01T08:00:00Z", "2025-12-01T09:00:00+01:00", "2025-12-01T08:00:00.999999Z"):
        assert encode({"startedAt": when}, "ContainerStateRunning") == at_eight
    assert encode({"startedAt": "0001-01-01T00:00:00Z"}, "ContainerStateRunning") == b"\x0a\x00"  # Go's zero Time
    assert encode({"deletionTimestamp": None}, "ObjectMeta") == encode({}, "ObjectMeta")  # a nil *Time: no field
    with pytest.raises(ValueError, match=re.escape("ContainerStateRunning.startedAt: '2025-12-01T08:00:00' is not")):
        encode({"startedAt": "2025-12-01T08:00:00"}, "ContainerStateRunning")


def test_int_or_string_and_fields_v1_and_embedded_structs() -> None:
    get = {"path": "/", "port": 8080, "scheme": "HTTP"}
    assert encode(get, "HTTPGetAction") == bytes.fromhex(
        "0a 01 2f  12 07 08 00 10 90 3f 1a 00  1a 00  22 04 48 54 54 50"  # path, port {int 8080}, host, scheme
    )
    assert encode({"port": "http"}, "TCPSocketAction") == bytes.fromhex("0a 0a 08 01 10 00 1a 04 68 74 74 70 12 00")
    entry = {"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}
    assert records(encode(entry, "ManagedFieldsEntry"))[7] == [b'\x0a\x0d{"f:spec":{}}']
    # Volume embeds VolumeSource and Probe embeds ProbeHandler: their JSON fields sit in the parent's object
    assert encode({"name": "v", "emptyDir": {}}, "Volume") == bytes.fromhex("0a 01 76 12 04 12 02 0a 00")
    assert encode({"httpGet": {"port": 1}}, "Probe") == bytes.fromhex(
        "0a 10 12 0e 0a 00 12 06 08 00 10 01 1a 00 1a 00 22 00"  # handler {httpGet {path, port {int 1}, host, scheme}}
        " 10 00  18 00  20 00  28 00  30 00"  # initialDelaySeconds .. failureThreshold
    )


def test_every_pod_and_node_of_the_cold_start_bench_encodes() -> None:
    pods, nodes = coldstart.sample(pending=2)
    memo: dict[tuple[int, str], bytes] = {}  # every distinct part is still encoded (and checked) once
    for node in nodes:
        assert encode(node, "Node", memo=memo)
    for pod in pods:
        assert encode(pod, "Pod", memo=memo)
    statuses = records(records(encode(pods[-1], "Pod"))[3][0])  # type: ignore[arg-type]
    assert statuses[1] == [b"Pending"] and len(statuses[2]) == 1  # phase, the PodScheduled condition


# --- the list/watch server ------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS, NODES, WORKLOADS]) as s:
        yield s


def get(server: ListWatchServer, path: str, accept: str | None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=2)
    try:
        conn.request("GET", path, headers={} if accept is None else {"Accept": accept})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def test_pod_and_node_lists_answer_protobuf_when_the_client_prefers_it(server: ListWatchServer) -> None:
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}})
    server.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"phase": "Running"}})
    for path, kind in (("/api/v1/namespaces/ns/pods", "PodList"), ("/api/v1/nodes", "NodeList")):
        code, content_type, body = get(server, path, PREFER_PROTOBUF)
        assert (code, content_type) == (200, MEDIA_TYPE)
        _, _, same_as_json = get(server, path, "application/json")
        listing = json.loads(same_as_json)
        assert body == envelope(encode(listing, kind), "v1", kind)
        assert unwrap(body)[:2] == ("v1", kind)
    for accept in (None, "application/json", "application/json, application/vnd.kubernetes.protobuf", "*/*"):
        code, content_type, body = get(server, "/api/v1/nodes", accept)
        assert (code, content_type) == (200, "application/json") and json.loads(body)["kind"] == "NodeList"
    code, content_type, _ = get(server, "/api/v1/nodes/n", PREFER_PROTOBUF)  # a get stays JSON here
    assert (code, content_type) == (200, "application/json")


def test_owner_references_served_as_protobuf_and_as_json_read_as_the_same_views(server: ListWatchServer) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-job", "controller": True}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "uid-cm"}
    for name, owners in (("a", [job]), ("b", [job]), ("c", [other, job]), ("d", [{**other, "controller": False}])):
        server.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
            }
        )
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "e", "namespace": "ns"}, "spec": {}})
    _, content_type, body = get(server, "/api/v1/namespaces/ns/pods", PREFER_PROTOBUF)
    assert content_type == MEDIA_TYPE
    page = protobuf.decode_page(protobuf.Decoder(), Pod, body)
    _, _, as_json = get(server, "/api/v1/namespaces/ns/pods", "application/json")
    from_json = [msgspec.convert(item, Pod) for item in json.loads(as_json)["items"]]
    assert page.skipped == [] and page.items == from_json
    controllers = {p.metadata.name: p.metadata.controller for p in page.items}
    assert {n: c.uid if c else None for n, c in controllers.items()} == {
        "a": "uid-job",
        "b": "uid-job",
        "c": "uid-job",
        "d": None,
        "e": None,
    }
    assert page.items[0].metadata.owner_references is page.items[1].metadata.owner_references


def test_a_pods_active_deadline_reads_the_same_from_protobuf_and_json(server: ListWatchServer) -> None:
    spec = {"containers": [{"name": "c", "image": "i"}], "activeDeadlineSeconds": 36_000}  # a declared runtime
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "ns"}, "spec": {}})
    _, content_type, body = get(server, "/api/v1/namespaces/ns/pods", PREFER_PROTOBUF)
    assert content_type == MEDIA_TYPE
    page = protobuf.decode_page(protobuf.Decoder(), Pod, body)
    _, _, as_json = get(server, "/api/v1/namespaces/ns/pods", "application/json")
    assert page.items == [msgspec.convert(item, Pod) for item in json.loads(as_json)["items"]]
    assert [p.spec.active_deadline_seconds for p in page.items] == [36_000, None]


def test_custom_resources_answer_json_to_a_protobuf_preference_and_406_to_protobuf_only(
    server: ListWatchServer,
) -> None:
    path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads"
    code, content_type, body = get(server, path, PREFER_PROTOBUF)
    assert (code, content_type) == (200, "application/json") and json.loads(body)["kind"] == "WorkloadList"
    code, content_type, body = get(server, path, "application/vnd.kubernetes.protobuf")
    # the apiserver writes the error itself as the Accept prefers, protobuf (ErrorNegotiated)
    assert (code, content_type) == (406, MEDIA_TYPE)
    status = records(unwrap(body)[2])
    assert status[6] == [406] and status[4] == [b"NotAcceptable"]
    assert status[3] == [
        b"only the following media types are accepted: "
        b"application/json, application/yaml, application/vnd.kubernetes.protobuf"
    ]


def test_an_expired_continue_token_is_a_protobuf_status_410(server: ListWatchServer) -> None:
    for name in ("a", "b"):
        server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}})
    _, _, first = get(server, "/api/v1/namespaces/ns/pods?limit=1", PREFER_PROTOBUF)
    list_meta = records(records(unwrap(first)[2])[1][0])  # type: ignore[arg-type]
    token = list_meta[3][0].decode()  # type: ignore[union-attr]
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c", "namespace": "ns"}})
    server.compact()
    code, content_type, body = get(server, f"/api/v1/namespaces/ns/pods?limit=1&continue={token}", PREFER_PROTOBUF)
    assert (code, content_type) == (410, MEDIA_TYPE)
    api_version, kind, raw = unwrap(body)
    status = records(raw)
    assert (api_version, kind) == ("v1", "Status")
    assert status[6] == [410] and status[4] == [b"Expired"] and status[2] == [b"Failure"]
    assert records(status[1][0])[3][0]  # type: ignore[arg-type]  # metadata.continue: the inconsistent token
    code, content_type, body = get(server, f"/api/v1/namespaces/ns/pods?limit=1&continue={token}", None)
    assert (code, content_type) == (410, "application/json") and json.loads(body)["code"] == 410


def test_an_object_protobuf_cannot_carry_is_a_500_naming_it_while_json_serves_it(server: ListWatchServer) -> None:
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "labels": ["x"]}})
    code, content_type, body = get(server, "/api/v1/pods", PREFER_PROTOBUF)
    status = records(unwrap(body)[2])
    assert (code, content_type, status[4]) == (500, MEDIA_TYPE, [b"InternalError"])
    assert status[3] == [b"Internal error occurred: ObjectMeta.labels: expected an object, got ['x']"]
    code, content_type, body = get(server, "/api/v1/pods", "application/json")
    assert (code, json.loads(body)["items"][0]["metadata"]["labels"]) == (200, ["x"])


@pytest.mark.parametrize(
    ("accept", "protobuf", "media"),
    [
        ("", True, "application/json"),
        (PREFER_PROTOBUF, True, MEDIA_TYPE),
        (PREFER_PROTOBUF, False, "application/json"),
        ("application/vnd.kubernetes.protobuf", False, None),
        ("application/json;q=0.5, application/vnd.kubernetes.protobuf", True, MEDIA_TYPE),
        ("*/*, application/vnd.kubernetes.protobuf", True, MEDIA_TYPE),  # specific before wildcard
        ("application/*", True, "application/json"),
        ("application/yaml", True, None),
        ("text/html", True, None),
    ],
)
def test_negotiation_follows_goautoneg_order(accept: str, protobuf: bool, media: str | None) -> None:
    assert _negotiate(accept, protobuf) == media
