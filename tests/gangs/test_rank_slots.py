"""Slots carry ranks: a gang's pods are held to their own rank's slot, and ranks survive binding, restarts and
pods that go away. The fleet is the scenario's two NVL72 racks (r1-t05 cordoned, r2-t00 full, r2-t01 half used)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.gangs import GangBook, GangPlan, PlanKeys, identify, layout, seats
from kilter.gangs.ranks import Place, Shape
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.state.store import DELETED, ClusterStore, Event
from tests.extenders.conftest import cluster_objects, pod_json
from tests.topology.builders import CLIQUE, TIER1, node_dict
from tests.topology.test_rank_order import TIER2

JOB = "batch.kubernetes.io/job-completion-index"
LWS_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
KEYS = PlanKeys([b"k" * 32], source="test")
T0 = 1_748_779_200.0


def member(
    i: int | str | None,
    *,
    size: int = 8,
    gpus: int = 4,
    node: str = "",
    name: str = "",
    record: str = "",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Pod ``train-<i>`` of the label gang ``train``, with the Job completion index ``i`` (None: none)."""
    notes = {JOB: str(i)} if i is not None else {}
    if record:
        notes[PLAN_ANNOTATION] = record
    gang = labels or {"kilter.dev/gang": "train", "kilter.dev/gang-size": str(size)}
    return pod_json(name or f"train-{i}", gpus, labels=gang, annotations=notes, node=node)


def r1_busy(trays: int) -> list[dict[str, Any]]:
    return [pod_json(f"busy-{t}", 4, node=f"r1-t{t:02d}") for t in range(trays)]


def book_over(*objects: dict[str, Any], told: list[GangPlan] | None = None) -> tuple[GangBook, ClusterStore]:
    store = ClusterStore()
    store.replace([*cluster_objects(), *objects])
    hook = told.append if told is not None else None
    return GangBook(store, wall=lambda: T0 + 10, keys=KEYS, on_planned=(lambda g, p: hook(p)) if hook else None), store


def plan_of(book: GangBook, store: ClusterStore, asker: dict[str, Any], gpus: int = 4) -> GangPlan:
    p = codec.convert(asker, Pod)
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, gpus)
    assert plan is not None and plan.feasible, plan and plan.plan.reason
    return plan


def seat_of(plan: GangPlan, store: ClusterStore, pod: dict[str, Any], gpus: int = 4) -> seats.Seat:
    p = codec.convert(pod, Pod)
    return seats.seat(plan, p, p.metadata.uid, gpus, store)


def names(store: ClusterStore, index: tuple[int, ...]) -> list[str]:
    return [store.fleet().node_names[i] for i in index]


def test_each_indexed_pod_is_held_to_its_own_ranks_node_and_the_ranks_run_domain_by_domain() -> None:
    # r1 has 8 idle trays (t10-t17; t00-t09 busy, cordoned t05 among them), r2 16: 20 pods span both racks.
    book, store = book_over(*r1_busy(10), *(member(i, size=20) for i in range(20)))
    plan = plan_of(book, store, member(7, size=20))
    assert plan.shapes == (Shape("pods", 20, 4),)
    assert [(s.pod_set, s.rank) for s in plan.slots] == [("pods", r) for r in range(20)]
    assert [s.node for s in plan.slots] == list(plan.plan.pod_sets[0].nodes)  # slot i is the plan's rank i
    racks = [s.node.split("-")[0] for s in plan.slots]
    assert len(set(racks)) == 2 and racks == sorted(racks)  # each rack one consecutive range of ranks
    for i in range(20):
        found = seat_of(plan, store, member(i, size=20))
        assert names(store, found.nodes) == [plan.slots[i].node] and found.place == Place("pods", i)


def test_pods_without_an_index_take_any_free_slot_of_their_shape_as_before() -> None:
    book, store = book_over(*(member(None, name=f"train-{i}", size=4) for i in range(4)))
    plan = plan_of(book, store, member(None, name="train-0", size=4))
    found = seat_of(plan, store, member(None, name="train-2", size=4))
    assert found.place is None and found.note == ""
    assert names(store, found.nodes) == sorted(s.node for s in plan.slots)


def test_an_unusable_index_leaves_the_pod_unindexed_and_says_why() -> None:
    book, store = book_over(*(member(i, size=4) for i in range(4)))
    plan = plan_of(book, store, member(0, size=4))
    for bad, why in (("x", "is 'x', not a whole number"), ("9", "outside pod set pods's 4 pods")):
        found = seat_of(plan, store, member(bad, name="train-odd", size=4))
        assert found.place is None and why in found.note and found.note.startswith("unindexed: ")
        assert len(found.nodes) == 4  # every free slot of its shape: it never waits for a slot it cannot have
        hold = seats.hold(plan, found)
        assert hold.feasible and why in hold.note


def test_a_second_live_pod_with_one_index_takes_a_free_slot_and_is_told_whose_its_rank_is() -> None:
    book, store = book_over(*(member(i, size=4) for i in range(4)))
    plan = plan_of(book, store, member(0, size=4))
    first = plan.slots[2]
    assert book.bound("uid-train-2", first.node, 4, gang="ml/gang/train", place=Place("pods", 2)) is plan
    store.assume("uid-train-2", first.node, 4)
    twin = seat_of(plan, store, member(2, name="train-2-twin", size=4))
    assert twin.place is None and "rank 2 of pod set pods is held by pod ml/train-2" in twin.note
    assert names(store, twin.nodes) == sorted(s.node for s in plan.slots if not s.uid)
    assert first.node not in names(store, twin.nodes)


def test_the_replacement_of_a_pod_that_is_gone_takes_its_ranks_slot() -> None:
    book, store = book_over(*(member(i, size=4) for i in range(4)))
    plan = plan_of(book, store, member(0, size=4))
    slot = plan.slots[1]
    book.bound("uid-train-1", slot.node, 4, gang="ml/gang/train", place=Place("pods", 1))
    store.apply([Event(DELETED, member(1, size=4))])  # the pod failed and went; its Job makes another, index 1
    again = member(1, name="train-1-again", size=4)
    found = seat_of(plan, store, again)
    assert names(store, found.nodes) == [slot.node] and found.place == Place("pods", 1) and "gone" in found.note
    assert book.bound("uid-train-1-again", slot.node, 4, gang="ml/gang/train", place=Place("pods", 1)) is plan
    assert slot.uid == "uid-train-1-again"


def test_a_plan_made_after_some_pods_were_bound_plans_the_free_ranks_and_lists_every_rank_in_order() -> None:
    bound = [member(i, size=6, node=f"r1-t1{i}") for i in (0, 3)]
    book, store = book_over(*bound, *(member(i, size=6) for i in (1, 2, 4, 5)))
    plan = plan_of(book, store, member(1, size=6))
    assert [ps.count for ps in plan.plan.pod_sets] == [4]
    assert [(s.rank, s.uid) for s in plan.slots] == [
        (0, "uid-train-0"),
        (1, ""),
        (2, ""),
        (3, "uid-train-3"),
        (4, ""),
        (5, ""),
    ]
    assert [s.node for s in plan.slots if s.uid] == ["r1-t10", "r1-t13"]
    assert names(store, seat_of(plan, store, member(4, size=6)).nodes) == [plan.slots[4].node]
    assert "2/6 planned pods bound" in plan.describe()


def test_a_bound_pod_without_an_index_leaves_the_gangs_plan_unranked() -> None:
    bound = member(None, name="train-x", size=4, node="r1-t10")
    book, store = book_over(bound, *(member(i, size=4) for i in (1, 2, 3)))
    plan = plan_of(book, store, member(1, size=4))
    assert [s.rank for s in plan.slots] == [None, None, None]
    assert len(seat_of(plan, store, member(2, size=4)).nodes) == 3


def test_a_label_gang_of_mixed_gpu_counts_is_planned_in_its_real_shapes() -> None:
    # 6 pods: a leader of 4 GPUs and two workers of 2 seen, three more not seen yet. The asker is a worker, so the
    # three unseen are planned as workers: 5 x 2 + 1 x 4 = 14 GPUs, where the asker's shape alone made 6 x 2 = 12.
    gang = {"kilter.dev/gang": "mix", "kilter.dev/gang-size": "6"}
    leader = pod_json("lead", 4, labels=gang)
    workers = [pod_json(f"w{i}", 2, labels=gang) for i in range(2)]
    book, store = book_over(leader, *workers)
    plan = plan_of(book, store, workers[0], gpus=2)
    assert plan.shapes == (Shape("pods-2gpu", 5, 2), Shape("pods-4gpu", 1, 4))
    shaped = [(ps.name, ps.count, ps.gpus_per_pod) for ps in plan.plan.pod_sets]
    assert shaped == [("pods-2gpu", 5, 2), ("pods-4gpu", 1, 4)]
    assert sum(s.gpus for s in plan.slots) == 14
    lead = seat_of(plan, store, leader, gpus=4)
    assert [s.gpus for s in plan.slots if s.node_index in lead.nodes] == [4]
    assert len(seat_of(plan, store, workers[1], gpus=2).nodes) >= 1


def test_another_shapes_bad_tas_annotations_do_not_fail_the_asker() -> None:
    gang = {"kilter.dev/gang": "mix", "kilter.dev/gang-size": "3"}
    leader = pod_json("lead", 4, labels=gang, annotations={"kueue.x-k8s.io/podset-slice-size": "2"})  # no level
    workers = [pod_json(f"w{i}", 2, labels=gang) for i in range(2)]
    book, store = book_over(leader, *workers)
    plan = plan_of(book, store, workers[0], gpus=2)
    assert sorted(s.gpus for s in plan.slots) == [2, 2, 4]


def test_an_lws_groups_worker_index_counts_across_its_leader_and_workers() -> None:
    group = {"leaderworkerset.sigs.k8s.io/name": "infer", "leaderworkerset.sigs.k8s.io/group-index": "0"}
    size = {"leaderworkerset.sigs.k8s.io/size": "4"}

    def lws(i: int, gpus: int) -> dict[str, Any]:
        return pod_json(f"infer-0-{i}", gpus, labels={**group, LWS_INDEX: str(i)}, annotations=size)

    book, store = book_over(lws(0, 4), *(lws(i, 2) for i in (1, 2, 3)))
    plan = plan_of(book, store, lws(2, 2), gpus=2)
    assert plan.shapes == (Shape("pods-4gpu", 1, 4), Shape("pods-2gpu", 3, 2))  # the leader's index 0 comes first
    found = seat_of(plan, store, lws(3, 2), gpus=2)
    assert found.place == Place("pods-2gpu", 2)  # worker 3 is the workers' rank 2: the leader holds index 0
    assert names(store, found.nodes) == [next(s.node for s in plan.slots if s.place == Place("pods-2gpu", 2))]
    assert seat_of(plan, store, lws(0, 4), gpus=4).place == Place("pods-4gpu", 0)


def test_a_record_keeps_each_slots_rank_across_a_restart() -> None:
    told: list[GangPlan] = []
    book, store = book_over(*r1_busy(10), *(member(i, size=12) for i in range(12)), told=told)
    first = plan_of(book, store, member(0, size=12))
    assert told == [first]
    record = PlanRecord("ml/gang/train", T0, tuple((s.node, s.gpus) for s in first.slots))  # what the recorder writes
    pods = [member(i, size=12, record=encode(record, keys=KEYS, uid=f"uid-train-{i}")) for i in range(12)]
    pods[5] = member(5, size=12, node=first.slots[5].node, record=encode(record, keys=KEYS, uid="uid-train-5"))
    again, store2 = book_over(*r1_busy(10), *pods)
    plan = plan_of(again, store2, pods[0])
    assert plan.origin == "record"
    ranked = sorted((s.rank, s.node, s.uid) for s in plan.slots if s.rank is not None)
    assert ranked == [(s.rank, s.node, "uid-train-5" if s.rank == 5 else "") for s in first.slots]
    for i in (0, 4, 11):
        assert names(store2, seat_of(plan, store2, pods[i]).nodes) == [first.slots[i].node]


def test_a_record_shorter_than_the_gang_is_taken_up_without_ranks() -> None:
    nodes = ["r1-t10", "r1-t11", "r1-t12"]  # made after a pod without an index was bound: ranks unknown
    record = PlanRecord("ml/gang/train", T0, tuple((n, 4) for n in nodes))
    pods = [member(i, size=4, record=encode(record, keys=KEYS, uid=f"uid-train-{i}")) for i in (1, 2, 3)]
    book, store = book_over(member(None, name="train-x", size=4, node="r1-t09"), *pods)
    plan = plan_of(book, store, pods[0])
    assert plan.origin == "record" and [s.rank for s in plan.slots] == [None] * 3
    assert len(seat_of(plan, store, pods[1]).nodes) == 3


def test_a_plan_adopted_from_the_admission_check_ranks_each_pod_set_from_0() -> None:
    book, store = book_over()
    fleet = store.fleet()
    planned = plan_of(*book_over(*(member(i, size=3) for i in range(3))), member(0, size=3)).plan
    gang = identify(codec.convert(member(0, size=3), Pod), store)
    assert gang is not None
    adopted = book.adopt(gang, planned)
    assert adopted is not None and adopted.shapes == layout.of_plan(planned).shapes
    assert [(s.node, s.pod_set, s.rank) for s in adopted.slots] == [
        (fleet.node_names[n], "pods", i) for i, n in enumerate(planned.node_indices)
    ]


@st.composite
def indexed_gangs_on_fleets(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int]:
    objects: list[dict[str, Any]] = []
    for r in range(draw(st.integers(2, 6))):
        block, spine, trays = f"b{draw(st.integers(0, 2))}", f"s{draw(st.integers(0, 1))}", draw(st.integers(2, 8))
        busy = draw(st.integers(0, trays))
        for t in range(trays):
            objects.append(node_dict(f"x{r}-t{t}", labels={CLIQUE: f"x{r}", TIER1: block, TIER2: spine}))
            if t < busy:
                objects.append(pod_json(f"busy-{r}-{t}", draw(st.sampled_from([1, 2, 4])), node=f"x{r}-t{t}"))
    return objects, draw(st.integers(4, 30)), draw(st.sampled_from([2, 4]))


@settings(max_examples=40, deadline=None)
@given(indexed_gangs_on_fleets())
def test_on_random_fleets_each_domain_and_each_block_holds_a_consecutive_range_of_a_gangs_ranks(
    case: tuple[list[dict[str, Any]], int, int],
) -> None:
    objects, size, gpus = case
    pods = [member(i, size=size, gpus=gpus) for i in range(size)]
    store = ClusterStore()
    store.replace([*objects, *pods])
    book = GangBook(store)
    p = codec.convert(pods[0], Pod)
    gang = identify(p, store)
    assert gang is not None
    plan = book.plan_for(gang, p, gpus)
    if plan is None or not plan.feasible:
        return
    fleet = store.fleet()
    node_of = []
    for i in range(size):
        found = seat_of(plan, store, pods[i], gpus)
        assert found.place == Place("pods", i) and len(found.nodes) == 1
        node_of.append(found.nodes[0])
    for level in (None, *range(fleet.domain_group.shape[0])):
        keys = [
            int(fleet.node_domain[n]) if level is None else int(fleet.domain_group[level, fleet.node_domain[n]])
            for n in node_of
        ]
        runs = [k for i, k in enumerate(keys) if i == 0 or keys[i - 1] != k]
        assert len(runs) == len(set(runs)), f"level {level}: ranks of one group are split: {runs}"
