"""``kilter certs`` names the credentials the API server refuses on ``/readyz`` and counts them on ``/metrics``.

A long-running ``kilter certs`` renews its Lease every two seconds; once the
API server takes its token no more (and kilter's token file has no newer
one), each renewal is refused, and whoever looks at the probe sees why.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.kube.auth_kit import kubeconfig
from tests.listwatch import LEASES, SECRETS, ListWatchServer
from tests.local_http import free_port, get_text


def test_kilter_certs_names_refused_credentials_on_readyz_until_its_token_file_has_a_good_one(tmp_path: Path) -> None:
    with ListWatchServer([SECRETS, LEASES], token="c0") as cluster:
        token = tmp_path / "token"
        token.write_text("c0")
        config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{cluster.port}", {"tokenFile": str(token)})
        http = free_port()
        argv = [sys.executable, "-m", "kilter.cli", "certs", "--kubeconfig", str(config), "--interval", "1s"]
        argv += ["--http-port", str(http), "--address", "127.0.0.1", "--log-format", "json"]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:

            def readyz() -> str:
                deadline = time.monotonic() + 60
                while not (text := get_text(http, "/readyz")):  # "" until the listener answers
                    assert process.poll() is None, process.communicate()[0]
                    assert time.monotonic() < deadline, "kilter certs did not answer its probe within 60 s"
                    time.sleep(0.1)
                return text

            def settles(want: bool) -> str:
                deadline = time.monotonic() + 30
                while ("credentials refused" in (text := readyz())) != want:
                    assert time.monotonic() < deadline, text
                    time.sleep(0.1)
                return text

            assert settles(False) == "ok"
            cluster.rotate_token("c1")  # the Lease renewals are refused from now on
            lines = settles(True).splitlines()
            assert lines[0] == "ok" and lines[1].startswith("credentials refused: the API server answered 401")
            assert "kilter_api_unauthorized_total 0.0" not in get_text(http, "/metrics")
            token.write_text("c1")
            assert settles(False) == "ok"
        finally:
            process.send_signal(signal.SIGTERM)
            output = process.communicate(timeout=30)[0]
        assert process.returncode == 0, output
