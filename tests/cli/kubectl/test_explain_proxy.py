"""``explain --kilter-service`` reads a real ``kilter serve``'s ``/debug/explain`` through the API server's service
proxy (the list/watch test server's ``services/NAME:PORT/proxy`` route), and says in one line when RBAC or a
missing Service stops it."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from tests.cli.listening import listening
from tests.extenders.conftest import cluster_objects, names_args, pod_json
from tests.listwatch import ListWatchServer
from tests.live_mode import RESOURCES, kubeconfig

TOKEN = "explain"
SERVICE = "kilter-system/kilter:http"


def _filter(port: int, pod: dict[str, Any], nodes: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/scheduler/filter", json.dumps(names_args(pod, nodes)), {"Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()


def test_explain_shows_kilters_recorded_decisions_through_the_service_proxy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = pod_json("p", 4)
    with listening(tmp_path) as kilter, ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        _filter(kilter.http_port, pod, ["r1-t00", "r2-t00"])
        for obj in [*cluster_objects(), pod]:
            cluster.add(obj)
        cluster.services[("kilter-system", "kilter", "http")] = ("127.0.0.1", kilter.http_port)
        config = kubeconfig(tmp_path / "config", cluster.port, TOKEN)
        args = ["explain", "-n", "ml", "p", "--kubeconfig", str(config), "--kilter-service", SERVICE]
        code = kubectl_main([*args, "-o", "json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        entry = json.loads(out)["decisions"][0]
        assert entry["pod"] == "p" and entry["decisions"][0]["verb"] == "filter"
        assert [n["node"] for n in entry["decisions"][0]["nodes"]] == ["r1-t00", "r2-t00"]
        proxied = [r.path for r in cluster.requests if "/proxy/" in r.path]
        assert proxied == ["/api/v1/namespaces/kilter-system/services/kilter:http/proxy/debug/explain"]

        assert kubectl_main(args) == 0
        assert "Recorded decisions" in capsys.readouterr().out

        cluster.forbid_proxy = True
        assert kubectl_main(args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "services/proxy" in err and "403" in err
        cluster.forbid_proxy = False

        missing = ["explain", "-n", "ml", "p", "--kubeconfig", str(config), "--kilter-service", "kilter-system/x:80"]
        assert kubectl_main(missing) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and 'services "x" not found' in err


def test_kilter_service_needs_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [*cluster_objects(), pod_json("p", 4)]}))
    assert kubectl_main(["explain", "-n", "ml", "p", "--snapshot", str(snap), "--kilter-service", SERVICE]) == 2
    assert capsys.readouterr().err.count("\n") == 1
