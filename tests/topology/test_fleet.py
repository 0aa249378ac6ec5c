"""Building the fleet: which nodes are usable, how domains form, what pods book."""

from __future__ import annotations

import random

import pytest

from kilter.model.errors import InputError
from kilter.topology.fleet import build_fleet
from tests.topology.builders import CLIQUE, node, pod, rack


def test_unavailable_nodes_hold_no_idle_gpus() -> None:
    nodes = [
        node("ok", labels={CLIQUE: "r1"}),
        node("cordoned", labels={CLIQUE: "r1"}, cordoned=True),
        node("notready", labels={CLIQUE: "r1"}, ready=False),
        node(
            "unreachable",
            labels={CLIQUE: "r1"},
            taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
        ),
        node(
            "dedicated",
            labels={CLIQUE: "r1"},
            taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        ),
        node(
            "mesh-failed",
            product="AMD_Instinct_MI300X",
            gpus=8,
            resource="amd.com/gpu",
            labels={"amd.com/gpu-mesh-validation": "failed"},
        ),
    ]
    fleet = build_fleet(nodes)
    usable = dict(zip(fleet.node_names, fleet.bitmap.node_usable_flags.tolist(), strict=True))
    assert usable == {
        "ok": 1,
        "cordoned": 0,
        "notready": 0,
        "unreachable": 0,
        "dedicated": 1,
        "mesh-failed": 0,
    }


def test_a_failed_tray_shrinks_its_domain() -> None:
    nodes = [*rack("r1", 17), node("r1-t17", labels={CLIQUE: "r1"}, ready=False)]
    fleet = build_fleet(nodes)
    assert fleet.domain_ids == ["r1"]
    assert fleet.bitmap.capacity(4).tolist() == [17]


def test_a_tray_that_lost_its_clique_label_is_detached() -> None:
    fleet = build_fleet([*rack("r1", 3), node("lost")])
    assert fleet.domain_ids == ["lost", "r1"]
    assert fleet.bitmap.domain_flags.tolist() == [1, 0]
    assert fleet.summary()["GB200-NVL72"] == {
        "nodes": 4,
        "domains": 1,
        "detachedNodes": 1,
        "gpus": 16,
        "usableGpus": 16,
        "idleGpus": 16,
        "whollyIdleDomains": 1,
    }


def test_eight_gpu_nodes_are_their_own_domain() -> None:
    fleet = build_fleet(
        [
            node("h-b", product="NVIDIA-H100-80GB-HBM3", gpus=8),
            node("h-a", product="NVIDIA-H100-80GB-HBM3", gpus=8),
        ]
    )
    assert fleet.domain_ids == ["h-a", "h-b"]
    assert fleet.platforms[0].name == "HGX-H100-8"


def test_running_pods_book_gpus_and_finished_or_foreign_pods_do_not() -> None:
    nodes = rack("r1", 2)
    pods = [
        pod("a", "r1-t00", 3),
        pod("done", "r1-t00", 1, phase="Succeeded"),
        pod("failed", "r1-t01", 4, phase="Failed"),
        pod("elsewhere", "cpu-node", 4),
        pod("amd", "r1-t01", 2, resource="amd.com/gpu"),
    ]
    fleet = build_fleet(nodes, pods)
    assert fleet.bitmap.node_used_gpus.tolist() == [3, 0]


def test_pods_holding_more_gpus_than_exist_are_clamped_with_a_warning() -> None:
    fleet = build_fleet(rack("r1", 1), [pod("a", "r1-t00", 3), pod("b", "r1-t00", 3)])
    assert fleet.bitmap.node_used_gpus.tolist() == [4]
    assert any("hold 6 GPUs of 4" in w for w in fleet.warnings)


def test_nodes_without_gpus_are_left_out_and_unknown_platform_labels_warn() -> None:
    cpu = node("cpu", gpus=0)
    odd = node("odd", labels={"kilter.dev/platform": "TPU-v7"})
    fleet = build_fleet([cpu, odd, *rack("r1", 1)])
    assert fleet.node_names == ["r1-t00"]
    assert any("TPU-v7" in w for w in fleet.warnings)


def test_the_same_node_twice_is_an_input_error() -> None:
    with pytest.raises(InputError, match="twice"):
        build_fleet([node("x", labels={CLIQUE: "r"}), node("x", labels={CLIQUE: "r"})])


def test_domains_and_nodes_are_ordered_by_name_whatever_the_input_order() -> None:
    nodes = rack("r2", 3, block="b1") + rack("r1", 3, block="b0") + rack("r3", 2, block="b1")
    shuffled = nodes[:]
    random.Random(1).shuffle(shuffled)
    a, b = build_fleet(nodes), build_fleet(shuffled)
    assert a.node_names == b.node_names == sorted(n.metadata.name for n in nodes)
    assert a.domain_ids == ["r1", "r2", "r3"]
    assert a.bitmap.domain_groups.tolist() == b.bitmap.domain_groups.tolist() == [[0, 1, 1]]
    assert a.group_ids == [["b0", "b1"]]


def test_the_domain_label_key_is_the_one_the_platforms_nodes_carry() -> None:
    h100 = node("h", product="NVIDIA-H100-80GB-HBM3", gpus=8, labels={CLIQUE: "x"})
    fleet = build_fleet([node("lone"), *rack("r1", trays=2), h100])
    assert fleet.domain_label_key(fleet.platform_of_node(fleet.node_index["lone"])) == CLIQUE
    assert fleet.domain_label_key(fleet.platform_of_node(fleet.node_index["h"])) is None  # one node, one domain
    unlabelled = build_fleet([node("a"), node("b")])
    assert unlabelled.domain_label_key(unlabelled.platforms[0]) is None
