"""TLS for kilter's listeners: TLS 1.2 or newer, certificates re-read when their files change.

cert-manager and Secret volumes rotate certificates by swapping files under
a running pod. The listening context carries an SNI callback (OpenSSL calls
it for every handshake, with or without a server name) that looks at the
files at most once a second and hands the handshake a context built from
the newest pair. A pair that does not load — caught half-written, or a key
that does not match — leaves the previous one in service. With a client CA
(the HTTP listener's ``--http-client-ca``) every context built requires a
client certificate that CA signed: a client without one fails the handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

from kilter.model.errors import InputError

__all__ = ["ReloadingTLS"]

log = logging.getLogger("kilter.webhooks")


def _context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca is not None:
        # Set on every context, not only the listening one: the handshake may be handed a reloaded context, and
        # the client's chain is verified against the store of the context in use.
        context.load_verify_locations(cafile=client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ReloadingTLS:
    """A listening context whose certificate follows its files; with ``client_ca``, one that also requires a client
    certificate signed by that CA (mutual TLS; the CA file is re-read with the pair)."""

    def __init__(self, cert: Path, key: Path, *, check_every_s: float = 1.0, client_ca: Path | None = None) -> None:
        self.cert = cert
        self.key = key
        self.client_ca = client_ca
        self.check_every_s = check_every_s
        self.reloads = 0
        self._lock = threading.Lock()
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        try:
            self._current = _context(cert, key, client_ca)
            self.context = _context(cert, key, client_ca)
        except (OSError, ssl.SSLError) as exc:
            what = f"the TLS certificate {cert} with key {key}" + (f" and client CA {client_ca}" if client_ca else "")
            raise InputError(f"cannot load {what}: {exc}") from None
        self.context.sni_callback = self._select

    def _files_stamp(self) -> tuple[int, ...] | None:
        try:
            stats = [os.stat(p) for p in (self.cert, self.key, self.client_ca) if p is not None]
        except OSError:
            return None
        return tuple(n for st in stats for n in (st.st_mtime_ns, st.st_ino))

    def current(self) -> ssl.SSLContext:
        """The context of the newest loadable pair (checked at most every ``check_every_s``)."""
        now = time.monotonic()
        if now - self._checked < self.check_every_s:
            return self._current
        with self._lock:
            self._checked = now
            stamp = self._files_stamp()
            if stamp is not None and stamp != self._stamp:
                try:
                    self._current = _context(self.cert, self.key, self.client_ca)
                except (OSError, ssl.SSLError) as exc:
                    log.warning("new certificate not loaded yet (%s); still serving the previous one", exc)
                else:
                    self._stamp = stamp
                    self.reloads += 1
                    log.info("certificate %s reloaded", self.cert)
        return self._current

    def _select(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        connection.context = self.current()
