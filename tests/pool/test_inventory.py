"""What a region publishes: its domains' room from the gang inventory, and the fewest domains a gang needs there."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilter.gangs import inventory as gang_inventory
from kilter.model.errors import InputError
from kilter.pool.inventory import DomainRoom, RegionInventory, fewest_domains, of_inventory
from kilter.state.store import ClusterStore
from tests.extenders.conftest import cluster_objects

rooms_strategy = st.lists(
    st.builds(
        DomainRoom,
        platform=st.sampled_from(["gb200", "mi355x"]),
        gpus_free=st.integers(0, 72),
        largest_pods=st.integers(0, 18),
        largest_gpus_per_pod=st.sampled_from([1, 2, 4, 8]),
    ),
    max_size=7,
)


@given(rooms=rooms_strategy, pods=st.integers(0, 40), gpus_per_pod=st.sampled_from([1, 2, 4, 8]))
def test_fewest_domains_is_the_smallest_subset_that_holds_the_gang(
    rooms: list[DomainRoom], pods: int, gpus_per_pod: int
) -> None:
    ours = [r for r in rooms if r.platform == "gb200"]
    best = None
    for k in range(len(ours) + 1):
        if any(sum(r.pods_of(gpus_per_pod) for r in subset) >= pods for subset in itertools.combinations(ours, k)):
            best = k
            break
    assert fewest_domains(rooms, "gb200", pods, gpus_per_pod) == best


def test_a_domain_takes_its_largest_shape_exactly_and_bounds_the_others_by_free_gpus() -> None:
    rack = DomainRoom("gb200", gpus_free=20, largest_pods=4, largest_gpus_per_pod=4)
    assert rack.pods_of(4) == 4, "the inventory's own answer: whole trays"
    assert rack.pods_of(2) == 10 and rack.pods_of(8) == 0 and rack.pods_of(0) == 0


def test_a_region_publishes_its_domains_from_the_gang_inventory() -> None:
    store = ClusterStore()
    store.replace(cluster_objects())
    taken = gang_inventory.take(store)
    published = of_inventory("eu-west", 7, 1000.0, taken, {"research": 64})
    attached = [d for d in taken.domains if not d.detached]
    assert [(r.platform, r.gpus_free, r.largest_pods) for r in published.domains] == [
        (d.platform, d.gpus_free, d.largest_pods) for d in attached
    ]
    assert published.headroom == {"research": 64} and (published.origin, published.generation) == ("eu-west", 7)
    total = sum(d.gpus_free for d in attached)
    assert fewest_domains(published.domains, attached[0].platform, 1, 1) == (1 if total else None)


def test_an_inventory_names_its_origin_and_a_generation() -> None:
    with pytest.raises(InputError, match="origin"):
        RegionInventory("", 1, 0.0)
    with pytest.raises(InputError, match="generation"):
        RegionInventory("eu", -1, 0.0)
