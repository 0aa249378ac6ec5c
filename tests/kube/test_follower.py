"""Following kube-scheduler's Lease: kilter writes while the scheduler in its own pod holds it, and never writes it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from kilter.kube.api import ApiServer
from kilter.kube.follower import LeaseFollower
from kilter.kube.leader import LeaderElector
from kilter.model.errors import InputError
from tests.fakeapi import FakeApi
from tests.kube.test_leader import FAST, NAME, NAMESPACE, Clock, LeaseStore, eventually, serving
from tests.listwatch import ListWatchServer, Resource


@pytest.fixture
def store() -> LeaseStore:
    return LeaseStore()


@pytest.fixture
def server(store: LeaseStore) -> Iterator[FakeApi]:
    with serving(store.respond) as fake:
        yield fake


def api(server: FakeApi, who: str) -> ApiServer:
    return ApiServer("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {who}"})


def scheduler(server: FakeApi, pod: str) -> LeaderElector:
    """A kube-scheduler replica of pod ``pod``: it names itself ``<hostname>_<uuid>`` in the Lease."""
    return LeaderElector(api(server, f"scheduler-{pod}"), NAMESPACE, NAME, f"{pod}_8c0e6b1f", **FAST)


def follower(server: FakeApi, pod: str, clock: Clock | None = None) -> LeaseFollower:
    return LeaseFollower(
        api(server, f"kilter-{pod}"), NAMESPACE, NAME, pod, retry_period_s=0.02, **({"clock": clock} if clock else {})
    )


def test_the_kilter_beside_the_leading_scheduler_writes_and_the_other_does_not(
    server: FakeApi, store: LeaseStore
) -> None:
    leading, waiting = scheduler(server, "sched-a"), scheduler(server, "sched-b")
    beside_a, beside_b = follower(server, "sched-a"), follower(server, "sched-b")
    leading.start()
    try:
        assert eventually(lambda: leading.is_leader)
        waiting.start()
        beside_a.start()
        beside_b.start()
        assert eventually(lambda: beside_a.is_leader)
        assert eventually(lambda: beside_b.holder == "sched-a_8c0e6b1f") and not beside_b.is_leader
        leading.stop()  # releases: the other scheduler takes over, and so does the kilter beside it
        assert eventually(lambda: waiting.is_leader)
        assert eventually(lambda: beside_b.is_leader) and eventually(lambda: not beside_a.is_leader)
    finally:
        for who in (leading, waiting, beside_a, beside_b):
            who.stop(release=False)
    for pod in ("sched-a", "sched-b"):
        assert store.count("GET", f"kilter-{pod}") > 0
        assert store.count("PUT", f"kilter-{pod}") == store.count("POST", f"kilter-{pod}") == 0  # never writes


def test_a_scheduler_that_stops_renewing_stops_kilter_writing_before_others_may_take_over(
    server: FakeApi, store: LeaseStore
) -> None:
    leading = scheduler(server, "sched-a")
    leading.start()
    assert eventually(lambda: leading.is_leader)
    leading.stop(release=False)  # it dies: the Lease stays, no longer renewed
    clock = Clock()
    beside = follower(server, "sched-a", clock)
    beside.poll()
    assert beside.is_leader
    duration = store.spec()["leaseDurationSeconds"]  # 2 s (FAST)
    clock.advance(duration - beside.retry_period_s * 2.2 - 0.01)
    beside.poll()  # nothing changed: the count goes on from the first sight
    assert beside.is_leader
    clock.advance(0.02)
    assert not beside.is_leader  # a poll interval before anyone else could see the Lease run out


def test_no_lease_or_an_unreachable_server_means_no_writes(server: FakeApi, store: LeaseStore) -> None:
    beside = follower(server, "sched-a")
    beside.poll()
    assert not beside.is_leader and beside.last_error == ""  # 404: nobody leads yet
    store.failing = True
    beside.poll()
    assert not beside.is_leader and "500" in beside.last_error


@pytest.mark.parametrize("namespace, name", [("kube-system", "../pods"), ("kube system", "kube-scheduler")])
def test_a_lease_no_api_server_would_accept_is_an_input_error(server: FakeApi, namespace: str, name: str) -> None:
    with pytest.raises(InputError):
        LeaseFollower(api(server, "kilter"), namespace, name, "node-a")
    with pytest.raises(InputError):
        LeaderElector(api(server, "kilter"), namespace, name, "node-a_1f3a", **FAST)
    assert server.calls == []


LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)


def test_kilter_reads_a_lease_kube_scheduler_holds_in_the_api_server_with_one_get_a_poll() -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "sched-a_8c0e6b1f", "leaseDurationSeconds": 15, "renewTime": now},
    }
    with ListWatchServer([LEASES]) as cluster:
        cluster.add(lease)
        beside_a = LeaseFollower(ApiServer("http", cluster.host, cluster.port), NAMESPACE, NAME, "sched-a")
        beside_b = LeaseFollower(ApiServer("http", cluster.host, cluster.port), NAMESPACE, NAME, "sched-b")
        beside_a.poll()
        beside_b.poll()
        assert beside_a.is_leader and not beside_b.is_leader
        assert beside_b.holder == "sched-a_8c0e6b1f"
        calls = [(r.method, r.path) for r in cluster.requests]
        assert calls == [("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{NAME}")] * 2
