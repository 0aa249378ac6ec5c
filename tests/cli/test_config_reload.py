"""``kilter serve --config``: a changed file applied without a restart where it can be, the rest named.

In process, ``ConfigReloader.reload`` against a served app's own objects; then a real ``kilter serve`` process
whose file is edited while it runs, watched through ``/metrics`` as an operator would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kilter.cli import serve
from kilter.cli.config_reload import LIVE, LOGGERS, ConfigReloader
from kilter.cli.configuration import API_VERSION, KIND, MAX_CONFIG_BYTES, config_of, flag_paths
from kilter.extenders.explain import Record
from kilter.extenders.server import App
from tests.local_http import free_port, get_text

BASE: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "state": {"demo": True}}


def _write(path: Path, **sections: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({**BASE, **sections}), encoding="utf-8")
    return path


def _sample(app: App, name: str, **labels: str) -> float:
    value = app.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def _reloader(tmp_path: Path, flags: dict[str, Any] | None = None) -> tuple[ConfigReloader, App]:
    path = _write(tmp_path / "config.yaml")
    config = config_of(path, flags)
    app, _ = serve.build_app(config)
    return ConfigReloader(path, flags or {}, config, app), app


@pytest.fixture
def loggers() -> Iterator[None]:
    """The loggers a reload may set, put back afterwards (the root's too: the rest of the session logs through it)."""
    before = {name: logging.getLogger(name).level for name in LOGGERS}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


def _decide(app: App, times: int) -> None:
    """``times`` decision records for pod ml/p, as filter requests leave them."""
    for _ in range(times):
        app.extender.log.add("ml", "p", Record("filter", 0.0, "no fit", ["node-a"]))


def test_the_policy_changes_at_once(tmp_path: Path, loggers: None) -> None:
    reloader, app = _reloader(tmp_path)
    _decide(app, 4)
    _write(
        reloader.path,
        splitWait={"factor": 0.5, "max": "2h"},
        gangs={"timeout": "9m", "maxNamespaceGangPlans": 3},
        explain={"records": 11, "perPod": 1},
        logging={"level": "warning"},
    )
    assert reloader.reload() == []
    gangs = app.extender.gangs
    assert gangs.waits is not None and (gangs.waits.defaults.factor, gangs.waits.defaults.max_s) == (0.5, 7200)
    assert gangs.settings.timeout_s == 540 and gangs.settings.limits.max_plans_per_namespace == 3
    assert gangs.settings.limits.grace_s == 540, "a snapshot's plans for unseen pods live as long as any plan"
    _decide(app, 1)
    explained = app.extender.log.explain("ml", "p")
    assert explained is not None and len(explained) == 1, "a lowered perPod trims a pod's old records"
    for name in LOGGERS:
        assert logging.getLogger(name).level == logging.WARNING, name
    assert _sample(app, "kilter_config_reloads_total", result="applied") == 1
    assert reloader.config.gang_timeout_s == 540


def test_a_live_change_that_breaks_what_runs_is_refused_whole(tmp_path: Path) -> None:
    path = _write(tmp_path / "config.yaml", planRecords={"keySecret": "kube-system/keys", "keyRotation": "1h"})
    config = config_of(path)
    app, _ = serve.build_app(dataclasses.replace(config, plan_key_secret=None))  # no cluster here to hold keys in
    reloader = ConfigReloader(path, {}, config, app)
    _write(path, planRecords={"keySecret": "kube-system/keys", "keyRotation": "3h"}, gangs={"timeout": "2h"})
    reloader.reload()  # the rotation needs a restart: the running 1h is still shorter than a 2h gang timeout
    assert app.extender.gangs.settings.timeout_s == config.gang_timeout_s, "nothing applied"
    assert _sample(app, "kilter_config_reloads_total", result="refused") == 1


def test_an_edit_that_changes_no_setting_counts_nothing(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path)
    reloader.path.write_text(reloader.path.read_text(encoding="utf-8") + "# a comment\n", encoding="utf-8")
    assert reloader.reload() == []
    for result in ("applied", "restart", "refused"):
        assert _sample(app, "kilter_config_reloads_total", result=result) == 0


def test_the_watch_survives_a_file_that_is_not_text(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path)

    async def edits() -> None:
        watching = asyncio.get_running_loop().create_task(reloader.watch(0.01))
        reloader.path.write_bytes(b"apiVersion: \xe9\n")
        await _until(lambda: _sample(app, "kilter_config_reloads_total", result="refused") == 1)
        _write(reloader.path, explain={"records": 9})
        await _until(lambda: app.extender.log.records == 9)
        watching.cancel()

    asyncio.run(edits())


async def _until(done: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not done():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


def test_a_change_that_needs_a_restart_is_named_and_not_applied(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path)
    _write(reloader.path, listeners={"httpPort": 7001}, spares={"nodesPerDomain": 1}, explain={"records": 5})
    assert reloader.reload() == ["listeners.httpPort", "spares.nodesPerDomain"]
    assert app.extender.log.records == 5, "the live part of the same file still applies"
    assert reloader.config.http_port == reloader.started.http_port
    assert _sample(app, "kilter_config_restart_pending") == 2
    assert _sample(app, "kilter_config_reloads_total", result="restart") == 1
    _write(reloader.path, explain={"records": 5})  # changed back: nothing waits for a restart any more
    assert reloader.reload() == []
    assert _sample(app, "kilter_config_restart_pending") == 0


def test_an_invalid_file_changes_nothing(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path)
    before = (app.extender.gangs.settings.timeout_s, app.extender.log.records)
    reloader.path.write_text(
        yaml.safe_dump({**BASE, "gangs": {"timeout": "9m"}, "explain": {"recordz": 5}}), encoding="utf-8"
    )
    reloader.reload()
    assert (app.extender.gangs.settings.timeout_s, app.extender.log.records) == before, "a half-applied file is worse"
    assert _sample(app, "kilter_config_reloads_total", result="refused") == 1


def test_flags_keep_winning_over_a_reloaded_file(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path, {"gang_timeout_s": 60.0})
    _write(reloader.path, gangs={"timeout": "9m"}, explain={"records": 7})
    assert reloader.reload() == []
    assert app.extender.gangs.settings.timeout_s == 60 and app.extender.log.records == 7


def test_every_live_setting_is_a_setting_of_the_file() -> None:
    assert flag_paths().keys() >= LIVE


# ---------------------------------------------------------------------------- a real kilter serve


def _metrics(port: int) -> str:
    return get_text(port, "/metrics")


def _wait_for(port: int, line: str, server: subprocess.Popen[str], within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while line not in _metrics(port):
        assert server.poll() is None, server.communicate()[0]
        assert time.monotonic() < deadline, f"{line!r} not in /metrics within {within_s:g} s"
        time.sleep(0.1)


def test_a_running_kilter_serve_rereads_its_file(tmp_path: Path) -> None:
    http = free_port()
    listeners = {"address": "127.0.0.1", "httpPort": http, "grpcPort": 0}
    path = _write(tmp_path / "config.yaml", listeners=listeners, state={"demo": True, "reloadInterval": "100ms"})
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}
    argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(path)]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(http, "kilter_config_restart_pending 0.0", server)
        state = {"demo": True, "reloadInterval": "100ms"}
        _write(path, listeners=listeners, state=state, splitWait={"factor": 0.25})
        _wait_for(http, 'kilter_config_reloads_total{result="applied"} 1.0', server)
        _write(path, listeners={**listeners, "webhookPort": 9555}, state=state, splitWait={"factor": 0.25})
        _wait_for(http, "kilter_config_restart_pending 1.0", server)
    finally:
        server.terminate()
        output = server.communicate(timeout=30)[0]
    assert "splitWait.factor" in output and "listeners.webhookPort change only after a restart" in output, output


# ---------------------------------------------------------------------------- files that are not a Configuration


def _hostile(path: Path, kind: str) -> str:
    """Put ``kind`` where the Configuration was, as a ConfigMap swap does (a rename over it); the refusal's words."""
    swap = path.with_name("swap")
    if kind == "fifo":
        os.mkfifo(swap)
        words = "is a FIFO"
    elif kind == "dev-zero":
        swap.symlink_to("/dev/zero")
        words = "is a character device"
    elif kind == "directory":
        swap.mkdir()
        words = "is a directory"
    else:
        swap.write_bytes(path.read_bytes() + b"#" * (MAX_CONFIG_BYTES + 1) + b"\n")
        words = f"the limit is {MAX_CONFIG_BYTES}"
    if kind == "directory":
        path.unlink()
    os.replace(swap, path)
    return words


def _swap_in(path: Path, **sections: dict[str, Any]) -> None:
    """A good Configuration renamed over whatever is at ``path`` (writing into a FIFO would block)."""
    fresh = _write(path.with_name("fresh.yaml"), **sections)
    if path.is_dir():
        path.rmdir()
    os.replace(fresh, path)


def _problems(app: App) -> list[str]:
    return [line for source in app.problem_sources for line in source()]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "oversized", "directory"])
def test_a_file_that_is_not_a_configuration_is_refused_once_without_stalling_and_the_next_good_one_applies(
    tmp_path: Path, kind: str
) -> None:
    reloader, app = _reloader(tmp_path)

    async def edits() -> None:
        watching = asyncio.get_running_loop().create_task(reloader.watch(0.01))
        words = _hostile(reloader.path, kind)
        await _until(lambda: _sample(app, "kilter_config_reloads_total", result="refused") == 1)
        [problem] = _problems(app)
        assert words in problem and str(reloader.path) in problem, problem
        await asyncio.sleep(0.2)  # twenty more polls of the same bad file
        assert _sample(app, "kilter_config_reloads_total", result="refused") == 1, "counted once, not per poll"
        assert not watching.done()
        _swap_in(reloader.path, explain={"records": 9})
        await _until(lambda: app.extender.log.records == 9)
        assert _problems(app) == []
        watching.cancel()

    asyncio.run(edits())


def test_an_invalid_file_is_shown_on_readiness_until_a_valid_one_applies(tmp_path: Path) -> None:
    reloader, app = _reloader(tmp_path)
    reloader.path.write_text("apiVersion: [\n", encoding="utf-8")
    reloader.reload()
    [problem] = _problems(app)
    assert "not YAML" in problem, problem
    _write(reloader.path, explain={"records": 9})
    reloader.reload()
    assert _problems(app) == [] and app.extender.log.records == 9


def test_a_running_kilter_serve_keeps_answering_while_its_file_is_a_fifo(tmp_path: Path) -> None:
    http = free_port()
    listeners = {"address": "127.0.0.1", "httpPort": http, "grpcPort": 0}
    state = {"demo": True, "reloadInterval": "100ms"}
    path = _write(tmp_path / "config.yaml", listeners=listeners, state=state)
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}
    argv = [sys.executable, "-m", "kilter.cli", "serve", "--config", str(path)]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(http, "kilter_config_restart_pending 0.0", server)
        _hostile(path, "fifo")
        _wait_for(http, 'kilter_config_reloads_total{result="refused"} 1.0', server)
        assert get_text(http, "/healthz").startswith("ok"), "the loop still answers"
        assert "is a FIFO, not a regular file" in get_text(http, "/readyz")
        _swap_in(path, listeners=listeners, state=state, splitWait={"factor": 0.25})
        _wait_for(http, 'kilter_config_reloads_total{result="applied"} 1.0', server)
        assert "FIFO" not in get_text(http, "/readyz")
    finally:
        server.terminate()
        server.communicate(timeout=30)
