"""``nodus controllers --price-book``: the scheduler prices attempts on Pool hosts at the platform fee of the price
book the API servers serve, and a bad book stops the controllers before they start."""

from __future__ import annotations

from decimal import Decimal
from importlib import resources
from pathlib import Path

import pytest

from nodus.catalog.pricebook import PriceBookError
from nodus.cli import main, processes

SHIPPED_FEE = 'platformFee: {perGPUHour: "0.20", perHostHour: "0.05"}'


def settings(tmp_path: Path, *argv: str) -> processes.ControllerSettings:
    args = main.parser().parse_args(["controllers", "--provider", "none", *argv])
    return processes.controller_settings(args, tmp_path / "kubeconfig")


def test_the_platform_fee_comes_from_the_price_book(tmp_path: Path) -> None:
    shipped = resources.files("nodus.catalog").joinpath("pricebook.yaml").read_text(encoding="utf-8")
    assert shipped.count(SHIPPED_FEE) == 1, "the shipped price book's platformFee line changed: update the test"
    book = tmp_path / "book.yaml"
    book.write_text(shipped.replace(SHIPPED_FEE, 'platformFee: {perGPUHour: "0.35", perHostHour: "0.08"}'))
    fee = settings(tmp_path, "--price-book", str(book)).platform_fee
    assert fee is not None and (fee.per_gpu_hour, fee.per_host_hour) == (Decimal("0.35"), Decimal("0.08"))
    default = settings(tmp_path).platform_fee
    assert default is not None and (default.per_gpu_hour, default.per_host_hour) == (Decimal("0.20"), Decimal("0.05"))


def test_a_bad_price_book_stops_the_controllers(tmp_path: Path) -> None:
    book = tmp_path / "book.yaml"
    book.write_text("version: x\n")
    with pytest.raises(PriceBookError, match=r"book\.yaml"):
        settings(tmp_path, "--price-book", str(book))
