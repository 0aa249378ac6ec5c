"""The snapshot feeder: a file's objects become watch events, and a changed file becomes the difference.

``kilter serve --snapshot FILE`` loads the file once, then polls it (size,
mtime and inode — cheap, and it works on every filesystem, including the
ConfigMap mounts whose symlink swaps inotify misses). A changed file is
parsed off the event loop and applied as the ADDED/MODIFIED/DELETED events
that turn the old object set into the new one, the same events a
list/watch feeder produces. A file that fails to parse leaves the state as
it was and is retried on its next change.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kilter.model.errors import KilterError
from kilter.state import snapshot
from kilter.state.cluster import KNOWN_KINDS
from kilter.state.store import ClusterStore, Event

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


def _objects(path: Path) -> list[Mapping[str, Any]]:
    raw = snapshot.group_objects(snapshot.load_documents(path), KNOWN_KINDS)
    return [obj for objs in raw.by_kind.values() for obj in objs]


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
        """Poll forever; reload when the file changes."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval_s)
            stamp = self._current_stamp()
            if stamp is None or stamp == self._stamp:
                continue
            try:
                objects = await loop.run_in_executor(None, _objects, self.path)
            except KilterError as exc:
                if self.last_error != str(exc):
                    log.warning("snapshot %s not reloaded: %s", self.path, exc)
                self.last_error = str(exc)
                self._stamp = stamp
                continue
            self._stamp = stamp
            self.last_error = None
            events = self.store.replace(objects)
            settle()
            log.info("snapshot %s reloaded: %d changes", self.path, len(events))
