"""The words a user reads in ``kubectl get attempt -o yaml``: ``placement.explain`` and the Unschedulable message.

A binding's explain reads top-down, most important first::

    cycle 42: chose h100-sxm-80g-x1-us (Cost profile: $2.690000/h, lowest expected cost $2.757250 over 1h0m0s;
    cold start, boot p50 1m30s)
    runner-up: h100-pcie-80g-x1-us ($2.890000/h, expected $2.970278; cold start, boot p50 2m0s)
    rejected 3 offerings:
      a100-sxm-80g-x1-us is full (4 of 4 hosts in use)
      l4-24g-x1-us has another GPU family than [H100]
      ...

(the first line is one line). Rejected offerings come nearest miss first (full, then too expensive,
... then the wrong accelerator), at most :data:`MAX_REJECTED_LINES` of them. An Unschedulable
message counts the offerings under each reason, then names the Job fields that would widen the
choice. Money is shown with six fractional digits, as the API writes it; durations as Go does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nodus.apimachinery.units import format_duration
from nodus.scheduler import filters, scoring
from nodus.scheduler.snapshot import Interruptible, Profile, format_usd

MAX_REJECTED_LINES = 15
MAX_REASON_GROUPS = 8
MAX_HINTS = 3
# Every filter reason starts with one of these plural verbs (see filters' module docstring).
_SINGULAR = {"have": "has", "are": "is", "cost": "costs", "lack": "lacks"}


def singular(reason: str) -> str:
    """A filter reason for one offering: ``have another ...`` -> ``has another ...``."""
    verb, _, rest = reason.partition(" ")
    return f"{_SINGULAR.get(verb, verb)} {rest}"


def binding(
    cycle: int,
    profile: Profile,
    interruptible: Interruptible,
    choice: scoring.Choice,
    node: str | None,
    rejected: Iterable[tuple[str, str]],
    rejected_total: int,
) -> str:
    """The explain text of a binding. ``rejected`` yields (offering id, reason), nearest miss first."""
    option = choice.option
    lines = [
        f"cycle {cycle}: chose {option.offering.id} ({profile} profile: "
        f"${format_usd(option.offering.rate_usd_per_hour)}/h, {_why(profile, interruptible, choice)}; "
        f"{_start(option, node)})"
    ]
    lines += [
        f"runner-up: {o.offering.id} (${format_usd(o.offering.rate_usd_per_hour)}/h, "
        f"expected ${format_usd(o.cost)}; {_start(o, None)})"
        for o in choice.runners_up
    ] or ["runner-up: none (no other offering is available)"]
    plural = "" if rejected_total == 1 else "s"
    lines.append(f"rejected {rejected_total} offering{plural}" + (":" if rejected_total else ""))
    shown = 0
    for offering_id, reason in rejected:
        if shown == MAX_REJECTED_LINES:
            break
        lines.append(f"  {offering_id} {singular(reason)}")
        shown += 1
    if rejected_total > shown:
        lines.append(f"  ... and {rejected_total - shown} more")
    return "\n".join(lines)


def unschedulable(rejections: Iterable[tuple[int, str]]) -> str:
    """Why no offering fits, from each offering's (stage, reason); names what the user can change.

    Reasons are counted per filter stage. Offerings that are full at different levels are counted
    together ("5 are full") unless they all read the same ("2 are full (4 of 4 hosts in use)"). The
    advice names the Job fields of the (at most :data:`MAX_HINTS`) nearest misses.
    """
    groups: dict[tuple[int, str], list[str]] = {}
    for stage, reason in rejections:
        groups.setdefault((stage, reason.split(" (", 1)[0]), []).append(reason)
    if not groups:
        return "No offering fits: there are no offerings in the price book."
    ordered = sorted(groups.items(), key=lambda item: item[0][0])  # stable: offering order within a stage
    parts = []
    for (_, head), reasons in ordered[:MAX_REASON_GROUPS]:
        text = reasons[0] if len(set(reasons)) == 1 else head
        parts.append(f"{len(reasons)} {singular(text) if len(reasons) == 1 else text}")
    if len(ordered) > MAX_REASON_GROUPS:
        parts.append(f"{sum(len(reasons) for _, reasons in ordered[MAX_REASON_GROUPS:])} more for other reasons")
    stages = sorted({stage for stage, _ in groups})
    # Advise the fields of the nearest misses: changing them is what brings an offering within reach.
    fields = [filters.FILTERS[stage].changes for stage in stages if stage < filters.CAPACITY_STAGE][-MAX_HINTS:]
    waiting = filters.CAPACITY_STAGE in stages
    if not fields:
        advice = (
            "Wait for capacity, or change spec.placement (regions, interruptible, offerings) to reach other offerings."
        )
    else:
        advice = f"To widen the choice, change {_either(fields)}" + ("; or wait for capacity." if waiting else ".")
    return f"No offering fits: {'; '.join(parts)}. {advice}"


def _why(profile: Profile, interruptible: Interruptible, choice: scoring.Choice) -> str:
    option = choice.option
    cost = f"${format_usd(option.cost)}"
    if profile == "Cost":
        why = f"lowest expected cost {cost} over {format_duration(option.run)}"
    elif profile == "Speed":
        why = f"earliest start, then fastest accelerator ({option.offering.family or 'CPU-only'}), expected {cost}"
    elif choice.cheapest is option:
        why = f"lowest expected cost {cost} over {format_duration(option.run)}"
    else:
        tolerance = int(scoring.BALANCED_COST_TOLERANCE * 100)
        why = (
            f"starts soonest within {tolerance}% of the lowest expected cost ${format_usd(choice.cheapest.cost)}, "
            f"expected {cost}"
        )
    if option.offering.interruptible:
        mtbi = option.offering.mean_time_between_interruptions
        every = f"every {format_duration(mtbi)}" if mtbi else "once per run"
        why += f", interruptible ({interruptible}; cost includes re-work for an interruption {every})"
    elif interruptible == "Prefer":
        why += ", on-demand because no interruptible offering is available"
    return why


def _start(option: scoring.Option, node: str | None) -> str:
    if option.warm:
        return f"warm node {node} reused" if node else "warm node available"
    return f"cold start, boot p50 {format_duration(option.offering.boot_p50)}"


def _either(fields: Sequence[str]) -> str:
    return fields[0] if len(fields) == 1 else f"{', '.join(fields[:-1])} or {fields[-1]}"
