"""Amounts of money as every process writes and computes them (DECISIONS 22).

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
