"""A posting to the ledger door, checked: one of seven operations, parsed from the JSON body the controllers send.

The body names its ``operation`` (``Hold``, ``Extend``, ``Capture``, ``Cover``, ``Refund``, ``Release`` or
``Charge``) and its idempotency ``key``; ``nodus.api.http.billing`` lists each operation's fields. :func:`parse`
turns a body into one typed operation or raises a 400 ``BadRequest`` Status naming the field, checking the
fields in the order the door always has: ``key``, then ``hold`` (``subject`` for a Charge), then the
operation and its own fields. Parsing is pure: what the ledger refuses (an overdraft, a reused key) is decided
by :class:`~nodus.api.ledgerdoor.LedgerDoor` when the operation is applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, cast

from nodus.api.errors import bad_request
from nodus.billing import money
from nodus.storage.ledger import Charge

# The segments of an attempt's time, charged from its hold.
SEGMENTS = ("Boot", "Running", "Restore", "Teardown")
# Post-paid segments, charged without a hold (operation Charge), and the key prefix of each.
POST_PAID = {"Storage": "storage"}
MAX_TEXT = 300
MAX_JOB_NAME = 253

Capturing = Literal["Capture", "Cover", "Refund"]


@dataclass(frozen=True)
class Hold:
    """``Hold`` (a new hold of ``amount``) or, with ``extend``, ``Extend`` (``amount`` more in it). ``job`` names
    the hold's Job, whose labels select the Budgets it must fit; None: no Budget is checked."""

    key: str
    hold: str
    amount: Decimal
    cap: Decimal | None
    subject: str
    job: str | None
    extend: bool


@dataclass(frozen=True)
class Capture:
    """``Capture`` (charged from the hold), ``Cover`` (paid by Nodus) or ``Refund`` (given back) of ``charge``."""

    key: str
    hold: str
    operation: Capturing
    charge: Charge


@dataclass(frozen=True)
class Release:
    """What the hold still holds goes back to the project; the hold is settled."""

    key: str
    hold: str


@dataclass(frozen=True)
class PostPaid:
    """``Charge``: a post-paid ``charge`` of ``subject`` (a Job's uid, or the project's) without a hold."""

    key: str
    subject: str
    charge: Charge
    memo: str


Operation = Hold | Capture | Release | PostPaid


def parse(body: dict[str, Any]) -> Operation:
    """The operation ``body`` asks for; a 400 Status naming the first field that is wrong."""
    operation, key = str(body.get("operation") or ""), _text(body, "key")
    if operation == "Charge":
        subject = _text(body, "subject")
        memo = body.get("memo")
        if memo is not None and (not isinstance(memo, str) or len(memo) > MAX_TEXT):
            raise bad_request(f"memo must be a string of at most {MAX_TEXT} characters")
        return PostPaid(key, subject, _post_paid(body, key, subject), memo or "")
    hold = _text(body, "hold")
    if operation in ("Hold", "Extend"):
        amount = _amount(body, "amountUSD")
        cap = _amount(body, "capUSD") if body.get("capUSD") is not None else None
        subject = str(body.get("subject") or "")
        return Hold(key, hold, amount, cap, subject, _job(body), extend=operation == "Extend")
    if operation in ("Capture", "Cover", "Refund"):
        return Capture(key, hold, cast(Capturing, operation), _charge(body, covered=operation == "Cover"))
    if operation == "Release":
        return Release(key, hold)
    raise bad_request(
        f'operation must be Hold, Extend, Capture, Cover, Refund, Release or Charge, not "{operation}"',
        fix="Send one of the operations listed in nodus/api/http/billing.py.",
    )


def _text(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise bad_request(f"{field} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def _amount(body: dict[str, Any], field: str) -> Decimal:
    try:
        return money.parse(body.get(field), field)
    except money.InvalidAmount as exc:
        raise bad_request(str(exc)) from None


def _job(body: dict[str, Any]) -> str | None:
    """The hold's Job by name (None: not given)."""
    name = body.get("job")
    if name is None:
        return None
    if not isinstance(name, str) or not name or len(name) > MAX_JOB_NAME:
        raise bad_request(
            f"job must be the name of the hold's Job, a non-empty string of at most {MAX_JOB_NAME} characters"
        )
    return name


def _charge(body: dict[str, Any], *, covered: bool) -> Charge:
    segment = str(body.get("segment") or "")
    if segment not in SEGMENTS:
        raise bad_request(f"segment must be one of {', '.join(SEGMENTS)}, not {segment!r}")
    return Charge(
        segment=segment,
        seconds=_seconds(body.get("seconds")),
        rate_per_hour=_amount(body, "rateUSDPerHour"),
        amount=_amount(body, "amountUSD"),
        covered=covered,
    )


def _post_paid(body: dict[str, Any], key: str, subject: str) -> Charge:
    """A Charge's charge: a post-paid segment, keyed ``<prefix>:<subject>:<n>``, its amount exactly its
    rate for its seconds (rounded half-up once, as every charge)."""
    segment = str(body.get("segment") or "")
    if segment not in POST_PAID:
        raise bad_request(f"segment of a Charge must be one of {', '.join(POST_PAID)}, not {segment!r}")
    prefix = f"{POST_PAID[segment]}:{subject}:"
    number = key.removeprefix(prefix)
    if not key.startswith(prefix) or not (number.isascii() and number.isdigit()) or len(number) > 18:
        raise bad_request(f"the key of a {segment} Charge must be {prefix}<n>, n a whole number, not {key!r}")
    seconds, rate, amount = _seconds(body.get("seconds")), _amount(body, "rateUSDPerHour"), _amount(body, "amountUSD")
    if amount != money.charge(rate, seconds):
        exact = money.text(money.charge(rate, seconds))
        raise bad_request(f"amountUSD {money.text(amount)} is not rateUSDPerHour x seconds / 3600 = {exact}")
    return Charge(segment=segment, seconds=seconds, rate_per_hour=rate, amount=amount)


def _seconds(value: Any) -> Decimal:
    try:
        seconds = Decimal(str(value))
    except ArithmeticError:
        raise bad_request("seconds must be a decimal number of seconds") from None
    if not seconds.is_finite() or seconds < 0:
        raise bad_request("seconds must be a decimal number of seconds of at least 0")
    return seconds.quantize(Decimal("0.001"))
