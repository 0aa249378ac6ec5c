"""The webhooks' own CA and serving pair: issued for the Service, trusted through the bundle, renewed in time.

Trust is checked the way the apiserver checks it: a real TLS handshake against a server holding the pair, by a
client that trusts only the bundle (``caBundle``) and dials the Service's DNS name.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from kilter.webhooks.certs import (
    CA_VALIDITY,
    RENEW_BEFORE,
    SERVING_VALIDITY,
    Issued,
    due,
    expiry,
    issue,
    service_names,
)

NAMES = service_names("kube-system", "kilter-webhooks")
T0 = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)


def handshake(pair: Issued, bundle: bytes, server_name: str, tmp_path: Path) -> str:
    """Empty when a client trusting only ``bundle`` completes TLS with a server holding ``pair`` as ``server_name``;
    otherwise the client's error."""
    (tmp_path / "tls.crt").write_bytes(pair.tls_crt)
    (tmp_path / "tls.key").write_bytes(pair.tls_key)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cadata=bundle.decode())
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError):
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        with raw, client_ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            tls.sendall(b"x")
        return ""
    except ssl.SSLError as exc:
        return str(exc)
    finally:
        thread.join(timeout=5)
        listener.close()


def test_a_fresh_pair_is_trusted_for_the_services_names_only(tmp_path: Path) -> None:
    issued = issue(None, NAMES, T0)
    assert due(issued, NAMES, T0) == ""
    for name in NAMES:
        assert handshake(issued, issued.ca_crt, name, tmp_path) == ""
    assert "match" in handshake(issued, issued.ca_crt, "kilter-webhooks.default.svc", tmp_path)
    assert expiry(issued.tls_crt) == T0 + SERVING_VALIDITY


def test_another_ca_is_not_trusted(tmp_path: Path) -> None:
    ours, theirs = issue(None, NAMES, T0), issue(None, NAMES, T0)
    assert "certificate verify failed" in handshake(ours, theirs.ca_crt, NAMES[0], tmp_path)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda i: None, "no certificates yet"),
        (lambda i: Issued(b"junk", i.tls_key, i.ca_crt, i.ca_key), "do not load"),
        (lambda i: Issued(i.tls_crt, issue(None, NAMES, T0).tls_key, i.ca_crt, i.ca_key), "key does not match"),
        (lambda i: Issued(i.tls_crt, i.tls_key, issue(None, NAMES, T0).ca_crt, i.ca_key), "key does not match"),
    ],
)
def test_a_secret_that_cannot_serve_is_due(change: object, why: str) -> None:
    issued = issue(None, NAMES, T0)
    assert callable(change)
    assert why in due(change(issued), NAMES, T0)


def test_a_pair_for_another_service_is_due() -> None:
    issued = issue(None, service_names("kube-system", "old-name"), T0)
    assert "does not name the Service" in due(issued, NAMES, T0)


def issued_by_bundle(pem: bytes, bundle: bytes) -> bool:
    """Whether a CA of ``bundle`` signed the certificate ``pem`` (for times a real handshake cannot reach yet)."""
    cert = x509.load_pem_x509_certificate(pem)
    for ca in x509.load_pem_x509_certificates(bundle):
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def test_the_serving_pair_is_renewed_in_time_from_the_same_ca() -> None:
    issued = issue(None, NAMES, T0)
    renew_at = T0 + SERVING_VALIDITY - RENEW_BEFORE
    assert due(issued, NAMES, renew_at - dt.timedelta(hours=1)) == ""
    assert "serving certificate expires" in due(issued, NAMES, renew_at + dt.timedelta(hours=1))
    renewed = issue(issued, NAMES, renew_at + dt.timedelta(hours=1))
    assert renewed.ca_crt == issued.ca_crt and renewed.ca_key == issued.ca_key, "the caBundle stays as it is"
    assert renewed.tls_crt != issued.tls_crt and issued_by_bundle(renewed.tls_crt, issued.ca_crt)
    assert due(renewed, NAMES, renew_at + dt.timedelta(hours=1)) == ""


def test_a_new_ca_is_bundled_with_the_old_until_the_old_expires() -> None:
    issued = issue(None, NAMES, T0)
    late = T0 + CA_VALIDITY - SERVING_VALIDITY - RENEW_BEFORE + dt.timedelta(days=1)
    served = issue(issued, NAMES, late - dt.timedelta(days=2))  # the last pair the old CA signs
    assert served.ca_crt == issued.ca_crt
    assert "the CA expires" in due(served, NAMES, late)
    renewed = issue(served, NAMES, late)
    assert renewed.ca_crt != served.ca_crt and renewed.ca_crt.endswith(served.ca_crt)
    # The pair still served (the kubelet swaps the files in later) and the new one are both trusted meanwhile.
    assert issued_by_bundle(served.tls_crt, renewed.ca_crt) and issued_by_bundle(renewed.tls_crt, renewed.ca_crt)
    assert not issued_by_bundle(renewed.tls_crt, served.ca_crt)
    after = T0 + CA_VALIDITY + dt.timedelta(days=1)  # the old CA has expired: it leaves the bundle
    assert issue(renewed, NAMES, after).ca_crt.count(b"BEGIN CERTIFICATE") == 1


def test_a_pair_from_a_clock_that_ran_ahead_is_due() -> None:
    issued = issue(None, NAMES, T0 + dt.timedelta(hours=3))
    assert "not valid yet" in due(issued, NAMES, T0)
    assert due(issued, NAMES, T0 + dt.timedelta(hours=3)) == ""


def test_a_ca_the_webhooks_trust_now_stays_trusted_when_the_key_is_lost() -> None:
    before = issue(None, NAMES, T0)  # say, cert-manager's: its pair is what kilter's pod serves until the swap
    lost = Issued(b"", b"", b"", b"")
    after = issue(lost, NAMES, T0, also_trust=before.ca_crt)
    assert issued_by_bundle(before.tls_crt, after.ca_crt) and issued_by_bundle(after.tls_crt, after.ca_crt)
    assert after.ca_crt.count(b"BEGIN CERTIFICATE") == 2
