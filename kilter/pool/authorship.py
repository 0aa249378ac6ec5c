"""Who wrote an inventory: each region seals its own with its pool certificate's key, and every region checks it.

Mutual TLS proves who is on the other end of a call, not who wrote what
that peer relays; without more, any peer could hand over an inventory
"of" another region, stamped ahead, and hold that region's real ones out
for good. So an inventory is kept only as written by its origin:

* the origin signs the very bytes it serialized (``wire.body``), after a
  context string, with the key of the certificate it already presents to
  its peers, and sends its certificate chain along (``Sealer``);
* a receiver checks the chain against the pool CA (``grpcClientCA``), that
  the certificate names the origin as this region dials it (the peer's
  ``serverName``, else its address's host: the name TLS checks when
  calling it), and the signature (``Checked``);
* relays forward the sealed bytes untouched (``wire``), so a relayed
  inventory is checked exactly as a direct one;
* a copy of this region's own inventory counts (for ``PeerTable.own_heard``)
  only when signed with this region's own key: its generation is never
  taken on anyone else's word.

The chain is held to RFC 5280 path validation (a CA must assert
``basicConstraints.cA``, and one that states a key usage must allow
certificate signing) but not to the Web PKI's extra rules, since the TLS
handshake the pool already runs does not ask them: a pool whose mutual TLS
works has certificates whose seals check. ECDSA and RSA keys sign; RSA as
PSS. Without TLS (``pool.insecure``) nothing is signed and an inventory is
taken on the word of whoever passes it on, except this region's own
(``Unchecked``).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    Policy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from kilter.pool import wire
from kilter.pool.identity import Identity, PoolFiles, PrivateKey, PublicKey
from kilter.pool.inventory import RegionInventory, Seal

__all__ = ["CONTEXT", "Authors", "Checked", "Judge", "Sealer", "Unchecked", "sign"]

CONTEXT = b"kilter.v1.RegionInventory\n"
"""What a seal's signature covers comes after this, so no other signature by a pool key can pass for one."""

_PSS = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)
_PUBLIC_KEYS = (ec.EllipticCurvePublicKey, rsa.RSAPublicKey, ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)
_CACHED_CHAINS = 1024  # checked chains kept: one or two per region, renewed every few weeks


def sign(key: PrivateKey, data: bytes) -> bytes:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(hashes.SHA256()))
    if isinstance(key, rsa.RSAPrivateKey):
        return key.sign(data, _PSS, hashes.SHA256())
    return key.sign(data)


def _signed(key: PublicKey, signature: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, data, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(signature, data, _PSS, hashes.SHA256())
        else:
            key.verify(signature, data)
    except (InvalidSignature, ValueError, TypeError, UnsupportedAlgorithm):
        return False
    return True


class Sealer:
    """Seals this region's inventories with the key of ``files``' certificate; with no files (a pool without TLS)
    the seal carries the bytes, unsigned."""

    def __init__(self, files: PoolFiles | None = None) -> None:
        self.files = files

    def seal(self, inv: RegionInventory) -> RegionInventory:
        data = wire.body(inv)
        if self.files is None:
            return replace(inv, seal=Seal(data))
        me = self.files.current()
        return replace(inv, seal=Seal(data, sign(me.key, CONTEXT + data), me.chain))


class Judge(Protocol):
    """Whether ``origin`` wrote what ``seal`` carries. Called in worker threads: it must not change shared state
    beyond what is safe there (a cache of checked chains)."""

    def wrote(self, origin: str, seal: Seal, now: float) -> bool: ...


class Unchecked:
    """A pool without TLS: every inventory is taken as its origin's, except one claiming to be this region's."""

    def __init__(self, region: str) -> None:
        self.region = region

    def wrote(self, origin: str, seal: Seal, now: float) -> bool:
        return origin != self.region


def _general_name(host: str) -> x509.DNSName | x509.IPAddress:
    try:
        return x509.IPAddress(ipaddress.ip_address(host.removeprefix("[").removesuffix("]")))
    except ValueError:
        return x509.DNSName(host)


def _signs_certificates(policy: Policy, cert: x509.Certificate, usage: x509.KeyUsage | None) -> None:
    if usage is not None and not usage.key_cert_sign:
        raise ValueError("a CA whose key usage leaves out certificate signing")


_LEAF = ExtensionPolicy.permit_all().require_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
_CA = (
    ExtensionPolicy.permit_all()
    .require_present(x509.BasicConstraints, Criticality.AGNOSTIC, None)
    .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _signs_certificates)
)


class Checked:
    """The judge of a pool over mutual TLS, for one loading of the pool's files (see the module's docstring)."""

    def __init__(self, region: str, names: Mapping[str, str], me: Identity) -> None:
        self.region = region
        self.names = {origin: _general_name(host) for origin, host in names.items()}
        self.me = me
        self._store = Store(list(me.anchors)) if me.anchors else None
        self._chains: dict[tuple[str, tuple[bytes, ...]], tuple[PublicKey, dt.datetime, dt.datetime]] = {}

    def wrote(self, origin: str, seal: Seal, now: float) -> bool:
        if not seal.signature:
            return False
        if origin == self.region:
            key: PublicKey | None = self.me.public_key
        else:
            key = self._author(origin, seal.certificates, dt.datetime.fromtimestamp(now, dt.UTC))
        return key is not None and _signed(key, seal.signature, CONTEXT + seal.body)

    def _author(self, origin: str, chain: tuple[bytes, ...], at: dt.datetime) -> PublicKey | None:
        """The key of ``origin``'s certificate, when ``chain`` leads from a certificate naming it to the pool CA."""
        name = self.names.get(origin)
        if name is None or not chain or self._store is None:
            return None
        cached = self._chains.get((origin, chain))
        if cached is not None:
            key, start, end = cached
            return key if start <= at <= end else None
        try:
            certs = [x509.load_der_x509_certificate(der) for der in chain]
            builder = PolicyBuilder().store(self._store).time(at).extension_policies(ca_policy=_CA, ee_policy=_LEAF)
            path = builder.build_server_verifier(name).verify(certs[0], certs[1:])
            found = certs[0].public_key()
        except (ValueError, TypeError, UnsupportedAlgorithm, VerificationError):
            return None
        if not isinstance(found, _PUBLIC_KEYS):
            return None
        key = found
        if len(self._chains) >= _CACHED_CHAINS:
            self._chains.clear()
        start = max(c.not_valid_before_utc for c in path)
        end = min(c.not_valid_after_utc for c in path)
        self._chains[(origin, chain)] = (key, start, end)
        return key


class Authors:
    """The judge to use now: ``Checked`` for the pool's current files (rebuilt when they are reloaded), or
    ``Unchecked`` without them. Called on the event loop; the judge it returns may then work in a thread."""

    def __init__(self, region: str, names: Mapping[str, str] | None = None, files: PoolFiles | None = None) -> None:
        self.region = region
        self.names = dict(names or {})
        self.files = files
        self._judge: Judge = Unchecked(region)
        self._version = -1

    def judge(self) -> Judge:
        if self.files is None:
            return self._judge
        me = self.files.current()
        if me.version != self._version:
            self._judge, self._version = Checked(self.region, self.names, me), me.version
        return self._judge
