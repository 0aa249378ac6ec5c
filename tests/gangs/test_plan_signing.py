"""Only plan records kilter signed are taken up (issue #17): a tenant's own ``kilter.dev/plan`` picks no racks.

``kilter serve`` runs on the live feed of the list/watch test server (the
fleet of ``test_records``: r1 and r2 with five idle trays each, r3 with
three). A gang of four 4-GPU pods planned afresh goes to r1; the records
below point it at r2, which fits as well, so where the gang goes shows which
record was believed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from kilter.gangs import PlanKeys
from kilter.gangs.records import PLAN_ANNOTATION, PlanRecord, encode, verifies
from tests.extenders.conftest import pod_json
from tests.gangs.test_records import GANG, KEY, KEY_TEXT, KEYS, TOKEN, bind, fleet, kilter, record_on
from tests.gangs.test_records import wait_for as settle
from tests.listwatch import NODES, PODS, ListWatchServer

R2 = ["r2-t0", "r2-t1", "r2-t2", "r2-t3"]


def pods_with(records: Sequence[str | None]) -> list[dict[str, Any]]:
    return [
        pod_json(f"train-{i}", 4, labels=GANG, annotations={PLAN_ANNOTATION: raw} if raw else None)
        for i, raw in enumerate(records)
    ]


def r2_record(*, keys: PlanKeys | None, uid: str) -> str:
    return encode(PlanRecord(KEY, time.time(), tuple((n, 4) for n in R2)), keys=keys, uid=uid)


def planned_racks(cluster: ListWatchServer, tmp_path: Path, pods: list[dict[str, Any]], **how: Any) -> set[str]:
    """The racks a fresh kilter puts the gang in (and the origin of its plan must match ``origin``)."""
    for obj in [*fleet(), *pods]:
        cluster.add(obj)
    with kilter(cluster, tmp_path, "kilter", **how) as k:
        k.passing(pods[0])
        plan = k.app.extender.gangs.plan_of(KEY)
        assert plan is not None
        return {s.node[:2] for s in plan.slots} | {f"origin={plan.origin}"}


def unsigned_v1() -> str:
    """A record in the format kilter wrote before records were signed (and adopted from anyone)."""
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return json.dumps({"v": 1, "gang": KEY, "at": at, "slots": [[n, 4] for n in R2]}, separators=(",", ":"))


@pytest.mark.parametrize(
    "make", [pytest.param(unsigned_v1, id="format 1"), pytest.param(lambda: r2_record(keys=None, uid=""), id="v2")]
)
def test_a_record_a_tenant_wrote_itself_is_not_taken_up(tmp_path: Path, make: Callable[[], str]) -> None:
    unsigned = make()
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        assert planned_racks(cluster, tmp_path, pods_with([unsigned] * 4)) == {"r1", "origin=planned"}


def test_a_record_signed_with_a_key_kilter_does_not_hold_is_not_taken_up(tmp_path: Path) -> None:
    tenant = PlanKeys([b"t" * 64], source="tenant")
    forged = [r2_record(keys=tenant, uid=f"uid-train-{i}") for i in range(4)]
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        assert planned_racks(cluster, tmp_path, pods_with(forged)) == {"r1", "origin=planned"}


def test_a_kilter_record_copied_onto_another_pod_is_not_taken_up(tmp_path: Path) -> None:
    copied = r2_record(keys=KEYS, uid="uid-of-a-pod-kilter-planned-elsewhere")
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        assert planned_racks(cluster, tmp_path, pods_with([copied] * 4)) == {"r1", "origin=planned"}


def test_a_record_kilter_signed_is_taken_up_by_a_kilter_holding_the_key(tmp_path: Path) -> None:
    signed = [r2_record(keys=KEYS, uid=f"uid-train-{i}") for i in range(4)]
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        assert planned_racks(cluster, tmp_path, pods_with(signed)) == {"r2", "origin=record"}


def test_a_record_of_a_key_being_rotated_out_is_still_taken_up(tmp_path: Path) -> None:
    (tmp_path / "plan-keys").write_text(f"{'c' * 64}\n{KEY_TEXT}\n")  # the new key first, KEYS' second
    signed = [r2_record(keys=KEYS, uid=f"uid-train-{i}") for i in range(4)]
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        assert planned_racks(cluster, tmp_path, pods_with(signed)) == {"r2", "origin=record"}


def test_without_a_key_file_a_restarted_kilter_plans_afresh(tmp_path: Path) -> None:
    pods = pods_with([None] * 4)
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        for obj in [*fleet(), *pods]:
            cluster.add(obj)
        with kilter(cluster, tmp_path, "kilter-1", keys=False) as first:
            offered = first.passing(pods[0])
            keys = first.app.extender.gangs.keys
            settle("the record", lambda: record_on(cluster, PODS, "train-1") is not None)
            record = record_on(cluster, PODS, "train-1")
            assert record is not None and verifies(record, keys, ["uid-train-1"])
            bind(cluster, "train-0", offered[0])
        with kilter(cluster, tmp_path, "kilter-2", keys=False) as second:
            second.passing(pods[1])
            assert (
                p := second.app.extender.gangs.plan_of(KEY)
            ) is not None and p.origin == "repair"  # beside train-0, not from the record
            assert second.app.extender.gangs.adopted == 0
