"""The list/watch test server's ``pods/eviction`` answers as kube-apiserver's EvictionREST does, and kilter's
``kube.evict`` speaks it: the pod deleted within its PodDisruptionBudget, refused (429) beyond it, over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiError, ApiServer
from kilter.kube.evict import GONE, evict
from tests.listwatch import PDBS, PODS, ListWatchServer

TOKEN = "evictions"
Obj = dict[str, Any]


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS, PDBS], token=TOKEN) as server:
        yield server


@pytest.fixture
def api(cluster: ListWatchServer) -> ApiServer:
    # The test drives the server itself: not kilter's own calls (tests/config/test_rbac_proof.py counts those).
    return ApiServer(
        "http", cluster.host, cluster.port, {"Authorization": f"Bearer {TOKEN}"}, user_agent="listwatch-tests"
    )


def a_pod(name: str, *, phase: str = "Running", ready: bool = True, labels: dict[str, str] | None = None) -> Obj:
    status: Obj = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    meta = {"name": name, "namespace": "ml", "labels": labels or {"app": "sweep"}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def a_budget(name: str, allowed: int, *, selector: Obj | None = None, healthy: int = 2, desired: int = 2) -> Obj:
    status = {
        "observedGeneration": 1,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": 2,
    }
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "sweep"}} if selector is None else selector, "minAvailable": 1},
        "status": status,
    }


def pods(cluster: ListWatchServer) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.objects(PODS)}


def test_a_pod_within_its_budget_is_evicted_and_the_budget_spent(api: ApiServer, cluster: ListWatchServer) -> None:
    uid = cluster.add(a_pod("p"))["metadata"]["uid"]
    cluster.add(a_budget("sweep", 1))
    assert evict(api, "ml", "p", uid) == ""
    assert pods(cluster) == set()
    budget = api.call("GET", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets/sweep")
    assert budget["status"]["disruptionsAllowed"] == 0 and list(budget["status"]["disruptedPods"]) == ["p"]


def test_a_budget_that_allows_no_disruption_refuses_with_429_and_its_cause(
    api: ApiServer, cluster: ListWatchServer
) -> None:
    uid = cluster.add(a_pod("p"))["metadata"]["uid"]
    cluster.add(a_budget("sweep", 0))
    why = evict(api, "ml", "p", uid)
    assert why == "API server answered 429: Cannot evict pod as it would violate the pod's disruption budget."
    assert pods(cluster) == {"p"}
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ml"}}
    status, answer = cluster.evict_raw("ml", "p", body)
    assert status == 429 and answer["reason"] == "TooManyRequests"
    assert answer["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget sweep needs 2 healthy pods and has 2 currently",
        }
    ]


@pytest.mark.parametrize(
    ("pod", "budgets", "code"),
    [
        pytest.param(a_pod("p", phase="Pending"), [a_budget("sweep", 0)], 201, id="a Pending pod ignores budgets"),
        pytest.param(a_pod("p", phase="Failed"), [a_budget("sweep", 0)], 201, id="an ended pod ignores budgets"),
        pytest.param(a_pod("p", ready=False), [a_budget("sweep", 0)], 201, id="unready, budget healthy: no spend"),
        pytest.param(
            a_pod("p", ready=False), [a_budget("sweep", 0, healthy=1, desired=2)], 429, id="unready, budget short"
        ),
        pytest.param(a_pod("p"), [a_budget("a", 1), a_budget("b", 1)], 500, id="two budgets select it"),
        pytest.param(a_pod("p"), [a_budget("sweep", -1)], 403, id="a negative budget"),
        pytest.param(a_pod("p"), [a_budget("sweep", 0, selector={})], 201, id="an empty selector selects nothing"),
        pytest.param(
            a_pod("p"),
            [a_budget("sweep", 0, selector={"matchExpressions": [{"key": "app", "operator": "In", "values": ["x"]}]})],
            201,
            id="an expression that does not select it",
        ),
    ],
)
def test_evictions_follow_the_apiservers_rules(
    cluster: ListWatchServer, pod: Obj, budgets: list[Obj], code: int
) -> None:
    cluster.add(pod)
    for budget in budgets:
        cluster.add(budget)
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ml"}}
    status, _ = cluster.evict_raw("ml", "p", body)
    assert status == code
    assert pods(cluster) == (set() if code == 201 else {"p"})


def test_a_uid_precondition_is_judged_at_the_delete_after_the_budget(api: ApiServer, cluster: ListWatchServer) -> None:
    cluster.add(a_pod("p"))
    cluster.add(a_budget("sweep", 0))
    assert evict(api, "ml", "p", "another-uid").startswith("API server answered 429: ")  # the budget answers first
    budget = api.call("PUT", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets/sweep", a_budget("sweep", 1))
    assert budget["status"]["disruptionsAllowed"] == 1
    assert evict(api, "ml", "p", "another-uid").startswith("API server answered 409: ")
    spent = api.call("GET", "/apis/policy/v1/namespaces/ml/poddisruptionbudgets/sweep")["status"]
    assert spent["disruptionsAllowed"] == 0 and pods(cluster) == {"p"}  # spent, and the pod kept, as upstream


def test_bad_evictions_are_refused_and_change_nothing(api: ApiServer, cluster: ListWatchServer) -> None:
    uid = cluster.add(a_pod("p"))["metadata"]["uid"]
    path = "/api/v1/namespaces/ml/pods/p/eviction"
    with pytest.raises(ApiError) as caught:
        api.call("POST", path, {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "q"}})
    assert caught.value.code == 400 and "name in URL does not match" in str(caught.value)
    assert evict(api, "ml", "p", "another-uid").startswith("API server answered 409: ")  # the pod was made again
    dry = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "p"},
        "deleteOptions": {"dryRun": ["All"]},
    }
    api.call("POST", path, dry)
    assert pods(cluster) == {"p"}
    assert evict(api, "ml", "gone", "") == GONE  # already gone: nothing evicted
    assert evict(api, "ml", "p", uid) == "" and pods(cluster) == set()
