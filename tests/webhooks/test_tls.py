"""The webhook listener: HTTPS only, TLS 1.2 or newer, and a certificate rotated under it while it serves."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import warnings
from pathlib import Path

import pytest

from tests.extenders.conftest import make_certificates
from tests.webhooks.conftest import Hooks


def healthz(hooks: Hooks, client: ssl.SSLContext) -> int:
    conn = http.client.HTTPSConnection("127.0.0.1", hooks.port, context=client, timeout=10)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def swap_in(hooks: Hooks, directory: Path) -> None:
    """Replace the served files the way a Secret volume does: new files renamed over the old ones."""
    for name in ("tls.crt", "tls.key"):
        shutil.copy(directory / name, hooks.certs / f".{name}.new")
        os.replace(hooks.certs / f".{name}.new", hooks.certs / name)


def test_a_rotated_certificate_is_served_without_a_restart(hooks: Hooks, tmp_path: Path) -> None:
    assert healthz(hooks, hooks.client) == 200
    new_dir = tmp_path / "rotated"
    new_dir.mkdir()
    _, _, new_ca = make_certificates(new_dir)
    swap_in(hooks, new_dir)
    trusts_new = ssl.create_default_context(cafile=str(new_ca))
    assert healthz(hooks, trusts_new) == 200
    assert hooks.tls.reloads == 1
    with pytest.raises(ssl.SSLCertVerificationError):
        healthz(hooks, hooks.client)  # the old CA no longer vouches for what is served


def test_a_half_written_certificate_leaves_the_old_one_in_service(hooks: Hooks) -> None:
    (hooks.certs / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    assert healthz(hooks, hooks.client) == 200
    assert hooks.tls.reloads == 0


def test_tls_older_than_1_2_and_plain_http_are_refused(hooks: Hooks) -> None:
    # This machine's OpenSSL refuses TLS 1.1 on its own too, so the contexts are checked directly as well.
    assert hooks.tls.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert hooks.tls.current().minimum_version == ssl.TLSVersion.TLSv1_2
    tls12 = ssl.create_default_context(cafile=str(hooks.certs / "ca.crt"))
    tls12.maximum_version = ssl.TLSVersion.TLSv1_2
    assert healthz(hooks, tls12) == 200
    old = ssl.create_default_context(cafile=str(hooks.certs / "ca.crt"))
    with warnings.catch_warnings():  # asking for TLS 1.1 on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises((ssl.SSLError, ConnectionError)):
        healthz(hooks, old)
    with socket.create_connection(("127.0.0.1", hooks.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            reply = sock.recv(1024)
        except ConnectionError:
            reply = b""
    assert not reply.startswith(b"HTTP/1.1 200")
    assert healthz(hooks, hooks.client) == 200
