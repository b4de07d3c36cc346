"""Reading one field of a served object for the scheduler's views, or raising ``ValueError`` that names it.

Quantities become exact ``Decimal`` (bytes or vCPUs), durations ``timedelta`` and money ``Decimal``, all through
``nodus.apimachinery.units``; a wrong type or value names the field (``spec.resources.gpu.count must be an
integer, not 'x'``), which the controller reports for the one object it skips.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from nodus.apimachinery import units


def required(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} is required")
    return value


def text(value: Any) -> str | None:
    return None if value is None else str(value)


def integer(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an integer, not {value!r}")
    return value


def quantity(value: Any, field: str) -> Decimal | None:
    if value is None:
        return None
    try:
        return units.parse_quantity(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def duration(value: Any, field: str) -> timedelta | None:
    if value is None:
        return None
    try:
        return units.parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def usd(value: Any, field: str) -> Decimal:
    try:
        return units.parse_usd(value)
    except ValueError as exc:
        raise ValueError(f"{field}: {exc}") from exc


def choice(value: Any, allowed: tuple[str, ...], field: str) -> Any:
    if value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)}, not {value!r}")
    return value
