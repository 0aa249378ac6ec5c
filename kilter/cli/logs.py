"""kilter's log lines: ``--log-format text`` for people, ``json`` for a log pipeline, one event per line.

JSON lines carry ``time`` (RFC 3339, UTC), ``level``, ``logger`` and
``message``, and the keys a log call names with ``extra`` — ``gang``,
``pod``, ``workload``, ``namespace``, ``node`` — so that a gang's story can
be pulled out of a day of logs by one field instead of a pattern. uvicorn's
loggers (access and errors of the listeners) are sent through the same
handler, so a pod's output is one format.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Literal

__all__ = ["CONTEXT_KEYS", "JsonFormatter", "LogFormat", "configure"]

LogFormat = Literal["text", "json"]
CONTEXT_KEYS = ("gang", "pod", "workload", "namespace", "node", "check")
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside a message or traceback are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in CONTEXT_KEYS:
            value = record.__dict__.get(key)
            if value is not None:
                out[key] = str(value)
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure(level: str, form: LogFormat) -> None:
    """The root handler in ``form`` at ``level``; uvicorn's loggers propagate to it instead of printing their own."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if form == "json" else logging.Formatter(TEXT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
        logger.setLevel(logging.NOTSET)  # the root's level; uvicorn's Config sets the listeners' own
