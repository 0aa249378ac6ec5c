"""Server credentials for the gRPC listener that follow the webhook certificate's files, as ``ReloadingTLS`` does.

gRPC's core asks a fetcher for a new certificate configuration at each
new connection's handshake (``dynamic_ssl_server_credentials``); the
fetcher looks at the files at most every ``check_every_s`` (mtime and
inode, as cert-manager and Secret volumes swap them) and hands over the new
pair only once it loads: a pair caught half-written, or a key that does not
match its certificate, leaves the previous one in service. With a client CA
every handshake requires a client certificate that CA signed (mutual TLS);
the CA file is re-read with the pair.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path

import grpc

from kilter.model.errors import InputError

__all__ = ["ReloadingCredentials"]

log = logging.getLogger("kilter.api")


class ReloadingCredentials:
    """``credentials`` for ``add_secure_port``: ``cert``/``key`` (PEM), re-read when they change; ``client_ca``
    requires and verifies client certificates."""

    def __init__(self, cert: Path, key: Path, *, client_ca: Path | None = None, check_every_s: float = 1.0) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self.check_every_s = check_every_s
        self.reloads = 0
        self._lock = threading.Lock()  # the fetcher runs on gRPC's own threads
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        try:
            initial = self._config()
        except (OSError, ssl.SSLError, ValueError) as exc:
            what = f"the TLS certificate {cert} with key {key}" + (f" and client CA {client_ca}" if client_ca else "")
            raise InputError(f"cannot load {what}: {exc}") from None
        self.credentials = grpc.dynamic_ssl_server_credentials(
            initial,
            self._fetch,  # type: ignore[arg-type]  # gRPC reads None as "no change"; grpc-stubs 1.53 omits it
            require_client_authentication=client_ca is not None,
        )

    def _files_stamp(self) -> tuple[int, ...] | None:
        try:
            stats = [os.stat(p) for p in (self.cert, self.key, self.client_ca) if p is not None]
        except OSError:
            return None
        return tuple(n for st in stats for n in (st.st_mtime_ns, st.st_ino))

    def _config(self) -> grpc.ServerCertificateConfiguration:
        """The files as a gRPC configuration, checked first with ``ssl`` (gRPC's core would only fail handshakes)."""
        check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        check.load_cert_chain(self.cert, self.key)
        ca = self.client_ca.read_bytes() if self.client_ca is not None else None
        if ca is not None:
            check.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        pair = [(self.key.read_bytes(), self.cert.read_bytes())]
        return grpc.ssl_server_certificate_configuration(pair, root_certificates=ca)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """A new configuration when the files changed and load; None keeps the current one."""
        now = time.monotonic()
        if now - self._checked < self.check_every_s:
            return None
        with self._lock:
            self._checked = now
            stamp = self._files_stamp()
            if stamp is None or stamp == self._stamp:
                return None
            try:
                config = self._config()
            except (OSError, ssl.SSLError, ValueError) as exc:
                log.warning("new gRPC certificate not loaded yet (%s); still serving the previous one", exc)
                return None
            self._stamp = stamp
            self.reloads += 1
            log.info("gRPC certificate %s reloaded", self.cert)
            return config
