"""Leader election over a ``coordination.k8s.io/v1`` Lease, as client-go's ``tools/leaderelection`` does it.

Replicas of kilter that write to the cluster (bindings, admission checks)
must not act twice; one of them holds the Lease and the others wait. The
protocol is client-go's (``leaderelection.go`` with ``resourcelock/leaselock.go``):

* Every ``retry_period_s`` a candidate GETs the Lease. Absent (404): it POSTs
  one naming itself (``leaseTransitions`` 0). A POST that loses the race is
  answered 409 AlreadyExists, and the loser simply follows.
* Held by someone else and not expired: follow. Expiry is judged **by the local
  clock, from when we saw the record last change**, never from the remote
  ``renewTime``, so clock skew between replicas does not matter; only the
  rate at which clocks run does.
* Otherwise (expired, released, or ours): PUT it back with the
  ``metadata.resourceVersion`` the GET returned. The API server takes only one
  of several PUTs made from the same version (the rest get 409 Conflict), so at
  most one candidate wins each round. Taking it from any other holder (an empty
  one, left by a release, included, as in client-go) sets ``acquireTime`` and
  adds one to ``leaseTransitions``.
* The leader renews by PUTting straight from the Lease it last wrote (client-go's
  optimistic fast path, one call instead of two), and falls back to the GET
  above when that fails.
* A leader that has not renewed within ``renew_deadline_s`` stops leading. This
  is shorter than the lease others wait out, so the old leader always gives up
  before a follower can take over. ``is_leader`` checks the deadline on every
  read, so it turns False on time even while the elector's thread is stuck in a
  call.
* ``stop(release=True)`` writes ``holderIdentity ""`` and ``leaseDurationSeconds``
  1 (client-go's ``ReleaseOnCancel``), so a follower takes over on its next
  poll instead of waiting for the lease to run out.

``leaseDurationSeconds`` is whole seconds on the wire. ``lease_duration_s`` is
rounded *up* (client-go truncates, but its durations are whole seconds), so the
wait a follower reads is never shorter than the one the leader's renew deadline
was checked against.

Callbacks run on the elector's own thread, one at a time, and renewals wait
while they run, so they must return promptly (client-go starts
``OnStartedLeading`` on a goroutine instead). A caller that needs them on its
asyncio loop hops there itself (``loop.call_soon_threadsafe``). Unlike
client-go, ``on_stopped_leading`` is called only after leading, never merely
on exit. When it returns, the work that the Lease guards should have stopped:
on ``stop(release=True)`` the Lease is released only after it returns.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.model.errors import ConfigError

__all__ = ["JITTER", "LEASES_API", "LeaderElector", "LeaseRecord", "micro_time"]

log = logging.getLogger("kilter.state")

Obj = dict[str, Any]

LEASES_API = "/apis/coordination.k8s.io/v1"

JITTER = 1.2
"""A follower waits between ``retry_period_s`` and (1 + JITTER) × that, as client-go's ``JitterFactor``; it keeps
candidates out of lockstep."""

RELEASE_ATTEMPTS = 3
"""A release that meets a 409 (a renewal of ours still in flight) reads the Lease again and retries this often."""


def micro_time(t: float) -> str:
    """``metav1.MicroTime`` as the API server writes it: RFC 3339 in UTC with six fractional digits.

    ``t`` is seconds since the epoch; it is rounded to the microsecond, so
    0.9999996 s carries into the next second.
    """
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass(frozen=True)
class LeaseRecord:
    """The fields of a LeaseSpec that leader election reads and writes (client-go's ``LeaderElectionRecord``).

    Timestamps stay as the strings the server sent: they are compared for
    change, never trusted as times.
    """

    holder: str = ""
    duration_s: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def of(cls, lease: Obj) -> LeaseRecord:
        spec = lease.get("spec")
        if not isinstance(spec, dict):
            spec = {}

        def whole(key: str) -> int:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        return cls(
            str(spec.get("holderIdentity") or ""),
            whole("leaseDurationSeconds"),
            str(spec.get("acquireTime") or ""),
            str(spec.get("renewTime") or ""),
            whole("leaseTransitions"),
        )

    def spec(self) -> Obj:
        return {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.transitions,
        }


class LeaderElector:
    """One candidate for the Lease ``namespace/name``, campaigning as ``identity`` on its own daemon thread.

    Durations are seconds. As in client-go, ``lease_duration_s`` must exceed
    ``renew_deadline_s``, which must exceed ``JITTER`` × ``retry_period_s``:
    otherwise a leader could still believe it leads after a follower has
    taken over. ``clock`` gives seconds since the epoch; it stamps
    ``renewTime``/``acquireTime`` and times expiry and the renew deadline, so
    a test can move time by hand.

    ``identity`` must differ between replicas (the pod name): a Lease that
    names us is renewed, not contested. A ``namespace`` or ``name`` the API
    server would not accept (``--lease ../x``) is an InputError here, at
    startup, and never reaches a URL.

    ``is_leader`` and ``holder`` are safe to read from any thread.
    ``last_error`` is the latest failure ("" after a successful call).
    """

    def __init__(
        self,
        api: ApiServer,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.time,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
    ) -> None:
        if not identity:
            raise ConfigError("leader election needs a non-empty identity")
        if not 0 < retry_period_s * JITTER < renew_deadline_s < lease_duration_s:
            raise ConfigError(
                f"leader election needs lease duration ({lease_duration_s} s) > renew deadline ({renew_deadline_s} s)"
                f" > {JITTER} × retry period ({retry_period_s} s) > 0"
            )
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.last_error = ""
        self.path = object_path(LEASES_API, "leases", name, namespace=namespace)  # InputError for a bad name
        self.collection = object_path(LEASES_API, "leases", namespace=namespace)
        self._clock = clock
        self._random = random.Random()
        self._lock = threading.Lock()  # guards the four fields below, which other threads read
        self._leading = False
        self._renewed_at = 0.0  # clock() when the last successful write of ours was sent
        self._observed = LeaseRecord()
        self._observed_at = 0.0  # clock() when ``_observed`` last changed
        self._lease: Obj | None = None  # the Lease as the server last answered, for the next PUT
        self._release = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what other threads read

    @property
    def is_leader(self) -> bool:
        """Whether we hold the Lease and renewed it within ``renew_deadline_s``, checked as of now."""
        with self._lock:
            return self._leading and self._clock() - self._renewed_at <= self.renew_deadline_s

    @property
    def holder(self) -> str:
        """The ``holderIdentity`` last seen on the Lease ("" when none is seen yet, or it was released)."""
        with self._lock:
            return self._observed.holder

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Campaign on a new daemon thread (again after ``stop``); a running elector is left as it is."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; a leader calls ``on_stopped_leading`` and then, if ``release``, hands the Lease back.

        Waits for the thread unless called from it (from a callback), where
        waiting would never end.
        """
        self._release = release
        self._stop.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        thread.join(timeout=4 * self.renew_deadline_s + 1)  # a round in flight (up to 3 calls), then the release
        if thread.is_alive():
            log.warning("lease %s/%s: elector still busy after stop", self.namespace, self.name)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._step()
            self._stop.wait(self._pause())
        if self._leading:
            self._stop_leading("stopping")
            if self._release:
                self._release_lease()

    def _pause(self) -> float:
        """A leader polls every retry period, and wakes at its renew deadline; a follower waits with jitter."""
        if self._leading:
            remaining = self._renewed_at + self.renew_deadline_s - self._clock()
            return max(0.0, min(self.retry_period_s, remaining))
        return self.retry_period_s * (1 + JITTER * self._random.random())

    # ------------------------------------------------------------------ one round

    def _step(self) -> None:
        """One try to acquire or renew, and the leadership changes it implies."""
        started = self._clock()
        if self._leading and started - self._renewed_at > self.renew_deadline_s:
            self._stop_leading(f"not renewed within {self.renew_deadline_s} s")
        try:
            held = self._try_acquire_or_renew(started)
        except (ApiError, OSError, ValueError) as exc:
            self._fail(str(exc))
            held = False
        lapsed = self._clock() - self._renewed_at > self.renew_deadline_s
        if held:
            if self._leading and lapsed:  # readers already saw is_leader False: say so before leading again
                self._stop_leading(f"renewed only after {self.renew_deadline_s} s")
            with self._lock:
                self._renewed_at = started
            if not self._leading:
                self._start_leading()
        elif self._leading and (lapsed or self.holder != self.identity):
            self._stop_leading(f"lease held by {self.holder or 'no one'}" if not lapsed else "renew deadline passed")

    def _try_acquire_or_renew(self, now: float) -> bool:
        """Whether we hold the Lease after this round (client-go's ``tryAcquireOrRenew``); a refusal raises."""
        stamp = micro_time(now)
        ours = LeaseRecord(self.identity, math.ceil(self.lease_duration_s), stamp, stamp, 0)
        if self._leading and self._lease is not None and self._is_valid(now):
            mine = self._observed_record()
            renewal = dataclasses.replace(ours, acquire_time=mine.acquire_time, transitions=mine.transitions)
            try:
                if self._write("PUT", self._lease, renewal):
                    return True
            except (ApiError, ValueError) as exc:
                log.debug("lease %s/%s: fast renewal failed (%s); reading it", self.namespace, self.name, exc)
        try:
            lease = self._call("GET", self.path)
        except ApiError as exc:
            if exc.code != 404:
                raise
            return self._write("POST", None, ours)
        self.last_error = ""
        record = LeaseRecord.of(lease)
        self._observe(record)
        if record.holder and record.holder != self.identity and self._is_valid(now):
            return False
        if record.holder == self.identity:
            ours = dataclasses.replace(ours, acquire_time=record.acquire_time, transitions=record.transitions)
        else:
            ours = dataclasses.replace(ours, transitions=record.transitions + 1)
        return self._write("PUT", lease, ours)

    def _write(self, method: str, lease: Obj | None, record: LeaseRecord, *, budget_s: float | None = None) -> bool:
        """Create (POST) or replace (PUT, from ``lease`` and its resourceVersion) the Lease with ``record``.

        False when another candidate wrote first (409: AlreadyExists for a
        POST, Conflict for a PUT) or the Lease vanished meanwhile (404): not
        failures, just a lost round.
        """
        if lease is None:
            body: Obj = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": record.spec(),
            }
            path = self.collection
        else:
            spec = lease.get("spec")
            body = {**lease, "spec": {**(spec if isinstance(spec, dict) else {}), **record.spec()}}
            path = self.path
        try:
            answer = self._call(method, path, body, budget_s=budget_s)
        except ApiError as exc:
            if exc.code not in (404, 409):
                raise
            log.debug("lease %s/%s: %s lost the round: %s", self.namespace, self.name, method, exc)
            return False
        self.last_error = ""
        self._lease = answer
        self._observe(LeaseRecord.of(answer), force=True)
        return True

    def _call(self, method: str, path: str, body: Obj | None = None, *, budget_s: float | None = None) -> Obj:
        """One call, with a timeout that lets a leader notice its renew deadline on time (or ``budget_s``)."""
        budget = self.renew_deadline_s if budget_s is None else budget_s
        if self._leading:
            budget = max(self.retry_period_s, self._renewed_at + self.renew_deadline_s - self._clock())
        api = dataclasses.replace(self.api, timeout_s=min(self.api.timeout_s, budget))
        answer = api.call(method, path, body)
        if not isinstance(answer, dict):
            raise ValueError(f"{method} {path}: the answer is not a Lease")
        return answer

    # ------------------------------------------------------------------ bookkeeping

    def _observed_record(self) -> LeaseRecord:
        with self._lock:
            return self._observed

    def _observe(self, record: LeaseRecord, *, force: bool = False) -> None:
        """Note the record and, if it changed (or we wrote it), when: expiry counts from that moment."""
        with self._lock:
            if record == self._observed and not force:
                return
            if record.holder != self._observed.holder:
                log.info("lease %s/%s: held by %s", self.namespace, self.name, record.holder or "no one")
            self._observed = record
            self._observed_at = self._clock()

    def _is_valid(self, now: float) -> bool:
        """Whether the observed lease has not yet run out, counting from when we saw it change (local clock)."""
        with self._lock:
            return self._observed_at + self._observed.duration_s > now

    def _fail(self, message: str) -> None:
        if message != self.last_error:
            log.warning("lease %s/%s: %s (retrying)", self.namespace, self.name, message)
        self.last_error = message

    def _start_leading(self) -> None:
        with self._lock:
            self._leading = True
        log.info("lease %s/%s: %s started leading", self.namespace, self.name, self.identity)
        self._callback(self.on_started_leading)

    def _stop_leading(self, why: str) -> None:
        with self._lock:
            self._leading = False
        log.info("lease %s/%s: %s stopped leading: %s", self.namespace, self.name, self.identity, why)
        self._callback(self.on_stopped_leading)

    def _callback(self, callback: Callable[[], None] | None) -> None:
        """Run a caller's callback; its failure is logged, and must not end the election."""
        if callback is None:
            return
        try:
            callback()
        except Exception:
            log.exception("lease %s/%s: leadership callback failed", self.namespace, self.name)

    def _release_lease(self) -> None:
        """Hand the Lease back (client-go's ``tryRelease``): empty holder, 1 s duration, so a follower takes it now.

        Only a Lease that still names us is touched; a 409 means a renewal of
        ours landed meanwhile, so it is read again. Like client-go, the whole
        release gets ``renew_deadline_s`` of real time (monotonic: it bounds how
        long ``stop`` waits, whatever the injected clock says).
        """
        until = time.monotonic() + self.renew_deadline_s
        for _ in range(RELEASE_ATTEMPTS):
            try:
                lease = self._call("GET", self.path, budget_s=max(0.001, until - time.monotonic()))
                record = LeaseRecord.of(lease)
                if record.holder != self.identity:
                    return
                stamp = micro_time(self._clock())
                released = dataclasses.replace(record, holder="", duration_s=1, acquire_time=stamp, renew_time=stamp)
                if self._write("PUT", lease, released, budget_s=max(0.001, until - time.monotonic())):
                    log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
                    return
            except (ApiError, OSError, ValueError) as exc:
                if not (isinstance(exc, ApiError) and exc.code == 404):
                    log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
                return
