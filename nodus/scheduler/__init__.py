"""The scheduler: a pure, numbered cycle that places pending Attempts on offerings and warm hosts.

The controller lists Offerings, Nodes and pending Attempts, builds a :class:`Snapshot` with
``Offering.from_object``, ``Host.from_object`` and ``Work.from_object``, and calls
:func:`run_cycle`. Nothing in this package does I/O, reads a clock or imports the API server, the
storage layer or the client (only the standard library and ``nodus.apimachinery``); the modules
are ``snapshot`` (the typed inputs), ``filters`` (does an offering fit), ``scoring`` (which fitting
option is best, per profile), ``gangs`` (an epoch's ranks placed together or not at all, under their
network and transport), ``explaining`` (the words users read) and ``cycle`` (the loop).
"""

from __future__ import annotations

from nodus.scheduler.capacity import Host, Offering
from nodus.scheduler.cycle import Binding, CycleResult, Unschedulable, run_cycle
from nodus.scheduler.snapshot import GangKey, GangRequest, Snapshot, Work, WorkKey

__all__ = [
    "Binding",
    "CycleResult",
    "GangKey",
    "GangRequest",
    "Host",
    "Offering",
    "Snapshot",
    "Unschedulable",
    "Work",
    "WorkKey",
    "run_cycle",
]
