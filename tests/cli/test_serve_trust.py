"""The HTTP listener answers /scheduler/*, /volcano/* and /debug/* to trusted callers only: loopback by default,
``--trusted-networks`` by peer address, and with ``--http-client-ca`` any holder of a certificate that CA signed.
Everyone else gets 403 and one line, counted; /healthz, /readyz and /metrics answer everyone."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from pathlib import Path

import pytest

from tests.cli.listening import Listening, closed_by_server, listening, wait_for
from tests.extenders.conftest import make_certificates, names_args, pod_json

FILTER = json.dumps(names_args(pod_json("p", 4), ["r1-t00"])).encode()


def call(
    served: Listening,
    method: str,
    path: str,
    *,
    host: str = "127.0.0.1",
    source: str = "127.0.0.1",
    tls: ssl.SSLContext | None = None,
) -> tuple[int, bytes]:
    conn: http.client.HTTPConnection
    if tls is not None:
        conn = http.client.HTTPSConnection(host, served.http_port, timeout=10, context=tls, source_address=(source, 0))
    else:
        conn = http.client.HTTPConnection(host, served.http_port, timeout=10, source_address=(source, 0))
    try:
        conn.request(method, path, FILTER if method == "POST" else None, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_loopback_caller_is_trusted_by_default(tmp_path: Path) -> None:
    with listening(tmp_path) as served:
        status, data = call(served, "POST", "/scheduler/filter")
        assert status == 200 and json.loads(data)["NodeNames"] == ["r1-t00"]
        assert call(served, "GET", "/debug/explain?namespace=ml&pod=p")[0] == 200


@pytest.mark.parametrize(
    "path", ["/scheduler/filter", "/volcano/predicate", "/scheduler/nonsense", "/debug/explain?namespace=ml&pod=p"]
)
def test_a_caller_outside_the_trusted_networks_gets_403_and_the_probes_still_answer(tmp_path: Path, path: str) -> None:
    # kilter on 127.0.0.2 trusting only 10.0.0.0/8; the client connects from 127.0.0.1, which is not in it.
    with listening(tmp_path, address="127.0.0.2", trusted_networks=("10.0.0.0/8",)) as served:
        method = "GET" if path.startswith("/debug/") else "POST"
        status, data = call(served, method, path, host="127.0.0.2")
        assert status == 403 and data.count(b"\n") == 1 and b"127.0.0.1" in data
        for probe in ("/healthz", "/readyz", "/metrics"):
            assert call(served, "GET", probe, host="127.0.0.2")[0] == 200
        _, text = call(served, "GET", "/metrics", host="127.0.0.2")
        known = path.split("?")[0] if path != "/scheduler/nonsense" else "other"
        assert f'kilter_untrusted_requests_total{{path="{known}"}} 1.0' in text.decode()


def test_a_caller_inside_a_trusted_network_is_answered(tmp_path: Path) -> None:
    with listening(tmp_path, address="127.0.0.2", trusted_networks=("127.0.0.3/32",)) as served:
        assert call(served, "POST", "/scheduler/filter", host="127.0.0.2", source="127.0.0.3")[0] == 200
        assert call(served, "POST", "/scheduler/filter", host="127.0.0.2", source="127.0.0.1")[0] == 403


def test_with_a_client_ca_a_certificate_it_signed_is_trusted_from_anywhere(tmp_path: Path) -> None:
    # The server's own certificate, signed by the same CA, serves as the client's.
    with listening(tmp_path, http_tls=True, http_client_ca=tmp_path / "ca.crt", trusted_networks=("10.0.0.0/8",)) as s:
        client = ssl.create_default_context(cafile=str(s.certs / "ca.crt"))
        client.load_cert_chain(s.certs / "tls.crt", s.certs / "tls.key")
        status, data = call(s, "POST", "/scheduler/filter", tls=client)
        assert status == 200 and json.loads(data)["NodeNames"] == ["r1-t00"]


def test_with_a_client_ca_a_client_without_a_certificate_fails_the_handshake(tmp_path: Path) -> None:
    with listening(tmp_path, http_tls=True, http_client_ca=tmp_path / "ca.crt") as s:
        client = ssl.create_default_context(cafile=str(s.certs / "ca.crt"))
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(s, "GET", "/healthz", tls=client)
        assert wait_for(lambda: s.http.closed.get("handshake") == 1)


def test_with_a_client_ca_a_certificate_another_ca_signed_fails_the_handshake(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    other_cert, other_key, _ = make_certificates(other)
    with listening(tmp_path, http_tls=True, http_client_ca=tmp_path / "ca.crt") as s:
        client = ssl.create_default_context(cafile=str(s.certs / "ca.crt"))
        client.load_cert_chain(other_cert, other_key)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            call(s, "POST", "/scheduler/filter", tls=client)


def test_an_untrusted_caller_is_refused_before_its_body_is_read(tmp_path: Path) -> None:
    with listening(tmp_path, address="127.0.0.2", trusted_networks=("10.0.0.0/8",)) as served:
        s = socket.create_connection(("127.0.0.2", served.http_port), timeout=10, source_address=("127.0.0.1", 0))
        with s:
            s.sendall(b"POST /volcano/onSessionOpen HTTP/1.1\r\nHost: k\r\nContent-Length: 200000000\r\n\r\n{")
            assert s.recv(4096).startswith(b"HTTP/1.1 403")
            assert closed_by_server(s)
