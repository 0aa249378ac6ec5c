"""Bad requests get an answer in the protocol's own error field or an HTTP 4xx, and the server keeps serving."""

from __future__ import annotations

import json
import socket

import pytest

from tests.extenders.conftest import Served, names_args, pod_json


def still_serving(served: Served) -> None:
    status, result = served.post("filter", names_args(pod_json("ok", 4), ["r1-t00"]))
    assert status == 200 and result["NodeNames"] == ["r1-t00"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "malformed ExtenderArgs"),
        (b'{"Pod": 5, "Nodes": null, "NodeNames": []}', "got `int` - at `$.Pod`"),
        (b'{"Pod": null, "Nodes": null, "NodeNames": ["r1-t00"]}', "Pod is null"),
        (json.dumps(names_args(pod_json("p"), ["r1-t00"])).replace('"r1-t00"]', "5]").encode(), "NodeNames"),
        (json.dumps({"Pod": pod_json("p"), "Nodes": None, "NodeNames": None}).encode(), "neither NodeNames nor Nodes"),
        (
            json.dumps(
                {
                    "Pod": pod_json("p"),
                    "Nodes": {"metadata": {}, "items": [{"metadata": {"name": 7}}]},
                    "NodeNames": None,
                }
            ).encode(),
            "Nodes.items",
        ),
        (
            json.dumps(
                names_args(pod_json("p", labels={"kilter.dev/gang": "g", "kilter.dev/gang-size": "lots"}), [])
            ).encode(),
            "kilter.dev/gang-size",
        ),
        (
            json.dumps(
                names_args(
                    {
                        **pod_json("p"),
                        "spec": {
                            **pod_json("p")["spec"],
                            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "two"}}}],
                        },
                    },
                    ["r1-t00"],
                )
            ).encode(),
            "malformed quantity 'two' (at $.Pod.spec.containers[0].resources)",
        ),
    ],
)
def test_a_bad_filter_request_is_answered_in_the_error_field(served: Served, body: bytes, message: str) -> None:
    status, data, _ = served.call("POST", "/scheduler/filter", body)
    assert status == 200
    result = json.loads(data)
    assert list(result) == ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
    assert message in result["Error"], result["Error"]
    assert result["NodeNames"] is None and result["Nodes"] is None
    still_serving(served)


@pytest.mark.parametrize("verb", ["prioritize", "preempt"])
@pytest.mark.parametrize("body", [b"[", b'{"Pod": "x"}', b'{"Pod": null}', b"\xff\xfe"])
def test_verbs_without_an_error_field_answer_400(served: Served, verb: str, body: bytes) -> None:
    status, data, _ = served.call("POST", f"/scheduler/{verb}", body)
    assert status == 400 and data
    still_serving(served)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "malformed ExtenderBindingArgs"),
        (b'{"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": ""}', "Node is empty"),
        (b'{"PodName": 1, "PodNamespace": "ml", "PodUID": "u", "Node": "r1-t00"}', "Expected `str`"),
    ],
)
def test_a_bad_bind_is_answered_in_the_error_field(served: Served, body: bytes, message: str) -> None:
    status, data, _ = served.call("POST", "/scheduler/bind", body)
    assert status == 200 and message in json.loads(data)["Error"]
    still_serving(served)


def test_bodies_above_the_limit_get_413_whether_announced_or_streamed(small_body_server: Served) -> None:
    names = [f"node-{i:05d}" for i in range(1000)]
    big = json.dumps(names_args(pod_json("p"), names)).encode()
    assert len(big) > 4096
    status, data, _ = small_body_server.call("POST", "/scheduler/filter", big)
    assert status == 413 and b"--max-body-bytes" in data
    # Chunked, with no Content-Length: the server counts as it reads and stops at the limit.
    with socket.create_connection(("127.0.0.1", small_body_server.port), timeout=10) as sock:
        head = b"POST /scheduler/filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        chunks = b"".join(
            b"%x\r\n%s\r\n" % (len(big[i : i + 1000]), big[i : i + 1000]) for i in range(0, len(big), 1000)
        )
        sock.sendall(head + chunks + b"0\r\n\r\n")
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 413")
    still_serving(small_body_server)


def test_wrong_methods_and_paths(served: Served) -> None:
    assert served.call("GET", "/scheduler/filter")[0] == 405
    assert served.call("POST", "/scheduler/schedule", b"{}")[0] == 404
    assert served.call("POST", "/healthz", b"{}")[0] == 405
    assert served.call("GET", "/nothing-here")[0] == 404
    still_serving(served)


def test_unknown_nodes_are_unresolvable_not_an_error(served: Served) -> None:
    status, result = served.post("filter", names_args(pod_json("p"), ["ghost-1", "ghost-2"]))
    assert (
        status == 200 and result["Error"] == "" and set(result["FailedAndUnresolvableNodes"]) == {"ghost-1", "ghost-2"}
    )
    status, scores = served.post("prioritize", names_args(pod_json("p"), ["ghost-1", "r1-t00"]))
    assert status == 200 and scores[0] == {"Host": "ghost-1", "Score": 0} and scores[1]["Score"] > 0
