"""What a user reads: why this offering, what came next, and why the others were rejected."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.scheduler import explaining, run_cycle
from tests.scheduler import make_host, make_offering, make_snapshot, make_work


def explain(**work: Any) -> list[str]:
    offerings = [
        make_offering("h100-a", rate="2.500000", boot="90s"),
        make_offering("h100-b", rate="2.600000", boot="2m"),
        make_offering("h100-c", rate="2.700000", boot="2m"),
        make_offering("h100-x8", gpus=8),
        make_offering("a100", family="A100", accelerator="a100-sxm-80g"),
    ]
    result = run_cycle(make_snapshot([make_work(**work)], offerings))
    return result.bindings[0].explain.splitlines()


def test_explain_reads_top_down() -> None:
    assert explain(profile="Cost") == [
        "cycle 7: chose h100-a (Cost profile: $2.500000/h, lowest expected cost $2.562500 over 1h0m0s; "
        "cold start, boot p50 1m30s)",
        "runner-up: h100-b ($2.600000/h, expected $2.686667; cold start, boot p50 2m0s)",
        "runner-up: h100-c ($2.700000/h, expected $2.790000; cold start, boot p50 2m0s)",
        "rejected 2 offerings:",
        "  h100-x8 has another GPU count per host than 1",  # nearer miss first
        "  a100 has another GPU family than [H100]",
    ]


@pytest.mark.parametrize(
    ("work", "why"),
    [
        pytest.param(
            {"profile": "Speed"},
            "(Speed profile: $2.500000/h, earliest start, then fastest accelerator (H100), expected $2.562500;",
            id="speed",
        ),
        pytest.param(
            {"profile": "Balanced"},
            "(Balanced profile: $2.500000/h, lowest expected cost $2.562500 over 1h0m0s;",
            id="balanced-cheapest-is-fastest",
        ),
        pytest.param(
            {"profile": "Cost", "expected": "2h30m"},
            "lowest expected cost $6.312500 over 2h30m0s;",
            id="expected-duration",
        ),
    ],
)
def test_first_line_says_why(work: dict[str, Any], why: str) -> None:
    assert why in explain(**work)[0]


def test_balanced_says_what_it_paid_for_speed() -> None:
    offerings = [make_offering("cheap", rate="10.000000", boot="2m"), make_offering("mid", rate="10.800000", boot="1m")]
    [binding] = run_cycle(make_snapshot([make_work()], offerings)).bindings
    assert binding.offering == "mid"
    assert (
        "Balanced profile: $10.800000/h, starts soonest within 10% of the lowest expected cost $10.333333, "
        "expected $10.980000; cold start, boot p50 1m0s" in binding.explain
    )


def test_interruptible_choice_says_rework_is_priced_in() -> None:
    offerings = [make_offering("spot", rate="1.000000", interruptible=True, mtbi="6h")]
    [binding] = run_cycle(make_snapshot([make_work(interruptible="Allow", profile="Cost")], offerings)).bindings
    assert "interruptible (Allow; cost includes re-work for an interruption every 6h0m0s)" in binding.explain
    assert "expected cost $1.112500" in binding.explain


def test_warm_reuse_and_no_runner_up() -> None:
    result = run_cycle(make_snapshot([make_work()], [make_offering(capacity=1)], [make_host("n7")]))
    lines = result.bindings[0].explain.splitlines()
    assert lines[0].endswith("; warm node n7 reused)")
    assert lines[1:] == ["runner-up: none (no other offering is available)", "rejected 0 offerings"]


def test_rejected_lines_are_capped() -> None:
    offerings = [make_offering("h100")] + [
        make_offering(f"l4-{i:02d}", family="L4", accelerator="l4-24g") for i in range(20)
    ]
    lines = run_cycle(make_snapshot([make_work()], offerings)).bindings[0].explain.splitlines()
    assert "rejected 20 offerings:" in lines
    rejected = lines[lines.index("rejected 20 offerings:") + 1 :]
    assert len(rejected) == explaining.MAX_REJECTED_LINES + 1
    assert rejected[0] == "  l4-00 has another GPU family than [H100]"
    assert rejected[-1] == "  ... and 5 more"


def test_unschedulable_counts_reasons_and_names_the_fields() -> None:
    offerings = [
        *(make_offering(f"a100-{i}", family="A100", accelerator="a100-sxm-80g") for i in range(3)),
        make_offering("h100-dear-1", rate="4.000000"),
        make_offering("h100-dear-2", rate="5.000000"),
        make_offering("h100-full", rate="1.900000", capacity=1),
    ]
    hosts = [make_host("n1", "h100-full", busy=True)]
    [unschedulable] = run_cycle(make_snapshot([make_work(maxRateUSDPerHour="2")], offerings, hosts)).unschedulable
    assert unschedulable.message == (
        "No offering fits: 3 have another GPU family than [H100]; "
        "2 cost more than placement.maxRateUSDPerHour 2.000000; 1 is full (1 of 1 host in use). "
        "To widen the choice, change spec.resources.gpu.type or spec.placement.maxRateUSDPerHour; "
        "or wait for capacity."
    )
    assert unschedulable.waiting_for_capacity is True


def test_unschedulable_with_no_offerings_at_all() -> None:
    [unschedulable] = run_cycle(make_snapshot([make_work()], [])).unschedulable
    assert unschedulable.message == "No offering fits: there are no offerings in the price book."


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        pytest.param("have another GPU family than [H100]", "has another GPU family than [H100]", id="have"),
        pytest.param("are full (1 of 1 host in use)", "is full (1 of 1 host in use)", id="are"),
        pytest.param("cost more than placement.maxRateUSDPerHour 2.000000", "costs more", id="cost"),
        pytest.param("lack NVLink (gpu.interconnect is NVLink)", "lacks NVLink", id="lack"),
    ],
)
def test_singular(reason: str, text: str) -> None:
    assert explaining.singular(reason).startswith(text)


def test_many_reasons_are_summarised_and_the_nearest_misses_advised() -> None:
    rejections = [(stage, f"have reason {stage}") for stage in range(10)]
    message = explaining.unschedulable(rejections)
    assert "1 has reason 7; 2 more for other reasons." in message
    assert message.endswith("change spec.placement.interruptible, spec.resources.cpu or spec.resources.memory.")
