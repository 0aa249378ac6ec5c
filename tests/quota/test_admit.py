"""Admission order: flavor assignment, the fair-sharing tournament, classical order, lazy pops."""

from __future__ import annotations

from typing import Any

from kilter.quota.admit import ADMIT, NEVER, PREEMPT, WAIT, admission_order, assign_flavors, by_cluster_queue
from kilter.quota.config import FairSharingConfig
from kilter.quota.usage import WorkloadInfo
from tests.quota.builders import cohort, cq, tree

GPU = "nvidia.com/gpu"
A = ("a100", GPU)
H = ("h100", GPU)


def pending(name: str, cq_name: str, gpus: int, *, priority: int = 0, created: float = 0.0) -> WorkloadInfo:
    return WorkloadInfo("ns", name, f"uid-{name}", cq_name, "lq", priority, created, False, requests={GPU: gpus})


def held(name: str, cq_name: str, usage: dict[Any, int], *, priority: int = 0, reserved: float = 0.0) -> WorkloadInfo:
    return WorkloadInfo("ns", name, f"uid-{name}", cq_name, "lq", priority, 0.0, True, reserved, usage=usage)


def order(t: Any, pend: list[WorkloadInfo], adm: list[WorkloadInfo] = (), **cfg: Any) -> list[tuple[str, str]]:  # type: ignore[assignment]
    decisions = admission_order(t, pend, by_cluster_queue(adm), config=FairSharingConfig(**cfg), now=1000.0)
    return [(d.workload.name, d.outcome) for d in decisions]


def test_the_first_flavor_that_fits_wins_else_the_first_that_could_after_preemption() -> None:
    t = tree([cq("q", {A: 8, H: 16})], usage={"q": {A: 6}})
    assert assign_flavors(t.cluster_queues["q"], {GPU: 2}).flavors == {GPU: "a100"}
    assert assign_flavors(t.cluster_queues["q"], {GPU: 4}).flavors == {GPU: "h100"}
    t = tree([cq("q", {A: 8, H: 16})], usage={"q": {A: 6, H: 16}})
    a = assign_flavors(t.cluster_queues["q"], {GPU: 4})
    assert (a.mode, a.flavors) == ("preempt", {GPU: "a100"})


def test_a_request_beyond_any_flavor_or_an_uncovered_resource_never_fits() -> None:
    t = tree([cq("q", {A: 8})])
    assert "could ever hold (8)" in assign_flavors(t.cluster_queues["q"], {GPU: 9}).reason
    assert "memory unavailable" in assign_flavors(t.cluster_queues["q"], {GPU: 1, "memory": 5}).reason


def fair_pair(**weights: str) -> Any:
    return tree(
        [cq("a", {A: 10}, cohort="c", weight=weights.get("a")), cq("b", {A: 10}, cohort="c", weight=weights.get("b"))],
        usage={"a": {A: 14}, "b": {A: 2}},
    )


def test_the_queue_that_stays_within_nominal_goes_first() -> None:
    # a would borrow (14 + 2 > 10); b stays within nominal (2 + 2 <= 10).
    assert order(fair_pair(), [pending("wa", "a", 2), pending("wb", "b", 2)])[0] == ("wb", ADMIT)


def test_without_the_non_borrowing_gate_the_lower_share_wins() -> None:
    # a: (14 + 1 - 10) * 1000 / 20 = 250 at weight 1; b: (2 + 12 - 10) * 1000 / 20 = 200 -> b first.
    t = fair_pair()
    assert order(t, [pending("wa", "a", 1), pending("wb", "b", 12)], prioritize_non_borrowing=False)[0][0] == "wb"
    # With weight 2, a's share halves to 125 and a goes first.
    t = fair_pair(a="2")
    assert order(t, [pending("wa", "a", 1), pending("wb", "b", 12)], prioritize_non_borrowing=False)[0][0] == "wa"


def test_equal_shares_fall_to_priority_then_creation_time() -> None:
    t = tree([cq("a", {A: 10}, cohort="c"), cq("b", {A: 10}, cohort="c")])
    assert order(t, [pending("wa", "a", 1, priority=1), pending("wb", "b", 1, priority=5)])[0][0] == "wb"
    assert order(t, [pending("wa", "a", 1, created=5.0), pending("wb", "b", 1, created=2.0)])[0][0] == "wb"


def test_each_pop_sees_the_admissions_before_it() -> None:
    # Alone, wa (14) fits: a's 10 plus the cohort's spare 4. wb stays within b's nominal, so it goes
    # first, takes those 4, and wa then no longer fits (and b, within nominal, offers nothing to preempt).
    t = tree([cq("a", {A: 10}, cohort="c"), cq("b", {A: 10}, cohort="c")], usage={"b": {A: 6}})
    assert order(t, [pending("wa", "a", 14)]) == [("wa", ADMIT)]
    result = order(t, [pending("wa", "a", 14), pending("wb", "b", 4, created=1.0)])
    assert result == [("wb", ADMIT), ("wa", WAIT)]


def test_a_queue_offers_one_workload_per_cycle_in_priority_order() -> None:
    t = tree([cq("solo", {A: 10})])
    decisions = admission_order(
        t,
        [pending("low", "solo", 1, priority=1), pending("high", "solo", 1, priority=9)],
        {},
        config=FairSharingConfig(),
        now=0.0,
    )
    assert [(d.workload.name, d.cycle) for d in decisions] == [("high", 1), ("low", 2)]


def test_the_tournament_compares_cohorts_at_their_common_parent() -> None:
    # Cohort x (weight 4) borrows more than cohort y (weight 1), but its weighted share is lower.
    t = tree(
        [cq("qx", {A: 4}, cohort="x"), cq("qy", {A: 4}, cohort="y"), cq("lender", {A: 24}, cohort="root")],
        [cohort("root"), cohort("x", parent="root", weight="4"), cohort("y", parent="root", weight="1")],
        usage={"qx": {A: 12}, "qy": {A: 7}},
    )
    assert order(t, [pending("wx", "qx", 1), pending("wy", "qy", 1)], prioritize_non_borrowing=False)[0][0] == "wx"


def test_classical_order_puts_fits_in_nominal_first_then_priority() -> None:
    t = fair_pair()
    result = order(t, [pending("wa", "a", 2, priority=9), pending("wb", "b", 2, priority=1)], enabled=False)
    assert [name for name, _ in result] == ["wb", "wa"]


def test_workloads_of_unknown_queues_never_fit_and_the_tree_is_left_untouched() -> None:
    t = fair_pair()
    before = {n: dict(q.usage) for n, q in t.cluster_queues.items()}
    result = order(t, [pending("ghost", "nope", 1), pending("wb", "b", 2)])
    assert result == [("wb", ADMIT), ("ghost", NEVER)]
    assert {n: dict(q.usage) for n, q in t.cluster_queues.items()} == before


def test_a_workload_needing_preemption_is_reported_with_its_targets() -> None:
    t = tree(
        [cq("a", {A: 10}, cohort="c", preemption={"reclaimWithinCohort": "Any"}), cq("b", {A: 10}, cohort="c")],
        usage={"b": {A: 20}},
    )
    decisions = admission_order(
        t,
        [pending("wa", "a", 4)],
        by_cluster_queue([held("big", "b", {A: 12}), held("small", "b", {A: 8})]),
        config=FairSharingConfig(),
        now=0.0,
    )
    assert decisions[0].outcome == PREEMPT
    assert decisions[0].preemption is not None
    assert [x.workload.name for x in decisions[0].preemption.targets] == ["big"]


def test_nominee_order_pops_one_head_per_queue_as_admission_orders_them() -> None:
    from kilter.quota.admit import nominee_order
    from kilter.quota.available import add_usage

    # a and b (nominal 10 each) borrow from c (nominal 20, idle): a holds 12, b holds 16.
    quotas = [cq("a", {A: 10}, cohort="co"), cq("b", {A: 10}, cohort="co"), cq("c", {A: 20}, cohort="co")]
    heads = {"a": pending("wa", "a", 2, created=5.0), "b": pending("wb", "b", 2, created=1.0)}
    for fair, first in ((True, "wa"), (False, "wb")):
        t = tree(quotas, usage={"a": {A: 12}, "b": {A: 16}})
        # fair: a's share after admission, (14-10)/40, is below b's (18-10)/40; classical: both borrow, b is older.
        popped = [w.name for w, _ in nominee_order(t, heads, config=FairSharingConfig(enabled=fair), now=0.0)]
        assert popped[0] == first
        assert popped == [d for d, _ in order(t, list(heads.values()), enabled=fair)]

    t = tree(quotas, usage={"a": {A: 12}, "b": {A: 16}})
    three = {**heads, "c": pending("wc", "c", 2, created=9.0)}
    pops = nominee_order(t, three, config=FairSharingConfig(), now=0.0)
    w, assignment = next(pops)
    assert w.name == "wc" and assignment.usage == {A: 2}  # c stays within nominal: it goes first
    add_usage(t.cluster_queues["c"], A, 2)  # the caller admits wc before asking for the next
    assert [w.name for w, _ in pops] == ["wa", "wb"]
