"""Budgets in the ledger against the real PostgreSQL: every hold must fit every Budget its Job matches,
per period, serialised per Budget; and the pure parts: periods and label selectors."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from nodus.apimachinery.selectors import SelectorError
from nodus.billing import budgets, ledger, money
from nodus.storage import budgets as tables
from nodus.storage.budgets import BudgetExceeded, BudgetLimit
from nodus.storage.errors import Key
from nodus.storage.ledger import Charge
from nodus.storage.objects import Storage


@pytest.fixture
async def storage(database_url: str) -> AsyncIterator[Storage]:
    store = Storage(database_url, pool_size=12, compaction_interval=3600)
    await store.start()
    yield store
    await store.stop()


def usd(text: str) -> Decimal:
    return money.parse(text)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def funded_project(storage: Storage, credit: str = "100") -> str:
    name = unique("p")
    await ledger.grant(storage, name, usd(credit), f"grant:{name}")
    return name


def budget(limit: str, period: str = "Total", now: datetime | None = None, name: str = "b") -> BudgetLimit:
    start, end = budgets.period(period, now or datetime.now(UTC))
    return BudgetLimit(str(uuid.uuid4()), name, usd(limit), start, end)


def running(seconds: str, amount: str) -> Charge:
    return Charge("Running", Decimal(seconds), usd("3.6"), usd(amount))


async def hold(
    storage: Storage, project: str, amount: str, matched: tuple[BudgetLimit, ...] | None, *, hold_id: str = ""
) -> str:
    hold_id = hold_id or unique("h")
    await ledger.hold(storage, project, hold_id, usd(amount), f"hold:{hold_id}", subject="job", budgets=matched)
    return hold_id


async def committed(storage: Storage, limit: BudgetLimit) -> tuple[Decimal, Decimal]:
    figures = (await tables.standing(storage, [limit]))[limit.uid]
    return figures.spent, figures.held


# --- enforcement ---------------------------------------------------------------------------------


async def test_a_hold_must_fit_every_budget_its_job_matches(storage: Storage) -> None:
    project = await funded_project(storage)
    team, small = budget("10", name="team"), budget("5", name="small")
    await hold(storage, project, "4", (team, small))
    with pytest.raises(BudgetExceeded) as refused:
        await hold(storage, project, "2", (team, small))
    assert refused.value.budget.name == "small"
    assert (refused.value.committed, refused.value.change, refused.value.budget.limit) == (usd("4"), usd("2"), usd("5"))
    # Nothing of the refused hold was written: neither credit nor a tag.
    assert await ledger.credits(storage, project) == {"available": usd("96"), "held": usd("4"), "balance": usd("100")}
    assert await committed(storage, small) == (usd("0"), usd("4"))
    # A Job that matches only the larger Budget still fits it, to the micro-dollar.
    await hold(storage, project, "6", (team,))
    with pytest.raises(BudgetExceeded, match="team"):
        await hold(storage, project, "0.000001", (team,))
    assert await committed(storage, team) == (usd("0"), usd("10"))
    # A Job no Budget matches is limited by the project's credit only.
    await hold(storage, project, "50", ())


async def test_charges_count_as_spent_covered_time_does_not_and_refunds_give_back(storage: Storage) -> None:
    project = await funded_project(storage)
    limit = budget("20")
    hold_id = await hold(storage, project, "10", (limit,))
    await ledger.capture(storage, project, hold_id, running("3000", "3"), f"capture:{hold_id}")
    covered = Charge("Boot", Decimal(1000), usd("3.6"), usd("1"), covered=True)
    await ledger.cover(storage, project, hold_id, covered, f"cover:{hold_id}")
    await ledger.refund(storage, project, hold_id, running("1000", "1"), f"refund:{hold_id}")
    assert await committed(storage, limit) == (usd("2"), usd("7"))
    await ledger.release(storage, project, hold_id, f"release:{hold_id}")
    assert await committed(storage, limit) == (usd("2"), usd("0"))  # spent stays spent; the rest came back


async def test_an_extension_retags_the_hold_and_one_for_billed_time_keeps_its_tags(storage: Storage) -> None:
    project = await funded_project(storage)
    first, second = budget("100", name="first"), budget("100", name="second")
    hold_id = await hold(storage, project, "5", (first,))
    await ledger.capture(storage, project, hold_id, running("1000", "1"), f"capture:{hold_id}")
    # The Job's labels changed: now it matches only the second Budget. What was charged stays with the first.
    await ledger.hold(storage, project, hold_id, usd("2"), f"extend:{hold_id}:1", extend=True, budgets=(second,))
    assert await committed(storage, first) == (usd("1"), usd("0"))
    assert await committed(storage, second) == (usd("0"), usd("6"))
    # Time already billed (no Budgets given): not checked, and the hold keeps its tags.
    await ledger.hold(storage, project, hold_id, usd("3"), f"extend:{hold_id}:2", extend=True)
    await ledger.capture(storage, project, hold_id, running("2000", "2"), f"capture:{hold_id}:2")
    assert await committed(storage, second) == (usd("2"), usd("7"))
    # Extending into a Budget with no room is refused, the hold unchanged.
    full = budget("8", name="full")
    with pytest.raises(BudgetExceeded, match="full"):
        await ledger.hold(storage, project, hold_id, usd("2"), f"extend:{hold_id}:3", extend=True, budgets=(full,))
    assert await committed(storage, second) == (usd("2"), usd("7"))
    assert await committed(storage, full) == (usd("0"), usd("0"))


async def test_concurrent_holds_cannot_both_slip_under_a_limit(storage: Storage) -> None:
    # Different projects, so that only the Budget's lock (not a project's account rows) serialises them.
    limit = budget("10")
    projects = [await funded_project(storage) for _ in range(8)]
    outcomes = await asyncio.gather(
        *(hold(storage, project, "3", (limit,)) for project in projects), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, BudgetExceeded)]
    assert len(refused) == 5 and all(isinstance(o, str) for o in outcomes if o not in refused), outcomes
    assert await committed(storage, limit) == (usd("0"), usd("9"))


# --- periods -------------------------------------------------------------------------------------


async def test_a_budget_counts_the_charges_of_its_period(storage: Storage) -> None:
    project = await funded_project(storage)
    tag = budget("100")
    hold_id = await hold(storage, project, "5", (tag,))
    await ledger.capture(storage, project, hold_id, running("4000", "4"), f"capture:{hold_id}")
    await ledger.release(storage, project, hold_id, f"release:{hold_id}")
    async with storage._connection() as conn:
        charged: datetime = await conn.fetchval("SELECT created_at FROM charges WHERE subject = $1", hold_id)

    def at(period: str, now: datetime) -> BudgetLimit:
        start, end = budgets.period(period, now)
        return BudgetLimit(tag.uid, tag.name, tag.limit, start, end)

    day, month = timedelta(days=1), timedelta(days=32)
    for period, now, spent in (
        ("Daily", charged, "4"),
        ("Daily", charged + day, "0"),
        ("Daily", charged - day, "0"),
        ("Monthly", charged, "4"),
        ("Monthly", charged + month, "0"),
        ("Monthly", charged - month, "0"),
        ("Total", charged + month, "4"),
    ):
        assert await committed(storage, at(period, now)) == (usd(spent), usd("0")), (period, now)
    # Enforcement follows the period: the day's 4 leave no room for 3 more under a limit of 5 that day,
    # and all of it the next day.
    daily = BudgetLimit(tag.uid, tag.name, usd("5"), *budgets.period("Daily", charged))
    with pytest.raises(BudgetExceeded):
        await hold(storage, project, "3", (daily,))
    tomorrow = BudgetLimit(tag.uid, tag.name, usd("5"), *budgets.period("Daily", charged + day))
    await hold(storage, project, "3", (tomorrow,))


@pytest.mark.parametrize(
    ("period", "now", "start", "end"),
    [
        pytest.param("Daily", "2026-11-29T23:59:59", "2026-11-29", "2026-11-30", id="daily-last-second"),
        pytest.param("Daily", "2026-11-30T00:00:00", "2026-11-30", "2026-12-01", id="daily-midnight-starts-a-day"),
        pytest.param("Monthly", "2026-12-31T23:59:59", "2026-12-01", "2027-01-01", id="monthly-december"),
        pytest.param("Monthly", "2027-02-01T00:00:00", "2027-02-01", "2027-03-01", id="monthly-first-starts-a-month"),
    ],
)
def test_periods_are_utc_days_and_months(period: str, now: str, start: str, end: str) -> None:
    moment = datetime.fromisoformat(now).replace(tzinfo=UTC)
    assert budgets.period(period, moment) == (
        datetime.fromisoformat(start).replace(tzinfo=UTC),
        datetime.fromisoformat(end).replace(tzinfo=UTC),
    )
    # The same instant written in another zone is the same period.
    assert budgets.period(period, moment.astimezone(timezone(timedelta(hours=5)))) == budgets.period(period, moment)


def test_a_total_budget_has_no_period() -> None:
    assert budgets.period("Total", datetime.now(UTC)) == (None, None)


# --- selectors and rooms -------------------------------------------------------------------------


def budget_object(namespace: str, name: str, limit: str, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"limitUSD": limit, "period": "Monthly"}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Budget",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param(None, {}, True, id="absent-selects-every-job"),
        pytest.param({}, {"team": "a"}, True, id="empty-selects-every-job"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "a", "x": "1"}, True, id="match-labels"),
        pytest.param({"matchLabels": {"team": "a"}}, {"team": "b"}, False, id="match-labels-other-value"),
        pytest.param({"matchLabels": {"team": "a"}}, {}, False, id="match-labels-missing"),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "tpu"]}]},
            {"tier": "tpu"},
            True,
            id="in",
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, {}, True, id="notin-absent"
        ),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]},
            {"tier": "gpu"},
            False,
            id="notin",
        ),
        pytest.param({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": ""}, True, id="exists"),
        pytest.param(
            {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
            {"tier": "x"},
            False,
            id="does-not-exist",
        ),
        pytest.param(
            {"matchLabels": {"team": "a"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]},
            {"team": "a"},
            False,
            id="all-requirements-must-hold",
        ),
    ],
)
def test_selectors_match_job_labels(selector: dict[str, Any] | None, labels: dict[str, str], matches: bool) -> None:
    assert budgets.selector(selector).matches(labels) is matches
    found = budgets.matching([budget_object("p", "b", "1", selector)], labels, datetime.now(UTC))
    assert [b.name for b in found] == (["b"] if matches else [])


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({"matchLabels": {"team": "a,b"}}, id="value-with-a-comma"),
        pytest.param({"matchLabels": {"bad key": "a"}}, id="key-with-a-space"),
        pytest.param({"matchExpressions": [{"key": "t", "operator": "In"}]}, id="in-without-values"),
        pytest.param({"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]}, id="exists-values"),
        pytest.param({"matchExpressions": [{"key": "t", "operator": "Gt", "values": ["1"]}]}, id="unknown-operator"),
    ],
)
def test_malformed_selectors_are_refused(selector: dict[str, Any]) -> None:
    with pytest.raises(SelectorError):
        budgets.selector(selector)


async def test_rooms_lists_the_matching_budgets_with_their_figures(storage: Storage) -> None:
    project = await funded_project(storage)
    team = budget_object(project, "team-a", "10", {"matchLabels": {"team": "a"}})
    everyone = budget_object(project, "everyone", "50")
    other = budget_object(project, "team-b", "1", {"matchLabels": {"team": "b"}})
    for obj in (team, everyone, other):
        await storage.create(Key("Budget", project, obj["metadata"]["name"]), obj)
    now = datetime.now(UTC)
    labels = {"team": "a"}
    matched = budgets.matching(await budgets.of_project(storage, project), labels, now)
    assert [b.name for b in matched] == ["everyone", "team-a"]
    hold_id = await hold(storage, project, "4", matched)
    await ledger.capture(storage, project, hold_id, running("1000", "1"), f"capture:{hold_id}")
    rooms = await budgets.rooms(storage, project, labels, now)
    _, end = budgets.period("Monthly", now)
    assert rooms == [
        budgets.Room("everyone", usd("50"), usd("4"), usd("46"), end),
        budgets.Room("team-a", usd("10"), usd("4"), usd("6"), end),
    ]
    assert [r.name for r in await budgets.rooms(storage, project, {"team": "b"}, now)] == ["everyone", "team-b"]
    await ledger.release(storage, project, hold_id, f"release:{hold_id}")


async def test_verify_reports_a_budget_past_its_limit(storage: Storage) -> None:
    project = await funded_project(storage)
    limit = budget("10")
    await hold(storage, project, "8", (limit,))
    assert await tables.breaches(storage, [limit]) == []
    lowered = BudgetLimit(limit.uid, limit.name, usd("5"), project=project)
    [breach] = await tables.breaches(storage, [lowered])
    assert breach.invariant == "BudgetsHold" and "8" in breach.detail and "5" in breach.detail
