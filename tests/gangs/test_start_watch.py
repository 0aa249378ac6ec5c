"""Which promised starts came true and how late, and which gangs started ahead of another's reservation, from one
expected-starts answer to the next (``tests.gangs.starts_scenario``: rack-a promised r1 at NOW + 1h, small now)."""

from __future__ import annotations

from typing import Any

from kilter.gangs.expected_starts import expected_starts
from kilter.gangs.start_watch import Started, StartWatch
from kilter.gangs.store_starts import StartsOfStore
from kilter.state.cluster import from_objects
from kilter.state.store import ClusterStore
from tests.gangs import starts_scenario as sc
from tests.gangs.starts_scenario import HOUR, NOW
from tests.gangs.wait_scenario import stamp


def observe(watch: StartWatch, objects: list[dict[str, Any]], now_s: float) -> Started:
    state = from_objects(objects)
    return watch.observe(expected_starts(state, now_s=now_s), state.fleet())


def small_running(started_s: float) -> list[dict[str, Any]]:
    """``ml/small`` bound to r1's two free trays: beside rack-a's reservation, as it was promised."""
    labels = {"kilter.dev/gang": "small", "kilter.dev/gang-size": "2"}
    return [
        sc.running_pod(f"small-{i}", f"r1-t0{i}", labels=labels, runtime="30m", started_s=started_s) for i in range(2)
    ]


def rack_a_admitted(admitted_s: float) -> list[dict[str, Any]]:
    """Workload ``ml/rack-a`` admitted at ``admitted_s``, its JobSet's 18 pods running on r1."""
    wl = sc.workload("rack-a", 18, runtime="3h", created_s=NOW - 1800)
    wl["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "rack-a", "uid": "uid-js-a"}
    ]
    wl["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": stamp(admitted_s)}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": "gpu",
            "podSetAssignments": [{"name": "main", "flavors": {sc.GPU: "gb200"}, "resourceUsage": {sc.GPU: "72"}}],
        },
    }
    labels = {"jobset.sigs.k8s.io/jobset-name": "rack-a"}
    pods = [
        sc.running_pod(f"rack-a-{t}", f"r1-t{t:02d}", labels=labels, runtime="3h", started_s=admitted_s + 30)
        for t in range(18)
    ]
    return [wl, *pods]


def test_a_promised_start_is_scored_once_and_a_gang_beside_a_reservation_counts_as_backfilled() -> None:
    watch = StartWatch()
    pending = sc.objects()
    assert observe(watch, pending, NOW) == Started()  # promises only: rack-a +1h, rack-b +4h, small now
    assert watch.promised == {"ml/rack-a": NOW + HOUR, "ml/rack-b": NOW + 4 * HOUR, "ml/small": NOW}
    # small started 30 s after its promise, on r1, which rack-a has from NOW + 1h: it went ahead of rack-a there.
    base = [o for o in pending if not o["metadata"]["name"].startswith("small-")]
    seen = observe(watch, [*base, *small_running(NOW + 30)], NOW + 60)
    assert seen == Started((30.0,), 1)
    assert observe(watch, [*base, *small_running(NOW + 30)], NOW + 90) == Started()  # scored once
    # short and small ended; rack-a was admitted 10 minutes after its promise and runs on r1.
    later = [
        o
        for o in base
        if o["metadata"]["name"] != "rack-a"
        and not o["metadata"]["name"].startswith("short-")
        and o["metadata"]["name"] != "jobset-short-1a2b3"
    ]
    seen = observe(watch, [*later, *rack_a_admitted(NOW + HOUR + 600)], NOW + HOUR + 700)
    assert seen == Started((600.0,), 0)  # on its own reservation: not backfilled
    assert set(watch.promised) == {"ml/rack-b"}


def test_a_gang_that_leaves_the_queue_without_starting_is_forgotten() -> None:
    watch = StartWatch()
    observe(watch, sc.objects(), NOW)
    gone = [o for o in sc.objects() if o["metadata"]["name"] != "rack-b"]
    assert observe(watch, gone, NOW + 60) == Started()
    assert "ml/rack-b" not in watch.promised


def test_a_stores_expected_starts_are_worked_out_again_only_past_their_age_or_on_a_new_state() -> None:
    """``recent`` shares one answer among readers for ``max_age_s`` whatever changed (a scrape, a served view);
    ``at`` works it out again for a new state; each answer worked out is told to ``observe``."""
    store = ClusterStore()
    store.replace(sc.objects())
    told: list[float] = []
    starts = StartsOfStore(store, lambda: NOW, max_age_s=10.0, observe=lambda found, _: told.append(found.now_s))
    first = starts.recent(NOW)
    assert starts.recent(NOW + 10) is first and starts.at(NOW) is first and told == [NOW]
    store.replace([o for o in sc.objects() if o["metadata"]["name"] != "rack-b"])
    assert starts.recent(NOW + 9) is first  # a new state, but the answer is young enough for every reader
    fresh = starts.at(NOW + 9)  # asked for this state, at this moment
    assert fresh is not first and fresh.of("Workload", "ml", "rack-b") is None
    assert starts.recent(NOW + 19) is fresh
    assert starts.recent(NOW + 19.9) is fresh  # whole seconds: a moment within the same second
    later = starts.recent(NOW + 20)
    assert later is not fresh and later.now_s == NOW + 20 and told == [NOW, NOW + 9, NOW + 20]
    assert starts.held() == later.held
