"""Durations, quantities, money and times are parsed exactly."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from nodus.apimachinery.units import format_duration, parse_duration, parse_quantity, parse_time, parse_usd


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("0s", timedelta(0), id="zero"),
        pytest.param("0", timedelta(0), id="bare-zero"),
        pytest.param("90s", timedelta(seconds=90), id="seconds"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="compound"),
        pytest.param("1.5h", timedelta(minutes=90), id="fraction"),
        pytest.param("250ms", timedelta(milliseconds=250), id="milliseconds"),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5", "1d", "-5m", "m5", "5 m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_format_duration_like_go() -> None:
    assert format_duration(timedelta(hours=1)) == "1h0m0s"
    assert format_duration(timedelta(seconds=90)) == "1m30s"
    assert format_duration(timedelta(0)) == "0s"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("16Gi", Decimal(16 * 2**30), id="binary"),
        pytest.param("1Ti", Decimal(2**40), id="tebi"),
        pytest.param("2k", Decimal(2000), id="decimal-si"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param(8, Decimal(8), id="integer"),
    ],
)
def test_quantities(text: str | int, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["1.2.3", "5X", "", "Gi"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(text)


def test_money_is_decimal_with_micro_usd_precision() -> None:
    assert parse_usd("12.500001") == Decimal("12.500001")
    for bad in ("1.1234567", "-1", "1e3", "abc", "12,5"):
        with pytest.raises(ValueError, match="decimal USD"):
            parse_usd(bad)


def test_times_need_a_zone() -> None:
    assert parse_time("2026-11-29T12:00:00Z").tzinfo is not None
    assert parse_time("2026-11-29T12:00:00+01:00").utcoffset() == timedelta(hours=1)
    for bad in ("2026-11-29T12:00:00", "2026-11-29", "tomorrow"):
        with pytest.raises(ValueError, match="RFC 3339"):
            parse_time(bad)
