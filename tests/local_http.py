"""Small helpers for tests that run a server process on 127.0.0.1: a free port, and a GET that never raises."""

from __future__ import annotations

import socket
import urllib.request

__all__ = ["free_port", "get_text"]


def free_port() -> int:
    """A TCP port no one listens on now (the OS's pick), for a child process to bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_text(port: int, path: str, *, host: str = "127.0.0.1") -> str:
    """The body of GET ``path`` on ``host``:``port``; "" while nothing answers (a server still starting)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=2) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""
