"""A create bound to an estimate (``If-Match`` on the dry run's ETag) and what binds its placement.

The API server records a binding on the Job as the annotation :data:`RATE_CEILING`: the estimate's
``rateUSDPerHour`` plus 10 % (ADR 0046 §21). Only the server sets it (on a bound create) and nobody may
change it afterwards; the Job controller copies it into every Attempt's ``placement.maxRateUSDPerHour``
(the lower of it and the Job's own), so the scheduler never places the Job above it. The binding does
not expire.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from typing import Any

from nodus.apimachinery.money import MICRO, text

RATE_CEILING = "nodus.dev/estimate-rate-ceiling"
#: How far above the estimate's rate a bound Job may still be placed.
BOUND_RATE_MARGIN = Decimal("0.10")


def ceiling(rate_per_hour: Decimal) -> Decimal:
    """The highest rate a Job bound to an estimate at ``rate_per_hour`` may be placed at."""
    return (rate_per_hour * (1 + BOUND_RATE_MARGIN)).quantize(MICRO, rounding=ROUND_FLOOR)


def bound_rate(job: Mapping[str, Any]) -> Decimal | None:
    """The rate ceiling a Job was bound to at create, or None."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(RATE_CEILING)
    if value is None:
        return None
    try:
        return Decimal(str(value))
    except InvalidOperation:
        return None


def capped_placement(placement: Mapping[str, Any], ceiling_rate: Decimal) -> dict[str, Any]:
    """``placement`` with ``maxRateUSDPerHour`` lowered to ``ceiling_rate`` where it was higher or unset."""
    capped = dict(placement)
    own = capped.get("maxRateUSDPerHour")
    try:
        lower = own is not None and Decimal(str(own)) <= ceiling_rate
    except InvalidOperation:
        lower = False
    if not lower:
        capped["maxRateUSDPerHour"] = text(ceiling_rate)
    return capped
