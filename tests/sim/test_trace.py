"""Reading job traces: the three CSV formats, sorting, scaling, limits, and one-line errors for bad input."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kilter.model.errors import InputError
from kilter.sim.trace import TraceJob, read_trace

PHILLY = Path(__file__).resolve().parents[3] / "shared/data/traces/philly/philly.csv"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
HELIOS_HEADER = "job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"


def write(tmp_path: Path, text: str | bytes, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_generic_rows_out_of_order_come_back_sorted_from_second_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus,queue\n500,10,2,b\n100,20,1,a\n300.5,30,4,a\n")
    assert read_trace(path) == [
        TraceJob(0, 0.0, 20.0, 1, "a"),
        TraceJob(1, 200.5, 30.0, 4, "a"),  # 300.5 - 100
        TraceJob(2, 400.0, 10.0, 2, "b"),
    ]


def test_jobs_submitted_in_the_same_second_keep_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus,queue\n7,1,1,x-last\n5,1,1,z-first\n5,1,1,y-second\n")
    assert [job.queue for job in read_trace(path)] == ["z-first", "y-second", "x-last"]


def test_a_trace_without_a_queue_column_puts_every_job_in_the_default_queue(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus\n0,1,1\n1,1,8\n")
    assert {job.queue for job in read_trace(path)} == {"default"}


def test_a_blank_queue_cell_means_the_default_queue(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus,queue\n0,1,1,\n1,1,1,team-a\n")
    assert [job.queue for job in read_trace(path)] == ["default", "team-a"]


def test_gpu_scale_multiplies_gpus_and_time_scale_multiplies_submit_times_and_durations(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus\n1000,60,2\n1100,30,1\n")
    assert read_trace(path, gpu_scale=4, time_scale=0.5) == [
        TraceJob(0, 0.0, 30.0, 8, "default"),
        TraceJob(1, 50.0, 15.0, 4, "default"),  # (1100 - 1000) × 0.5
    ]


def test_limit_keeps_the_first_jobs_by_submit_time_not_by_file_order(tmp_path: Path) -> None:
    path = write(tmp_path, "submit_time,duration,gpus,queue\n30,1,1,c\n10,1,1,a\n40,1,1,d\n20,1,1,b\n")
    assert [(job.id, job.queue) for job in read_trace(path, limit=2)] == [(0, "a"), (1, "b")]


def test_philly_rows_become_seconds_since_the_first_submission_with_the_cluster_as_queue(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        PHILLY_HEADER
        + "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
        + "2017-10-08 23:59:59,2951.0,8,23608.0,6214e9\n"
        + "2017-10-09 00:00:01,5.0,2,10.0,6c71a0\n"
        + "\n",  # the real file ends with a blank line
    )
    assert read_trace(path) == [
        TraceJob(0, 0.0, 2951.0, 8, "6214e9"),
        TraceJob(1, 2.0, 5.0, 2, "6c71a0"),  # across midnight
        TraceJob(2, 25_316.0, 66.0, 1, "11cb48"),  # 7 h 1 min 56 s after 23:59:59
    ]


AT, LATER = "2020-06-09 18:41:01", "2020-06-10 00:00:00"  # a start and an end for the Helios rows below


def helios_row(gpus: str, submit: str, start: str, end: str, vc: str = "vcJkd", state: str = "COMPLETED") -> str:
    """One ``cluster_log.csv`` row; the columns the reader ignores carry plausible values."""
    return f"1425511,uXBbc,{vc},{gpus},8,1,{state},{submit},{start},{end},0,0\n"


def test_helios_gpu_jobs_that_ran_become_seconds_since_the_first_of_them_with_the_vc_as_queue(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        HELIOS_HEADER
        + "1425511,uXBbc,vcJkd,1,1,1,COMPLETED,2020-06-09 18:41:01,2020-06-09 18:41:01,2020-06-10 04:55:09,36848,0\n"
        + "1425512,uVMrF,vchbv,4,16,1,FAILED,2020-06-09 18:41:27,2020-06-09 18:41:27,2020-06-09 18:45:36,249,0\n"
        + helios_row("16", "2020-06-09 23:59:59", "2020-06-10 00:10:00", "2020-06-10 02:10:00", "vcvlY", "CANCELLED")
        + helios_row("0", "2020-06-09 18:00:00", "2020-06-09 18:00:00", "2020-06-09 19:00:00")  # CPU only
        + helios_row("8", "2020-06-09 18:42:00", "", "", state="CANCELLED")  # never started
        + helios_row("8", "2020-06-09 18:43:00", "2020-06-09 19:00:00", "2020-06-09 19:00:00", state="CANCELLED"),
    )
    assert read_trace(path) == [
        TraceJob(0, 0.0, 36_848.0, 1, "vcJkd"),  # the CPU-only job's earlier submission is not second 0
        TraceJob(1, 26.0, 249.0, 4, "vchbv"),
        TraceJob(2, 19_138.0, 7_200.0, 16, "vcvlY"),  # end - start; its 10 min in Slurm's queue are not replayed
    ]


def test_a_helios_log_with_no_gpu_job_that_ran_is_an_input_error_counting_what_it_dropped(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HELIOS_HEADER
        + helios_row("0", "2020-06-09 18:00:00", "2020-06-09 18:00:00", "2020-06-09 19:00:00")
        + helios_row("2", "2020-06-09 18:42:00", "", "", state="CANCELLED"),
    )
    with pytest.raises(InputError) as caught:
        read_trace(path)
    assert str(caught.value) == f"{path}: none of its 2 jobs both asked for GPUs and ran"


@pytest.mark.parametrize(
    ("text", "line", "says"),
    [
        pytest.param("", 1, "empty file", id="an empty file"),
        pytest.param("start,length,gpus\n0,1,1\n", 1, "unknown header", id="an unknown header"),
        pytest.param("submit_time,duration,gpus\n", 2, "no jobs", id="a header and no jobs"),
        pytest.param("submit_time,duration,gpus\n\n\n", 4, "no jobs", id="a header and blank lines"),
        pytest.param("submit_time,duration,gpus\n0,1,1\n1,x,1\n", 3, "duration 'x' is not a number", id="a word"),
        pytest.param("submit_time,duration,gpus\nsoon,1,1\n", 2, "submit_time 'soon'", id="a word for a time"),
        pytest.param("submit_time,duration,gpus\n0,nan,1\n", 2, "not a finite number", id="NaN duration"),
        pytest.param("submit_time,duration,gpus\n0,-5,1\n", 2, "negative", id="a negative duration"),
        pytest.param("submit_time,duration,gpus\n0,1,0\n", 2, "below 1", id="zero GPUs"),
        pytest.param("submit_time,duration,gpus\n0,1,1.5\n", 2, "whole number", id="half a GPU"),
        pytest.param("submit_time,duration,gpus\n0,1\n", 2, "expected 3 fields, got 2", id="a short row"),
        pytest.param(PHILLY_HEADER + "2017-13-01 00:00:00,1,1,1,a\n", 2, "not a real date", id="month 13"),
        pytest.param(PHILLY_HEADER + "2017-10-01T00:00:00+02:00,1,1,1,a\n", 2, "YYYY-MM-DD", id="a zone"),
        pytest.param(PHILLY_HEADER + "1506816000,1,1,1,a\n", 2, "YYYY-MM-DD", id="epoch seconds"),
        pytest.param(b"submit_time,duration,gpus\n0,1,1\n0,1,\xff\n", 3, "not UTF-8", id="bytes that are not UTF-8"),
        pytest.param(
            HELIOS_HEADER + helios_row("1", AT, AT, "yesterday"), 2, "end_time 'yesterday'", id="Helios word end"
        ),
        pytest.param(HELIOS_HEADER + helios_row("1", "", AT, LATER), 2, "submit_time ''", id="Helios no submit"),
        pytest.param(
            HELIOS_HEADER + helios_row("1", AT, AT, "2020-06-09 18:00:00"),
            2,
            "end_time '2020-06-09 18:00:00' is before start_time",
            id="Helios end before start",
        ),
        pytest.param(HELIOS_HEADER + helios_row("-1", AT, AT, LATER), 2, "below 0", id="Helios -1 GPU"),
        pytest.param(HELIOS_HEADER + helios_row("two", AT, AT, LATER), 2, "whole number", id="Helios word GPU"),
        pytest.param(
            HELIOS_HEADER + f"1,u,vc,1,1,1,COMPLETED,{AT},{AT},{LATER},0\n", 2, "expected 12 fields", id="Helios short"
        ),
    ],
)
def test_bad_input_is_an_input_error_naming_the_file_and_line(
    tmp_path: Path, text: str | bytes, line: int, says: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_trace(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: ")
    assert says in message
    assert "\n" not in message


def test_a_missing_file_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    with pytest.raises(InputError, match=r"nope\.csv: cannot read the trace: No such file"):
        read_trace(path)


def test_a_directory_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the trace"):
        read_trace(tmp_path)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        pytest.param({"gpu_scale": 0}, "gpu_scale", id="gpu_scale 0"),
        pytest.param({"time_scale": 0.0}, "time_scale", id="time_scale 0"),
        pytest.param({"time_scale": float("inf")}, "time_scale", id="time_scale infinite"),
        pytest.param({"limit": 0}, "limit", id="limit 0"),
    ],
)
def test_scales_and_limits_that_make_no_sense_are_input_errors(
    tmp_path: Path, options: dict[str, Any], says: str
) -> None:
    path = write(tmp_path, "submit_time,duration,gpus\n0,1,1\n")
    with pytest.raises(InputError, match=says):
        read_trace(path, **options)


@pytest.fixture(scope="module")
def philly() -> list[TraceJob]:
    if not PHILLY.exists():
        pytest.skip(f"the real Philly trace is not at {PHILLY} (it lives in ../shared next to the repository)")
    return read_trace(PHILLY)


def test_the_real_philly_trace_reads_as_sorted_jobs_from_second_zero(philly: list[TraceJob]) -> None:
    assert len(philly) == 82_247
    assert philly[0].submit_s == 0.0
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(philly))
    assert [job.id for job in philly] == list(range(82_247))
    assert philly[-1].submit_s == 9_408_690.0  # 2017-09-04 10:30:41 to 2017-12-22 08:02:11


def test_the_real_philly_trace_has_the_job_sizes_and_tenants_of_source_md(philly: list[TraceJob]) -> None:
    sizes = Counter(job.gpus for job in philly)
    assert sorted(sizes) == [1, 2, 4, 8, 12, 16, 24, 32, 64, 128]
    assert sizes[1] == 76_627
    assert sum(n for gpus, n in sizes.items() if 2 <= gpus <= 8) == 5_331
    assert sum(n for gpus, n in sizes.items() if 9 <= gpus <= 64) == 286
    assert sum(n for gpus, n in sizes.items() if gpus > 64) == sizes[128] == 3
    queues = Counter(job.queue for job in philly)
    assert len(queues) == 15
    assert (queues["6214e9"], queues["11cb48"]) == (41_226, 16_091)
    assert sum(1 for n in queues.values() if n < 10) == 4
