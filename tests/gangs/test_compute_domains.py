"""Which ComputeDomain a pod joins, the gang a ComputeDomain's pods form, and its key."""

from __future__ import annotations

from typing import Any

import pytest

from kilter.gangs import GangKey, compute_domains, gang_of, identify, in_gang, trust
from kilter.model import codec
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects, pod_json
from tests.gangs.cd_scenario import cd_pod, compute_domain


def store_with(*extra: dict[str, Any]) -> ClusterStore:
    store = ClusterStore()
    store.replace([*cluster_objects(), *extra])
    return store


def typed(obj: dict[str, Any]) -> Pod:
    return codec.convert(obj, Pod)


def test_a_pod_joins_the_compute_domain_of_its_namespace_whose_template_it_claims() -> None:
    store = store_with(
        compute_domain("a"), compute_domain("a", namespace="other"), compute_domain("b", template="shared-gpus")
    )
    pod = typed(cd_pod("p", "a-channel"))
    cd = compute_domains.domain_of(store, "ml", compute_domains.templates(pod.spec))
    assert cd is not None and (cd.metadata.namespace, cd.metadata.name) == ("ml", "a")
    # the pod's other claim names an existing ResourceClaim "shared-gpus", not the template of that name
    assert compute_domains.templates(pod.spec) == frozenset({"a-channel"})


@pytest.mark.parametrize(
    ("num_nodes", "in_state", "size"),
    [
        pytest.param(4, 1, 4, id="numNodes 4 is the size"),
        pytest.param(0, 3, 3, id="numNodes 0: the 3 pods the state holds, the asker among them"),
        pytest.param(0, 0, 1, id="numNodes 0, the asker not seen yet: itself"),
    ],
)
def test_a_compute_domains_pods_naming_no_other_gang_are_its_gang(num_nodes: int, in_state: int, size: int) -> None:
    pods = [cd_pod(f"a-{i}", "a-channel") for i in range(in_state)]
    store = store_with(compute_domain("a", num_nodes=num_nodes), *pods)
    gang = identify(typed(cd_pod("a-0", "a-channel")), store)
    assert gang is not None and (gang.key, gang.source, gang.size) == (
        "ml/compute-domain/a",
        "resource.nvidia.com/ComputeDomain",
        size,
    )


def test_a_pod_whose_claims_name_no_compute_domain_is_no_gang_of_one() -> None:
    store = store_with(compute_domain("a"))
    assert identify(typed(cd_pod("p", "not-a-domain")), store) is None
    assert identify(typed(pod_json("plain", 4)), store) is None


def test_another_gang_identity_wins_and_keeps_its_key() -> None:
    store = store_with(compute_domain("a", num_nodes=4))
    gang = identify(
        typed(cd_pod("p", "a-channel", labels={"kilter.dev/gang": "g", "kilter.dev/gang-size": "8"})), store
    )
    assert gang is not None and (gang.key, gang.size) == ("ml/gang/g", 8)


def test_the_compute_domain_gangs_pods_are_found_from_a_pod_and_from_the_key() -> None:
    pods = [cd_pod("a-0", "a-channel"), cd_pod("a-1", "a-channel", node="r1-t00"), cd_pod("b-0", "b-channel")]
    done = cd_pod("a-2", "a-channel")
    done["status"]["phase"] = "Succeeded"
    store = store_with(compute_domain("a"), compute_domain("b"), *pods, done, pod_json("plain", 4))
    from_pod = [p.metadata.name for p in gang_of(typed(pods[0])).members(store)]
    from_key = [p.metadata.name for p in in_gang("ml/compute-domain/a").members(store)]
    assert from_pod == from_key == ["a-0", "a-1"]
    assert in_gang("ml/compute-domain/gone").members(store) == []


def test_the_compute_domain_key_parses_and_formats() -> None:
    key = GangKey.parse("ml/compute-domain/train")
    assert (key.namespace, key.kind, key.names, key.format()) == (
        "ml",
        "compute-domain",
        ("train",),
        "ml/compute-domain/train",
    )
    with pytest.raises(InputError, match="compute-domain"):
        GangKey.parse("ml/compute-domain/a/b")


def test_a_request_naming_another_domains_template_than_the_stored_pod_is_a_strangers() -> None:
    """A gang is read from a pod's claims too: a request that copies a stored pod's name, uid and labels but names
    another ComputeDomain's claim template must not be taken for a member of that domain's gang."""
    store = store_with(compute_domain("a"), compute_domain("b"), cd_pod("p", "a-channel"), cd_pod("q", "b-channel"))
    forged = typed(cd_pod("p", "b-channel"))  # pod p as stored, but claiming domain b's channel
    gang = identify(forged, store)
    assert gang is not None and gang.key == "ml/compute-domain/b"
    who = trust.asker(store, gang, forged)
    assert who.kind == "stranger" and "is not in gang ml/compute-domain/b" in who.why
    honest = typed(cd_pod("q", "b-channel"))
    assert trust.asker(store, gang, honest).kind == "member"
