"""Dominant resource share: cases from Kueue's TestDominantResourceShare, the compare rules, monotonicity."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.quota.drs import DRS, compare, dominant_resource_share
from tests.quota.builders import cohort, cq, tree

CPU = ("default", "cpu")
GPU = ("default", "example.com/gpu")


def lending_pair(cq_quota: dict, lender_quota: dict, *, weight: str = "1", lender_weight: str = "1"):  # type: ignore[no-untyped-def,type-arg]
    return [
        cq("cq", cq_quota, cohort="test-cohort", weight=weight),
        cq("lending-cq", lender_quota, cohort="test-cohort", weight=lender_weight),
    ]


@pytest.mark.parametrize(
    ("cqs", "usage", "wl_request", "rounded", "dominant"),
    [
        pytest.param(
            lending_pair({CPU: 2, GPU: 5}, {CPU: 8, GPU: 5}), {CPU: 1000, GPU: 2}, {}, 0, "", id="usage below nominal"
        ),
        pytest.param(
            lending_pair({CPU: 2, GPU: 5}, {CPU: 8, GPU: 5}),
            {CPU: 3000, GPU: 7},
            {},
            200,
            "example.com/gpu",
            id="usage above nominal: (7-5)*1000/10",
        ),
        pytest.param(
            lending_pair({GPU: 500}, {GPU: 1000}, lender_weight="300"),
            {GPU: 501},
            {},
            1,
            "example.com/gpu",
            id="slightly above nominal: ceil(1000/1500)",
        ),
        pytest.param(
            lending_pair({GPU: 500}, {GPU: 1000}, weight="300", lender_weight="300"),
            {GPU: 800},
            {},
            1,
            "example.com/gpu",
            id="way above nominal, weight 300: ceil(200/300)",
        ),
        pytest.param(
            lending_pair({CPU: 2, GPU: 5}, {CPU: 8, GPU: 5}),
            {CPU: 3000, GPU: 3},
            {},
            100,
            "cpu",
            id="one resource above nominal: (3-2)*1000/10",
        ),
        pytest.param(
            lending_pair({CPU: 2, GPU: 5}, {CPU: 8, GPU: 5}),
            {CPU: 1000, GPU: 2},
            {CPU: 4000, GPU: 4},
            300,
            "cpu",
            id="with the workload: (1+4-2)*1000/10",
        ),
        pytest.param(
            lending_pair({CPU: 2, GPU: (2, None, 0)}, {CPU: 8, GPU: (64, None, 0)}),
            {CPU: 1000, GPU: 1},
            {CPU: 4000, GPU: 4},
            300,
            "cpu",
            id="a resource with zero lendable is skipped",
        ),
        pytest.param(
            lending_pair({GPU: (2, None, 0)}, {GPU: (64, None, 0)}, weight="0"),
            {GPU: 3},
            {},
            2**63 - 1,
            "",
            id="zero weight borrowing only what nobody lends",
        ),
    ],
)
def test_kueue_dominant_resource_share_cases(cqs, usage, wl_request, rounded, dominant) -> None:  # type: ignore[no-untyped-def]
    t = tree(cqs, [cohort("test-cohort")], usage={"cq": usage})
    drs = dominant_resource_share(t.cluster_queues["cq"], wl_request)
    assert drs.rounded_weighted_share == rounded
    assert drs.dominant_resource == dominant
    assert dominant_resource_share(t.cluster_queues["lending-cq"]).rounded_weighted_share == 0
    assert dominant_resource_share(t.cohorts["test-cohort"]).borrowing is False


def test_multiple_flavors_share_one_lendable_denominator() -> None:
    # lendable cpu = on-demand 20 + spot 80 + default 100 = 200; borrowed (15 + 10 - 20) on-demand only.
    t = tree(
        [
            cq("cq", {("on-demand", "cpu"): 20, ("spot", "cpu"): 80}, cohort="c"),
            cq("lending-cq", {CPU: 100}, cohort="c"),
        ],
        usage={"cq": {("on-demand", "cpu"): 15000, ("spot", "cpu"): 5000}},
    )
    drs = dominant_resource_share(t.cluster_queues["cq"], {("on-demand", "cpu"): 10000})
    assert drs.ratio == 25.0 and drs.rounded_weighted_share == 25
    assert drs.borrowed_frs == (("on-demand", "cpu"),)


def test_a_cohort_borrowing_from_its_parent_has_a_share() -> None:
    t = tree(
        [cq("a", {GPU: 4}, cohort="left"), cq("b", {GPU: 12}, cohort="right")],
        [cohort("root"), cohort("left", parent="root"), cohort("right", parent="root")],
        usage={"a": {GPU: 10}},
    )
    # left lends its 4 and uses 10: borrows 6 of lendable potential(root) = 16.
    drs = dominant_resource_share(t.cohorts["left"])
    assert drs.borrowing and drs.ratio == pytest.approx(6 * 1000 / 16)
    assert dominant_resource_share(t.cohorts["root"]) == DRS(1.0)


def test_ties_pick_the_alphabetically_first_resource() -> None:
    t = tree(lending_pair({CPU: 1, GPU: 1}, {CPU: 1, GPU: 1}), usage={"cq": {CPU: 2000, GPU: 2}})
    assert dominant_resource_share(t.cluster_queues["cq"]).dominant_resource == "cpu"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (DRS(1.0, 10.0, "cpu", True), DRS(1.0, 20.0, "cpu", True), -1),
        (DRS(0.0, 10.0, "cpu", True), DRS(1.0, 999.0, "cpu", True), 1),
        (DRS(0.0, 10.0, "cpu", True), DRS(0.0, 20.0, "cpu", True), -1),
        (DRS(0.0, 0.0, "", True), DRS(5.0, 0.0, "", False), 1),
        (DRS(2.0, 40.0, "cpu", True), DRS(1.0, 20.0, "cpu", True), 0),
    ],
)
def test_compare_orders_zero_weight_borrowers_last_and_among_themselves_unweighted(
    a: DRS, b: DRS, expected: int
) -> None:
    assert compare(a, b) == expected
    assert compare(b, a) == -expected


def test_zero_weight_without_borrowing_is_share_zero() -> None:
    assert DRS(0.0).weighted_share == 0.0 and DRS(0.0).rounded_weighted_share == 0
    assert math.isinf(DRS(0.0, 5.0, "cpu", True).weighted_share)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.sampled_from(["0", "0.5", "1", "3"]))
def test_shares_grow_with_usage(u1: int, u2: int, weight: str) -> None:
    low, high = sorted((u1, u2))
    cqs = lending_pair({GPU: 8}, {GPU: 24}, weight=weight)
    a = dominant_resource_share(tree(cqs, usage={"cq": {GPU: low}}).cluster_queues["cq"])
    b = dominant_resource_share(tree(cqs, usage={"cq": {GPU: high}}).cluster_queues["cq"])
    assert compare(a, b) <= 0
