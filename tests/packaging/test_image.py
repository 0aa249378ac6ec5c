"""The container image, checked without a container engine: the Dockerfile says what the issue asks of the image,
and the wheel it installs, installed alone into a fresh virtual environment that is then made read-only, serves
the demo with every listener up and healthy, as the image's entrypoint would.

The wheel comes from ``make build``; ``make image-check`` passes it in ``KILTER_WHEEL`` (CI runs it after the
build). Without it the wheel tests skip, saying so; the Dockerfile's are always run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.extenders.conftest import make_certificates

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, (KEYWORD, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (``FROM`` to the next ``FROM``)."""
    out: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            out.append([])
        if out:
            out[-1].append((keyword, rest))
    return out


def arg_default(name: str) -> str:
    found = [rest.split("=", 1)[1] for k, rest in instructions() if k == "ARG" and rest.startswith(f"{name}=")]
    assert len(found) == 1, f"ARG {name} with one default"
    return found[0]


# ---------------------------------------------------------------------------- the Dockerfile


def test_the_base_is_a_slim_python_pinned_to_its_patch_release_matching_the_projects_python() -> None:
    base = arg_default("PYTHON_IMAGE")
    match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-[a-z]+(@sha256:[0-9a-f]{64})?", base)
    assert match, f"{base}: a python:X.Y.Z-slim-<debian> image (optionally by digest)"
    minimum = re.fullmatch(r">=(\d+)\.(\d+)", PROJECT["requires-python"])
    assert minimum and (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))
    assert all(rest.split(" AS ")[0] == "${PYTHON_IMAGE}" for stage in stages() for k, rest in stage if k == "FROM")


def test_a_build_stage_makes_the_wheel_and_the_runtime_holds_only_the_installed_wheel() -> None:
    built, installed, runtime = stages()
    assert any(k == "COPY" and rest == ". ." for k, rest in built)  # the source goes to the build stage only
    assert any(k == "RUN" and "python -m build" in rest and "--wheel" in rest for k, rest in built)
    assert any(k == "COPY" and rest.startswith("--from=wheel ") for k, rest in installed)
    assert any(k == "RUN" and "pip install" in rest and "kilter-*.whl" in rest for k, rest in installed)
    copies = [rest for k, rest in runtime if k == "COPY"]
    assert copies == ["--from=install /opt/kilter /opt/kilter"], "the runtime copies the environment alone"
    assert not any(k in ("RUN", "ADD") for k, _ in runtime), "nothing runs, and no shell is needed, at runtime"


def test_the_runtime_runs_kilter_as_a_non_root_numeric_user_in_exec_form() -> None:
    runtime = dict(stages()[-1])
    user = runtime["USER"]
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", user), f"USER {user}: numeric, not root"
    entrypoint = runtime["ENTRYPOINT"]
    assert entrypoint == '["/opt/kilter/bin/kilter"]', "exec form: no shell between the runtime and kilter"
    assert "kilter" in PROJECT["scripts"]
    assert runtime["CMD"] == '["serve", "--in-cluster"]'


def test_the_image_says_what_it_is_with_oci_labels_and_its_version_is_the_projects() -> None:
    assert arg_default("VERSION") == PROJECT["version"]
    labels = " ".join(rest for k, rest in stages()[-1] if k == "LABEL")
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in labels and PROJECT["license"] == "Apache-2.0"


def test_the_context_leaves_out_local_builds_and_environments() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    for path in (".venv/", "build/", "dist/", ".git/"):
        assert path in ignored


def test_make_image_says_so_and_stops_without_a_container_engine() -> None:
    # ENGINE is what the Makefile found of docker or podman on PATH: empty, as on the development machines
    make = subprocess.run(["make", "-s", "-C", str(ROOT), "image", "ENGINE="], capture_output=True, text=True)
    assert make.returncode != 0
    assert "no container engine (docker or podman)" in make.stdout + make.stderr


# ---------------------------------------------------------------------------- the wheel, as the image runs it


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment holding the wheel and its dependencies only."""
    wheel = os.environ.get("KILTER_WHEEL")
    if not wheel:
        pytest.skip("no wheel given: `make image-check` runs these after `make build` (KILTER_WHEEL)")
    venv = tmp_path_factory.mktemp("image") / "kilter"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", wheel], check=True)
    return venv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as answer:
            return int(answer.status)
    except OSError:
        return 0


def test_the_installed_wheel_serves_the_demo_with_every_listener_healthy(installed: Path, tmp_path: Path) -> None:
    cert, key, ca = make_certificates(tmp_path)
    http, webhook, grpc_port = free_port(), free_port(), free_port()
    runtime = dict(stages()[-1])
    assert json.loads(runtime["ENTRYPOINT"]) == ["/opt/kilter/bin/kilter"]  # run here from the fresh environment
    scratch = tmp_path / "tmp"  # the image's only writable place: /tmp (an emptyDir)
    scratch.mkdir()
    env = {
        "PATH": f"{installed / 'bin'}:/usr/bin:/bin",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLCONFIGDIR": str(scratch / "matplotlib"),
        "TMPDIR": str(scratch),
        "HOME": str(installed),  # the image's root filesystem is read-only: what is written there shows below
    }
    before = {p: p.stat().st_mtime_ns for p in installed.rglob("*")}
    argv = [str(installed / "bin" / "kilter"), "serve", "--demo", "--address", "127.0.0.1"]
    argv += ["--http-port", str(http), "--webhook-port", str(webhook), "--grpc-port", str(grpc_port)]
    argv += ["--tls-cert-file", str(cert), "--tls-key-file", str(key)]
    server = subprocess.Popen(argv, env=env, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        tls = ssl.create_default_context(cafile=str(ca))
        urls = [f"http://127.0.0.1:{http}/healthz", f"http://127.0.0.1:{http}/readyz"]
        urls += [f"https://127.0.0.1:{webhook}/healthz", f"https://127.0.0.1:{webhook}/readyz"]
        deadline = time.monotonic() + 60
        while not all(_get(u, tls if u.startswith("https") else None) == 200 for u in urls):
            assert server.poll() is None, server.communicate()[0]
            assert time.monotonic() < deadline, "kilter serve --demo did not become ready within 60 s"
            time.sleep(0.2)
        credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())  # TLS too, with the cert
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert server.returncode in (0, -signal.SIGTERM), output  # shut down on the kubelet's SIGTERM, not crashed
    after = {p: p.stat().st_mtime_ns for p in installed.rglob("*")}
    assert after == before, "kilter wrote outside /tmp, which a read-only root filesystem refuses"


def test_the_installed_plugin_answers_help(installed: Path) -> None:
    done = subprocess.run([str(installed / "bin" / "kubectl-kilter"), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage: kubectl kilter" in done.stdout, done.stderr
