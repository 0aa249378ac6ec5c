"""Volcano-queue quota decisions over plain job records: enqueue, overuse, victims, and what each job is charged."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.quota.bound_jobs import BoundJob, FlavorLabels, held, usage_of
from kilter.quota.bound_queues import CLUSTER_QUEUE_ANNOTATION, BoundQueues, QueueVerdict, bind_queues
from kilter.quota.config import FairSharingConfig
from kilter.quota.tree import FR, QuotaTree
from tests.quota.builders import cohort, cq, tree

GPU = "nvidia.com/gpu"
GB = ("gb200", GPU)
MI = ("mi355", GPU)
RECLAIM = {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"}
NOW = 1_000_000.0


def pool(*, training: int = 64, borrowing: int | None = 32, research: int = 32) -> QuotaTree:
    """Cohort pool: training (may borrow ``borrowing``) and research, both reclaiming within the cohort."""
    limits = (training, borrowing) if borrowing is not None else training
    return tree(
        [
            cq("training", {GB: limits}, cohort="pool", preemption=RECLAIM),
            cq("research", {GB: research}, cohort="pool", preemption=RECLAIM),
        ],
        [cohort("pool")],
    )


def job(
    name: str,
    gpus: int,
    *,
    queue: str = "training",
    phase: str = "Pending",
    holding: int = 0,
    node: str = "",
    reserves: bool = True,
    priority: int = 0,
    created: float = 0.0,
) -> BoundJob:
    return BoundJob(
        key=f"ml/{name}",
        uid=f"uid-{name}",
        queue=queue,
        priority=priority,
        created_s=created,
        phase=phase,
        holding={GPU: holding} if holding else {},
        minimum={GPU: gpus},
        node=node,
        reserves=reserves,
    )


def running(name: str, gpus: int, **kw: Any) -> BoundJob:
    return job(name, gpus, phase="Running", holding=gpus, node="n1", **kw)


def view(t: QuotaTree, *jobs: BoundJob, permitted: tuple[BoundJob, ...] = (), **kw: Any) -> BoundQueues:
    queues = {"training", "research", *(j.queue for j in (*jobs, *permitted))}
    return BoundQueues.build(
        t,
        {j.key: j for j in jobs},
        binding=bind_queues(t, kw.pop("annotations", {}), queues=sorted(queues)),
        flavors=FlavorLabels({}),
        permitted={j.key: j for j in permitted},
        config=FairSharingConfig(**kw),
    )


def usage(t: QuotaTree) -> dict[str, dict[FR, int]]:
    return {
        name: {fr: v for fr, v in n.usage.items() if v} for name, n in (*t.cluster_queues.items(), *t.cohorts.items())
    }


# ---------------------------------------------------------------------- binding and charges


def test_a_queue_binds_to_its_namesake_or_to_the_cluster_queue_its_annotation_names() -> None:
    t = pool()
    annotations = {"ml-training": {CLUSTER_QUEUE_ANNOTATION: "training"}, "lost": {CLUSTER_QUEUE_ANNOTATION: "gone"}}
    assert bind_queues(t, annotations, queues=["ml-training", "research", "scratch", "lost"]) == {
        "ml-training": "training",
        "research": "research",
    }


@pytest.mark.parametrize(
    ("record", "permitted", "want"),
    [
        pytest.param(job("a", 16), False, {}, id="pending holds nothing"),
        pytest.param(job("a", 16, phase="Inqueue"), False, {GPU: 16}, id="enqueued holds its minResources"),
        pytest.param(job("a", 16), True, {GPU: 16}, id="just permitted holds its minResources"),
        pytest.param(job("a", 16, phase="Running", holding=24), False, {GPU: 24}, id="holding 24 above min 16"),
        pytest.param(job("a", 16, phase="Running", holding=4), False, {GPU: 16}, id="holding 4 below min 16"),
        pytest.param(
            job("a", 16, phase="Inqueue", holding=4, reserves=False), False, {GPU: 4}, id="no minResources: tasks only"
        ),
    ],
)
def test_a_job_holds_its_tasks_or_its_reservation_whichever_is_more(
    record: BoundJob, permitted: bool, want: dict[str, int]
) -> None:
    assert held(record, permitted={record.key} if permitted else set()) == want


def test_usage_goes_to_the_first_flavor_the_jobs_node_matches_else_the_groups_first() -> None:
    t = tree([cq("q", {GB: 8, MI: 8})])
    node = t.cluster_queues["q"]
    by_pool = FlavorLabels({"gb200": {"pool": "gb"}, "mi355": {"pool": "mi"}}, {"mi-1": {"pool": "mi"}})
    amounts = {GPU: 4, "cpu": 1000}  # cpu: no group covers it, so it is not charged
    assert usage_of(job("a", 4, node="mi-1"), node, amounts=amounts, flavors=by_pool) == {MI: 4}
    assert usage_of(job("a", 4, node="other"), node, amounts=amounts, flavors=by_pool) == {GB: 4}  # matches none
    assert usage_of(job("a", 4), node, amounts=amounts, flavors=by_pool) == {GB: 4}  # on no node yet: the first
    unlabeled = FlavorLabels({"mi355": {"pool": "mi"}}, {"mi-1": {"pool": "mi"}})
    # gb200 has no nodeLabels, so it selects every node, mi-1 too, and comes first
    assert usage_of(job("a", 4, node="mi-1"), node, amounts=amounts, flavors=unlabeled) == {GB: 4}


def test_every_job_is_charged_once_and_the_cohort_sees_what_is_borrowed() -> None:
    t = pool()
    # training: 48 running + 24 enqueued = 72 = 64 nominal + 8 borrowed; research: 8 just permitted.
    view(t, running("a", 48), job("b", 24, phase="Inqueue"), permitted=(job("c", 8, queue="research"),))
    assert usage(t) == {"training": {GB: 72}, "research": {GB: 8}, "pool": {GB: 80}}


# ---------------------------------------------------------------------- enqueue


@pytest.mark.parametrize(
    ("jobs", "asking", "want", "reason"),
    [
        pytest.param([], job("n", 48), QueueVerdict.PERMIT, "fits ClusterQueue training", id="48 of 64 free fits"),
        pytest.param(
            [running("a", 48)],
            job("n", 48),
            QueueVerdict.PERMIT,
            "fits ClusterQueue training",
            id="48+48=96=64+32 borrowed",
        ),
        pytest.param(
            [running("a", 48), running("b", 48)],
            job("n", 48),
            QueueVerdict.REJECT,
            "waits for quota",
            id="96 used: waits",
        ),
        pytest.param([], job("n", 100), QueueVerdict.REJECT, "could ever hold (96)", id="100 > 64+32: never"),
        pytest.param([], job("n", 4, queue="scratch"), QueueVerdict.ABSTAIN, "bound to no ClusterQueue", id="unbound"),
        pytest.param(
            [running("t", 80)],
            job("n", 32, queue="research"),
            QueueVerdict.PERMIT,
            "once reclaimed from ml/t",  # research's 32 nominal: 96 - 80 = 16 free + the 16 training borrows
            id="research reclaims 16 of its nominal from the borrower",
        ),
    ],
)
def test_enqueueable_follows_the_bound_cluster_queue(
    jobs: list[BoundJob], asking: BoundJob, want: QueueVerdict, reason: str
) -> None:
    t = pool()
    v = view(t, *jobs)
    before = usage(t)
    answer = v.enqueueable(asking, NOW)
    assert answer.status == want and reason in answer.reason
    assert answer.never == ("could ever hold" in reason)
    assert usage(t) == before, "a decision left usage behind"


def test_a_permitted_job_counts_for_the_next_decision_of_the_session() -> None:
    t = pool()
    v = view(t)
    first, second, third = job("a", 48), job("b", 48), job("c", 48)
    for record, want in ((first, QueueVerdict.PERMIT), (second, QueueVerdict.PERMIT), (third, QueueVerdict.REJECT)):
        answer = v.enqueueable(record, NOW)
        assert answer.status == want, answer.reason
        if answer.status == QueueVerdict.PERMIT:
            v.permit(record)
    assert usage(t)["training"] == {GB: 96}  # 48 + 48, the third never charged


def test_a_job_already_charged_is_judged_without_its_own_charge() -> None:
    t = pool()
    mine = job("a", 96, phase="Inqueue")  # charged 96 = all training may hold
    v = view(t, mine)
    assert v.enqueueable(mine, NOW).status == QueueVerdict.PERMIT  # 96 of 96, its own 96 lifted
    assert usage(t)["training"] == {GB: 96}


# ---------------------------------------------------------------------- overused and victims


def test_a_borrower_is_overused_once_its_lender_uses_its_own_nominal() -> None:
    t = pool()
    # training 80 (16 borrowed); research runs its nominal 32: the pool holds 112 of 96, training 16 too many.
    v = view(t, running("t", 80), running("r", 32, queue="research"))
    over, reason = v.overused("training")
    assert over and "by 16" in reason
    assert v.overused("research") == (False, "ClusterQueue research is within what it may hold")
    assert v.overused("scratch")[0] is False


@pytest.mark.parametrize(
    ("jobs", "asking", "want", "keys"),
    [
        pytest.param(
            [running("t", 80), running("s", 4, queue="research")],
            job("w", 16, queue="research", phase="Inqueue"),
            QueueVerdict.PERMIT,
            {"ml/t"},  # research: 4 + 16 = 20 of its 32, 16 of them lent to training: only the borrower may go
            id="reclaim takes back only from the borrower",
        ),
        pytest.param(
            [running("t", 64)],
            job("w", 48, queue="research", phase="Inqueue"),
            QueueVerdict.REJECT,
            set(),  # research asks 48 > its 32 while training is within its 64: no right to evict
            id="no right beyond nominal",
        ),
        pytest.param(
            [running("t", 32)],
            job("w", 16, queue="research", phase="Inqueue"),
            QueueVerdict.ABSTAIN,
            set(),  # 16 fits research's free 32: quota is not the obstacle
            id="quota is not the obstacle",
        ),
        pytest.param(
            [running("low", 32, queue="research", priority=1), running("fill", 64)],
            job("high", 16, queue="research", phase="Inqueue", priority=100),
            QueueVerdict.PERMIT,
            {"ml/low"},  # research full with a low-priority job, nothing to borrow: preempt within the queue
            id="preempt lower priority within the queue",
        ),
    ],
)
def test_victims_are_the_jobs_kueues_preemption_would_take_quota_from(
    jobs: list[BoundJob], asking: BoundJob, want: QueueVerdict, keys: set[str]
) -> None:
    t = pool()
    v = view(t, *jobs, asking)
    before = usage(t)
    answer = v.victims(asking, NOW)
    assert (answer.status, set(answer.keys)) == (want, keys), answer.reason
    assert usage(t) == before, "a decision left usage behind"


# ---------------------------------------------------------------------- place and release


def test_a_task_beyond_quota_is_refused_for_a_job_enqueued_without_asking() -> None:
    t = pool()
    v = view(t, running("most", 96), job("late", 8, phase="Inqueue", reserves=False))
    refused = v.place("ml/late", {GPU: 4}, "n1", taken=True)
    assert "has no quota left" in refused
    assert usage(t)["training"] == {GB: 96}  # 96 of 96: the refused task charged nothing


def test_placing_and_giving_back_a_task_moves_the_charge_exactly() -> None:
    t = pool()
    v = view(t, job("a", 8, phase="Inqueue", reserves=False))
    assert v.place("ml/a", {GPU: 4}, "n1", taken=True) == ""
    assert v.place("ml/a", {GPU: 4}, "n1", taken=True) == ""
    assert usage(t)["training"] == {GB: 8}  # 4 + 4
    assert v.place("ml/a", {GPU: 4}, "n1", taken=False) == ""
    assert usage(t)["training"] == {GB: 4}  # 8 - 4


def test_a_released_job_gives_back_all_it_was_charged() -> None:
    t = pool()
    v = view(t, running("a", 80), permitted=(job("b", 8, queue="research"),))
    v.release("ml/a")
    v.release("ml/b")
    v.release("ml/unknown")
    assert usage(t) == {"training": {}, "research": {}, "pool": {}}
    assert not v.permitted and "ml/a" not in v.jobs


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["training", "research"]), st.integers(1, 60), st.booleans(), st.integers(0, 60)),
        min_size=1,
        max_size=8,
    )
)
def test_charges_are_conserved_through_decisions_permits_and_releases(rows: list[tuple[str, int, bool, int]]) -> None:
    t = pool(borrowing=None)
    records = [
        job(f"j{i}", gpus, queue=q, phase="Running" if run else "Pending", holding=hold if run else 0, node="n1")
        for i, (q, gpus, run, hold) in enumerate(rows)
    ]
    v = view(t, *(r for r in records if r.phase == "Running"))
    start = usage(t)
    expected = {name: sum(w.usage.get(GB, 0) for w in ws) for name, ws in v.admitted.items()}
    assert {n: u.get(GB, 0) for n, u in start.items() if n != "pool"} == {
        "training": expected.get("training", 0),
        "research": expected.get("research", 0),
    }  # nothing charged twice
    for r in records:
        v.enqueueable(r, NOW)
        v.victims(r, NOW)
        assert usage(t) == start  # every what-if undone exactly
    pending = [r for r in records if r.phase == "Pending"]
    for r in pending:
        v.permit(r)
        v.permit(r)  # permitting twice charges once
    for r in pending:
        v.release(r.key)
    assert usage(t) == start
