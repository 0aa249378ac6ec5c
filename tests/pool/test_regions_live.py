"""Three regions as separate processes on 127.0.0.1 (``tests.pool.regions``), MultiKueue played by the test.

A region cut off is a frozen process (SIGSTOP: it neither answers nor calls, as behind a cut link) and heals with
SIGCONT; a region killed is SIGKILLed and started again (tests/pool/test_regions_netns.py cuts real links).
Invariants checked at every sync: no nomination outside the check's clusters, and each Workload admitted in at
most one worker at the end.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from tests.pool.multikueue import WORKLOADS
from tests.pool.regions import RACKS, Pool, regions_running, until
from tests.topology.builders import CLIQUE, node_dict


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    with regions_running(tmp_path_factory.mktemp) as running:
        yield running


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
