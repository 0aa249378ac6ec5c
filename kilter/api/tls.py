"""Server credentials for the gRPC listener that follow their certificate's files, as the HTTPS listeners' do.

gRPC's core asks a fetcher for a new certificate configuration at each new
connection's handshake (``dynamic_ssl_server_credentials``); the fetcher
hands over the newest pair of files that loads (``CertificateFiles``), or
None for "no change". With a client CA every handshake requires a client
certificate that CA signed (mutual TLS); the CA file is re-read with the pair.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import grpc

from kilter.model.cert_files import CertificateFiles

__all__ = ["ReloadingCredentials"]


def _config(cert: Path, key: Path, client_ca: Path | None) -> grpc.ServerCertificateConfiguration:
    """The files as a gRPC configuration, checked first with ``ssl`` (gRPC's core would only fail handshakes)."""
    check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    check.load_cert_chain(cert, key)
    ca = client_ca.read_bytes() if client_ca is not None else None
    if ca is not None:
        check.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
    pair = [(key.read_bytes(), cert.read_bytes())]
    return grpc.ssl_server_certificate_configuration(pair, root_certificates=ca)


class ReloadingCredentials:
    """``credentials`` for ``add_secure_port``: ``cert``/``key`` (PEM), re-read when they change; ``client_ca``
    requires and verifies client certificates."""

    def __init__(self, cert: Path, key: Path, *, client_ca: Path | None = None, check_every_s: float = 1.0) -> None:
        self.files = CertificateFiles(
            cert, key, _config, client_ca=client_ca, check_every_s=check_every_s, what="gRPC certificate"
        )
        self.credentials = grpc.dynamic_ssl_server_credentials(
            self.files.current(),
            self.files.newer,  # type: ignore[arg-type]  # gRPC reads None as "no change"; grpc-stubs 1.53 omits it
            require_client_authentication=client_ca is not None,
        )

    @property
    def reloads(self) -> int:
        return self.files.reloads
