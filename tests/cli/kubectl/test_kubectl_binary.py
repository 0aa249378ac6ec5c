"""The real kubectl runs the plugin from PATH: ``kubectl plugin list`` finds it, ``kubectl kilter ...`` answers from
a snapshot and from the list/watch test server through a kubeconfig (``--kubeconfig``, ``KUBECONFIG``,
``--context``); shell completion completes its words."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kilter.cli.kubectl.main import main as kubectl_main
from tests.cli.kubectl import scenario
from tests.cli.listening import listening
from tests.conftest import REPO
from tests.listwatch import ListWatchServer
from tests.live_mode import RESOURCES, kubeconfig

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
needs_kubectl = pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (/usr/bin/kubectl)")
TOKEN = "plugin"


@pytest.fixture(scope="module")
def bindir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A PATH entry holding kubectl-kilter and kubectl_complete-kilter, run by this Python from this checkout
    through the very functions pyproject's console scripts name."""
    d = tmp_path_factory.mktemp("bin")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for name in ("kubectl-kilter", "kubectl_complete-kilter"):
        module, _, func = scripts[name].partition(":")
        script = d / name
        script.write_text(
            f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -c "
            f"'import sys; from {module} import {func}; sys.exit({func}())' \"$@\"\n"
        )
        script.chmod(0o755)
    return d


def kubectl(bindir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    full = {**base, "PATH": f"{bindir}:{base.get('PATH', '')}", "HOME": str(bindir), **(env or {})}
    return subprocess.run([KUBECTL, *args], capture_output=True, text=True, env=full, timeout=120, check=False)


@pytest.fixture(scope="module")
def snap(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario.write(tmp_path_factory.mktemp("snap") / "cluster.json")


@needs_kubectl
def test_kubectl_plugin_list_finds_kilter(bindir: Path) -> None:
    done = kubectl(bindir, "plugin", "list")
    assert str(bindir / "kubectl-kilter") in done.stdout


@needs_kubectl
def test_kubectl_kilter_answers_from_a_snapshot(bindir: Path, snap: Path) -> None:
    done = kubectl(bindir, "kilter", "pending", "-A", "--snapshot", str(snap), "--now", scenario.NOW, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert {p["reason"] for p in json.loads(done.stdout)["pending"]} >= {"WaitingForQuota", "TopologyPlacementFailed"}
    bad = kubectl(bindir, "kilter", "explain", "deployment/x", "--snapshot", str(snap))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    missing = kubectl(bindir, "kilter", "explain", "-n", "llm", "pod/nope", "--snapshot", str(snap))
    assert missing.returncode == 1 and "not found" in missing.stderr and missing.stderr.count("\n") == 1


@needs_kubectl
def test_kubectl_kilter_reads_a_live_cluster_by_flag_env_and_context(
    bindir: Path, snap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kubectl_main(["top", "-n", "llm", "--snapshot", str(snap), "--now", scenario.NOW, "-o", "json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    with ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        for obj in scenario.objects():
            cluster.add(obj)
        config = kubeconfig(tmp_path / "config", cluster.port, TOKEN)
        doc = json.loads(config.read_text())
        doc["contexts"].append({"name": "other", "context": {"cluster": "test", "user": "kilter", "namespace": "llm"}})
        config.write_text(json.dumps(doc))  # current-context "test" has no namespace: -n would be "default"
        common = ("--now", scenario.NOW, "-o", "json")
        by_flag = kubectl(bindir, "kilter", "top", "--kubeconfig", str(config), "--context", "other", *common)
        by_env = kubectl(bindir, "kilter", "top", "--context", "other", *common, env={"KUBECONFIG": str(config)})
    assert by_flag.returncode == 0, by_flag.stderr
    assert by_env.returncode == 0, by_env.stderr
    # the context's namespace (llm) scopes the view as -n llm would
    assert json.loads(by_flag.stdout) == json.loads(by_env.stdout) == offline
    assert {g["namespace"] for g in offline["gangs"]} == {"llm"}


def test_an_unknown_context_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = kubeconfig(tmp_path / "config", 1, TOKEN)
    assert kubectl_main(["queues", "--kubeconfig", str(config), "--context", "nope"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_bash_completion_completes_views_flags_and_choices(bindir: Path) -> None:
    if not shutil.which("bash"):
        pytest.skip("bash is not installed")
    script = subprocess.run(
        [str(bindir / "kubectl-kilter"), "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout

    def complete(*words: str) -> list[str]:
        line = " ".join(f"'{w}'" for w in ("kubectl-kilter", *words))
        show = "printf '%s\\n' \"${COMPREPLY[@]}\""
        probe = f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words)}; _kubectl_kilter; {show}"
        return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, check=True).stdout.split()

    assert complete("pe") == ["pending"]
    assert set(complete("")) >= {"queues", "pending", "explain", "domains", "plan", "top", "completion"}
    assert complete("domains", "--m") == ["--map"]
    assert complete("top", "-o", "") == ["table", "wide", "json", "yaml"]


def test_zsh_completion_script_loads(bindir: Path) -> None:
    if not Path("/usr/bin/zsh").exists():
        pytest.skip("zsh is not installed (/usr/bin/zsh)")
    script = subprocess.run(
        [str(bindir / "kubectl-kilter"), "completion", "zsh"], capture_output=True, text=True, check=True
    ).stdout
    probe = f"autoload -U compinit; compinit -u; {script}\nprint -r -- ${{_comps[kubectl-kilter]}}"
    done = subprocess.run(["zsh", "-f", "-c", probe], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "_kubectl_kilter", done.stderr


def test_kubectl_complete_speaks_cobras_protocol(bindir: Path) -> None:
    def complete(*words: str) -> list[str]:
        run = [str(bindir / "kubectl_complete-kilter"), *words]
        return subprocess.run(run, capture_output=True, text=True, check=True).stdout.splitlines()

    assert complete("qu") == ["queues", ":4"]
    assert complete("pending", "-o", "j") == ["json", ":4"]
    assert complete("pending", "--snapshot", "") == [":0"]  # files: the shell's own completion


@needs_kubectl
def test_kubectl_completes_the_plugin_through_kubectl_complete(bindir: Path) -> None:
    done = kubectl(bindir, "__complete", "kilter", "do")
    if "domains" not in done.stdout:
        pytest.skip(f"this kubectl does not complete plugins (needs 1.26+): {done.stdout.strip()[:80]}")
    assert done.stdout.splitlines()[0] == "domains"


@needs_kubectl
def test_kubectl_kilter_asks_a_running_kilter_through_the_service_proxy(
    bindir: Path, snap: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``KUBECTL_KILTER_SERVICE`` set, the real kubectl runs the plugin, which asks a real ``kilter serve``; the API
    server holds no objects, so the answer can only be kilter's."""
    assert kubectl_main(["pending", "-A", "--snapshot", str(snap), "--now", scenario.NOW, "-o", "json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    with listening(tmp_path, snapshot=snap) as kilter, ListWatchServer(RESOURCES, token=TOKEN) as cluster:
        cluster.services[("kilter-system", "kilter", "http")] = ("127.0.0.1", kilter.http_port)
        config = kubeconfig(tmp_path / "config", cluster.port, TOKEN)
        env = {"KUBECONFIG": str(config), "KUBECTL_KILTER_SERVICE": "kilter-system/kilter:http"}
        done = kubectl(bindir, "kilter", "pending", "-A", "--now", scenario.NOW, "-o", "json", env=env)
        proxied = [r.path for r in cluster.requests]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == offline and offline["pending"]
    assert proxied == ["/api/v1/namespaces/kilter-system/services/kilter:http/proxy/debug/views"]
