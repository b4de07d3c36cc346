"""Which fitting option to take: expected cost, time to start, and the three profiles.

An :class:`Option` is one way to run a Work on one fitting offering: on a **warm** idle host of it
(no boot, and no new capacity) or on a **cold** new host (boot p50 first). Its numbers are computed
once per requirement shape and cycle; only availability changes while the cycle binds, so
:func:`choose` walks a statically ranked list and asks the cycle what is still free.

Expected cost (``placement.profile`` Cost, and the tie-breaker everywhere)
    rate x expected run time, plus rate x boot p50 for a cold start (the host is paid while it boots).
    The expected run time is ``expectedDuration`` (else 1h). On an interruptible offering it grows
    by the expected interruptions, ``run / meanTimeBetweenInterruptions``, each costing a reboot
    (boot p50) and re-running half of an uninterrupted stretch (``min(run, MTBI) / 2``): the scheduler
    does not know how often the Job checkpoints, so it assumes the worst and lets a real discount win.
    This is how ``interruptible: Allow`` "decides by expected cost". All arithmetic is integer
    microseconds and ``Decimal`` dollars, never floats.

Speed
    Earliest start first (a warm host starts now, a cold one after boot p50), then the faster
    accelerator family (:data:`FAMILY_SPEED_ORDER`, CPU last), then expected cost.

Balanced (the default)
    Take the cheapest available option's expected cost; among the options costing at most
    :data:`BALANCED_COST_TOLERANCE` (10 %) more, take the one Speed would take. So Balanced pays at
    most 10 % over the cheapest placement to start sooner or on a faster accelerator, and never more.

``interruptible: Prefer`` puts every interruptible option in a tier ahead of on-demand ones: an
on-demand option is chosen only when no interruptible one is available. An offering the Work should
avoid (``Work.avoid``: the one that just took its slot's capacity away) goes to a tier after all the
others: a replacement moves to another offering or region when one fits, and comes back only when none
does. Ties always break by
offering id, then warm before cold; the cycle picks warm hosts of one offering by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from nodus.scheduler.capacity import Offering
from nodus.scheduler.rooms import Demand
from nodus.scheduler.snapshot import Interruptible, Profile

BALANCED_COST_TOLERANCE = Decimal("0.10")
#: Accelerator families from fastest to slowest; an unknown family ranks after these, CPU-only last.
FAMILY_SPEED_ORDER: tuple[str, ...] = ("B200", "H200", "H100", "A100", "L40S", "RTX4090", "A10G", "L4")
_FAMILY_RANK = {family.lower(): rank for rank, family in enumerate(FAMILY_SPEED_ORDER)}
_US_PER_HOUR = Decimal(3_600_000_000)
_RUNNERS_UP = 2


@dataclass(frozen=True, slots=True)
class Option:
    """Running one Work on ``offering``, warm (an idle host) or cold (a new host).

    ``start`` is the time until the attempt can start; ``run`` the expected run time including
    interruption overhead; ``cost`` the expected cost in USD; ``tier`` 0 unless demoted by Prefer.
    """

    offering: Offering
    warm: bool
    start: timedelta
    run: timedelta
    cost: Decimal
    family_rank: int
    tier: int
    # A share of a host of a shareable offering (its own GPUs, at the offering's rate for them): warm joins a
    # host that has room for it, cold starts a new one. None: a whole host, as before.
    share: Demand | None = None


@dataclass(frozen=True, slots=True)
class Choice:
    """What :func:`choose` picked, the next best available options, and the cheapest it weighed."""

    option: Option
    runners_up: tuple[Option, ...]
    cheapest: Option


def family_rank(offering: Offering) -> int:
    """Lower is faster: the family's place in :data:`FAMILY_SPEED_ORDER`; unknown families, then CPU, last."""
    if offering.family is None or offering.gpus == 0:
        return len(FAMILY_SPEED_ORDER) + 1
    return _FAMILY_RANK.get(offering.family.lower(), len(FAMILY_SPEED_ORDER))


def expected_run(offering: Offering, duration: timedelta) -> timedelta:
    """``duration`` plus the expected re-work and reboots from interruptions on this offering."""
    if not offering.interruptible:
        return duration
    run_us = _micros(duration)
    mtbi = offering.mean_time_between_interruptions
    # Without a published MTBI, assume one interruption per run.
    mtbi_us = _micros(mtbi) if mtbi else run_us
    if mtbi_us <= 0:
        return duration
    per_interruption = _micros(offering.boot_p50) + min(run_us, mtbi_us) // 2
    return duration + timedelta(microseconds=run_us * per_interruption // mtbi_us)


def expected_cost(offering: Offering, run: timedelta, warm: bool) -> Decimal:
    """Rate x (run + boot p50 unless warm), in USD."""
    paid = run if warm else run + offering.boot_p50
    return offering.rate_usd_per_hour * _micros(paid) / _US_PER_HOUR


def options(
    offering: Offering,
    duration: timedelta,
    interruptible: Interruptible,
    warm: bool,
    *,
    avoided: bool = False,
    cold: bool = True,
    share: Demand | None = None,
) -> list[Option]:
    """The cold option on ``offering`` (unless ``cold`` is False: its provider boots nothing here) and, when it
    has an idle host or one with room (``warm``), the warm one. ``share``: what a Work takes of a shared host."""
    run = expected_run(offering, duration)
    tier = 1 if interruptible == "Prefer" and not offering.interruptible else 0
    if avoided:
        tier += 2
    rank = family_rank(offering)
    made = []
    if warm:
        made.append(Option(offering, True, timedelta(0), run, expected_cost(offering, run, True), rank, tier, share))
    if cold:
        cost = expected_cost(offering, run, False)
        made.append(Option(offering, False, offering.boot_p50, run, cost, rank, tier, share))
    return made


def rank(candidates: Iterable[Option], profile: Profile) -> list[Option]:
    """Order options best first for ``profile`` (Balanced is ordered by cost; :func:`choose` applies its band)."""
    if profile == "Speed":
        return sorted(candidates, key=_speed_key)
    return sorted(candidates, key=_cost_key)


def choose(ranked: Sequence[Option], profile: Profile, available: Callable[[Option], bool]) -> Choice | None:
    """Pick from ``ranked`` (as :func:`rank` ordered it) the best option ``available`` still allows.

    Pure apart from calling ``available``, which must not change anything. Returns None when no
    option is available.
    """
    seen: list[Option] = []
    band = Decimal(0)
    for option in ranked:
        if not available(option):
            continue
        if not seen:
            band = option.cost * (1 + BALANCED_COST_TOLERANCE)
        elif not _in_band(option, seen[0], band, profile) and _distinct_offerings(seen) > _RUNNERS_UP:
            break
        seen.append(option)
    if not seen:
        return None
    chosen = seen[0]
    if profile == "Balanced":
        chosen = min((o for o in seen if _in_band(o, seen[0], band, profile)), key=_speed_key)
    runners_up: list[Option] = []
    for option in seen:
        if option.offering.id != chosen.offering.id and all(o.offering.id != option.offering.id for o in runners_up):
            runners_up.append(option)
    return Choice(chosen, tuple(runners_up[:_RUNNERS_UP]), min(seen, key=_cost_key))


def _in_band(option: Option, cheapest: Option, band: Decimal, profile: Profile) -> bool:
    """Whether Balanced still weighs ``option`` against ``cheapest``: same tier, cost within the band."""
    return profile == "Balanced" and option.tier == cheapest.tier and option.cost <= band


def _distinct_offerings(options: Sequence[Option]) -> int:
    return len({option.offering.id for option in options})


def _cost_key(option: Option) -> tuple[int, Decimal, str, bool]:
    return option.tier, option.cost, option.offering.id, not option.warm


def _speed_key(option: Option) -> tuple[int, timedelta, int, Decimal, str, bool]:
    return option.tier, option.start, option.family_rank, option.cost, option.offering.id, not option.warm


def _micros(value: timedelta) -> int:
    return value // timedelta(microseconds=1)
