"""This region's pool identity: its certificate, its key and the pool CA, re-read when their files change.

The same three files serve three ends: the client side of the exchange's
mutual TLS, the key this region seals its own inventory with, and the CA
every other region's seal is checked against (``authorship``). cert-manager
renews them in place, so ``PoolFiles.current`` looks at the files at most
every ``check_every_s`` (mtime and inode) and hands out a new ``Identity``,
with a higher ``version``, once they load: a pair caught half-written, or a
key that is not its certificate's, leaves the previous one in use instead of
presenting it until it expires.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from kilter.model.errors import InputError

__all__ = ["Identity", "PoolFiles", "PrivateKey", "PublicKey"]

log = logging.getLogger("kilter.pool")

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
        self.files = (cert, key, ca)
        self.check_every_s = check_every_s
        self._checked = time.monotonic()
        self._stamp = self._files_stamp()
        try:
            self._identity = self._load(0)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load the pool's certificate {cert}, key {key} and CA {ca}: {exc}") from None

    def _files_stamp(self) -> tuple[int, ...] | None:
        try:
            return tuple(n for p in self.files for st in (os.stat(p),) for n in (st.st_mtime_ns, st.st_ino))
        except OSError:
            return None

    def _load(self, version: int) -> Identity:
        cert, key, ca = (p.read_bytes() for p in self.files)
        return load(cert, key, ca, version)

    @property
    def version(self) -> int:
        return self._identity.version

    def current(self) -> Identity:
        now = time.monotonic()
        if now - self._checked >= self.check_every_s:
            self._checked = now
            stamp = self._files_stamp()
            if stamp is not None and stamp != self._stamp:
                try:
                    self._identity = self._load(self._identity.version + 1)
                except (OSError, ValueError) as exc:
                    log.warning("pool certificate not reloaded yet (%s); still using the previous one", exc)
                else:
                    self._stamp = stamp
                    log.info("pool certificate %s reloaded", self.files[0])
        return self._identity
