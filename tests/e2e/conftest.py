"""A real API server for the end-to-end checks: a kind cluster made for the run, or one named by a kubeconfig.

These run only from ``make e2e`` (``KILTER_E2E=1``). The cluster is
``KILTER_E2E_KUBECONFIG`` when set; otherwise a kind cluster named
``kilter-e2e`` is created for the session and deleted afterwards (kept with
``KILTER_E2E_KEEP=1``). Without Docker and kind, every test here is skipped
and says why; none pretends to have passed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kilter.kube.api import ApiError, ApiServer, connect
from kilter.model.errors import KilterError

CLUSTER = "kilter-e2e"


def _why_not_kind() -> str:
    """ "" when Docker and kind can make a cluster here, else what is missing."""
    for tool in ("docker", "kind"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not on PATH"
    probe = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        return f"Docker does not answer (`docker info`: {probe.stderr.strip()[:200]})"
    return ""


@pytest.fixture(scope="session")
def kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.environ.get("KILTER_E2E") != "1":
        pytest.skip("end-to-end checks run with `make e2e` (a kind cluster, or KILTER_E2E_KUBECONFIG)")
    given = os.environ.get("KILTER_E2E_KUBECONFIG")
    if given:
        yield Path(given)
        return
    missing = _why_not_kind()
    if missing:
        pytest.skip(f"end-to-end checks need Docker and kind: {missing}; or set KILTER_E2E_KUBECONFIG")
    path = tmp_path_factory.mktemp("kind") / "kubeconfig"
    subprocess.run(
        ["kind", "create", "cluster", "--name", CLUSTER, "--kubeconfig", str(path), "--wait", "180s"],
        check=True,
        timeout=600,
    )
    try:
        yield path
    finally:
        if os.environ.get("KILTER_E2E_KEEP") != "1":
            subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False, timeout=300)


@pytest.fixture(scope="session")
def api(kubeconfig: Path) -> ApiServer:
    try:
        return connect(kubeconfig)
    except KilterError as exc:
        pytest.fail(f"cannot use {kubeconfig}: {exc}")


@pytest.fixture
def namespace(api: ApiServer) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards."""
    name = f"kilter-e2e-{uuid.uuid4().hex[:8]}"
    api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(ApiError):
            api.call("DELETE", f"/api/v1/namespaces/{name}")


def pending_pod(name: str, *, gpus: int = 1) -> dict[str, object]:
    """A pod no scheduler takes (its schedulerName names none), asking for GPUs: it stays Pending until bound."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kilter.dev/e2e": "yes"}},
        "spec": {
            "schedulerName": "kilter-e2e-nobody",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.9",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }
