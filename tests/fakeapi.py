"""A stand-in for kube-apiserver on 127.0.0.1: records every call and answers as the test's ``respond`` says.

Answers that refuse are ``metav1.Status`` objects, as the real server sends them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str
    authorization: str
    body: Any


Answer = tuple[int, Any]


def status(code: int, reason: str, message: str) -> Answer:
    failure = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, failure


class FakeApi(ThreadingHTTPServer):
    def __init__(self, respond: Callable[[Call], Answer]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.respond = respond
        self.calls: list[Call] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def log_message(self, *args: object) -> None:
        return None

    def _handle(self) -> None:
        url = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        call = Call(
            self.command,
            url.path,
            parse_qs(url.query),
            self.headers.get("Content-Type", ""),
            self.headers.get("Authorization", ""),
            json.loads(raw) if raw else None,
        )
        self.server.calls.append(call)
        code, answer = self.server.respond(call)
        data = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


@contextmanager
def running(respond: Callable[[Call], Answer]) -> Iterator[FakeApi]:
    server = FakeApi(respond)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
