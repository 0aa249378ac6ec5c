"""The webhooks' certificates without cert-manager: a CA of kilter's own and a serving pair it signs.

``kilter certs`` (``cert_controller``) keeps them in one Secret of type
``kubernetes.io/tls`` (``tls.crt``, ``tls.key``, ``ca.crt`` as cert-manager
writes them, plus ``ca.key`` to sign the next pair) and the CA in the webhook
configurations' ``caBundle``. The decisions are here, as pure functions of the
Secret's data and the time, so they can be tested without a cluster:

* the serving pair is renewed ``renew_before`` ahead of its expiry, or at
  once when its names are not the Service's or it is not the CA's; signed by
  the same CA, the ``caBundle`` stays as it is and no request fails;
* the CA is renewed when it would expire before the next serving pair does;
  the bundle then holds the new CA and the old one until the old expires, so
  that the apiserver trusts both the pair kilter still serves (its kubelet
  refreshes the Secret volume a minute or two later) and the new one.

Keys are ECDSA P-256, the certificates carry the Service's DNS names
(``<name>.<namespace>.svc`` and ``.svc.cluster.local``), as the apiserver dials
``<service>.<namespace>.svc``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CA_VALIDITY",
    "SERVING_VALIDITY",
    "Bundle",
    "Issued",
    "due",
    "expiry",
    "issue",
    "service_names",
]

CA_VALIDITY = dt.timedelta(days=3650)
SERVING_VALIDITY = dt.timedelta(days=90)
RENEW_BEFORE = dt.timedelta(days=30)
_SKEW = dt.timedelta(hours=1)  # notBefore in the past, as Kubernetes' own cert helpers: clocks that run behind


def service_names(namespace: str, name: str) -> list[str]:
    """The DNS names the apiserver may dial the webhook Service by."""
    return [f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"]


@dataclass(frozen=True)
class Issued:
    """The Secret's four PEM values: the serving pair, its CA, and the CA's key."""

    tls_crt: bytes
    tls_key: bytes
    ca_crt: bytes  # the bundle: the current CA first, then any older CA still trusted
    ca_key: bytes

    def data(self) -> dict[str, bytes]:
        return {"tls.crt": self.tls_crt, "tls.key": self.tls_key, "ca.crt": self.ca_crt, "ca.key": self.ca_key}

    @classmethod
    def of(cls, data: Mapping[str, bytes]) -> Issued | None:
        """The values of a Secret's data (decoded), or None when one is missing."""
        try:
            return cls(data["tls.crt"], data["tls.key"], data["ca.crt"], data["ca.key"])
        except KeyError:
            return None


Bundle = bytes  # PEM CA certificates, concatenated: what the webhook configurations' caBundle holds


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _ca(now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"kilter-webhooks-ca-{int(now.timestamp())}")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digitalSignature, keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _serving(
    names: Sequence[str], ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, now: dt.datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(min(now + SERVING_VALIDITY, ca.not_valid_after_utc))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )  # digitalSignature (ECDHE key agreement signs with it)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def expiry(pem: bytes) -> dt.datetime | None:
    """When the first certificate of ``pem`` expires; None when none loads."""
    certs = _certs(pem)
    return certs[0].not_valid_after_utc if certs else None


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _pair_matches(cert: x509.Certificate, key_pem: bytes) -> bool:
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return key.public_key() == cert.public_key()


def due(issued: Issued | None, names: Sequence[str], now: dt.datetime) -> str:
    """Why the Secret needs new certificates now ("" when it does not): missing, unreadable, a pair not of its
    CA or not for ``names``, or within ``RENEW_BEFORE`` of an expiry."""
    if issued is None:
        return "no certificates yet"
    serving, bundle = _certs(issued.tls_crt), _certs(issued.ca_crt)
    if not serving or not bundle:
        return "the certificates do not load"
    cert, ca = serving[0], bundle[0]
    if not _pair_matches(cert, issued.tls_key) or not _pair_matches(ca, issued.ca_key):
        return "a key does not match its certificate"
    if not _signed_by(cert, ca):
        return "the serving certificate is not the CA's"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the serving certificate names no DNS name"
    if sorted(sans.get_values_for_type(x509.DNSName)) != sorted(names):
        return "the serving certificate does not name the Service"
    if cert.not_valid_before_utc > now or ca.not_valid_before_utc > now:
        return "a certificate is not valid yet (made by a clock that ran ahead)"
    if cert.not_valid_after_utc - now < RENEW_BEFORE:
        return f"the serving certificate expires at {cert.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    if ca.not_valid_after_utc - now < SERVING_VALIDITY + RENEW_BEFORE:
        return f"the CA expires at {ca.not_valid_after_utc:%Y-%m-%dT%H:%M:%SZ}"
    return ""


def issue(previous: Issued | None, names: Sequence[str], now: dt.datetime, *, also_trust: bytes = b"") -> Issued:
    """New certificates for ``names``: a new serving pair from the previous CA while that CA outlives it, else a
    new CA too, whose bundle keeps each older CA that has not expired (the apiserver trusts both meanwhile) —
    those of the previous bundle and those of ``also_trust`` (what the webhook configurations trust now)."""
    old_bundle = [c for c in _certs(previous.ca_crt) if c.not_valid_after_utc > now] if previous else []
    seen = {c.fingerprint(hashes.SHA256()) for c in old_bundle}
    for c in _certs(also_trust):
        if c.not_valid_after_utc > now and c.fingerprint(hashes.SHA256()) not in seen:
            seen.add(c.fingerprint(hashes.SHA256()))
            old_bundle.append(c)
    ca = old_bundle[0] if old_bundle else None
    ca_key: ec.EllipticCurvePrivateKey | None = None
    if ca is not None and previous is not None and _pair_matches(ca, previous.ca_key):
        loaded = serialization.load_pem_private_key(previous.ca_key, password=None)
        ca_key = loaded if isinstance(loaded, ec.EllipticCurvePrivateKey) else None
    if ca is None or ca_key is None or ca.not_valid_after_utc - now < SERVING_VALIDITY + RENEW_BEFORE:
        ca, ca_key = _ca(now)
        bundle = [ca, *old_bundle]
    else:
        bundle = old_bundle
    cert, key = _serving(names, ca, ca_key, now)
    return Issued(_pem(cert), _pem_key(key), b"".join(_pem(c) for c in bundle), _pem_key(ca_key))
