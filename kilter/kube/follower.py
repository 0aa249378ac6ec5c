"""Follow kube-scheduler's own Lease instead of campaigning: kilter writes while the scheduler in its pod leads.

As a sidecar of several kube-scheduler replicas, kilter must write (plan
records, AdmissionCheck status, Events) from the replica whose scheduler is
the one scheduling: that is the kilter whose extender makes the plans. A Lease
of kilter's own would be won independently. kube-scheduler names itself
``<hostname>_<uuid>`` in its Lease, and every container of a pod shares the
pod's hostname, so kilter reads that Lease every retry period and counts as
the writer while the holder is ``<its hostname>`` or ``<its hostname>_...``
and the holder has renewed recently.

"Recently" is judged as client-go's followers judge expiry: by the local
clock, from when the record was last seen to change (every renewal changes
``renewTime``). kilter stops counting itself the writer a little earlier than
another candidate could take the Lease over (one jittered poll interval
before the lease duration runs out), which for kube-scheduler's defaults is
about when the scheduler itself gives up at its renew deadline. The follower
never writes the Lease.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from kilter.kube.api import ApiError, ApiServer, object_path
from kilter.kube.leader import JITTER, LEASES_API, LeaseRecord

__all__ = ["LeaseFollower"]

log = logging.getLogger("kilter.state")


class LeaseFollower:
    """Reads the Lease ``namespace/name`` on its own daemon thread; ``is_leader`` while ``hostname``'s pod holds it.

    Same surface as ``LeaderElector`` (``is_leader``, ``holder``, ``start``,
    ``stop``, ``last_error``), so ``kilter serve`` gates its writers on either.
    A ``namespace`` or ``name`` the API server would not accept is an
    InputError here, at startup.
    """

    def __init__(
        self,
        api: ApiServer,
        namespace: str,
        name: str,
        hostname: str,
        *,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.hostname = hostname
        self.retry_period_s = retry_period_s
        self.last_error = ""
        self.path = object_path(LEASES_API, "leases", name, namespace=namespace)  # InputError for a bad name
        self._clock = clock
        self._random = random.Random()
        self._lock = threading.Lock()
        self._observed = LeaseRecord()
        self._observed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def is_leader(self) -> bool:
        """The scheduler beside kilter holds the Lease, and was seen renewing it lately."""
        with self._lock:
            record, seen_at = self._observed, self._observed_at
        if not self._ours(record.holder):
            return False
        margin = self.retry_period_s * (1 + JITTER)
        return self._clock() < seen_at + record.duration_s - margin

    @property
    def holder(self) -> str:
        with self._lock:
            return self._observed.holder

    def _ours(self, holder: str) -> bool:
        return bool(holder) and (holder == self.hostname or holder.startswith(self.hostname + "_"))

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"lease-follower-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop reading (``release`` is accepted for ``LeaderElector``'s sake: a follower holds nothing)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.api.timeout_s + 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.retry_period_s * (1 + JITTER * self._random.random()))

    def poll(self) -> None:
        """Read the Lease once; a change of record restarts the expiry count (a read that fails changes nothing)."""
        try:
            lease = self.api.call("GET", self.path)
            record = LeaseRecord.of(lease if isinstance(lease, dict) else {})
        except ApiError as exc:
            if exc.code != 404:
                if str(exc) != self.last_error:
                    log.warning("lease %s/%s: %s (retrying)", self.namespace, self.name, exc)
                self.last_error = str(exc)
                return
            record = LeaseRecord()
        self.last_error = ""
        with self._lock:
            if record == self._observed:
                return
            if record.holder != self._observed.holder:
                log.info(
                    "lease %s/%s: held by %s%s",
                    self.namespace,
                    self.name,
                    record.holder or "no one",
                    " (the scheduler in this pod: kilter writes)" if self._ours(record.holder) else "",
                )
            self._observed = record
            self._observed_at = self._clock()
