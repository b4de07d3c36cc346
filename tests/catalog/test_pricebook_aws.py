"""The AWS price book: every offering names an EC2 instance type and an AWS region, and a book for the aws provider
that leaves a size without its instance type is refused, naming the entry and the fix."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from nodus.api import objectmeta, offerings
from nodus.api.kinds.offering import OFFERING
from nodus.apis.v1 import accelerators
from nodus.catalog import pricebook
from nodus.catalog.pricebook import PriceBook, PriceBookError

AWS = resources.files("nodus.catalog").joinpath("pricebook-aws.yaml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return offerings.load(Path("aws"))


def test_the_aws_book_is_chosen_by_name_and_every_offering_is_valid(book: PriceBook) -> None:
    assert (book.provider, book.version) == ("aws", "2026-11-aws")
    assert "pricebook-aws.yaml" in book.source
    for offering in book.offerings:
        body = offering.body()
        assert OFFERING.strategy.validate(body) == [], offering.name
        assert objectmeta.validate_metadata(body["metadata"], dns_label_names=OFFERING.dns_label_names) == []
        assert body["spec"]["provider"] == "aws"
        assert body["spec"]["instanceType"], offering.name
        assert body["spec"]["region"] in ("us-east-1", "eu-west-1", "ap-northeast-1")


@pytest.mark.parametrize(
    ("offering", "instance_type", "region", "interruptible"),
    [
        pytest.param("h100-sxm-80g-x8-us", "p5.48xlarge", "us-east-1", False, id="p5"),
        pytest.param("h100-sxm-80g-x8-us-spot", "p5.48xlarge", "us-east-1", True, id="p5-spot"),
        pytest.param("a10g-24g-x1-eu", "g5.4xlarge", "eu-west-1", False, id="g5"),
        pytest.param("l40s-48g-x4-asia", "g6e.12xlarge", "ap-northeast-1", False, id="g6e"),
        pytest.param("cpu-8c-us-spot", "m7i.2xlarge", "us-east-1", True, id="m7i-spot"),
    ],
)
def test_offerings_map_to_instance_types_and_regions(
    book: PriceBook, offering: str, instance_type: str, region: str, interruptible: bool
) -> None:
    spec = book.by_name()[offering].spec()
    assert (spec["instanceType"], spec["region"], spec["interruptible"]) == (instance_type, region, interruptible)


def test_the_sim_book_names_no_instance_types() -> None:
    assert all("instanceType" not in o.spec() for o in offerings.load(None).offerings)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            "    instanceTypes: {1: g6e.4xlarge, 4: g6e.12xlarge, 8: g6e.48xlarge}\n",
            "",
            "gpuHosts[3] (l40s-48g).instanceTypes: required by provider aws (one per size)",
            id="gpu-host-without",
        ),
        pytest.param(
            "instanceTypes: {1: g6e.4xlarge, 4: g6e.12xlarge, 8: g6e.48xlarge}",
            "instanceTypes: {1: g6e.4xlarge, 8: g6e.48xlarge}",
            "gpuHosts[3] (l40s-48g).instanceTypes: must name one instance type per size (1, 4, 8)",
            id="a-size-without",
        ),
        pytest.param(
            "instanceType: m7i.2xlarge, ",
            "",
            "cpuHosts[0] (cpu-8c).instanceType: required by provider aws",
            id="cpu-host-without",
        ),
        pytest.param(
            "instanceType: m7i.2xlarge,",
            "instanceType: M7I 2XL,",
            "cpuHosts[0] (cpu-8c).instanceType: String should match pattern",
            id="not-an-instance-type",
        ),
    ],
)
def test_an_aws_book_must_name_an_instance_type_per_size(old: str, new: str, message: str) -> None:
    assert AWS.count(old) == 1
    with pytest.raises(PriceBookError) as refused:
        pricebook.parse(AWS.replace(old, new), "aws.yaml", accelerators.CATALOG)
    assert any(problem.startswith(message) for problem in refused.value.problems), refused.value.problems
