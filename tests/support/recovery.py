"""What must hold after Jobs survived lost capacity, checked over the Jobs and Attempts as the API returns them.

Shared by ``tests/e2e/running/test_chaos.py`` and ``bench/recovery.py``. Pure functions: nothing here reads
the API or the clock. The invariants (ADR 0024):

* **Nothing is lost**: every Job ends ``Succeeded``.
* **Resumed from the latest**: a replacement (attempt number > 1) of an index restores the newest checkpoint
  any earlier attempt of that index committed (highest ``status.checkpoint.seq`` with a manifest), or
  restores nothing when none did; once started, its agent reports that seq as ``restoredFromSeq``.
* **Never twice at once**: no two attempts of an index ran at the same time, their ``[startTime,
  finishTime)`` intervals are disjoint. Times have whole seconds, so intervals that only share a boundary
  second do not count as overlapping.
* **Recovery time**: from the loss of an attempt to the start of the next attempt of its index that
  started. The loss is when the caller injected the fault (by attempt or node name), else the lost
  attempt's ``finishTime``; the part until that ``finishTime`` (the loss noticed and recorded) is kept
  apart as ``ended_after``.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nodus.apimachinery import units

Object = dict[str, Any]


@dataclass(frozen=True)
class Recovery:
    """One lost attempt and the attempt that took over its index."""

    lost: str
    replacement: str
    reason: str  # the lost attempt's status.reason: Preempted, NodeLost, ...
    seconds: float  # from the loss to the replacement's start
    ended_after: float  # of which from the loss to the lost attempt's finishTime (its end, as recorded)


@dataclass(frozen=True)
class Report:
    jobs: int
    not_succeeded: tuple[str, ...]  # "name: phase" of every Job that did not succeed (the Jobs lost)
    replacements: int  # attempts with number > 1
    not_latest: tuple[str, ...]  # why each replacement that did not resume from the latest did not
    overlaps: tuple[str, ...]  # "a and b" for each pair of attempts of one index that ran at once
    recoveries: tuple[Recovery, ...]
    lost_attempts: int

    @property
    def resumed_from_latest(self) -> float:
        """The share of replacements that restored the newest committed checkpoint (1.0 without any)."""
        return 1.0 if self.replacements == 0 else (self.replacements - len(self.not_latest)) / self.replacements

    def recovery_seconds(self, q: float, reason: str | None = None, part: str = "seconds") -> float:
        """The q-th percentile (0-100) of recovery times (``part``: or ``ended_after``), of one loss ``reason``
        or all; NaN without any."""
        return percentile([getattr(r, part) for r in self.recoveries if reason in (None, r.reason)], q)

    def summary(self) -> str:
        return (
            f"{self.jobs} Jobs, lost {len(self.not_succeeded)}; {self.lost_attempts} attempts lost, "
            f"{self.replacements} replacements, {100 * self.resumed_from_latest:.0f} % resumed from the latest; "
            f"overlaps {len(self.overlaps)}; recovery p50 {self.recovery_seconds(50):.1f} s, "
            f"p95 {self.recovery_seconds(95):.1f} s over {len(self.recoveries)}"
        )


def check(jobs: Iterable[Object], attempts: Iterable[Object], injected: Mapping[str, datetime] | None = None) -> Report:
    """The report for ``jobs`` and all their ``attempts``; ``injected``: when the caller caused each loss,
    keyed by attempt name or by node name (a node's faults end every attempt on it)."""
    jobs = list(jobs)
    not_succeeded = tuple(
        f"{j['metadata']['name']}: {(j.get('status') or {}).get('phase')}"
        for j in jobs
        if (j.get("status") or {}).get("phase") != "Succeeded"
    )
    slots: dict[tuple[str, str, int], list[Object]] = defaultdict(list)
    for attempt in attempts:
        spec = attempt["spec"]
        slots[(attempt["metadata"].get("namespace") or "", spec["job"], int(spec["index"]))].append(attempt)
    not_latest: list[str] = []
    overlaps: list[str] = []
    recoveries: list[Recovery] = []
    replacements = lost = 0
    for slot in slots.values():
        slot.sort(key=lambda a: int(a["spec"]["number"]))
        for n, attempt in enumerate(slot):
            lost += _phase(attempt) == "Lost"
            if int(attempt["spec"]["number"]) > 1:
                replacements += 1
                problem = _not_latest(attempt, slot[:n])
                if problem:
                    not_latest.append(f"{attempt['metadata']['name']}: {problem}")
        overlaps += _overlaps(slot)
        recoveries += _recoveries(slot, injected or {})
    return Report(
        jobs=len(jobs),
        not_succeeded=not_succeeded,
        replacements=replacements,
        not_latest=tuple(not_latest),
        overlaps=tuple(overlaps),
        recoveries=tuple(recoveries),
        lost_attempts=lost,
    )


def _phase(attempt: Object) -> str:
    return str((attempt.get("status") or {}).get("phase") or "")


def _time(attempt: Object, field: str) -> datetime | None:
    return units.time_or_none((attempt.get("status") or {}).get(field))


def _committed(attempt: Object) -> Object | None:
    checkpoint = (attempt.get("status") or {}).get("checkpoint") or {}
    return checkpoint if checkpoint.get("manifest") and checkpoint.get("seq") else None


def _not_latest(attempt: Object, earlier: Sequence[Object]) -> str | None:
    """Why ``attempt`` did not resume from the newest checkpoint of ``earlier``; None when it did."""
    committed = [c for a in earlier if (c := _committed(a)) is not None]
    newest = max(committed, key=lambda c: int(c["seq"]), default=None)
    restore = attempt["spec"].get("restore") or {}
    if newest is None:
        return f"restored seq {restore['seq']} though nothing was committed" if restore else None
    if int(restore.get("seq") or 0) != int(newest["seq"]) or restore.get("manifest") != newest["manifest"]:
        return (
            f"restored seq {restore.get('seq')} ({restore.get('manifest')}), not {newest['seq']} ({newest['manifest']})"
        )
    restored = ((attempt.get("status") or {}).get("checkpoint") or {}).get("restoredFromSeq")
    if _time(attempt, "startTime") is not None and restored != newest["seq"]:
        return f"started with restoredFromSeq {restored}, not {newest['seq']}"
    return None


def _overlaps(slot: Sequence[Object]) -> list[str]:
    ran = [(a, start, _time(a, "finishTime")) for a in slot if (start := _time(a, "startTime")) is not None]
    found = []
    for (a, a_start, a_end), (b, b_start, b_end) in itertools.combinations(ran, 2):
        # An attempt without a finishTime still runs: its interval is open-ended.
        if (a_end is None or b_start < a_end) and (b_end is None or a_start < b_end):
            found.append(f"{a['metadata']['name']} and {b['metadata']['name']}")
    return found


def _recoveries(slot: Sequence[Object], injected: Mapping[str, datetime]) -> list[Recovery]:
    found = []
    for n, attempt in enumerate(slot):
        if _phase(attempt) != "Lost":
            continue
        name = attempt["metadata"]["name"]
        node = str(attempt["spec"].get("node") or "")
        ended = _time(attempt, "finishTime")
        lost_at = injected.get(name) or injected.get(node) or ended
        later = next((a for a in slot[n + 1 :] if _time(a, "startTime") is not None), None)
        started = _time(later, "startTime") if later is not None else None
        if lost_at is None or ended is None or later is None or started is None:
            continue
        reason = str(attempt["status"].get("reason") or "")
        seconds, ended_after = (started - lost_at).total_seconds(), (ended - lost_at).total_seconds()
        found.append(Recovery(name, later["metadata"]["name"], reason, seconds, ended_after))
    return found


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linearly interpolated; NaN when there are no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
