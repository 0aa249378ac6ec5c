"""Node scoring for one pod: packing order, plan membership, name lookup; native == twin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter._native import domains, gang
from kilter._native.twin import domains as twin_domains
from kilter._native.twin import gang as twin_gang
from tests.conftest import Arrays, i32


def scores(arrays: Arrays, nodes: list[int], gpus: int, planned: list[int] = ()) -> list[int]:  # type: ignore[assignment]
    out = np.zeros(len(nodes), dtype=np.int8)
    gang.score_nodes(domains.FleetBitmap(*arrays.args()), i32(nodes), gpus, i32(sorted(planned)), out)
    ref = np.zeros(len(nodes), dtype=np.int8)
    twin_gang.score_nodes(twin_domains.FleetBitmap(*arrays.args()), i32(nodes), gpus, i32(sorted(planned)), ref)
    assert out.tolist() == ref.tolist()
    return out.tolist()


def test_busier_domains_score_higher_and_idle_domains_lowest() -> None:
    # Domain 0 is idle, domain 1 is half busy, domain 2 is 7/8 busy.
    arrays = Arrays().domain([4] * 4).domain([4] * 4, used=[4, 4, 0, 0]).domain([4] * 4, used=[4, 4, 4, 2])
    s = scores(arrays, [0, 6, 11], 1)
    # idle: 1 + 0; half: 1 + 6*8//16 = 4, +1 busy domain; 7/8: 1 + 6*14//16 = 6, +1 partly used node, +1 busy domain.
    assert s == [1, 5, 8]


def test_planned_nodes_score_ten_and_full_nodes_zero() -> None:
    arrays = Arrays().domain([4, 4, 4], used=[4, 0, 0])
    # Node 1: 1 + 6*4//12 = 3, +1 because its domain is not wholly idle.
    assert scores(arrays, [0, 1, 2], 4, planned=[2]) == [0, 4, 10]


def test_unknown_nodes_score_minus_one_and_unusable_ones_zero() -> None:
    arrays = Arrays().domain([4, 4], usable=[1, 0])
    assert scores(arrays, [-1, 1, 0], 1) == [-1, 0, 1]


def test_one_node_domains_pack_by_block() -> None:
    # Three 8-GPU nodes, each its own domain: two share a busy block, one is alone in an idle block.
    arrays = Arrays().domain([8], used=[8], groups=[0]).domain([8], groups=[0]).domain([8], groups=[1])
    assert scores(arrays, [1, 2], 8) == [1 + 6 * 8 // 16, 1]


def test_detached_nodes_are_the_last_resort() -> None:
    arrays = Arrays().domain([4], used=[2], detached=True).domain([4, 4], used=[0, 0])
    assert scores(arrays, [0, 1], 1) == [1, 1]


def test_planned_list_must_be_sorted() -> None:
    fl = domains.FleetBitmap(*Arrays().domain([4, 4]).args())
    with pytest.raises(ValueError, match="sorted"):
        gang.score_nodes(fl, i32([0]), 1, i32([1, 0]), np.zeros(1, dtype=np.int8))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_scores_agree_with_the_twin_and_stay_on_the_extender_scale(data: st.DataObject) -> None:
    arrays = Arrays()
    for _ in range(data.draw(st.integers(1, 6))):
        n = data.draw(st.integers(1, 10))
        gpus = [data.draw(st.integers(1, 8)) for _ in range(n)]
        arrays.domain(
            gpus,
            used=[data.draw(st.integers(0, g)) for g in gpus],
            usable=[data.draw(st.integers(0, 1)) for _ in gpus],
            tray_bits=8,
            detached=n == 1 and data.draw(st.booleans()),
            groups=[data.draw(st.integers(-1, 2))],
        )
    total = len(arrays.node_domain)
    nodes = data.draw(st.lists(st.integers(-1, total - 1), max_size=30))
    planned = sorted(set(data.draw(st.lists(st.integers(0, total - 1), max_size=5))))
    s = scores(arrays, nodes, data.draw(st.integers(0, 8)), planned)
    assert all(-1 <= x <= gang.MAX_SCORE for x in s)
    assert all((x == -1) == (n == -1) for x, n in zip(s, nodes, strict=True))
