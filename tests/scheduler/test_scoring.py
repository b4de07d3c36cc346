"""Expected cost and the three profiles, computed exactly in Decimal."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from nodus.scheduler import Offering, scoring
from nodus.scheduler.snapshot import Profile
from tests.scheduler import make_cpu_offering, make_offering

HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("offering", "run"),
    [
        pytest.param(make_offering(), HOUR, id="on-demand-unchanged"),
        # 1h / 6h interruptions, each a 90s reboot plus re-running 30m: 1/6 x 1890s = 315s more.
        pytest.param(make_offering(interruptible=True, mtbi="6h"), HOUR + timedelta(seconds=315), id="mtbi-6h"),
        # MTBI shorter than the run: 4 interruptions, each 90s + 7.5m.
        pytest.param(make_offering(interruptible=True, mtbi="15m"), HOUR + 4 * timedelta(seconds=540), id="mtbi-15m"),
        # No published MTBI: one interruption per run.
        pytest.param(make_offering(interruptible=True), HOUR + timedelta(seconds=90 + 1800), id="mtbi-unknown"),
    ],
)
def test_expected_run_includes_interruption_rework(offering: Offering, run: timedelta) -> None:
    assert scoring.expected_run(offering, HOUR) == run


@pytest.mark.parametrize(
    ("warm", "cost"),
    [
        pytest.param(False, Decimal("2.5625"), id="cold-pays-boot"),  # 2.50 x (3600 + 90) / 3600
        pytest.param(True, Decimal("2.5"), id="warm-pays-run-only"),
    ],
)
def test_expected_cost(warm: bool, cost: Decimal) -> None:
    assert scoring.expected_cost(make_offering(rate="2.500000", boot="90s"), HOUR, warm) == cost


@pytest.mark.parametrize(
    ("offering", "rank"),
    [
        pytest.param(make_offering(family="B200"), 0, id="b200-fastest"),
        pytest.param(make_offering(family="h100"), 2, id="h100-any-case"),
        pytest.param(make_offering(family="L4"), 7, id="l4"),
        pytest.param(make_offering(family="MI300X"), 8, id="unknown-family"),
        pytest.param(make_cpu_offering(), 9, id="cpu-last"),
    ],
)
def test_family_rank(offering: Offering, rank: int) -> None:
    assert scoring.family_rank(offering) == rank


# Expected 1h run: cheap costs $10.333333, mid $10.98 (within 10 %), fast $11.595833 (beyond it).
CHEAP = make_offering("cheap", rate="10.000000", boot="2m")
MID = make_offering("mid", rate="10.800000", boot="1m")
FAST = make_offering("fast", rate="11.500000", boot="30s")


def choose(profile: Profile, offerings: list[Offering], unavailable: frozenset[str] = frozenset()) -> scoring.Choice:
    options = [o for offering in offerings for o in scoring.options(offering, HOUR, "Never", warm=False)]
    choice = scoring.choose(scoring.rank(options, profile), profile, lambda o: o.offering.id not in unavailable)
    assert choice is not None
    return choice


@pytest.mark.parametrize(
    ("profile", "chosen"),
    [
        pytest.param("Cost", "cheap", id="cost-cheapest"),
        pytest.param("Speed", "fast", id="speed-earliest-start"),
        pytest.param("Balanced", "mid", id="balanced-fastest-within-10-percent"),
    ],
)
def test_profiles(profile: Profile, chosen: str) -> None:
    assert choose(profile, [FAST, MID, CHEAP]).option.offering.id == chosen


def test_balanced_band_follows_the_cheapest_available_option() -> None:
    # With "cheap" gone, "mid" is the cheapest and "fast" is within 10 % of it.
    assert choose("Balanced", [FAST, MID, CHEAP], frozenset({"cheap"})).option.offering.id == "fast"


def test_runners_up_are_other_offerings_in_profile_order() -> None:
    choice = choose("Cost", [FAST, MID, CHEAP])
    assert [o.offering.id for o in choice.runners_up] == ["mid", "fast"]
    assert choice.cheapest.offering.id == "cheap"


def test_speed_prefers_the_faster_family_when_boot_times_tie() -> None:
    a100 = make_offering("a100", family="A100", rate="1.000000")
    h100 = make_offering("h100", family="H100", rate="3.000000")
    assert choose("Speed", [a100, h100]).option.offering.id == "h100"


def test_ties_break_by_offering_id() -> None:
    twins = [make_offering("b-twin"), make_offering("a-twin")]
    for profile in ("Cost", "Speed", "Balanced"):
        assert choose(profile, twins).option.offering.id == "a-twin"


def test_nothing_available_chooses_nothing() -> None:
    options = scoring.options(CHEAP, HOUR, "Never", warm=False)
    assert scoring.choose(options, "Cost", lambda _: False) is None
