"""What the credential tests hand kilter: kubeconfigs, an exec plugin whose answers the test writes, certificates.

The exec plugin is a small Python script run as ``python plugin.py`` (the
kubeconfig's ``command`` and ``args``): it appends the ExecCredential it was
given (``$KUBERNETES_EXEC_INFO``) and the environment entries the kubeconfig
names to ``runs.jsonl``, and prints ``answer.json`` as it stands, so the
test decides what each run issues and counts the runs.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import sys
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

EXEC_V1 = "client.authentication.k8s.io/v1"

_PLUGIN = """
import json, os, pathlib, sys
here = pathlib.Path(__file__).parent
with open(here / "runs.jsonl", "a") as f:
    f.write(json.dumps({"info": os.environ.get("KUBERNETES_EXEC_INFO"), "mark": os.environ.get("TEST_MARK")}) + "\\n")
answer = here / "answer.json"
if (here / "fail").exists():
    sys.stderr.write("warming up\\nno credentials for you\\n")
    sys.exit(3)
sys.stdout.write(answer.read_text())
"""


def kubeconfig(path: Path, server: str, user: dict[str, Any], **cluster: Any) -> Path:
    """A kubeconfig of one context: ``server`` (plus ``cluster`` fields) and ``user`` as written."""
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "kilter", "user": user}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "kilter"}}],
                "current-context": "test",
            }
        )
    )
    return path


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Plugin:
    """An exec plugin in ``directory``: what it prints next (``answer``), and what it was run with (``runs``)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.script = directory / "plugin.py"
        self.script.write_text(_PLUGIN)

    def user(self, **extra: Any) -> dict[str, Any]:
        """The kubeconfig user that runs it (``extra`` overrides the exec block's fields)."""
        block = {
            "apiVersion": EXEC_V1,
            "command": sys.executable,
            "args": [str(self.script)],
            "interactiveMode": "Never",
            **extra,
        }
        return {"exec": block}

    def answer(
        self,
        token: str = "",
        *,
        expires: float | None = None,
        cert: bytes = b"",
        key: bytes = b"",
        raw: str | None = None,
    ) -> None:
        status: dict[str, Any] = {}
        if token:
            status["token"] = token
        if expires is not None:
            status["expirationTimestamp"] = rfc3339(expires)
        if cert:
            status["clientCertificateData"] = cert.decode()
        if key:
            status["clientKeyData"] = key.decode()
        text = (
            raw if raw is not None else json.dumps({"apiVersion": EXEC_V1, "kind": "ExecCredential", "status": status})
        )
        (self.directory / "answer.json").write_text(text)

    def fail(self, failing: bool = True) -> None:
        marker = self.directory / "fail"
        if failing:
            marker.write_text("")
        else:
            marker.unlink(missing_ok=True)

    def runs(self) -> list[dict[str, Any]]:
        """Each run: the ExecCredential it was given (decoded) and ``TEST_MARK`` from the kubeconfig's env."""
        path = self.directory / "runs.jsonl"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            run = json.loads(line)
            out.append({"info": json.loads(run["info"]) if run["info"] else None, "mark": run["mark"]})
        return out


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class Authority:
    """A CA that issues the server's pair (for 127.0.0.1) and client pairs (a user's CN, as the apiserver's x509
    authenticator reads it)."""

    def __init__(self, name: str) -> None:
        self.now = dt.datetime.now(dt.UTC)
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=5))
            .not_valid_after(self.now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _pem(self.cert)

    def issue(self, cn: str, *, server: bool = False) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM): a client pair for user ``cn``, or the server's for 127.0.0.1."""
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(minutes=5))
            .not_valid_after(self.now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return _pem(builder.sign(self.key, hashes.SHA256())), _key_pem(key)

    def serving_files(self, directory: Path) -> tuple[Path, Path]:
        cert, key = self.issue("kube-apiserver", server=True)
        (directory / "serving.crt").write_bytes(cert)
        (directory / "serving.key").write_bytes(key)
        return directory / "serving.crt", directory / "serving.key"
