"""Each listener of ``kilter serve`` closes connections that stall or pass its cap, and counts them; one listener's
flood leaves the other answering. Deadlines are small here (0.5 s); each check waits for the server to close the
socket, with the client's own timeout as the hang detector."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.listening import Listening, closed_by_server, listening, wait_for
from tests.extenders.conftest import names_args, pod_json

FAST = {
    "header_timeout_s": 0.5,
    "body_timeout_s": 0.5,
    "tls_handshake_timeout_s": 0.5,
    "keep_alive_timeout_s": 1.0,
    "max_connections": 8,
}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Listening]:
    with listening(tmp_path, **FAST) as s:
        yield s


def healthz(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_client_that_stops_halfway_through_its_headers_is_closed(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        sock.sendall(b"POST /scheduler/filter HTTP/1.1\r\nHost: kilter\r\nContent-Ty")
        assert closed_by_server(sock)
    assert served.http.closed.get("header-timeout") == 1
    assert healthz(served.http_port) == 200


def test_a_client_that_stops_halfway_through_its_body_is_closed(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        sock.sendall(b'POST /scheduler/filter HTTP/1.1\r\nHost: kilter\r\nContent-Length: 1000\r\n\r\n{"Pod":')
        assert closed_by_server(sock)
    assert served.http.closed.get("body-timeout") == 1


def test_a_connection_that_sends_nothing_is_closed(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        assert closed_by_server(sock)
    assert served.http.closed.get("header-timeout") == 1


def test_a_kept_alive_connection_serves_request_after_request(served: Listening) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=10)
    try:
        for _ in range(3):
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b"ok\n"
    finally:
        conn.close()
    assert served.http.closed == {}


def test_an_idle_kept_alive_connection_is_closed(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: kilter\r\n\r\n")
        assert closed_by_server(sock)  # the answer, then EOF once the keep-alive timeout passes
    assert served.http.closed == {}  # closed as idle, not for a missed deadline


def test_a_tls_client_that_handshakes_and_sends_nothing_is_closed(served: Listening) -> None:
    raw = socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10)
    with served.client_tls.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        assert closed_by_server(sock)
    assert served.webhooks.closed.get("header-timeout") == 1


def test_a_tls_client_that_never_finishes_its_handshake_is_closed(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")  # the start of a ClientHello, and no more
        assert closed_by_server(sock)
    assert wait_for(lambda: served.webhooks.closed.get("handshake") == 1)


def test_every_connection_closed_is_counted_back_out(served: Listening) -> None:
    socks = [socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10) for _ in range(3)]
    assert wait_for(lambda: served.webhooks.open == 3)
    for sock in socks:
        sock.close()
    assert wait_for(lambda: served.webhooks.open == 0)


def test_the_listeners_counts_are_in_metrics(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        assert closed_by_server(sock)
    conn = http.client.HTTPConnection("127.0.0.1", served.http_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    assert 'kilter_listener_connections_closed_total{listener="http",reason="header-timeout"} 1.0' in text
    assert 'kilter_listener_connections_open{listener="webhooks"} 0.0' in text


def test_with_the_webhook_listener_flooded_to_its_cap_the_http_listener_still_answers(tmp_path: Path) -> None:
    # Handshakes may take 60 s here, so the flood stays open for the whole test: only the cap can close the 9th.
    with listening(tmp_path, tls_handshake_timeout_s=60.0, max_connections=8) as served:
        flood = [socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10) for _ in range(8)]
        try:
            assert wait_for(lambda: served.webhooks.open == 8)
            with socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10) as ninth:
                assert closed_by_server(ninth)
            assert served.webhooks.closed == {"cap": 1}
            assert healthz(served.http_port) == 200
            assert served.webhooks.open == 8
        finally:
            for sock in flood:
                sock.close()


def test_a_client_that_sends_headers_without_end_gets_431_and_a_close(served: Listening) -> None:
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: kilter\r\n")
        answer = b""
        try:
            for i in range(200):  # 200 x 1 KiB, well past the 64 KiB limit, faster than the header deadline
                sock.sendall(b"X-Pad-%d: %s\r\n" % (i, b"x" * 1024))
            answer = sock.recv(4096)
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed while we were still sending: the answer may be lost with it
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer
        assert closed_by_server(sock)
    assert served.http.closed.get("headers-too-large") == 1
    assert healthz(served.http_port) == 200


def test_a_websocket_upgrade_is_answered_as_plain_http(served: Listening) -> None:
    # kilter serves no WebSocket; uvicorn would answer an upgrade its app does not accept with a 500.
    with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: kilter\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_client_that_stops_reading_a_large_answer_is_closed(served: Listening) -> None:
    # 600,000 unknown node names (7.2 MB, under the 8 MiB limit): an answer failing each by name is tens of MB.
    names = [f"n-{i:07d}" for i in range(600_000)]
    body = json.dumps(names_args(pod_json("p", 4), names)).encode()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(10)
    with sock:
        sock.connect(("127.0.0.1", served.http_port))
        head = f"POST /scheduler/filter HTTP/1.1\r\nHost: kilter\r\nContent-Length: {len(body)}\r\n\r\n"
        sock.sendall(head.encode() + body)
        assert wait_for(lambda: served.http.closed.get("response-timeout") == 1, within_s=30)
        assert closed_by_server(sock, within_s=30)


# Trust on the HTTP listener: kilter on 127.0.0.1 trusting only 127.0.0.2, so that clients from 127.0.0.1 are the
# untrusted callers. A cap of 8 keeps 4 for trusted peers (ListenerLimits.trusted_reserve); deadlines are a minute,
# so that only a cap closes a connection here.
SHARED = {
    "header_timeout_s": 60.0,
    "tls_handshake_timeout_s": 60.0,
    "keep_alive_timeout_s": 60.0,
    "max_connections": 8,
    "trusted_networks": ("127.0.0.2/32",),
}
FILTER = json.dumps(names_args(pod_json("p", 4), ["r1-t00"])).encode()


def kept_alive(
    port: int, source: str, tls: ssl.SSLContext | None = None
) -> http.client.HTTPConnection | http.client.HTTPSConnection:
    """A connection from ``source`` that asked /healthz once and is held open (keep-alive) by the caller."""
    conn: http.client.HTTPConnection
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, source_address=(source, 0), context=tls)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    assert response.status == 200 and response.read() == b"ok\n"
    return conn


def filter_call(conn: http.client.HTTPConnection) -> list[str]:
    conn.request("POST", "/scheduler/filter", FILTER, {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    names: list[str] = json.loads(response.read())["NodeNames"]
    return names


def test_untrusted_peers_hold_at_most_their_share_of_the_cap_and_a_trusted_caller_is_still_answered(
    tmp_path: Path,
) -> None:
    with listening(tmp_path, **SHARED) as served:
        # Four untrusted connections each in the middle of a request (headers begun, never ended): busy, not idle.
        busy = [socket.create_connection(("127.0.0.1", served.http_port), timeout=10) for _ in range(4)]
        try:
            for sock in busy:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert wait_for(lambda: served.http.untrusted == 4 and not served.http.idle)
            with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as fifth:
                assert closed_by_server(fifth)
            assert served.http.closed == {"untrusted-cap": 1}
            trusted = http.client.HTTPConnection(
                "127.0.0.1", served.http_port, timeout=10, source_address=("127.0.0.2", 0)
            )
            try:
                assert filter_call(trusted) == ["r1-t00"]
            finally:
                trusted.close()
            for sock in busy:  # the untrusted connections within their share still hold
                sock.sendall(b"\r\n")
                assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            assert served.http.closed == {"untrusted-cap": 1}
        finally:
            for sock in busy:
                sock.close()


def test_a_probe_finding_the_untrusted_share_held_by_idle_keep_alives_sheds_the_longest_idle(tmp_path: Path) -> None:
    """An attacker's kept-alive connections between requests cost it nothing: a kubelet probe, a new connection
    each time, takes the place of the one idle longest instead of being refused."""
    with listening(tmp_path, **SHARED) as served:
        held = [kept_alive(served.http_port, "127.0.0.1") for _ in range(4)]
        try:
            assert wait_for(lambda: served.http.untrusted == 4 and len(served.http.idle) == 4)
            for _ in range(3):  # three probes, each answered; each sheds the one idle longest
                held.append(kept_alive(served.http_port, "127.0.0.1"))
            assert served.http.closed == {"shed-idle": 3}
            assert served.http.untrusted == 4
            for conn in held[:3]:
                assert conn.sock is not None and closed_by_server(conn.sock), "the three idle longest were shed"
            held[3].request("GET", "/healthz")
            assert held[3].getresponse().read() == b"ok\n", "the youngest still serves"
        finally:
            for conn in held:
                conn.close()


def test_trusted_peers_may_take_the_whole_cap(tmp_path: Path) -> None:
    with listening(tmp_path, **SHARED) as served:
        source = ("127.0.0.2", 0)
        held = [socket.create_connection(("127.0.0.1", served.http_port), 10, source) for _ in range(8)]
        try:
            assert wait_for(lambda: served.http.open == 8)
            assert served.http.untrusted == 0
            with socket.create_connection(("127.0.0.1", served.http_port), 10, source) as ninth:
                assert closed_by_server(ninth)
            assert served.http.closed == {"cap": 1}
            with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as untrusted:
                assert closed_by_server(untrusted)  # its own share is empty, but the cap is full
            assert served.http.closed == {"cap": 2}
        finally:
            for sock in held:
                sock.close()
        assert wait_for(lambda: served.http.open == 0)


def test_the_webhook_listener_shares_its_cap_with_every_peer(tmp_path: Path) -> None:
    # The apiserver may connect from any address: no trust rule, no untrusted share; the 8th handshake holds.
    with listening(tmp_path, **SHARED) as served:
        held = [socket.create_connection(("127.0.0.1", served.webhook_port), timeout=10) for _ in range(8)]
        try:
            assert wait_for(lambda: served.webhooks.open == 8)
            assert served.webhooks.untrusted == 0 and served.webhooks.closed == {}
        finally:
            for sock in held:
                sock.close()


def test_with_a_client_ca_a_verified_connection_leaves_the_untrusted_share(tmp_path: Path) -> None:
    # Trusted by certificate only: each peer counts as untrusted until its handshake verifies a certificate.
    config = {**SHARED, "trusted_networks": ("10.0.0.0/8",), "http_tls": True, "http_client_ca": tmp_path / "ca.crt"}
    with listening(tmp_path, **config) as served:
        client = ssl.create_default_context(cafile=str(served.certs / "ca.crt"))
        client.load_cert_chain(served.certs / "tls.crt", served.certs / "tls.key")
        verified = [kept_alive(served.http_port, "127.0.0.1", client) for _ in range(4)]
        try:
            assert wait_for(lambda: served.http.open == 4)
            assert served.http.untrusted == 0
            pending = [socket.create_connection(("127.0.0.1", served.http_port), timeout=10) for _ in range(4)]
            try:
                assert wait_for(lambda: served.http.untrusted == 4)
                with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as fifth:
                    assert closed_by_server(fifth)
                assert served.http.closed == {"untrusted-cap": 1}
                assert all(filter_call(conn) == ["r1-t00"] for conn in verified)
            finally:
                for sock in pending:
                    sock.close()
        finally:
            for conn in verified:
                conn.close()


def test_a_probe_from_the_probe_networks_gets_through_a_share_held_by_busy_untrusted_peers(tmp_path: Path) -> None:
    """The kubelet probes from the node's address (``--probe-networks``): with every untrusted slot busy (nothing
    idle to shed), its connection takes the trusted reserve; it is still not trusted with the verbs."""
    with listening(tmp_path, **SHARED, probe_networks=("127.0.0.3/32",)) as served:
        busy = [socket.create_connection(("127.0.0.1", served.http_port), timeout=10) for _ in range(4)]
        try:
            for sock in busy:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            assert wait_for(lambda: served.http.untrusted == 4 and not served.http.idle)
            with socket.create_connection(("127.0.0.1", served.http_port), timeout=10) as other:
                assert closed_by_server(other), "another untrusted peer is refused"
            kubelet = kept_alive(served.http_port, "127.0.0.3")
            try:
                kubelet.request("POST", "/scheduler/filter", FILTER, {"Content-Type": "application/json"})
                assert kubelet.getresponse().status == 403, "a probe address is not a trusted caller"
            finally:
                kubelet.close()
            assert served.http.closed == {"untrusted-cap": 1}
        finally:
            for sock in busy:
                sock.close()
