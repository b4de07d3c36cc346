"""Money as Nodus writes it: decimal USD with at most six fractional digits (DECISIONS 22).

Amounts are :class:`~decimal.Decimal`, never float. They are parsed from and written as decimal
strings (``"12.5"``, ``"0.000001"``); arithmetic is exact, and rounding (half-up, to the
micro-dollar) happens once, where a charge is computed (:func:`charge`).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal, InvalidOperation

MICRO = Decimal("0.000001")
ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)
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


def text(value: Decimal) -> str:
    """``value`` as Nodus writes amounts: fixed point, no exponent, trailing zeros kept to the cent."""
    quantized = value.quantize(MICRO, rounding=ROUND_HALF_UP)
    written = format(quantized.normalize(), "f")
    whole, _, fraction = written.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def charge(rate_per_hour: Decimal, seconds: Decimal) -> Decimal:
    """What ``seconds`` cost at ``rate_per_hour``, rounded half-up to the micro-dollar."""
    return (rate_per_hour * seconds / SECONDS_PER_HOUR).quantize(MICRO, rounding=ROUND_HALF_UP)


def billed_seconds(seconds: Decimal, increment: int, minimum: int) -> Decimal:
    """The seconds an allocation is billed for: at least ``minimum``, rounded up to the ``increment``."""
    billed = max(seconds, Decimal(minimum))
    if increment > 1:
        billed = (billed / increment).to_integral_value(rounding=ROUND_CEILING) * increment
    return billed
