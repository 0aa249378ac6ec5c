"""Three regions as separate processes on 127.0.0.1: each its own list/watch server (Nodes, Kueue objects,
Workloads) and its own ``kilter serve`` with a pool section; MultiKueue's side is ``tests.pool.multikueue``,
whose workers admit a copy when that worker's own kilter plans it feasible (gRPC Plan).

eu-west is the manager of its users' jobs; us-east (one rack, 18 free trays) and ap-south (two racks of 9) are
its MultiKueue workers. A region cut off is a frozen process (SIGSTOP: it neither answers nor calls, as behind a
cut link) and heals with SIGCONT; a region killed is SIGKILLed and started again. Invariants checked at every
sync: no nomination outside the check's clusters, and each Workload admitted in at most one worker at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PODS, ListWatchServer
from tests.live_mode import kubeconfig
from tests.local_http import free_port, get_text
from tests.pool.multikueue import POOL_RESOURCES, WORKLOADS, MultiKueue, manager_objects, reserve, workload
from tests.topology.builders import CLIQUE, node_dict

TOKEN = "pool"
TTL_S = 2.0
RACKS = {"eu-west": [6], "us-east": [18], "ap-south": [9, 9]}
WORKERS = ["ap-south", "us-east"]


def queue_objects() -> list[dict[str, Any]]:
    gpu = "nvidia.com/gpu"
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gpu"}, "spec": {}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "research"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": [gpu],
                        "flavors": [{"name": "gpu", "resources": [{"name": gpu, "nominalQuota": "1000"}]}],
                    }
                ]
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "research", "namespace": "ml"},
            "spec": {"clusterQueue": "research"},
        },
    ]


@dataclass
class Region:
    name: str
    server: ListWatchServer
    directory: Path
    http: int = field(default_factory=free_port)
    grpc: int = field(default_factory=free_port)
    process: subprocess.Popen[str] | None = None

    def start(self, peers: list[Region]) -> None:
        config = {
            "apiVersion": "config.kilter.dev/v1alpha1",
            "kind": "Configuration",
            "state": {"kubeconfig": str(kubeconfig(self.directory / "kubeconfig", self.server.port, TOKEN))},
            "listeners": {
                "address": "127.0.0.1",
                "httpPort": self.http,
                "webhookPort": free_port(),
                "grpcPort": self.grpc,
            },
            "pool": {
                "region": self.name,
                "peers": [{"name": p.name, "address": f"127.0.0.1:{p.grpc}"} for p in peers],
                "exchangeInterval": "0.2s",
                "ttl": f"{TTL_S:g}s",
                "callTimeout": "0.5s",
                "insecure": True,
                "dispatch": {"interval": "0.2s", "admitDeadline": "30s"},
            },
        }
        path = self.directory / "config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(path)]
        env = {**os.environ, "MPLCONFIGDIR": str(self.directory / "mpl")}
        with (self.directory / "kilter.log").open("a", encoding="utf-8") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    def ready(self) -> bool:
        try:
            return '"ready":true' in get_text(self.http, "/readyz").replace(" ", "")
        except OSError:
            return False

    def metrics(self) -> dict[tuple[str, str], float]:
        """(family, region label) -> value of the pool's per-region gauges, and ("fresh", "") of the count."""
        out: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(get_text(self.http, "/metrics")):
            for sample in family.samples:
                if sample.name.startswith("kilter_pool_"):
                    out[(sample.name, sample.labels.get("region", ""))] = sample.value
        return out

    def plans_feasible(self, copy: dict[str, Any]) -> bool:
        """What this worker's Kueue with kilter's check would do: admit when kilter plans the gang now."""
        try:
            with grpc.insecure_channel(f"127.0.0.1:{self.grpc}") as channel:
                request = pb.PlanRequest(job=json.dumps(copy).encode())
                answer = pb_grpc.PlacementStub(channel).Plan(request, timeout=5)
        except grpc.RpcError:
            return False  # its kilter is down: its Kueue's check cannot say Ready
        return bool(answer.feasible)

    def run(self, copy: dict[str, Any]) -> None:
        """The job starts there: one pod per free tray, in rack order (what its inventory will show)."""
        busy = {p["spec"].get("nodeName") for p in self.server.list_objects(PODS)}
        free = sorted(
            n["metadata"]["name"] for n in self.server.list_objects(NODES) if n["metadata"]["name"] not in busy
        )
        name = copy["metadata"]["name"]
        for i, node in enumerate(free[: copy["spec"]["podSets"][0]["count"]]):
            self.server.add(pod_json(f"{name}-{i}", 4, node=node))

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def until(
    condition: Callable[[], bool], what: str, within_s: float = 30.0, step: Callable[[], None] | None = None
) -> None:
    deadline = time.monotonic() + within_s
    while True:
        if step is not None:
            step()
        if condition():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s:g}s: {what}")
        time.sleep(0.1)


@dataclass
class Pool:
    regions: dict[str, Region]
    mk: MultiKueue
    nominations_seen: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    @property
    def manager(self) -> ListWatchServer:
        return self.regions["eu-west"].server

    def sync(self) -> None:
        for wl in self.manager.list_objects(WORKLOADS):
            names = tuple((wl.get("status") or {}).get("nominatedClusterNames") or ())
            if names:
                self.nominations_seen.append((wl["metadata"]["name"], names))
                assert set(names) <= set(WORKERS), f"nominated outside the check's clusters: {names}"
        self.mk.sync()

    def settle(self, regions: tuple[str, ...] = tuple(RACKS)) -> None:
        """Until eu-west holds each region's latest inventory: the pods a win started there are in what it ranks."""
        time.sleep(1.0)  # a watch event, then a publish at the next round (0.2 s)
        until(
            lambda: all(self.generation_at("eu-west", r) == self.generation_at(r, r) for r in regions),
            "eu-west holds every region's latest inventory",
        )

    def submit(self, name: str, pods: int) -> None:
        wl = workload(name, pods, 4)
        self.manager.add(wl)
        reserve(self.manager, wl)

    def cluster_of(self, name: str) -> str | None:
        wl = self.manager.get_object(WORKLOADS, "ml", name)
        return (wl.get("status") or {}).get("clusterName")

    def fresh_at(self, region: str, of: str) -> bool:
        age = self.regions[region].metrics().get(("kilter_pool_inventory_age_seconds", of))
        return age is not None and age < TTL_S

    def generation_at(self, region: str, of: str) -> float:
        return self.regions[region].metrics().get(("kilter_pool_inventory_generation", of), -1.0)

    def check_invariants(self) -> None:
        for name, clusters in self.mk.admitted_in.items():
            final = self.cluster_of(name)
            holding = [c for c in WORKERS if self.mk.workers[c].find_object(WORKLOADS, "ml", name) is not None]
            assert final in clusters and holding == [final], (name, clusters, holding)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    stack = contextlib.ExitStack()
    servers = {name: stack.enter_context(ListWatchServer(POOL_RESOURCES, token=TOKEN)) for name in RACKS}
    regions: dict[str, Region] = {}
    try:
        for name, racks in RACKS.items():
            server = servers[name]
            for r, trays in enumerate(racks):
                for t in range(trays):
                    server.add(node_dict(f"{name}-r{r}-t{t:02d}", labels={CLIQUE: f"{name}-r{r}"}))
            for obj in queue_objects():
                server.add(obj)
            regions[name] = Region(name, server, tmp_path_factory.mktemp(name))
        for obj in manager_objects(WORKERS):
            servers["eu-west"].add(obj)
        for name, region in regions.items():
            region.start([r for r in regions.values() if r.name != name])
        until(lambda: all(r.ready() for r in regions.values()), "every region's kilter is ready", 90)
        workers = {c: servers[c] for c in WORKERS}
        mk = MultiKueue(
            servers["eu-west"],
            workers,
            admits=lambda cluster, wl: regions[cluster].plans_feasible(wl),
            on_win=lambda cluster, wl: regions[cluster].run(wl),
        )
        yield Pool(regions, mk)
    finally:
        for region in regions.values():
            region.stop()
        stack.close()
        for region in regions.values():
            log = region.directory / "kilter.log"
            if log.exists() and "Traceback" in log.read_text(encoding="utf-8"):
                print(log.read_text(encoding="utf-8")[-4000:])


def test_inventories_converge_and_a_gang_too_big_for_home_runs_where_it_takes_the_fewest_domains(pool: Pool) -> None:
    until(lambda: all(pool.fresh_at(r, o) for r in RACKS for o in RACKS), "every region hears every region")
    pool.submit("big", 16)
    until(lambda: pool.cluster_of("big") is not None, "big is admitted", step=pool.sync)
    assert pool.cluster_of("big") == "us-east", "one rack of 18 there, two racks of 9 in ap-south"
    assert pool.mk.copies_made["big"] == {"us-east"}, "no copy where it would be split"
    pool.check_invariants()


def test_a_change_reaches_every_region(pool: Pool) -> None:
    before = {r: pool.generation_at(r, "ap-south") for r in RACKS}
    pool.regions["ap-south"].server.add(node_dict("ap-south-r1-t09", labels={CLIQUE: "ap-south-r1"}))
    until(lambda: all(pool.generation_at(r, "ap-south") > before[r] for r in RACKS), "ap-south's new tray is heard")


def test_a_cut_off_region_ages_out_nothing_is_sent_there_and_it_rejoins_when_the_link_heals(pool: Pool) -> None:
    south = pool.regions["ap-south"]
    assert south.process is not None
    south.process.send_signal(signal.SIGSTOP)
    try:
        until(lambda: not pool.fresh_at("eu-west", "ap-south"), "ap-south ages out at eu-west", 10)
        pool.settle(("eu-west", "us-east"))
        pool.submit("wide", 18)  # us-east has 2 trays left after big: only ap-south (9 + 10) could take it
        for _ in range(10):
            pool.sync()
            time.sleep(0.1)
        assert not [names for name, names in pool.nominations_seen if name == "wide"], "nothing sent anywhere"
        assert pool.cluster_of("wide") is None
    finally:
        south.process.send_signal(signal.SIGCONT)
    until(lambda: pool.fresh_at("eu-west", "ap-south"), "ap-south is heard again", 10)
    until(lambda: pool.cluster_of("wide") is not None, "wide is admitted", step=pool.sync)
    assert pool.cluster_of("wide") == "ap-south"
    pool.check_invariants()


def _nominated(pool: Pool, name: str) -> tuple[str, ...]:
    status = pool.manager.get_object(WORKLOADS, "ml", name).get("status") or {}
    return tuple(status.get("nominatedClusterNames") or ())


def test_a_region_killed_mid_dispatch_loses_no_job_admits_none_twice_and_rejoins(pool: Pool) -> None:
    east = pool.regions["us-east"]
    assert east.process is not None
    pool.settle()
    pool.submit("during", 2)  # us-east's last 2 trays; ap-south has 1 left
    until(lambda: _nominated(pool, "during") == ("us-east",), "during is nominated to us-east")
    east.process.kill()  # before MultiKueue made any copy
    east.process.wait()
    until(lambda: not pool.fresh_at("eu-west", "us-east"), "us-east ages out", 10)
    until(lambda: _nominated(pool, "during") == (), "the stale nomination is dropped", 10)
    pool.sync()
    assert pool.cluster_of("during") is None and "during" not in pool.mk.admitted_in, "it waits, not lost"
    east.start([r for r in pool.regions.values() if r.name != "us-east"])
    until(east.ready, "us-east's kilter is back", 60)
    until(lambda: pool.fresh_at("eu-west", "us-east"), "us-east rejoins", 10)
    until(lambda: pool.cluster_of("during") is not None, "during is admitted", step=pool.sync)
    assert pool.cluster_of("during") == "us-east"
    pool.check_invariants()
