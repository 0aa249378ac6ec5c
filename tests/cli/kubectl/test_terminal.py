"""The plugin's views in a real terminal (tmux, 80 columns): what a user sees is what the view printed, unwrapped.

Skips, saying why, where tmux is absent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

TMUX = shutil.which("tmux")
PLUGIN = Path(sys.executable).with_name("kubectl-kilter")
WIDTH, HEIGHT = 80, 60
BEGIN, DONE = "__view-begins__", "__view-done__"

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed: the terminal views are not checked"),
    pytest.mark.skipif(not PLUGIN.exists(), reason=f"no {PLUGIN}: the plugin is not installed beside this Python"),
]


@pytest.fixture
def terminal() -> Iterator[str]:
    """A detached tmux session of 80 x 60 on a server of its own, killed afterwards."""
    assert TMUX is not None
    server = f"kilter-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [TMUX, "-L", server, "-f", os.devnull, "new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT)], check=True
    )
    try:
        yield server
    finally:
        subprocess.run([TMUX, "-L", server, "kill-server"], check=False)


def shown(server: str, argv: list[str]) -> list[str]:
    """The terminal's lines after ``argv`` ran in it, as the screen shows them (a line too long for it wraps onto
    the next), between the markers it echoes before and after (the typed command line holds both on one line)."""
    assert TMUX is not None
    command = " ".join(["echo", BEGIN + ";", str(PLUGIN), *argv, "2>/dev/null;", "echo", DONE])
    subprocess.run([TMUX, "-L", server, "send-keys", command, "Enter"], check=True)
    deadline = time.monotonic() + 60  # a bound on a hang, not a measurement
    while time.monotonic() < deadline:
        screen = subprocess.run(
            [TMUX, "-L", server, "capture-pane", "-p", "-S", "-"], check=True, capture_output=True, text=True
        ).stdout.splitlines()
        if any(line.strip() == DONE for line in screen):
            end = next(i for i, line in enumerate(screen) if line.strip() == DONE)
            start = max(i for i, line in enumerate(screen[:end]) if line.strip() == BEGIN) + 1
            return [line.rstrip() for line in screen[start:end]]
        time.sleep(0.2)
    raise AssertionError(f"{argv} did not finish in the terminal")


@pytest.mark.parametrize(
    "argv",
    [["domains", "--map", "--demo", "--platform", "GB200-NVL72"], ["top", "-A", "--demo"]],
    ids=["rack-map", "top"],
)
def test_a_view_fits_80_columns_and_the_terminal_shows_exactly_what_it_printed(terminal: str, argv: list[str]) -> None:
    printed = subprocess.run([str(PLUGIN), *argv], check=True, capture_output=True, text=True).stdout.splitlines()
    seen = shown(terminal, argv)
    assert printed and len(printed) < HEIGHT
    assert all(len(line) <= WIDTH for line in printed if argv[0] == "domains")  # the map is laid out for 80
    assert seen == [line.rstrip() for line in printed]
