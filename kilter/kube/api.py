"""A connection to a cluster's API server: where it is, how to authenticate, how to make one call.

Credentials come from a kubeconfig (tokens, token files, client
certificates, exec plugins) or from the pod's service account when running
in the cluster, and are read again while kilter runs (``credentials``: they
rotate); a call the API server answers 401 is sent once more with
credentials read again, then counted. Calls are plain HTTP/1.1 with
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
from kilter.kube import kubeconfig as kubeconfigs
from kilter.kube.credentials import Credentials, Presented, of_user
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
    "server_context",
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
    credentials: Credentials | None = field(default=None, compare=False)
    """What each call presents, read again as it rotates (``connect`` sets it); None: ``headers`` alone."""
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

        A refusal (any status but 200) raises ApiError with the server's message; a 401 is first tried once more
        with credentials read again.
        """
        presented = self._presented()
        conn, response, refusal = self._open_stream(path, timeout_s, presented)
        if response.status == 401 and self._renewed(presented):
            conn, response, refusal = self._open_stream(path, timeout_s, self._presented())
        self._judged("GET", path, response.status)
        if response.status != 200:
            raise ApiError(response.status, _message(refusal))
        return conn, response

    def _open_stream(
        self, path: str, timeout_s: float, presented: Presented | None
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, bytes]:
        """The connection and answer of one watch request; a refusal's body read and its connection closed."""
        conn = self._connection(timeout_s, presented)
        try:
            conn.request("GET", path, None, self._headers("application/json", presented))
            response = conn.getresponse()
            if response.status == 200:
                return conn, response, b""
            refusal = response.read()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise ApiError(0, f"GET {self.url}{path}: {exc}") from None
        conn.close()
        return conn, response, refusal

    def _presented(self) -> Presented | None:
        return self.credentials.current() if self.credentials is not None else None

    def _renewed(self, presented: Presented | None) -> bool:
        """After a 401 to ``presented``: whether the credentials, read again, are new (worth one more try)."""
        return self.credentials is not None and presented is not None and self.credentials.refused(presented)

    def _headers(self, accept: str, presented: Presented | None) -> dict[str, str]:
        auth = {"Authorization": presented.authorization} if presented is not None and presented.authorization else {}
        return {"User-Agent": self.user_agent, **self.headers, **auth, "Accept": accept}

    def _judged(self, method: str, path: str, status: int) -> None:
        """Tell the credentials how the API server took them: a 401 that stood after the retry, or not."""
        if self.credentials is None:
            return
        if status == 401:
            self.credentials.standing(f"{method} {path.partition('?')[0]}")
        else:
            self.credentials.accepted()

    def _connection(self, timeout_s: float, presented: Presented | None = None) -> http.client.HTTPConnection:
        if self.scheme == "https":
            tls = presented.tls if presented is not None and presented.tls is not None else self.tls
            return http.client.HTTPSConnection(self.host, self.port, context=tls, timeout=timeout_s)
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

        A 401 is sent once more when the credentials, read again, are new
        (the API server authenticates before it does anything, so even a
        POST is safe to repeat); a 401 that stands is counted.
        """
        presented = self._presented()
        answer = self._exchange(method, path, data, content_type, accept, presented)
        if answer[0] == 401 and self._renewed(presented):
            answer = self._exchange(method, path, data, content_type, accept, self._presented(), fresh=True)
        self._judged(method, path, answer[0])
        return answer

    def _exchange(
        self,
        method: str,
        path: str,
        data: bytes | None,
        content_type: str,
        accept: str,
        presented: Presented | None,
        *,
        fresh: bool = False,
    ) -> tuple[int, bytes, str]:
        """One request and its answer. Each has a connection of its own, but within ``keep_alive`` the thread's
        kept one (unless ``fresh``: a new certificate needs a new handshake); a GET whose kept connection the
        server has closed meanwhile goes again, once, on a fresh one."""
        keep = getattr(self._kept, "on", False)
        conn: http.client.HTTPConnection | None = getattr(self._kept, "conn", None)
        self._kept.conn = None
        if fresh and conn is not None:
            conn.close()
            conn = None
        headers = self._headers(accept, presented)
        if data is not None:
            headers["Content-Type"] = content_type
        while True:
            reused = conn is not None
            if conn is None:
                conn = self._connection(self.timeout_s, presented)
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


def server_context(target: kubeconfigs.ApiTarget) -> ssl.SSLContext:
    """A new TLS context for the target's server: its CA (or the system's roots), or no verification with
    ``insecure-skip-tls-verify``; a client certificate is added by ``credentials``."""
    if target.insecure:
        return ssl._create_unverified_context()
    ca_file = str(target.ca_file) if target.ca_file is not None else None
    try:
        return ssl.create_default_context(cafile=ca_file, cadata=target.ca_data or None)
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise InputError(f"the cluster's CA: {exc}") from None


def connect(
    kubeconfig: Path | None,
    *,
    context: str | None = None,
    user_agent: str = SERVER_AGENT,
    service_account: Path = kubeconfigs.SERVICE_ACCOUNT,
) -> ApiServer:
    """The API server of this kubeconfig (and context), or of the pod's service account (under
    ``service_account``) when None; its credentials read once now (InputError when they cannot be), and again as
    they rotate."""
    target = kubeconfigs.in_cluster(service_account) if kubeconfig is None else kubeconfigs.read(kubeconfig, context)
    url = urlsplit(target.server)
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        port = 0
    if url.scheme not in ("http", "https") or not url.hostname or not port:
        raise InputError(f"API server URL {target.server!r} is not http(s)://host[:port]")
    https = url.scheme == "https"
    try:
        base = server_context(target) if https else None
        credentials = of_user(target.user, tls=(lambda: server_context(target)) if https else None)
        credentials.current()
    except InputError as exc:
        raise InputError(f"cannot use {target.source}: {exc.message}") from None
    return ApiServer(url.scheme, url.hostname, port, {}, base, user_agent=user_agent, credentials=credentials)
