"""Regions keeping each other's latest inventory without a leader: newest wins, relayed, aged out, converging."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilter.pool.inventory import RegionInventory
from kilter.pool.peers import PeerTable


def inv(origin: str, generation: int, at: float = 0.0) -> RegionInventory:
    return RegionInventory(origin, generation, at)


def tables(*regions: str, ttl_s: float = 30.0) -> dict[str, PeerTable]:
    out = {r: PeerTable(r, ttl_s=ttl_s) for r in regions}
    for r, table in out.items():
        table.publish(inv(r, 1))
    return out


def sweep(peers: dict[str, PeerTable], links: list[tuple[str, str]]) -> int:
    return sum(peers[a].exchange(peers[b]) for a, b in links)


def test_only_a_newer_generation_replaces_what_is_held() -> None:
    table = PeerTable("eu")
    assert table.offer([inv("us", 3)]) == [inv("us", 3)]
    assert table.offer([inv("us", 2), inv("us", 3, at=99.0)]) == [], "older, and equal with other content, ignored"
    assert table.held["us"] == inv("us", 3) and (table.accepted, table.ignored) == (1, 2)
    assert table.offer([inv("us", 4)]) == [inv("us", 4)]


def test_a_region_publishes_only_its_own_inventory() -> None:
    with pytest.raises(ValueError, match="cannot publish the inventory of us"):
        PeerTable("eu").publish(inv("us", 1))


def test_a_region_without_a_direct_link_is_heard_through_a_third() -> None:
    peers = tables("eu", "us", "ap")
    line = [("eu", "us"), ("us", "ap")]  # no eu-ap link
    while sweep(peers, line):
        pass
    assert peers["eu"].digest() == peers["ap"].digest() == {"eu": 1, "us": 1, "ap": 1}


def test_a_cut_off_region_ages_out_and_rejoins_when_the_link_heals() -> None:
    peers = tables("eu", "us", "ap", ttl_s=30.0)
    links = [("eu", "us"), ("us", "ap")]
    sweep(peers, links)
    sweep(peers, links)
    peers["ap"].publish(inv("ap", 2, at=40.0))  # ap changes while cut off from us
    sweep(peers, [("eu", "us")])
    assert peers["eu"].held["ap"].generation == 1
    assert "ap" in peers["eu"].fresh(now=20.0) and "ap" not in peers["eu"].fresh(now=31.0), "aged out"
    assert "eu" in peers["eu"].fresh(now=1e9), "a region always decides on its own inventory"
    while sweep(peers, links):  # healed
        pass
    assert peers["eu"].held["ap"] == inv("ap", 2, at=40.0) and "ap" in peers["eu"].fresh(now=41.0)


def test_an_origin_clock_a_little_ahead_still_counts_as_fresh() -> None:
    table = PeerTable("eu", ttl_s=30.0)
    table.offer([inv("us", 1, at=105.0)])
    assert "us" in table.fresh(now=100.0) and "us" not in table.fresh(now=60.0)


def test_every_exchange_order_on_a_line_of_three_converges_within_two_sweeps() -> None:
    links = [("eu", "us"), ("us", "ap"), ("ap", "us")]
    for order in itertools.permutations(links):
        peers = tables("eu", "us", "ap")
        sweep(peers, list(order))
        sweep(peers, list(order))
        assert len({tuple(sorted(p.digest().items())) for p in peers.values()}) == 1, order


@settings(max_examples=60, deadline=None)
@given(
    regions=st.integers(min_value=2, max_value=7),
    seed=st.integers(min_value=0, max_value=2**31),
    updates=st.lists(st.tuples(st.integers(0, 6), st.integers(1, 5)), max_size=20),
)
def test_any_exchanges_over_a_connected_graph_end_with_the_newest_everywhere(
    regions: int, seed: int, updates: list[tuple[int, int]]
) -> None:
    rng = random.Random(seed)
    names = [f"r{i}" for i in range(regions)]
    peers = tables(*names)
    tree = [(names[i], names[rng.randrange(i)]) for i in range(1, regions)]  # connected
    extra = [(a, b) for a, b in itertools.combinations(names, 2) if rng.random() < 0.3]
    links = tree + extra
    newest = {n: 1 for n in names}
    for who, bump in updates:
        origin = names[who % regions]
        newest[origin] += bump
        peers[origin].publish(inv(origin, newest[origin]))
        for _ in range(rng.randrange(3)):  # some exchanges, in any order, meanwhile; some messages never sent
            a, b = rng.choice(links)
            peers[a].exchange(peers[b])
    rounds = 0
    while sweep(peers, rng.sample(links, len(links))):
        rounds += 1
        assert rounds <= regions, "a change crosses at most the graph's diameter in sweeps"
    for table in peers.values():
        assert table.digest() == newest


def test_a_region_whose_clock_went_back_publishes_above_what_its_peers_still_hold_of_it() -> None:
    peer, me = PeerTable("us-east"), PeerTable("eu-west")
    me.publish(RegionInventory("eu-west", me.next_generation(2000.0), 2000.0))
    peer.exchange(me)
    restarted = PeerTable("eu-west")  # a restart, its clock now 5 s behind what it stamped before
    restarted.exchange(peer)
    assert restarted.own_heard == 2_000_000
    generation = restarted.next_generation(1995.0)
    assert generation == 2_000_001, "above the copy peers hold, though its clock says 1,995,000"
    restarted.publish(RegionInventory("eu-west", generation, 1995.0))
    peer.exchange(restarted)
    assert peer.held["eu-west"].generation == generation
