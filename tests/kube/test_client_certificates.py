"""Client certificates that are renewed: files read again when they change, an exec plugin's pair replaced, and the
API server's 401 to a certificate it no longer takes met with a fresh reading, over real TLS on loopback.

The list/watch test server serves HTTPS and authenticates client
certificates signed by its client CA; ``rotate_client_ca`` moves it to a
new CA, after which the old certificates get 401, as kube-apiserver does when
its ``--client-ca-file`` changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kilter.kube import kubeconfig as kubeconfigs
from kilter.kube.api import ApiServer, connect, server_context
from kilter.kube.credentials import CHECK_FILES_S, RETRY_S, of_user
from kilter.kube.kubeconfig import User
from tests.clock import Clock
from tests.kube.auth_kit import Authority, Plugin, kubeconfig
from tests.listwatch import PODS, ListWatchServer


@dataclass
class Pki:
    serving: Authority
    old: Authority
    new: Authority
    directory: Path

    def write_pair(self, authority: Authority, *, key: bool = True) -> None:
        cert_pem, key_pem = authority.issue("system:serviceaccount:kilter-system:kilter")
        (self.directory / "client.crt").write_bytes(cert_pem)
        if key:
            (self.directory / "client.key").write_bytes(key_pem)

    @property
    def cert(self) -> Path:
        return self.directory / "client.crt"

    @property
    def key(self) -> Path:
        return self.directory / "client.key"


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    pki = Pki(Authority("apiserver CA"), Authority("client CA 1"), Authority("client CA 2"), tmp_path)
    (tmp_path / "ca.crt").write_bytes(pki.serving.pem)
    pki.write_pair(pki.old)
    return pki


@pytest.fixture
def cluster(pki: Pki) -> Iterator[ListWatchServer]:
    with ListWatchServer([PODS], tls=pki.serving.serving_files(pki.directory), client_ca=pki.old.pem) as server:
        yield server


def https_kubeconfig(pki: Pki, cluster: ListWatchServer, user: dict[str, object]) -> Path:
    return kubeconfig(
        pki.directory / "kubeconfig",
        f"https://127.0.0.1:{cluster.port}",
        user,
        **{"certificate-authority": str(pki.directory / "ca.crt")},
    )


def test_renewed_certificate_files_are_read_at_once_when_the_api_server_refuses_the_old_pair(
    pki: Pki, cluster: ListWatchServer
) -> None:
    target = kubeconfigs.read(
        https_kubeconfig(pki, cluster, {"client-certificate": "client.crt", "client-key": "client.key"})
    )
    credentials = of_user(target.user, tls=lambda: server_context(target), clock=Clock())  # the clock stands still
    api = ApiServer("https", "127.0.0.1", cluster.port, tls=server_context(target), credentials=credentials)
    assert api.call("GET", "/api/v1/pods")["items"] == []
    pki.write_pair(pki.new)
    cluster.rotate_client_ca(pki.new.pem)
    assert api.call("GET", "/api/v1/pods")["items"] == []  # 401 with the old pair, then 200 with the new
    assert len(cluster.requests) == 3 and credentials.refreshed == 1 and credentials.unauthorized == 0


def test_a_kubeconfigs_certificate_files_are_followed_by_connect(pki: Pki, cluster: ListWatchServer) -> None:
    api = connect(https_kubeconfig(pki, cluster, {"client-certificate": "client.crt", "client-key": "client.key"}))
    assert api.call("GET", "/api/v1/pods")["items"] == []
    pki.write_pair(pki.new)
    cluster.rotate_client_ca(pki.new.pem)
    assert api.call("GET", "/api/v1/pods")["items"] == []  # at once on the 401, or on the next look if a second passed
    assert api.credentials is not None and api.credentials.unauthorized == 0


def test_certificate_files_are_read_again_when_they_change_looked_at_once_a_second(
    pki: Pki, cluster: ListWatchServer
) -> None:
    clock = Clock()
    target = kubeconfigs.read(https_kubeconfig(pki, cluster, {}))
    credentials = of_user(User(cert_file=pki.cert, key_file=pki.key), tls=lambda: server_context(target), clock=clock)
    first = credentials.current()
    pki.write_pair(pki.new)
    cluster.rotate_client_ca(pki.new.pem)
    clock.now += CHECK_FILES_S / 2
    assert credentials.current().tls is first.tls
    clock.now += CHECK_FILES_S / 2
    renewed = credentials.current()
    assert renewed.tls is not first.tls and renewed.generation == first.generation + 1
    api = ApiServer("https", "127.0.0.1", cluster.port, tls=server_context(target), credentials=credentials)
    assert api.call("GET", "/api/v1/pods")["items"] == [] and len(cluster.requests) == 1  # no 401 first


def test_a_half_written_renewal_keeps_the_last_pair_until_the_key_matches(pki: Pki, cluster: ListWatchServer) -> None:
    clock = Clock()
    target = kubeconfigs.read(https_kubeconfig(pki, cluster, {}))
    credentials = of_user(User(cert_file=pki.cert, key_file=pki.key), tls=lambda: server_context(target), clock=clock)
    first = credentials.current()
    pki.write_pair(pki.new, key=False)  # the certificate is renewed, its key not yet
    clock.now += CHECK_FILES_S
    assert credentials.current().tls is first.tls
    (problem,) = credentials.problems()
    assert problem.startswith(f"credentials not read again: client certificate {pki.cert}: cannot use the certificate")
    pki.write_pair(pki.new)
    clock.now += RETRY_S
    assert credentials.current().tls is not first.tls and credentials.problems() == []


def test_an_exec_plugins_certificate_is_replaced_when_the_api_server_refuses_it(
    pki: Pki, cluster: ListWatchServer
) -> None:
    plugin = Plugin(pki.directory / "plugin")
    plugin.answer(cert=pki.cert.read_bytes(), key=pki.key.read_bytes())
    api = connect(https_kubeconfig(pki, cluster, plugin.user()))
    assert api.call("GET", "/api/v1/pods")["items"] == []
    pki.write_pair(pki.new)
    plugin.answer(cert=pki.cert.read_bytes(), key=pki.key.read_bytes())
    cluster.rotate_client_ca(pki.new.pem)
    assert api.call("GET", "/api/v1/pods")["items"] == []
    assert len(plugin.runs()) == 2 and len(cluster.requests) == 3
