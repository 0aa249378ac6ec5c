"""The MultiKueue dispatcher against the list/watch test server: what it nominates, how it writes, and that Kueue's
own apply can then admit the Workload (the field-manager trap)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kilter.kube.api import ApiServer
from kilter.pool.dispatch import KUEUE_ADMISSION, Dispatcher, nomination_body
from kilter.pool.inventory import DomainRoom, RegionInventory
from kilter.pool.peers import PeerTable
from kilter.state.store import ClusterStore
from tests.listwatch import ListWatchServer
from tests.pool.multikueue import (
    CHECK,
    POOL_RESOURCES,
    WORKLOADS,
    MultiKueue,
    kueue_api,
    manager_objects,
    reserve,
    workload,
    write_is_refused,
)

CLUSTERS = ["ap-south", "eu-west", "us-east"]
NOW = 1_000_000.0
GB200 = "GB200-NVL72"


def region(name: str, *pods_per_domain: int, age_s: float = 0.0, gpus: int = 1000) -> RegionInventory:
    rooms = tuple(DomainRoom(GB200, pods * 4, pods, 4) for pods in pods_per_domain)
    return RegionInventory(name, 1, NOW - age_s, rooms, {"research": gpus}, {"ml/research": "research"})


def table(*inventories: RegionInventory) -> PeerTable:
    t = PeerTable("eu-west")
    for inv in inventories:
        if inv.origin == "eu-west":
            t.publish(inv)
        else:
            t.offer([inv])
    return t


def setup(server: ListWatchServer, *wls: dict[str, Any]) -> ClusterStore:
    for obj in manager_objects(CLUSTERS):
        server.add(obj)
    for wl in wls:
        server.add(wl)
        reserve(server, wl)
    return store_of(server)


def store_of(server: ListWatchServer) -> ClusterStore:
    store = ClusterStore()
    objects = [o for r in POOL_RESOURCES for o in server.list_objects(r) if r.kind not in ("MultiKueueCluster",)]
    store.replace(objects)
    return store


def dispatcher(server: ListWatchServer, store: ClusterStore, t: PeerTable, **kw: Any) -> Dispatcher:
    return Dispatcher(
        store, ApiServer("http", server.host, server.port), t, {c: c for c in CLUSTERS}, wall=lambda: NOW, **kw
    )


def nominated(server: ListWatchServer, name: str) -> list[str]:
    return list(server.get_object(WORKLOADS, "ml", name)["status"].get("nominatedClusterNames") or [])


def test_a_gang_that_does_not_fit_at_home_goes_to_the_region_with_room_in_the_fewest_domains() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8, 6), region("us-east", 18), region("ap-south", 6, 6, 6))
        d = dispatcher(server, store, t)
        written = asyncio.run(d.run_once())
        assert [n.clusters for n in written] == [("us-east",)]
        assert nominated(server, "big") == ["us-east"]
        entries = server.get_object(WORKLOADS, "ml", "big")["metadata"]["managedFields"]
        owners = [m["manager"] for m in entries if "f:nominatedClusterNames" in m["fieldsV1"].get("f:status", {})]
        assert owners == [KUEUE_ADMISSION], "written as kueue-admission, or Kueue could not clear it"


def test_kueue_s_own_apply_admits_after_kilter_s_nomination_and_not_after_another_manager_s() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4), workload("other", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        asyncio.run(dispatcher(server, store, t).run_once())
        with ListWatchServer(POOL_RESOURCES) as east, ListWatchServer(POOL_RESOURCES) as south:
            mk = MultiKueue(server, {"us-east": east, "ap-south": south}, admits=lambda cluster, wl: True)
            # "other" nominated by someone applying under a manager of its own: Kueue's apply cannot clear it
            other = server.get_object(WORKLOADS, "ml", "other")
            body = nomination_body(other, ["us-east"])
            body["status"] = {"nominatedClusterNames": ["us-east"]}
            path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/other/status"
            kueue_api(server).apply(path, body, field_manager="some-dispatcher")
            refused = write_is_refused(mk.sync)
            assert refused is not None and refused.code == 422 and "mutually exclusive" in str(refused)
            assert server.get_object(WORKLOADS, "ml", "big")["status"]["clusterName"] == "us-east"
            assert "nominatedClusterNames" not in server.get_object(WORKLOADS, "ml", "big")["status"]
            checks = server.get_object(WORKLOADS, "ml", "big")["status"]["admissionChecks"]
            assert [(c["name"], c["state"]) for c in checks] == [(CHECK, "Ready")]


def test_nominating_keeps_every_field_kueue_admission_owns() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        before = server.get_object(WORKLOADS, "ml", "big")
        t = table(region("eu-west", 8), region("us-east", 18))
        asyncio.run(dispatcher(server, store, t).run_once())
        after = server.get_object(WORKLOADS, "ml", "big")
        assert {k: v for k, v in after["status"].items() if k != "nominatedClusterNames"} == before["status"]
        again = nomination_body(after, ["us-east"])
        path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/big/status"
        ApiServer("http", server.host, server.port).apply(path, again, field_manager=KUEUE_ADMISSION)
        assert (
            server.get_object(WORKLOADS, "ml", "big")["metadata"]["resourceVersion"]
            == after["metadata"]["resourceVersion"]
        ), "applying what the manager owns back is a no-op"


def test_a_workload_changed_since_it_was_read_is_a_conflict_not_an_overwrite() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        setup(server, workload("big", 16, 4))
        live = server.get_object(WORKLOADS, "ml", "big")
        reserve(server, live, cluster_queue="research-2")  # Kueue wrote meanwhile
        path = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ml/workloads/big/status"
        api = ApiServer("http", server.host, server.port)
        refused = write_is_refused(
            lambda: api.apply(path, nomination_body(live, ["us-east"]), field_manager=KUEUE_ADMISSION)
        )
        assert refused is not None and refused.code == 409
        assert server.get_object(WORKLOADS, "ml", "big")["status"]["admission"]["clusterQueue"] == "research-2"


def test_no_cluster_is_nominated_whose_inventory_is_stale_or_unknown() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18, age_s=45), region("ap-south", 9, 9))
        asyncio.run(dispatcher(server, store, t).run_once())
        assert nominated(server, "big") == ["ap-south"], "us-east has more room but has not been heard for 45 s"


def test_a_nominated_region_that_goes_stale_is_dropped_and_the_gang_goes_elsewhere() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        d = dispatcher(server, store, t)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["us-east"]
        later = NOW + 40  # us-east unheard since; ap-south heard again
        t.offer(
            [
                RegionInventory(
                    "ap-south", 2, later, t.held["ap-south"].domains, {"research": 1000}, {"ml/research": "research"}
                )
            ]
        )
        d.wall = lambda: later
        d.store = store_of(server)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["ap-south"]


def test_nothing_admitted_within_the_deadline_is_ranked_anew() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        d = dispatcher(server, store, t, deadline_s=30)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["us-east"]
        # us-east's room was taken meanwhile (its newer inventory says so); the nomination stands until the deadline
        t.offer(
            [
                RegionInventory(
                    "us-east",
                    2,
                    NOW + 10,
                    (DomainRoom(GB200, 8, 2, 4),),
                    {"research": 1000},
                    {"ml/research": "research"},
                )
            ]
        )
        t.offer(
            [
                RegionInventory(
                    "ap-south", 2, NOW + 10, t.held["ap-south"].domains, {"research": 1000}, {"ml/research": "research"}
                )
            ]
        )
        d.store = store_of(server)
        d.wall = lambda: NOW + 20
        assert asyncio.run(d.run_once()) == []
        d.wall = lambda: NOW + 31
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["ap-south"]


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"kilter.dev/avoid-regions": "us-east"}, ["ap-south"]),
        ({"kilter.dev/regions": "ap-south"}, ["ap-south"]),
        ({"kilter.dev/regions": "Not A Region"}, []),
    ],
)
def test_region_annotations_narrow_where_a_gang_may_go(annotations: dict[str, str], expected: list[str]) -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4, annotations=annotations))
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        d = dispatcher(server, store, t)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == expected
        if not expected:
            assert d.written.get("unplaceable") == 1


def test_a_queue_without_headroom_there_is_not_sent_there() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18, gpus=32), region("ap-south", 9, 9))
        asyncio.run(dispatcher(server, store, t).run_once())
        assert nominated(server, "big") == ["ap-south"], "us-east's research queue could admit 32 GPUs, not 64"


def test_two_gangs_of_one_round_are_not_both_sent_to_one_hole() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("first", 16, 4), workload("second", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        asyncio.run(dispatcher(server, store, t).run_once())
        assert (nominated(server, "first"), nominated(server, "second")) == (["us-east"], ["ap-south"])


def test_a_workload_kilter_cannot_rank_is_sent_to_every_reachable_cluster_as_kueue_would() -> None:
    cpu = workload("etl", 4, 1)
    cpu["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8"}}
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, cpu)
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9, age_s=45))
        asyncio.run(dispatcher(server, store, t).run_once())
        assert nominated(server, "etl") == ["eu-west", "us-east"], "all fresh clusters; never a stale one"


def test_nominations_made_since_the_round_s_view_are_not_overwritten() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))  # the view from before any nomination
        t = table(region("eu-west", 8), region("us-east", 18), region("ap-south", 9, 9))
        d = dispatcher(server, store, t)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["us-east"]
        t.offer(
            [
                RegionInventory(
                    "us-east", 2, NOW, (DomainRoom(GB200, 8, 2, 4),), {"research": 1000}, {"ml/research": "research"}
                )
            ]
        )
        asyncio.run(d.run_once())  # its store still shows no nominations: a watch behind
        assert nominated(server, "big") == ["us-east"], "not replaced from a stale view"
        assert d.written.get("conflict") == 1


class RacingApi(ApiServer):
    """An API server client between whose read and write Kueue writes the Workload (as a concurrent reconcile)."""

    server: ListWatchServer | None = None

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        answer = super().call(method, path, body, content_type=content_type)
        if method == "GET" and path.endswith("/workloads/big") and self.server is not None:
            reserve(self.server, answer, cluster_queue="research-2")
        return answer


def test_a_workload_written_between_read_and_apply_is_a_conflict_counted_and_retried() -> None:
    with ListWatchServer(POOL_RESOURCES) as server:
        store = setup(server, workload("big", 16, 4))
        t = table(region("eu-west", 8), region("us-east", 18))
        api = RacingApi("http", server.host, server.port)
        api.server = server
        d = Dispatcher(store, api, t, {c: c for c in CLUSTERS}, wall=lambda: NOW)
        assert asyncio.run(d.run_once()) == []
        assert d.written.get("conflict") == 1 and nominated(server, "big") == []
        api.server = None
        d.store = store_of(server)
        asyncio.run(d.run_once())
        assert nominated(server, "big") == ["us-east"], "the next round reads it again and writes"
