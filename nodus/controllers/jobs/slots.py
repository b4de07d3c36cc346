"""What the attempts of one Job say about its slots: per index, what succeeded, failed, was lost, runs.

A slot is one index (ADR 0046 §4). Attempts are kept as they came from the informer (the reconciler
stops and patches them by those very objects) and read through their typed views; nothing here
writes. The counts follow ADR 0046 §4: a customer failure (``Failed``) counts against
``backoffLimit`` over all indexes, lost capacity (``Lost``) against ``recovery.maxAttempts`` per
index, and a ``Stopped`` attempt (suspend, restart, cancel) against neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from nodus.apis.v1 import objects, phases

BOUND: Final[frozenset[phases.AttemptPhase]] = frozenset({"Provisioning", "Starting", "Running"})
"""An attempt in one of these phases holds capacity (the Job reads Provisioning until one runs)."""
TERMINAL = phases.ATTEMPT_FINISHED  # for the importers outside the Job controller's core

Object = dict[str, Any]


def view(attempt: Object) -> objects.Attempt:
    """The typed view of ``attempt`` (cached per resourceVersion, so reading it again is cheap)."""
    return objects.read(objects.Attempt, attempt)


def phase_of(attempt: Object) -> phases.AttemptPhase:
    """The attempt's phase; an attempt no one has reported on yet is Pending."""
    return view(attempt).status.phase or "Pending"


def phase(attempt: Object) -> str:
    """:func:`phase_of` as a plain string, for callers that collect phases of several kinds."""
    return phase_of(attempt)


def is_live(attempt: Object) -> bool:
    return phase_of(attempt) not in phases.ATTEMPT_FINISHED


def index_of(attempt: Object) -> int:
    return view(attempt).spec.index


def number_of(attempt: Object) -> int:
    return view(attempt).spec.number


@dataclass
class Slot:
    """One index: its attempts, oldest first."""

    index: int
    attempts: list[Object] = field(default_factory=list)
    # The attempts' views, by id() of the attempt (held in ``attempts``, so the id stays theirs): a gang's
    # epochs are objects made for this decision, without a resourceVersion to cache their views by.
    views: dict[int, objects.Attempt] = field(default_factory=dict, repr=False)

    def view(self, attempt: Object) -> objects.Attempt:
        """The view of one of the slot's attempts, read once per decision."""
        found = self.views.get(id(attempt))
        return found if found is not None else view(attempt)

    def phase(self, attempt: Object) -> phases.AttemptPhase:
        return self.view(attempt).status.phase or "Pending"

    @property
    def succeeded(self) -> bool:
        return any(self.phase(a) == "Succeeded" for a in self.attempts)

    @property
    def live(self) -> list[Object]:
        return [a for a in self.attempts if self.phase(a) not in phases.ATTEMPT_FINISHED]

    @property
    def lost(self) -> int:
        return sum(1 for a in self.attempts if self.phase(a) == "Lost")

    @property
    def next_number(self) -> int:
        return max((self.view(a).spec.number for a in self.attempts), default=0) + 1

    @property
    def last(self) -> Object | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def recovering(self) -> bool:
        """The slot's latest ended attempt lost its capacity and a replacement is not running yet."""
        ended = [a for a in self.attempts if self.phase(a) in phases.ATTEMPT_FINISHED]
        return (
            bool(ended) and self.phase(ended[-1]) == "Lost" and not any(self.phase(a) == "Running" for a in self.live)
        )


@dataclass
class Slots:
    """Every index of a Job that has attempts, plus the counts the Job's status reports."""

    by_index: dict[int, Slot]
    failed: int
    total: int
    views: dict[int, objects.Attempt] = field(default_factory=dict, repr=False)  # as in ``Slot``

    @classmethod
    def of(cls, attempts: list[Object]) -> Slots:
        views = {id(a): view(a) for a in attempts}
        by_index: dict[int, Slot] = {}
        for attempt in sorted(attempts, key=lambda a: (views[id(a)].spec.index, views[id(a)].spec.number)):
            index = views[id(attempt)].spec.index
            by_index.setdefault(index, Slot(index, views=views)).attempts.append(attempt)
        failed = sum(1 for a in attempts if views[id(a)].status.phase == "Failed")
        return cls(by_index, failed, len(attempts), views)

    def view(self, attempt: Object) -> objects.Attempt:
        """The view of one of the Job's attempts, read once per decision."""
        found = self.views.get(id(attempt))
        return found if found is not None else view(attempt)

    def slot(self, index: int) -> Slot:
        return self.by_index.get(index) or Slot(index, views=self.views)

    def succeeded_indexes(self) -> list[int]:
        return sorted(i for i, s in self.by_index.items() if s.succeeded)

    def live(self) -> list[Object]:
        return [a for s in self.by_index.values() for a in s.live]

    def all(self) -> list[Object]:
        """Every attempt, index by index, oldest first."""
        return [a for s in self.by_index.values() for a in s.attempts]

    def last_failed(self) -> Object | None:
        failed = [a for a in self.all() if self.view(a).status.phase == "Failed"]
        return max(failed, key=lambda a: self.view(a).status.finish_time or "", default=None)
