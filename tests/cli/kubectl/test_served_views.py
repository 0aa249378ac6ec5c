"""``--kilter-service``: a real ``kilter serve`` answers every view through the API server's service proxy (the
list/watch test server's ``services/NAME:PORT/proxy``), exactly as the plugin answers it from its own reading;
refusals (RBAC, no Service, an untrusted caller, bad requests) are one line, never a traceback or a 5xx."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from kilter.cli.kubectl.served import ServedViews
from kilter.cli.sources import catalog_of
from kilter.extenders.server import VIEWS_MAX_BODY_BYTES
from kilter.state.store import ClusterStore
from tests.cli.kubectl import scenario
from tests.cli.listening import Listening, listening
from tests.extenders.conftest import names_args, pod_json
from tests.listwatch import ListWatchServer
from tests.live_mode import RESOURCES, kubeconfig

TOKEN = "views"
SERVICE = "kilter-system/kilter:http"
JOB = Path(__file__).resolve().parents[3] / "examples" / "jobs" / "pytorchjob-16x4.yaml"


@dataclass
class Served:
    kilter: Listening
    cluster: ListWatchServer
    config: Path
    snapshot: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """kilter serving the plugin scenario's snapshot, behind a Service the test API server proxies to; the API
    server itself holds nothing, so a view that listed the cluster would find it empty."""
    tmp = tmp_path_factory.mktemp("served")
    snap = scenario.write(tmp / "cluster.json")
    with listening(tmp, snapshot=snap) as kilter, ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        cluster.services[("kilter-system", "kilter", "http")] = ("127.0.0.1", kilter.http_port)
        yield Served(kilter, cluster, kubeconfig(tmp / "config", cluster.port, TOKEN), snap)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = kubectl_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


VIEWS = (
    ["queues"],
    ["pending", "-A"],
    ["pending", "-n", "tas"],
    ["top", "-A"],
    ["domains"],
    ["domains", "--map"],
    ["explain", "-n", "llm", "llama-0"],
    ["explain", "-n", "tas", "workload/huge"],
    ["explain", "-n", "llm", "nobody"],
    ["plan", "-f", str(JOB)],
)


@pytest.mark.parametrize("output", ["table", "json"])
@pytest.mark.parametrize("view", VIEWS, ids=lambda v: " ".join(v[:2]))
def test_a_served_view_is_the_local_reading_of_the_same_cluster(
    served: Served, capsys: pytest.CaptureFixture[str], view: list[str], output: str
) -> None:
    tail = ["--now", scenario.NOW, "-o", output]
    local = run(capsys, *view, "--snapshot", str(served.snapshot), *tail)
    before = len(served.cluster.requests)
    remote = run(capsys, *view, "--kubeconfig", str(served.config), "--kilter-service", SERVICE, *tail)
    if view[0] == "explain" and remote[0] == 0:  # kilter adds the decisions it recorded, which a reading cannot
        code, text, err = remote
        if output == "json":
            doc = json.loads(text)
            assert "decisions" in doc and all(e["decisions"] == [] for e in doc.pop("decisions"))
            text = json.dumps(doc, indent=2) + "\n"
            local = (local[0], json.dumps(json.loads(local[1]), indent=2) + "\n", local[2])
        else:
            text, cut, _ = text.partition("\nRecorded decisions (kilter /debug/explain):\n")
            assert cut
        remote = (code, text, err)
    assert remote == local
    assert local[0] in (0, 1) and (local[1] or local[2])
    asked = [r.path for r in served.cluster.requests[before:]]
    assert asked == ["/api/v1/namespaces/kilter-system/services/kilter:http/proxy/debug/views"]


def test_the_namespace_is_the_kubeconfig_contexts(
    served: Served, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads(served.config.read_text())
    config["contexts"][0]["context"]["namespace"] = "tas"
    scoped = tmp_path / "config"
    scoped.write_text(json.dumps(config))
    _, by_context, _ = run(capsys, "pending", "--kubeconfig", str(scoped), "--kilter-service", SERVICE, "-o", "json")
    _, by_flag, _ = run(capsys, "pending", "-n", "tas", "--snapshot", str(served.snapshot), "-o", "json")
    names = [p["name"] for p in json.loads(by_context)["pending"]]
    assert names and names == [p["name"] for p in json.loads(by_flag)["pending"]]


def test_the_environment_names_the_service_unless_a_snapshot_is_read(
    served: Served, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECTL_KILTER_SERVICE", SERVICE)
    before = len(served.cluster.requests)
    code, out, _ = run(capsys, "queues", "--kubeconfig", str(served.config), "-o", "json")
    assert code == 0 and json.loads(out)["clusterQueues"]
    assert [r.path for r in served.cluster.requests[before:]][-1].endswith("/proxy/debug/views")
    before = len(served.cluster.requests)
    code, _, _ = run(capsys, "queues", "--snapshot", str(served.snapshot))
    assert code == 0 and len(served.cluster.requests) == before


def test_explain_served_shows_kilters_recorded_decisions(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    pod = pod_json("p", 4)
    conn = http.client.HTTPConnection("127.0.0.1", served.kilter.http_port, timeout=30)
    body = json.dumps(names_args(pod, ["r1-t00", "r2-t00"]))
    conn.request("POST", "/scheduler/filter", body, {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()
    args = ["explain", "-n", "llm", "llama-0", "--kubeconfig", str(served.config), "--kilter-service", SERVICE]
    code, out, err = run(capsys, *args, "-o", "json")
    assert code == 0, err
    entries = json.loads(out)["decisions"]
    assert entries and all(e["decisions"] == [] and "no decision" in e["note"] for e in entries)
    # kilter's log holds the filter of ml/p; a pod of the scenario's gang it never saw has none
    recorded = served.kilter.app.extender.log.explain("ml", "p")
    assert recorded is not None and recorded[0]["verb"] == "filter"
    code, text, _ = run(capsys, *args)
    assert code == 0 and "Recorded decisions" in text


def test_local_readings_show_no_recorded_decisions(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "-n", "llm", "llama-0", "--snapshot", str(served.snapshot), "-o", "json")
    assert code == 0 and "decisions" not in json.loads(out)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--platforms", "x.yaml"], "--platforms"),
        (["--spare-nodes-per-domain", "1"], "--spare-nodes-per-domain"),
        (["--health-signals", "x.yaml"], "--health-signals"),
        (["--snapshot", "x.json"], "--snapshot"),
    ],
)
def test_options_of_a_local_reading_are_refused_with_the_service(
    served: Served, capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    before = len(served.cluster.requests)
    code, out, err = run(capsys, "domains", "--kubeconfig", str(served.config), "--kilter-service", SERVICE, *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and said in err
    assert len(served.cluster.requests) == before


def test_refusals_by_the_api_server_are_one_line(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["queues", "--kubeconfig", str(served.config)]
    served.cluster.forbid_proxy = True
    try:
        code, _, err = run(capsys, *args, "--kilter-service", SERVICE)
    finally:
        served.cluster.forbid_proxy = False
    assert code == 2 and err.count("\n") == 1 and "403" in err
    assert 'cannot create resource "services/proxy"' in err and "create on services/proxy" in err
    code, _, err = run(capsys, *args, "--kilter-service", "kilter-system/absent:80")
    assert code == 2 and err.count("\n") == 1 and 'services "absent" not found' in err
    code, _, err = run(capsys, *args, "--kilter-service", "not a service")
    assert code == 2 and err.count("\n") == 1 and "NAMESPACE/NAME:PORT" in err


def test_kilter_refusing_the_api_server_says_to_trust_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = scenario.write(tmp_path / "cluster.json")
    guarded = listening(tmp_path, snapshot=snap, trusted_networks=("10.0.0.0/8",))
    with guarded as kilter, ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        cluster.services[("kilter-system", "kilter", "http")] = ("127.0.0.1", kilter.http_port)
        config = kubeconfig(tmp_path / "config", cluster.port, TOKEN)
        code, out, err = run(capsys, "queues", "--kubeconfig", str(config), "--kilter-service", SERVICE)
    said = [line for line in err.splitlines() if line.startswith("kubectl kilter")]  # the rest is uvicorn's log
    assert code == 2 and out == "" and len(said) == 1 and "--trusted-networks" in said[0]


def _post(port: int, body: bytes, *, method: str = "POST") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, "/debug/views", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def _request(argv: list[str], **more: Any) -> bytes:
    return json.dumps({"argv": argv, "namespace": None, **more}).encode()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{", "not a view request"),
        (b"[]", "not a view request"),
        (json.dumps({"argv": ["queues"], "extra": 1}).encode(), "extra"),
        (json.dumps({"argv": "queues"}).encode(), "argv"),
        (_request([]), "argv must hold"),
        (_request(["queues"] * 65), "argv must hold"),
        (_request(["nosuchview"]), "invalid choice"),
        (_request(["queues", "-o", "xml"]), "invalid choice"),
        (_request(["completion", "bash"]), "not a view kilter answers"),
        (_request(["--help"]), "printed by the plugin"),
        (_request(["domains", "-h"]), "printed by the plugin"),
        (_request(["--version"]), "printed by the plugin"),
        (_request(["domains", "--snapshot", "/etc/passwd"]), "--snapshot"),
        (_request(["domains", "--platforms", "/etc/passwd"]), "--platforms"),
        (_request(["plan", "-f", "/etc/passwd"]), "plan needs the manifest"),
        (_request(["plan", "-f", "x"], job="kind: [unclosed"), "not valid YAML"),
        (_request(["plan", "-f", "x"], job="a: 1\n---\nb: 2\n"), "exactly one job object"),
        (_request(["plan", "-f", "x"], job='{"a":' * 5000 + "1" + "}" * 5000), "nests deeper than"),
        (_request(["queues"], job="kind: Job"), "job is for plan"),
        (_request(["pending"], namespace="Not_A_Namespace"), "Not_A_Namespace"),
        (_request(["pending", "--now", "yesterday"]), "--now"),
    ],
)
def test_bad_requests_get_a_400_and_one_line(served: Served, body: bytes, said: str) -> None:
    status, answer = _post(served.kilter.http_port, body)
    assert status == 400 and said in answer.decode() and answer.decode().count("\n") == 1


def test_plan_reads_the_text_sent_never_the_path_named(served: Served) -> None:
    status, answer = _post(
        served.kilter.http_port, _request(["plan", "-f", "/no/such/file", "-o", "json"], job=JOB.read_text())
    )
    assert status == 200
    doc = json.loads(answer)
    assert doc["exit"] == 0 and json.loads(doc["output"])


def test_huge_bodies_and_other_methods_are_refused(served: Served) -> None:
    with socket.create_connection(("127.0.0.1", served.kilter.http_port), timeout=10) as sock:
        head = f"POST /debug/views HTTP/1.1\r\nHost: x\r\nContent-Length: {VIEWS_MAX_BODY_BYTES + 1}\r\n\r\n"
        sock.sendall(head.encode())  # announced: refused before a byte of it is read
        assert sock.recv(65536).startswith(b"HTTP/1.1 413")
    status, _ = _post(served.kilter.http_port, b"", method="GET")
    assert status == 405


def test_a_state_not_loaded_yet_is_a_503() -> None:
    views = ServedViews(ClusterStore(catalog=catalog_of(None)), None)
    status, body = views.answer(_request(["queues"]))
    assert status == 503 and b"not loaded" in body


@pytest.mark.parametrize("view", [["pending", "-A"], ["domains"], ["plan", "-f", str(JOB)]], ids=lambda v: v[0])
def test_kilter_url_asks_the_listener_directly(
    served: Served, capsys: pytest.CaptureFixture[str], view: list[str]
) -> None:
    tail = ["--now", scenario.NOW, "-o", "json"]
    local = run(capsys, *view, "--snapshot", str(served.snapshot), *tail)
    before = len(served.cluster.requests)
    direct = run(capsys, *view, "--kilter-url", f"http://127.0.0.1:{served.kilter.http_port}", *tail)
    assert direct == local and len(served.cluster.requests) == before  # no API server in between


def test_kilter_url_over_https_verifies_kilters_certificate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = scenario.write(tmp_path / "cluster.json")
    with listening(tmp_path, snapshot=snap, http_tls=True) as kilter:
        url = f"https://127.0.0.1:{kilter.http_port}"
        code, out, err = run(capsys, "queues", "--kilter-url", url, "--kilter-ca", str(kilter.certs / "ca.crt"))
        assert code == 0 and "ClusterQueue" in out, err
        code, out, err = run(capsys, "queues", "--kilter-url", url)  # the system's CAs do not know kilter's
    said = [line for line in err.splitlines() if line.startswith("kubectl kilter")]
    assert code == 2 and out == "" and len(said) == 1 and "CERTIFICATE_VERIFY_FAILED" in said[0]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--kilter-url", "ftp://127.0.0.1:1"], "must be http://HOST:PORT"),
        (["--kilter-url", "http://127.0.0.1:1/debug"], "must be http://HOST:PORT"),
        (["--kilter-url", "http://127.0.0.1:99999"], "bad port"),
        (["--kilter-url", "http://127.0.0.1:1", "--kilter-ca", "ca.crt"], "verifies an https://"),
        (["--kilter-url", "http://127.0.0.1:1", "--kilter-service", SERVICE], "one of --kilter-url"),
        (["--kilter-url", "http://127.0.0.1:1"], "cannot reach kilter"),
        (["--kilter-url", "http://127.0.0.1:1", "--platforms", "x.yaml"], "--platforms"),
    ],
)
def test_bad_kilter_urls_are_one_line(capsys: pytest.CaptureFixture[str], extra: list[str], said: str) -> None:
    code, out, err = run(capsys, "queues", *extra)
    assert code == 2 and out == "" and err.count("\n") == 1 and said in err
