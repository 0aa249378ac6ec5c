"""A plan's life (``gang_plan.Life``) and the book's one door for settings (``GangBook.configure``)."""

from __future__ import annotations

import pytest

from kilter.gangs import GangBook, identify, trust
from kilter.gangs.book import BookSettings
from kilter.gangs.gang_plan import INFEASIBLE_RETRY_S, Life, Origin, PodRef, Stage
from kilter.gangs.waits import SplitWaits
from kilter.topology.plan import Plan
from kilter.topology.split_wait import SplitWait
from tests.gangs.test_book import pod, store_with

FITS = Plan(True, "fits", "ml/gang/g")
DOES_NOT_FIT = Plan(False, "no room", "ml/gang/g")
UNSEEN = PodRef("ml", "g-0", "uid-0")


def test_a_plan_made_is_open_when_it_fits_and_unplaceable_when_not() -> None:
    assert Life.made(FITS).stage is Stage.OPEN and Life.made(DOES_NOT_FIT).stage is Stage.UNPLACEABLE
    repair = Life.made(FITS, Origin.REPAIR)
    assert repair.origin == "repair" and repair.verified and not repair.admitted


def test_an_open_plan_stands_however_old_and_an_infeasible_one_until_retry_or_gpus_freed() -> None:
    open_ = Life.made(FITS).asked_by(None, admitted=False, free_at=10)
    assert open_.stands(age_s=10_000.0, free_gpus=500)
    unplaceable = Life.made(DOES_NOT_FIT).asked_by(None, admitted=False, free_at=10)
    assert unplaceable.stands(age_s=INFEASIBLE_RETRY_S - 0.1, free_gpus=10)
    assert not unplaceable.stands(age_s=INFEASIBLE_RETRY_S, free_gpus=10)  # due again
    assert not unplaceable.stands(age_s=0.0, free_gpus=11)  # a GPU came free: it may fit now


@pytest.mark.parametrize(("remaining_s", "retry_s"), [(2.0, 2.0), (600.0, INFEASIBLE_RETRY_S)])
def test_a_gang_held_back_is_asked_again_when_its_budget_runs_out_or_within_the_usual_retry(
    remaining_s: float, retry_s: float
) -> None:
    held = Life.held_back(remaining_s)
    assert held.stage is Stage.WAITING and held.retry_s == retry_s


def test_a_plan_for_an_unseen_pod_is_unverified_until_verified_and_a_refusal_never_is() -> None:
    unseen = Life.made(FITS).asked_by(UNSEEN, admitted=True, free_at=0)
    assert not unseen.verified and unseen.admitted and unseen.unseen == UNSEEN
    assert unseen.verify().verified and unseen.verify().stage is Stage.OPEN and unseen.verify().admitted
    assert not Life.refused().verified


def test_configure_changes_the_timeout_of_plans_already_open() -> None:
    store, now = store_with(), [0.0]
    book = GangBook(store, clock=lambda: now[0])
    p = pod({"kilter.dev/gang": "g", "kilter.dev/gang-size": "2"})
    gang = identify(p, store)
    assert gang is not None and book.plan_for(gang, p, 4) is not None
    now[0] = 25.0  # within the 30 s an unseen pod's plan waits for the pod
    book.expire()
    assert book.is_planned("ml/gang/g")  # the default timeout is 300 s
    book.configure(BookSettings(timeout_s=20.0))
    book.expire()
    assert book.open_count() == 0 and book.settings.timeout_s == 20.0


def test_configure_changes_the_limits_the_next_plan_meets_and_the_split_wait_rule() -> None:
    store = store_with()
    book = GangBook(store, waits=SplitWaits(store))
    first, second = (
        pod({"kilter.dev/gang": "a", "kilter.dev/gang-size": "2"}),
        pod({"kilter.dev/gang": "b", "kilter.dev/gang-size": "2"}, name="q"),
    )
    a, b = identify(first, store), identify(second, store)
    assert a is not None and b is not None
    made = book.plan_for(a, first, 4)
    assert made is not None and made.feasible
    rule = SplitWait(0.5, 7200.0, 2.0)
    book.configure(BookSettings(limits=trust.Limits(max_plans=1), split_wait=rule))
    refused = book.plan_for(b, second, 4)
    assert refused is not None and not refused.feasible and "its limit" in refused.plan.reason
    assert book.gang_keys() == ["ml/gang/a"] and book.refused == 1
    assert book.waits is not None and book.waits.defaults == rule
