"""The snapshot feeder: a file's objects become watch events, and a changed file becomes the difference.

``kilter serve --snapshot FILE`` loads the file once, then polls it (size,
mtime and inode — cheap, and it works on every filesystem, including the
ConfigMap mounts whose symlink swaps inotify misses). A changed file is
parsed off the event loop and applied as the ADDED/MODIFIED/DELETED events
that turn the old object set into the new one, the same events a
list/watch feeder produces. A file that fails to parse leaves the state as
it was and is retried on its next change; one object in it that kilter
cannot read is left out and the rest loaded (``ClusterStore.replace``).

A failed reload must neither end the polling (the task would die, the file
never be read again, and nothing would say so) nor pass unseen: the store's
``feed_error`` says why the state is older than the file, until a reload
succeeds, and ``feed_failures`` counts the failures (``/readyz`` and
``/metrics`` show both).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path

from kilter.model.errors import KilterError
from kilter.state import snapshot_file
from kilter.state.cluster import KNOWN_KINDS
from kilter.state.store import ClusterStore, Event, Stored

__all__ = ["SnapshotFeed", "settle"]

log = logging.getLogger("kilter.state")


def settle() -> None:
    """Collect once, then move every live object out of the cyclic collector's sight (``gc.freeze``).

    The state holds millions of objects that live until the next reload; a
    full collection walking them all costs tens of milliseconds, paid by
    whichever request triggers it. Frozen objects are still freed by
    reference counting when a reload drops them.
    """
    gc.collect()
    gc.freeze()


def _objects(path: Path) -> list[Stored]:
    """The file's objects the store keeps: Nodes and Pods typed where they type (the store leaves out, with a
    warning, one that does not), the other known kinds as received."""
    typed, raw = snapshot_file.read(path, KNOWN_KINDS, strict=False)
    return [*typed, *(obj for objs in raw.by_kind.values() for obj in objs)]


class SnapshotFeed:
    def __init__(self, path: Path, store: ClusterStore, *, interval_s: float = 1.0) -> None:
        self.path = path
        self.store = store
        self.interval_s = interval_s
        self.last_error: str | None = None
        self._stamp: tuple[int, int, int] | None = None

    def _current_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns, st.st_ino

    def load(self) -> list[Event]:
        """Read the file now and make the store hold exactly its objects."""
        stamp = self._current_stamp()
        objects = _objects(self.path)
        self._stamp = stamp
        events = self.store.replace(objects)
        self.store.fleet()
        return events

    async def watch(self) -> None:
        """Poll forever; reload when the file changes. A failed reload keeps the state and waits for the next change."""
        while True:
            await asyncio.sleep(self.interval_s)
            stamp = self._current_stamp()
            if stamp is None and self._stamp is not None:
                self._stamp = None  # read again whole once it is back
                self._failed("the file is gone")
            if stamp is None or stamp == self._stamp:
                continue
            self._stamp = stamp
            await self.reload()

    async def reload(self) -> bool:
        """Read the file and apply it; False (the state as it was, the failure recorded) when that failed."""
        loop = asyncio.get_running_loop()
        try:
            objects = await loop.run_in_executor(None, _objects, self.path)
            events = self.store.replace(objects)
        except KilterError as exc:
            self._failed(str(exc))
            return False
        except Exception as exc:  # a bug must cost this reload, not every later one
            log.exception("snapshot %s not reloaded", self.path)
            self._failed(f"{type(exc).__name__}: {exc}", logged=True)
            return False
        self.last_error = None
        self.store.feed_error = ""
        settle()
        log.info("snapshot %s reloaded: %d changes", self.path, len(events))
        return True

    def _failed(self, message: str, *, logged: bool = False) -> None:
        if self.last_error != message and not logged:
            log.warning("snapshot %s not reloaded, serving the state loaded before: %s", self.path, message)
        self.last_error = message
        self.store.feed_error = f"snapshot {self.path} not reloaded: {message}"
        self.store.feed_failures += 1
