"""Lenient reading of a Job as raw JSON, for the code that runs before or beside the typed models.

Aliases, defaults and cross-field rules work on the request dictionary itself, which may hold any
JSON: a string where an integer belongs, a list where an object belongs. Every accessor here returns
``None`` (or nothing) when the value has the wrong type instead of raising, so those steps skip a
malformed field and leave its report to the model validation, which names it exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

JSONObject = dict[str, Any]


def as_object(value: object) -> JSONObject | None:
    """``value`` if it is a JSON object, else None."""
    return value if isinstance(value, dict) else None


def as_int(value: object) -> int | None:
    """``value`` if it is a JSON integer (``true`` is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_str(value: object) -> str | None:
    """``value`` if it is a JSON string, else None."""
    return value if isinstance(value, str) else None


def child(obj: JSONObject | None, *keys: str) -> JSONObject | None:
    """The object at ``obj[k1][k2]...``, or None when any step is missing or not an object."""
    current = obj
    for key in keys:
        if current is None:
            return None
        current = as_object(current.get(key))
    return current


def objects(value: object) -> Iterator[tuple[int, JSONObject]]:
    """The (index, item) pairs of a JSON list whose items are objects; other items are skipped."""
    if isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                yield index, item


def is_set(obj: JSONObject, key: str) -> bool:
    """Whether ``key`` is present with a non-null value (JSON ``null`` means unset)."""
    return obj.get(key) is not None
