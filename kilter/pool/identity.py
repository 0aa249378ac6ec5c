"""This region's pool identity: its certificate, its key and the pool CA, re-read when their files change.

The same three files serve three ends: the client side of the exchange's
mutual TLS, the key this region seals its own inventory with, and the CA
every other region's seal is checked against (``authorship``). cert-manager
renews them in place, so ``PoolFiles.current`` hands out a new ``Identity``,
with a higher ``version``, once the new files load (``CertificateFiles``):
a pair caught half-written, or a key that is not its certificate's, leaves
the previous one in use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from kilter.model.cert_files import CertificateFiles

__all__ = ["Identity", "PoolFiles", "PrivateKey", "PublicKey"]

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)


@dataclass(frozen=True)
class Identity:
    """One loading of the files: the channel credentials, the signing key, this region's chain, the pool CA."""

    version: int
    credentials: grpc.ChannelCredentials
    key: PrivateKey
    chain: tuple[bytes, ...]  # DER: this region's certificate, then any intermediates the file holds
    anchors: tuple[x509.Certificate, ...]  # the pool CA bundle

    @property
    def public_key(self) -> PublicKey:
        return self.key.public_key()


def load(cert_pem: bytes, key_pem: bytes, ca_pem: bytes, version: int) -> Identity:
    """The identity three PEM files make; ValueError when they do not make one (a key that is not the
    certificate's, a kind of key TLS certificates do not use, an empty CA)."""
    certs = x509.load_pem_x509_certificates(cert_pem)
    key = serialization.load_pem_private_key(key_pem, password=None)
    if not isinstance(key, _KEYS):
        raise ValueError(f"a {type(key).__name__} cannot seal inventories (ECDSA, RSA or EdDSA keys can)")
    if certs[0].public_key() != key.public_key():
        raise ValueError("the key is not the certificate's")
    anchors = tuple(x509.load_pem_x509_certificates(ca_pem))
    credentials = grpc.ssl_channel_credentials(ca_pem, private_key=key_pem, certificate_chain=cert_pem)
    chain = tuple(c.public_bytes(serialization.Encoding.DER) for c in certs)
    return Identity(version, credentials, key, chain, anchors)


class PoolFiles:
    """``current()``: the identity the certificate, key and CA files make now (see the module's docstring)."""

    def __init__(self, cert: Path, key: Path, ca: Path, *, check_every_s: float = 5.0) -> None:
        self._loaded = 0
        self.files = CertificateFiles(
            cert, key, self._load, client_ca=ca, check_every_s=check_every_s, what="pool certificate", ca_name="pool CA"
        )

    def _load(self, cert: Path, key: Path, ca: Path | None) -> Identity:
        if ca is None:
            raise ValueError("the pool needs its CA")
        identity = load(cert.read_bytes(), key.read_bytes(), ca.read_bytes(), self._loaded)
        self._loaded += 1
        return identity

    def current(self) -> Identity:
        return self.files.current()
