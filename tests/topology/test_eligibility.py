"""Eligibility follows Kubernetes' own rules for tolerations and node affinity."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.model import codec
from kilter.model.core_v1 import PodSpec, Toleration
from kilter.model.errors import InputError
from kilter.topology.eligibility import node_mask, tolerates
from kilter.topology.fleet import build_fleet
from tests.topology.builders import node


def tol(**fields: Any) -> Toleration:
    return codec.convert(fields, Toleration)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        pytest.param(tol(operator="Exists"), ("k", "v", "NoSchedule"), True, id="empty key + Exists tolerates all"),
        pytest.param(tol(key="k", operator="Exists"), ("k", "v", "NoExecute"), True, id="key + Exists, any effect"),
        pytest.param(tol(key="k", value="v", effect="NoSchedule"), ("k", "v", "NoSchedule"), True, id="Equal match"),
        pytest.param(tol(key="k", value="w"), ("k", "v", "NoSchedule"), False, id="Equal, other value"),
        pytest.param(
            tol(key="k", operator="Exists", effect="NoExecute"),
            ("k", "v", "NoSchedule"),
            False,
            id="other effect",
        ),
    ],
)
def test_tolerations_match_taints_like_the_scheduler(
    toleration: Toleration, taint: tuple[str, str, str], expected: bool
) -> None:
    assert tolerates([toleration], taint) is expected


def fleet_of_three() -> Any:
    return build_fleet(
        [
            node("a", product="NVIDIA-H100", gpus=8, labels={"pool": "x", "gen": "3"}),
            node("b", product="NVIDIA-H100", gpus=8, labels={"pool": "y", "gen": "5"}),
            node("c", product="NVIDIA-H100", gpus=8, labels={"gen": "9"}),
        ]
    )


def affinity(*exprs: dict[str, Any]) -> PodSpec:
    return codec.convert(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]
                    }
                }
            }
        },
        PodSpec,
    )


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ({"key": "pool", "operator": "In", "values": ["x", "z"]}, [True, False, False]),
        ({"key": "pool", "operator": "NotIn", "values": ["x"]}, [False, True, True]),
        ({"key": "pool", "operator": "Exists"}, [True, True, False]),
        ({"key": "pool", "operator": "DoesNotExist"}, [False, False, True]),
        ({"key": "gen", "operator": "Gt", "values": ["4"]}, [False, True, True]),
        ({"key": "gen", "operator": "Lt", "values": ["4"]}, [True, False, False]),
    ],
)
def test_required_node_affinity_operators(expr: dict[str, Any], expected: list[bool]) -> None:
    mask = node_mask(fleet_of_three(), affinity(expr))
    assert mask is not None and mask.tolist() == expected


def test_no_constraints_means_no_mask() -> None:
    assert node_mask(fleet_of_three(), PodSpec()) is None


def test_an_unknown_operator_is_an_input_error() -> None:
    with pytest.raises(InputError, match="operator"):
        node_mask(fleet_of_three(), affinity({"key": "pool", "operator": "Near", "values": ["x"]}))
