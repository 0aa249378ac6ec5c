"""A failure no verb foresaw is answered in the protocol over real HTTP, never with a 5xx, and counted in /metrics.

The failures come from real requests that reach real bugs today (a body
nested 1,000 deep overflows the decoder's recursion, a pod asking for 2**31
GPUs overflows an int32, a fleet with no GPU node trips an IndexError); the
tests hold whatever the root causes become, since they assert only that the
answer is in-protocol, refuses, and is counted.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.extenders.volcano import VOLCANO_VERBS
from kilter.extenders.volcano.wire import ERROR
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    write_snapshot,
)

FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
# {"Pod": {"a": {"a": … 1 …}}}: valid JSON whose decoding recurses past Python's limit.
DEEP = ('{"Pod":' + '{"a":' * 1000 + "1" + "}" * 1000 + "}").encode()
DEEP_VOLCANO = ('{"task":' + '{"a":' * 1000 + "1" + "}" * 1000 + "}").encode()


def serve(tmp_path: Path, objects: list[dict[str, Any]]) -> Iterator[Served]:
    snapshot = tmp_path / "snapshot.json"
    write_snapshot(snapshot, objects)
    app, store = build_app(serve_config(snapshot))
    with _Server(app, None) as port:
        yield Served(app, store, snapshot, port)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Served]:
    yield from serve(tmp_path, cluster_objects())


@pytest.fixture
def empty_fleet(tmp_path: Path) -> Iterator[Served]:
    """A snapshot with only a CPU node: no GPU node at all."""
    yield from serve(tmp_path, [o for o in cluster_objects() if o["metadata"]["name"] == "cpu-1"])


def internal_errors(served: Served, path: str) -> float:
    """``kilter_internal_errors_total{path=…}`` as GET /metrics shows it (0 before the first)."""
    status, text, _ = served.call("GET", "/metrics")
    assert status == 200
    pattern = re.compile(rf'^kilter_internal_errors_total\{{path="{re.escape(path)}"\}} (\S+)$', re.MULTILINE)
    found = pattern.search(text.decode())
    return float(found.group(1)) if found else 0.0


def is_one_line(data: bytes) -> bool:
    return data.count(b"\n") <= 1 and data.strip() != b"" and b"\n" not in data.rstrip(b"\n")


def still_serving(served: Served) -> None:
    status, result = served.post("filter", names_args(pod_json("ok", 4), ["r1-t00"]))
    assert status == 200 and result["NodeNames"] == ["r1-t00"]


def test_a_filter_that_fails_inside_answers_200_with_the_error_field_and_no_node(fleet: Served) -> None:
    before = internal_errors(fleet, "/scheduler/filter")
    status, data, response = fleet.call("POST", "/scheduler/filter", DEEP)
    assert status == 200 and response.getheader("content-type") == "application/json"
    result = json.loads(data)
    assert list(result) == FILTER_KEYS
    assert result["Nodes"] is None and result["NodeNames"] is None  # nothing passes
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"].startswith("kilter internal error: RecursionError")
    assert internal_errors(fleet, "/scheduler/filter") == before + 1
    still_serving(fleet)


def test_a_bind_that_fails_inside_answers_200_with_the_error_field(fleet: Served) -> None:
    before = internal_errors(fleet, "/scheduler/bind")
    status, data, _ = fleet.call("POST", "/scheduler/bind", DEEP)
    assert status == 200
    result = json.loads(data)
    assert list(result) == ["Error"] and result["Error"].startswith("kilter internal error: RecursionError")
    assert internal_errors(fleet, "/scheduler/bind") == before + 1
    still_serving(fleet)


@pytest.mark.parametrize("verb", ["prioritize", "preempt"])
def test_a_prioritize_or_preempt_that_fails_inside_answers_400_with_one_line(fleet: Served, verb: str) -> None:
    path = f"/scheduler/{verb}"
    before = internal_errors(fleet, path)
    status, data, response = fleet.call("POST", path, DEEP)
    assert status == 400 and response.getheader("content-type") == "text/plain"
    assert is_one_line(data) and data.startswith(b"kilter internal error: RecursionError")
    assert internal_errors(fleet, path) == before + 1
    still_serving(fleet)


def test_a_pod_asking_for_two_to_the_31_gpus_gets_a_4xx_from_prioritize(fleet: Served) -> None:
    before = internal_errors(fleet, "/scheduler/prioritize")
    status, data = fleet.post("prioritize", names_args(pod_json("huge", 2**31), ["r1-t00", "r1-t01"]))
    assert 400 <= status < 500 and is_one_line(data.encode())
    assert internal_errors(fleet, "/scheduler/prioritize") == before + 1
    still_serving(fleet)


def test_a_filter_on_a_fleet_without_gpu_nodes_refuses_in_the_error_field(empty_fleet: Served) -> None:
    before = internal_errors(empty_fleet, "/scheduler/filter")
    status, result = empty_fleet.post("filter", names_args(pod_json("p", 4), ["r1-t00", "cpu-1"]))
    assert status == 200 and list(result) == FILTER_KEYS
    assert result["NodeNames"] is None and result["Nodes"] is None and result["Error"]
    assert result["Error"].startswith("kilter internal error: IndexError")
    assert internal_errors(empty_fleet, "/scheduler/filter") == before + 1


def _volcano_answer_is_in_protocol(path: str, status: int, data: bytes) -> None:
    """The verb's own error field where its answer has one, else HTTP 400 with one line."""
    verb = path.rsplit("/", 1)[1]
    legacy = "/v1.9/" in path
    if verb == "predicate":
        assert status == 200
        result = json.loads(data)
        if legacy:
            [entry] = result["status"]
            assert entry["Code"] == ERROR and entry["Reason"].startswith("kilter internal error:")
        else:
            assert result["code"] == ERROR and result["status"].startswith("kilter internal error:")
    elif verb == "prioritize":
        assert status == 200
        result = json.loads(data)
        assert result["nodeScore"] == {} and result["errorMessage"].startswith("kilter internal error:")
    elif verb in ("allocateFunc", "deallocateFunc"):
        assert status == 200
        assert json.loads(data)["errorMessage"].startswith("kilter internal error:")
    else:
        assert status == 400 and is_one_line(data)


# onSessionClose reads no body, so no body makes it fail.
VOLCANO_PATHS = [*(f"/volcano/{v}" for v in VOLCANO_VERBS if v != "onSessionClose"), "/volcano/v1.9/predicate"]


@pytest.mark.parametrize("path", VOLCANO_PATHS)
def test_a_volcano_verb_that_fails_inside_answers_in_its_error_field_or_400(fleet: Served, path: str) -> None:
    before = internal_errors(fleet, path)
    status, data, _ = fleet.call("POST", path, DEEP_VOLCANO)
    assert status < 500
    _volcano_answer_is_in_protocol(path, status, data)
    assert internal_errors(fleet, path) == before + 1
    still_serving(fleet)


def test_nested_bodies_never_get_a_5xx_on_any_verb(fleet: Served) -> None:
    paths = [*(f"/scheduler/{v}" for v in ("filter", "prioritize", "preempt", "bind")), *VOLCANO_PATHS]
    for path in [*paths, "/volcano/onSessionClose"]:
        for body in (DEEP, DEEP_VOLCANO):
            conn = fleet.connect()
            try:
                conn.request("POST", path, body, {"Content-Type": "application/json"})
                response: http.client.HTTPResponse = conn.getresponse()
                assert response.status < 500, (path, response.status, response.read())
            finally:
                conn.close()
    still_serving(fleet)
