"""One server's expected starts, worked out off the event loop and read by every door without waiting.

On a 150,000-pod cluster one answer (``expected_starts``) costs about a
second. Views, scrapes, ``Plan`` and the doors that keep reservations (the
filter, Volcano's verbs, the gang book, the AdmissionCheck) all read the one
answer a server keeps; ``keep_fresh`` works it out again every few seconds
in a worker thread, from the state and fleet taken on the event loop, so a
filter answered in a millisecond never waits behind it.

Runtimes are learned from the state's own finished Workloads, with the
server's window: the answer is a function of the cluster's objects and the
moment alone, so every replica and a restarted kilter keep the same
reservations for the same state, with nothing to record.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kilter.gangs.expected_starts import ExpectedStarts, expected_starts
from kilter.gangs.kept import Kept
from kilter.gangs.learned import learner_of
from kilter.gangs.wait_settings import QueueWaitRules
from kilter.model.errors import InputError
from kilter.quota.runtimes import WINDOW
from kilter.state.cluster import ClusterState
from kilter.state.store import ClusterStore
from kilter.topology.fleet import Fleet

__all__ = ["StartsOfStore"]

log = logging.getLogger("kilter.gangs")


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What one answer is worked out from, taken on the event loop."""

    key: tuple[int, int]  # the store's (version, generation)
    now_s: float
    state: ClusterState
    fleet: Fleet
    settings: QueueWaitRules | None
    keep: bool


@dataclass(frozen=True, slots=True)
class _Answer:
    key: tuple[int, int]
    now_s: float
    found: ExpectedStarts
    fleet: Fleet
    kept: Kept | None  # the doors' view of the kept reservations, made with the answer (None: none kept)


class StartsOfStore:
    """Expected starts of a live store (module docstring).

    ``at`` works the answer out now, unless the state is unchanged and it is
    at most ``max_age_s`` old; ``recent`` keeps the last answer that young
    whatever changed; ``kept`` (the doors') never works anything out. ``observe`` is
    told of each answer worked out (the servers' metrics); ``keep`` says
    whether the doors keep reservations (``expected_starts(keep=...)``).
    """

    def __init__(
        self,
        store: ClusterStore,
        clock: Callable[[], float],
        *,
        window: int = WINDOW,
        settings: Callable[[], QueueWaitRules] | None = None,
        keep: Callable[[], bool] = lambda: False,
        max_age_s: float = 0.0,
        observe: Callable[[ExpectedStarts, Fleet], None] | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.window = window
        self.settings = settings
        self.keep = keep
        self.max_age_s = max_age_s
        self.observe = observe
        self.refreshed = 0  # answers worked out by ``keep_fresh``
        self._last: _Answer | None = None

    def _inputs(self, now_s: float) -> _Inputs:
        fleet = self.store.fleet()  # first: building it moves the generation
        settings = self.settings() if self.settings is not None else None
        key = (self.store.version, self.store.generation)
        return _Inputs(key, float(math.floor(now_s)), self.store.state(), fleet, settings, self.keep())

    def _work_out(self, given: _Inputs) -> _Answer:
        """The answer for ``given``; touches nothing the event loop changes (the state is a frozen version)."""
        learned = learner_of(given.state.workloads, given.state.catalog.device_resources, window=self.window).estimate
        found = expected_starts(
            given.state,
            now_s=given.now_s,
            fleet=given.fleet,
            learned=learned,
            settings=given.settings,
            keep=given.keep,
        )
        kept = Kept(found, given.fleet) if found.kept else None
        if kept is not None:
            kept.warm(max((p.gpus_per_node for p in given.fleet.platforms), default=0))
        return _Answer(given.key, given.now_s, found, given.fleet, kept)

    def _publish(self, answer: _Answer) -> ExpectedStarts:
        self._last = answer
        if self.observe is not None:
            self.observe(answer.found, answer.fleet)
        return answer.found

    def at(self, now_s: float) -> ExpectedStarts:
        """The expected starts at ``now_s`` (to the second)."""
        now = float(math.floor(now_s))
        self.store.fleet()
        key = (self.store.version, self.store.generation)
        last = self._last
        if last is not None and last.key == key and 0 <= now - last.now_s <= self.max_age_s:
            return last.found
        return self._publish(self._work_out(self._inputs(now)))

    def recent(self, now_s: float) -> ExpectedStarts:
        """The last answer if it was worked out at most ``max_age_s`` before ``now_s``, whatever changed since, else
        ``at(now_s)``: on a busy cluster the state changes with every pod, and working every start out again for
        each reader (a scrape, a view) would cost each of them a second on a 150,000-pod cluster."""
        last = self._last
        if last is not None and 0 <= math.floor(now_s) - last.now_s <= self.max_age_s:
            return last.found
        return self.at(now_s)

    def kept(self) -> Kept | None:
        """The doors' view of the last answer's kept reservations (``Kept``, made with it, off the event loop)."""
        last = self._last
        return None if last is None else last.kept

    def held(self) -> int:
        """Pending gangs with a reservation now (``kilter_reservations_held``), at most ``max_age_s`` old; 0 while
        the state does not read."""
        try:
            return self.recent(self.clock()).held
        except InputError as exc:
            log.warning("expected starts: %s", exc)
            return 0

    async def refresh(self) -> None:
        """Work the answer out again in a worker thread (the inputs taken here, on the event loop)."""
        if not self.store.ready:
            return
        given = self._inputs(self.clock())
        answer = await asyncio.to_thread(self._work_out, given)
        self._publish(answer)
        self.refreshed += 1

    def background(self, period_s: float) -> tuple[Callable[[], Awaitable[None]], Callable[[], None]]:
        """(start, stop) of ``keep_fresh`` as a task of the running loop, held strongly until stopped (the loop
        holds its tasks only weakly)."""
        tasks: list[asyncio.Task[None]] = []

        async def start() -> None:
            tasks.append(asyncio.get_running_loop().create_task(self.keep_fresh(period_s), name="expected-starts"))

        def stop() -> None:
            while tasks:
                tasks.pop().cancel()

        return start, stop

    async def keep_fresh(self, period_s: float) -> None:
        """``refresh`` every ``period_s`` while the doors keep reservations (``keep``; views and scrapes alone work
        their answer out when asked), until cancelled; a state that does not read is logged and tried again."""
        while True:
            try:
                if self.keep():
                    await self.refresh()
            except InputError as exc:
                log.warning("expected starts: %s", exc)
            except Exception:  # a bug here must not end the loop that keeps the doors' reservations
                log.exception("expected starts could not be worked out")
            await asyncio.sleep(period_s)
