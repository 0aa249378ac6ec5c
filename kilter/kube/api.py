"""A connection to a cluster's API server: where it is, how to authenticate, how to make one call.

Credentials come from a kubeconfig (the ``kubernetes`` package reads it, so
exec plugins, client certificates and tokens all work) or from the pod's
service account when running in the cluster. Calls are plain HTTP/1.1 with
JSON bodies (lists of Pods and Nodes may come back as protobuf), one
connection each, so they can run on any worker thread; list pages reuse their
thread's connection (``keep_alive``). The live list/watch feeder builds on the same connection.

Paths to objects are built by ``object_path`` alone: every namespace and
name that goes into a URL is checked as kube-apiserver checks it (a
namespace is a DNS-1123 label, an object's name a DNS-1123 subdomain) and
then escaped whole (``quote(x, safe="")``). A name comes from a request or
an object a tenant wrote; unchecked, ``a/../../../apis/foo`` would walk the
path to another resource with kilter's credentials.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from kilter import __version__
from kilter.kube.protobuf import is_protobuf, status_message
from kilter.model.errors import InputError, KilterError

__all__ = [
    "CERTS_AGENT",
    "CLI_AGENT",
    "MERGE_PATCH",
    "PLUGIN_AGENT",
    "SERVER_AGENT",
    "ApiError",
    "ApiServer",
    "check_name",
    "check_namespace",
    "connect",
    "object_path",
]

SERVER_AGENT = f"kilter/{__version__}"
"""The User-Agent of ``kilter serve``, which runs as kilter's own ServiceAccount."""
CLI_AGENT = f"kilter-cli/{__version__}"
"""The User-Agent of ``kilter plan``, ``queues`` and ``admission-check`` reading a cluster as their user."""
CERTS_AGENT = f"kilter-certs/{__version__}"
"""The User-Agent of ``kilter certs``, which runs as an account of its own (config/components/self-signed)."""
PLUGIN_AGENT = f"kubectl-kilter/{__version__}"
"""The User-Agent of ``kubectl kilter``, which calls as the user of the kubeconfig."""

MERGE_PATCH = "application/merge-patch+json"
"""The content type of a JSON merge patch (RFC 7386), what kilter's metadata and label patches are."""


class ApiError(KilterError):
    """The API server refused a call; ``code`` is its HTTP status, the message its Status message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(
            f"cannot reach the API server: {message}" if code == 0 else f"API server answered {code}: {message}"
        )
        self.code = code


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_namespace(value: str, *, what: str = "namespace") -> str:
    """``value`` if it is a valid namespace name (a DNS-1123 label, as ``ValidateNamespaceName``); else InputError."""
    if len(value) > 63 or not _DNS1123_LABEL.fullmatch(value):
        raise InputError(f"{what} {value[:100]!r} is not a DNS-1123 label (a-z, 0-9 and '-', at most 63)")
    return value


def check_name(value: str, *, what: str = "name") -> str:
    """``value`` if it is a valid object name (a DNS-1123 subdomain: Pods, Nodes, Events, custom resources); else
    InputError."""
    if len(value) > 253 or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise InputError(f"{what} {value[:100]!r} is not a DNS-1123 subdomain (a-z, 0-9, '-' and '.', at most 253)")
    return value


def object_path(api: str, plural: str, name: str = "", *, namespace: str | None = None, subresource: str = "") -> str:
    """The URL path of an object (or, without ``name``, of its collection): ``api`` is ``/api/v1`` or
    ``/apis/GROUP/VERSION``, kilter's own constant; namespace and name are checked, then escaped.

    InputError when either is not what the API server would accept: such an
    object cannot exist, and its text must not reach a URL.
    """
    parts = [api]
    if namespace is not None:
        parts += ["namespaces", quote(check_namespace(namespace), safe="")]
    parts.append(plural)
    if name:
        parts.append(quote(check_name(name), safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


@dataclass(frozen=True)
class ApiServer:
    scheme: str
    host: str
    port: int
    headers: dict[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    timeout_s: float = 10.0
    user_agent: str = SERVER_AGENT
    """Who calls, as the apiserver's audit log and tests/config's RBAC proof see it (``kilter/<version>`` for
    ``kilter serve``; the commands people run with their own credentials say so)."""
    _kept: threading.local = field(default_factory=threading.local, compare=False, repr=False)

    def apply(self, path: str, body: Any, *, field_manager: str) -> Any:
        """Server-side apply (``PATCH`` as ``application/apply-patch+yaml``; JSON is YAML), taking ownership."""
        query = urlencode({"fieldManager": field_manager, "force": "true"})
        return self.call("PATCH", f"{path}?{query}", body, content_type="application/apply-patch+yaml")

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def stream(self, path: str, *, timeout_s: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """A GET whose answer is read as it arrives (a watch); the caller closes the connection.

        A refusal (any status but 200) raises ApiError with the server's message.
        """
        conn = self._connection(timeout_s)
        try:
            conn.request(
                "GET", path, None, {"User-Agent": self.user_agent, **self.headers, "Accept": "application/json"}
            )
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiError(0, f"GET {self.url}{path}: {exc}") from None
        if response.status != 200:
            raw = response.read()
            conn.close()
            raise ApiError(response.status, _message(raw))
        return conn, response

    def _connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, context=self.tls, timeout=timeout_s)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)

    @contextlib.contextmanager
    def keep_alive(self) -> Iterator[None]:
        """This thread's calls share one connection until the block ends (a list's pages).

        No TCP and TLS handshake per page; a kept connection the server has
        closed meanwhile is replaced, once, by a fresh one (the calls are GETs).
        """
        self._kept.on = True
        try:
            yield
        finally:
            self._kept.on = False
            conn = getattr(self._kept, "conn", None)
            self._kept.conn = None
            if conn is not None:
                conn.close()

    def call_raw(self, method: str, path: str, *, accept: str = "application/json") -> tuple[bytes, str]:
        """One bodiless request; the answer's bytes undecoded and their Content-Type.

        Large lists are decoded by the caller's types; ``accept`` may ask for
        Kubernetes protobuf, which the server sends only where it has it.
        """
        status, raw, content_type = self._send(method, path, None, "", accept)
        if status != 200:
            raise ApiError(status, _message(raw, content_type))
        return raw, content_type

    def request(
        self, method: str, path: str, body: bytes | None = None, *, accept: str = "application/json"
    ) -> tuple[int, bytes, str]:
        """One request (a JSON ``body``, if any) answered whatever its status: (status, body, Content-Type). For
        answers that are not the API server's own (a service reached through its proxy), whose errors the caller
        reads itself."""
        return self._send(method, path, body, "application/json" if body is not None else "", accept)

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> Any:
        """One request; the decoded JSON answer, or ApiError carrying the server's own message."""
        data = None if body is None else json.dumps(body).encode()
        status, raw, answered = self._send(method, path, data, content_type)
        if not 200 <= status < 300:
            raise ApiError(status, _message(raw, answered))
        try:
            return json.loads(raw) if raw else None
        except (ValueError, RecursionError):
            return None

    def _send(
        self, method: str, path: str, data: bytes | None, content_type: str, accept: str = "application/json"
    ) -> tuple[int, bytes, str]:
        """One request: the status, the whole answer and its Content-Type.

        Each request has a connection of its own, but within ``keep_alive``
        the thread's kept one; a GET whose kept connection the server has
        closed meanwhile goes again, once, on a fresh one.
        """
        keep = getattr(self._kept, "on", False)
        conn: http.client.HTTPConnection | None = getattr(self._kept, "conn", None)
        self._kept.conn = None
        headers = {"User-Agent": self.user_agent, **self.headers, "Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        while True:
            reused = conn is not None
            if conn is None:
                conn = self._connection(self.timeout_s)
            try:
                conn.request(method, path, data, headers)
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                conn = None
                if reused and method == "GET":
                    continue  # the kept connection had gone stale
                raise ApiError(0, f"{method} {self.url}{path}: {exc}") from None
            if keep and not response.will_close:
                self._kept.conn = conn
            else:
                conn.close()
            return response.status, raw, response.getheader("Content-Type") or ""


def _message(raw: bytes, content_type: str = "application/json") -> str:
    """A refusal's message: the Status object's ``message`` (JSON or protobuf), else the start of the body."""
    if is_protobuf(content_type):
        return status_message(raw) or f"a protobuf answer of {len(raw)} bytes"
    try:
        answer = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        answer = None
    message = answer.get("message") if isinstance(answer, dict) else None
    return str(message or raw[:200].decode("utf-8", "replace"))


def connect(kubeconfig: Path | None, *, context: str | None = None, user_agent: str = SERVER_AGENT) -> ApiServer:
    """The API server of this kubeconfig (and context), or of the pod's service account when None."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig), context=context, client_configuration=cfg
            )
    except (config.ConfigException, OSError, ValueError, TypeError) as exc:
        raise InputError(f"cannot use {'the in-cluster config' if kubeconfig is None else kubeconfig}: {exc}") from None
    url = urlsplit(cfg.host)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InputError(f"API server URL {cfg.host!r} is not http(s)://host[:port]")
    headers: dict[str, str] = {}
    token = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    if token:
        headers["Authorization"] = token
    tls = None
    if url.scheme == "https":
        tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else ssl._create_unverified_context()
        if cfg.cert_file and cfg.key_file:
            tls.load_cert_chain(cfg.cert_file, cfg.key_file)
    port = url.port or (443 if url.scheme == "https" else 80)
    return ApiServer(url.scheme, url.hostname, port, headers, tls, user_agent=user_agent)
