"""``kilter serve``'s gRPC flags: they reach their fields, bad ones are one line and exit 2, and the peer that
gRPC reports is read as the trust rule reads an HTTP caller."""

from __future__ import annotations

from pathlib import Path

import pytest

from kilter.cli.main import build_parser, main
from kilter.cli.serve_config import ServeConfig
from kilter.cli.serve_grpc import peer_client


def test_the_grpc_flags_reach_their_fields_and_default_to_9090() -> None:
    assert ServeConfig.from_args(build_parser().parse_args(["serve", "--demo"])).grpc_port == 9090
    argv = ["serve", "--demo", "--tls-cert-file", "c", "--tls-key-file", "k", "--grpc-port", "0"]
    config = ServeConfig.from_args(build_parser().parse_args([*argv, "--grpc-port", "9191", "--grpc-client-ca", "ca"]))
    assert (config.grpc_port, config.grpc_client_ca) == (9191, Path("ca"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--grpc-port", "70000"), "--grpc-port must be 0 (off) to 65535, got 70000"),
        (("--grpc-client-ca", "ca.crt"), "--grpc-client-ca needs --tls-cert-file and --tls-key-file"),
    ],
    ids=["port out of range", "client CA without TLS"],
)
def test_a_bad_grpc_setup_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    assert main(["serve", "--demo", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_help_names_the_grpc_listener(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--grpc-port GRPC_PORT" in shown and "(default 9090; 0: off)" in shown
    assert "kilter.v1.Placement" in shown and "--grpc-client-ca" in shown


@pytest.mark.parametrize(
    ("peer", "client"),
    [
        ("ipv4:127.0.0.1:5000", ("127.0.0.1", 5000)),
        ("ipv6:[::1]:5000", ("::1", 5000)),
        ("ipv6:[::ffff:10.0.0.1]:443", ("::ffff:10.0.0.1", 443)),
        ("unix:/run/kilter.sock", None),
        ("ipv4:not-an-address:5000", None),
        ("ipv4:127.0.0.1", None),
        ("", None),
    ],
)
def test_a_grpc_peer_reads_as_an_asgi_client(peer: str, client: tuple[str, int] | None) -> None:
    assert peer_client(peer) == client
