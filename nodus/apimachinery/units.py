"""Go durations, Kubernetes quantities and RFC 3339 times, parsed exactly (no floating point).

Durations are what the reference writes as ``30m``, ``24h`` or ``0s``; quantities are ``1Ti``,
``500m``, ``16Gi``; times are ``2026-11-29T12:00:00Z``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation

_DURATION_UNITS_NS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> timedelta:
    """Parse a Go duration string such as ``1h30m`` or ``90s``. Negative durations are refused."""
    if not isinstance(text, str) or text == "":
        raise ValueError("a duration is a string such as 30s, 15m or 24h")
    if text == "0":
        return timedelta(0)
    pos, total = 0, Decimal(0)
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None:
            raise ValueError(f"{text!r} is not a duration; write it like 30s, 15m, 1h30m or 24h")
        total += Decimal(match.group(1)) * _DURATION_UNITS_NS[match.group(2)]
        pos = match.end()
    return timedelta(microseconds=int(total / 1000))


def format_duration(value: timedelta) -> str:
    """Format a duration the way Go's ``time.Duration.String`` does for whole seconds (``1h30m0s``)."""
    total = int(value.total_seconds())
    if total == 0:
        return "0s"
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    out = ""
    if hours:
        out += f"{hours}h"
    if hours or minutes:
        out += f"{minutes}m"
    return out + f"{seconds}s"


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


def parse_quantity(text: str | int) -> Decimal:
    """Parse a Kubernetes quantity (``500m``, ``16Gi``, ``1e3``) into an exact decimal."""
    if isinstance(text, bool):
        raise ValueError("a quantity is a string such as 500m, 8, 16Gi or 1Ti")
    if isinstance(text, int):
        return Decimal(text)
    if not isinstance(text, str):
        raise ValueError("a quantity is a string such as 500m, 8, 16Gi or 1Ti")
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a quantity; write it like 500m, 8, 16Gi or 1Ti")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * _DECIMAL[suffix]


_DECIMAL_RE = re.compile(r"^\d+(\.\d{1,6})?$")


def parse_usd(text: str) -> Decimal:
    """Parse a decimal USD string with at most 6 fractional digits (micro-USD), never a float."""
    if not isinstance(text, str) or not _DECIMAL_RE.match(text):
        raise ValueError(
            'an amount is a decimal USD string with at most 6 fractional digits, for example "25" or "12.50"'
        )
    try:
        return Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the regex admits only valid decimals
        raise ValueError(str(exc)) from exc


def now() -> datetime:
    return datetime.now(UTC)


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as ``metav1.Time`` serialises."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(value: datetime) -> str:
    """RFC 3339 with microseconds, as ``metav1.MicroTime`` serialises."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def time_or_none(value: object) -> datetime | None:
    """An optional RFC 3339 field of a status read as a time: None when it is absent or empty."""
    return parse_time(value) if isinstance(value, str) and value else None


def parse_time(text: str) -> datetime:
    """Parse an RFC 3339 time; a time without a zone is refused."""
    if not isinstance(text, str):
        raise ValueError("a time is an RFC 3339 string such as 2026-11-29T12:00:00Z")
    candidate = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
    try:
        parsed = datetime.fromisoformat(candidate)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an RFC 3339 time such as 2026-11-29T12:00:00Z") from exc
    if parsed.tzinfo is None or "T" not in text.upper():
        raise ValueError(f"{text!r} is not an RFC 3339 time with a zone, such as 2026-11-29T12:00:00Z")
    return parsed
