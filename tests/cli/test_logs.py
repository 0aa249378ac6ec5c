"""``--log-format``: JSON lines with the gang/pod/workload keys, or text; uvicorn's lines in the same format."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator

import pytest

from kilter.cli.logs import CONTEXT_KEYS, JsonFormatter, configure


@pytest.fixture
def restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    names = ("uvicorn", "uvicorn.error", "uvicorn.access")
    kept = {
        n: (logging.getLogger(n).handlers[:], logging.getLogger(n).propagate, logging.getLogger(n).level) for n in names
    }
    yield
    root.handlers[:], root.level = handlers, level
    for name, (was, propagate, at) in kept.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.propagate, logger.level = was, propagate, at


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("kilter.gangs", logging.WARNING, __file__, 1, message, (), None)
    record.__dict__.update(extra)
    return record


def test_a_json_line_carries_the_keys_a_call_names() -> None:
    line = JsonFormatter().format(_record("gang ml/gang/train: not planned", gang="ml/gang/train", pod="ml/p-0"))
    event = json.loads(line)
    assert event["gang"] == "ml/gang/train" and event["pod"] == "ml/p-0" and "workload" not in event
    assert (event["level"], event["logger"], event["message"]) == (
        "warning",
        "kilter.gangs",
        "gang ml/gang/train: not planned",
    )
    assert event["time"].endswith("+00:00")


def test_a_traceback_stays_on_its_line() -> None:
    try:
        raise ValueError("first\nsecond")
    except ValueError:
        record = _record("failed")
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line and "ValueError" in json.loads(line)["error"]


def test_configure_sends_uvicorn_through_kilters_handler(restored: None, capsys: pytest.CaptureFixture[str]) -> None:
    configure("info", "json")
    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("kilter.gangs").info("planned", extra={"gang": "ml/gang/g"})
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(e["logger"], e.get("gang")) for e in lines] == [("uvicorn.error", None), ("kilter.gangs", "ml/gang/g")]
    assert set(CONTEXT_KEYS) >= {"gang", "pod", "workload"}
