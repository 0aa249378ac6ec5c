"""Certificates for pool tests: a pool CA and, per region, a certificate naming it as its peers dial it.

A region is dialled as ``kilter.<region>.pool.test`` (its peers' ``serverName``), on 127.0.0.1; its certificate
carries that DNS name, as one cert-manager issues per region would. Each region's certificate is both its
listener's and the client certificate it calls its peers with, as in ``kilter serve``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def dns_name(region: str) -> str:
    return f"kilter.{region}.pool.test"


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


@dataclass(frozen=True)
class Issuer:
    """A certificate that signs others: the pool CA, another CA, or (wrongly) a region's own certificate."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    path: Path  # its PEM

    def issue(self, directory: Path, names: list[str], *, ca: bool = False) -> tuple[Path, Path]:
        """A certificate for ``names`` (DNS) signed by this issuer, with its chain up to (not with) the root:
        (certificate chain PEM, key PEM)."""
        directory.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        cert = builder.sign(self.key, hashes.SHA256())
        chain = cert.public_bytes(serialization.Encoding.PEM)
        if self.cert.issuer != self.cert.subject:  # an intermediate: the chain carries it
            chain += self.cert.public_bytes(serialization.Encoding.PEM)
        cert_path, key_path = directory / "tls.crt", directory / "tls.key"
        cert_path.write_bytes(chain)
        key_path.write_bytes(_pem_key(key))
        return cert_path, key_path


def root(directory: Path, name: str = "kilter pool CA") -> Issuer:
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    path = directory / "ca.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Issuer(cert, key, path)
