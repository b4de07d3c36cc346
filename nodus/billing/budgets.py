"""Budgets: which of a project's Budgets a Job matches, their periods, and what room each has left.

A Budget (``budgets.nodus.dev/v1``, namespaced) limits what the project's Jobs matching its
``spec.selector`` (a ``metav1.LabelSelector`` over the Jobs' labels; absent or empty: every Job) may
commit in a period: ``Daily`` (from 00:00 UTC), ``Monthly`` (from the 1st, 00:00 UTC) or ``Total``.
Committed is what was charged to matching Jobs in the period plus what their open holds hold
(``nodus.storage.budgets`` keeps the tags and the sums, and refuses a hold that does not fit). Here is
what the API and the estimate need on top: the period of a Budget at a moment, the Budgets a Job's
labels match, as the :class:`~nodus.storage.budgets.BudgetLimit` the ledger enforces, and each
Budget's figures.

Selectors are matched with ``nodus.apimachinery.selectors`` (Kubernetes' semantics: every
requirement must hold; ``NotIn`` and ``DoesNotExist`` match a Job without the key).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from nodus.apimachinery import selectors
from nodus.apimachinery.selectors import LabelSelector, Operator, Requirement, SelectorError
from nodus.billing import money
from nodus.storage import budgets as tables
from nodus.storage.budgets import BudgetLimit, Standing
from nodus.storage.ledger import Breach
from nodus.storage.objects import Storage

KIND = "Budget"
PERIODS = ("Daily", "Monthly", "Total")
DEFAULT_PERIOD = "Monthly"
OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


@dataclass(frozen=True)
class Room:
    """What one Budget that matches a Job leaves: ``limit`` minus ``committed`` (charged in the period and
    held), floored at 0, until ``period_end`` (None: a Total budget never renews)."""

    name: str
    limit: Decimal
    committed: Decimal
    remaining: Decimal
    period_end: datetime | None


def period(kind: str, now: datetime) -> tuple[datetime | None, datetime | None]:
    """The period [start, end) of a ``Daily``, ``Monthly`` or ``Total`` (None, None) Budget at ``now``, in UTC."""
    now = now.astimezone(UTC)
    if kind == "Daily":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return start, start + timedelta(days=1)
    if kind == "Monthly":
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
        return start, end
    if kind == "Total":
        return None, None
    raise ValueError(f"a Budget's period is one of {', '.join(PERIODS)}, not {kind!r}")


def check_key(key: object) -> str:
    """``key`` if it is a valid label key; SelectorError saying how to write one otherwise."""
    if isinstance(key, str):
        try:
            if selectors.parse_label_selector(key).requirements == (Requirement(key, Operator.EXISTS),):
                return key
        except SelectorError:
            pass
    raise SelectorError(
        f"invalid label key {key!r}: a key is an optional DNS prefix and '/', then a name of at most 63 characters "
        "of [A-Za-z0-9-_.] that starts and ends with an alphanumeric character"
    )


def check_value(value: object) -> str:
    """``value`` if it is a valid label value; SelectorError saying how to write one otherwise."""
    if isinstance(value, str):
        try:
            if selectors.parse_label_selector(f"k={value}").requirements == (
                Requirement("k", Operator.EQUALS, (value,)),
            ):
                return value
        except SelectorError:
            pass
    raise SelectorError(
        f"invalid label value {value!r}: a value is empty or at most 63 characters of [A-Za-z0-9-_.] that starts "
        "and ends with an alphanumeric character"
    )


def selector(value: Any) -> LabelSelector:
    """The selector of a ``metav1.LabelSelector`` (``matchLabels``, ``matchExpressions``); None or {}: every Job.

    Raises :class:`SelectorError` for one that is not well formed (the Budget's validation reports
    each problem with its field first, so a stored Budget always converts)."""
    if value is None:
        return LabelSelector()
    if not isinstance(value, Mapping):
        raise SelectorError("a selector is an object with matchLabels and matchExpressions")
    requirements = [
        Requirement(check_key(k), Operator.EQUALS, (check_value(v),))
        for k, v in sorted((value.get("matchLabels") or {}).items())
    ]
    for expression in value.get("matchExpressions") or []:
        operator = OPERATORS.get(str(expression.get("operator")))
        if operator is None:
            raise SelectorError(f"operator must be one of {', '.join(OPERATORS)}, not {expression.get('operator')!r}")
        values = tuple(sorted({check_value(v) for v in expression.get("values") or []}))
        if (operator in (Operator.IN, Operator.NOT_IN)) != bool(values):
            raise SelectorError(f"operator {expression.get('operator')} {'needs' if not values else 'takes no'} values")
        requirements.append(Requirement(check_key(expression.get("key")), operator, values))
    return LabelSelector(tuple(requirements))


def limit_of(budget: Mapping[str, Any], now: datetime) -> BudgetLimit:
    """What the ledger enforces for ``budget`` (a stored Budget object) at ``now``."""
    meta, spec = budget["metadata"], budget.get("spec") or {}
    start, end = period(str(spec.get("period") or DEFAULT_PERIOD), now)
    limit = money.parse(spec.get("limitUSD"), "spec.limitUSD")
    return BudgetLimit(str(meta["uid"]), str(meta["name"]), limit, start, end, str(meta.get("namespace") or ""))


def matching(
    budgets: Iterable[Mapping[str, Any]], job_labels: Mapping[str, str], now: datetime
) -> tuple[BudgetLimit, ...]:
    """The Budgets among ``budgets`` whose selector matches ``job_labels``, by name."""
    found = [b for b in budgets if selector((b.get("spec") or {}).get("selector")).matches(job_labels)]
    return tuple(limit_of(b, now) for b in sorted(found, key=lambda b: str(b["metadata"]["name"])))


async def of_project(storage: Storage, namespace: str) -> list[dict[str, Any]]:
    """Every Budget of the project, as stored."""
    return await storage.namespaced_in(namespace, [KIND])


async def standing(storage: Storage, budget: Mapping[str, Any], now: datetime) -> tuple[BudgetLimit, Standing]:
    """``budget``'s limit and period at ``now``, and what it has spent and holds (from the ledger)."""
    limit = limit_of(budget, now)
    figures = await tables.standing(storage, [limit])
    return limit, figures[limit.uid]


def room(limit: BudgetLimit, figures: Standing) -> Room:
    remaining = max(limit.limit - figures.committed, money.ZERO)
    return Room(limit.name, limit.limit, figures.committed, remaining, limit.end)


async def rooms(storage: Storage, namespace: str, job_labels: Mapping[str, str], now: datetime) -> list[Room]:
    """Every Budget of ``namespace`` that a Job with ``job_labels`` matches, with its figures at ``now``
    (by name). A hold for such a Job must fit the smallest ``remaining``."""
    return await rooms_among(storage, await of_project(storage, namespace), job_labels, now)


async def rooms_among(
    storage: Storage, budgets: Iterable[Mapping[str, Any]], job_labels: Mapping[str, str], now: datetime
) -> list[Room]:
    """:func:`rooms` over ``budgets`` already read (the project's Budget objects): the ledger is read only
    when one of them matches."""
    limits = matching(budgets, job_labels, now)
    figures = await tables.standing(storage, limits)
    return [room(limit, figures[limit.uid]) for limit in limits]


async def overspent(storage: Storage, now: datetime) -> list[Breach]:
    """``BudgetsHold`` breaches: every Budget of every project whose committed money passes its limit."""
    limits: Sequence[BudgetLimit] = [limit_of(b, now) for b in await tables.budget_objects(storage)]
    return await tables.breaches(storage, limits)
