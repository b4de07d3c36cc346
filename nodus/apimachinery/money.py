"""Amounts of money as every process writes and computes them (ADR 0046 §22).

Decimal USD with at most six fractional digits (micro-USD), never float. Here, so that the API
server's ledger (``nodus.billing``) and the controllers, which never import it, compute a charge and
write an amount in exactly one way.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

MICRO = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)


def text(value: Decimal) -> str:
    """``value`` as Nodus writes amounts: fixed point, no exponent, at least two fractional digits."""
    quantized = value.quantize(MICRO, rounding=ROUND_HALF_UP)
    written = format(quantized.normalize(), "f")
    whole, _, fraction = written.partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def charge(rate_per_hour: Decimal, seconds: Decimal) -> Decimal:
    """What ``seconds`` cost at ``rate_per_hour``, rounded half-up to the micro-dollar (once)."""
    return (rate_per_hour * seconds / SECONDS_PER_HOUR).quantize(MICRO, rounding=ROUND_HALF_UP)


#: Storage is priced per GiB (2^30 bytes) and month.
GIB = 2**30


def storage_hour(billed_bytes: int, rate_per_gib_month: Decimal, hours_per_month: int) -> Decimal:
    """What one hour of ``billed_bytes`` costs at ``rate_per_gib_month`` USD per GiB for a month of
    ``hours_per_month`` hours, rounded half-up to the micro-dollar (once): a Job's outputs (ADR 0023) and a
    project's other bytes (ADR 0034) are priced by this one rule."""
    exact = Decimal(billed_bytes) * rate_per_gib_month / (Decimal(GIB) * hours_per_month)
    return exact.quantize(MICRO, rounding=ROUND_HALF_UP)


#: The billing increment: an allocation's billed time is rounded up to a whole number of these, and
#: one increment is the least an allocation costs (``minimumChargeUSD``).
INCREMENT_SECONDS = 60


def hold_for(rate_per_hour: Decimal, window_seconds: Decimal) -> Decimal:
    """The hold that funds one slot: ``window_seconds`` at the rate plus one increment (the minimum
    charge), rounded up to the micro-dollar. The billing controller places it and the estimate quotes it."""
    window = rate_per_hour * window_seconds / SECONDS_PER_HOUR
    return (window + charge(rate_per_hour, Decimal(INCREMENT_SECONDS))).quantize(MICRO, rounding=ROUND_CEILING)


# What people read in tables (nodus's and kubectl's): one precision per kind of figure. The API, YAML, JSON and
# CSV carry the exact amounts (:func:`text`); a table rounds for the eye, and never to a zero that hides a charge.
AMOUNT_PLACES = Decimal("0.01")
RATE_PLACES = Decimal("0.0001")


def amount_cell(value: Decimal | str, symbol: str = "") -> str:
    """An amount of USD in a table: two decimals, rounded half-up, thousands separated (``1,234.50``), after
    ``symbol`` (``$``). A non-zero amount below half a cent is ``<0.01`` (``-<0.01`` when negative), not
    ``0.00``: a charge of a few micro-dollars is shown to exist. A value that is not a number is shown as is."""
    return _cell(value, AMOUNT_PLACES, symbol)


def rate_cell(value: Decimal | str, symbol: str = "") -> str:
    """A rate (USD per hour, per GiB-month) in a table: four decimals, rounded half-up (``2.4900``); a
    non-zero rate below that is ``<0.0001``. A value that is not a number is shown as is."""
    return _cell(value, RATE_PLACES, symbol)


def _cell(value: Decimal | str, places: Decimal, symbol: str) -> str:
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except ArithmeticError:
        return str(value)
    if not number.is_finite():
        return str(value)
    sign = "-" if number < 0 else ""
    rounded = abs(number).quantize(places, rounding=ROUND_HALF_UP)
    if rounded == 0 and number != 0:
        return f"{sign}<{symbol}{places}"
    return f"{sign if rounded else ''}{symbol}{rounded:,f}"
