"""TLS for kilter's listeners: TLS 1.2 or newer, certificates re-read when their files change.

The listening context carries an SNI callback (OpenSSL calls it for every
handshake, with or without a server name) that hands the handshake a
context built from the newest pair of files that loads
(``CertificateFiles``). With a client CA (the HTTP listener's
``--http-client-ca``) every context built requires a client certificate
that CA signed: a client without one fails the handshake.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from kilter.model.cert_files import CertificateFiles

__all__ = ["ReloadingTLS"]


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
        self.files = CertificateFiles(cert, key, _context, client_ca=client_ca, check_every_s=check_every_s)
        self.context = _context(cert, key, client_ca)
        self.context.sni_callback = self._select

    @property
    def reloads(self) -> int:
        return self.files.reloads

    def current(self) -> ssl.SSLContext:
        """The context of the newest loadable pair (checked at most every ``check_every_s``)."""
        return self.files.current()

    def _select(self, connection: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        connection.context = self.current()
