"""``kilter certs`` against the list/watch test server: the Secret made and renewed, every caBundle kept.

The API calls are real HTTP to the test server (POST/PUT of the Secret, JSON merge patches of the webhook
configurations with a resourceVersion precondition), and the result is checked as the apiserver would use it: a
TLS handshake against the Secret's pair by a client trusting only a configuration's caBundle.
"""

from __future__ import annotations

import base64
import datetime as dt
import http.client as http_client
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.main import main
from kilter.kube.api import CERTS_AGENT, ApiServer
from kilter.webhooks.cert_controller import CertController
from kilter.webhooks.certs import RENEW_BEFORE, SERVING_VALIDITY, Issued, expiry, service_names
from tests.listwatch import SECRETS, ApiError, ListWatchServer, Resource
from tests.live_mode import kubeconfig
from tests.local_http import free_port, get_text
from tests.webhooks.test_certs import handshake

MUTATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
VALIDATING = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
CONFIGS = ["mutating/kilter-mutating-webhook-configuration", "validating/kilter-validating-webhook-configuration"]
SERVICE = ("kube-system", "kilter-webhooks")
T0 = dt.datetime(2026, 12, 5, tzinfo=dt.UTC)
TOKEN = "certs"


def configuration(kind: str, name: str, webhooks: int) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"hook-{i}.kilter.dev",
                "clientConfig": {"service": {"namespace": SERVICE[0], "name": SERVICE[1], "path": "/validate"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
            for i in range(webhooks)
        ],
    }


@pytest.fixture
def cluster() -> Iterator[ListWatchServer]:
    with ListWatchServer([SECRETS, MUTATING, VALIDATING], token=TOKEN) as server:
        server.add(configuration("MutatingWebhookConfiguration", "kilter-mutating-webhook-configuration", 1))
        server.add(configuration("ValidatingWebhookConfiguration", "kilter-validating-webhook-configuration", 3))
        yield server


def controller(cluster: ListWatchServer, clock: list[dt.datetime]) -> CertController:
    api = ApiServer("http", cluster.host, cluster.port, {"Authorization": f"Bearer {TOKEN}"}, user_agent=CERTS_AGENT)
    return CertController(api, ("kube-system", "kilter-webhooks-tls"), SERVICE, CONFIGS, clock=lambda: clock[0])


def stored(cluster: ListWatchServer) -> Issued:
    secret = cluster.get_object(SECRETS, "kube-system", "kilter-webhooks-tls")
    assert secret["type"] == "kubernetes.io/tls"
    issued = Issued.of({k: base64.b64decode(v) for k, v in secret["data"].items()})
    assert issued is not None
    return issued


def bundles(cluster: ListWatchServer) -> list[bytes]:
    out = []
    for resource, name in ((MUTATING, CONFIGS[0]), (VALIDATING, CONFIGS[1])):
        config = cluster.get_object(resource, None, name.split("/")[1])
        out += [base64.b64decode(w["clientConfig"]["caBundle"]) for w in config["webhooks"]]
    return out


def writes(cluster: ListWatchServer, since: int = 0) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in cluster.requests[since:] if r.method != "GET"]


def test_the_first_round_makes_the_secret_and_every_webhook_trusts_its_ca(
    cluster: ListWatchServer, tmp_path: Path
) -> None:
    done = controller(cluster, [T0]).run_once()
    assert done.issued == "no certificates yet" and sorted(done.patched) == sorted(CONFIGS) and not done.errors
    issued = stored(cluster)
    assert bundles(cluster) == [issued.ca_crt] * 4
    for name in service_names(*SERVICE):  # as the apiserver dials the Service, trusting the caBundle alone
        assert handshake(issued, bundles(cluster)[0], name, tmp_path) == ""
    assert writes(cluster) == [
        ("POST", "/api/v1/namespaces/kube-system/secrets"),
        (
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/kilter-mutating-webhook-configuration",
        ),
        (
            "PATCH",
            "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/kilter-validating-webhook-configuration",
        ),
    ]


def test_a_round_with_nothing_due_writes_nothing(cluster: ListWatchServer) -> None:
    clock = [T0]
    certs = controller(cluster, clock)
    certs.run_once()
    before = len(cluster.requests)
    clock[0] = T0 + dt.timedelta(days=30)
    done = certs.run_once()
    assert (done.issued, done.patched, writes(cluster, before)) == ("", [], [])
    assert certs.expiry == T0 + SERVING_VALIDITY


def test_the_pair_is_renewed_before_it_expires_and_the_bundle_is_left_alone(cluster: ListWatchServer) -> None:
    clock = [T0]
    certs = controller(cluster, clock)
    certs.run_once()
    first = stored(cluster)
    before = len(cluster.requests)
    clock[0] = T0 + SERVING_VALIDITY - RENEW_BEFORE + dt.timedelta(minutes=1)
    done = certs.run_once()
    assert "serving certificate expires" in done.issued and done.patched == []
    renewed = stored(cluster)
    assert renewed.ca_crt == first.ca_crt and renewed.tls_crt != first.tls_crt
    assert expiry(renewed.tls_crt) == clock[0] + SERVING_VALIDITY
    assert writes(cluster, before) == [("PUT", "/api/v1/namespaces/kube-system/secrets/kilter-webhooks-tls")]


def test_an_edited_bundle_is_set_back_and_a_missing_configuration_waits(cluster: ListWatchServer) -> None:
    clock = [T0]
    certs = controller(cluster, clock)
    certs.run_once()
    name = "kilter-validating-webhook-configuration"
    config = cluster.get_object(VALIDATING, None, name)
    config["webhooks"][1]["clientConfig"]["caBundle"] = base64.b64encode(b"someone else's CA").decode()
    cluster.update(config)
    cluster.delete("admissionregistration.k8s.io", "mutatingwebhookconfigurations", None, CONFIGS[0].split("/")[1])
    done = certs.run_once()
    assert done.patched == [CONFIGS[1]] and done.missing == [CONFIGS[0]] and not done.errors
    hooks = cluster.get_object(VALIDATING, None, name)["webhooks"]
    assert {base64.b64decode(w["clientConfig"]["caBundle"]) for w in hooks} == {stored(cluster).ca_crt}
    cluster.add(configuration("MutatingWebhookConfiguration", CONFIGS[0].split("/")[1], 2))  # applied after kilter
    assert certs.run_once().patched == [CONFIGS[0]]
    assert set(bundles(cluster)) == {stored(cluster).ca_crt}


def test_a_secret_that_is_not_base64_is_replaced(cluster: ListWatchServer) -> None:
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kilter-webhooks-tls", "namespace": "kube-system"},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": base64.b64encode(b"not a certificate").decode()},
        }
    )
    done = controller(cluster, [T0]).run_once()
    assert done.issued == "no certificates yet" and not done.errors
    assert stored(cluster).ca_crt in bundles(cluster)


def test_kilter_certs_once_from_the_command_line(cluster: ListWatchServer, tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
    assert main(["certs", "--once", "--kubeconfig", str(config)]) == 0
    issued = stored(cluster)
    assert bundles(cluster) == [issued.ca_crt] * 4
    context = ssl.create_default_context(cadata=issued.ca_crt.decode())
    assert context.cert_store_stats()["x509_ca"] == 1


def test_kilter_certs_refuses_bad_references(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for argv, why in (
        (["--secret", "no-namespace"], "--secret must be NAMESPACE/NAME"),
        (["--webhook-configuration", "mutatingx/name"], "mutating/NAME or validating/NAME"),
        (["--interval", "0s"], "--interval must be from 1s to 1d"),
        ([], "needs a cluster"),
    ):
        assert main(["certs", "--once", *argv]) == 2, argv
        assert why in capsys.readouterr().err


LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=True)


def test_kilter_certs_leads_by_its_lease_keeps_the_secret_and_answers_probes(tmp_path: Path) -> None:
    with ListWatchServer([SECRETS, MUTATING, VALIDATING, LEASES], token=TOKEN) as cluster:
        cluster.add(configuration("MutatingWebhookConfiguration", CONFIGS[0].split("/")[1], 1))
        cluster.add(configuration("ValidatingWebhookConfiguration", CONFIGS[1].split("/")[1], 1))
        http = free_port()
        config = kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN)
        argv = [sys.executable, "-m", "kilter.cli", "certs", "--kubeconfig", str(config), "--interval", "1s"]
        argv += ["--http-port", str(http), "--address", "127.0.0.1", "--log-format", "json"]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            while 'kilter_leader{lease="kube-system/kilter-certs"} 1.0' not in _metrics(http) or not bundles_set(
                cluster
            ):
                assert process.poll() is None, process.communicate()[0]
                assert time.monotonic() < deadline, "kilter certs did not lead and issue within 60 s"
                time.sleep(0.1)
            assert "kilter_certificate_expiry_timestamp_seconds" in _metrics(http)
            assert get_text(http, "/healthz") == "ok" and get_text(http, "/readyz") == "ok"
            for method, path, want in (("POST", "/metrics", 405), ("GET", "/nope", 404), ("DELETE", "/healthz", 405)):
                conn = http_client.HTTPConnection("127.0.0.1", http, timeout=5)
                conn.request(method, path, body=b"{not json" if method == "POST" else None)
                assert conn.getresponse().status == want, (method, path)
                conn.close()
            lease = cluster.get_object(LEASES, "kube-system", "kilter-certs")
            assert lease["spec"]["holderIdentity"].startswith(socket.gethostname())
        finally:
            process.send_signal(signal.SIGTERM)
            output = process.communicate(timeout=30)[0]
        assert process.returncode == 0, output
        released = cluster.get_object(LEASES, "kube-system", "kilter-certs")
        assert not released["spec"].get("holderIdentity"), "a replica that stops hands the Lease back"


def bundles_set(cluster: ListWatchServer) -> bool:
    try:
        return len(set(bundles(cluster))) == 1
    except (KeyError, ApiError):
        return False


def _metrics(port: int) -> str:
    return get_text(port, "/metrics")


def test_a_shipped_secret_is_filled_keeping_its_type_and_labels(cluster: ListWatchServer) -> None:
    cluster.add(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kilter-webhooks-tls", "namespace": "kube-system", "labels": {"team": "platform"}},
            "type": "Opaque",
        }
    )
    done = controller(cluster, [T0]).run_once()
    assert done.issued == "no certificates yet" and not done.errors
    secret = cluster.get_object(SECRETS, "kube-system", "kilter-webhooks-tls")
    assert secret["type"] == "Opaque" and secret["metadata"]["labels"] == {"team": "platform"}
    assert [m for m, _ in writes(cluster)][:1] == ["PUT"], "filled in place, never created"
