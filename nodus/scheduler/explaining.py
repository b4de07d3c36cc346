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

A gang member's explain starts with one line about the whole gang (where it went, what it costs
together, why that group); a gang that cannot be placed whole gets one message for every member,
counting the hosts it needs against the most one group has free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nodus.apimachinery.units import format_duration
from nodus.scheduler import filters, gangs, scoring
from nodus.scheduler.snapshot import Interruptible, Profile, format_usd

MAX_REJECTED_LINES = 15
MAX_REASON_GROUPS = 8
MAX_HINTS = 3
MAX_GROUP_OFFERINGS = 3
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


def gang_binding(gang: gangs.Gang, chosen: gangs.Candidate, candidates: Sequence[gangs.Candidate]) -> str:
    """The first line of every member's explain: ``gang of 4 (Colocated, sim/us-east): all 4 ranks placed ...``."""
    network, size = gang.request.network, gang.request.size
    placing = f"{'both' if size == 2 else f'all {size}'} ranks placed together"
    if len(gang.members) < size:
        placing = f"{_count(len(gang.members), 'rank')} placed beside the {len(gang.placed)} already placed"
    others = len(candidates) - 1
    if not others:
        why = "the only group that could hold it"
    else:
        why = f"{_GANG_WHY[gang.leader.profile]}, over {_count(others, 'other group')} that could hold it"
    return (
        f"gang of {size} ({network}, {gangs.describe(chosen.key, network)}): {placing}, "
        f"expected ${format_usd(chosen.total)} in total; {why}"
    )


def gang_waiting(gang: gangs.Gang, trial: gangs.Trial) -> str:
    """The Unschedulable message of every pending member when no group can hold them all (``trial`` found none).

    It counts the hosts the gang needs against the most one group has free now, names that group's
    offerings, says that nothing is placed meanwhile, and ends with ``Fix:`` and the Job fields
    that would let the gang spread (every one of them needs a new Job: they are immutable).
    """
    network, transport = gang.request.network, gang.request.transport
    needed, where = len(gang.members), gangs.scope(network, transport)
    under = f"network {network}" + (" and transport Direct" if transport == "Direct" and network != "Colocated" else "")
    if gang.placed:
        head = (
            f"The gang needs {_count(needed, 'more host')} with its {len(gang.placed)} placed, together under {under}"
        )
    else:
        head = f"The gang needs {_count(needed, 'host')} together under {under}"
    if trial.nearest is None:
        # Only with placed siblings: no fitting offering is in their group (or they span several).
        found = f"no offering that fits is in {where} with its placed members"
    else:
        label = f"{gangs.describe(trial.nearest, network)}; " if trial.nearest else ""
        found = f"the most free {f'in {where}' if where else 'anywhere'} is {trial.free} ({label}{_usage(trial.usage)})"
    parts = [f"{head}; {found}.", f"It waits whole: no member is placed until all {needed} fit."]
    if not trial.holdable:
        parts.append(
            f"No {where} has {_count(needed + len(gang.placed), 'host')} in all (the most is {trial.largest})."
            if where
            else f"The offerings that fit have {_count(trial.largest or 0, 'host')} in all."
        )
    fixes = ["with a wider spec.placement (regions, offerings, interruptible)"]
    if network != "Global":
        fixes.insert(0, f"with spec.distributed.network {_WIDER[network]}")
    if transport == "Direct" and network != "Colocated":
        fixes.insert(0, "with spec.distributed.transport Auto (members may span providers)")
    if not trial.holdable:
        fixes.append("with fewer spec.distributed.nodes")
    wait = "wait for capacity, or " if trial.holdable else ""
    parts.append(f"Fix: {wait}recreate the Job {', or '.join(fixes)}.")
    return " ".join(parts)


_GANG_WHY: dict[Profile, str] = {
    "Cost": "lowest total expected cost",
    "Speed": "earliest start of the whole gang",
    "Balanced": f"earliest start within {int(scoring.BALANCED_COST_TOLERANCE * 100)}% of the lowest total",
}
_WIDER = {
    "Colocated": "Regional or Global (members may span regions)",
    "Regional": "Global (members may span region classes)",
}


def _usage(usage: Sequence[tuple[str, gangs.Usage]]) -> str:
    shown = []
    for offering, (in_use, capacity, idle) in usage[:MAX_GROUP_OFFERINGS]:
        hosts = "unlimited" if capacity is None else f"{in_use} of {capacity} in use"
        shown.append(f"offering {offering}: {hosts}" + (f", {idle} idle" if idle else ""))
    if len(usage) > MAX_GROUP_OFFERINGS:
        shown.append(f"{len(usage) - MAX_GROUP_OFFERINGS} more offerings")
    return "; ".join(shown)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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
