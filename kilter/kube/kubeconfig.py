"""Where the API server is and whose credentials kilter presents: a kubeconfig's context, or the pod's service account.

Read as client-go's ``clientcmd`` reads it, with one difference in purpose:
what is kept of the user is where each credential *comes from* (a token
file, a certificate file, an exec plugin), not one reading of it, so that
``credentials`` can read it again while kilter runs. A kubeconfig path may
be a list (``$KUBECONFIG``, split on ``os.pathsep``); as in client-go, the
first file that names a cluster, user or context, or sets
``current-context``, wins, files that do not exist are skipped, and relative
paths in an entry are relative to the file that holds it.

In a pod (no kubeconfig) it is what ``rest.InClusterConfig`` uses: the
Service at ``$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT``, the CA and
the projected token under ``/var/run/secrets/kubernetes.io/serviceaccount``;
the token is a file the kubelet replaces, read again as client-go does.

Refused with InputError, one line: a kubeconfig that does not parse or
lacks the context, cluster or user it names; an ``auth-provider`` user (the
gcp and azure providers are gone from client-go; oidc's refresh needs its
own client: kubelogin runs it as an exec plugin).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kilter.kube.exec_credential import ExecConfig, exec_config
from kilter.model.errors import InputError
from kilter.model.files import read_bounded

__all__ = ["SERVICE_ACCOUNT", "ApiTarget", "User", "in_cluster", "read"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts a pod's service account: ``token`` (projected, replaced before it expires), ``ca.crt``."""

MAX_KUBECONFIG_BYTES = 16 * 1024 * 1024
"""A kubeconfig with many clusters and inline certificates is a few hundred KB; this only stops a runaway file."""


@dataclass(frozen=True)
class User:
    """Where one user's credentials come from (``users[].user`` of a kubeconfig, or the service account).

    Precedence is client-go's: a token (or token file) and a client
    certificate are presented together; basic auth (username and password)
    only without a token; an exec plugin only when none of these is given.
    """

    token: str = ""
    token_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    cert_data: bytes = b""
    key_data: bytes = b""
    username: str = ""
    password: str = field(default="", repr=False)
    exec: ExecConfig | None = None


@dataclass(frozen=True)
class ApiTarget:
    """The API server and the user: everything ``api.connect`` needs."""

    server: str
    """``https://host:port`` (or ``http``), as written."""
    ca_file: Path | None
    ca_data: str
    """PEM, from ``certificate-authority-data``; empty when a file (or the system's roots) is used."""
    insecure: bool
    user: User
    source: str
    """What was read, for messages: the kubeconfig's path, or "the in-cluster config"."""


def in_cluster(root: Path = SERVICE_ACCOUNT, environ: Mapping[str, str] = os.environ) -> ApiTarget:
    """The API server and service account of the pod kilter runs in (``rest.InClusterConfig``)."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise InputError("cannot use the in-cluster config: KUBERNETES_SERVICE_HOST and _PORT are not set (not a pod)")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    ca = root / "ca.crt"
    user = User(token_file=root / "token")
    return ApiTarget(server, ca if ca.is_file() else None, "", False, user, "the in-cluster config")


def read(kubeconfig: Path, context: str | None = None) -> ApiTarget:
    """The cluster and user of ``context`` (default: ``current-context``) in ``kubeconfig`` (a path or a list)."""
    source = str(kubeconfig)
    merged = _merge([Path(p).expanduser() for p in source.split(os.pathsep) if p], source)
    name = context or merged.current_context
    if not name:
        raise InputError(f"cannot use {source}: no current-context, and no --context given")
    ctx = merged.entry("contexts", name, "context")
    cluster_name, user_name = _text(ctx[1], "cluster"), _text(ctx[1], "user")
    base, cluster = merged.entry("clusters", cluster_name, "cluster")
    server = _text(cluster, "server")
    if not server:
        raise InputError(f"cannot use {source}: cluster {cluster_name!r} has no server")
    ca_file = _path(cluster, "certificate-authority", base)
    ca_data = _data(cluster, "certificate-authority-data", source).decode("utf-8", "replace")
    user = User()
    if user_name:
        user_base, raw = merged.entry("users", user_name, "user")
        user = _user(raw, user_base, source, cluster)
    return ApiTarget(server, ca_file, ca_data, cluster.get("insecure-skip-tls-verify") is True, user, source)


@dataclass
class _Merged:
    source: str
    current_context: str = ""
    entries: dict[str, dict[str, tuple[Path, dict[str, Any]]]] = field(default_factory=dict)

    def entry(self, kind: str, name: str, key: str) -> tuple[Path, dict[str, Any]]:
        """(directory of the file that holds it, the entry's ``key`` map) of the named cluster, user or context."""
        found = self.entries.get(kind, {}).get(name)
        if found is None:
            raise InputError(f"cannot use {self.source}: no {kind[:-1]} named {name!r}")
        base, item = found
        body = item.get(key)
        return base, body if isinstance(body, dict) else {}


def _merge(paths: list[Path], source: str) -> _Merged:
    merged = _Merged(source)
    read_any = False
    for path in paths:
        if not path.exists():
            continue
        read_any = True
        try:
            doc = yaml.safe_load(read_bounded(path, MAX_KUBECONFIG_BYTES))
        except yaml.YAMLError as exc:
            raise InputError(f"cannot use {source}: {path} is not YAML: {str(exc).splitlines()[0]}") from None
        if not isinstance(doc, dict):
            continue  # an empty file, as client-go takes it
        if not merged.current_context and isinstance(doc.get("current-context"), str):
            merged.current_context = doc["current-context"]
        base = path.resolve().parent
        for kind in ("clusters", "users", "contexts"):
            items = doc.get(kind)
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    merged.entries.setdefault(kind, {}).setdefault(item["name"], (base, item))
    if not read_any:
        raise InputError(f"cannot use {source}: no such file")
    return merged


def _user(raw: dict[str, Any], base: Path, source: str, cluster: dict[str, Any]) -> User:
    if raw.get("auth-provider"):
        provider = raw["auth-provider"].get("name") if isinstance(raw["auth-provider"], dict) else None
        raise InputError(
            f"cannot use {source}: auth-provider {provider!r} is not supported; use its exec plugin "
            "(gke-gcloud-auth-plugin, kubelogin)"
        )
    # client-go's UpdateTransportConfig: a token, basic auth or a certificate in the kubeconfig wins over the plugin
    given = ("token", "tokenFile", "username", "client-certificate", "client-certificate-data")
    has_static = any(raw.get(key) for key in given)
    plugin = raw.get("exec")
    return User(
        token=_text(raw, "token"),
        token_file=_path(raw, "tokenFile", base),
        cert_file=_path(raw, "client-certificate", base),
        key_file=_path(raw, "client-key", base),
        cert_data=_data(raw, "client-certificate-data", source),
        key_data=_data(raw, "client-key-data", source),
        username=_text(raw, "username"),
        password=_text(raw, "password"),
        exec=exec_config(plugin, base=base, cluster=cluster, source=source)
        if isinstance(plugin, dict) and not has_static
        else None,
    )


def _text(obj: Mapping[str, Any], key: str) -> str:
    value = obj.get(key)
    return value if isinstance(value, str) else ""


def _path(obj: Mapping[str, Any], key: str, base: Path) -> Path | None:
    value = _text(obj, key)
    return base / Path(value).expanduser() if value else None


def _data(obj: Mapping[str, Any], key: str, source: str) -> bytes:
    """A ``*-data`` field: base64 in the file, as ``[]byte`` is in Go's JSON."""
    value = _text(obj, key)
    try:
        return base64.b64decode(value, validate=True) if value else b""
    except (binascii.Error, ValueError):
        raise InputError(f"cannot use {source}: {key} is not base64") from None
