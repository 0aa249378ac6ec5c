"""Kept reservations at every door, on the expected-starts scenario (``tests.gangs.starts_scenario``).

``rack-a`` (a whole rack, ClusterQueue ``gpu``'s oldest waiting gang) is
kept ``r1`` from ``NOW + 1h``, when JobSet ``short`` ends there. Work that
would outlast that moment on ``r1`` is steered to ``r2`` or waits; work that
ends first backfills; and every door says so in the same sentence, the one
``kubectl kilter pending`` shows for ``rack-a``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilter.cli.kubectl.served import ServedViews
from kilter.extenders.explain import DecisionLog
from kilter.extenders.readings import GangReading
from kilter.extenders.scheduler import SchedulerExtender
from kilter.extenders.volcano import VolcanoExtender
from kilter.gangs.book import BookSettings, GangBook
from kilter.gangs.waits import SplitWaits
from kilter.state.store import ADDED, ClusterStore, Event
from kilter.webhooks.admissioncheck import decide
from tests.extenders.conftest import names_args, pod_json
from tests.extenders.volcano import payloads as vp
from tests.gangs import starts_scenario as sc
from tests.gangs.wait_scenario import stamp
from tests.topology.builders import CLIQUE
from tests.webhooks.test_admissioncheck import CHECK, admission_check

SENTENCE = "r1 is reserved for ml/rack-a from 2026-05-28T21:26:40Z"  # NOW + 1h
NOW_TEXT = "2026-05-28T20:26:40Z"  # sc.NOW
R1 = [f"r1-t{t:02d}" for t in range(18)]
R2 = [f"r2-t{t:02d}" for t in range(18)]


def book_on(objects: list[dict[str, Any]], *, reservations: bool = True) -> GangBook:
    store = ClusterStore()
    store.replace(objects)
    waits = SplitWaits(store, wall=lambda: sc.NOW)
    book = GangBook(store, settings=BookSettings(reservations=reservations), waits=waits, wall=lambda: sc.NOW)
    book.starts.at(sc.NOW)  # what the server's background refresh does every few seconds
    return book


def lone(name: str, runtime: str | None) -> dict[str, Any]:
    return pod_json(name, 4, annotations={sc.RUNTIME: runtime} if runtime else None)


def filtered(book: GangBook, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    extender = SchedulerExtender(book.store, book, DecisionLog())
    answer = extender.filter(json.dumps(names_args(pod, nodes)).encode())
    assert answer.status == 200
    result: dict[str, Any] = json.loads(answer.body)
    return result


def test_the_kept_reservation_is_the_queue_s_oldest_rack_gang_and_pending_says_the_same_sentence() -> None:
    book = book_on(sc.objects())
    kept = book.kept()
    assert kept is not None and [r.owner for r in kept.reservations] == ["ml/rack-a"]
    assert kept.sentences == [SENTENCE]
    rack_a = kept.starts.of("Workload", "ml", "rack-a")
    assert rack_a is not None and rack_a.reason == SENTENCE and rack_a.start_s == sc.NOW + sc.HOUR
    assert book_on(sc.objects(), reservations=False).kept() is None  # off by default: nothing kept


def test_a_lone_pod_that_would_outlast_the_reservation_is_kept_off_the_rack_with_the_reason() -> None:
    book = book_on(sc.objects())
    result = filtered(book, lone("forever", None), ["r1-t00", "r1-t01", "r2-t00"])
    assert result["NodeNames"] == ["r2-t00"]
    assert result["FailedAndUnresolvableNodes"] == {
        "r1-t00": f"the pod would delay a reservation: {SENTENCE}",
        "r1-t01": f"the pod would delay a reservation: {SENTENCE}",
    }
    quick = filtered(book, lone("quick", "30m"), ["r1-t00", "r1-t01", "r2-t00"])
    assert quick["NodeNames"] == ["r1-t00", "r1-t01", "r2-t00"]  # it ends before NOW + 1h: it backfills
    unkept = filtered(book_on(sc.objects(), reservations=False), lone("forever", None), ["r1-t00"])
    assert unkept["NodeNames"] == ["r1-t00"]


def test_a_lone_pod_with_a_runtime_that_does_not_read_is_refused_in_the_error_field() -> None:
    result = filtered(book_on(sc.objects()), lone("bad", "soon"), ["r1-t00"])
    assert "kilter.dev/expected-runtime" in result["Error"] and not result.get("NodeNames")


def test_a_gang_that_would_delay_the_reservation_is_steered_to_the_other_rack_and_waits_when_there_is_none() -> None:
    objects = [o for o in sc.objects() if not o["metadata"]["name"].startswith("small-")]
    book = book_on([*objects, *sc.small_gang(sc.NOW - 600, runtime="5h")])
    result = filtered(book, sc.small_gang(sc.NOW - 600, runtime="5h")[0], R1[:2] + R2[:2])
    assert sorted(result["NodeNames"]) == ["r2-t00", "r2-t01"]
    plan = book.plan_of("ml/gang/small")
    assert plan is not None and f"steered around a reservation: {SENTENCE}" in plan.plan.reason
    assert book.steered == 1
    # r2's free trays taken too: nowhere to go that ends after NOW + 1h without delaying rack-a
    busy = [sc.running_pod(f"x-{t}", f"r2-t0{t}", labels={}, runtime="9h", started_s=sc.NOW) for t in range(2)]
    book = book_on([*objects, *busy, *sc.small_gang(sc.NOW - 600, runtime="5h")])
    result = filtered(book, sc.small_gang(sc.NOW - 600, runtime="5h")[0], R1[:2] + R2[:2])
    assert result["NodeNames"] == [] and result["FailedNodes"]["r1-t00"] == f"waits: {SENTENCE}"
    assert book.turned_away == 1
    [family] = [f for f in GangReading(book).collect() if f.name == "kilter_gang_plans_around_reservations"]
    assert {s.labels["outcome"]: s.value for s in family.samples} == {"steered": 0, "waiting": 1}
    # the same gang declaring 30 m ends first: it backfills r1
    book = book_on(sc.objects())
    result = filtered(book, sc.small_gang(sc.NOW - 600)[0], R1[:2] + R2[:2])
    assert sorted(result["NodeNames"]) == ["r1-t00", "r1-t01"] and book.steered == 0


def test_preempt_never_frees_a_reserved_rack_for_a_lone_pod_that_would_outlast_the_reservation() -> None:
    book = book_on(sc.objects())
    extender = SchedulerExtender(book.store, book, DecisionLog())
    body = {
        "Pod": lone("urgent", None),
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "r1-t02": {"Pods": [{"UID": "uid-short-2"}], "NumPDBViolations": 0},
            "r2-t02": {"Pods": [{"UID": "uid-long-2"}], "NumPDBViolations": 0},
        },
    }
    answer = extender.preempt(json.dumps(body).encode())
    assert answer.status == 200
    assert json.loads(answer.body) == {
        "NodeNameToMetaVictims": {"r2-t02": {"Pods": [{"UID": "uid-long-2"}], "NumPDBViolations": 0}}
    }
    [record] = extender.log.explain("ml", "urgent") or []
    dropped = {n["node"]: n["reason"] for n in record["nodes"] if n["verdict"] == "dropped"}
    assert dropped == {"r1-t02": f"the pod would delay a reservation: {SENTENCE}"}


@pytest.mark.parametrize(("runtime", "passes"), [(None, False), ("30m", True)], ids=["outlasts", "ends-first"])
def test_volcano_s_predicate_gives_the_same_reason_for_a_task_of_no_gang(runtime: str | None, passes: bool) -> None:
    book = book_on(sc.objects())
    volcano = VolcanoExtender(book.store, book)
    task = vp.task_info(lone("task", runtime))
    node = vp.node_info("r1-t00", gpus=4, labels={CLIQUE: "r1"})
    answer = volcano.call("predicate", json.dumps(vp.predicate_args(task, node)).encode())
    assert answer.status == 200
    result = json.loads(answer.body)
    if passes:
        assert result["code"] == 0, result
    else:
        assert result == {
            "status": f"the pod would delay a reservation: {SENTENCE}",
            "code": vp.UNSCHEDULABLE_AND_UNRESOLVABLE,
        }


@pytest.mark.parametrize(("runtime", "r1_scores"), [(None, False), ("30m", True)], ids=["outlasts", "ends-first"])
def test_both_prioritize_verbs_score_a_lone_pod_zero_where_it_would_delay_the_reservation(
    runtime: str | None, r1_scores: bool
) -> None:
    book = book_on(sc.objects())
    pod = lone("lone", runtime)
    nodes = ["r1-t00", "r2-t00"]
    answer = SchedulerExtender(book.store, book, DecisionLog()).prioritize(json.dumps(names_args(pod, nodes)).encode())
    assert answer.status == 200
    scheduler = {h["Host"]: h["Score"] for h in json.loads(answer.body)}
    book.store.apply([Event(ADDED, pod)])  # a prioritize body's task is read without its Pod: kilter's watch has it
    volcano = VolcanoExtender(book.store, book)
    offered = [vp.node_info(n, gpus=4, labels={CLIQUE: n[:2]}) for n in nodes]
    answer = volcano.call("prioritize", json.dumps(vp.prioritize_args(vp.task_info(pod), offered)).encode())
    assert answer.status == 200
    result = json.loads(answer.body)
    assert result["errorMessage"] == ""
    for scores in (scheduler, result["nodeScore"]):
        assert scores["r2-t00"] > 0
        assert (scores["r1-t00"] > 0) is r1_scores, (scheduler, result)
    unkept = book_on(sc.objects(), reservations=False)
    answer = SchedulerExtender(unkept.store, unkept, DecisionLog()).prioritize(
        json.dumps(names_args(pod, nodes)).encode()
    )
    assert {h["Host"]: h["Score"] for h in json.loads(answer.body)}["r1-t00"] > 0  # nothing kept: r1 scores


def _quota_reserved(wl: dict[str, Any]) -> dict[str, Any]:
    wl["status"] = {
        "conditions": [
            {
                "type": "QuotaReserved",
                "status": "True",
                "reason": "QuotaReserved",
                "message": "",
                "lastTransitionTime": stamp(sc.NOW - 60),
            },
        ],
        "admission": {
            "clusterQueue": "gpu",
            "podSetAssignments": [{"name": "main", "flavors": {sc.GPU: "gb200"}, "resourceUsage": {sc.GPU: "4"}}],
        },
        "admissionChecks": [
            {"name": CHECK, "state": "Pending", "lastTransitionTime": stamp(sc.NOW - 60), "message": ""}
        ],
    }
    return wl


def test_the_admission_check_steers_a_workload_around_the_reservation_and_tells_its_owner_when_it_starts() -> None:
    objects = sc.objects()
    rack_a = next(o for o in objects if o["metadata"]["name"] == "rack-a")
    _quota_reserved(rack_a)
    one = _quota_reserved(sc.workload("one", 1, runtime="5h", created_s=sc.NOW - 120))
    book = book_on([*objects, admission_check(CHECK, "kilter.dev/topology"), one])
    state, fleet = book.store.state(), book.store.fleet()
    decisions = {d.workload: d for d in decide(state, fleet, book.store.idle_fleet(), now_s=sc.NOW, kept=book.kept())}
    assert decisions["rack-a"].state == "Retry"
    assert decisions["rack-a"].message.endswith(f"; waiting for its reservation: {SENTENCE}")
    assert decisions["one"].state == "Ready"
    assert decisions["one"].message.endswith(f"steered around a reservation: {SENTENCE}")
    assert decisions["one"].pod_set_updates == [{"name": "main", "nodeSelector": {CLIQUE: "r2"}}]
    unkept = {d.workload: d for d in decide(state, fleet, book.store.idle_fleet(), now_s=sc.NOW)}
    assert unkept["one"].pod_set_updates == [{"name": "main", "nodeSelector": {CLIQUE: "r1"}}]  # best fit, alone
    assert "reservation" not in unkept["rack-a"].message


def test_every_replica_and_a_restarted_kilter_keep_the_same_reservation_from_the_same_objects() -> None:
    first, second = book_on(sc.objects()), book_on(list(reversed(sc.objects())))
    a, b = first.kept(), second.kept()
    assert a is not None and b is not None
    assert a.reservations == b.reservations and a.sentences == b.sentences


def test_kilter_s_own_pending_view_marks_the_kept_reservation_in_the_doors_words() -> None:
    book = book_on(sc.objects())
    views = ServedViews(book.store, None, book.starts)
    status, body = views.answer(json.dumps({"argv": ["pending", "-A", "-o", "json", "--now", NOW_TEXT]}).encode())
    assert status == 200
    found = {p["name"]: p for p in json.loads(json.loads(body)["output"])["pending"]}
    assert found["rack-a"]["reservationKept"] and found["rack-a"]["expectedStartReason"] == SENTENCE
    assert not found["rack-b"]["reservationKept"]  # promised, as squeue --start shows, but not kept


def test_a_kept_gang_s_pods_find_its_reservation_by_the_job_that_owns_its_workload() -> None:
    """A JobSet's pods name the JobSet, not Kueue's Workload: the reservation is theirs all the same."""
    objects = sc.objects()
    rack_a = next(o for o in objects if o["metadata"]["name"] == "rack-a")
    rack_a["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train-a", "uid": "u", "controller": True}
    ]
    kept = book_on(objects).kept()
    assert kept is not None
    assert kept.owner("ml", ["train-a"]) == kept.owner("ml", ["rack-a"]) == "ml/rack-a"
    assert kept.owner("ml", ["rack-b"]) is None and kept.owner("other", ["rack-a"]) is None
