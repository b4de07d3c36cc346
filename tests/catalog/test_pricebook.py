"""The price book: the shipped one expands into valid, explicit Offerings; a bad one is refused clearly."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from nodus.api import objectmeta, offerings
from nodus.api.kinds.offering import OFFERING
from nodus.apimachinery import units
from nodus.apis.v1 import accelerators
from nodus.catalog import pricebook
from nodus.catalog.pricebook import PriceBook, PriceBookError

SHIPPED = resources.files("nodus.catalog").joinpath("pricebook.yaml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return offerings.load(None)


def _parse(text: str) -> PriceBook:
    return pricebook.parse(text, "test.yaml", accelerators.CATALOG)


def _scalars(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item)
    else:
        yield value


def test_shipped_book_loads(book: PriceBook) -> None:
    assert (book.version, book.currency, book.provider) == ("2026-11", "USD", "sim")
    assert 80 <= len(book.offerings) <= 150


def test_every_offering_is_a_valid_offering_object(book: PriceBook) -> None:
    for offering in book.offerings:
        body = offering.body()
        assert (body["apiVersion"], body["kind"]) == ("nodus.dev/v1", "Offering")
        assert objectmeta.validate_metadata(body["metadata"], dns_label_names=OFFERING.dns_label_names) == []
        assert OFFERING.strategy.validate(body) == [], offering.name
        assert body["metadata"]["labels"] == {"nodus.dev/pricebook-version": "2026-11"}
        assert body["spec"]["pricebookVersion"] == "2026-11"
        assert not any(isinstance(value, float) for value in _scalars(body)), offering.name


def test_offering_ids_are_unique_and_name_their_shape(book: PriceBook) -> None:
    names = [offering.name for offering in book.offerings]
    assert len(names) == len(set(names))
    for offering in book.offerings:
        shape = f"{offering.accelerator}-x{offering.gpus}" if offering.accelerator else f"cpu-{offering.vcpu}c"
        expected = f"{shape}-{offering.region_class}" + ("-spot" if offering.interruptible else "")
        assert offering.name == expected


def test_accelerators_are_catalog_variants_with_their_family_and_memory(book: PriceBook) -> None:
    catalog = {accelerator.id: accelerator for accelerator in accelerators.CATALOG}
    used = {offering.accelerator for offering in book.offerings if offering.accelerator}
    assert used == set(accelerators.VARIANT_IDS)  # every variant a Job may ask for can be bought
    for offering in book.offerings:
        if offering.accelerator is None:
            assert (offering.gpus, offering.family, offering.gpu_memory, offering.interconnect) == (
                0,
                None,
                None,
                "None",
            )
            continue
        variant = catalog[offering.accelerator]
        assert offering.family == variant.family
        assert offering.gpu_memory is not None
        assert units.parse_quantity(offering.gpu_memory) == variant.memory_bytes
        assert offering.gpus in (1, 2, 4, 8)
        assert offering.interconnect in ("NVLink", "PCIe")


def test_the_documented_offering(book: PriceBook) -> None:
    """docs/running-jobs.md shows this one."""
    assert book.by_name()["h100-sxm-80g-x8-us"].spec() == {
        "accelerator": "h100-sxm-80g",
        "family": "H100",
        "gpus": 8,
        "gpuMemory": "80Gi",
        "interconnect": "NVLink",
        "vcpu": 208,
        "memory": "1800Gi",
        "disk": "20Ti",
        "provider": "sim",
        "region": "us-east",
        "regionClass": "us",
        "interruptible": False,
        "rateUSDPerHour": "23.920000",
        "boot": {"p50": "90s", "p90": "4m"},
        "pricebookVersion": "2026-11",
    }
    spot = book.by_name()["h100-sxm-80g-x8-us-spot"].spec()
    assert (spot["interruptible"], spot["meanTimeBetweenInterruptions"], spot["rateUSDPerHour"]) == (
        True,
        "6h",
        "11.960000",
    )


def test_prices_follow_region_market_and_size(book: PriceBook) -> None:
    by_name = book.by_name()
    for offering in book.offerings:
        assert Decimal(0) < offering.rate < Decimal(100)
        assert len(offering.spec()["rateUSDPerHour"].partition(".")[2]) == 6
        stem = offering.name.removesuffix("-spot").rsplit("-", 1)[0]
        us = by_name.get(f"{stem}-us")
        if offering.interruptible:
            on_demand = by_name[offering.name.removesuffix("-spot")]
            assert offering.rate < on_demand.rate
            assert offering.mean_time_between_interruptions is not None
        elif offering.region_class != "us" and us is not None:
            assert offering.rate > us.rate
    # Bigger hosts of one accelerator cost more and have more of everything.
    h100 = [by_name[f"h100-sxm-80g-x{n}-us"] for n in (1, 2, 4, 8)]
    assert [o.rate for o in h100] == sorted(o.rate for o in h100)
    assert [o.vcpu for o in h100] == [26, 52, 104, 208]


def test_shipped_file_is_package_data() -> None:
    assert resources.files("nodus.catalog").joinpath("pricebook.yaml").is_file()
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert "catalog/pricebook.yaml" in pyproject


def test_a_file_is_loaded_from_its_path(tmp_path: Path) -> None:
    path = tmp_path / "book.yaml"
    path.write_text(SHIPPED.replace('version: "2026-11"', 'version: "2027-01"'))
    book = pricebook.load(path, accelerators.CATALOG)
    assert book.version == "2027-01" and book.source == str(path)
    assert {o.body()["metadata"]["labels"]["nodus.dev/pricebook-version"] for o in book.offerings} == {"2027-01"}


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PriceBookError, match=r"book\.yaml is invalid:\n  - cannot be read"):
        pricebook.load(tmp_path / "book.yaml", accelerators.CATALOG)


H100_SIZES = 'sizes: {1: "3.29", 2: "6.38", 4: "12.36", 8: "23.92"}'


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            H100_SIZES,
            'sizes: {1: 3.29, 2: "6.38", 4: "12.36", 8: "23.92"}',
            'gpuHosts[2] (h100-sxm-80g).sizes.1: must be a quoted decimal string such as "2.49", not the YAML float',
            id="rate-as-float",
        ),
        pytest.param(
            H100_SIZES,
            'sizes: {1: "3.2912345", 2: "6.38", 4: "12.36", 8: "23.92"}',
            "gpuHosts[2] (h100-sxm-80g).sizes.1: must be a decimal string with at most 6 fraction digits",
            id="rate-with-7-fraction-digits",
        ),
        pytest.param(
            H100_SIZES,
            'sizes: {1: "3.29", 2: "6.38", 4: "12.36", 16: "23.92"}',
            "gpuHosts[2] (h100-sxm-80g).sizes.16 (as a key): Input should be 1, 2, 4 or 8",
            id="gpu-count-16",
        ),
        pytest.param(
            H100_SIZES,
            'sizes: {1: "3.29", 1: "6.38"}',
            "found duplicate key 1",
            id="duplicate-key",
        ),
        pytest.param(
            "accelerator: h100-pcie-80g",
            "accelerator: h100-nvl-94g",
            "gpuHosts[3] (h100-nvl-94g).accelerator: unknown accelerator id",
            id="unknown-accelerator",
        ),
        pytest.param(
            "  rtx4090-24g: {family: RTX4090, memory: 24Gi}",
            "  rtx4090-24g: {family: RTX4090, memory: 24Gi}\n  mi300x-192g: {family: MI300X, memory: 192Gi}",
            "accelerators.mi300x-192g: unknown accelerator id; known ids: a100-pcie-40g",
            id="unknown-accelerator-listed",
        ),
        pytest.param(
            "l4-24g: {family: L4, memory: 24Gi}",
            "l4-24g: {family: L4, memory: 32Gi}",
            "accelerators.l4-24g.memory: l4-24g has 24Gi per GPU, not 32Gi",
            id="wrong-gpu-memory",
        ),
        pytest.param(
            "    interconnect: NVLink\n    perGpu: {vcpu: 26,",
            "    perGpu: {vcpu: 26,",
            "gpuHosts[2] (h100-sxm-80g).interconnect: is required",
            id="missing-field",
        ),
        pytest.param(
            "currency: USD",
            "currency: EUR",
            "currency: Input should be 'USD'",
            id="currency",
        ),
        pytest.param(
            "boot: {p50: 90s, p90: 4m}",
            "boot: {p50: 5m, p90: 4m}",
            "gpuHosts[2] (h100-sxm-80g).boot: p90 (4m) must not be shorter than p50 (5m)",
            id="boot-band-inverted",
        ),
        pytest.param(
            'priceFactor: "0.50", meanTimeBetweenInterruptions: 6h',
            'priceFactor: "1.10", meanTimeBetweenInterruptions: 6h',
            "gpuHosts[2] (h100-sxm-80g).interruptible: priceFactor (1.10) must be below 1",
            id="spot-dearer-than-on-demand",
        ),
        pytest.param(
            "meanTimeBetweenInterruptions: 8h, regions: [us]}\n\n  - accelerator: a100-sxm-80g",
            "meanTimeBetweenInterruptions: 8h, regions: [asia]}\n\n  - accelerator: a100-sxm-80g",
            "gpuHosts[3] (h100-pcie-80g).interruptible.regions: asia is not among the host's regions (us, eu)",
            id="spot-outside-host-regions",
        ),
        pytest.param(
            "{vcpu: 32, memory: 128Gi",
            "{vcpu: 32, memory: lots",
            "cpuHosts[1] (cpu-32c).memory: 'lots' is not a quantity",
            id="bad-quantity",
        ),
        pytest.param(
            "currency: USD",
            "currency: USD\ncolour: blue",
            "colour: is not a price book field",
            id="unknown-field",
        ),
        pytest.param(
            "cpuHosts:\n",
            'cpuHosts:\n  - {vcpu: 8, memory: 32Gi, disk: 1Ti, rate: "1", regions: [us], boot: {p50: 1s, p90: 1s}}\n',
            "offering cpu-8c-us is described more than once",
            id="duplicate-offering",
        ),
    ],
)
def test_a_bad_book_is_refused_naming_entry_and_field(old: str, new: str, message: str) -> None:
    assert old in SHIPPED
    with pytest.raises(PriceBookError) as caught:
        _parse(SHIPPED.replace(old, new, 1))
    assert str(caught.value).startswith("price book test.yaml is invalid:\n  - ")
    assert message in str(caught.value)


@pytest.mark.parametrize("text", ["version: [", "- a list", ""], ids=["yaml-syntax", "not-a-mapping", "empty"])
def test_a_file_that_is_not_a_book_is_refused(text: str) -> None:
    with pytest.raises(PriceBookError, match=r"test\.yaml is invalid"):
        _parse(text)


def test_a_book_without_hosts_is_refused() -> None:
    text = SHIPPED[: SHIPPED.index("# GPU hosts.")]
    with pytest.raises(PriceBookError, match="describes no offerings"):
        _parse(text)


def test_the_catalog_given_is_the_one_checked() -> None:
    """nodus.catalog does not know the API's accelerators: the caller passes them."""
    without_l4 = [a for a in accelerators.CATALOG if a.id != "l4-24g"]
    with pytest.raises(PriceBookError, match=r"accelerators\.l4-24g: unknown accelerator id"):
        pricebook.parse(SHIPPED, "test.yaml", without_l4)


# --- storage ---------------------------------------------------------------------------------------

STORAGE = 'storage: {rateUSDPerGiBMonth: "0.023", freePerJob: 10Gi}'


def test_the_shipped_book_prices_storage_per_gib_month_above_a_free_inclusion(book: PriceBook) -> None:
    assert book.storage == pricebook.StoragePrice(Decimal("0.023"), 10 * 2**30)
    assert book.storage.wire(book.version) == {
        "pricebookVersion": "2026-11",
        "rateUSDPerGiBMonth": "0.023",
        "freeBytes": 10 * 2**30,
        "hoursPerMonth": 730,
    }


@pytest.mark.parametrize(
    ("storage", "free"),
    [
        pytest.param('storage: {rateUSDPerGiBMonth: "7300", freePerJob: 256Ki}', 256 * 1024, id="kibibytes"),
        pytest.param('storage: {rateUSDPerGiBMonth: "0.02", freePerJob: "0"}', 0, id="nothing-free"),
        pytest.param('storage: {rateUSDPerGiBMonth: "0.02", freePerJob: 1G}', 10**9, id="decimal-unit"),
    ],
)
def test_a_storage_price_may_have_any_inclusion(storage: str, free: int) -> None:
    assert _parse(SHIPPED.replace(STORAGE, storage)).storage.free_bytes == free


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        pytest.param("", "storage: is required", id="missing"),
        pytest.param(
            "storage: {rateUSDPerGiBMonth: 0.023, freePerJob: 10Gi}",
            "storage.rateUSDPerGiBMonth: must be a quoted decimal string",
            id="float-rate",
        ),
        pytest.param(
            'storage: {rateUSDPerGiBMonth: "0", freePerJob: 10Gi}',
            "storage.rateUSDPerGiBMonth: must be greater than 0",
            id="free-storage",
        ),
        pytest.param(
            'storage: {rateUSDPerGiBMonth: "0.023", freePerJob: -1Gi}',
            "storage.freePerJob: must be a whole number of bytes of at least 0",
            id="negative-inclusion",
        ),
        pytest.param(
            'storage: {rateUSDPerGiBMonth: "0.023", freePerJob: 10Gi, perFile: "1"}',
            "storage.perFile: is not a price book field",
            id="unknown-field",
        ),
    ],
)
def test_a_bad_storage_price_is_refused(storage: str, message: str) -> None:
    assert STORAGE in SHIPPED
    with pytest.raises(PriceBookError) as caught:
        _parse(SHIPPED.replace(STORAGE, storage))
    assert message in str(caught.value)


def test_the_shipped_book_has_the_platform_fee_the_scheduler_defaults_to(book: PriceBook) -> None:
    from nodus.scheduler.capacity import PlatformFee

    assert book.platform_fee == pricebook.PlatformFee(Decimal("0.20"), Decimal("0.05"))
    assert (book.platform_fee.per_gpu_hour, book.platform_fee.per_host_hour) == (
        PlatformFee().per_gpu_hour,
        PlatformFee().per_host_hour,
    )
    assert book.platform_fee.wire() == {"perGPUHour": "0.200000", "perHostHour": "0.050000"}


def test_a_book_sets_its_platform_fee_and_refuses_a_float() -> None:
    fee = _parse(SHIPPED.replace('perGPUHour: "0.20"', 'perGPUHour: "0.35"')).platform_fee
    assert fee.per_gpu_hour == Decimal("0.35")
    with pytest.raises(PriceBookError, match=r"platformFee.perGPUHour: must be a quoted decimal string"):
        _parse(SHIPPED.replace('perGPUHour: "0.20"', "perGPUHour: 0.20"))


def test_a_shareable_gpu_host_makes_shareable_offerings(book: PriceBook) -> None:
    assert not any(offering.shareable for offering in book.offerings)  # the shipped book shares no host
    anchor = "  - accelerator: h100-sxm-80g\n    interconnect: NVLink\n"
    assert anchor in SHIPPED
    shared = _parse(SHIPPED.replace(anchor, anchor + "    shareable: true\n"))
    h100 = [o for o in shared.offerings if o.accelerator == "h100-sxm-80g"]
    assert h100 and all(o.shareable and o.body()["spec"]["shareable"] is True for o in h100)
    assert OFFERING.strategy.validate(h100[0].body()) == []
    assert not any(o.shareable for o in shared.offerings if o.accelerator != "h100-sxm-80g")
