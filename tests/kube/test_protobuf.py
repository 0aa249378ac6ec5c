"""Pods and Nodes listed as Kubernetes protobuf become exactly the views their JSON gives."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import coldstart as cs
from kilter.kube import protobuf
from kilter.model.core_v1 import Node, Pod
from tests.kube_protobuf import encode, envelope

Json = dict[str, Any]


def pb_list(kind: str, items: list[Json], *, rv: str = "7", token: str = "") -> bytes:
    meta: Json = {"resourceVersion": rv, **({"continue": token} if token else {})}
    return envelope(encode({"metadata": meta, "items": items}, f"{kind}List"), "v1", f"{kind}List")


def json_views(item: type, items: list[Json]) -> list[Any]:
    return [msgspec.json.decode(msgspec.json.encode(obj), type=item) for obj in items]


def pb_views(item: type, items: list[Json]) -> list[Any]:
    kind = item.__name__
    page = protobuf.decode_page(protobuf.Decoder(), item, pb_list(kind, items))
    assert page.skipped == []
    return page.items


@pytest.fixture(scope="module")
def realistic() -> tuple[list[Json], list[Json]]:
    """Pods and Nodes as a large GPU cluster has them (managedFields, probes, volumes, images, conditions)."""
    pods, nodes = cs.sample(pending=3)
    return [*pods[:-3:10], *pods[-3:]], nodes[:400]


def test_realistic_pods_and_nodes_decode_as_from_json(realistic: tuple[list[Json], list[Json]]) -> None:
    pods, nodes = realistic
    assert pb_views(Pod, pods) == json_views(Pod, pods)
    assert pb_views(Node, nodes) == json_views(Node, nodes)


def test_a_page_names_its_version_and_continuation() -> None:
    page = protobuf.decode_page(protobuf.Decoder(), Pod, pb_list("Pod", [], rv="12", token="abc"))
    assert (page.items, page.resource_version, page.continue_) == ([], "12", "abc")


def test_a_list_of_another_kind_is_refused() -> None:
    with pytest.raises(protobuf.ProtobufError, match="expected a PodList, the server sent a NodeList"):
        protobuf.decode_page(protobuf.Decoder(), Pod, pb_list("Node", []))


def test_an_unreadable_pod_is_skipped_and_named() -> None:
    good = encode({"metadata": {"name": "a"}}, "Pod")
    bad = b"\x0a\x02\x08\x01"  # metadata whose field 1 (name) is a varint
    body = encode({"metadata": {"resourceVersion": "3"}}, "PodList") + b"\x12" + bytes([len(bad)]) + bad
    body += b"\x12" + bytes([len(good)]) + good
    page = protobuf.decode_page(protobuf.Decoder(), Pod, envelope(body, "v1", "PodList"))
    assert [p.metadata.name for p in page.items] == ["a"]
    assert len(page.skipped) == 1 and page.skipped[0].startswith("item 0:")


def test_a_status_refusal_is_read() -> None:
    status = {"status": "Failure", "message": "too old resource version: 1 (2)", "reason": "Expired", "code": 410}
    data = envelope(encode(status, "Status"), "v1", "Status")
    assert protobuf.status_message(data) == "too old resource version: 1 (2)"
    assert protobuf.status_message(b"not protobuf") is None


def test_parts_that_repeat_are_shared(realistic: tuple[list[Json], list[Json]]) -> None:
    views = pb_views(Pod, realistic[0][:300])
    by_tolerations: dict[Any, list[Pod]] = {}
    by_resources: dict[bytes, list[Any]] = {}
    for p in views:
        by_tolerations.setdefault(msgspec.json.encode(p.spec.tolerations), []).append(p)
        for c in p.spec.containers:
            by_resources.setdefault(msgspec.json.encode(c.resources), []).append(c.resources)
    groups = [g for g in by_tolerations.values() if len(g) > 1]
    assert groups and any(len(g) > 1 for g in by_resources.values()), "the sample holds pods of one job"
    for g in groups:
        assert all(p.spec.tolerations is g[0].spec.tolerations for p in g)
    for same in by_resources.values():
        assert all(r is same[0] for r in same)


names = st.text(st.sampled_from("abcxyz-./"), min_size=1, max_size=8)
quantities = st.sampled_from(["1", "4", "500m", "8Gi", "0", "1.5"])
toleration = st.fixed_dictionaries(
    {"key": names},
    optional={
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": names,
        "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]),
        "tolerationSeconds": st.integers(-5, 10**6),
    },
)
requirement = st.fixed_dictionaries(
    {"key": names, "operator": st.sampled_from(["In", "NotIn", "Exists"])},
    optional={"values": st.lists(names, max_size=3)},
)
affinity = st.fixed_dictionaries(
    {},
    optional={
        "nodeAffinity": st.fixed_dictionaries(
            {},
            optional={
                "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
                    {
                        "nodeSelectorTerms": st.lists(
                            st.fixed_dictionaries(
                                {},
                                optional={
                                    "matchExpressions": st.lists(requirement, max_size=2),
                                    "matchFields": st.lists(requirement, max_size=1),
                                },
                            ),
                            max_size=2,
                        )
                    }
                )
            },
        )
    },
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities),
        "limits": st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu", "amd.com/gpu"]), quantities),
    },
)
container = st.fixed_dictionaries({"name": names}, optional={"image": names, "resources": resources})
pod = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": names},
            optional={
                "namespace": names,
                "uid": names,
                "resourceVersion": st.integers(1, 10**9).map(str),
                "creationTimestamp": st.sampled_from(["2025-12-01T08:00:00Z", "1999-12-31T23:59:59Z", None]),
                "labels": st.dictionaries(names, st.text(max_size=6), max_size=4),
                "annotations": st.dictionaries(names, st.text(max_size=20), max_size=3),
            },
        ),
        "spec": st.fixed_dictionaries(
            {"containers": st.lists(container, min_size=1, max_size=3)},
            optional={
                "nodeName": names,
                "schedulerName": names,
                "initContainers": st.lists(container, max_size=2),
                "nodeSelector": st.dictionaries(names, names, max_size=3),
                "affinity": affinity,
                "tolerations": st.lists(toleration, max_size=3),
                "overhead": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2),
                "priority": st.integers(-(2**31), 2**31 - 1),
                "preemptionPolicy": st.sampled_from(["Never", "PreemptLowerPriority"]),
            },
        ),
        "status": st.fixed_dictionaries(
            {},
            optional={
                "phase": st.sampled_from(["Pending", "Running", "Failed"]),
                "startTime": st.sampled_from(["2025-12-01T08:00:05Z", "1999-12-31T23:59:59Z"]),
            },
        ),
    }
)


@settings(max_examples=150, deadline=None)
@given(st.lists(pod, max_size=4))
def test_any_pod_decodes_as_from_json(pods: list[Json]) -> None:
    assert pb_views(Pod, pods) == json_views(Pod, pods)


node = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": names}, optional={"labels": st.dictionaries(names, names, max_size=4)}
        )
    },
    optional={
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "unschedulable": st.booleans(),
                "taints": st.lists(
                    st.fixed_dictionaries(
                        {"key": names, "effect": st.sampled_from(["NoSchedule", "NoExecute"])},
                        optional={"value": names},
                    ),
                    max_size=3,
                ),
            },
        ),
        "status": st.fixed_dictionaries(
            {},
            optional={
                "capacity": st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu", "pods"]), quantities),
                "allocatable": st.dictionaries(st.sampled_from(["cpu", "nvidia.com/gpu"]), quantities),
                "conditions": st.lists(
                    st.fixed_dictionaries(
                        {
                            "type": st.sampled_from(["Ready", "MemoryPressure"]),
                            "status": st.sampled_from(["True", "False"]),
                        }
                    ),
                    max_size=2,
                ),
            },
        ),
    },
)


@settings(max_examples=100, deadline=None)
@given(st.lists(node, max_size=4))
def test_any_node_decodes_as_from_json(nodes: list[Json]) -> None:
    assert pb_views(Node, nodes) == json_views(Node, nodes)
