"""Every supported job kind yields the pod sets Kueue would build; TAS annotations validate like Kueue's webhooks."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.model.errors import InputError
from kilter.model.jobs import read_job

GPU = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}


def template(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"annotations": annotations or {}}, "spec": GPU}


def shape(obj: dict[str, Any]) -> list[list[tuple[str, int]]]:
    return [[(ps.name, ps.count) for ps in g] for g in read_job(obj).gangs]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"parallelism": 8, "completions": 16, "template": template()},
            },
            [[("main", 8)]],
            id="Job runs parallelism pods",
        ),
        pytest.param(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"parallelism": 8, "completions": 3, "template": template()},
            },
            [[("main", 3)]],
            id="Job with fewer completions than parallelism",
        ),
        pytest.param(
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "js"},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "driver",
                            "replicas": 1,
                            "template": {"spec": {"parallelism": 1, "template": template()}},
                        },
                        {
                            "name": "workers",
                            "replicas": 3,
                            "template": {"spec": {"parallelism": 4, "template": template()}},
                        },
                    ]
                },
            },
            [[("driver", 1), ("workers", 12)]],
            id="JobSet multiplies replicas by parallelism",
        ),
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "p"},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Worker": {"replicas": 7, "template": template()},
                        "Master": {"replicas": 1, "template": template()},
                    }
                },
            },
            [[("master", 1), ("worker", 7)]],
            id="PyTorchJob master first",
        ),
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "metadata": {"name": "m"},
                "spec": {
                    "mpiReplicaSpecs": {
                        "Launcher": {"template": template()},
                        "Worker": {"replicas": 2, "template": template()},
                    }
                },
            },
            [[("launcher", 1), ("worker", 2)]],
            id="MPIJob launcher defaults to one",
        ),
        pytest.param(
            {
                "apiVersion": "leaderworkerset.x-k8s.io/v1",
                "kind": "LeaderWorkerSet",
                "metadata": {"name": "l"},
                "spec": {"replicas": 2, "leaderWorkerTemplate": {"size": 3, "workerTemplate": template()}},
            },
            [[("leader-0", 1), ("workers-0", 2)], [("leader-1", 1), ("workers-1", 2)]],
            id="LWS is one gang per group",
        ),
        pytest.param(
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayJob",
                "metadata": {"name": "r"},
                "spec": {
                    "rayClusterSpec": {
                        "headGroupSpec": {"template": template()},
                        "workerGroupSpecs": [
                            {"groupName": "gpu", "replicas": 2, "numOfHosts": 2, "template": template()}
                        ],
                    }
                },
            },
            [[("head", 1), ("gpu", 4)]],
            id="RayJob counts replicas times hosts",
        ),
        pytest.param(
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "v"},
                "spec": {"tasks": [{"name": "worker", "replicas": 5, "template": template()}]},
            },
            [[("worker", 5)]],
            id="Volcano Job tasks",
        ),
        pytest.param(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {"name": "w"},
                "spec": {
                    "podSets": [
                        {
                            "name": "main",
                            "count": 6,
                            "template": template(),
                            "topologyRequest": {"required": "nvidia.com/gpu.clique"},
                        }
                    ]
                },
            },
            [[("main", 6)]],
            id="Kueue Workload",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": GPU},
            [[("main", 1)]],
            id="bare Pod",
        ),
    ],
)
def test_job_kinds_map_to_pod_sets(obj: dict[str, Any], expected: list[list[tuple[str, int]]]) -> None:
    assert shape(obj) == expected


def job(annotations: dict[str, str], parallelism: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": parallelism, "template": template(annotations)},
    }


def test_tas_annotations_become_the_topology_request() -> None:
    ps = read_job(
        job(
            {
                "kueue.x-k8s.io/podset-preferred-topology": "fabric.topograph.run/tier-1",
                "kueue.x-k8s.io/podset-slice-required-topology": "nvidia.com/gpu.clique",
                "kueue.x-k8s.io/podset-slice-size": "4",
            }
        )
    ).gangs[0][0]
    assert ps.topology.preferred == "fabric.topograph.run/tier-1"
    assert (ps.topology.slice_level, ps.topology.slice_size) == ("nvidia.com/gpu.clique", 4)


def test_jobset_slice_size_defaults_to_one_job() -> None:
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 6,
                            "template": template(
                                {"kueue.x-k8s.io/podset-slice-required-topology": "nvidia.com/gpu.clique"}
                            ),
                        }
                    },
                }
            ]
        },
    }
    assert read_job(obj).gangs[0][0].topology.slice_size == 6


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {"kueue.x-k8s.io/podset-required-topology": "a", "kueue.x-k8s.io/podset-preferred-topology": "b"},
            "mutually exclusive",
            id="required and preferred",
        ),
        pytest.param({"kueue.x-k8s.io/podset-slice-required-topology": "a"}, "needs", id="slice level without size"),
        pytest.param({"kueue.x-k8s.io/podset-slice-size": "2"}, "needs", id="slice size without level"),
        pytest.param(
            {"kueue.x-k8s.io/podset-slice-required-topology": "a", "kueue.x-k8s.io/podset-slice-size": "3"},
            "evenly divide",
            id="slice size that does not divide 8",
        ),
        pytest.param(
            {"kueue.x-k8s.io/podset-slice-required-topology": "a", "kueue.x-k8s.io/podset-slice-size": "x"},
            "integer",
            id="slice size not a number",
        ),
        pytest.param(
            {"kueue.x-k8s.io/podset-unconstrained-topology": "maybe"},
            "true or false",
            id="unconstrained not a bool",
        ),
        pytest.param(
            {"kueue.x-k8s.io/podset-slice-required-topology-constraints": "[{"},
            "not JSON",
            id="constraints not JSON",
        ),
    ],
)
def test_invalid_tas_annotations_are_refused_with_the_reason(annotations: dict[str, str], message: str) -> None:
    with pytest.raises(InputError, match=message) as err:
        read_job(job(annotations))
    assert err.value.path.startswith("$.spec.template.metadata.annotations")


def test_a_single_multi_layer_constraint_is_a_slice() -> None:
    ps = read_job(
        job(
            {
                "kueue.x-k8s.io/podset-slice-required-topology-constraints": (
                    '[{"topology": "nvidia.com/gpu.clique", "size": 4}]'
                )
            }
        )
    ).gangs[0][0]
    assert (ps.topology.slice_level, ps.topology.slice_size) == ("nvidia.com/gpu.clique", 4)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param({"apiVersion": "apps/v1", "kind": "Deployment"}, "unsupported kind", id="unknown kind"),
        pytest.param({"kind": "Job"}, "apiVersion and kind", id="no apiVersion"),
        pytest.param(["not", "an", "object"], "mapping", id="a list"),
        pytest.param(
            {"apiVersion": "batch/v1", "kind": "Job", "spec": {"parallelism": "8", "template": template()}},
            "parallelism must be int",
            id="parallelism as a string",
        ),
        pytest.param({"apiVersion": "batch/v1", "kind": "Job", "spec": {}}, "missing pod template", id="no template"),
    ],
)
def test_malformed_jobs_are_input_errors(obj: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_job(obj)
