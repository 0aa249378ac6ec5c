"""A preferred gang that fits only split waits for fewer domains, holding no nodes, until its budget is spent."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from kilter.gangs import GangBook, GangPlan, identify
from kilter.gangs.gang_plan import INFEASIBLE_RETRY_S
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.gangs.waits import SplitWaits, facts_of
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.quota.policy import parse_time
from kilter.state.cluster import from_objects
from kilter.state.store import DELETED, MODIFIED, ClusterStore, Event
from kilter.topology.split_wait import SplitWait
from tests.clock import Clock
from tests.extenders.conftest import pod_json
from tests.gangs.wait_scenario import (
    BUDGET_S,
    FREE,
    finished_workload,
    fleet_objects,
    gang_pods,
    queue_objects,
)

T0 = 1_790_000_000.0
RUNTIME = {"kilter.dev/expected-runtime": "10h"}
WAITS_2H = "waiting up to 2h for room in 1 domain; 2 available now"


def book_over(objects: list[dict[str, Any]], clock: Clock, **waits: Any) -> GangBook:
    store = ClusterStore()
    store.replace(objects)
    return GangBook(store, clock=clock, wall=clock, waits=SplitWaits(store, wall=clock, **waits))


def ask(book: GangBook, name: str = "train", pod: int = 0) -> GangPlan:
    held = book.store.pod_named("ml", f"{name}-{pod}")
    assert held is not None
    gang = identify(held, book.store)
    assert gang is not None
    plan = book.plan_for(gang, held, 4)
    assert plan is not None
    return plan


def test_a_preferred_gang_that_fits_only_split_waits_and_holds_nothing() -> None:
    clock = Clock(T0)
    told: list[Any] = []
    book = book_over([*fleet_objects(), *gang_pods("train", T0, annotations=RUNTIME)], clock)
    book.on_planned = lambda gang, plan: told.append(plan)
    plan = ask(book)
    assert plan.waiting and not plan.feasible
    assert plan.plan.reason == WAITS_2H
    assert plan.slots == [] and book.store.reservation("ml/gang/train") == ()
    assert told == []  # no plan record is written for a gang that waits
    assert plan.hold("uid-train-0", 4).note == WAITS_2H and plan.hold("uid-train-0", 4).waits
    assert book.waits is not None and book.waits.waiting() == 1


def test_the_decision_is_kept_a_few_seconds_but_never_past_the_budget() -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("train", T0 - BUDGET_S + 2, annotations=RUNTIME)], clock)
    first = ask(book)
    assert first.waiting and first.life.retry_s == pytest.approx(2.0)  # 2 s of the budget left: not the usual 5 s
    clock.now += 1
    assert ask(book, pod=1) is first  # the other pods of the gang get the same answer, not a new judgement
    clock.now += 1.5
    placed = ask(book, pod=2)
    assert placed.feasible and not placed.waiting
    assert sorted(s.node for s in placed.slots) == FREE  # the split it could have had, taken now
    assert book.waits is not None and book.waits.waiting() == 0


def test_a_long_wait_is_asked_again_after_the_usual_pause() -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("train", T0, annotations=RUNTIME)], clock)
    assert ask(book).life.retry_s == INFEASIBLE_RETRY_S


def test_after_its_budget_the_gang_takes_the_split_plan_at_once() -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("train", T0 - BUDGET_S - 1, annotations=RUNTIME)], clock)
    plan = ask(book)
    assert plan.feasible and len(plan.plan.domains) == 2


@pytest.mark.parametrize(
    ("cq", "cohort", "job", "reason"),
    [
        pytest.param({}, {}, {}, WAITS_2H, id="nothing set: the flags' defaults"),
        pytest.param({"kilter.dev/split-wait": "0"}, {}, {}, "", id="factor 0 on the ClusterQueue: no wait"),
        pytest.param({}, {"kilter.dev/split-wait": "0"}, {}, "", id="factor 0 on the Cohort above it: no wait"),
        pytest.param(
            {"kilter.dev/split-wait": "0.5"},
            {"kilter.dev/split-wait": "0"},
            {},
            "waiting up to 1h for room in 1 domain; 2 available now",
            id="the ClusterQueue's 0.5 over its Cohort's 0: 0.5 x 2h",
        ),
        pytest.param(
            {"kilter.dev/split-wait": "0"},
            {},
            {"kilter.dev/split-wait": "1"},
            WAITS_2H,
            id="the job's own 1 over its queue's 0",
        ),
        pytest.param(
            {},
            {"kilter.dev/split-wait-max": "30m"},
            {},
            "waiting up to 30m for room in 1 domain; 2 available now",
            id="the Cohort's cap of 30m under the 2h budget",
        ),
        pytest.param(
            {"kilter.dev/split-wait-max": "1h"},
            {},
            {"kilter.dev/split-wait-max": "90m"},
            "waiting up to 1h30m for room in 1 domain; 2 available now",
            id="the job's cap over the queue's",
        ),
    ],
)
def test_settings_come_from_the_job_then_its_queue_then_the_cohorts_then_the_flags(
    cq: dict[str, str], cohort: dict[str, str], job: dict[str, str], reason: str
) -> None:
    clock = Clock(T0)
    pods = gang_pods("train", T0, annotations={**RUNTIME, **job}, labels={"kueue.x-k8s.io/queue-name": "team"})
    book = book_over([*fleet_objects(), *queue_objects(cq_notes=cq, cohort_notes=cohort), *pods], clock)
    plan = ask(book)
    assert plan.plan.reason == reason if reason else plan.feasible


def test_the_flags_set_what_nothing_in_the_cluster_does() -> None:
    clock = Clock(T0)
    objects = [*fleet_objects(), *gang_pods("train", T0, annotations=RUNTIME)]
    assert ask(book_over(objects, clock, defaults=SplitWait(factor=0.0))).feasible
    slow = book_over(objects, clock, defaults=SplitWait(split_slowdown=0.1))  # 1 x 0.1 x 1 x 10h = 1h
    assert ask(slow).plan.reason == "waiting up to 1h for room in 1 domain; 2 available now"


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        pytest.param({}, "no runtime declared and no history: no estimate", id="no estimate"),
        pytest.param(
            {**RUNTIME, "kueue.x-k8s.io/podset-required-topology": "fabric.topograph.run/tier-1"},
            "required (one leaf): required gangs never wait here",
            id="required",
        ),
        pytest.param(
            {**RUNTIME, "kueue.x-k8s.io/podset-unconstrained-topology": "true"},
            "unconstrained: it asked for no topology",
            id="unconstrained",
        ),
    ],
)
def test_a_gang_the_rule_does_not_cover_is_placed_split_at_once(annotations: dict[str, str], why: str) -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("train", T0, annotations=annotations)], clock)
    plan = ask(book)
    assert plan.feasible and len(plan.plan.domains) == 2, why


def test_a_gang_that_fits_one_domain_now_never_waits() -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("pair", T0, pods=2, annotations=RUNTIME)], clock)
    plan = ask(book, "pair")
    assert plan.feasible and len(plan.plan.domains) == 1


def test_the_runtime_declared_by_a_deadline_or_kueues_label_counts_too() -> None:
    clock = Clock(T0)
    pods = gang_pods("train", T0, labels={"kueue.x-k8s.io/max-exec-time-seconds": "18000"})  # 5 h: 1 h budget
    assert ask(book_over([*fleet_objects(), *pods], clock)).plan.reason.startswith("waiting up to 1h for")
    pods = gang_pods("train", T0)
    for pod in pods:
        pod["spec"]["activeDeadlineSeconds"] = 9000  # 2.5 h: 30 min budget
    assert ask(book_over([*fleet_objects(), *pods], clock)).plan.reason.startswith("waiting up to 30m for")


def test_the_runtime_is_learned_from_the_queues_finished_workloads() -> None:
    clock = Clock(T0)
    history = [finished_workload(f"done-{h}", h) for h in (8, 10, 12)]  # 16 GPUs each, median 10 h
    pods = gang_pods("train", T0, labels={"kueue.x-k8s.io/queue-name": "team"})
    book = book_over([*fleet_objects(), *queue_objects(), *history, *pods], clock)
    assert ask(book).plan.reason == WAITS_2H
    assert book.waits is not None and book.waits.runtimes.observed == 3


def test_finishes_are_learned_one_event_at_a_time_and_once() -> None:
    store = ClusterStore()
    store.replace([*fleet_objects(), *queue_objects()])
    waits = SplitWaits(store)
    assert waits.runtimes.estimate("gpu", 16) is None
    done = finished_workload("done", 4)
    store.apply([Event(MODIFIED, done)])
    assert waits.runtimes.estimate("gpu", 16) == pytest.approx(4 * 3600)
    again = {**done, "metadata": {**done["metadata"], "labels": {"touched": "yes"}}}
    store.apply([Event(MODIFIED, again)])  # the same finished Workload changed again: not a second run
    assert waits.runtimes.observed == 1
    running = finished_workload("running", 4)
    running["status"]["conditions"] = running["status"]["conditions"][:2]
    store.apply([Event(MODIFIED, running)])
    assert waits.runtimes.observed == 1


def test_a_bad_queue_annotation_is_skipped_and_named_and_placing_goes_on() -> None:
    clock = Clock(T0)
    queues = queue_objects(cq_notes={"kilter.dev/split-wait": "lots"}, cohort_notes={"kilter.dev/split-wait": "0"})
    pods = gang_pods("train", T0, annotations=RUNTIME, labels={"kueue.x-k8s.io/queue-name": "team"})
    book = book_over([*fleet_objects(), *queues, *pods], clock)
    assert ask(book).feasible  # the Cohort's 0 applies
    assert book.waits is not None
    (problem,) = book.waits.problems()
    assert problem.startswith("ClusterQueue gpu: kilter.dev/split-wait: 'lots' is not a number")


def test_a_bad_annotation_on_the_job_refuses_its_gang_saying_which() -> None:
    clock = Clock(T0)
    pods = gang_pods("train", T0, annotations={"kilter.dev/expected-runtime": "a while"})
    book = book_over([*fleet_objects(), *pods], clock)
    with pytest.raises(InputError, match=r"kilter\.dev/expected-runtime"):
        ask(book)


def test_waiting_gangs_are_counted_until_their_budget_runs_out_or_they_are_gone() -> None:
    clock = Clock(T0)
    objects = [
        *fleet_objects(),
        *gang_pods("a", T0, annotations=RUNTIME),
        *gang_pods("b", T0 - 3600, annotations=RUNTIME),
    ]
    book = book_over(objects, clock)
    assert ask(book, "a").waiting and ask(book, "b").waiting
    assert book.waits is not None and book.waits.waiting() == 2
    clock.now += 3600  # b's 2 h are spent
    assert book.waits.waiting() == 1
    book.store.replace([o for o in objects if not o["metadata"]["name"].startswith("a-")])
    assert book.waits.waiting() == 0


def _condition(kind: str, status: str, at: str) -> dict[str, str]:
    return {"type": kind, "status": status, "reason": kind, "message": "", "lastTransitionTime": at}


@pytest.mark.parametrize(
    ("kind", "conditions", "since"),
    [
        pytest.param(
            "Workload",
            [_condition("QuotaReserved", "True", "2026-12-01T10:00:00Z")],
            "2026-12-01T10:00:00Z",
            id="a Workload whose quota is reserved: from the reservation",
        ),
        pytest.param(
            "Workload",
            [_condition("QuotaReserved", "False", "2026-12-01T10:00:00Z")],
            "2026-12-01T08:00:00Z",
            id="a Workload whose quota is not reserved (evicted, or not yet): from its creation",
        ),
        pytest.param(
            "Workload",
            [_condition("QuotaReserved", "True", "soon")],
            "2026-12-01T08:00:00Z",
            id="a reservation time that does not read: from its creation",
        ),
        pytest.param("Workload", [], "2026-12-01T08:00:00Z", id="a Workload with no conditions: from its creation"),
        pytest.param(
            "PodGroup",
            [_condition("Unschedulable", "True", "2026-12-01T10:00:00Z")],
            "2026-12-01T08:00:00Z",
            id="a PodGroup: from its creation (Volcano restamps its conditions every session)",
        ),
    ],
)
def test_the_clock_starts_at_the_quota_reservation_of_a_workload_else_at_its_creation(
    kind: str, conditions: list[dict[str, str]], since: str
) -> None:
    obj = {
        "kind": kind,
        "metadata": {"name": "j", "namespace": "ml", "creationTimestamp": "2026-12-01T08:00:00Z"},
        "spec": {},
        "status": {"phase": "Inqueue", "conditions": conditions},
    }
    pods = [msgspec.convert(p, Pod) for p in gang_pods("j", T0 - 86400)]
    facts = facts_of(kind, "ml", "j", obj, pods, QueueWaitRules.build(from_objects([]), SplitWait()))
    assert facts.since_s == parse_time(since, path="test")


def test_a_gang_of_bare_pods_counts_from_its_earliest_pod() -> None:
    pods = [*gang_pods("j", T0 - 60, pods=1), *gang_pods("j", T0 - 600, pods=1)]
    settings = QueueWaitRules.build(from_objects([]), SplitWait())
    facts = facts_of("pods of gang", "ml", "j", None, [msgspec.convert(p, Pod) for p in pods], settings)
    assert facts.since_s == T0 - 600


def test_a_waiting_gang_is_judged_again_as_soon_as_gpus_come_free() -> None:
    clock = Clock(T0)
    book = book_over([*fleet_objects(), *gang_pods("train", T0, annotations=RUNTIME)], clock)
    assert ask(book).waiting
    freed = [book.store.pod_named("ml", f"busy-r1-t{t:02d}") for t in (2, 3)]
    book.store.apply([Event(DELETED, msgspec.to_builtins(p)) for p in freed if p is not None])
    clock.now += 1  # well inside the usual pause: only the freed GPUs make it ask again
    placed = ask(book, pod=1)
    assert placed.feasible and placed.plan.domains == ("r1",)  # the one rack it waited for


def test_where_nothing_runs_to_make_room_a_gang_takes_its_best_plan_at_once() -> None:
    """The idle fleet's minimum is a bound a gang of mixed pod shapes may never reach: 14 pods of 4 GPUs and 5 of 3
    (71 GPUs, one rack's worth) need 19 trays, one more than a rack has. With no job running on the platform, no
    end can bring better room, so it does not wait for it (two gangs waiting on each other would wait for ever)."""
    clock = Clock(T0)
    idle = [o for o in fleet_objects() if o["kind"] == "Node"]
    mixed = gang_pods("mixed", T0, pods=19, annotations=RUNTIME)
    for p in mixed[14:]:
        p["spec"]["containers"][0]["resources"] = {
            "limits": {"nvidia.com/gpu": "3"},
            "requests": {"nvidia.com/gpu": "3"},
        }
    book = book_over([*idle, *mixed], clock)
    plan = ask(book, "mixed")
    assert plan.feasible and not plan.waiting and len(plan.plan.domains) == 2
    busy = book_over([*idle, *mixed, pod_json("other", 1, node="r1-t17")], clock)
    assert ask(busy, "mixed").waiting  # one job runs: its end might bring the room, so the rule applies
