"""Kueue's resource-tree arithmetic: its own worked examples (resource_test.go, TestAvailable) and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.quota.available import add_usage, available, potential_available, remove_usage
from kilter.quota.tree import QuotaTree
from tests.quota.builders import cohort, cq, tree

RED = ("red", "cpu")
BLUE = ("blue", "cpu")


def cores(n: float) -> int:
    return int(n * 1000)


def avail(t: QuotaTree, name: str, fr: tuple[str, str] = RED) -> tuple[int, int]:
    node = t.cluster_queues[name]
    return max(0, available(node, fr)), potential_available(node, fr)


def test_e1_flat_cohort_respects_lending_and_borrowing_limits() -> None:
    # localQuota: cq3 = 10 - 5 = 5; cohort subtree = 10 + 10 + 10 + (10 - 5) = 35.
    # Usage 20, 10, 6 charges the cohort 20 + 10 + (6 - 5) = 31, leaving 4.
    t = tree(
        [
            cq("cq1", {RED: 10}, cohort="c"),
            cq("cq2", {RED: (10, 2)}, cohort="c"),
            cq("cq3", {RED: (10, None, 5)}, cohort="c"),
        ],
        [cohort("c", {RED: 10})],
        usage={"cq1": {RED: cores(20)}, "cq2": {RED: cores(10)}, "cq3": {RED: cores(6)}},
    )
    assert avail(t, "cq1") == (cores(4), cores(35))
    assert avail(t, "cq2") == (cores(2), cores(12))  # min(4, 10 - 10 + 2); potential min(35, 10 + 2)
    assert avail(t, "cq3") == (cores(4), cores(40))  # 0 + 4; potential 5 + 35


def test_e2_hierarchical_borrowing_limit() -> None:
    t = tree(
        [
            cq("left-cq1", {RED: 10}, cohort="left"),
            cq("left-cq2", {RED: (10, 5)}, cohort="left"),
            cq("right-cq", {RED: 10}, cohort="right"),
        ],
        [cohort("root"), cohort("left", {RED: (10, 5)}, parent="root"), cohort("right", {RED: 10}, parent="root")],
    )
    # left subtree 30, right 20, root 50; potential(left) = min(50, 30 + 5) = 35.
    assert avail(t, "left-cq1") == (cores(35), cores(35))
    assert avail(t, "left-cq2") == (cores(15), cores(15))
    assert avail(t, "right-cq") == (cores(50), cores(50))


def test_e3_hierarchical_lending_limit() -> None:
    t = tree(
        [
            cq("root-cq", {RED: 0}, cohort="root"),
            cq("right-cq", {RED: 0}, cohort="right"),
            cq("left-cq1", {RED: (10, None, 5)}, cohort="left"),
            cq("left-cq2", {RED: 10}, cohort="left"),
        ],
        [cohort("root"), cohort("left", {RED: (0, None, 5)}, parent="root"), cohort("right", parent="root")],
    )
    # left subtree 0 + (10 - 5) + 10 = 15, local(left) = 10, root subtree 5.
    assert avail(t, "left-cq1") == (cores(20), cores(20))
    assert avail(t, "left-cq2") == (cores(15), cores(15))
    assert avail(t, "right-cq") == (cores(5), cores(5))
    assert avail(t, "root-cq") == (cores(5), cores(5))


def test_e4_over_admission_spills_into_the_cohort() -> None:
    t = tree(
        [cq("cq1", {RED: 10}, cohort="c"), cq("cq2", {RED: (10, 0, 0)}, cohort="c")],
        [cohort("c", {RED: 10})],
        usage={"cq1": {RED: cores(31)}},
    )
    assert avail(t, "cq1") == (0, cores(20))
    assert avail(t, "cq2") == (0, cores(10))


def test_e5_without_a_cohort_a_queue_has_exactly_its_nominal() -> None:
    t = tree([cq("cq2", {RED: 5, BLUE: 10})], usage={"cq2": {RED: 2500, BLUE: 1000}})
    assert avail(t, "cq2", RED) == (2500, 5000)
    assert avail(t, "cq2", BLUE) == (9000, 10000)


def test_v1beta1_cohort_field_is_read() -> None:
    t = tree([cq("a", {RED: 1}, cohort="c", v1beta1=True), cq("b", {RED: 2}, cohort="c")])
    assert t.cohorts["c"].subtree == {RED: cores(3)}
    assert not t.cohorts["c"].explicit


@pytest.mark.parametrize(
    ("cqs", "cohorts", "message"),
    [
        pytest.param(
            [cq("a", {RED: (5, None, 6)}, cohort="c")],
            [],
            "lendingLimit exceeds nominalQuota",
            id="lending above nominal",
        ),
        pytest.param([cq("a", {RED: (5, 1)})], [], "need a cohort", id="borrowing limit without a cohort"),
        pytest.param([cq("a", {RED: -1})], [], "must be >= 0", id="negative nominal"),
        pytest.param([cq("a", {RED: "lots"})], [], "malformed quantity", id="not a quantity"),
        pytest.param([], [cohort("x", {RED: (5, 1)})], "need a parent", id="root cohort with a borrowing limit"),
        pytest.param([cq("a", {RED: 1}, weight="-1", cohort="c")], [], "fairSharing.weight", id="negative weight"),
        pytest.param([], [cohort("x", parent="y"), cohort("y", parent="x")], "cohort cycle x -> y -> x", id="cycle"),
        pytest.param(
            [cq("a", {RED: 1}, annotations={"kilter.dev/usage-half-life": "a week"})],
            [],
            "not a duration",
            id="bad half-life",
        ),
    ],
)
def test_contradictory_quotas_are_reported_and_their_nodes_disabled(cqs: list, cohorts: list, message: str) -> None:  # type: ignore[type-arg]
    t = tree(cqs, cohorts)
    assert any(message in str(p) for p in t.problems), [str(p) for p in t.problems]
    assert not all(n.active for n in [*t.cluster_queues.values(), *t.cohorts.values()])


def test_a_cycle_disables_the_queues_below_it() -> None:
    t = tree([cq("a", {RED: 1}, cohort="x")], [cohort("x", parent="y"), cohort("y", parent="x")])
    assert not t.cluster_queues["a"].active


# ---------------------------------------------------------------- properties

amounts = st.integers(0, 20)
maybe = st.none() | st.integers(0, 20)


@st.composite
def trees(draw: st.DrawFn) -> tuple[QuotaTree, list[str]]:
    n_cohorts = draw(st.integers(1, 4))
    cohorts = []
    for i in range(n_cohorts):
        parent = f"co{draw(st.integers(0, i - 1))}" if i and draw(st.booleans()) else ""
        quotas = {RED: (draw(amounts), draw(maybe) if parent else None, draw(maybe) if parent else None)}
        cohorts.append(cohort(f"co{i}", quotas, parent=parent))
    cqs = []
    for j in range(draw(st.integers(1, 6))):
        nominal = draw(amounts)
        ll = draw(maybe)
        cqs.append(
            cq(
                f"cq{j}",
                {RED: (nominal, draw(maybe), None if ll is None else min(ll, nominal))},
                cohort=f"co{draw(st.integers(0, n_cohorts - 1))}",
            )
        )
    t = tree(cqs, cohorts)
    assert not t.problems
    return t, [q.metadata.name for q in cqs]


@settings(max_examples=300, deadline=None)
@given(trees(), st.lists(st.tuples(st.integers(0, 5), st.integers(0, 15)), max_size=12))
def test_incremental_usage_matches_a_full_recompute_and_available_never_exceeds_potential(
    data: tuple[QuotaTree, list[str]], bookings: list[tuple[int, int]]
) -> None:
    t, names = data
    booked: dict[str, int] = {}
    for i, v in bookings:
        name = names[i % len(names)]
        add_usage(t.cluster_queues[name], RED, v)
        booked[name] = booked.get(name, 0) + v
    incremental = {n: dict(node.usage) for n, node in t.cohorts.items()}
    t.recompute()
    assert {n: {k: v for k, v in node.usage.items() if v} for n, node in t.cohorts.items()} == {
        n: {k: v for k, v in u.items() if v} for n, u in incremental.items()
    }
    for node in t.cluster_queues.values():
        assert available(node, RED) <= potential_available(node, RED)
    for name, v in booked.items():
        remove_usage(t.cluster_queues[name], RED, v)
    assert all(node.usage.get(RED, 0) == 0 for node in [*t.cluster_queues.values(), *t.cohorts.values()])


@settings(max_examples=300, deadline=None)
@given(trees())
def test_lending_limits_never_leak_quota_upward(data: tuple[QuotaTree, list[str]]) -> None:
    t, _ = data
    for parent in t.cohorts.values():
        own = parent.quotas[RED].nominal if RED in parent.quotas else 0
        lent = 0
        for child in parent.children:
            q = child.quotas.get(RED)
            contribution = child.subtree.get(RED, 0) - child.local_quota(RED)
            if q is not None and q.lending_limit is not None:
                assert contribution <= q.lending_limit
            lent += contribution
        assert parent.subtree.get(RED, 0) == own + lent
