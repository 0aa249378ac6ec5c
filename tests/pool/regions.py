"""Regions as processes for the pool's tests: each its own list/watch server (Nodes, Kueue objects, Workloads)
and its own ``kilter serve`` with a pool section, on 127.0.0.1 or each in a network namespace of its own
(``address`` and ``netns``); MultiKueue's side is ``tests.pool.multikueue``, whose workers admit a copy when that
worker's own kilter plans it feasible (gRPC Plan), then run it (pods bound to free trays).

eu-west is the manager of its users' jobs; us-east (one rack, 18 free trays) and ap-south (two racks of 9) are
its MultiKueue workers.
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
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kilter.api import placement_pb2 as pb
from kilter.api import placement_pb2_grpc as pb_grpc
from tests.extenders.conftest import pod_json
from tests.listwatch import NODES, PODS, ListWatchServer
from tests.live_mode import kubeconfig
from tests.local_http import free_port, get_text
from tests.pool.certs import dns_name
from tests.pool.multikueue import POOL_RESOURCES, WORKLOADS, MultiKueue, manager_objects, reserve, workload
from tests.topology.builders import CLIQUE, node_dict

Channel = grpc.Channel  # ``Region.grpc`` (its port) hides the module inside the class
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
    address: str = "127.0.0.1"  # where its kilter listens
    netns: str = ""  # the network namespace its kilter runs in ("" the test's own)
    trusted: tuple[str, ...] = ()  # networks besides loopback whose callers it answers (its peers', plaintext)
    tls: tuple[Path, Path, Path] | None = None  # its certificate, key and the pool CA: mutual TLS instead
    process: subprocess.Popen[str] | None = None

    def start(self, peers: list[Region]) -> None:
        config: dict[str, Any] = {
            "apiVersion": "config.kilter.dev/v1alpha1",
            "kind": "Configuration",
            "state": {
                "kubeconfig": str(kubeconfig(self.directory / "kubeconfig", self.server.port, TOKEN, self.server.host))
            },
            "listeners": {
                "address": self.address,
                "httpPort": self.http,
                "webhookPort": free_port(),
                "grpcPort": self.grpc,
                "trustedNetworks": ["127.0.0.0/8", "::1/128", *self.trusted],
            },
            "pool": {
                "region": self.name,
                "peers": [{"name": p.name, "address": f"{p.address}:{p.grpc}"} for p in peers],
                "exchangeInterval": "0.2s",
                "ttl": f"{TTL_S:g}s",
                "callTimeout": "0.5s",
                "insecure": True,
                "dispatch": {"interval": "0.2s", "admitDeadline": "30s"},
            },
        }
        if self.tls is not None:
            cert, key, ca = self.tls
            config["listeners"].update({"tlsCertFile": str(cert), "tlsKeyFile": str(key), "grpcClientCA": str(ca)})
            config["pool"]["insecure"] = False
            config["pool"]["peers"] = [
                {"name": p.name, "address": f"{p.address}:{p.grpc}", "serverName": dns_name(p.name)} for p in peers
            ]
        path = self.directory / "config.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(path)]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        env = {**os.environ, "MPLCONFIGDIR": str(self.directory / "mpl")}
        with (self.directory / "kilter.log").open("a", encoding="utf-8") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)

    def ready(self) -> bool:
        try:
            return '"ready":true' in get_text(self.http, "/readyz", host=self.address).replace(" ", "")
        except OSError:
            return False

    def metrics(self) -> dict[tuple[str, str], float]:
        """(family, region label) -> value of the pool's per-region gauges, and ("fresh", "") of the count."""
        out: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(get_text(self.http, "/metrics", host=self.address)):
            for sample in family.samples:
                if sample.name.startswith("kilter_pool_"):
                    out[(sample.name, sample.labels.get("region", ""))] = sample.value
        return out

    def channel(self) -> Channel:
        """A channel to its gRPC listener; over mutual TLS with its own certificate when it has one."""
        if self.tls is None:
            return grpc.insecure_channel(f"{self.address}:{self.grpc}")
        cert, key, ca = (p.read_bytes() for p in self.tls)
        options = [("grpc.ssl_target_name_override", dns_name(self.name))]
        return grpc.secure_channel(f"{self.address}:{self.grpc}", grpc.ssl_channel_credentials(ca, key, cert), options)

    def plans_feasible(self, copy: dict[str, Any]) -> bool:
        """What this worker's Kueue with kilter's check would do: admit when kilter plans the gang now."""
        try:
            with self.channel() as channel:
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


@contextlib.contextmanager
def regions_running(
    directory: Callable[[str], Path],
    *,
    host: str = "127.0.0.1",
    addresses: dict[str, str] | None = None,
    netns: dict[str, str] | None = None,
    trusted: tuple[str, ...] = (),
    tls: dict[str, tuple[Path, Path, Path]] | None = None,
) -> Iterator[Pool]:
    """The three regions started, every kilter ready, MultiKueue wired; everything stopped after."""
    stack = contextlib.ExitStack()
    servers = {name: stack.enter_context(ListWatchServer(POOL_RESOURCES, token=TOKEN, host=host)) for name in RACKS}
    regions: dict[str, Region] = {}
    try:
        for name, racks in RACKS.items():
            server = servers[name]
            for r, trays in enumerate(racks):
                for t in range(trays):
                    server.add(node_dict(f"{name}-r{r}-t{t:02d}", labels={CLIQUE: f"{name}-r{r}"}))
            for obj in queue_objects():
                server.add(obj)
            regions[name] = Region(
                name,
                server,
                directory(name),
                address=(addresses or {}).get(name, "127.0.0.1"),
                netns=(netns or {}).get(name, ""),
                trusted=trusted,
                tls=(tls or {}).get(name),
            )
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
