"""A busy port stops ``kilter serve`` before it starts anything, in one line that names the flag."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from kilter.cli.main import main
from kilter.cli.ports import check_free
from kilter.model.errors import ConfigError


@pytest.fixture
def held() -> Iterator[int]:
    """A port another process would hold: a socket listening on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_someone_listens_on_is_refused_naming_its_flag(held: int) -> None:
    with pytest.raises(ConfigError, match=rf"--grpc-port {held}: 127\.0\.0\.1:{held} is already in use"):
        check_free([("--http-port", "127.0.0.1", 0), ("--grpc-port", "127.0.0.1", held)])


def test_a_port_nobody_listens_on_passes_even_just_closed() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = int(sock.getsockname()[1])
    check_free([("--http-port", "127.0.0.1", port)])  # no error: the listener would bind it


def test_kilter_serve_on_a_busy_port_exits_with_one_line(held: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["serve", "--demo", "--address", "127.0.0.1", "--http-port", str(held), "--grpc-port", "0"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [
        f"kilter serve: --http-port {held}: 127.0.0.1:{held} is already in use (another kilter serve?); stop it or "
        "choose another port with --http-port"
    ]
