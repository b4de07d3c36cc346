"""Postings to the ledger door: the body parsed into one typed operation (400s naming the field), and the
ledger's refusals rendered once as Statuses. Pure functions; the door against the server is end to end."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from nodus.api import postings
from nodus.api.errors import APIError
from nodus.api.ledgerdoor import refusal
from nodus.billing import money
from nodus.storage.budgets import BudgetExceeded, BudgetLimit
from nodus.storage.ledger import CapExceeded, Charge, HoldSettled, KeyReused, LedgerError, Overdrawn

CHARGE = {"segment": "Running", "seconds": "61.5", "rateUSDPerHour": "2.5", "amountUSD": "0.042708"}
STORAGE = {"segment": "Storage", "seconds": "3600", "rateUSDPerHour": "0.009766", "amountUSD": "0.009766"}


@pytest.mark.parametrize(
    ("body", "operation"),
    [
        pytest.param(
            {"operation": "Hold", "key": "hold:a", "hold": "a", "subject": "j", "job": "train", "amountUSD": "1.5"},
            postings.Hold("hold:a", "a", Decimal("1.5"), None, "j", "train", extend=False),
            id="hold",
        ),
        pytest.param(
            {"operation": "Extend", "key": "extend:a:3", "hold": "a", "amountUSD": "1.5", "capUSD": "20"},
            postings.Hold("extend:a:3", "a", Decimal("1.5"), Decimal(20), "", None, extend=True),
            id="extend-with-a-cap",
        ),
        pytest.param(
            {"operation": "Cover", "key": "cover:a", "hold": "a", **CHARGE},
            postings.Capture(
                "cover:a", "a", "Cover", Charge("Running", Decimal("61.500"), Decimal("2.5"), Decimal("0.042708"), True)
            ),
            id="cover",
        ),
        pytest.param(
            {"operation": "Release", "key": "release:a", "hold": "a"}, postings.Release("release:a", "a"), id="release"
        ),
        pytest.param(
            {"operation": "Charge", "key": "storage:j:7", "subject": "j", "memo": "hour 7", **STORAGE},
            postings.PostPaid(
                "storage:j:7",
                "j",
                Charge("Storage", Decimal("3600.000"), Decimal("0.009766"), Decimal("0.009766")),
                "hour 7",
            ),
            id="post-paid-charge",
        ),
    ],
)
def test_a_body_is_one_typed_operation(body: dict[str, Any], operation: postings.Operation) -> None:
    assert postings.parse(body) == operation


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param({"operation": "Hold", "hold": "a"}, "key must be", id="key-first"),
        pytest.param({"operation": "Bogus", "key": "k"}, "hold must be", id="hold-before-the-operation"),
        pytest.param({"operation": "Bogus", "key": "k", "hold": "a"}, "operation must be Hold", id="unknown"),
        pytest.param({"operation": "Hold", "key": "k", "hold": "a", "amountUSD": 1.5}, "not a float", id="float"),
        pytest.param(
            {"operation": "Hold", "key": "k", "hold": "a", "amountUSD": "1", "job": ""}, "job must be", id="empty-job"
        ),
        pytest.param(
            {"operation": "Capture", "key": "k", "hold": "a", **CHARGE, "segment": "Nap"},
            "segment must be",
            id="segment",
        ),
        pytest.param(
            {"operation": "Refund", "key": "k", "hold": "a", **CHARGE, "seconds": "-1"},
            "at least 0",
            id="negative-seconds",
        ),
        pytest.param(
            {"operation": "Charge", "key": "storage:j:x", "subject": "j", **STORAGE}, "storage:j:<n>", id="charge-key"
        ),
        pytest.param(
            {"operation": "Charge", "key": "storage:j:1", "subject": "j", **STORAGE, "amountUSD": "0.01"},
            "is not rateUSDPerHour x seconds",
            id="charge-amount",
        ),
        pytest.param(
            {"operation": "Charge", "key": "storage:j:1", "subject": "j", **STORAGE, "memo": 7},
            "memo must be",
            id="memo",
        ),
    ],
)
def test_a_malformed_body_is_a_400_naming_the_first_wrong_field(body: dict[str, Any], message: str) -> None:
    with pytest.raises(APIError) as refused:
        postings.parse(body)
    assert refused.value.code == 400 and message in refused.value.message


BUDGET = BudgetLimit("u", "team-a", Decimal(10), datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("exc", "reason", "code", "said"),
    [
        pytest.param(
            Overdrawn("p", "available", Decimal("1.5"), Decimal("-2")),
            "InsufficientCredits",
            402,
            "needs 2.00 USD",
            id="overdrawn",
        ),
        pytest.param(
            CapExceeded("j", Decimal(19), Decimal(2), Decimal(20)),
            "MaxCostReached",
            402,
            "maxCostUSD of 20.00",
            id="cap",
        ),
        pytest.param(
            BudgetExceeded(BUDGET, Decimal(9), Decimal(2)),
            "BudgetExceeded",
            402,
            "Budget team-a allows 10.00 USD",
            id="budget",
        ),
        pytest.param(KeyReused("key k was used for another posting"), "Conflict", 409, "key k", id="key-reused"),
        pytest.param(HoldSettled("hold a is settled"), "Conflict", 409, "settled", id="settled"),
        pytest.param(money.InvalidAmount("a hold must be more than 0"), "BadRequest", 400, "more than 0", id="amount"),
    ],
)
def test_each_refusal_of_the_ledger_has_its_status(
    exc: LedgerError | money.InvalidAmount, reason: str, code: int, said: str
) -> None:
    status = refusal("p", exc)
    assert (status.reason, status.code) == (reason, code) and said in status.message and status.fix


def test_a_refusal_the_door_does_not_know_is_not_answered_as_one() -> None:
    unknown = LedgerError("a new kind of refusal")
    with pytest.raises(LedgerError):
        refusal("p", unknown)
