"""The plan-key Secret: created when absent, one key for replicas that start together, rotated by the writer alone,
with the previous key still verifying; a malformed Secret is refused at start and outlived later.

Against the list/watch test server over HTTP, which answers create, get and update as kube-apiserver does
(409 AlreadyExists for a taken name, 409 Conflict for a stale resourceVersion). Time is a hand-moved clock.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kilter.gangs.key_secret import DATA_KEY, KeySecret, KeySecretReading, parse_ref
from kilter.gangs.keys import PlanKeys
from kilter.kube.api import ApiServer
from kilter.model.annotations import PLAN_KEY_ROTATED_AT
from kilter.model.errors import InputError
from tests.clock import Clock
from tests.listwatch import SECRETS, ListWatchServer

TOKEN = "key-secret"
NAMESPACE, NAME = "kilter-system", "kilter-plan-keys"
DAY_S = 86400.0
ROTATION_S = 30 * DAY_S
INTERVAL_S = 60.0
T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z
OLD, OTHER = "a" * 64, "c" * 64
Obj = dict[str, Any]


class Keys:
    """Keys drawn in order: ``k0``, ``k1`` ... each 64 characters, so a test can say which one a Secret holds."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.drawn = 0

    def __call__(self) -> str:
        key = f"{self.prefix}{self.drawn}".ljust(64, "0")
        self.drawn += 1
        return key


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([SECRETS], token=TOKEN) as server:
        yield server


def api_of(cluster: ListWatchServer, token: str = TOKEN) -> ApiServer:
    return ApiServer("http", cluster.host, cluster.port, {"Authorization": f"Bearer {token}"})


def replica(cluster: ListWatchServer, clock: Clock, *, writer: bool = True, prefix: str = "k", **kw: Any) -> KeySecret:
    return KeySecret(
        api_of(cluster),
        NAMESPACE,
        NAME,
        is_writer=lambda: writer,
        rotation_s=ROTATION_S,
        interval_s=INTERVAL_S,
        clock=clock,
        new_key=kw.pop("new_key", Keys(prefix)),
        **kw,
    )


def stored(cluster: ListWatchServer) -> Obj:
    return cluster.get_object(SECRETS, NAMESPACE, NAME)


def stored_keys(cluster: ListWatchServer) -> list[str]:
    return base64.b64decode(stored(cluster)["data"][DATA_KEY]).decode().splitlines()


def secret(data: Obj | None, *, rotated_at: str | None = "2026-05-28T20:26:40Z") -> Obj:
    meta: Obj = {"name": NAME, "namespace": NAMESPACE}
    if rotated_at is not None:
        meta["annotations"] = {PLAN_KEY_ROTATED_AT: rotated_at}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": data}


def holding(*keys: str) -> Obj:
    return {DATA_KEY: base64.b64encode("".join(k + "\n" for k in keys).encode()).decode()}


def writes(cluster: ListWatchServer, method: str) -> int:
    return sum(r.method == method for r in cluster.requests)


def signs_with(keys: PlanKeys, key: str) -> bool:
    return keys.sign(b"m") == PlanKeys([key.encode()], source="test").sign(b"m")


def test_a_missing_secret_is_created_with_one_fresh_key(cluster: ListWatchServer) -> None:
    keys = replica(cluster, Clock(T0)).load()
    assert stored_keys(cluster) == ["k0".ljust(64, "0")]
    meta = stored(cluster)["metadata"]
    assert meta["annotations"][PLAN_KEY_ROTATED_AT] == "2026-05-28T20:26:40Z"
    assert stored(cluster)["type"] == "Opaque"
    assert signs_with(keys, stored_keys(cluster)[0])


def test_a_shipped_empty_secret_is_filled_in_place_and_never_created(cluster: ListWatchServer) -> None:
    shipped = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque"}
    cluster.add({**shipped, "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": {"app": "kilter"}}})
    keys = replica(cluster, Clock(T0)).load()
    assert stored_keys(cluster) == ["k0".ljust(64, "0")] and signs_with(keys, stored_keys(cluster)[0])
    assert stored(cluster)["metadata"]["labels"] == {"app": "kilter"}
    assert stored(cluster)["metadata"]["annotations"][PLAN_KEY_ROTATED_AT] == "2026-05-28T20:26:40Z"
    assert (writes(cluster, "POST"), writes(cluster, "PUT")) == (0, 1)


def test_two_replicas_filling_one_shipped_secret_end_with_one_key(cluster: ListWatchServer) -> None:
    cluster.add(
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": NAME, "namespace": NAMESPACE}}
    )
    first, second = replica(cluster, Clock(T0), prefix="a"), replica(cluster, Clock(T0), prefix="b")
    empty = cluster.get_object(SECRETS, NAMESPACE, NAME)
    first.load()
    filled = second._fill(empty, 0.0)  # read before the first one's PUT: its own PUT is refused (409)
    assert stored_keys(cluster) == ["a0".ljust(64, "0")] and filled.keys == (stored_keys(cluster)[0].encode(),)


def test_an_existing_secret_is_read_and_not_written(cluster: ListWatchServer) -> None:
    cluster.add(secret(holding(OLD)))
    keys = replica(cluster, Clock(T0)).load()
    assert signs_with(keys, OLD)
    assert writes(cluster, "POST") == writes(cluster, "PUT") == 0


def test_two_replicas_starting_together_end_with_the_one_key_the_first_created(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    first = replica(cluster, clock, prefix="a")
    drawn = Keys("b")

    def first_creates_meanwhile() -> str:
        first.load()  # between the second's GET (404) and its POST, the first creates the Secret
        return drawn()

    second = replica(cluster, clock, new_key=first_creates_meanwhile)
    keys = second.load()  # its POST is answered 409 AlreadyExists, and it reads the first's Secret
    assert writes(cluster, "POST") == 2
    assert stored_keys(cluster) == ["a0".ljust(64, "0")]
    assert keys.sign(b"m") == first.keys.sign(b"m")
    assert second.failures == 0


def test_the_writer_rotates_after_the_period_keeping_only_the_previous_key(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD, OTHER)))
    writer = replica(cluster, clock)
    writer.load()
    clock.now = T0 + ROTATION_S - 1
    writer.refresh()
    assert stored_keys(cluster) == [OLD, OTHER]  # not due yet
    clock.now = T0 + ROTATION_S
    writer.refresh()
    new = "k0".ljust(64, "0")
    assert stored_keys(cluster) == [new, OLD]  # OTHER, two rotations old, is dropped
    assert stored(cluster)["metadata"]["annotations"][PLAN_KEY_ROTATED_AT] == "2026-06-27T20:26:40Z"
    assert writer.rotations == 1 and writes(cluster, "PUT") == 1
    clock.now += INTERVAL_S
    writer.refresh()
    assert writes(cluster, "PUT") == 1  # the new key's period starts at the rotation


def test_a_new_key_signs_only_after_the_grace_every_replica_reads_it_in(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD)))
    writer, reader = replica(cluster, clock), replica(cluster, clock, writer=False)
    writer.load()
    reader.load()
    clock.now = T0 + ROTATION_S
    writer.refresh()
    new = stored_keys(cluster)[0]
    assert signs_with(writer.keys, OLD)  # the reader, not yet aware of the new key, verifies what is signed now
    assert reader.keys.verify(b"m", writer.keys.sign(b"m"))
    clock.now += INTERVAL_S
    reader.refresh()
    assert reader.keys.verify(b"m", PlanKeys([new.encode()], source="test").sign(b"m"))
    clock.now = T0 + ROTATION_S + 2 * INTERVAL_S
    writer.refresh()
    reader.refresh()
    assert signs_with(writer.keys, new) and signs_with(reader.keys, new)


def test_a_record_signed_before_the_rotation_still_verifies_after_it(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    writer = replica(cluster, clock)
    signed_before = writer.load().sign(b"record and uid")
    clock.now = T0 + ROTATION_S + 2 * INTERVAL_S
    writer.refresh()
    clock.now += 2 * INTERVAL_S
    writer.refresh()
    assert writer.keys.sign(b"record and uid") != signed_before  # the new key signs...
    assert writer.keys.verify(b"record and uid", signed_before)  # ...and the previous one still verifies


def test_a_replica_that_does_not_write_never_rotates_but_takes_up_the_writers_rotation(
    cluster: ListWatchServer,
) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD)))
    follower = replica(cluster, clock, writer=False)
    follower.load()
    clock.now = T0 + 3 * ROTATION_S
    follower.refresh()
    assert stored_keys(cluster) == [OLD] and writes(cluster, "PUT") == 0 and follower.rotations == 0
    replica(cluster, clock, prefix="w").refresh()
    clock.now += 2 * INTERVAL_S
    follower.refresh()
    signed_with_old = PlanKeys([OLD.encode()], source="test").sign(b"m")
    assert signs_with(follower.keys, "w0".ljust(64, "0")) and follower.keys.verify(b"m", signed_with_old)


def test_writers_racing_to_rotate_make_one_rotation_and_retry_nothing(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD)))
    first = replica(cluster, clock, prefix="a")
    drawn = Keys("b")

    def first_rotates_meanwhile() -> str:
        first.refresh()  # between the second's GET and its PUT, the first rotates: the second's version is stale
        return drawn()

    second = replica(cluster, clock, new_key=first_rotates_meanwhile)
    first.load()
    second.load()
    clock.now = T0 + ROTATION_S
    second.refresh()  # its PUT is answered 409 Conflict; it reads the first's Secret and stops there
    assert stored_keys(cluster) == ["a0".ljust(64, "0"), OLD]
    assert writes(cluster, "PUT") == 2
    assert second.rotations == 0 and second.failures == 0 and first.rotations == 1
    assert second.keys.keys == first.keys.keys


def test_a_secret_made_by_hand_without_a_rotation_time_gets_one_and_keeps_its_keys(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD, OTHER), rotated_at=None))
    writer = replica(cluster, clock)
    writer.load()
    writer.refresh()
    assert stored_keys(cluster) == [OLD, OTHER] and writer.rotations == 0
    assert stored(cluster)["metadata"]["annotations"][PLAN_KEY_ROTATED_AT] == "2026-05-28T20:26:40Z"


EMPTIED = [  # at start a shipped empty Secret is filled; a Secret that loses its keys later is malformed
    pytest.param(secret(None), "has no data.keys", id="no data"),
    pytest.param(secret({"other": "eA=="}), "has no data.keys", id="no keys entry"),
]
MALFORMED = [
    pytest.param(secret({DATA_KEY: "not base64!"}), "data.keys is not base64", id="bad base64"),
    pytest.param(secret({DATA_KEY: base64.b64encode(b"\xff" * 40).decode()}), "not UTF-8", id="not text"),
    pytest.param(secret(holding("short")), "the key on line 1 is shorter than 32", id="a short key"),
    pytest.param(secret(holding()), "no key in it", id="no key"),
    pytest.param(secret(holding(OLD), rotated_at="yesterday"), "is not an RFC 3339 time", id="bad rotation time"),
    pytest.param(secret(holding(OLD), rotated_at="2026-05-28T20:26:40"), "RFC 3339", id="rotation time without zone"),
]


@pytest.mark.parametrize(("malformed", "message"), MALFORMED)
def test_a_malformed_secret_is_refused_at_start_naming_it(
    cluster: ListWatchServer, malformed: Obj, message: str
) -> None:
    cluster.add(malformed)
    with pytest.raises(InputError, match=message) as caught:
        replica(cluster, Clock(T0)).load()
    assert str(caught.value).startswith(f"--plan-key-secret {NAMESPACE}/{NAME}: ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("malformed", "message"), [*MALFORMED, *EMPTIED])
def test_a_secret_that_turns_malformed_later_leaves_the_last_good_keys_in_use_and_counts_a_failure(
    cluster: ListWatchServer, malformed: Obj, message: str
) -> None:
    clock = Clock(T0)
    cluster.add(secret(holding(OLD)))
    writer = replica(cluster, clock)
    writer.load()
    cluster.update(malformed)
    clock.now = T0 + ROTATION_S  # due, yet nothing is written over a Secret kilter cannot read
    writer.refresh()
    assert signs_with(writer.keys, OLD)
    assert writer.failures == 1 and re.search(message, writer.last_error)
    assert writes(cluster, "PUT") == 0
    registry = CollectorRegistry()
    registry.register(KeySecretReading(writer))
    assert registry.get_sample_value("kilter_plan_key_secret_failures_total") == 1
    cluster.update(secret(holding(OTHER)))
    writer.refresh()
    assert signs_with(writer.keys, OTHER) and writer.last_error == ""


def test_a_secret_the_api_server_refuses_is_an_error_at_start_and_a_failure_later(cluster: ListWatchServer) -> None:
    with pytest.raises(InputError, match=f"--plan-key-secret {NAMESPACE}/{NAME}: API server answered 401"):
        KeySecret(api_of(cluster, token="wrong"), NAMESPACE, NAME).load()
    cluster.add(secret(holding(OLD)))
    good = replica(cluster, Clock(T0))
    good.load()
    good.api = api_of(cluster, token="wrong")
    good.refresh()
    assert good.failures == 1 and signs_with(good.keys, OLD)


def test_a_deleted_secret_is_created_again(cluster: ListWatchServer) -> None:
    clock = Clock(T0)
    writer = replica(cluster, clock)
    writer.load()
    cluster.delete("", "secrets", NAMESPACE, NAME)
    writer.refresh()
    assert stored_keys(cluster) == ["k1".ljust(64, "0")] and signs_with(writer.keys, "k1".ljust(64, "0"))


@pytest.mark.parametrize(
    "ref", ["kilter-plan-keys", "/kilter-plan-keys", "ns/", "ns/a/b", "Kube-System/keys", "ns/../secrets"]
)
def test_a_secret_reference_must_be_a_namespace_and_a_name(ref: str) -> None:
    with pytest.raises(InputError, match="--plan-key-secret"):
        parse_ref(ref)


def test_a_secret_reference_splits_into_namespace_and_name() -> None:
    assert parse_ref("kube-system/kilter-plan-keys") == ("kube-system", "kilter-plan-keys")
