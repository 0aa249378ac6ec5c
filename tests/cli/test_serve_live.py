"""``kilter serve --kubeconfig`` without a snapshot: the state comes from list/watch, and readiness waits for it."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

from kilter.cli.serve import build_app
from tests.extenders.conftest import _Server, names_args, pod_json, serve_config
from tests.listwatch import NODES, PODS, ListWatchServer
from tests.live_mode import kubeconfig
from tests.topology.builders import CLIQUE, node_dict

TOKEN = "serve-live"


def test_the_extender_serves_what_the_cluster_shows_once_every_resource_is_listed(tmp_path: Path) -> None:
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        for t in range(4):
            cluster.add(node_dict(f"r1-t{t}", labels={CLIQUE: "r1"}))
        cluster.delay_s = 0.3
        args = serve_config(None, kubeconfig=kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN))
        app, store = build_app(args)
        with _Server(app, None) as port:

            def get(path: str) -> tuple[int, bytes]:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                try:
                    conn.request("GET", path)
                    response = conn.getresponse()
                    return response.status, response.read()
                finally:
                    conn.close()

            status, body = get("/readyz")
            assert status == 503 and json.loads(body)["ready"] is False
            deadline = time.monotonic() + 10
            while get("/readyz")[0] != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            status, body = get("/readyz")
            report = json.loads(body)
            assert status == 200 and report["resources"]["nodes"]["synced"]
            assert report["resources"]["clusterqueues.kueue.x-k8s.io"]["state"] == "absent"
            cluster.add(node_dict("r1-t4", labels={CLIQUE: "r1"}))
            deadline = time.monotonic() + 10
            while store.node_named("r1-t4") is None and time.monotonic() < deadline:
                time.sleep(0.02)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            names = [f"r1-t{t}" for t in range(5)]
            conn.request("POST", "/scheduler/filter", json.dumps(names_args(pod_json("p", 4), names)).encode())
            answer = json.loads(conn.getresponse().read())
            conn.close()
            assert answer["Error"] == "" and sorted(answer["NodeNames"]) == names
