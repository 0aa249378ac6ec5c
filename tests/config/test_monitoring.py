"""config/components/monitoring: every series the dashboard and the alerts read is one a running kilter serves.

A real ``kilter serve`` process (live cluster from the list/watch test server, TLS listeners, the AdmissionCheck
controller, a Configuration file) is scraped over HTTP; each metric name in a dashboard target or an alert
expression must be there with the type its name implies (``_total``: a counter; ``_bucket``/``_count``/``_sum``: a
histogram; otherwise a gauge), and each label it groups by must be one of its series'. The alerts' runbooks are
sections of docs/operations.md; the ServiceMonitor scrapes the Service that selects kilter's pods.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kilter.model.durations import parse_duration
from tests.config.yamldocs import COMPONENTS, ROOT, Obj, component, documents, one, overlay
from tests.extenders.conftest import make_certificates, names_args, pod_json
from tests.listwatch import ListWatchServer
from tests.live_mode import RESOURCES, kubeconfig
from tests.local_http import free_port, get_text
from tests.topology.builders import CLIQUE, node_dict

MONITORING = COMPONENTS / "monitoring"
OPERATIONS = ROOT / "docs" / "operations.md"
TOKEN = "monitoring"
PROMETHEUS_OWN = {"up"}  # series Prometheus makes itself
NAME = re.compile(r"\b(kilter_[a-z0-9_]+|up)\b")
GROUPED = re.compile(r"\bby \(([^)]*)\)")


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "dashboard.json").read_text(encoding="utf-8"))
    return data


def _alerts() -> list[Obj]:
    rule = one(documents(MONITORING / "alerts.yaml"), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _expressions() -> list[tuple[str, str]]:
    """(where, PromQL) of every dashboard target and alert."""
    out = [(f"panel {p['title']!r}", t["expr"]) for p in _dashboard()["panels"] for t in p["targets"]]
    out += [(f"alert {r['alert']}", r["expr"]) for r in _alerts()]
    out += [("variable job", v["query"]) for v in _dashboard()["templating"]["list"] if v["type"] == "query"]
    return out


def _post(port: int, path: str, body: Obj) -> None:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """name -> (type, label names seen) of every family a busy ``kilter serve`` exposes."""
    tmp = tmp_path_factory.mktemp("monitoring")
    cert, key, _ = make_certificates(tmp)
    config = tmp / "config.yaml"
    config.write_text((COMPONENTS / "scheduler-extender" / "kilter-config.yaml").read_text(encoding="utf-8"))
    with ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        for t in range(4):
            cluster.add(node_dict(f"r1-t{t}", labels={CLIQUE: "r1"}))
        http = free_port()
        argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(config)]
        argv += ["--kubeconfig", str(kubeconfig(tmp / "kubeconfig", cluster.port, TOKEN))]
        argv += ["--address", "127.0.0.1", "--http-port", str(http), "--webhook-port", str(free_port())]
        argv += ["--grpc-port", "0", "--tls-cert-file", str(cert), "--tls-key-file", str(key), "--log-format", "json"]
        env = {**os.environ, "MPLCONFIGDIR": str(tmp / "mpl")}
        server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            deadline = time.monotonic() + 60
            while '"ready": true' not in get_text(http, "/readyz").replace('"ready":true', '"ready": true'):
                assert server.poll() is None, server.communicate()[0]
                assert time.monotonic() < deadline, "kilter serve did not become ready"
                time.sleep(0.1)
            names = [f"r1-t{t}" for t in range(4)]
            _post(http, "/scheduler/filter", names_args(pod_json("p", 4), names))  # a verb answered
            applied = _events_applied(get_text(http, "/metrics"))
            cluster.add(node_dict("r1-t4", labels={CLIQUE: "r1"}))  # a watch event applied
            text = get_text(http, "/metrics")
            while _events_applied(text) <= applied:
                assert time.monotonic() < deadline, "the watch event was not applied"
                time.sleep(0.05)
                text = get_text(http, "/metrics")
        finally:
            server.terminate()
            output = server.communicate(timeout=30)[0]
    families: dict[str, Any] = {"output": ("log", output)}
    for family in text_string_to_metric_families(text):
        labels = {k for s in family.samples for k in s.labels}
        families[family.name] = (family.type, labels)
    yield families


def _events_applied(text: str) -> float:
    """How many lists and watch event batches the store has applied (the lag histogram's count)."""
    for family in text_string_to_metric_families(text):
        if family.name == "kilter_state_event_lag_seconds":
            return sum(s.value for s in family.samples if s.name.endswith("_count"))
    return 0.0


def _family(name: str) -> tuple[str, str]:
    """(family name, the type the series name implies)."""
    for suffix in ("_bucket", "_count", "_sum"):
        if name.endswith(suffix):
            return name.removesuffix(suffix), "histogram"
    if name.endswith("_total"):
        return name.removesuffix("_total"), "counter"
    return name, "gauge"


def test_every_series_the_dashboard_and_alerts_read_is_served_with_its_type(scraped: dict[str, Any]) -> None:
    checked = 0
    for where, expr in _expressions():
        for name in set(NAME.findall(expr)) - PROMETHEUS_OWN:
            family, kind = _family(name)
            assert family in scraped, f"{where}: {name} is not among kilter serve's metrics"
            assert scraped[family][0] == kind, f"{where}: {name} is a {scraped[family][0]}, read as a {kind}"
            checked += 1
    assert checked >= 25


def test_every_label_grouped_by_is_a_label_of_the_series(scraped: dict[str, Any]) -> None:
    for where, expr in _expressions():
        names = [_family(n)[0] for n in set(NAME.findall(expr)) - PROMETHEUS_OWN]
        seen = set().union(*(scraped[n][1] for n in names)) | {"le", "job"}
        for group in GROUPED.findall(expr):
            for label in (g.strip() for g in group.split(",")):
                assert label in seen or not any(scraped[n][1] for n in names), f"{where}: no series has {label!r}"


def test_the_scrape_holds_what_the_live_pod_shows(scraped: dict[str, Any]) -> None:
    for family in (
        "kilter_state_event_lag_seconds",
        "kilter_leader",
        "kilter_certificate_expiry_timestamp_seconds",
        "kilter_admission_check_decisions",
        "kilter_config_restart_pending",
        "kilter_gang_plans",
    ):
        assert family in scraped, family
    assert "verb" in scraped["kilter_extender_request_duration_seconds"][1]


def test_every_alert_has_a_runbook_a_severity_and_a_duration() -> None:
    text = OPERATIONS.read_text(encoding="utf-8")
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", text, re.M)}
    for rule in _alerts():
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert parse_duration(rule["for"], path=rule["alert"]) > 0
        url = rule["annotations"]["runbook_url"]
        assert url.endswith(f"docs/operations.md#{rule['alert'].lower()}"), rule["alert"]
        assert rule["alert"].lower() in anchors, f"docs/operations.md has no section {rule['alert']}"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_the_dashboard_is_a_grafana_dashboard_of_kilters_panels() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] == "kilter-overview" and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
        assert all('job=~"$job"' in t["expr"] for t in panel["targets"]), panel["title"]


def test_the_service_monitor_scrapes_kilters_pods(tmp_path: Path) -> None:
    built = overlay("monitoring")
    service = one(built, "Service", "kilter-metrics")
    monitor = one(built, "ServiceMonitor", "kilter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    deployment = one(built, "Deployment", "kilter-scheduler")
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    kilter = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kilter")
    assert ports["metrics"]["targetPort"] in {p["containerPort"] for p in kilter["ports"]}
    policy = one(built, "NetworkPolicy", "kilter-scheduler")
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule.get("ports", [])}
    assert ports["metrics"]["targetPort"] in opened, "the NetworkPolicy lets Prometheus scrape"
    dashboards = [d for d in built if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "kilter-dashboard"]
    assert len(dashboards) == 1 and dashboards[0]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboards[0]["data"]["kilter.json"]) == _dashboard()
    assert yaml.safe_load(yaml.safe_dump(component("monitoring")))  # the component's own files load


def test_the_pods_log_is_one_json_object_a_line(scraped: dict[str, Any]) -> None:
    lines = [line for line in scraped["output"][1].splitlines() if line.strip()]
    assert lines, "kilter serve logged its start"
    events = [json.loads(line) for line in lines]  # every line, uvicorn's included
    assert all({"time", "level", "logger", "message"} <= e.keys() for e in events)
    assert any(e["logger"].startswith("uvicorn") for e in events)
