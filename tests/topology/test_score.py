"""Scoring by node name, from a list or from the raw JSON the extender receives."""

from __future__ import annotations

import pytest

from kilter.model.errors import InputError
from kilter.topology.fleet import build_fleet
from kilter.topology.score import score_pod, score_pod_json
from tests.topology.builders import pod, rack


def test_names_from_a_list_and_from_json_bytes_score_alike() -> None:
    fleet = build_fleet(rack("r1", 3) + rack("r2", 2), [pod("p", "r2-t00", 4)])
    names = ["r1-t00", "r2-t01", "nope", "r2-t00"]
    scores, idx = score_pod(fleet, names, gpus=4, planned=[fleet.node_index["r1-t00"]])
    assert scores.tolist() == [10, 1 + 6 * 4 // 8 + 1, -1, 0]
    planned = [fleet.node_index["r1-t00"]]
    from_json, idx2 = score_pod_json(fleet, b'["r1-t00", "r2-t01", "nope", "r2-t00"]', gpus=4, planned=planned)
    assert from_json.tolist() == scores.tolist() and idx2.tolist() == idx.tolist()


def test_escaped_json_names_fall_back_to_the_decoder() -> None:
    fleet = build_fleet(rack("r1", 1))
    scores, _ = score_pod_json(fleet, b'["r1-t0\\u0030"]', gpus=4)
    assert scores.tolist() == [1]


@pytest.mark.parametrize("data", [b"not json", b'{"a": 1}', b'["a", 3]'])
def test_malformed_node_names_are_input_errors(data: bytes) -> None:
    with pytest.raises(InputError, match="NodeNames"):
        score_pod_json(build_fleet(rack("r1", 1)), data, gpus=4)
