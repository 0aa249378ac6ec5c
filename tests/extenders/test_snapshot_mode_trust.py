"""With ``--snapshot`` kilter's state is minutes old, so the bounds that wait for a list/watch feed are lifted there.

A live feed shows a new pod within a second: a plan for a pod it does not
show is dropped after ``trust.Limits.grace_s`` (30 s), and a booking of a bind
it never confirms after ``ClusterStore.assume_ttl_s`` (120 s). A snapshot
refreshed by a CronJob shows them minutes later, so there a plan for pods it
does not show lives as long as any plan (the gang timeout), and a booking
lasts until a snapshot shows its pod.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.serve import build_app
from kilter.gangs import GangBook, trust
from kilter.state.store import ASSUME_TTL_S
from tests.extenders.conftest import (
    Served,
    _Server,
    cluster_objects,
    names_args,
    pod_json,
    serve_config,
    serve_snapshot,
)
from tests.live_mode import live_cluster, wait_ready

RACKS = [f"r{r}-t{t:02d}" for r in (1, 2) for t in range(18)]
LIVE_GRACE_S = trust.Limits().grace_s


def gang_pod(name: str, gang: str, size: int, *, node: str = "") -> dict[str, Any]:
    return pod_json(name, 4, labels={"kilter.dev/gang": gang, "kilter.dev/gang-size": str(size)}, node=node)


def book(served: Served) -> GangBook:
    return served.app.extender.gangs


def reloaded(served: Served, objects: list[dict[str, Any]]) -> None:
    """Write the next snapshot and wait until kilter's state is that snapshot."""
    version = served.store.version
    served.replace(objects)
    deadline = time.monotonic() + 10
    while served.store.version == version:
        assert time.monotonic() < deadline, "the snapshot was not reloaded"
        time.sleep(0.02)


@pytest.fixture
def snapshot_served(tmp_path: Path) -> Iterator[Served]:
    with serve_snapshot(tmp_path) as served:
        yield served


def test_a_plan_for_pods_the_snapshot_does_not_show_yet_outlives_the_live_grace(snapshot_served: Served) -> None:
    gangs = book(snapshot_served)
    now = [0.0]
    gangs.clock = lambda: now[0]
    _, first = snapshot_served.post("filter", names_args(gang_pod("train-0", "train", 10), RACKS))
    planned = first["NodeNames"]
    assert len(planned) == 10 and (p := gangs.plan_of("ml/gang/train")) is not None and not p.verified
    now[0] = LIVE_GRACE_S + 1
    _, second = snapshot_served.post("filter", names_args(gang_pod("train-1", "train", 10), RACKS))
    assert second["NodeNames"] == planned  # the gang's plan, still held for it
    assert gangs.unverified_dropped == 0 and len(snapshot_served.store.reservation("ml/gang/train")) == 10


def test_a_plan_for_pods_the_snapshot_never_shows_goes_after_the_gang_timeout_like_any_plan(
    snapshot_served: Served,
) -> None:
    gangs = book(snapshot_served)
    now = [0.0]
    gangs.clock = lambda: now[0]
    snapshot_served.post("filter", names_args(gang_pod("ghost-0", "ghosts", 10), RACKS))
    assert gangs.is_planned("ml/gang/ghosts")
    now[0] = gangs.settings.timeout_s + 1
    snapshot_served.post("filter", names_args(gang_pod("other-0", "other", 2), RACKS))  # a gang's filter expires
    assert not gangs.is_planned("ml/gang/ghosts") and snapshot_served.store.reservation("ml/gang/ghosts") == ()


def test_the_snapshot_that_shows_the_gangs_pods_minutes_later_verifies_their_plan(snapshot_served: Served) -> None:
    gangs = book(snapshot_served)
    now = [0.0]
    gangs.clock = lambda: now[0]
    pods = [gang_pod(f"train-{i}", "train", 4) for i in range(4)]
    _, first = snapshot_served.post("filter", names_args(pods[0], RACKS))
    planned = first["NodeNames"]
    now[0] = 4 * 60.0  # the CronJob's next snapshot
    reloaded(snapshot_served, [*cluster_objects(), *pods])
    _, again = snapshot_served.post("filter", names_args(pods[1], RACKS))
    assert again["NodeNames"] == planned and (p := gangs.plan_of("ml/gang/train")) is not None and p.verified


def test_an_assumed_booking_lasts_until_a_snapshot_shows_the_pod(snapshot_served: Served) -> None:
    store = snapshot_served.store
    now = [0.0]
    store.clock = lambda: now[0]
    pod = pod_json("p", 4)
    snapshot_served.post("filter", names_args(pod, ["r1-t00"]))
    bind = {"PodName": "p", "PodNamespace": "ml", "PodUID": "uid-p", "Node": "r1-t00"}
    assert snapshot_served.post("bind", bind) == (200, {"Error": ""})
    now[0] = 10 * ASSUME_TTL_S  # the snapshot is refreshed by hand, twenty minutes later
    _, full = snapshot_served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert full["NodeNames"] == [] and store.assumed_expired == 0
    booking = store.booking("uid-p")
    assert booking is not None and booking.assumed
    reloaded(snapshot_served, [*cluster_objects(), pod_json("p", 4, node="r1-t00")])
    booking = store.booking("uid-p")
    assert booking is not None and not booking.assumed  # the snapshot's booking replaced the assumed one
    reloaded(snapshot_served, cluster_objects())  # the pod is gone: so are its GPUs
    _, free = snapshot_served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
    assert free["NodeNames"] == ["r1-t00"] and store.assumed_expired == 0


def test_a_live_feed_keeps_the_two_minute_assume_time_and_the_thirty_second_grace(tmp_path: Path) -> None:
    with live_cluster(tmp_path, cluster_objects()) as cluster:
        app, store = build_app(serve_config(None, kubeconfig=cluster.kubeconfig))
        with _Server(app, None) as port:
            wait_ready(store)
            served = Served(app, store, None, port)
            gangs = book(served)
            now = [0.0]
            store.clock = gangs.clock = lambda: now[0]
            # A bind the feed never confirms holds its tray until two minutes have passed, and no longer.
            store.assume("uid-unseen", "r1-t00", 4)
            now[0] = 119.0
            _, held = served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
            assert held["NodeNames"] == [] and store.assumed_expired == 0
            now[0] = 121.0
            _, free = served.post("filter", names_args(pod_json("q", 4), ["r1-t00"]))
            assert free["NodeNames"] == ["r1-t00"] and store.assumed_expired == 1
            # A plan for pods the live state never shows outlives 29 seconds but not 31.
            _, planned = served.post("filter", names_args(gang_pod("ghost-0", "ghosts", 2), RACKS))
            assert len(planned["NodeNames"]) == 2
            now[0] += 29.0
            served.post("filter", names_args(gang_pod("other-0", "other", 2), RACKS))  # expires stale plans
            assert served.store.is_reserved("ml/gang/ghosts") and gangs.unverified_dropped == 0
            now[0] += 2.0
            served.post("filter", names_args(gang_pod("third-0", "third", 2), RACKS))
            assert not served.store.is_reserved("ml/gang/ghosts") and gangs.unverified_dropped >= 1
