"""Each filter admits what fits and words what does not, so a user knows which field to change."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.scheduler import filters
from tests.scheduler import make_cpu_offering, make_offering, make_work

H100 = {"family": "H100", "accelerator": "h100-sxm-80g"}
A100_40G = {"family": "A100", "accelerator": "a100-pcie-40g", "gpu_memory": "40Gi", "interconnect": "PCIe"}


def rejection(work: dict[str, Any], offering: dict[str, Any], cpu_offering: bool = False) -> str | None:
    candidate = make_cpu_offering(**offering) if cpu_offering else make_offering(**offering)
    # The snapshot teaches variant -> family; include an H100 offering so variant ids resolve.
    names = filters.family_names([candidate, make_offering("h100-pcie", accelerator="h100-pcie-80g")])
    need = filters.Requirements.of(make_work(**work), names)
    found = filters.first_rejection(need, candidate)
    return None if found is None else found[1]


@pytest.mark.parametrize(
    ("work", "offering", "cpu_offering", "reason"),
    [
        # GPU or not
        pytest.param({"cpu_only": True}, {}, True, None, id="cpu-work-on-cpu-offering"),
        pytest.param({"cpu_only": True}, {}, False, "have GPUs and the Work asks for none", id="cpu-work-on-gpu"),
        pytest.param({}, {}, True, "have no GPUs", id="gpu-work-on-cpu-offering"),
        # gpu.type: families, variants, exact
        pytest.param({}, H100, False, None, id="family"),
        pytest.param({"gpu": {"type": ["h100"]}}, H100, False, None, id="family-any-case"),
        pytest.param({}, A100_40G, False, "have another GPU family than [H100]", id="other-family"),
        pytest.param({"gpu": {"type": ["A100", "h100"]}}, H100, False, None, id="one-of-several-families"),
        pytest.param({"gpu": {"type": ["h100-pcie-80g"]}}, H100, False, None, id="variant-selects-its-family"),
        pytest.param(
            {"gpu": {"type": ["h100-pcie-80g"]}}, A100_40G, False, "another GPU family than [H100]", id="variant-other"
        ),
        pytest.param({"gpu": {"type": ["h100-sxm-80g"], "exact": True}}, H100, False, None, id="exact-variant"),
        pytest.param(
            {"gpu": {"type": ["h100-pcie-80g"], "exact": True}},
            H100,
            False,
            "have another accelerator than [h100-pcie-80g] (exact)",
            id="exact-other-variant-same-family",
        ),
        pytest.param(
            {"gpu": {"type": ["H100"], "exact": True}}, H100, False, "another accelerator", id="exact-family-name"
        ),
        # gpu.count: hosts are dedicated, the count must match exactly
        pytest.param({}, {"gpus": 8}, False, "have another GPU count per host than 1", id="count-defaults-to-1"),
        pytest.param({"gpu": {"type": ["H100"], "count": 8}}, {"gpus": 8}, False, None, id="count-8"),
        pytest.param({"gpu": {"type": ["H100"], "count": 4}}, {"gpus": 8}, False, "than 4", id="count-4-on-8"),
        # minMemory, interconnect
        pytest.param({"gpu": {"type": ["H100"], "minMemory": "80Gi"}}, {}, False, None, id="gpu-memory-equal"),
        pytest.param(
            {"gpu": {"type": ["A100"], "minMemory": "80Gi"}},
            A100_40G,
            False,
            "have less memory per GPU than gpu.minMemory 80Gi",
            id="gpu-memory-short",
        ),
        pytest.param({"gpu": {"type": ["H100"], "interconnect": "NVLink"}}, {}, False, None, id="nvlink"),
        pytest.param(
            {"gpu": {"type": ["H100"], "interconnect": "NVLink"}},
            {"interconnect": "PCIe"},
            False,
            "lack NVLink",
            id="nvlink-missing",
        ),
        pytest.param(
            {"gpu": {"type": ["H100"], "interconnect": "Any"}}, {"interconnect": "PCIe"}, False, None, id="any"
        ),
        # regions
        pytest.param({"regions": ["eu"]}, {}, False, "are outside placement.regions [eu]", id="other-region"),
        pytest.param({"regions": ["eu", "US"]}, {}, False, None, id="region-listed"),
        pytest.param({"regions": []}, {"region_class": "asia"}, False, None, id="no-regions-means-any"),
        # interruptible
        pytest.param(
            {"interruptible": "Never"},
            {"interruptible": True, "mtbi": "6h"},
            False,
            "are interruptible and placement.interruptible is Never",
            id="never-interruptible",
        ),
        pytest.param({"interruptible": "Allow"}, {"interruptible": True}, False, None, id="allow-interruptible"),
        pytest.param({"interruptible": "Prefer"}, {"interruptible": True}, False, None, id="prefer-interruptible"),
        pytest.param({"interruptible": "Prefer"}, {}, False, None, id="prefer-on-demand"),
        # resource floors: the host shape may be larger
        pytest.param({"resources": {"cpu": "26"}}, {}, False, None, id="cpu-floor-equal"),
        pytest.param({"resources": {"cpu": "500m"}}, {}, False, None, id="cpu-floor-milli"),
        pytest.param({"resources": {"cpu": "32"}}, {}, False, "have fewer vCPUs than resources.cpu 32", id="cpu-short"),
        pytest.param(
            {"resources": {"memory": "256Gi"}}, {}, False, "have less memory than resources.memory 256Gi", id="mem"
        ),
        pytest.param({"resources": {"disk": "3Ti"}}, {}, False, "have less disk than resources.disk 3Ti", id="disk"),
        pytest.param({"resources": {"disk": "2Ti"}}, {}, False, None, id="disk-equal"),
        pytest.param(
            {"cpu_only": True, "resources": {"memory": "128Gi"}},
            {},
            True,
            "have less memory than resources.memory 128Gi",
            id="cpu-only-memory-short",
        ),
        # price and allowed offerings
        pytest.param(
            {"maxRateUSDPerHour": "2"},
            {"rate": "2.500000"},
            False,
            "cost more than placement.maxRateUSDPerHour 2.000000",
            id="over-max-rate",
        ),
        pytest.param({"maxRateUSDPerHour": "2.5"}, {"rate": "2.500000"}, False, None, id="at-max-rate"),
        pytest.param({"offerings": ["h100-x1-us"]}, {}, False, None, id="listed-offering"),
        pytest.param(
            {"offerings": ["a", "b", "c", "d", "e"]},
            {},
            False,
            "are not in placement.offerings [a, b, c, d, +1 more]",
            id="unlisted-offering",
        ),
    ],
)
def test_filters(work: dict[str, Any], offering: dict[str, Any], cpu_offering: bool, reason: str | None) -> None:
    found = rejection(work, offering, cpu_offering)
    if reason is None:
        assert found is None
    else:
        assert found is not None
        assert reason in found


@pytest.mark.parametrize(
    ("work", "offering", "reason"),
    [
        pytest.param({"maxRateUSDPerHour": "1"}, A100_40G, "another GPU family", id="accelerator-before-price"),
        pytest.param({"offerings": ["elsewhere"], "regions": ["eu"]}, {}, "placement.offerings", id="offerings-first"),
        pytest.param(
            {"regions": ["eu"], "resources": {"cpu": "64"}}, {}, "placement.regions", id="region-before-floors"
        ),
    ],
)
def test_an_offering_is_reported_under_its_first_failing_filter(
    work: dict[str, Any], offering: dict[str, Any], reason: str
) -> None:
    found = rejection(work, offering)
    assert found is not None
    assert reason in found


def test_screen_agrees_with_first_rejection_and_skips_unset_checks() -> None:
    need = filters.Requirements.of(make_work(regions=["eu"]), {})
    offerings = [make_offering("a", gpus=8), make_offering("b", region_class="eu"), make_offering("c")]
    fitting, rejected = filters.screen(need, offerings)
    assert [o.id for o in fitting] == ["b"]
    one_by_one = [(o, filters.first_rejection(need, o)) for o in offerings]
    assert rejected == [(found[0], o.id, found[1]) for o, found in one_by_one if found is not None]
    assert [stage for stage, _ in filters.applicable(need)] == [1, 2, 3, 6, 7]


def test_every_filter_names_the_field_to_change() -> None:
    assert all(f.changes.startswith("spec.") for f in filters.FILTERS)
    assert len(filters.FILTERS) == filters.CAPACITY_STAGE


def test_requirements_are_shared_by_identical_shapes() -> None:
    names = filters.family_names([make_offering()])
    first = filters.Requirements.of(make_work("a-0-1", gpu={"type": ["h100"]}), names)
    second = filters.Requirements.of(make_work("b-0-1", gpu={"type": ["H100"]}), names)
    assert first == second
    assert hash(first) == hash(second)
