"""Plan keys kept in a Secret that kilter creates, every replica reads, and the writing replica rotates (#17).

``--plan-key-file`` needs someone to make a key, put it in a Secret and
rotate it by hand; ``--plan-key-secret NAMESPACE/NAME`` does all three, so
every replica signs with the same key from the first start on and no key is
ever pasted anywhere. The Secret's ``data.keys`` is a key file's text (one
key per line, the first signs, any verifies: ``PlanKeys.parse``), base64 as
every Secret value, and its annotation ``kilter.dev/plan-key-rotated-at``
says when the first key was put first.

* **At start** (``load``) a replica GETs the Secret. Present but empty (no
  ``data.keys``: config/ ships it so, to grant no create on Secrets), it PUTs
  a fresh key into it (a 409: another replica filled it first). Absent (404),
  it POSTs one with a fresh key (``secrets.token_hex(32)``); a POST that loses
  the race to another replica is answered 409 AlreadyExists, and the loser
  reads the winner's. A malformed Secret (``data.keys`` not base64, not UTF-8,
  no key in it, a key under ``MIN_KEY_CHARS``, a rotation time that is not RFC
  3339) is an ``InputError``: ``kilter serve`` exits 2 naming it, since a
  replica that signed with a key of its own would split the replicas.
* **Every** ``interval_s`` (``refresh``) it reads the Secret again and swaps
  the keys into the one ``PlanKeys`` the gang book and the recorder hold
  (``PlanKeys.replace``), so a rotation reaches every replica. A read that
  fails, or finds the Secret malformed, keeps the last good keys and counts
  in ``failures`` (``kilter_plan_key_secret_failures_total``).
* **Rotation**: once the first key is ``rotation_s`` old, the replica that
  writes (``is_writer``: the leader) puts a new key first and keeps only the
  previous one, in a PUT carrying the resourceVersion it read. A 409 means
  another replica or a person changed the Secret since: that version is read
  and held, and nothing is retried before the next round, so racing writers
  make one rotation between them, not a storm. A Secret without the
  annotation (made by hand) gets it stamped, keys unchanged: its period
  starts then. The previous key verifies records signed before the rotation
  (a record older than the gang timeout is never adopted anyway, so
  ``rotation_s`` must exceed it).
* **Grace**: a replica learns of a rotation only at its next read, up to
  ``interval_s`` later, and would meanwhile refuse records signed with the new
  key. So for ``grace_s`` (two intervals) after the rotation time every
  replica still signs with the previous key while verifying both; the
  annotation, not a replica's own read, decides when the new key signs, so
  the replicas switch together.

RBAC: get and update on this one Secret by name. create is needed only where
the Secret is not shipped: a create names no object in its URL, so
``resourceNames`` cannot narrow it, and create on Secrets would let a holder
make a service-account token Secret and read it under the granted name; the
manifests ship the Secret empty and grant no create. No list or watch: that
is why the Secret is polled.
"""

from __future__ import annotations

import base64
import binascii
import copy
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kilter.gangs.keys import PlanKeys
from kilter.kube.api import ApiError, ApiServer, check_name, check_namespace, object_path
from kilter.model.annotations import PLAN_KEY_ROTATED_AT
from kilter.model.errors import ConfigError, InputError

__all__ = [
    "DATA_KEY",
    "DEFAULT_ROTATION_S",
    "REREAD_INTERVAL_S",
    "KeySecret",
    "KeySecretReading",
    "StoredKeys",
    "decode",
    "parse_ref",
]

log = logging.getLogger("kilter.plans")

Obj = dict[str, Any]

DATA_KEY = "keys"
"""The Secret's data key holding the key-file text."""

DEFAULT_ROTATION_S = 30 * 86400.0
"""A new key every 30 days: one Secret write a month, and a key copied out of a backup or a log is useless a month
later at most; anything above the gang timeout plus the grace would do."""

REREAD_INTERVAL_S = 60.0
"""Seconds between reads of the Secret: one GET a minute per replica, and the grace a rotation waits out is two."""


def parse_ref(text: str, flag: str = "--plan-key-secret") -> tuple[str, str]:
    """A flag's NAMESPACE/NAME (``--plan-key-secret``'s by default), each checked as the API server would;
    InputError naming ``flag`` otherwise."""
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise InputError(f"{flag} must be NAMESPACE/NAME, got {text[:100]!r}")
    return check_namespace(namespace, what=f"{flag} namespace"), check_name(name, what=flag)


@dataclass(frozen=True)
class StoredKeys:
    """What one read of the Secret says: its keys (the first signs), when the first was put first (seconds since
    the epoch; None without the annotation), and the Secret as read, resourceVersion included, for the next PUT."""

    keys: tuple[bytes, ...]
    rotated_at: float | None
    secret: Obj


def decode(secret: Any, *, source: str) -> StoredKeys:
    """The keys a Secret holds; InputError naming ``source`` and what is wrong when it holds none kilter can use."""
    data = secret.get("data") if isinstance(secret, dict) else None
    raw = data.get(DATA_KEY) if isinstance(data, dict) else None
    if not isinstance(raw, str):
        raise InputError(f"{source}: the Secret has no data.{DATA_KEY}")
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8")
    except binascii.Error:
        raise InputError(f"{source}: data.{DATA_KEY} is not base64") from None
    except UnicodeDecodeError:
        raise InputError(f"{source}: data.{DATA_KEY} is not UTF-8 text") from None
    keys = PlanKeys.parse(text, source=f"{source}: data.{DATA_KEY}")
    meta = secret.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    stamp = notes.get(PLAN_KEY_ROTATED_AT) if isinstance(notes, dict) else None
    return StoredKeys(keys, None if stamp is None else _parse_time(stamp, source=source), secret)


def _parse_time(stamp: object, *, source: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with its offset (``Z`` or ``+01:00``)."""
    try:
        if not isinstance(stamp, str):
            raise ValueError(stamp)
        at = datetime.fromisoformat(stamp)
        if at.tzinfo is None:
            raise ValueError(stamp)
        return at.timestamp()
    except (ValueError, OverflowError):
        raise InputError(
            f"{source}: annotation {PLAN_KEY_ROTATED_AT} {str(stamp)[:40]!r} is not an RFC 3339 time"
        ) from None


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encode(keys: tuple[bytes, ...]) -> str:
    return base64.b64encode(b"".join(key + b"\n" for key in keys)).decode("ascii")


class KeySecret:
    """The Secret ``namespace/name`` as the source of ``keys``: read or created by ``load``, followed by ``refresh``
    (on a daemon thread of its own after ``start``), rotated by the replica ``is_writer`` names.

    Durations are seconds; ``clock`` gives seconds since the epoch (the
    rotation time is compared with it, so a test moves time by hand), and
    ``new_key`` draws a key. ``failures``, ``rotations`` and ``last_error``
    are for /metrics and the tests.
    """

    def __init__(
        self,
        api: ApiServer,
        namespace: str,
        name: str,
        *,
        is_writer: Callable[[], bool] = lambda: True,
        rotation_s: float = DEFAULT_ROTATION_S,
        interval_s: float = REREAD_INTERVAL_S,
        clock: Callable[[], float] = time.time,
        new_key: Callable[[], str] = lambda: secrets.token_hex(32),
    ) -> None:
        if not 0 < 2 * interval_s < rotation_s:
            raise ConfigError(
                f"plan keys: the rotation period ({rotation_s:g} s) must exceed twice the re-read interval "
                f"({interval_s:g} s), the grace a new key waits before it signs"
            )
        self.api = api
        self.path = object_path("/api/v1", "secrets", name, namespace=namespace)
        self.collection = object_path("/api/v1", "secrets", namespace=namespace)
        self.name, self.namespace = name, namespace
        self.source = f"--plan-key-secret {namespace}/{name}"
        self.is_writer = is_writer
        self.rotation_s = rotation_s
        self.interval_s = interval_s
        self.grace_s = 2 * interval_s
        self.keys = PlanKeys.ephemeral(announce=False)  # replaced by ``load`` before anything signs
        self.keys.source = self.source
        self.failures = 0
        self.rotations = 0
        self.last_error = ""
        self._clock = clock
        self._new_key = new_key
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ start, follow, stop

    def load(self) -> PlanKeys:
        """The Secret's keys, read or created now; InputError when the Secret is malformed or the API refuses."""
        now = self._clock()
        try:
            stored = self._read_or_create(now, fill=True)
        except ApiError as exc:
            raise InputError(f"{self.source}: {exc}") from None
        self._hold(stored, now)
        return self.keys

    def start(self) -> None:
        """Re-read every ``interval_s`` on a daemon thread (a running one is left as it is)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="plan-key-secret", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=3 * self.api.timeout_s)  # a round in flight: at most a GET, a PUT and a GET

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.refresh()

    # ------------------------------------------------------------------ one round

    def refresh(self) -> None:
        """Read the Secret and hold its keys, then, on the writer, rotate when due; a failure keeps the last good
        keys and counts in ``failures``."""
        now = self._clock()
        try:
            stored = self._read_or_create(now, fill=False)
        except (ApiError, InputError) as exc:
            self._fail(exc)
            return
        self._hold(stored, now)
        if not self.is_writer() or not self._is_due(stored, now):
            return
        try:
            rotated = self._rotate(stored, now)
        except (ApiError, InputError) as exc:
            self._fail(exc)
            return
        self._hold(rotated, now)

    def _read_or_create(self, now: float, *, fill: bool) -> StoredKeys:
        """The Secret's keys; made when it is absent, and with ``fill`` (at start only) put into it when it is
        shipped empty. A Secret that loses its keys later is malformed, not refilled: a new key out of turn would
        leave records other replicas signed unverifiable."""
        try:
            secret = self.api.call("GET", self.path)
        except ApiError as exc:
            if exc.code != 404:
                raise
        else:
            data = secret.get("data") if isinstance(secret, dict) else None
            if fill and isinstance(secret, dict) and not (isinstance(data, dict) and DATA_KEY in data):
                return self._fill(secret, now)
            return self._decode(secret)
        try:
            created = self.api.call("POST", self.collection, self._fresh(now))
            log.info("%s: created with a new plan key", self.source)
            return self._decode(created)
        except ApiError as exc:
            if exc.code != 409:
                raise
        return self._decode(self.api.call("GET", self.path))  # another replica created it first: its key it is

    def _fill(self, secret: Obj, now: float) -> StoredKeys:
        """A Secret shipped empty (config/: so that kilter needs no create on Secrets) gets its first key, in a PUT on
        the resourceVersion read; on 409 another replica filled it first, and its key is the one read."""
        body = copy.deepcopy(secret)
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), PLAN_KEY_ROTATED_AT: _rfc3339(now)}
        body["data"] = {**(body.get("data") or {}), DATA_KEY: _encode((self._new_key().encode(),))}
        try:
            answer = self.api.call("PUT", self.path, body)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return self._decode(self.api.call("GET", self.path))
        log.info("%s: filled with a new plan key", self.source)
        return self._decode(answer)

    def _fresh(self, now: float) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/managed-by": "kilter"},
                "annotations": {PLAN_KEY_ROTATED_AT: _rfc3339(now)},
            },
            "type": "Opaque",
            "data": {DATA_KEY: _encode((self._new_key().encode(),))},
        }

    def _is_due(self, stored: StoredKeys, now: float) -> bool:
        """Whether the first key is ``rotation_s`` old (or the Secret has no rotation time: it gets one now). A time
        that far in the future is no more believable than one that far past."""
        return stored.rotated_at is None or abs(now - stored.rotated_at) >= self.rotation_s

    def _rotate(self, stored: StoredKeys, now: float) -> StoredKeys:
        """PUT the Secret with a new first key and the previous one (or, unstamped, its keys and a time), on the
        resourceVersion read; on 409 the Secret as it now is."""
        stamp_only = stored.rotated_at is None
        keys = stored.keys if stamp_only else (self._new_key().encode(), stored.keys[0])
        body = copy.deepcopy(stored.secret)
        meta = body.setdefault("metadata", {})
        meta["annotations"] = {**(meta.get("annotations") or {}), PLAN_KEY_ROTATED_AT: _rfc3339(now)}
        body["data"] = {**body["data"], DATA_KEY: _encode(keys)}
        try:
            answer = self.api.call("PUT", self.path, body)
        except ApiError as exc:
            if exc.code != 409:
                raise
            return self._decode(self.api.call("GET", self.path))  # someone else changed it first: theirs stands
        if not stamp_only:
            self.rotations += 1
            log.info("%s: rotated the plan key (the previous one still verifies)", self.source)
        return self._decode(answer)

    def _decode(self, secret: Any) -> StoredKeys:
        return decode(secret, source=self.source)

    def _hold(self, stored: StoredKeys, now: float) -> None:
        """Swap ``stored``'s keys in; within ``grace_s`` of the rotation time the previous key still signs."""
        keys, at = stored.keys, stored.rotated_at
        if len(keys) > 1 and at is not None and abs(now - at) < self.grace_s:
            keys = (keys[1], keys[0], *keys[2:])
        self.keys.replace(keys)
        self.last_error = ""

    def _fail(self, exc: Exception) -> None:
        self.failures += 1
        self.last_error = str(exc)
        log.warning("%s: %s; keeping the plan keys last read", self.source, exc)


class KeySecretReading(Collector):
    """The Secret's counts at scrape time: failed reads and writes, and rotations this replica made."""

    def __init__(self, secret: KeySecret) -> None:
        self.secret = secret

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "kilter_plan_key_secret_failures",
            "Reads or writes of the --plan-key-secret Secret that failed or found it malformed (the keys last read "
            "stay in use)",
            value=self.secret.failures,
        )
        yield CounterMetricFamily(
            "kilter_plan_key_rotations", "Plan keys this replica rotated in the Secret", value=self.secret.rotations
        )
