"""Leader election against a Lease store that keeps kube-apiserver's rules, over real HTTP on loopback.

The store honours ``resourceVersion`` (a stale PUT is 409 Conflict, a second
POST 409 AlreadyExists, a missing Lease 404) and answers refusals with
``metav1.Status`` bodies. Followers run on clocks the test holds still, so a
takeover can only come from a release or from the test moving time: nothing
depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kilter.kube.api import ApiServer
from kilter.kube.leader import LeaderElector, micro_time
from kilter.model.errors import ConfigError
from tests.fakeapi import Answer, Call, FakeApi, running, status

NAMESPACE = "kilter-system"
NAME = "kilter"
COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
LEASE = f"{COLLECTION}/{NAME}"
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
T0 = 1_796_251_988.123456  # 2026-12-02T22:53:08.123456Z

FAST: dict[str, Any] = {"lease_duration_s": 1.5, "renew_deadline_s": 0.5, "retry_period_s": 0.02}
"""Lease 1.5 s (2 on the wire, rounded up), renew deadline 0.5 s, a retry every 20 ms (up to 44 ms with jitter)."""

PATIENT: dict[str, Any] = {"lease_duration_s": 30.0, "renew_deadline_s": 10.0}
"""For races held at a barrier: calls time out after the renew deadline, which must outlast the barrier's wait."""


class LeaseStore:
    """The Leases of one namespace as kube-apiserver keeps them: every write bumps ``resourceVersion``.

    ``failing`` turns every answer into a 500. ``barrier`` holds GETs that see
    ``barrier_when`` true until all parties have arrived, so they answer from
    the same version and the writes that follow really race.
    """

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.failing = False
        self.barrier: threading.Barrier | None = None
        self.barrier_when: Callable[[dict[str, Any] | None], bool] = lambda lease: lease is None
        self.answers: list[tuple[str, str, int]] = []  # (method, who, code) of every answer
        self._lock = threading.Lock()

    def respond(self, call: Call) -> Answer:
        who = call.authorization.removeprefix("Bearer ")
        code, body = self._answer(call)
        with self._lock:
            self.answers.append((call.method, who, code))
        return code, body

    def _answer(self, call: Call) -> Answer:
        if self.failing:
            return status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        if call.method == "GET" and call.path.startswith(f"{COLLECTION}/"):
            name = call.path.rsplit("/", 1)[1]
            with self._lock:
                lease = self.leases.get(name)
            barrier = self.barrier
            if barrier is not None and self.barrier_when(lease):  # answer what was read, once all have read it
                with contextlib.suppress(threading.BrokenBarrierError):
                    barrier.wait(timeout=5)
            if lease is None:
                return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
            return 200, lease
        if call.method == "POST" and call.path == COLLECTION:
            name = call.body["metadata"]["name"]
            with self._lock:
                if name in self.leases:
                    return status(409, "AlreadyExists", f'leases.coordination.k8s.io "{name}" already exists')
                lease = self._stamp(call.body, uid=f"uid-{name}")
                self.leases[name] = lease
                return 201, lease
        if call.method == "PUT" and call.path.startswith(f"{COLLECTION}/"):
            name = call.path.rsplit("/", 1)[1]
            with self._lock:
                current = self.leases.get(name)
                if current is None:
                    return status(404, "NotFound", f'leases.coordination.k8s.io "{name}" not found')
                sent = call.body["metadata"].get("resourceVersion", "")
                if not sent:
                    message = (
                        f'Lease.coordination.k8s.io "{name}" is invalid: metadata.resourceVersion: '
                        "Invalid value: 0x0: must be specified for an update"
                    )
                    return status(422, "Invalid", message)
                if sent != current["metadata"]["resourceVersion"]:
                    message = (
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{name}": the object has been '
                        "modified; please apply your changes to the latest version and try again"
                    )
                    return status(409, "Conflict", message)
                lease = self._stamp(call.body, uid=current["metadata"]["uid"])
                self.leases[name] = lease
                return 200, lease
        return status(405, "MethodNotAllowed", f"{call.method} {call.path} is not supported")

    def _stamp(self, body: dict[str, Any], *, uid: str) -> dict[str, Any]:
        self.version += 1
        metadata = {**body["metadata"], "resourceVersion": str(self.version), "uid": uid}
        return {**body, "metadata": metadata}

    def spec(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.leases[NAME]["spec"])

    def count(self, method: str | None, who: str, code: int | None = None) -> int:
        """Answers to ``who``, of ``method`` and ``code`` when given."""
        with self._lock:
            return sum(1 for m, w, c in self.answers if w == who and method in (None, m) and code in (None, c))

    def calls_more(self, names: list[str], more: int) -> Callable[[], bool]:
        """A predicate: each of ``names`` has been answered ``more`` more times than now."""
        now = {n: self.count(None, n) for n in names}
        return lambda: all(self.count(None, n) >= now[n] + more for n in names)


class Clock:
    """A clock that stands still until the test moves it."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class Leadership:
    """What the callbacks reported, and on which thread.

    ``leaders`` (shared between electors) collects who started leading;
    ``probe`` is run when leading stops, to see the world as it is then.
    """

    def __init__(
        self, identity: str = "", leaders: list[str] | None = None, probe: Callable[[], str] | None = None
    ) -> None:
        self.identity = identity
        self.leaders = leaders if leaders is not None else []
        self.probe = probe
        self.probed: list[str] = []
        self.events: list[str] = []
        self.threads: set[str] = set()
        self.started = threading.Event()
        self.stopped = threading.Event()

    def on_started(self) -> None:
        self.events.append("started")
        self.leaders.append(self.identity)
        self.threads.add(threading.current_thread().name)
        self.started.set()

    def on_stopped(self) -> None:
        self.events.append("stopped")
        self.threads.add(threading.current_thread().name)
        if self.probe is not None:
            self.probed.append(self.probe())
        self.stopped.set()


def eventually(predicate: Callable[[], bool], timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


@pytest.fixture
def store() -> LeaseStore:
    return LeaseStore()


@contextlib.contextmanager
def serving(respond: Callable[[Call], Answer]) -> Iterator[FakeApi]:
    """``fakeapi.running``, closing at once: a connection made just after ``shutdown`` starts wakes the server's
    0.5 s poll, which would otherwise add half a second to every test."""
    closed = threading.Event()
    with running(respond) as fake:
        try:
            yield fake
        finally:
            threading.Thread(target=_poke, args=(fake.port, closed), daemon=True).start()
    closed.set()


def _poke(port: int, closed: threading.Event) -> None:
    while not closed.wait(0.02):
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.fixture
def server(store: LeaseStore) -> Iterator[FakeApi]:
    with serving(store.respond) as fake:
        yield fake


Make = Callable[..., LeaderElector]


@pytest.fixture
def make(server: FakeApi) -> Iterator[Make]:
    """Builds electors that call the store as ``Bearer <identity>``, and stops them all at the end."""
    made: list[LeaderElector] = []

    def build(identity: str, *, leadership: Leadership | None = None, **options: Any) -> LeaderElector:
        api = ApiServer("http", "127.0.0.1", server.port, {"Authorization": f"Bearer {identity}"})
        leadership = leadership or Leadership()
        elector = LeaderElector(
            api,
            NAMESPACE,
            NAME,
            identity,
            on_started_leading=leadership.on_started,
            on_stopped_leading=leadership.on_stopped,
            **{**FAST, **options},
        )
        made.append(elector)
        return elector

    yield build
    for elector in made:
        elector.stop(release=False)


def test_a_lone_elector_creates_the_lease_and_renews_it_from_the_version_it_wrote(
    make: Make, store: LeaseStore, server: FakeApi
) -> None:
    clock = Clock()
    leadership = Leadership()
    a = make("a", clock=clock, leadership=leadership)
    a.start()
    assert leadership.started.wait(3)
    assert a.is_leader and a.holder == "a"
    assert eventually(lambda: store.count("PUT", "a", 200) >= 3)

    created = next(c for c in server.calls if c.method == "POST")
    assert created.path == COLLECTION
    assert created.body["apiVersion"] == "coordination.k8s.io/v1" and created.body["kind"] == "Lease"
    assert created.body["metadata"] == {"name": NAME, "namespace": NAMESPACE}
    assert created.body["spec"] == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 2,  # 1.5 s rounded up: a follower never waits less than the leader's deadline
        "acquireTime": "2026-12-02T22:53:08.123456Z",
        "renewTime": "2026-12-02T22:53:08.123456Z",
        "leaseTransitions": 0,
    }
    methods = [c.method for c in server.calls]
    assert methods[:2] == ["GET", "POST"]
    assert set(methods[2:6]) == {"PUT"}  # renewals go straight from the Lease last written, no GET first
    assert all(c.body["metadata"]["resourceVersion"] for c in server.calls if c.method == "PUT")
    assert store.count("PUT", "a", 409) == 0
    assert leadership.events == ["started"]
    assert leadership.threads == {f"leader-{NAME}"}


def test_a_second_elector_follows_judging_expiry_by_its_own_clock_not_the_remote_renew_time(
    make: Make, store: LeaseStore
) -> None:
    a = make("a", clock=Clock(T0 - 86_400))  # a's renewTime reads a day old: b must not trust it
    a.start()
    assert eventually(lambda: a.is_leader)
    b = make("b", clock=Clock())
    b.start()
    assert eventually(lambda: store.count("GET", "b") >= 5)
    assert not b.is_leader
    assert b.holder == "a"
    assert store.count("PUT", "b") == store.count("POST", "b") == 0
    assert a.is_leader


def test_a_follower_takes_over_an_expired_lease_and_counts_the_transition(make: Make, store: LeaseStore) -> None:
    a = make("a")
    a.start()
    assert eventually(lambda: a.is_leader)
    acquired = store.spec()["acquireTime"]
    clock = Clock()
    b = make("b", clock=clock)
    b.start()
    assert eventually(lambda: store.count("GET", "b") >= 1)
    a.stop(release=False)  # a vanishes without a word: b must wait the lease out
    assert eventually(lambda: store.count("GET", "b") >= 5)
    assert not b.is_leader

    clock.advance(2.01)  # leaseDurationSeconds 2, counted from when b last saw the record change
    assert eventually(lambda: b.is_leader)
    spec = store.spec()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"] == micro_time(clock())
    assert spec["acquireTime"] != acquired


def test_a_released_lease_is_taken_over_at_once_without_waiting_for_expiry(make: Make, store: LeaseStore) -> None:
    leadership = Leadership(probe=lambda: str(store.spec()["holderIdentity"]))
    a = make("a", leadership=leadership, lease_duration_s=30.0, renew_deadline_s=20.0)
    a.start()
    assert eventually(lambda: a.is_leader)
    b = make("b", clock=Clock(), lease_duration_s=30.0, renew_deadline_s=20.0)  # b's clock stands still
    b.start()
    assert eventually(lambda: b.holder == "a")

    a.stop(release=True)
    assert not a.is_leader
    assert leadership.probed == ["a"]  # the caller's work stopped before the Lease was handed back
    assert eventually(lambda: b.is_leader)  # only the release can explain it: b's clock never moved
    spec = store.spec()
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert spec["leaseDurationSeconds"] == 30


def test_the_release_empties_the_holder_and_shortens_the_lease_to_one_second(
    make: Make, store: LeaseStore, server: FakeApi
) -> None:
    clock = Clock()
    a = make("a", clock=clock)
    a.start()
    assert eventually(lambda: a.is_leader)
    clock.advance(0.25)
    a.stop(release=True)
    last = [c for c in server.calls if c.method == "PUT"][-1]
    assert last.body["spec"] == {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": "2026-12-02T22:53:08.373456Z",
        "renewTime": "2026-12-02T22:53:08.373456Z",
        "leaseTransitions": 0,
    }
    assert a.holder == ""


def test_a_leader_that_cannot_renew_stops_leading_at_the_renew_deadline_and_comes_back(
    make: Make, store: LeaseStore
) -> None:
    clock = Clock()
    leadership = Leadership()
    a = make("a", clock=clock, leadership=leadership)
    a.start()
    assert leadership.started.wait(3)
    store.failing = True
    assert eventually(lambda: store.count("PUT", "a", 500) + store.count("GET", "a", 500) >= 4)
    assert a.is_leader  # failures alone do not end it: no time has passed
    assert a.last_error.startswith("API server answered 500")

    clock.advance(0.51)  # past the 0.5 s renew deadline
    assert not a.is_leader  # at once, whatever the thread is doing
    assert leadership.stopped.wait(3)
    assert leadership.events == ["started", "stopped"]

    leadership.started.clear()
    store.failing = False  # the thread outlived the errors and takes its own, unexpired lease back
    assert leadership.started.wait(3)
    assert a.is_leader
    assert store.spec()["leaseTransitions"] == 0  # the same holder: no transition
    assert a.last_error == ""


def test_electors_racing_for_a_fresh_lease_make_exactly_one_leader(make: Make, store: LeaseStore) -> None:
    names = ["a", "b", "c", "d"]
    store.barrier = threading.Barrier(len(names))  # all four read "absent", then all four POST
    started: list[str] = []
    electors = []
    for name in names:
        electors.append(make(name, clock=Clock(), leadership=Leadership(name, started), **PATIENT))
    for elector in electors:
        elector.start()
    assert eventually(lambda: len(started) == 1)
    assert eventually(store.calls_more(names, 3))  # everyone has had time to notice a second leader, if any

    assert sum(store.count("POST", n) for n in names) == 4
    assert sum(store.count("POST", n, 409) for n in names) == 3  # AlreadyExists for all but one
    assert len(started) == 1
    assert [e.identity for e in electors if e.is_leader] == started
    assert {e.holder for e in electors} == set(started)


def test_followers_racing_for_a_released_lease_make_exactly_one_leader(make: Make, store: LeaseStore) -> None:
    a = make("a")
    a.start()
    assert eventually(lambda: a.is_leader)
    started: list[str] = []
    followers = []
    for name in ("b", "c"):
        followers.append(make(name, clock=Clock(), leadership=Leadership(name, started), **PATIENT))
    for follower in followers:
        follower.start()
    assert eventually(lambda: all(f.holder == "a" for f in followers))

    store.barrier_when = lambda lease: lease is not None and lease["spec"]["holderIdentity"] == ""
    store.barrier = threading.Barrier(2)  # b and c both read the released Lease, then both PUT from it
    a.stop(release=True)
    assert eventually(lambda: len(started) == 1)
    assert eventually(store.calls_more(["b", "c"], 3))

    assert store.count("PUT", "b", 409) + store.count("PUT", "c", 409) >= 1  # the stale PUT is refused
    assert [f.identity for f in followers if f.is_leader] == started
    assert len(started) == 1
    assert store.spec()["holderIdentity"] == started[0]
    assert store.spec()["leaseTransitions"] == 1


def test_an_unreachable_api_server_is_retried_and_never_ends_the_thread() -> None:
    with serving(lambda call: (200, {})) as fake:
        port = fake.port  # closed below: nothing listens there any more
    elector = LeaderElector(ApiServer("http", "127.0.0.1", port), NAMESPACE, NAME, "a", **FAST)
    elector.start()
    try:
        assert eventually(lambda: elector.last_error != "")
        time.sleep(0.1)  # several more retry periods
        assert elector._thread is not None and elector._thread.is_alive()
        assert not elector.is_leader
    finally:
        elector.stop()


@pytest.mark.parametrize(
    ("t", "want"),
    [
        pytest.param(T0, "2026-12-02T22:53:08.123456Z", id="six fractional digits in UTC"),
        pytest.param(1_796_251_988.0, "2026-12-02T22:53:08.000000Z", id="zeros kept on a whole second"),
        pytest.param(1_796_251_988.9999996, "2026-12-02T22:53:09.000000Z", id="rounding carries into the next second"),
        pytest.param(0.0, "1970-01-01T00:00:00.000000Z", id="the epoch"),
    ],
)
def test_micro_time_is_rfc3339_with_microseconds_as_the_api_server_writes_it(t: float, want: str) -> None:
    assert micro_time(t) == want
    assert MICRO_TIME.match(want)


@pytest.mark.parametrize(
    "durations",
    [
        pytest.param({"lease_duration_s": 10.0, "renew_deadline_s": 10.0}, id="renew deadline not under lease"),
        pytest.param({"renew_deadline_s": 2.0, "retry_period_s": 2.0}, id="retry period too close to deadline"),
        pytest.param({"retry_period_s": 0.0}, id="no retry period"),
    ],
)
def test_durations_that_would_allow_two_leaders_are_refused(durations: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        LeaderElector(ApiServer("http", "127.0.0.1", 1), NAMESPACE, NAME, "a", **durations)


def test_an_empty_identity_is_refused() -> None:
    with pytest.raises(ConfigError):
        LeaderElector(ApiServer("http", "127.0.0.1", 1), NAMESPACE, NAME, "")
