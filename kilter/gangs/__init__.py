"""Gangs: who belongs to one (``GangKey``), their plans and reservations (``GangBook``), and plan records."""

from kilter.gangs import book, identity, keys, recorder, records, refit, trust
from kilter.gangs.book import GangBook, GangPlan, Slot
from kilter.gangs.identity import GangId, GangKey, GangSelector, gang_of, identify, in_gang
from kilter.gangs.keys import PlanKeys
from kilter.gangs.recorder import PlanRecorder
from kilter.gangs.records import PlanRecord

__all__ = [
    "GangBook",
    "GangId",
    "GangKey",
    "GangPlan",
    "GangSelector",
    "PlanKeys",
    "PlanRecord",
    "PlanRecorder",
    "Slot",
    "book",
    "gang_of",
    "identify",
    "identity",
    "in_gang",
    "keys",
    "recorder",
    "records",
    "refit",
    "trust",
]
