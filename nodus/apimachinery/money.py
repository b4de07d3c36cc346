"""Amounts of money as every process writes and computes them (DECISIONS 22).

Decimal USD with at most six fractional digits (micro-USD), never float. Here, so that the API
server's ledger (``nodus.billing``) and the controllers, which never import it, compute a charge and
write an amount in exactly one way.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

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
