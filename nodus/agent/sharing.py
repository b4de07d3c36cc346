"""Whether the agent starts an attempt now on a shared host: its GPUs against the runs going on (ADR 0048).

A host runs several attempts at once when the scheduler gave each its own GPU ordinals
(``status.placement.gpuIndexes``). The agent starts an attempt when its ordinals are the host's and
disjoint from every active run's, and no active run holds the whole host. An attempt placed without
``gpuIndexes`` (the whole host, as before hosts were shared) or with ``placement.dedicated`` starts only
on an idle host, and nothing starts beside it: one at a time, as before.

An attempt that names GPUs this host does not have is refused: it would otherwise wait forever, or run
on devices it was not given. The refusal ends it ``Failed`` with :data:`REASON`, naming the ordinals.

:func:`decide` is pure: the daemon passes what the attempt and its runs hold and acts on the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

REASON = "GPUsNotOnHost"


@dataclass(frozen=True, slots=True)
class Holding:
    """What one attempt holds of the host: its GPU ordinals (None: the whole host) and whether it is dedicated."""

    gpus: tuple[int, ...] | None
    dedicated: bool = False

    @property
    def whole(self) -> bool:
        return self.gpus is None or self.dedicated


@dataclass(frozen=True, slots=True)
class Start:
    """Start it now, giving it ``gpus`` (the host's ordinals it was placed on; all of them for a whole host)."""

    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    """Not yet: a run it may not share the host with is still going."""


@dataclass(frozen=True, slots=True)
class Refuse:
    """Never here: ``message`` says why (it ends ``Failed`` with :data:`REASON`)."""

    message: str


def decide(attempt: Holding, host_gpus: Sequence[int], active: Iterable[Holding]) -> Start | Wait | Refuse:
    """What to do with an attempt assigned here and not yet run, given the runs still going (``active``)."""
    if attempt.gpus is not None:
        absent = sorted(set(attempt.gpus) - set(host_gpus))
        if absent:
            have = ",".join(str(i) for i in host_gpus) or "none"
            return Refuse(
                f"The placement gives this attempt GPUs {','.join(str(i) for i in absent)}, which this host does not "
                f"have (its GPUs: {have}); the Job places a new attempt."
            )
    going = list(active)
    if attempt.whole:
        return Wait() if going else Start(tuple(attempt.gpus) if attempt.gpus is not None else tuple(host_gpus))
    assert attempt.gpus is not None
    held: set[int] = set()
    for run in going:
        if run.whole:
            return Wait()
        held |= set(run.gpus or ())
    return Wait() if held & set(attempt.gpus) else Start(attempt.gpus)
