"""Re-reading ``kilter serve --config`` when its file changes: the policy applied at once, the rest named.

A ConfigMap mounted as a directory is swapped by the kubelet (a minute or
two after an edit); kilter compares the file's bytes every
``reload_interval_s`` and, when they change, reads it as at start (the flags
given still win). A file that no longer validates is refused as a whole and
the running settings kept, with one error line and
``kilter_config_reloads_total{result="refused"}``: a half-applied
configuration is worse than an old one. Of a valid file, the settings in
``LIVE`` take effect at once, on the objects that read them per decision;
every other change (ports, certificates, the cluster, Leases, keys, spare
defaults, which the state and listeners are built from) is logged by its
path in the file as needing a restart, and counted in
``kilter_config_restart_pending`` until the process restarts or the file
changes back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge

from kilter.cli import configuration
from kilter.cli.serve_config import ServeConfig
from kilter.extenders.server import App
from kilter.gangs.book import BookSettings
from kilter.model.errors import InputError

__all__ = ["LIVE", "LOGGERS", "ConfigReloader"]

log = logging.getLogger("kilter.config")

LIVE = frozenset(
    {
        "split_wait",
        "split_wait_max_s",
        "split_slowdown",
        "gang_timeout_s",
        "max_namespace_gang_gpus",
        "max_namespace_gang_plans",
        "explain_records",
        "explain_per_pod",
        "explain_nodes",
        "log_level",
    }
)
"""The settings a reload applies without a restart: each is read per decision, not built into the state."""

LOGGERS = ("", "kilter", "uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
"""The loggers ``logging.level`` sets: the root, kilter's, and uvicorn's (whose Config sets its own levels)."""


def book_settings(config: ServeConfig) -> BookSettings:
    """What the gang book runs with (``GangBook.configure``): the gang timeout, its bounds, the split-wait rule."""
    return BookSettings(config.gang_timeout_s, config.gang_limits, config.split_wait_rule, config.reservations)


class ConfigReloader:
    """Watches one Configuration file for ``App``; ``reload`` is the one step, ``watch`` the loop."""

    def __init__(self, path: Path, flags: dict[str, Any], config: ServeConfig, app: App) -> None:
        self.path = path
        self.flags = flags  # the fields the command line gave, which win over the file at every reload
        self.started = config  # what the process was built from
        self.config = config  # what it runs with now
        self.app = app
        # Why the file as it is now is not in force, for /readyz: it cannot be read (cleared by the next good read),
        # or its content was refused (cleared when other content is applied).
        self.unreadable = ""
        self.refused = ""
        self._seen: bytes | None = None
        try:
            self._seen = configuration.read(path)
        except InputError as e:
            self.unreadable = e.message
        self._task: asyncio.Task[None] | None = None
        app.problem_sources.append(lambda: [f"config {why}" for why in (self.unreadable, self.refused) if why])
        registry = app.metrics.registry
        self.reloads = Counter(
            "kilter_config_reloads",
            "Changes of the --config file read: applied, refused (invalid, nothing changed), or restart "
            "(valid, but a changed setting needs a restart)",
            ["result"],
            registry=registry,
        )
        pending = Gauge(
            "kilter_config_restart_pending",
            "Settings the --config file changes that take effect only after a restart",
            registry=registry,
        )
        pending.set_function(lambda: len(self.pending))
        self.pending: list[str] = []

    def reload(self) -> list[str]:
        """Read the file once more; apply the ``LIVE`` settings that changed and return the paths of the changed
        settings that need a restart. A file that cannot be read or does not validate changes nothing."""
        try:
            new = self._changed(always=True)
        except InputError as e:
            self._refuse(e.message)
            return self.pending
        return self.apply(new) if new is not None else self.pending

    def _changed(self, *, always: bool = False) -> ServeConfig | None:
        """The file's settings if its bytes changed since the last reading (or ``always``), else None; None too when
        it cannot be read (counted once per reason and kept as ``unreadable``). InputError when it does not
        validate."""
        try:
            data = configuration.read(self.path)
        except InputError as e:
            if e.message != self.unreadable:
                self.reloads.labels("refused").inc()
                log.error("config %s: keeping the running settings", e.message)
            self.unreadable = e.message
            return None
        self.unreadable = ""
        if data == self._seen and not always:
            return None
        self._seen = data
        return configuration.config_of(self.path, self.flags, data)

    def _refuse(self, why: str) -> None:
        """Content refused: counted, logged, and kept for ``/readyz`` until other content is applied."""
        self.reloads.labels("refused").inc()
        log.error("config %s not applied, keeping the running settings: %s", self.path, why)
        self.refused = why

    def apply(self, new: ServeConfig) -> list[str]:
        """Apply ``new``, the file's settings as just read: the ``LIVE`` ones that changed at once, the rest named;
        the paths of the changed settings that need a restart."""
        paths = configuration.flag_paths()
        changed = {f.name for f in dataclasses.fields(new) if getattr(new, f.name) != getattr(self.config, f.name)}
        live = changed & LIVE
        try:  # what would run: the live settings new, the rest as started; it must hold together before any applies
            running = dataclasses.replace(self.config, **{f: getattr(new, f) for f in live})
        except InputError as e:
            self._refuse(f"with the settings that need a restart as they are, {e.message}")
            return self.pending
        self.refused = ""
        if live:
            self._apply(running)
            self.config = running
            log.info("config %s applied: %s", self.path, ", ".join(sorted(paths[f] for f in live)))
        self.pending = sorted(
            paths[f.name]
            for f in dataclasses.fields(new)
            if f.name not in LIVE and getattr(new, f.name) != getattr(self.started, f.name)
        )
        if self.pending:
            log.warning("config %s: %s change only after a restart", self.path, ", ".join(self.pending))
        if self.pending:
            self.reloads.labels("restart").inc()
        elif live:
            self.reloads.labels("applied").inc()
        return self.pending

    def _apply(self, new: ServeConfig) -> None:
        extender = self.app.extender
        extender.gangs.configure(book_settings(new))
        extender.log.records, extender.log.per_pod, extender.log.entries = (
            new.explain_records,
            new.explain_per_pod,
            new.explain_nodes,
        )
        for name in LOGGERS:
            logging.getLogger(name).setLevel(new.log_level.upper())

    async def watch(self, interval_s: float) -> None:
        """Poll forever. The file is read and validated on a worker thread (a huge or hostile file must not stall
        the listeners); only applying valid settings runs on the loop. No failure ends the watch."""
        always = True  # the file may have changed between the start's read and now
        while True:
            try:
                new = await asyncio.to_thread(self._changed, always=always)
                if new is not None:
                    self.apply(new)
            except InputError as e:
                self._refuse(e.message)
            except Exception as e:  # a bug, or MemoryError: it costs this reading, never the watch
                log.exception("config %s not read", self.path)
                self._refuse(f"{type(e).__name__}: {e}")
            always = False
            await asyncio.sleep(interval_s)

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self.watch(self.config.reload_interval_s), name="config-watch"
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
