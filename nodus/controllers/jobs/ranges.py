"""Compressed index ranges, as ``status.completedIndexes`` shows them (``0-3,5``)."""

from __future__ import annotations

from collections.abc import Iterable


def compress(indexes: Iterable[int]) -> str:
    """``{0, 1, 2, 3, 5}`` -> ``"0-3,5"``; an empty set is ``""``."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    start = previous = None
    for index in ordered:
        if start is None:
            start = previous = index
        elif previous is not None and index == previous + 1:
            previous = index
        else:
            parts.append(_part(start, previous))
            start = previous = index
    if start is not None:
        parts.append(_part(start, previous))
    return ",".join(parts)


def _part(start: int, end: int | None) -> str:
    return str(start) if end is None or end == start else f"{start}-{end}"
