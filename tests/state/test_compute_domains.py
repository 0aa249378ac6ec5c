"""ComputeDomains and pods' DRA claims read from snapshot files and through list/watch (pods in protobuf)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.model.core_v1 import PodResourceClaim
from kilter.state import cluster
from kilter.state.store import ADDED, DELETED, ClusterStore, Event
from tests.gangs.cd_scenario import cd_pod, compute_domain
from tests.listwatch import COMPUTE_DOMAINS, NODES, PODS, ListWatchServer
from tests.state.test_live import TOKEN, Harness
from tests.topology.builders import CLIQUE, node_dict

CLAIMS = (
    PodResourceClaim("gpus", "shared-gpus", None),
    PodResourceClaim("imex-channel", None, "train-channel"),
)


def with_status(cd: dict[str, Any]) -> dict[str, Any]:
    """The driver's status of a domain running on two nodes of one clique."""
    cd["status"] = {
        "status": "Ready",
        "nodes": [
            {"name": "r1-t00", "ipAddress": "10.0.0.1", "cliqueID": "7b96.1", "index": 0, "status": "Ready"},
            {"name": "r1-t01", "ipAddress": "10.0.0.2", "cliqueID": "7b96.1", "index": 1, "status": "Ready"},
        ],
    }
    return cd


def objects() -> list[dict[str, Any]]:
    return [
        node_dict("r1-t00", labels={CLIQUE: "7b96.1"}),
        with_status(compute_domain("train", num_nodes=2)),
        cd_pod("train-0", "train-channel", node="r1-t00"),
    ]


@pytest.mark.parametrize("form", ["json", "yaml"])
def test_a_snapshot_holds_compute_domains_typed_and_pods_with_their_claims(form: str, tmp_path: Path) -> None:
    path = tmp_path / f"snapshot.{form}"
    docs = objects()
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}) if form == "json" else yaml.safe_dump_all(docs)
    )
    state = cluster.load(path)
    [cd] = state.compute_domains
    assert (cd.metadata.namespace, cd.metadata.name, cd.spec.num_nodes, cd.claim_template) == (
        "ml",
        "train",
        2,
        "train-channel",
    )
    assert cd.spec.channel is not None and cd.spec.channel.allocation_mode == "Single"
    assert cd.status.nodes is not None and [n.clique_id for n in cd.status.nodes] == ["7b96.1", "7b96.1"]
    assert [n.ip_address for n in cd.status.nodes] == ["10.0.0.1", "10.0.0.2"]
    assert state.pods[0].spec.resource_claims == CLAIMS
    assert not state.warnings  # a kind kilter reads, not "ignored"


def test_a_compute_domain_without_a_channel_is_read_and_names_no_template() -> None:
    cd = compute_domain("bare")
    cd["spec"] = {"numNodes": 0, "channel": None}
    state = cluster.from_objects([cd])
    assert state.compute_domains[0].claim_template == ""


def test_the_store_finds_pods_by_the_claim_template_they_name_as_they_come_and_go() -> None:
    store = ClusterStore()
    store.replace(objects())
    assert [p.metadata.name for p in store.pods_claiming("ml", "train-channel")] == ["train-0"]
    assert store.pods_claiming("ml", "shared-gpus") == []  # a claim by name, not from a template
    assert store.pods_claiming("other", "train-channel") == []
    store.apply([Event(ADDED, cd_pod("train-1", "train-channel"))])
    assert sorted(p.metadata.name for p in store.pods_claiming("ml", "train-channel")) == ["train-0", "train-1"]
    store.apply([Event(DELETED, cd_pod("train-0", "train-channel"))])
    assert [p.metadata.name for p in store.pods_claiming("ml", "train-channel")] == ["train-1"]


@pytest.fixture
def feed_of() -> Iterator[Callable[[ListWatchServer], Harness]]:
    """kilter's reflectors for nodes, pods and ComputeDomains on an event loop of their own (``test_live``'s)."""
    made: list[Harness] = []

    def make(server: ListWatchServer) -> Harness:
        made.append(Harness(server, plurals=("nodes", "pods", "computedomains")))
        return made[-1]

    yield make
    for feed in made:
        feed.close()


def cd_annotations(store: ClusterStore) -> dict[str, str] | None:
    cds = store.state().compute_domains
    return dict(cds[0].metadata.annotations) if cds else None


def test_list_watch_reads_compute_domains_and_the_claims_of_pods_listed_in_protobuf(
    feed_of: Callable[[ListWatchServer], Harness],
) -> None:
    with ListWatchServer([PODS, NODES, COMPUTE_DOMAINS], token=TOKEN) as server:
        for obj in objects():
            server.add(obj)
        feed = feed_of(server)
        feed.settled(lambda s: s.ready and len(s.state().compute_domains) == 1)
        assert any(
            r.accept.startswith("application/vnd.kubernetes.protobuf") for r in server.requests if "/pods" in r.path
        )
        feed.settled(lambda s: [p.spec.resource_claims for p in s.pods()] == [CLAIMS])
        changed = compute_domain("train", num_nodes=2, annotations={"kilter.dev/compute-domain-spans-cliques": "true"})
        server.update(changed)
        feed.settled(lambda s: cd_annotations(s) == {"kilter.dev/compute-domain-spans-cliques": "true"})
        server.add(cd_pod("train-1", "train-channel"))  # through the watch: JSON
        feed.settled(lambda s: len(s.pods_claiming("ml", "train-channel")) == 2)
        server.delete("resource.nvidia.com", "computedomains", "ml", "train")
        feed.settled(lambda s: cd_annotations(s) is None)


def test_a_cluster_without_the_nvidia_driver_is_ready_without_compute_domains(
    feed_of: Callable[[ListWatchServer], Harness],
) -> None:
    with ListWatchServer([PODS, NODES], token=TOKEN) as server:
        server.add(node_dict("r1-t00", labels={CLIQUE: "7b96.1"}))
        feed = feed_of(server)
        feed.settled(lambda s: s.ready and s.state().compute_domains == [] and len(s.fleet().node_names) == 1)
