"""The one body reader refuses an oversized body as soon as it is known, and feeds a reader all but the last piece."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from kilter.model.asgi import BodyRefused, Message, Scope, is_local_caller, peer_address, read_body, reply


class Wire:
    """The client's side of one request: the ``http.request`` pieces it sends, and how many the app asked for."""

    def __init__(self, pieces: list[bytes], *, disconnect: bool = False) -> None:
        self.messages: list[Message] = [
            {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)
        ]
        if disconnect:
            self.messages = [*self.messages[:-1], {"type": "http.disconnect"}]
        self.asked = 0

    async def receive(self) -> Message:
        self.asked += 1
        return self.messages[self.asked - 1]


def scope(length: int | None = None) -> Scope:
    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "path": "/x", "method": "POST", "headers": headers}


def test_a_body_announced_above_the_limit_is_refused_before_a_byte_is_read() -> None:
    wire = Wire([b"x" * 20])
    assert asyncio.run(read_body(scope(20), wire.receive, limit_bytes=10)) is BodyRefused.TOO_LARGE
    assert wire.asked == 0


def test_a_streamed_body_is_refused_at_the_piece_that_passes_the_limit() -> None:
    wire = Wire([b"x" * 4, b"x" * 4, b"x" * 4, b"x" * 4])  # 4 + 4 + 4 = 12 > 10 at the third piece
    assert asyncio.run(read_body(scope(), wire.receive, limit_bytes=10)) is BodyRefused.TOO_LARGE
    assert wire.asked == 3


def test_a_body_at_the_limit_comes_back_in_its_pieces_and_the_reader_sees_all_but_the_last() -> None:
    wire = Wire([b"ab", b"cd", b"ef"])
    fed: list[bytes] = []
    chunks = asyncio.run(read_body(scope(6), wire.receive, limit_bytes=6, feed=fed.append))
    assert chunks == [b"ab", b"cd", b"ef"] and fed == [b"ab", b"cd"]


def test_a_client_that_goes_away_leaves_nobody_to_answer() -> None:
    wire = Wire([b"ab", b"cd"], disconnect=True)
    assert asyncio.run(read_body(scope(), wire.receive, limit_bytes=100)) is BodyRefused.DISCONNECTED


def test_a_reply_is_one_start_and_one_body_with_its_length_timing_and_close() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(reply(send, 413, body=b"too big\n", content_type="text/plain", timing_s=0.0015, close=True))
    start, body = sent
    assert start == {
        "type": "http.response.start",
        "status": 413,
        "headers": [
            (b"content-type", b"text/plain"),
            (b"content-length", b"8"),
            (b"server-timing", b"app;dur=1.500"),  # 0.0015 s = 1.500 ms
            (b"connection", b"close"),
        ],
    }
    assert body == {"type": "http.response.body", "body": b"too big\n"}


@pytest.mark.parametrize(
    ("client", "address", "loopback"),
    [
        pytest.param(("127.0.0.1", 50000), "127.0.0.1", True, id="IPv4 loopback"),
        pytest.param(("127.8.9.10", 1), "127.8.9.10", True, id="all of 127.0.0.0/8"),
        pytest.param(("::1", 1), "::1", True, id="IPv6 loopback"),
        pytest.param(("::ffff:127.0.0.1", 1), "127.0.0.1", True, id="IPv4-mapped loopback is IPv4"),
        pytest.param(("::ffff:10.1.2.3", 1), "10.1.2.3", False, id="IPv4-mapped pod address is IPv4"),
        pytest.param(("10.244.1.7", 1), "10.244.1.7", False, id="a pod address"),
        pytest.param(("/run/kilter.sock", None), None, False, id="not an IP address"),
        pytest.param(None, None, False, id="a client the server could not name"),
    ],
)
def test_the_peer_is_the_ip_address_of_the_scopes_client(
    client: tuple[str, int | None] | None, address: str | None, loopback: bool
) -> None:
    s: Scope = {"type": "http", "client": client}
    assert peer_address(s) == (ipaddress.ip_address(address) if address else None)
    assert is_local_caller(s) is loopback


def test_a_scope_without_a_client_is_an_in_process_call_and_local() -> None:
    assert is_local_caller({"type": "http"}) and peer_address({"type": "http"}) is None
