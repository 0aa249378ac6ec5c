"""The server's one expected-starts answer: worked out in a worker thread while the doors keep reservations, read by
every door without waiting, and shared by the views, ``Plan`` and the metrics of one server."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path

import pytest

from kilter.gangs.store_starts import StartsOfStore
from kilter.state.store import ClusterStore
from tests.extenders.conftest import names_args, pod_json, serve_snapshot
from tests.gangs import starts_scenario as sc


def test_the_background_refresh_works_the_answer_out_off_the_event_loop_only_while_reservations_are_kept() -> None:
    store = ClusterStore()
    store.replace(sc.objects())
    keep = [False]
    threads: list[int] = []
    starts = StartsOfStore(store, lambda: sc.NOW, keep=lambda: keep[0])
    work_out = starts._work_out

    def spy(given: object) -> object:
        threads.append(threading.get_ident())
        return work_out(given)  # type: ignore[arg-type]

    starts._work_out = spy  # type: ignore[method-assign,assignment]

    async def run(rounds: int) -> int:
        """Keep fresh for ``rounds`` periods of 10 ms (or until two answers, when kept); the loop's thread."""
        task = asyncio.get_running_loop().create_task(starts.keep_fresh(0.01))
        for _ in range(rounds):
            await asyncio.sleep(0.01)
            if starts.refreshed >= 2:
                break
        task.cancel()
        return threading.get_ident()

    asyncio.run(run(10))
    assert starts.refreshed == 0 and threads == []  # nothing kept: nothing worked out in the background
    keep[0] = True
    loop_thread = asyncio.run(run(3000))
    assert starts.refreshed >= 2 and threads and all(t != loop_thread for t in threads)
    kept = starts.kept()
    assert kept is not None and kept.starts.kept and kept.starts.now_s == sc.NOW


def test_one_server_keeps_one_answer_for_its_views_its_plan_and_its_metrics(tmp_path: Path) -> None:
    with serve_snapshot(tmp_path, sc.objects(), reservations=True) as served:
        gangs = served.app.extender.gangs
        assert gangs.settings.reservations
        views = served.app.views
        assert views is not None and views.__self__.starts is gangs.starts  # type: ignore[attr-defined]
        assert gangs.starts.observe is not None  # the metrics watch the very answers the doors keep


def test_over_loopback_kilter_serve_keeps_the_reservation_its_background_answer_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kilter serve --reservations on`` from a snapshot whose clock is now: the background refresh makes the
    kept reservation, and the filter answered over HTTP keeps a pod of no gang that would outlast it off r1."""
    monkeypatch.setattr(sc, "NOW", float(math.floor(time.time())))
    with serve_snapshot(tmp_path, sc.objects(), reservations=True) as served:
        gangs = served.app.extender.gangs
        deadline = time.monotonic() + 30
        while (kept := gangs.kept()) is None:
            assert time.monotonic() < deadline, "no kept reservation was worked out in the background"
            time.sleep(0.05)
        [sentence] = kept.sentences
        assert sentence.startswith("r1 is reserved for ml/rack-a from ") and gangs.starts.refreshed >= 1
        pod = pod_json("forever", 4)
        status, result = served.post("filter", names_args(pod, ["r1-t00", "r2-t00"]))
        assert status == 200 and result["NodeNames"] == ["r2-t00"]
        assert result["FailedAndUnresolvableNodes"] == {"r1-t00": f"the pod would delay a reservation: {sentence}"}
