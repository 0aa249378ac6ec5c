"""A certificate, its key and an optional client CA, loaded again when their files change.

cert-manager and Secret volumes rotate certificates by swapping files under
a running pod, so a listener must pick up the new pair without a restart.
Both kinds of listener do it the same way: look at the files (mtime and
inode) at most every ``check_every_s``, and take the new pair only once it
loads — a pair caught half-written, or a key that does not match its
certificate, leaves the previous one in service. What "loads" means is the
listener's (an ``ssl`` context, a gRPC configuration): it passes ``load``.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from kilter.model.errors import InputError

__all__ = ["CertificateFiles"]

T = TypeVar("T")
log = logging.getLogger("kilter.tls")


class CertificateFiles(Generic[T]):
    """``load(cert, key, client_ca)`` of the newest pair that loads; ``reloads`` counts the pairs taken after the
    first. A first pair that does not load is an ``InputError`` (the listener cannot start)."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        load: Callable[[Path, Path, Path | None], T],
        *,
        client_ca: Path | None = None,
        check_every_s: float = 1.0,
        what: str = "certificate",
        ca_name: str = "client CA",
    ) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.load = load
        self.check_every_s = check_every_s
        self.what = what
        self.reloads = 0
        self._lock = threading.Lock()  # handshakes call in from several threads
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        try:
            self._current = load(cert, key, client_ca)
        except (OSError, ssl.SSLError, ValueError) as exc:
            pair = f"the TLS certificate {cert} with key {key}" + (f" and {ca_name} {client_ca}" if client_ca else "")
            raise InputError(f"cannot load {pair}: {exc}") from None

    def _files_stamp(self) -> tuple[int, ...] | None:
        try:
            stats = [os.stat(p) for p in (self.cert, self.key, self.client_ca) if p is not None]
        except OSError:
            return None
        return tuple(n for st in stats for n in (st.st_mtime_ns, st.st_ino))

    def current(self) -> T:
        """The newest pair that loads (the files looked at most every ``check_every_s``)."""
        self.newer()
        return self._current

    def newer(self) -> T | None:
        """The pair loaded now because the files changed since the last one taken; None when nothing new loads."""
        now = time.monotonic()
        if now - self._checked < self.check_every_s:
            return None
        with self._lock:
            self._checked = now
            stamp = self._files_stamp()
            if stamp is None or stamp == self._stamp:
                return None
            try:
                loaded = self.load(self.cert, self.key, self.client_ca)
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.warning("new %s not loaded yet (%s); still serving the previous one", self.what, exc)
                return None
            self._stamp, self._current = stamp, loaded
            self.reloads += 1
            log.info("%s %s reloaded", self.what, self.cert)
            return loaded
