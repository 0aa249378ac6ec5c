"""Expected starts from the cluster's objects (``tests.gangs.starts_scenario``): exact starts and domains, the queue
order, no promise without an estimate, bad runtime annotations that never stall the view, and the same answer from
the same objects."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from kilter.gangs.expected_starts import ExpectedStarts, expected_starts
from kilter.gangs.start_search import first_start
from kilter.state.cluster import from_objects
from kilter.topology.reservations import Holdings, Reservation, earliest_start
from tests.extenders.conftest import pod_json
from tests.gangs import starts_scenario as sc
from tests.gangs.starts_scenario import HOUR, NOW
from tests.gangs.wait_scenario import finished_workload, stamp
from tests.topology.test_reservations import NOW as SPACE_NOW
from tests.topology.test_reservations import random_gang, random_scenario

KUEUE = "kueue.x-k8s.io/v1beta1"


def starts_of(objects: list[dict[str, Any]]) -> ExpectedStarts:
    return expected_starts(from_objects(objects), now_s=NOW)


def table(found: ExpectedStarts) -> list[tuple[str, float | None, tuple[str, ...]]]:
    """(owner, seconds from NOW to its start, domains) in queue order."""
    return [(s.gang.owner, None if s.start_s is None else s.start_s - NOW, s.domains) for s in found.starts]


def test_running_gangs_end_at_admission_or_start_plus_their_declared_runtime() -> None:
    found = starts_of(sc.objects())
    held = {h.key: h for h in found.holdings}
    assert set(held) == {"ml/jobset/short", "ml/gang/long"}
    short, long = held["ml/jobset/short"], held["ml/gang/long"]
    # the JobSet's Workload was admitted at NOW - 1h (its pods started 30 s later): 2 h from admission
    assert (short.started_s, short.runtime_s, short.expected_end_s) == (NOW - HOUR, 2 * HOUR, NOW + HOUR)
    # a gang of bare pods started at its pods' earliest status.startTime (created a minute before)
    assert (long.started_s, long.runtime_s, long.expected_end_s) == (NOW - HOUR, 5 * HOUR, NOW + 4 * HOUR)
    assert sorted(len(h.nodes) for h in found.holdings) == [16, 16] and set(short.gpus) == {4}


def test_two_pending_rack_gangs_get_exact_starts_and_a_small_gang_backfills_now() -> None:
    found = starts_of(sc.objects())
    assert table(found) == [
        ("ml/rack-a", HOUR, ("r1",)),  # r1 frees when ml/short ends
        ("ml/rack-b", 4 * HOUR, ("r1",)),  # r2 frees at +4 h; r1 is rack-a's until then
        ("ml/small", 0.0, ("r1",)),  # two free trays of r1, done before rack-a's reservation starts
    ]
    a = found.of("Workload", "ml", "rack-a")
    assert a is not None and a.reservation is not None
    assert a.reservation.expected_end_s == NOW + 4 * HOUR and a.reservation.pods == (18,)
    assert a.reason == "r1 is reserved for ml/rack-a from 2026-05-28T21:26:40Z"
    assert found.held == 3


def test_the_queue_orders_by_priority_then_creation() -> None:
    objects = sc.objects()
    b = next(o for o in objects if o["metadata"]["name"] == "rack-b")
    b["spec"]["priority"] = 10
    b["spec"]["priorityClassName"] = "urgent"
    b["spec"]["priorityClassSource"] = "kueue.x-k8s.io/workloadpriorityclass"
    urgent = {"apiVersion": KUEUE, "kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"}, "value": 10}
    found = starts_of([*objects, urgent])
    assert table(found) == [
        ("ml/rack-b", HOUR, ("r1",)),  # younger, but of higher priority: first; 1 h on r1
        ("ml/rack-a", 2 * HOUR, ("r1",)),  # then r1 again once rack-b is done, before r2 frees at +4 h
        ("ml/small", 0.0, ("r1",)),
    ]


def test_a_gang_whose_room_only_unestimated_jobs_hold_is_promised_nothing_and_says_why() -> None:
    found = starts_of(sc.objects(short=None, long=None))
    assert [h.expected_end_s for h in found.holdings] == [math.inf, math.inf]
    assert table(found) == [("ml/rack-a", None, ()), ("ml/rack-b", None, ()), ("ml/small", 0.0, ("r1",))]
    a = found.of("Workload", "ml", "rack-a")
    assert a is not None and a.reason.startswith("no start can be promised: the GPUs it needs are held by jobs")
    assert found.held == 1


def test_a_running_gang_without_a_declared_runtime_ends_as_its_queue_s_finished_runs_did() -> None:
    finished = [finished_workload(f"done-{i}", hours, gpus=64) for i, hours in enumerate((3.0, 3.0, 3.0))]
    found = starts_of([*sc.objects(short=None), *finished])
    short = next(h for h in found.holdings if h.key == "ml/jobset/short")
    assert short.runtime_s == 3 * HOUR and short.expected_end_s == NOW + 2 * HOUR
    assert table(found)[0] == ("ml/rack-a", 2 * HOUR, ("r1",))


@pytest.mark.parametrize("bad", ["-5h", "soon", "nan", "0s"])
def test_a_pending_gang_with_a_bad_runtime_shows_the_error_and_the_others_still_get_starts(bad: str) -> None:
    found = starts_of(sc.objects(a=bad))
    a = found.of("Workload", "ml", "rack-a")
    assert a is not None and a.reservation is None
    assert "kilter.dev/expected-runtime" in a.reason and "Workload ml/rack-a" in a.reason
    assert table(found)[1:] == [("ml/rack-b", HOUR, ("r1",)), ("ml/small", 0.0, ("r1",))]


def test_an_absurd_pending_runtime_is_a_very_long_reservation_not_a_stall() -> None:
    found = starts_of(sc.objects(a="99999999999h"))
    assert table(found) == [
        ("ml/rack-a", HOUR, ("r1",)),
        ("ml/rack-b", 4 * HOUR, ("r2",)),  # r1 is rack-a's for ever after
        ("ml/small", 0.0, ("r1",)),  # done before rack-a starts
    ]


@pytest.mark.parametrize("bad", ["-5h", "soon", "1" + "0" * 400 + "s", "99999999999999h"])
def test_a_running_gang_with_a_bad_runtime_holds_its_gpus_and_the_view_goes_on(bad: str) -> None:
    found = starts_of(sc.objects(long=bad))
    long = next(h for h in found.holdings if h.key == "ml/gang/long")
    assert long.expected_end_s > NOW + 1e9  # never, or as good as never: nothing is promised on r2 soon
    if bad in ("-5h", "soon"):
        assert "kilter.dev/expected-runtime" in long.problem and long.runtime_s is None
    assert table(found) == [
        ("ml/rack-a", HOUR, ("r1",)),
        ("ml/rack-b", 4 * HOUR, ("r1",)),  # after rack-a, on r1: r2 does not free
        ("ml/small", 0.0, ("r1",)),
    ]


def test_the_same_objects_give_the_same_starts_whatever_their_order() -> None:
    objects = sc.objects()
    first = table(starts_of(objects))
    shuffled = list(objects)
    random.Random(3).shuffle(shuffled)
    assert table(starts_of(shuffled)) == first == table(starts_of(sc.objects()))


def test_a_pending_volcano_podgroup_queues_with_its_pods() -> None:
    group = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "vc", "namespace": "ml", "creationTimestamp": stamp(NOW - 900)},
        "spec": {"minMember": 2, "queue": "default"},
        "status": {"phase": "Pending"},
    }
    pods = []
    for i in range(2):
        pod = pod_json(f"vc-{i}", 4, annotations={"scheduling.k8s.io/group-name": "vc", sc.RUNTIME: "1h"})
        pod["metadata"]["creationTimestamp"] = stamp(NOW - 900)
        pods.append(pod)
    found = starts_of([*sc.objects(), group, *pods])
    assert [s.gang.owner for s in found.starts] == ["ml/rack-a", "ml/rack-b", "ml/vc", "ml/small"]
    vc = found.of("PodGroup", "ml", "vc")
    assert vc is not None and vc.start_s == NOW and vc.gang.runtime_s == HOUR


def test_the_search_over_many_moments_gives_earliest_start_s_very_answer() -> None:
    rng = random.Random(39)
    for _ in range(400):
        space, holdings = random_scenario(rng)
        rows = Holdings.of(holdings)
        made: list[Reservation] = []
        for i in range(rng.randint(1, 8)):
            gang, k = random_gang(rng), rng.randint(1, space.n_domains)
            runtime = rng.choice([0.0, 5.0, 25.0, 50.0, None])
            want = earliest_start(f"ns/g{i}", gang, k, space, rows, made, SPACE_NOW, runtime)
            assert first_start(f"ns/g{i}", gang, k, space, rows, made, SPACE_NOW, runtime) == want
            if want is not None:
                made.append(want)


def test_a_deactivated_workload_and_a_gang_already_starting_are_not_queued() -> None:
    objects = sc.objects()
    next(o for o in objects if o["metadata"]["name"] == "rack-a")["spec"]["active"] = False
    small = next(o for o in objects if o["metadata"]["name"] == "small-0")
    small["spec"]["nodeName"], small["status"]["phase"] = "r2-t00", "Running"  # one pod of small bound already
    found = starts_of(objects)
    assert table(found) == [("ml/rack-b", HOUR, ("r1",))]
    assert "ml/gang/small" in {h.key for h in found.holdings}
