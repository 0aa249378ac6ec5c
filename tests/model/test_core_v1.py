"""Pod views and the kubelet's rule for a pod's effective device request."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.model import codec
from kilter.model.core_v1 import Node, PodSpec, pod_request
from kilter.model.errors import InputError


def spec(**fields: Any) -> PodSpec:
    return codec.convert(fields, PodSpec)


def test_requests_sum_over_containers_and_limits_stand_in_for_missing_requests() -> None:
    s = spec(
        containers=[
            {
                "name": "a",
                "resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}},
            },
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": 2}}},
            {"name": "c"},
        ]
    )
    assert pod_request(s, "nvidia.com/gpu") == 4
    assert pod_request(s, "amd.com/gpu") == 0


def test_an_init_container_asking_more_than_the_app_containers_sets_the_request() -> None:
    s = spec(
        initContainers=[{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
    )
    assert pod_request(s, "nvidia.com/gpu") == 8


def test_fractional_gpus_are_rejected_with_the_container_path() -> None:
    s = spec(containers=[{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}])
    with pytest.raises(InputError) as err:
        pod_request(s, "nvidia.com/gpu")
    assert err.value.path == "$.spec.containers[0].resources"


def test_wrong_types_become_input_errors_with_a_json_path() -> None:
    with pytest.raises(InputError) as err:
        codec.convert({"metadata": {"name": "n", "labels": {"a": 1}}}, Node)
    assert err.value.path == "$.metadata.labels[...]"


def test_unknown_fields_of_upstream_objects_are_ignored() -> None:
    node = codec.convert({"metadata": {"name": "n", "managedFields": [{}]}, "spec": {"podCIDR": "10.0.0.0/24"}}, Node)
    assert node.metadata.name == "n"
