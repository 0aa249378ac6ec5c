"""Explain and WatchDecisions over a real socket: decisions made through the HTTP extender verbs are explained by
pod and by gang, and streamed as they are made, per namespace; a reader that falls behind is told how many it
missed; nothing recorded is NOT_FOUND."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from kilter.api import placement_pb2 as pb
from kilter.gangs.decisions import Decision, DecisionFeed
from tests.api.serving import Serving, serving, wait_for, watch
from tests.extenders.conftest import cluster_objects, names_args, pod_json

NODES = [f"r1-t{t:02d}" for t in range(18)]
GANG = {"kilter.dev/gang": "train", "kilter.dev/gang-size": "2"}


def gang_pod(name: str, namespace: str = "ml") -> dict[str, Any]:
    pod = pod_json(name, 4, labels=GANG)
    pod["metadata"]["namespace"] = namespace
    return pod


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Serving]:
    # the gang's two pods are pending in the state, so Explain finds them by the gang's labels
    with serving(tmp_path, objects=[*cluster_objects(), gang_pod("w0"), gang_pod("w1")]) as s:
        yield s


def post(s: Serving, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", s.http_port, timeout=10)
    try:
        conn.request("POST", f"/scheduler/{verb}", json.dumps(body).encode(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 200
        answer: dict[str, Any] = json.loads(response.read())
        return answer
    finally:
        conn.close()


def feed(s: Serving) -> DecisionFeed:
    found = s.app.extender.log.feed
    assert found is not None
    return found


def test_a_pod_nobody_decided_about_is_not_found(served: Serving) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        served.stub().Explain(pb.ExplainRequest(namespace="ml", name="nobody"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_filter_over_http_is_explained_over_grpc_as_debug_explain_shows_it(served: Serving) -> None:
    post(served, "filter", names_args(pod_json("p", 4), ["r1-t00", "r1-t05", "nowhere"]))
    answer = served.stub().Explain(pb.ExplainRequest(namespace="ml", name="p"))
    assert answer.kind == "pod" and [p.name for p in answer.pods] == ["p"]
    (record,) = answer.pods[0].records
    assert record.verb == "filter" and record.summary.startswith("1 of 3 nodes pass for 4")
    verdicts = {n.node: n.verdict for n in record.nodes}
    assert verdicts["r1-t00"] == "passed" and verdicts["r1-t05"] != "passed" and verdicts["nowhere"] != "passed"
    conn = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=10)
    conn.request("GET", "/debug/explain?namespace=ml&pod=p")
    shown = json.loads(conn.getresponse().read())["decisions"][0]
    conn.close()
    assert [(n["node"], n["verdict"], n["reason"]) for n in shown["nodes"]] == [
        (n.node, n.verdict, n.reason) for n in record.nodes
    ]


def test_a_gang_is_explained_with_its_pods_records_and_its_plan(served: Serving) -> None:
    post(served, "filter", names_args(gang_pod("w0"), NODES))
    answer = served.stub().Explain(pb.ExplainRequest(namespace="ml", name="train", kind="gang"))
    assert answer.kind == "gang" and [p.name for p in answer.pods] == ["w0"]  # w1 has no decision yet
    assert answer.plan.key == "ml/gang/train" and answer.plan.feasible
    assert len(answer.plan.nodes) == 2 and answer.plan.bound == 0


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ExplainRequest(namespace="ml", name="x", kind="Deployment"), "kind: 'Deployment' is not one of"),
        (pb.ExplainRequest(namespace="", name="x"), "namespace: "),
        (pb.ExplainRequest(namespace="ML!", name="x"), "namespace: "),
        (pb.ExplainRequest(namespace="ml", name=""), "name: required"),
        (pb.ExplainRequest(namespace="ml", name="a/b", kind="pod"), "name: "),
        (pb.ExplainRequest(namespace="ml", name="only-name", kind="lws"), "name: "),
    ],
    ids=["unknown kind", "no namespace", "bad namespace", "no name", "bad pod name", "lws without group"],
)
def test_a_bad_explain_request_is_invalid_argument_naming_the_field(
    served: Serving, request_: pb.ExplainRequest, field: str
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        served.stub().Explain(request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith(field)


def test_decisions_made_through_http_stream_as_they_are_made(served: Serving) -> None:
    stream = watch(served.stub())
    assert wait_for(lambda: feed(served).watched)
    post(served, "filter", names_args(pod_json("p", 4), ["r1-t00"]))
    post(served, "prioritize", names_args(pod_json("p", 4), ["r1-t00"]))
    got = [stream.next().decision for _ in range(2)]
    stream.cancel()
    assert [(d.source, d.verb, d.kind, d.namespace, d.name) for d in got] == [
        ("scheduler", "filter", "pod", "ml", "p"),
        ("scheduler", "prioritize", "pod", "ml", "p"),
    ]
    assert got[0].outcome == "fits" and got[0].message.startswith("1 of 1 nodes pass")
    assert got[0].time.seconds > 0


def test_a_bind_over_http_streams_where_the_pod_went(served: Serving) -> None:
    stream = watch(served.stub(), "ml")
    assert wait_for(lambda: feed(served).watched)
    post(served, "filter", names_args(pod_json("p", 4), ["r1-t00"]))
    post(served, "bind", {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "r1-t00"})
    got = [stream.next().decision for _ in range(2)]
    stream.cancel()
    assert (got[1].verb, got[1].outcome, got[1].node) == ("bind", "bound", "r1-t00")


def test_a_namespace_filter_streams_only_that_namespaces_decisions(served: Serving) -> None:
    other = watch(served.stub(), "team-b")
    assert wait_for(lambda: feed(served).watched)
    post(served, "filter", names_args(pod_json("p", 4), ["r1-t00"]))  # namespace ml: not for this stream
    theirs = pod_json("q", 4)
    theirs["metadata"]["namespace"] = "team-b"
    post(served, "filter", names_args(theirs, ["r1-t00"]))
    first = other.next().decision
    other.cancel()
    assert (first.namespace, first.name) == ("team-b", "q")


def test_a_bad_namespace_to_watch_is_invalid_argument(served: Serving) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        watch(served.stub(), "Not_A_Namespace").next()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (caught.value.details() or "").startswith("namespace: ")


def test_a_reader_that_falls_behind_is_told_how_many_it_missed_and_the_stream_goes_on(served: Serving) -> None:
    decisions = feed(served)
    decisions.limit = 5
    stream = watch(served.stub())
    assert wait_for(lambda: decisions.watched)

    def burst(n: int, start: int) -> None:  # on the server's loop, in one go: the handler cannot read in between
        for i in range(start, start + n):
            decisions.publish(Decision(float(i), "scheduler", "filter", "pod", "ml", f"p{i}", "fits", "burst"))

    loop = served.placement.loop
    assert loop is not None
    loop.call_soon_threadsafe(burst, 5000, 0)
    got = [stream.next() for _ in range(6)]
    assert [m.decision.name for m in got[:5]] == ["p0", "p1", "p2", "p3", "p4"]
    assert got[5].WhichOneof("event") == "dropped" and got[5].dropped.count == 4995  # 5,000 - the 5 kept
    loop.call_soon_threadsafe(burst, 1, 5000)
    assert stream.next().decision.name == "p5000"
    stream.cancel()
    assert wait_for(lambda: not decisions.watched)  # a cancelled stream unsubscribes
