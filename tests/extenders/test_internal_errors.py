"""A failure no verb foresaw is answered in the protocol over real HTTP, never with a 5xx, and counted in /metrics.

The failures come from fakes at the process edges only, each a seam
``kilter serve`` fills with something that talks to the outside: a
``Binder`` whose API call raises (bind), a plan recorder hook that raises
when a gang's plan is made (filter, prioritize and preempt of a gang pod,
Volcano's predicate and prioritize of a gang task), and a wall clock that
raises (Volcano's quota verbs). Everything between the socket and those
seams is kilter's own code, as served.

The bodies that used to reach real bugs here (JSON nested past the
recursion limit, 2**31 GPUs, a fleet without GPU nodes) now get ordinary
answers; ``test_hostile_requests`` holds them to that.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.extenders import last_resort
from kilter.extenders.binder import Binder
from kilter.extenders.explain import DecisionLog
from kilter.extenders.scheduler import SchedulerExtender
from kilter.extenders.server import App
from kilter.extenders.volcano import VOLCANO_VERBS, VolcanoExtender
from kilter.extenders.volcano.wire import ERROR
from kilter.gangs import GangBook, GangId, GangPlan
from kilter.state.store import ClusterStore
from tests.extenders.conftest import Served, _Server, cluster_objects, names_args, pod_json
from tests.extenders.volcano import payloads as vp
from tests.extenders.volcano.conftest import Volcano as VolcanoClient
from tests.extenders.volcano.conftest import gpu_job, open_session, quota_objects, task_of
from tests.topology.builders import CLIQUE

FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]
_gangs = itertools.count()


class ApiDown(Binder):
    """The binder's API call fails in a way no one foresaw (not an ``ApiError``)."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        raise RuntimeError("connection pool is closed")


def recorder_fails(gang: GangId, plan: GangPlan) -> None:
    """The plan recorder's hook (in production: queues a write to the API server) failing unforeseen."""
    raise RuntimeError("recorder queue is shut down")


def clock_fails() -> float:
    raise RuntimeError("clock source unavailable")


@pytest.fixture
def faulty(tmp_path: Path) -> Iterator[Served]:
    """kilter's own verbs over the scenario's cluster, with failing fakes at the three edges."""
    store = ClusterStore()
    store.replace([*cluster_objects(), *quota_objects()])
    store.fleet()
    gangs = GangBook(store, on_planned=recorder_fails)
    extender = SchedulerExtender(store, gangs, DecisionLog())
    volcano = VolcanoExtender(store, gangs, clock=clock_fails)
    app = App(store, extender, ApiDown(), volcano=volcano)
    with _Server(app, None) as port:
        yield Served(app, store, None, port)


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


def gang_pod() -> dict[str, Any]:
    """A pod of a new gang: asking about it makes a plan, which the failing recorder hook is told of."""
    name = f"g{next(_gangs)}"
    return pod_json(f"{name}-0", 4, labels={"kilter.dev/gang": name, "kilter.dev/gang-size": "2"})


def test_a_filter_that_fails_inside_answers_200_with_the_error_field_and_no_node(faulty: Served) -> None:
    before = internal_errors(faulty, "/scheduler/filter")
    body = json.dumps(names_args(gang_pod(), ["r1-t00", "r1-t01"])).encode()
    status, data, response = faulty.call("POST", "/scheduler/filter", body)
    assert status == 200 and response.getheader("content-type") == "application/json"
    result = json.loads(data)
    assert list(result) == FILTER_KEYS
    assert result["Nodes"] is None and result["NodeNames"] is None  # nothing passes
    assert result["FailedNodes"] == {} and result["FailedAndUnresolvableNodes"] == {}
    assert result["Error"] == "kilter internal error: RuntimeError: recorder queue is shut down"
    assert internal_errors(faulty, "/scheduler/filter") == before + 1
    still_serving(faulty)


def test_a_bind_that_fails_inside_answers_200_with_the_error_field(faulty: Served) -> None:
    before = internal_errors(faulty, "/scheduler/bind")
    assert faulty.post("filter", names_args(pod_json("p", 4), ["r1-t00"]))[0] == 200  # kube-scheduler's order
    body = {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "r1-t00"}
    status, data, _ = faulty.call("POST", "/scheduler/bind", json.dumps(body).encode())
    assert status == 200
    result = json.loads(data)
    assert result == {"Error": "kilter internal error: RuntimeError: connection pool is closed"}
    assert internal_errors(faulty, "/scheduler/bind") == before + 1
    still_serving(faulty)


@pytest.mark.parametrize("verb", ["prioritize", "preempt"])
def test_a_prioritize_or_preempt_that_fails_inside_answers_400_with_one_line(faulty: Served, verb: str) -> None:
    path = f"/scheduler/{verb}"
    before = internal_errors(faulty, path)
    pod = gang_pod()
    body: dict[str, Any] = names_args(pod, ["r1-t00", "r1-t01"])
    if verb == "preempt":
        victims = {"r1-t00": {"Pods": [{"UID": "uid-busy"}], "NumPDBViolations": 0}}
        body = {"Pod": pod, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims}
    status, data, response = faulty.call("POST", path, json.dumps(body).encode())
    assert status == 400 and response.getheader("content-type") == "text/plain"
    assert is_one_line(data) and data.startswith(b"kilter internal error: RuntimeError")
    assert internal_errors(faulty, path) == before + 1
    still_serving(faulty)


def volcano_node(name: str) -> dict[str, Any]:
    return vp.node_info(name, gpus=4, used_gpus=0, labels={CLIQUE: name.split("-")[0]})


def volcano_body(verb: str, client: VolcanoClient) -> bytes:
    """A well-formed body for ``verb`` that reaches the failing edge: a new gang's task, or the clock."""
    gang = gpu_job(f"vg{next(_gangs)}", 2, 4)
    open_session(client, [gang])
    task = task_of(gang)
    body = {
        "predicate": lambda: vp.predicate_args(task, volcano_node("r1-t00")),
        "prioritize": lambda: vp.prioritize_args(task, [volcano_node("r1-t00"), volcano_node("r1-t01")]),
        "jobEnqueueable": lambda: vp.job_args(gang),
        "preemptable": lambda: vp.evict_args(task, [task_of(gang, 1)]),
        "reclaimable": lambda: vp.evict_args(task, [task_of(gang, 1)]),
    }[verb]()
    return vp.to_go_json(body)


# One verb per answer form the edges reach: predicate's status (and v1.9's list), prioritize's errorMessage,
# and the 400 of the verbs without an error field. ``test_every_path_has_an_in_protocol_answer`` covers the rest.
VOLCANO_PATHS = [
    "/volcano/predicate",
    "/volcano/v1.9/predicate",
    "/volcano/prioritize",
    "/volcano/jobEnqueueable",
    "/volcano/preemptable",
    "/volcano/reclaimable",
]


def _volcano_answer_is_in_protocol(path: str, status: int, data: bytes) -> None:
    """The verb's own error field where its answer has one, else HTTP 400 with one line."""
    verb = path.rsplit("/", 1)[1]
    legacy = "/v1.9/" in path
    if verb == "predicate":
        assert status == 200
        result = json.loads(data)
        if legacy:
            [entry] = result["status"]
            assert entry["Code"] == ERROR and entry["Reason"].startswith("kilter internal error: RuntimeError")
        else:
            assert result["code"] == ERROR and result["status"].startswith("kilter internal error: RuntimeError")
    elif verb == "prioritize":
        assert status == 200
        result = json.loads(data)
        assert result["nodeScore"] == {} and result["errorMessage"].startswith("kilter internal error: RuntimeError")
    elif verb in ("allocateFunc", "deallocateFunc"):
        assert status == 200
        assert json.loads(data)["errorMessage"].startswith("kilter internal error:")
    else:
        assert status == 400 and is_one_line(data) and data.startswith(b"kilter internal error: RuntimeError")


@pytest.mark.parametrize("path", VOLCANO_PATHS)
def test_a_volcano_verb_that_fails_inside_answers_in_its_error_field_or_400(faulty: Served, path: str) -> None:
    client = VolcanoClient(faulty.app, faulty.port)
    before = internal_errors(faulty, path)
    status, data, _ = faulty.call("POST", path, volcano_body(path.rsplit("/", 1)[1], client))
    assert status < 500
    _volcano_answer_is_in_protocol(path, status, data)
    assert internal_errors(faulty, path) == before + 1
    still_serving(faulty)


@pytest.mark.parametrize(
    "path",
    [
        *(f"/scheduler/{v}" for v in ("filter", "prioritize", "preempt", "bind")),
        *(f"/volcano/{v}" for v in VOLCANO_VERBS),
        *(f"/volcano/v1.9/{v}" for v in VOLCANO_VERBS),
        "other",
    ],
)
def test_every_path_has_an_in_protocol_answer(path: str) -> None:
    """The one map from path to answer: 200 only where the protocol has an error field, and it always refuses."""
    answer = last_resort.internal_error(path, "kilter internal error: RuntimeError: x")
    assert answer.outcome == last_resort.OUTCOME
    if answer.status == 400:
        assert answer.body == b"kilter internal error: RuntimeError: x\n"
        return
    assert answer.status == 200
    result = json.loads(answer.body)
    if path == "/scheduler/filter":
        assert list(result) == FILTER_KEYS and result["NodeNames"] is None and result["Nodes"] is None
    elif path.endswith("/predicate"):
        legacy = result["status"][0] if "/v1.9/" in path else None
        assert (legacy["Code"] if legacy else result["code"]) == ERROR
    elif path.endswith("/prioritize"):
        assert result == {"nodeScore": {}, "errorMessage": "kilter internal error: RuntimeError: x"}
    else:
        assert path.rsplit("/", 1)[1] in ("bind", "allocateFunc", "deallocateFunc"), path
        assert result.get("Error", result.get("errorMessage")) == "kilter internal error: RuntimeError: x"
