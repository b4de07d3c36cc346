"""The phases of Jobs, Attempts and Nodes, and the sets of them that mean something, each written once.

A phase is a ``Literal`` so that a comparison with a misspelt phase is a type error (mypy's strict
equality) wherever a typed view's ``status.phase`` is read. The sets answer the questions every reader
asks: is it over, may it still run, can a host take work. A Job is *finished* in Succeeded, Failed or
Cancelled; an Attempt in Succeeded, Failed, Lost or Stopped (``Lost``: its host went silent,
``Stopped``: Nodus asked it to stop).
"""

from __future__ import annotations

from typing import Final, Literal

JobPhase = Literal[
    "Pending",
    "Queued",
    "Provisioning",
    "Running",
    "Recovering",
    "Suspending",
    "Suspended",
    "Succeeded",
    "Failed",
    "Cancelled",
]
AttemptPhase = Literal["Pending", "Provisioning", "Starting", "Running", "Succeeded", "Failed", "Lost", "Stopped"]
NodePhase = Literal["Booting", "Ready", "Lost", "Failed", "Terminating"]

JOB_FINISHED: Final[frozenset[JobPhase]] = frozenset({"Succeeded", "Failed", "Cancelled"})
"""A Job in one of these phases never runs again (its TTL after finish counts from here)."""

ATTEMPT_FINISHED: Final[frozenset[AttemptPhase]] = frozenset({"Succeeded", "Failed", "Lost", "Stopped"})
"""An Attempt in one of these phases has ended: its program runs nowhere and its bill is final."""

NODE_USABLE: Final[frozenset[NodePhase]] = frozenset({"Booting", "Ready"})
"""A Node in one of these phases can take attempts (a Booting one once it is Ready)."""

NODE_GONE: Final[frozenset[NodePhase]] = frozenset({"Lost", "Failed", "Terminating"})
"""A Node in one of these phases will never run anything again; its capacity is released."""
