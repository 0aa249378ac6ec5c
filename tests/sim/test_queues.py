"""Queues of a simulation: the default queue, flavors found by their nodeLabels, tenants dealt to ClusterQueues."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kilter.model.errors import InputError, KilterError
from kilter.sim import fleetspec
from kilter.sim.queues import DEFAULT_QUEUE, map_tenants, queue_setup
from kilter.topology.fleet import Fleet

MIXED = {
    "platforms": [
        {"platform": "GB200-NVL72", "domains": 2, "domainsPerBlock": 2},
        {"platform": "MI355X", "nodes": 4},
    ]
}


def mixed() -> Fleet:
    return fleetspec.fleet_from_spec(fleetspec.parse_spec(MIXED, seed=0))


def kueue(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": {"name": name}, "spec": spec}


def test_without_queues_one_queue_holds_every_gpu_of_every_platform() -> None:
    setup = queue_setup([], mixed(), Counter({"x": 3, "y": 1}))
    node = setup.tree.cluster_queues[DEFAULT_QUEUE]
    # 2 racks x 18 trays x 4 GPUs = 144 GB200 GPUs; 4 nodes x 8 = 32 MI355X GPUs.
    assert node.quotas[("gb200-nvl72", "nvidia.com/gpu")].nominal == 144
    assert node.quotas[("mi355x-8", "amd.com/gpu")].nominal == 32
    assert [p for p, _ in setup.flavors[DEFAULT_QUEUE]] == [0, 1]
    assert setup.queue_of == {"x": DEFAULT_QUEUE, "y": DEFAULT_QUEUE}


def test_a_flavor_stands_for_the_platform_its_node_labels_select() -> None:
    objects = [
        kueue("ResourceFlavor", "amd", {"nodeLabels": {"amd.com/gpu.product-name": "AMD_Instinct_MI355X"}}),
        kueue(
            "ClusterQueue",
            "team",
            {
                "resourceGroups": [
                    {
                        "coveredResources": ["amd.com/gpu"],
                        "flavors": [{"name": "amd", "resources": [{"name": "amd.com/gpu", "nominalQuota": 16}]}],
                    }
                ]
            },
        ),
    ]
    fleet = mixed()
    setup = queue_setup(objects, fleet, Counter({"team": 1}))
    assert [(fleet.platforms[p].name, f) for p, f in setup.flavors["team"]] == [("MI355X-8", "amd")]


def test_tenants_meet_queues_by_name_and_the_rest_are_dealt_out_busiest_first() -> None:
    tenants = Counter({"alpha": 50, "b": 40, "c": 30, "d": 20})
    assert map_tenants(tenants, ["alpha", "q1", "q2"]) == {"alpha": "alpha", "b": "alpha", "c": "q1", "d": "q2"}


def test_a_queue_file_without_a_cluster_queue_or_without_a_usable_flavor_is_refused() -> None:
    with pytest.raises(InputError, match="no ClusterQueue"):
        queue_setup([kueue("Cohort", "co", {})], mixed(), Counter())
    lonely = kueue(
        "ClusterQueue",
        "q",
        {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}],
                }
            ]
        },
    )
    with pytest.raises(InputError, match="no ClusterQueue has a flavor"):
        queue_setup([lonely], mixed(), Counter())


def test_contradictory_quotas_are_refused_with_the_field() -> None:
    bad = kueue(
        "ClusterQueue",
        "q",
        {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "gb200-nvl72", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "-4"}]}
                    ],
                }
            ]
        },
    )
    with pytest.raises(KilterError, match="nominalQuota must be >= 0"):
        queue_setup([bad], mixed(), Counter())
