"""Asking a running kilter for a view: through the API server's service proxy (``--kilter-service``), or directly
(``--kilter-url``: a ``kilter serve --snapshot`` of one's own, or ``kubectl port-forward``).

A running kilter already holds the cluster's state (its list/watch cache)
and the decisions it recorded; asking it costs one request, where reading
the cluster costs a list of every Node and Pod (on a 150,000-pod cluster,
seconds and a heavy load on the API server). The request goes to
``POST /api/v1/namespaces/NS/services/[https:]NAME:PORT/proxy/debug/views``
with the kubeconfig's credentials: the API server authorizes it as the verb
``create`` on the subresource ``services/proxy`` of that one Service
(``config/components/volcano/explain-reader.yaml``). kilter answers ``/debug/*`` only
to trusted peers (``--trusted-networks``); through the proxy its peer is the
API server, so a 403 from kilter says to trust the API server's address. A
403 or 404 from the API server itself (RBAC, no such Service) is a Status
object, said as the API server's.

The request is the view's own command line, the namespace the plugin
resolved from the kubeconfig (kilter cannot know the caller's context), and,
for ``plan -f``, the manifest's text: kilter never opens a path the caller
names. kilter runs the very view function the plugin would and answers its
exit code, text and error line (``served``), as kube-apiserver answers
``kubectl get`` with a server-side Table.
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kilter.cli.kubectl import source
from kilter.cli.kubectl.output import Answer
from kilter.kube.api import ApiError, ApiServer, check_namespace
from kilter.model.errors import InputError, KilterError
from kilter.state import snapshot

__all__ = [
    "LOCAL_ONLY",
    "PATH",
    "Service",
    "answer",
    "ask",
    "ask_url",
    "asked",
    "local_only",
    "parse_service",
    "proxy_path",
    "request_of",
]

PATH = "/debug/views"
Service = tuple[str, str, str, str]  # (namespace, scheme or "", name, port)
_SERVICE = re.compile(r"^([a-z0-9-]+)/(?:(https?):)?([a-z0-9]([-a-z0-9]*[a-z0-9])?):([A-Za-z0-9-]{1,15})$")
# Options that shape a reading the plugin makes itself; a running kilter uses its own (kilter serve's flags).
LOCAL_ONLY: dict[str, tuple[str, object]] = {  # dest: (flag, its default)
    "snapshot": ("--snapshot", None),
    "demo": ("--demo", False),
    "platforms": ("--platforms", None),
    "health_signals": ("--health-signals", None),
    "spare_nodes_per_domain": ("--spare-nodes-per-domain", "0"),
}


def local_only(args: argparse.Namespace) -> str | None:
    """The first option given that only a reading by the plugin itself can honour, None if none is."""
    return next((flag for dest, (flag, unset) in LOCAL_ONLY.items() if getattr(args, dest, unset) != unset), None)


def parse_service(text: str) -> Service:
    """``NS/NAME:PORT`` or ``NS/https:NAME:PORT`` (the port a number or a port name)."""
    m = _SERVICE.match(text)
    if m is None:
        raise InputError(f"--kilter-service {text[:100]!r} must be NAMESPACE/NAME:PORT (or NAMESPACE/https:NAME:PORT)")
    return check_namespace(m.group(1)), m.group(2) or "", m.group(3), m.group(5)


def proxy_path(service: Service) -> str:
    ns, scheme, name, port = service
    return f"/api/v1/namespaces/{ns}/services/{scheme + ':' if scheme else ''}{name}:{port}/proxy{PATH}"


def request_of(args: argparse.Namespace, argv: Sequence[str], namespace: str | None) -> dict[str, Any]:
    """The request for kilter: the command line as typed, the namespace (None: every one), the manifest's text."""
    flag = local_only(args)
    if flag is not None:
        raise InputError(f"{flag} shapes the plugin's own reading: a kilter asked for the view uses its own")
    job = snapshot.read_text(args.filename) if getattr(args, "filename", None) is not None else None
    return {"argv": list(argv), "namespace": namespace, "job": job}


def _status_message(raw: bytes) -> str | None:
    """The message of a Kubernetes Status object (the API server's own refusal), None for anything else."""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, dict) and doc.get("kind") == "Status":
        return str(doc.get("message") or "")
    return None


def ask(api: ApiServer, service: Service, request: dict[str, Any]) -> Answer:
    """kilter's answer to the view ``request``; the API server's or kilter's refusal as a one-line error."""
    status, raw, _ = api.request("POST", proxy_path(service), json.dumps(request).encode())
    message = _status_message(raw) if status != 200 else None
    if message is not None:
        hint = "; the plugin needs create on services/proxy (config/components/volcano/explain-reader.yaml)"
        raise ApiError(status, message + (hint if status == 403 else ""))
    untrusted = "through the service proxy the caller is the API server; add the API server's address to"
    return _answer_of(status, raw, untrusted)


def ask_url(url: str, ca: Path | None, request: dict[str, Any], *, timeout_s: float = 60.0) -> Answer:
    """kilter's answer to the view ``request``, asked of its HTTP listener at ``url`` directly: ``kilter serve
    --snapshot F`` on this machine, or kilter's pod through ``kubectl port-forward`` (which arrives on its
    loopback, trusted by default)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") or parts.query:
        raise InputError(f"--kilter-url {url[:100]!r} must be http://HOST:PORT or https://HOST:PORT")
    if ca is not None and parts.scheme != "https":
        raise InputError("--kilter-ca verifies an https:// --kilter-url")
    try:
        port = parts.port
    except ValueError:
        raise InputError(f"--kilter-url {url[:100]!r} has a bad port") from None
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        try:
            context = ssl.create_default_context(cafile=str(ca) if ca is not None else None)
        except (OSError, ssl.SSLError) as exc:
            raise InputError(f"--kilter-ca {ca}: {exc}") from None
        conn = http.client.HTTPSConnection(parts.hostname, port, timeout=timeout_s, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, port, timeout=timeout_s)
    try:
        conn.request("POST", PATH, json.dumps(request).encode(), {"Content-Type": "application/json"})
        response = conn.getresponse()
        status, raw = response.status, response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise KilterError(f"cannot reach kilter at {url}: {exc}") from None
    finally:
        conn.close()
    return _answer_of(status, raw, "it sees this plugin's address; add it to")


def _answer_of(status: int, raw: bytes, untrusted: str) -> Answer:
    """A 200's view answer, or kilter's refusal as one line (``untrusted`` says who kilter saw on a 403)."""
    text = raw[:300].decode("utf-8", "replace").strip()
    if status == 200:
        try:
            doc = json.loads(raw)
            return Answer(int(doc["exit"]), str(doc["output"]), str(doc.get("error") or ""))
        except (ValueError, RecursionError, KeyError, TypeError):
            raise KilterError(f"kilter's answer to {PATH} is not a view's: {text[:160]}") from None
    if status == 400:
        raise InputError(text)
    if status == 403:
        raise KilterError(
            f"kilter refused {PATH} (403): it answers /debug only to --trusted-networks, and {untrusted} kilter's "
            f"--trusted-networks ({text})"
        )
    if status == 404:
        raise KilterError(f"kilter does not serve {PATH} (404): it is older than this plugin ({text[:160]})")
    raise KilterError(f"kilter answered {status} to {PATH}: {text[:200]}")


def answer(args: argparse.Namespace, argv: Sequence[str]) -> Answer:
    """The view ``args`` names, answered by the kilter of ``--kilter-url`` or of ``--kilter-service``."""
    if args.kilter_url:
        if args.kilter_service:
            raise InputError("give one of --kilter-url and --kilter-service")
        request = request_of(args, argv, source.namespace_of(args, source.resolve_kubeconfig(args.kubeconfig)))
        return ask_url(args.kilter_url, args.kilter_ca, request)
    service_text = source.kilter_service(args)
    assert service_text is not None
    service = parse_service(service_text)
    kubeconfig = source.resolve_kubeconfig(args.kubeconfig)
    request = request_of(args, argv, source.namespace_of(args, kubeconfig))  # refuses --snapshot before connecting
    api, _ = source.connect_to(args)
    return ask(api, service, request)


def asked(args: argparse.Namespace) -> bool:
    """Whether a running kilter answers the view (``--kilter-url``, ``--kilter-service`` or its variable)."""
    return bool(args.kilter_url) or source.kilter_service(args) is not None
