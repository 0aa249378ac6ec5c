"""Validating and mutating AdmissionReviews over real HTTPS, shaped as kube-apiserver sends them."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.webhooks.server import MAX_REVIEW_BYTES
from tests.extenders.conftest import cluster_objects
from tests.webhooks.conftest import KILTER_USER, Hooks, admission_review, start

CLIQUE = "nvidia.com/gpu.clique"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def cq(name: str, annotations: dict[str, str] | None = None, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "gb200", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]}
                    ],
                }
            ]
        },
    }


def local_queue(name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"clusterQueue": cluster_queue},
    }


@pytest.fixture(params=["snapshot", "live"])
def hooks(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Hooks]:
    kueue = [cq("small"), local_queue("team", "small"), cq("auto", {"kilter.dev/topology-policy": "auto"}, 4096)]
    kueue.append(local_queue("auto-team", "auto"))
    yield from start(tmp_path, [*cluster_objects(), *kueue], mode=request.param)


def job(
    pods: int,
    gpus: int = 4,
    *,
    annotations: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": "train", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        }
    }
    if template_annotations is not None:
        template["metadata"] = {"annotations": template_annotations}
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "annotations": annotations or {}, "labels": labels},
        "spec": {"parallelism": pods, "completions": pods, "suspend": True, "template": template},
    }


def verdict(hooks: Hooks, path: str, review: dict[str, Any]) -> dict[str, Any]:
    answer = hooks.review(path, review)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    response: dict[str, Any] = answer["response"]
    if path == "/validate":
        assert "patch" not in response and "patchType" not in response
    return response


def apply_patch(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """RFC 6902 ``add`` as the apiserver applies it, for the ops the mutating webhook sends."""
    assert response["patchType"] == "JSONPatch"
    out = copy.deepcopy(obj)
    for op in json.loads(base64.b64decode(response["patch"])):
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert parts[-1] not in node, "add must not replace what the user wrote"
        node[parts[-1]] = op["value"]
    return out


# ---------------------------------------------------------------------- validating


def test_an_ordinary_job_is_allowed(hooks: Hooks) -> None:
    assert verdict(hooks, "/validate", admission_review(job(4)))["allowed"] is True


def test_unknown_or_malformed_kilter_annotations_on_queues_are_denied(hooks: Hooks) -> None:
    denied = verdict(hooks, "/validate", admission_review(cq("q", {"kilter.dev/usage-halflife": "7d"})))
    assert denied["allowed"] is False and denied["status"]["code"] == 422
    assert "unknown annotation kilter.dev/usage-halflife" in denied["status"]["message"]
    assert "kilter.dev/usage-half-life" in denied["status"]["message"]
    denied = verdict(hooks, "/validate", admission_review(cq("q", {"kilter.dev/min-runtime": "soon"})))
    assert denied["allowed"] is False and "'soon' is not a duration" in denied["status"]["message"]


def test_only_kilter_writes_its_decay_state(hooks: Hooks) -> None:
    state = json.dumps({"time": "2026-12-01T00:00:00Z", "usage": {"gb200/nvidia.com/gpu": 8}})
    mine = cq("q", {"kilter.dev/decayed-usage": state})
    denied = verdict(hooks, "/validate", admission_review(mine))
    assert denied["allowed"] is False and denied["status"]["code"] == 403
    assert "written by kilter only" in denied["status"]["message"]
    assert verdict(hooks, "/validate", admission_review(mine, user=KILTER_USER))["allowed"] is True
    # A user editing something else of a queue that carries kilter's state is fine.
    edited = copy.deepcopy(mine)
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "16"
    assert verdict(hooks, "/validate", admission_review(edited, operation="UPDATE", old=mine))["allowed"] is True


def test_a_gang_that_one_domain_can_never_hold_is_denied_with_what_to_change(hooks: Hooks) -> None:
    too_big = job(20, template_annotations={REQUIRED: CLIQUE})  # an NVL72 rack holds 18 trays of 4 GPUs
    denied = verdict(hooks, "/validate", admission_review(too_big))
    assert denied["allowed"] is False
    message = denied["status"]["message"]
    assert "can never run" in message and "18" in message and "slice" in message
    fits = job(18, template_annotations={REQUIRED: CLIQUE})
    assert verdict(hooks, "/validate", admission_review(fits))["allowed"] is True
    odd = job(2, gpus=5, template_annotations={REQUIRED: CLIQUE})  # no tray has 5 GPUs
    assert verdict(hooks, "/validate", admission_review(odd))["allowed"] is False


def test_a_job_its_cluster_queue_could_never_admit_is_denied(hooks: Hooks) -> None:
    denied = verdict(hooks, "/validate", admission_review(job(4, queue="team")))  # 16 GPUs, the queue holds 8
    assert denied["allowed"] is False and "ClusterQueue small" in denied["status"]["message"]
    assert verdict(hooks, "/validate", admission_review(job(2, queue="team")))["allowed"] is True
    assert verdict(hooks, "/validate", admission_review(job(4, queue="no-such-queue")))["allowed"] is True


def test_bad_kilter_job_annotations_are_denied(hooks: Hooks) -> None:
    denied = verdict(hooks, "/validate", admission_review(job(2, annotations={"kilter.dev/topology": "maybe"})))
    assert denied["allowed"] is False and "auto, off" in denied["status"]["message"]


def test_deletes_are_allowed(hooks: Hooks) -> None:
    review = admission_review(None, operation="DELETE", old=cq("q", {"kilter.dev/usage-halflife": "x"}))
    assert verdict(hooks, "/validate", review)["allowed"] is True


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}).encode(),
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}).encode(),
    ],
)
def test_bodies_the_apiserver_never_sends_get_400_not_a_crash(hooks: Hooks, body: bytes) -> None:
    for path in ("/validate", "/mutate"):
        status, _ = hooks.post(path, body)
        assert status == 400
    assert verdict(hooks, "/validate", admission_review(job(1)))["allowed"] is True


def test_odd_objects_in_a_well_formed_review_are_answered(hooks: Hooks) -> None:
    review = admission_review(job(1))
    review["request"]["object"] = 5
    assert verdict(hooks, "/validate", review)["allowed"] is True
    review["request"]["object"] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {}, "spec": "nope"}
    denied = verdict(hooks, "/validate", review)
    assert denied["allowed"] is False and denied["status"]["code"] == 422


# ---------------------------------------------------------------------- mutating


def test_an_opted_in_job_gets_the_domain_its_pods_fit_in(hooks: Hooks) -> None:
    obj = job(4, annotations={"kilter.dev/topology": "auto"})
    response = verdict(hooks, "/mutate", admission_review(obj))
    assert response["allowed"] is True
    mutated = apply_patch(obj, response)
    assert mutated["spec"]["template"]["metadata"]["annotations"] == {REQUIRED: CLIQUE}
    assert any("podset-required-topology" in w for w in response["warnings"])
    # Idempotent: the mutated job needs nothing more.
    again = verdict(hooks, "/mutate", admission_review(mutated))
    assert "patch" not in again


def test_a_gang_larger_than_a_domain_gets_slices_that_divide_it(hooks: Hooks) -> None:
    obj = job(30, annotations={"kilter.dev/topology": "auto"}, template_annotations={"team": "llm"})
    mutated = apply_patch(obj, verdict(hooks, "/mutate", admission_review(obj)))
    notes = mutated["spec"]["template"]["metadata"]["annotations"]
    assert notes["team"] == "llm"  # the user's own annotation is kept
    assert notes["kueue.x-k8s.io/podset-slice-required-topology"] == CLIQUE
    # 30 pods of 4 GPUs, racks of 17 and 18 healthy trays: two slices of 15 (30 in one would not fit).
    assert notes["kueue.x-k8s.io/podset-slice-size"] == "15"
    assert notes["kueue.x-k8s.io/podset-preferred-topology"] == "fabric.topograph.run/tier-1"


def test_what_the_user_set_is_never_overwritten_and_no_opt_in_means_no_change(hooks: Hooks) -> None:
    own = job(4, annotations={"kilter.dev/topology": "auto"}, template_annotations={REQUIRED: "kubernetes.io/hostname"})
    assert "patch" not in verdict(hooks, "/mutate", admission_review(own))
    assert "patch" not in verdict(hooks, "/mutate", admission_review(job(4)))
    off = job(4, annotations={"kilter.dev/topology": "off"}, queue="auto-team")
    assert "patch" not in verdict(hooks, "/mutate", admission_review(off))


def test_a_cluster_queue_policy_opts_its_jobs_in(hooks: Hooks) -> None:
    obj = job(4, queue="auto-team")
    mutated = apply_patch(obj, verdict(hooks, "/mutate", admission_review(obj)))
    assert mutated["spec"]["template"]["metadata"]["annotations"] == {REQUIRED: CLIQUE}


def test_a_jobset_gets_annotations_on_its_gpu_replicated_job_only(hooks: Hooks) -> None:
    def replicated(name: str, gpus: int) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
        pod = {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}}
        return {
            "name": name,
            "replicas": 1,
            "template": {"spec": {"parallelism": 4, "completions": 4, "template": pod}},
        }

    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "pretrain", "namespace": "ml", "annotations": {"kilter.dev/topology": "auto"}},
        "spec": {"replicatedJobs": [replicated("driver", 0), replicated("trainer", 4)]},
    }
    response = verdict(hooks, "/mutate", admission_review(obj))
    ops = json.loads(base64.b64decode(response["patch"]))
    assert [op["path"] for op in ops] == ["/spec/replicatedJobs/1/template/spec/template/metadata"]
    mutated = apply_patch(obj, response)
    trainer = mutated["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    assert trainer["metadata"]["annotations"] == {REQUIRED: CLIQUE}
    assert "metadata" not in mutated["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def test_a_review_above_the_size_limit_is_refused_with_413(hooks: Hooks) -> None:
    status, data = hooks.post("/validate", b" " * (MAX_REVIEW_BYTES + 1))
    assert status == 413 and b"above" in data
    assert verdict(hooks, "/validate", admission_review(job(1)))["allowed"] is True


def test_answers_remembered_per_job_shape_follow_the_state(hooks: Hooks) -> None:
    assert verdict(hooks, "/validate", admission_review(job(4, queue="team")))["allowed"] is False
    assert verdict(hooks, "/validate", admission_review(job(4, queue="team"), uid="second"))["allowed"] is False
    bigger = [*cluster_objects(), cq("small", gpus=64), local_queue("team", "small")]
    hooks.replace(bigger)  # the queue grew: the same shape is judged again
    assert verdict(hooks, "/validate", admission_review(job(4, queue="team"), uid="third"))["allowed"] is True
