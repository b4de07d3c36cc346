"""Money as Nodus writes it: decimal USD with at most six fractional digits (ADR 0046 §22).

Amounts are :class:`~decimal.Decimal`, never float. They are parsed from and written as decimal
strings (``"12.5"``, ``"0.000001"``); arithmetic is exact, and rounding (half-up, to the
micro-dollar) happens once, where a charge is computed (:func:`charge`).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal, InvalidOperation

from nodus.apimachinery.money import MICRO, SECONDS_PER_HOUR, charge, text

__all__ = ["MAX", "MICRO", "SECONDS_PER_HOUR", "ZERO", "InvalidAmount", "billed_seconds", "charge", "parse", "text"]

ZERO = Decimal(0)
MAX = Decimal("1000000000")  # a billion dollars: anything larger is a typo


class InvalidAmount(ValueError):
    """Not a decimal USD amount Nodus accepts; the message says why."""


def parse(text: object, what: str = "amount") -> Decimal:
    """A non-negative decimal USD amount with at most six fractional digits, from a string or a number."""
    if isinstance(text, float):
        raise InvalidAmount(f'{what} must be a decimal string such as "12.50", not a float')
    try:
        value = Decimal(str(text).strip())
    except InvalidOperation:
        raise InvalidAmount(f"{what} {text!r} is not a decimal number") from None
    if not value.is_finite() or value < 0:
        raise InvalidAmount(f"{what} {text!r} must be a finite amount of at least 0")
    if value != value.quantize(MICRO, rounding=ROUND_HALF_UP):
        raise InvalidAmount(f"{what} {text!r} has more than six fractional digits (the unit is one micro-dollar)")
    if value > MAX:
        raise InvalidAmount(f"{what} {text!r} is larger than {MAX}")
    return value


def billed_seconds(seconds: Decimal, increment: int, minimum: int) -> Decimal:
    """The seconds an allocation is billed for: at least ``minimum``, rounded up to the ``increment``."""
    billed = max(seconds, Decimal(minimum))
    if increment > 1:
        billed = (billed / increment).to_integral_value(rounding=ROUND_CEILING) * increment
    return billed
