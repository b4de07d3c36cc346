"""Money as tables show it: amounts to the cent, rates to four decimals, and never a zero that hides a charge."""

from __future__ import annotations

from decimal import Decimal

import pytest

from nodus.apimachinery.money import amount_cell, rate_cell


@pytest.mark.parametrize(
    ("value", "symbol", "expected"),
    [
        pytest.param("4.705", "", "4.71", id="half-up-to-the-cent"),
        pytest.param("0.07", "", "0.07", id="cents"),
        pytest.param("12.5", "$", "$12.50", id="pads-cents"),
        pytest.param("1234567.5", "", "1,234,567.50", id="thousands"),
        pytest.param("0", "$", "$0.00", id="zero"),
        pytest.param("0.000000", "", "0.00", id="zero-with-places"),
        pytest.param("0.004213", "", "<0.01", id="a-tiny-charge-is-not-none"),
        pytest.param("0.004213", "$", "<$0.01", id="tiny-with-symbol"),
        pytest.param("0.005", "", "0.01", id="half-a-cent-rounds-up"),
        pytest.param("-2.5", "$", "-$2.50", id="negative"),
        pytest.param("-0.004", "", "-<0.01", id="a-tiny-negative"),
        pytest.param(Decimal("3"), "", "3.00", id="decimal"),
        pytest.param("garbage", "", "garbage", id="not-a-number-shown-as-is"),
        pytest.param("NaN", "", "NaN", id="nan-shown-as-is"),
    ],
)
def test_amount_cell(value: Decimal | str, symbol: str, expected: str) -> None:
    assert amount_cell(value, symbol) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("2.49", "2.4900", id="pads"),
        pytest.param("1.000400", "1.0004", id="four-places"),
        pytest.param("0.009766", "0.0098", id="half-up"),
        pytest.param("0.00003", "<0.0001", id="a-tiny-rate-is-not-none"),
        pytest.param("23.92", "23.9200", id="whole-dollars"),
        pytest.param("1000", "1,000.0000", id="thousands"),
    ],
)
def test_rate_cell(value: str, expected: str) -> None:
    assert rate_cell(value) == expected
