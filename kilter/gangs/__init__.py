"""Gangs: who belongs to one (``GangKey``), their plans and reservations (``GangBook``), and plan records."""

from kilter.gangs import (
    book,
    decisions,
    identity,
    inventory,
    key_secret,
    keys,
    layout,
    learned,
    owners,
    pending,
    planning,
    ranks,
    recorder,
    records,
    refit,
    running,
    seats,
    story,
    trust,
    wait_settings,
    waits,
)
from kilter.gangs.book import GangBook, GangPlan, Slot
from kilter.gangs.identity import GangId, GangKey, GangSelector, gang_of, identify, in_gang
from kilter.gangs.key_secret import KeySecret
from kilter.gangs.keys import PlanKeys
from kilter.gangs.recorder import PlanRecorder
from kilter.gangs.records import PlanRecord

__all__ = [
    "GangBook",
    "GangId",
    "GangKey",
    "GangPlan",
    "GangSelector",
    "KeySecret",
    "PlanKeys",
    "PlanRecord",
    "PlanRecorder",
    "Slot",
    "book",
    "decisions",
    "gang_of",
    "identify",
    "identity",
    "in_gang",
    "inventory",
    "key_secret",
    "keys",
    "layout",
    "learned",
    "owners",
    "pending",
    "planning",
    "ranks",
    "recorder",
    "records",
    "refit",
    "running",
    "seats",
    "story",
    "trust",
    "wait_settings",
    "waits",
]
