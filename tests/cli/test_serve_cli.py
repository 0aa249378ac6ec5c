"""``kilter serve`` refuses bad setups with one line and exit code 2, before it listens anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from kilter.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["serve", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "no cluster to serve"),
        (("--snapshot", "/nonexistent/snapshot.yaml"), "cannot read /nonexistent/snapshot.yaml"),
        (("--demo", "--tls-cert-file", "cert.pem"), "--tls-cert-file and --tls-key-file go together"),
        (("--demo", "--gang-timeout", "soon"), "'soon' is not a duration"),
        (("--demo", "--http-tls"), "--http-tls needs --tls-cert-file and --tls-key-file"),
        (("--demo", "--max-body-bytes", "10"), "--max-body-bytes must be at least 1024"),
        (("--demo", "--kubeconfig", "/nonexistent/kubeconfig"), "cannot use /nonexistent/kubeconfig"),
    ],
)
def test_bad_setups_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, err = run(capsys, *args)
    assert code == 2 and message in err and err.count("\n") == 1


def test_an_unreadable_certificate_is_named(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("not a certificate")
    key.write_text("not a key")
    code, err = run(capsys, "--demo", "--tls-cert-file", str(cert), "--tls-key-file", str(key))
    assert code == 2 and "cannot load the TLS certificate" in err
