"""Three regions, each ``kilter serve`` in a network namespace of its own, joined by a bridge; links cut for real.

The test makes a hub namespace holding a Linux bridge (in a namespace of its own, so no firewall of the
machine's sees the bridged packets), a veth from the test's namespace to the bridge with the list/watch servers
on its address, and per region a namespace whose veth is a port of the bridge (``ip netns``, ``ip link``).
Cutting the link between two regions is a blackhole route to the other's address in each of the two
namespaces: packets of open connections are dropped from then on, and each region's own API server stays
reachable, as when the wide-area link between two regions fails. Needs root and the ``ip`` tool; skipped with
the reason otherwise. The exchange is plaintext here, so each kilter trusts the bridge's network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.pool.regions import RACKS, TTL_S, Pool, regions_running, until
from tests.topology.builders import CLIQUE, node_dict

TAG = os.getpid() % 100_000
SUBNET = f"10.213.{TAG % 250}"
HUB = f"kilter-{TAG}-hub"
ORDER = list(RACKS)


def ip(*args: str, netns: str = "") -> None:
    argv = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=20)


def namespace(region: str) -> str:
    return f"kilter-{TAG}-{region}"


def address(region: str) -> str:
    return f"{SUBNET}.{10 + ORDER.index(region)}"


def _can_make_namespaces() -> str:
    if shutil.which("ip") is None:
        return "the ip tool (iproute2) is not installed"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    probe = f"kilter-probe-{TAG}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=20)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=20)
    return ""


@pytest.fixture(scope="module")
def network() -> Iterator[None]:
    why = _can_make_namespaces()
    if why:
        pytest.skip(why)
    try:
        _make_network()
    except subprocess.CalledProcessError as exc:
        _remove_network()
        pytest.skip(f"could not make the test network ({' '.join(exc.cmd)}): {exc.stderr.strip()}")
    try:
        yield
    finally:
        _remove_network()


def _make_network() -> None:
    """The hub with its bridge, the test's veth to it, and each region's namespace on it."""
    ip("netns", "add", HUB)
    ip("link", "add", "br0", "type", "bridge", netns=HUB)
    ip("link", "set", "br0", "up", netns=HUB)
    ip("link", "add", f"kt{TAG}", "type", "veth", "peer", "name", f"kb{TAG}")  # the test's own end first
    ip("link", "set", f"kb{TAG}", "netns", HUB)
    ip("link", "set", f"kb{TAG}", "master", "br0", netns=HUB)
    ip("link", "set", f"kb{TAG}", "up", netns=HUB)
    ip("addr", "add", f"{SUBNET}.1/24", "dev", f"kt{TAG}")
    ip("link", "set", f"kt{TAG}", "up")
    for i, region in enumerate(ORDER):
        ns, hub_end, ns_end = namespace(region), f"kh{TAG}{i}", f"kn{TAG}{i}"
        ip("netns", "add", ns)
        ip("link", "add", hub_end, "type", "veth", "peer", "name", ns_end)
        ip("link", "set", ns_end, "netns", ns)
        ip("link", "set", hub_end, "netns", HUB)
        ip("link", "set", hub_end, "master", "br0", netns=HUB)
        ip("link", "set", hub_end, "up", netns=HUB)
        ip("addr", "add", f"{address(region)}/24", "dev", ns_end, netns=ns)
        ip("link", "set", ns_end, "up", netns=ns)
        ip("link", "set", "lo", "up", netns=ns)


def _remove_network() -> None:
    """Every namespace made (their veths go with them) and the test's own veth end."""
    for ns in (*map(namespace, ORDER), HUB):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)
    subprocess.run(["ip", "link", "del", f"kt{TAG}"], capture_output=True, timeout=20)


@pytest.fixture(scope="module")
def pool(network: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with regions_running(
        tmp_path_factory.mktemp,
        host=f"{SUBNET}.1",
        addresses={r: address(r) for r in ORDER},
        netns={r: namespace(r) for r in ORDER},
        trusted=(f"{SUBNET}.0/24",),  # plaintext between regions: their kilters answer the bridge's network
    ) as running:
        yield running


def cut(a: str, b: str, *, heal: bool = False) -> None:
    """Drop (or let through again) every packet between regions ``a`` and ``b``, both ways."""
    verb = "del" if heal else "add"
    ip("route", verb, "blackhole", f"{address(b)}/32", netns=namespace(a))
    ip("route", verb, "blackhole", f"{address(a)}/32", netns=namespace(b))


def test_a_region_whose_direct_link_is_cut_is_still_heard_through_a_third(pool: Pool) -> None:
    until(lambda: all(pool.fresh_at(r, o) for r in RACKS for o in RACKS), "every region hears every region")
    cut("eu-west", "ap-south")
    try:
        before = pool.generation_at("eu-west", "ap-south")
        pool.regions["ap-south"].server.add(node_dict("ap-south-r1-t09", labels={CLIQUE: "ap-south-r1"}))
        until(lambda: pool.generation_at("eu-west", "ap-south") > before, "ap-south's change reaches eu-west")
        cut_at = time.monotonic()
        while time.monotonic() < cut_at + 1.5 * TTL_S:  # past the TTL, every reading fresh: relayed by us-east
            assert pool.fresh_at("eu-west", "ap-south") and pool.fresh_at("ap-south", "eu-west")
            time.sleep(0.1)
    finally:
        cut("eu-west", "ap-south", heal=True)


def test_a_partitioned_region_ages_out_gets_nothing_and_converges_after_the_partition_heals(pool: Pool) -> None:
    pool.submit("big", 16)
    until(lambda: pool.cluster_of("big") is not None, "big is admitted", step=pool.sync)
    assert pool.cluster_of("big") == "us-east"
    pool.settle()
    for other in ("eu-west", "us-east"):
        cut("ap-south", other)
    try:
        until(lambda: not pool.fresh_at("eu-west", "ap-south"), "ap-south ages out at eu-west", 10)
        until(lambda: not pool.fresh_at("us-east", "ap-south"), "and at us-east", 10)
        assert pool.fresh_at("eu-west", "us-east"), "the rest of the pool goes on"
        pool.submit("wide", 18)  # only ap-south (9 + 10 trays) could take it
        for _ in range(15):
            pool.sync()
            time.sleep(0.1)
        assert not [names for name, names in pool.nominations_seen if name == "wide"], "nothing sent anywhere"
    finally:
        for other in ("eu-west", "us-east"):
            cut("ap-south", other, heal=True)
    until(lambda: all(pool.fresh_at(r, o) for r in RACKS for o in RACKS), "inventories converge after healing", 15)
    until(lambda: pool.cluster_of("wide") is not None, "wide is admitted", step=pool.sync)
    assert pool.cluster_of("wide") == "ap-south"
    pool.check_invariants()


def test_a_manager_cut_off_holds_its_own_jobs_and_the_other_regions_go_on(pool: Pool) -> None:
    pool.settle()
    for other in ("us-east", "ap-south"):
        cut("eu-west", other)
    try:
        until(lambda: not pool.fresh_at("eu-west", "us-east") and not pool.fresh_at("eu-west", "ap-south"), "cut", 10)
        pool.submit("alone", 1)  # one tray: us-east has 2 free, ap-south 1
        for _ in range(15):
            pool.sync()
            time.sleep(0.1)
        assert pool.cluster_of("alone") is None and not [n for n, _ in pool.nominations_seen if n == "alone"]
        assert pool.fresh_at("us-east", "ap-south") and pool.fresh_at("ap-south", "us-east"), "they still talk"
    finally:
        for other in ("us-east", "ap-south"):
            cut("eu-west", other, heal=True)
    until(lambda: pool.cluster_of("alone") is not None, "alone is admitted once the manager is back", step=pool.sync)
    pool.check_invariants()
