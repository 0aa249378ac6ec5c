"""Job traces for the simulator: what was submitted when, for how long, on how many GPUs, to which queue.

Three CSV formats are read, told apart by their header line:

- **Philly** (``timestamp,duration,num_gpus,gpu_time,cluster``): Microsoft's Philly trace as the Pollux
  artifact ships it (see ``shared/data/traces/philly/SOURCE.md``). ``timestamp`` is wall-clock
  ``YYYY-MM-DD HH:MM:SS`` in the cluster's local time with no zone, so submit times are differences of wall-clock
  readings: a daylight-saving change inside the trace shifts later jobs by that hour, which we cannot undo
  without the zone. ``cluster`` is the virtual cluster, which is the tenant and so the queue. ``gpu_time`` is
  ``duration × num_gpus`` and is ignored.
- **generic** (``submit_time,duration,gpus[,queue]``): seconds, any origin; without a ``queue`` column, or with a
  blank cell, the job goes to queue ``default``.
- **Helios** (``job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue``):
  a ``cluster_log.csv`` of SenseTime's Helios traces (``S-Lab-System-Group/HeliosData``, Hu et al., SC '21), one
  Slurm job a row. Times are wall-clock ``YYYY-MM-DD HH:MM:SS`` read like Philly's; a job runs for
  ``end_time - start_time`` and goes to the queue of its ``vc``, the virtual cluster. Helios' own ``queue`` column
  is the time the job waited, not a queue, and is ignored with ``duration`` (the same difference), ``job_id``,
  ``user``, ``cpu_num``, ``node_num`` and ``state``: a job that ran held its GPUs whether it completed, failed or
  was cancelled. Two kinds of row are dropped rather than refused, because the log is full of them: CPU-only jobs
  (``gpu_num`` 0; about half the log) and jobs that never ran (a blank ``start_time`` or ``end_time``, or an
  ``end_time`` equal to the ``start_time``: a job cancelled in the queue held nothing to replay).

Rows may come in any order and blank lines are skipped. Jobs are sorted by submit time (stable, so ties keep file
order), the first submission becomes second 0, and ``TraceJob.id`` is the position after sorting. Anything that
cannot be used raises ``InputError`` with one line naming the file and, where one exists, the line.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import itemgetter
from pathlib import Path

from kilter.model.errors import InputError

__all__ = [
    "GENERIC_HEADER",
    "HELIOS_HEADER",
    "PHILLY_HEADER",
    "Row",
    "TraceJob",
    "check_scales",
    "make_jobs",
    "read_trace",
]

PHILLY_HEADER = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
GENERIC_HEADER = ("submit_time", "duration", "gpus", "queue")  # queue is optional
HELIOS_HEADER = (
    "job_id", "user", "vc", "gpu_num", "cpu_num", "node_num", "state",
    "submit_time", "start_time", "end_time", "duration", "queue",
)  # fmt: skip
DEFAULT_QUEUE = "default"

Row = tuple[float, float, int, str]
"""One job before sorting: submit time (s, any origin), duration (s), GPUs, queue."""

_STAMP = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_EPOCH = datetime(2000, 1, 1)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace; times in seconds, ``submit_s`` counted from the trace's first submission."""

    id: int  # position in submit order
    submit_s: float
    duration_s: float  # time the job ran once started; queueing is the simulator's to add
    gpus: int
    queue: str


def read_trace(path: Path, *, gpu_scale: int = 1, time_scale: float = 1.0, limit: int | None = None) -> list[TraceJob]:
    """Read a Philly or generic CSV trace; see ``make_jobs`` for what the scales and ``limit`` do."""
    text = _read_text(path)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}:1: empty file, expected a header line")
        parse = _parser_for(tuple(cell.strip().lower() for cell in header), path)
        width = len(header)
        rows: list[Row] = []
        dropped = 0
        for fields in reader:
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if len(fields) != width:
                raise InputError(f"{path}:{reader.line_num}: expected {width} fields, got {len(fields)}")
            try:
                row = parse(fields)
            except ValueError as err:
                raise InputError(f"{path}:{reader.line_num}: {err}") from None
            if row is None:
                dropped += 1
            else:
                rows.append(row)
    except csv.Error as err:
        raise InputError(f"{path}:{reader.line_num}: {err}") from None
    if not rows and dropped:
        raise InputError(f"{path}: none of its {dropped} jobs both asked for GPUs and ran")
    if not rows:
        raise InputError(f"{path}:{reader.line_num + 1}: the trace has no jobs after its header")
    return make_jobs(rows, gpu_scale=gpu_scale, time_scale=time_scale, limit=limit)


def make_jobs(
    rows: Sequence[Row], *, gpu_scale: int = 1, time_scale: float = 1.0, limit: int | None = None
) -> list[TraceJob]:
    """Turn (submit, duration, GPUs, queue) rows in any order into a replayable trace.

    Rows are sorted by submit time (stable) and only the first ``limit`` are kept. Submit times are then rebased so
    that the first is 0. ``gpu_scale`` multiplies every job's GPUs; it maps a 2017 trace of 1–8 GPU jobs onto
    NVL72-era fleets. ``time_scale`` multiplies every submit time *and* every duration. The jobs, their order and
    which of them overlap stay the same, so the offered load does not change (GPU-seconds asked per second of
    trace); only the clock runs faster (< 1) or slower (> 1). To load a fleet harder, scale GPUs or shrink the fleet.
    """
    check_scales(gpu_scale, time_scale)
    if limit is not None and limit < 1:
        raise InputError(f"limit must be at least 1 job, got {limit!r}")
    ordered = sorted(rows, key=itemgetter(0))[:limit]
    if not ordered:
        raise InputError("the trace has no jobs")
    origin = ordered[0][0]
    return [
        TraceJob(i, (submit - origin) * time_scale, duration * time_scale, gpus * gpu_scale, queue)
        for i, (submit, duration, gpus, queue) in enumerate(ordered)
    ]


def check_scales(gpu_scale: int, time_scale: float) -> None:
    """Raise ``InputError`` unless the scales are ones ``make_jobs`` accepts; lets a generator fail before drawing."""
    if isinstance(gpu_scale, bool) or not isinstance(gpu_scale, int) or gpu_scale < 1:
        raise InputError(f"gpu_scale must be a whole number of at least 1, got {gpu_scale!r}")
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise InputError(f"time_scale must be a finite number above 0, got {time_scale!r}")


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read the trace: {err.strerror or err}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {err.start})") from None


def _parser_for(header: tuple[str, ...], path: Path) -> Callable[[list[str]], Row | None]:
    """The row parser for a header; a parser returns ``None`` for a row the format drops."""
    if header == PHILLY_HEADER:
        return _philly_row
    if header in (GENERIC_HEADER, GENERIC_HEADER[:3]):
        return _generic_row
    if header == HELIOS_HEADER:
        return _helios_row
    raise InputError(
        f"{path}:1: unknown header {','.join(header)!r}; expected {','.join(PHILLY_HEADER)!r} (Philly), "
        f"'submit_time,duration,gpus[,queue]' (generic) or {','.join(HELIOS_HEADER)!r} (Helios)"
    )


def _philly_row(fields: list[str]) -> Row:
    stamp, duration, gpus, _gpu_time, cluster = fields
    return _wall_clock_s(stamp.strip()), _duration_s(duration), _gpus(gpus), _queue(cluster)


def _generic_row(fields: list[str]) -> Row:
    queue = _queue(fields[3]) if len(fields) == 4 else DEFAULT_QUEUE
    return _number(fields[0], "submit_time"), _duration_s(fields[1]), _gpus(fields[2]), queue


def _helios_row(fields: list[str]) -> Row | None:
    _job, _user, vc, gpu_num, _cpus, _nodes, _state, submit, start, end, _duration, _waited = fields
    submit_s = _wall_clock_s(submit.strip(), "submit_time")
    gpus = _gpu_count(gpu_num)
    start, end = start.strip(), end.strip()
    start_s = _wall_clock_s(start, "start_time") if start else None
    end_s = _wall_clock_s(end, "end_time") if end else None
    if start_s is not None and end_s is not None and end_s < start_s:
        raise ValueError(f"end_time {end!r} is before start_time {start!r}")
    if gpus == 0 or start_s is None or end_s is None or end_s == start_s:
        return None
    return submit_s, end_s - start_s, gpus, _queue(vc)


def _wall_clock_s(stamp: str, name: str = "timestamp") -> float:
    if not _STAMP.fullmatch(stamp):
        raise ValueError(f"{name} {stamp!r} is not YYYY-MM-DD HH:MM:SS")
    try:
        return (datetime.fromisoformat(stamp) - _EPOCH).total_seconds()
    except ValueError:
        raise ValueError(f"{name} {stamp!r} is not a real date and time") from None


def _number(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} {text.strip()!r} is not a number") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} {text.strip()!r} is not a finite number")
    return value


def _duration_s(text: str) -> float:
    value = _number(text, "duration")
    if value < 0:
        raise ValueError(f"duration {text.strip()!r} is negative")
    return value


def _gpus(text: str) -> int:
    value = _gpu_count(text)
    if value < 1:
        raise ValueError(f"GPU count {value} is below 1")
    return value


def _gpu_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"GPU count {text.strip()!r} is not a whole number") from None
    if value < 0:
        raise ValueError(f"GPU count {value} is below 0")
    return value


def _queue(text: str) -> str:
    return text.strip() or DEFAULT_QUEUE
