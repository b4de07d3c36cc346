"""A project's spend for people: what it was charged per UTC day and this month so far (ADR 0054).

Members read aggregates only: sums of the ledger's charges (``nodus.storage.spend``), never its entries or
statement lines, which stay with administrators. Spend is what the project paid: captures from holds,
post-paid charges (storage) and, negative, refunds; covered time (Nodus's fault, Nodus paid) is not spend.
The clock is the caller's, so a day's boundary is the same for every figure of one answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

from nodus.storage import spend
from nodus.storage.objects import Storage

MAX_DAYS = 366


@dataclass(frozen=True)
class Spend:
    """``days``: (UTC date, charged) for each of the requested days, oldest first, today last, a day
    without charges at 0; ``month_to_date``: charged since the start of the current UTC month."""

    days: list[tuple[date, Decimal]]
    month_to_date: Decimal


async def project_spend(storage: Storage, project: str, days: int, now: datetime) -> Spend:
    """``project``'s spend for the ``days`` (1 to :data:`MAX_DAYS`) UTC days ending with ``now``'s."""
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be from 1 to {MAX_DAYS}, not {days}")
    today = now.astimezone(UTC).date()
    first = today - timedelta(days=days - 1)
    month = today.replace(day=1)
    start = datetime.combine(min(first, month), time(), tzinfo=UTC)
    end = datetime.combine(today + timedelta(days=1), time(), tzinfo=UTC)
    charged = await spend.charged_per_day(storage, project, start, end)
    shown = [(first + timedelta(days=n), charged.get(first + timedelta(days=n), Decimal(0))) for n in range(days)]
    month_to_date = sum((amount for day, amount in charged.items() if day >= month), Decimal(0))
    return Spend(shown, month_to_date)
