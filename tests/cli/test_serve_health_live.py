"""``kilter serve --kubeconfig --health-signals``: a node that gains a health signal in the cluster is avoided by the
next plan, with its reason in the fleet, as soon as the watch shows it."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

from kilter.cli.serve import build_app
from kilter.state.store import ClusterStore
from tests.extenders.conftest import _Server, names_args, pod_json, serve_config
from tests.listwatch import NODES, PODS, ListWatchServer
from tests.live_mode import kubeconfig
from tests.topology.builders import CLIQUE, node_dict

TOKEN = "serve-health"
NAMES = [f"r1-t{t}" for t in range(4)]


def _post(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, json.dumps(body).encode())
        answer: dict[str, Any] = json.loads(conn.getresponse().read())
        return answer
    finally:
        conn.close()


def _ready(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    finally:
        conn.close()


def _wait(what: str, done: Any) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _reasons(store: ClusterStore) -> dict[str, str]:
    return store.fleet().unusable


def test_a_node_that_gains_a_health_signal_is_left_out_of_the_next_plan(tmp_path: Path) -> None:
    signals = tmp_path / "signals.yaml"
    signals.write_text("defaults: true\nsignals:\n  - taint: example.com/gpu-fault\n    source: site checker\n")
    with ListWatchServer([PODS, NODES], token=TOKEN) as cluster:
        for name in NAMES:
            cluster.add(node_dict(name, labels={CLIQUE: "r1"}))
        config = serve_config(
            None, kubeconfig=kubeconfig(tmp_path / "kubeconfig", cluster.port, TOKEN), health_signals=signals
        )
        app, store = build_app(config)
        with _Server(app, None) as port:
            _wait("the first list", lambda: _ready(port))
            before = _post(port, "/scheduler/filter", names_args(pod_json("single", 4), NAMES))
            assert sorted(before["NodeNames"]) == NAMES

            nvlink = node_dict("r1-t1", labels={CLIQUE: "r1"})
            nvlink["status"]["conditions"].append({"type": "GpuNvlinkWatch", "status": "True", "reason": "Fatal"})
            cluster.update(nvlink)
            # PreferNoSchedule: kube-scheduler would still place here, so only the configured signal keeps pods off.
            faulty = node_dict(
                "r1-t2",
                labels={CLIQUE: "r1"},
                taints=[{"key": "example.com/gpu-fault", "value": "ecc", "effect": "PreferNoSchedule"}],
            )
            cluster.update(faulty)
            _wait("both changes", lambda: len(_reasons(store)) == 2)
            assert _reasons(store) == {
                "r1-t1": "condition GpuNvlinkWatch=True (NVSentinel)",
                "r1-t2": "taint example.com/gpu-fault=ecc:PreferNoSchedule (site checker)",
            }

            gang = pod_json("g-0", 4, labels={"kilter.dev/gang": "trainer", "kilter.dev/gang-size": "2"})
            planned = _post(port, "/scheduler/filter", names_args(gang, NAMES))
            assert sorted(planned["NodeNames"]) == ["r1-t0", "r1-t3"]
            assert {"r1-t1", "r1-t2"} <= set(planned["FailedAndUnresolvableNodes"])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/debug/explain?namespace=ml&pod=g-0")
            (filtered,) = json.loads(conn.getresponse().read())["decisions"]
            conn.close()
            reasons = {n["node"]: n["reason"] for n in filtered["nodes"]}
            assert reasons["r1-t1"] == "the node is unusable: condition GpuNvlinkWatch=True (NVSentinel)"
            assert (
                reasons["r1-t2"]
                == "the node is unusable: taint example.com/gpu-fault=ecc:PreferNoSchedule (site checker)"
            )

            healed = node_dict("r1-t1", labels={CLIQUE: "r1"})
            healed["status"]["conditions"].append({"type": "GpuNvlinkWatch", "status": "False", "reason": "Healthy"})
            cluster.update(healed)
            _wait("the repair", lambda: "r1-t1" not in _reasons(store))
            after = _post(port, "/scheduler/filter", names_args(pod_json("single-2", 4), NAMES))
            assert after["NodeNames"] == ["r1-t1"]  # healed; r1-t0 and r1-t3 are the gang's, r1-t2 still faulty
