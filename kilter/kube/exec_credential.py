"""A kubeconfig's exec plugin (``users[].user.exec``), run as client-go's exec authenticator runs it.

The plugin is the command the kubeconfig names (``aws eks get-token``,
``gke-gcloud-auth-plugin``, ``kubelogin``). It is given an ExecCredential in
``$KUBERNETES_EXEC_INFO`` and prints one whose ``status`` holds a bearer
token, a client certificate and key, or both, and perhaps an
``expirationTimestamp`` (``client.authentication.k8s.io/v1``, or
``v1beta1``; ``plugin/pkg/client/auth/exec/exec.go`` is the reference).
*When* it runs is ``credentials``' business; here is how: the environment,
the answer's checks, the errors.

Unlike client-go, kilter never runs a plugin interactively: a server has no
terminal. ``spec.interactive`` is false and stdin is closed; a plugin that
demands one (``interactiveMode: Always``) is refused when the kubeconfig is
read. A run is limited to ``RUN_TIMEOUT_S`` (client-go has no limit, as it
may wait for a person) and its output to ``MAX_OUTPUT_BYTES``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kilter.model.errors import InputError
from kilter.model.files import read_bounded

__all__ = ["API_VERSIONS", "ExecConfig", "PluginCredential", "exec_config", "run"]

API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
"""The ExecCredential versions client-go still speaks (v1alpha1 went in 1.24)."""

RUN_TIMEOUT_S = 60.0
MAX_OUTPUT_BYTES = 1024 * 1024
_EXEC_EXTENSION = "client.authentication.k8s.io/exec"  # a cluster extension handed to the plugin as spec.cluster.config


@dataclass(frozen=True)
class ExecConfig:
    """What the kubeconfig says to run (``clientcmdapi.ExecConfig``), paths resolved."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    api_version: str
    install_hint: str
    cluster: Mapping[str, Any] | None
    """``spec.cluster`` as the plugin gets it with ``provideClusterInfo``; None without."""


@dataclass(frozen=True)
class PluginCredential:
    """One answer of a plugin: PEM bytes for the pair, and when it stops being valid (Unix seconds; None: never
    said, so valid until the API server refuses it)."""

    token: str
    cert_pem: bytes
    key_pem: bytes
    expires_at: float | None


def exec_config(raw: Mapping[str, Any], *, base: Path, cluster: Mapping[str, Any], source: str) -> ExecConfig:
    """The exec block of a kubeconfig user, checked as clientcmd's validation checks it."""
    command, api_version = raw.get("command"), raw.get("apiVersion")
    if not isinstance(command, str) or not command:
        raise InputError(f"cannot use {source}: exec has no command")
    if api_version not in API_VERSIONS:
        known = ", ".join(API_VERSIONS)
        raise InputError(f"cannot use {source}: exec apiVersion {api_version!r} is not one of {known}")
    mode = raw.get("interactiveMode") or ("IfAvailable" if api_version.endswith("v1beta1") else "")
    if mode not in ("Never", "IfAvailable"):
        why = "is required for v1" if not mode else "needs a terminal, and kilter runs without one"
        raise InputError(f"cannot use {source}: exec interactiveMode {mode!r} {why}")
    if os.sep in command:  # client-go resolves a command only when it is a path, not a name looked up in PATH
        command = str(base / command)
    env = []
    for item in raw.get("env") or []:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
            raise InputError(f"cannot use {source}: exec env entries need a name")
        env.append((item["name"], str(item.get("value") or "")))
    args = raw.get("args") or []
    return ExecConfig(
        command,
        tuple(str(a) for a in args) if isinstance(args, list) else (),
        tuple(env),
        api_version,
        str(raw.get("installHint") or ""),
        _cluster_info(cluster, base) if raw.get("provideClusterInfo") is True else None,
    )


def _cluster_info(cluster: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """``spec.cluster`` (``clientauthentication.Cluster``): the CA as data, read from its file if need be."""
    ca = str(cluster.get("certificate-authority-data") or "")
    if not ca and isinstance(cluster.get("certificate-authority"), str):
        ca = base64.b64encode(read_bounded(base / cluster["certificate-authority"], MAX_OUTPUT_BYTES)).decode()
    info: dict[str, Any] = {"server": str(cluster.get("server") or "")}
    for key in ("tls-server-name", "insecure-skip-tls-verify", "proxy-url", "disable-compression"):
        if cluster.get(key):
            info[key] = cluster[key]
    if ca:
        info["certificate-authority-data"] = ca
    for ext in cluster.get("extensions") or []:
        if isinstance(ext, dict) and ext.get("name") == _EXEC_EXTENSION:
            info["config"] = ext.get("extension")
    return info


def run(config: ExecConfig) -> PluginCredential:
    """Run the plugin once; what it issued, or InputError naming what went wrong (with its install hint when the
    command is missing, and the last line it wrote to stderr when it failed)."""
    spec: dict[str, Any] = {"interactive": False}
    if config.cluster is not None:
        spec["cluster"] = config.cluster
    info = {"kind": "ExecCredential", "apiVersion": config.api_version, "spec": spec}
    env = {**os.environ, **dict(config.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
    what = f"exec plugin {config.command}"
    try:
        done = subprocess.run(
            [config.command, *config.args],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        raise InputError(f"{what} not found" + (f": {config.install_hint}" if config.install_hint else "")) from None
    except (OSError, subprocess.SubprocessError) as exc:
        raise InputError(f"{what}: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise InputError(f"{what} exited {done.returncode}" + (f": {said[-1][:300]}" if said else ""))
    if len(done.stdout) > MAX_OUTPUT_BYTES:
        raise InputError(f"{what} wrote more than {MAX_OUTPUT_BYTES} bytes")
    return _issued(done.stdout, config.api_version, what)


def _issued(out: bytes, api_version: str, what: str) -> PluginCredential:
    """The answer's status, checked as ``refreshCredsLocked`` checks it."""
    try:
        doc = json.loads(out)
    except (ValueError, RecursionError):
        raise InputError(f"{what} did not print JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise InputError(f"{what} did not print an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise InputError(f"{what} answered {doc.get('apiVersion')!r}; the kubeconfig asks for {api_version}")
    status = doc.get("status")
    if not isinstance(status, dict):
        raise InputError(f"{what} answered without a status")
    token, cert, key = (str(status.get(k) or "") for k in ("token", "clientCertificateData", "clientKeyData"))
    if not token and not cert and not key:
        raise InputError(f"{what} issued neither a token nor a certificate and key")
    if bool(cert) != bool(key):
        raise InputError(f"{what} issued a certificate without its key, or a key without its certificate")
    expires = status.get("expirationTimestamp")
    return PluginCredential(token, cert.encode(), key.encode(), None if expires is None else _instant(expires, what))


def _instant(value: Any, what: str) -> float:
    """An RFC 3339 time (``metav1.Time``) in Unix seconds; one without its offset is refused, as Go refuses it."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise InputError(f"{what} issued expirationTimestamp {str(value)[:40]!r}, not RFC 3339")
    return when.timestamp()
