"""kilter's recorded decisions about pods, read from ``/debug/explain`` through the API server's service proxy.

The path is the API server's own proxy subresource of a Service:
``/api/v1/namespaces/NS/services/[https:]NAME:PORT/proxy/debug/explain``, called
with the kubeconfig's credentials. That needs RBAC ``get`` on
``services/proxy`` for kilter's Service in its namespace
(``manifests/rbac/explain-reader.yaml``). kilter answers ``/debug/*`` only to
trusted peers (``--trusted-networks``); through the proxy its peer is the API
server, so the API server's address must be trusted, and a 403 from kilter is
said as such in one line. A 403 or 404 from the API server itself (RBAC, no
such Service) is a Status object and is said as the API server's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from kilter.cli import render
from kilter.cli.kubectl.source import Cluster
from kilter.kube.api import ApiError, check_namespace
from kilter.model.core_v1 import Pod
from kilter.model.errors import InputError, KilterError

__all__ = ["MAX_PODS", "Service", "decisions", "parse_service", "proxy_path", "render_decisions"]

MAX_PODS = 8  # pods asked about per explain: a gang's first few tell its story; each is one proxied request
Service = tuple[str, str, str, str]  # (namespace, scheme or "", name, port)
_SERVICE = re.compile(r"^([a-z0-9-]+)/(?:(https?):)?([a-z0-9]([-a-z0-9]*[a-z0-9])?):([A-Za-z0-9-]{1,15})$")


def parse_service(text: str) -> Service:
    """``NS/NAME:PORT`` or ``NS/https:NAME:PORT`` (the port a number or a port name)."""
    m = _SERVICE.match(text)
    if m is None:
        raise InputError(f"--kilter-service {text[:100]!r} must be NAMESPACE/NAME:PORT (or NAMESPACE/https:NAME:PORT)")
    return check_namespace(m.group(1)), m.group(2) or "", m.group(3), m.group(5)


def proxy_path(service: Service, namespace: str, pod: str) -> str:
    ns, scheme, name, port = service
    target = f"{scheme + ':' if scheme else ''}{name}:{port}"
    query = urlencode({"namespace": namespace, "pod": pod})
    return f"/api/v1/namespaces/{ns}/services/{target}/proxy/debug/explain?{query}"


def _is_status(raw: bytes) -> bool:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("kind") == "Status"


def _one(cluster: Cluster, service: Service, pod: Pod) -> dict[str, Any]:
    assert cluster.api is not None
    ns, name = pod.metadata.namespace, pod.metadata.name
    status, raw, _ = cluster.api.request("GET", proxy_path(service, ns, name))
    if status == 200:
        body = json.loads(raw)
        return {"pod": name, "decisions": body.get("decisions") or []}
    if _is_status(raw):
        message = json.loads(raw).get("message") or ""
        hint = "; the plugin needs get on services/proxy (manifests/rbac/explain-reader.yaml)" if status == 403 else ""
        raise ApiError(status, f"{message}{hint}")
    if status == 404:
        return {"pod": name, "decisions": [], "note": "kilter recorded no decision about this pod"}
    if status == 403:
        raise KilterError(
            f"kilter refused /debug/explain (403): it answers /debug only to --trusted-networks, and through the "
            f"service proxy the caller is the API server; add the API server's address to kilter's "
            f"--trusted-networks ({raw[:160].decode('utf-8', 'replace').strip()})"
        )
    raise KilterError(f"kilter answered {status} to /debug/explain: {raw[:200].decode('utf-8', 'replace').strip()}")


def decisions(cluster: Cluster, service: Service, pods: Sequence[Pod]) -> list[dict[str, Any]]:
    """kilter's records for the first ``MAX_PODS`` pods by name; the rest are counted in a last entry."""
    ordered = sorted(pods, key=lambda p: p.metadata.name)
    out = [_one(cluster, service, p) for p in ordered[:MAX_PODS]]
    if len(ordered) > MAX_PODS:
        out.append({"pod": None, "decisions": [], "note": f"{len(ordered) - MAX_PODS} more pods not asked about"})
    return out


def render_decisions(entries: list[dict[str, Any]]) -> str:
    rows = []
    for e in entries:
        if not e["decisions"]:
            rows.append((e["pod"] or "...", "-", "-", e.get("note", "")))
        for d in e["decisions"]:
            rows.append((e["pod"], d.get("verb", ""), d.get("time", ""), d.get("summary", "")))
    return "Recorded decisions (kilter /debug/explain):\n" + render.table(("POD", "VERB", "TIME", "SUMMARY"), rows)
