"""Bodies that once reached real bugs get the ordinary error or verdict, over real HTTP, and no internal error.

JSON nested past the decoder's recursion limit is a malformed body; a pod
asking for more GPUs than any node holds is refused as the gang planner
refuses it; a fleet without a single GPU node knows none of the nodes it is
asked about. ``kilter_internal_errors_total`` stays at zero throughout.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.extenders.volcano import VOLCANO_VERBS
from kilter.extenders.volcano.wire import ERROR
from kilter.topology.plan import MAX_POD_GPUS
from tests.extenders.conftest import (
    Served,
    cluster_objects,
    names_args,
    pod_json,
    serve_snapshot,
)
from tests.extenders.volcano import payloads as vp
from tests.topology.builders import CLIQUE

FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
# {"Pod": {"a": {"a": … 1 …}}}: valid JSON whose decoding recurses past Python's limit.
DEEP = ('{"Pod":' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}").encode()
DEEP_VOLCANO = ('{"task":' + '{"a":' * 100_000 + "1" + "}" * 100_000 + "}").encode()
DEEP_BIND = ('{"PodName":"p","Extra":' + "[" * 100_000 + "]" * 100_000 + "}").encode()
UNKNOWN = "not a GPU node in kilter's model of the fleet"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path) as served:
        yield served


@pytest.fixture
def empty_fleet(tmp_path: Path) -> Iterator[Served]:
    """A snapshot with only a CPU node: no GPU node at all (what a placeholder List amounts to)."""
    with serve_snapshot(tmp_path, [o for o in cluster_objects() if o["metadata"]["name"] == "cpu-1"]) as served:
        yield served


def internal_errors(served: Served) -> float:
    """``kilter_internal_errors_total`` over every path, as GET /metrics shows it."""
    status, text, _ = served.call("GET", "/metrics")
    assert status == 200
    found = re.findall(r"^kilter_internal_errors_total\{[^}]*\} (\S+)$", text.decode(), re.MULTILINE)
    return sum(float(v) for v in found)


def still_serving(served: Served) -> None:
    status, result = served.post("filter", names_args(pod_json("ok", 4), ["r1-t00"]))
    assert status == 200 and result["NodeNames"] == ["r1-t00"]


def is_one_line(data: bytes) -> bool:
    return data.strip() != b"" and b"\n" not in data.rstrip(b"\n")


# ---------------------------------------------------------------------- nested too deep


def test_a_filter_or_bind_nested_too_deep_is_a_malformed_body_in_the_error_field(fleet: Served) -> None:
    status, data, _ = fleet.call("POST", "/scheduler/filter", DEEP)
    result = json.loads(data)
    assert status == 200 and list(result) == FILTER_KEYS
    assert result["Error"] == "malformed ExtenderArgs: JSON nested too deep"
    assert result["NodeNames"] is None and result["Nodes"] is None
    for body in (DEEP, DEEP_BIND):
        status, data, _ = fleet.call("POST", "/scheduler/bind", body)
        assert (status, json.loads(data)) == (200, {"Error": "malformed ExtenderBindingArgs: JSON nested too deep"})
    assert internal_errors(fleet) == 0
    still_serving(fleet)


@pytest.mark.parametrize(("verb", "kind"), [("prioritize", "ExtenderArgs"), ("preempt", "ExtenderPreemptionArgs")])
def test_a_prioritize_or_preempt_nested_too_deep_gets_400_with_one_line(fleet: Served, verb: str, kind: str) -> None:
    status, data, response = fleet.call("POST", f"/scheduler/{verb}", DEEP)
    assert status == 400 and response.getheader("content-type") == "text/plain" and is_one_line(data)
    assert data.decode().strip() == f"malformed {kind}: JSON nested too deep"
    assert internal_errors(fleet) == 0


NESTED_NAMES = ('{"Pod":null,"Nodes":null,"NodeNames":' + "[" * 100_000 + "]" * 100_000 + "}").encode()


@pytest.mark.parametrize("body", [DEEP, DEEP_VOLCANO, NESTED_NAMES], ids=["Pod", "task", "NodeNames"])
@pytest.mark.parametrize("path", [f"/volcano/{v}" for v in VOLCANO_VERBS] + ["/volcano/v1.9/predicate"])
def test_a_volcano_body_nested_too_deep_gets_the_verbs_own_error(fleet: Served, path: str, body: bytes) -> None:
    status, data, _ = fleet.call("POST", path, body)
    verb = path.rsplit("/", 1)[1]
    if verb == "onSessionClose":  # reads no body
        assert status == 200
    elif verb == "predicate" and "/v1.9/" in path:
        [entry] = json.loads(data)["status"]
        assert status == 200 and entry["Code"] == ERROR and "nested too deep" in entry["Reason"]
    elif verb == "predicate":
        result = json.loads(data)
        assert status == 200 and result["code"] == ERROR and "nested too deep" in result["status"]
    elif verb in ("prioritize", "allocateFunc", "deallocateFunc"):
        assert status == 200 and "nested too deep" in json.loads(data)["errorMessage"]
    else:
        assert status == 400 and is_one_line(data) and b"nested too deep" in data
    assert internal_errors(fleet) == 0


# ---------------------------------------------------------------------- more GPUs than any node


@pytest.mark.parametrize("gpus", [MAX_POD_GPUS + 1, 2**31, 2**63 - 1])
def test_a_pod_asking_for_more_gpus_than_any_node_holds_is_refused_by_every_verb(fleet: Served, gpus: int) -> None:
    pod = pod_json(f"huge{gpus}", gpus)
    refusal = f"the pod asks for {gpus} nvidia.com/gpu; no node offers more than {MAX_POD_GPUS}"
    status, result = fleet.post("filter", names_args(pod, ["r1-t00", "r1-t01"]))
    assert status == 200 and result["Error"].startswith(refusal) and result["NodeNames"] is None
    status, text = fleet.post("prioritize", names_args(pod, ["r1-t00", "r1-t01"]))
    assert status == 400 and text.startswith(refusal)
    victims = {"r2-t00": {"Pods": [{"UID": "uid-busy"}], "NumPDBViolations": 0}}
    status, text = fleet.post("preempt", {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})
    assert status == 400 and text.startswith(refusal)
    assert internal_errors(fleet) == 0
    still_serving(fleet)


@pytest.mark.parametrize("asked", ["1e999999999", "9" * 5000, "8Ei"])
def test_a_gpu_quantity_past_what_kubernetes_holds_is_capped_and_refused_by_every_verb(
    fleet: Served, asked: str
) -> None:
    pod = pod_json("vast", 4)
    for container in pod["spec"]["containers"]:
        container["resources"] = {"limits": {"nvidia.com/gpu": asked}, "requests": {"nvidia.com/gpu": asked}}
    refusal = f"the pod asks for {2**63 - 1} nvidia.com/gpu; no node offers more than {MAX_POD_GPUS}"  # the cap
    status, result = fleet.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["Error"].startswith(refusal)
    for verb in ("prioritize", "preempt"):
        status, text = fleet.post(verb, names_args(pod, ["r1-t00"]))
        assert status == 400 and text.startswith(refusal), verb
    assert internal_errors(fleet) == 0


def test_a_pod_asking_for_as_many_gpus_as_the_limit_is_too_big_for_every_node_not_refused(fleet: Served) -> None:
    pod = pod_json("big", MAX_POD_GPUS)
    status, result = fleet.post("filter", names_args(pod, ["r1-t00"]))
    assert status == 200 and result["Error"] == "" and result["NodeNames"] == []
    assert result["FailedAndUnresolvableNodes"] == {
        "r1-t00": f"the node has 4 nvidia.com/gpu; the pod needs {MAX_POD_GPUS}"
    }
    status, scores = fleet.post("prioritize", names_args(pod, ["r1-t00"]))
    assert (status, scores) == (200, [{"Host": "r1-t00", "Score": 0}])


def volcano_node(name: str) -> dict[str, Any]:
    return vp.node_info(name, gpus=4, used_gpus=0, labels={CLIQUE: name.split("-")[0]})


@pytest.mark.parametrize(
    ("gpus", "shown"),
    [
        (2**31, "2147483648"),
        (2**64, "9223372036854775808"),  # capped at 2^63-1, then 1,000 times that as a float64 of milli-units
        (10**30, "999999999999999945575230987042"),  # a body no Kubernetes pod gives: 1e33 milli-units, as a float64
    ],
)
def test_a_volcano_task_asking_for_more_gpus_than_any_node_holds_gets_each_verbs_error(
    fleet: Served, gpus: int, shown: str
) -> None:
    task = vp.task_info(vp.pod("ml", "huge", "uid-huge", gpus=gpus, group="huge"))
    if gpus == 10**30:
        task["Resreq"]["ScalarResources"]["nvidia.com/gpu"] = 1e33
    refusal = f"the task asks for {shown} nvidia.com/gpu; no node offers more than {MAX_POD_GPUS}"
    bodies = {
        "predicate": vp.predicate_args(task, volcano_node("r1-t00")),
        "prioritize": vp.prioritize_args(task, [volcano_node("r1-t00"), volcano_node("r1-t01")]),
        "allocateFunc": vp.task_args(dict(task, NodeName="r1-t01", Status=vp.ALLOCATED)),
    }
    answers = {}
    for verb, body in bodies.items():
        status, data, _ = fleet.call("POST", f"/volcano/{verb}", vp.to_go_json(body))
        assert status == 200
        answers[verb] = json.loads(data)
    assert answers["predicate"] == {"status": refusal, "code": ERROR}
    assert answers["prioritize"] == {"nodeScore": {}, "errorMessage": refusal}
    assert answers["allocateFunc"] == {"errorMessage": refusal}  # never booked: Volcano rolls the allocation back
    assert internal_errors(fleet) == 0


# ---------------------------------------------------------------------- no GPU node at all


def test_a_filter_on_a_fleet_without_gpu_nodes_finds_every_node_unresolvable(empty_fleet: Served) -> None:
    status, result = empty_fleet.post("filter", names_args(pod_json("p", 4), ["r1-t00", "cpu-1"]))
    assert status == 200 and list(result) == FILTER_KEYS and result["Error"] == ""
    assert result["NodeNames"] == [] and result["FailedNodes"] == {}
    assert result["FailedAndUnresolvableNodes"] == {"r1-t00": UNKNOWN, "cpu-1": UNKNOWN}
    nodes = {"metadata": {}, "items": [{"metadata": {"name": "r1-t00"}}]}
    status, result = empty_fleet.post("filter", {"Pod": pod_json("p", 4), "Nodes": nodes, "NodeNames": None})
    assert status == 200 and result["Error"] == "" and result["Nodes"] == {"metadata": {}, "items": []}
    assert result["FailedAndUnresolvableNodes"] == {"r1-t00": UNKNOWN}
    gang = pod_json("g-0", 4, labels={"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    status, result = empty_fleet.post("filter", names_args(gang, ["r1-t00"]))
    assert status == 200 and result["FailedAndUnresolvableNodes"] == {"r1-t00": UNKNOWN}
    status, scores = empty_fleet.post("prioritize", names_args(pod_json("p", 4), ["r1-t00"]))
    assert (status, scores) == (200, [{"Host": "r1-t00", "Score": 0}])
    assert internal_errors(empty_fleet) == 0
