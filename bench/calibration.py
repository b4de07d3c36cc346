"""Calibration of the cost estimate (issue 5 §4): how often a Job's actual charge is at most its P50 and P90.

    .venv/bin/python -m bench.calibration [--seed N] [--seeds N] [--jobs N] [--sharded-jobs N] [--json PATH]

A deterministic simulation, in-process and without a database. One project submits Jobs of six programs
("families"), each with its own true running-time distribution (lognormal, medians from 3 minutes to 2
hours, one bimodal), on the offerings of the shipped price book (CPU and GPU; two families allow or prefer
interruptible capacity). Jobs arrive one after another (exponential gaps, mean 15 minutes). Each Job is
estimated by :func:`nodus.billing.estimating.estimate` exactly as the API server calls it: the price book's
offerings, no hosts (every start is cold), and as history the earlier *finished* successful runs of the same
program (``Run(boot, running, warm, finished)``, read from whole-second attempt times as the API server reads
them). Then the Job "runs" on the previewed offering: its true running time is drawn from its family, its boot
time from a lognormal whose median and 90th percentile are the offering's published boot band, and on
interruptible capacity reclaims arrive as a Poisson process at the offering's mean time between
interruptions (the attempt ends ``Lost``/``Preempted`` and is billed; a replacement boots and runs the
program from the start). Every attempt is charged by :func:`nodus.controllers.billing.bill` on a synthetic
Attempt object (Boot/Restore, Running, Teardown rounding to the 60 s increment), and the finished run joins
the family's history.

Reported, per family and overall: the share of Jobs whose actual charge is at most the estimate's P90
(target at least 90 %) and at most its P50 (target 40-60 %), and the median of actual / P50. Jobs estimated
from fewer than :data:`nodus.billing.estimating.MIN_QUANTILE_SAMPLES` earlier runs ("cold history": the first
falls back to the one-hour default, the next use the median and 1.25 x the longest) are reported apart and
left out of the main figure. Three more runs use the same Jobs and the same random draws (common random
numbers): with ``spec.expectedDuration`` declared as the family's true median (the 1.25 x declared P90
rule), and a ``completions: 4`` family (history-driven and declared) to check the sum-over-indexes bands.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from nodus.api.offerings import load as load_pricebook
from nodus.apimachinery import units
from nodus.apimachinery.money import text
from nodus.apis.v1 import objects
from nodus.billing import estimating
from nodus.controllers.billing import bill
from nodus.scheduler.capacity import Offering

SEED = 20261129
START = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
MEAN_GAP_SECONDS = 15 * 60.0
FUNDED_WINDOW = timedelta(minutes=10)
NAMESPACE = "calibration"
Z90 = 1.2815515655446004  # the standard normal's 90th percentile
P90_TARGET = 0.90
P50_TARGET = (0.40, 0.60)
MAX_ATTEMPTS = 50
Object = dict[str, Any]


# --- the programs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mode:
    """One lognormal component of a running-time distribution: its weight, median (seconds) and sigma."""

    weight: float
    median: float
    sigma: float

    def cdf(self, seconds: float) -> float:
        return 0.5 * (1 + math.erf(math.log(seconds / self.median) / (self.sigma * math.sqrt(2))))


@dataclass(frozen=True)
class Family:
    """One program: what it asks for and how long it truly runs."""

    name: str
    resources: Object
    placement: Object
    modes: tuple[Mode, ...]

    def draw(self, rng: random.Random) -> float:
        """A true running time in seconds."""
        pick, mode = rng.random(), self.modes[-1]
        for candidate in self.modes:
            if pick < candidate.weight:
                mode = candidate
                break
            pick -= candidate.weight
        return mode.median * math.exp(mode.sigma * rng.gauss(0.0, 1.0))

    def quantile(self, q: float) -> float:
        """The true ``q`` quantile of the running time (bisection on the mixture's CDF)."""
        low, high = 1.0, 1e7
        for _ in range(200):
            mid = math.sqrt(low * high)
            if sum(m.weight * m.cdf(mid) for m in self.modes) < q:
                low = mid
            else:
                high = mid
        return high

    def describe(self) -> str:
        parts = [f"{_go(m.median)} s{m.sigma:g}" for m in self.modes]
        if len(self.modes) == 1:
            return f"lognormal {parts[0]}"
        return "bimodal " + " + ".join(f"{m.weight:.0%} {p}" for m, p in zip(self.modes, parts, strict=True))

    def job(self, number: int, completions: int, declared: bool) -> Object:
        spec: Object = {
            "image": f"registry.example/{self.name}:1",
            "command": ["python", "-m", self.name],
            "resources": self.resources,
            "completions": completions,
            "parallelism": completions,
        }
        if self.placement:
            spec["placement"] = self.placement
        if declared:
            spec["expectedDuration"] = f"{round(self.quantile(0.5))}s"
        return {"metadata": {"name": f"{self.name}-{number}", "namespace": NAMESPACE}, "spec": spec}


FAMILIES = (
    Family("preprocess", {"cpu": "8"}, {}, (Mode(1.0, 180, 0.5),)),
    Family("eval", {"gpu": {"count": 1, "type": ["L4"]}}, {}, (Mode(1.0, 720, 0.35),)),
    Family(
        "sweep",
        {"gpu": {"count": 1, "type": ["A10G"]}},
        {"interruptible": "Prefer"},
        (Mode(0.65, 360, 0.3), Mode(0.35, 2400, 0.2)),
    ),
    Family("render", {"cpu": "32"}, {}, (Mode(1.0, 1500, 0.8),)),
    Family(
        "finetune",
        {"gpu": {"count": 1, "type": ["A100"], "minMemory": "80Gi"}},
        {"interruptible": "Allow"},
        (Mode(1.0, 2700, 0.3),),
    ),
    Family("pretrain", {"gpu": {"count": 8, "type": ["H100"]}}, {}, (Mode(1.0, 7200, 0.25),)),
)
SHARDED = Family("eval-shards", {"gpu": {"count": 1, "type": ["L4"]}}, {}, (Mode(1.0, 720, 0.35),))


# --- one Job: estimate, run, bill ---------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    family: str
    offering: str
    history: int  # earlier finished runs the estimate saw
    p50: Decimal
    p90: Decimal
    actual: Decimal
    preemptions: int
    running: tuple[float, ...]  # the true running time of each index, seconds
    duration_p90: Decimal | None  # the history's running-time P90 (None: declared or no history)

    @property
    def cold(self) -> bool:
        return self.history < estimating.MIN_QUANTILE_SAMPLES


@dataclass
class Project:
    """The offerings and the project's history of finished runs, per program."""

    offerings: list[Offering]
    version: str
    history: dict[str, list[estimating.Run]] = field(default_factory=dict)

    def by_id(self, name: str) -> Offering:
        return next(o for o in self.offerings if o.id == name)


def simulate(
    project: Project, families: Sequence[Family], jobs: int, completions: int, declared: bool, seed: int, stream: str
) -> list[Outcome]:
    """``jobs`` Jobs in sequence. The arrivals, families and every random draw of a Job depend only on
    ``seed``, ``stream`` and the Job's number, so variants of one stream see the same Jobs."""
    arrivals = random.Random(f"{seed}/{stream}/arrivals")
    now = START
    outcomes = []
    for number in range(jobs):
        now += timedelta(seconds=arrivals.expovariate(1 / MEAN_GAP_SECONDS))
        family = families[arrivals.randrange(len(families))]
        draws = random.Random(f"{seed}/{stream}/job/{number}")
        running = tuple(family.draw(draws) for _ in range(completions))
        past = project.history.setdefault(family.name, [])
        earlier = [run for run in past if run.finished <= now]
        inputs = estimating.Inputs(
            job=family.job(number, completions, declared),
            offerings=project.offerings,
            hosts=[],
            history=earlier,
            available=Decimal(10**9),
            budgets=[],
            pricebook_version=project.version,
            funded_window=FUNDED_WINDOW,
            now=now,
        )
        estimate = estimating.estimate(inputs)
        offering = project.by_id(estimate["placementPreview"]["offering"])
        rate = Decimal(estimate["rateUSDPerHour"])
        actual, preemptions = Decimal(0), 0
        for index, seconds in enumerate(running):
            cost, lost, run = _run_index(offering, rate, seconds, now, draws, f"{family.name}-{number}-{index}")
            actual += cost
            preemptions += lost
            past.append(run)
        duration_p90 = None
        if not declared and earlier:
            # The estimator's own rule over the newest HISTORY_SAMPLES, for the diagnostic table only.
            newest = sorted(earlier, key=lambda r: r.finished, reverse=True)[: estimating.HISTORY_SAMPLES]
            duration_p90 = estimating._quantiles([r.running for r in newest]).p90
        outcomes.append(
            Outcome(
                family=family.name,
                offering=offering.id,
                history=len(earlier),
                p50=Decimal(estimate["costUSD"]["p50"]),
                p90=Decimal(estimate["costUSD"]["p90"]),
                actual=actual,
                preemptions=preemptions,
                running=running,
                duration_p90=duration_p90,
            )
        )
    return outcomes


def _run_index(
    offering: Offering, rate: Decimal, running: float, capacity: datetime, draws: random.Random, name: str
) -> tuple[Decimal, int, estimating.Run]:
    """One index from capacity to success: its attempts' charges (as billed), how many were preempted,
    and the successful run as the API server's history reads it."""
    p50, p90 = offering.boot_p50.total_seconds(), offering.boot_p90.total_seconds()
    boot_sigma = math.log(p90 / p50) / Z90 if p90 > p50 > 0 else 0.0
    mtbi = offering.mean_time_between_interruptions
    total, t = Decimal(0), capacity
    for number in range(1, MAX_ATTEMPTS + 1):
        boot = p50 * math.exp(boot_sigma * draws.gauss(0.0, 1.0))
        reclaim = draws.expovariate(1.0) * mtbi.total_seconds() if offering.interruptible and mtbi else math.inf
        status: Object = {
            "scheduledTime": units.format_time(t),
            "provisioningTime": units.format_time(t),
            "placement": {"offering": offering.id, "rateUSDPerHour": text(rate), "warmReuse": False},
        }
        if reclaim < boot + running:
            end = t + timedelta(seconds=reclaim)
            if reclaim > boot:
                status["startTime"] = units.format_time(t + timedelta(seconds=boot))
            status.update(phase="Lost", reason="Preempted", finishTime=units.format_time(end))
            total += _charged(status, end, restore=number > 1, name=f"{name}-{number}")
            t = end  # the replacement is provisioned at once and runs the program from the start
            continue
        started, finished = t + timedelta(seconds=boot), t + timedelta(seconds=boot + running)
        status.update(phase="Succeeded", startTime=units.format_time(started), finishTime=units.format_time(finished))
        total += _charged(status, finished, restore=number > 1, name=f"{name}-{number}")
        at = {key: units.parse_time(status[key]) for key in ("provisioningTime", "startTime", "finishTime")}
        run = estimating.Run(
            boot=_seconds(at["startTime"] - at["provisioningTime"]),
            running=_seconds(at["finishTime"] - at["startTime"]),
            warm=False,
            finished=at["finishTime"],
        )
        return total, number - 1, run
    raise RuntimeError(f"{name}: preempted {MAX_ATTEMPTS} times")


def _charged(status: Object, end: datetime, restore: bool, name: str) -> Decimal:
    """What the billing controller charges this finished attempt, summed over its segments."""
    spec = {"job": name, "jobUID": name, "index": 0, "number": 1, "node": f"{name}-host"}
    attempt = {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec, "status": status}
    owed = bill(objects.read(objects.Attempt, attempt), end, restore)
    assert owed is not None and owed.final
    return sum(owed.amounts().values(), Decimal(0))


def _seconds(delta: timedelta) -> Decimal:
    return max(Decimal(str(delta.total_seconds())), Decimal(0))


# --- figures ------------------------------------------------------------------------------------------


def summary(outcomes: Sequence[Outcome]) -> Object:
    """Shares at most P90 and P50, the median actual/P50, and how far the P90 misses went."""
    if not outcomes:
        return {"jobs": 0}
    misses = [float(o.actual / o.p90) for o in outcomes if o.actual > o.p90]
    within_p90 = sum(o.actual <= o.p90 for o in outcomes) / len(outcomes)
    within_p50 = sum(o.actual <= o.p50 for o in outcomes) / len(outcomes)
    return {
        "jobs": len(outcomes),
        "within_p90": within_p90,
        "within_p50": within_p50,
        "median_actual_over_p50": statistics.median(float(o.actual / o.p50) for o in outcomes),
        "median_p90_miss": statistics.median(misses) if misses else None,
        "preempted_jobs": sum(o.preemptions > 0 for o in outcomes),
        "met_p90": within_p90 >= P90_TARGET,
        "met_p50": P50_TARGET[0] <= within_p50 <= P50_TARGET[1],
    }


def by_history(outcomes: Sequence[Outcome]) -> list[Object]:
    """Coverage by the number of earlier runs the estimate saw, with what the nearest-rank P90 of that
    many samples covers of a new draw of the same distribution: ceil(0.9 k) / (k + 1)."""
    buckets = ((5, 9), (10, 19), (20, 39), (40, 79), (80, 10**9))
    rows = []
    for low, high in buckets:
        part = [o for o in outcomes if low <= o.history <= high]
        if not part:
            continue
        ks = [min(o.history, estimating.HISTORY_SAMPLES) for o in part]
        with_duration = [o for o in part if o.duration_p90 is not None]
        rows.append(
            {
                "runs": f"{low}-{high}" if high < 10**9 else f"{low}+",
                **summary(part),
                "running_within_duration_p90": sum(
                    Decimal(str(o.running[0])) <= (o.duration_p90 or 0) for o in with_duration
                )
                / max(len(with_duration), 1),
                "nearest_rank_coverage": statistics.fmean(math.ceil(0.9 * k) / (k + 1) for k in ks),
            }
        )
    return rows


def _by_family(outcomes: Sequence[Outcome], families: Sequence[Family]) -> dict[str, Object]:
    result = {}
    for family in families:
        mine = [o for o in outcomes if o.family == family.name]
        result[family.name] = {
            "distribution": family.describe(),
            "true_p50_s": round(family.quantile(0.5)),
            "true_p90_s": round(family.quantile(0.9)),
            "offerings": sorted({o.offering for o in mine}),
            "cold": summary([o for o in mine if o.cold]),
            **summary([o for o in mine if not o.cold]),
        }
    return result


def variant(outcomes: Sequence[Outcome], families: Sequence[Family], declared: bool) -> Object:
    """The figures of one variant. Declared durations do not need history: every Job counts."""
    counted = list(outcomes) if declared else [o for o in outcomes if not o.cold]
    cold = [o for o in outcomes if o.cold]
    return {
        "overall": summary(counted),
        "families": _by_family(outcomes, families) if not declared else _declared_families(outcomes, families),
        "cold": summary(cold),
        "cold_no_history": summary([o for o in cold if o.history == 0]),
        "cold_thin_history": summary([o for o in cold if o.history > 0]),
        "by_history": [] if declared else by_history(counted),
    }


def _declared_families(outcomes: Sequence[Outcome], families: Sequence[Family]) -> dict[str, Object]:
    result = {}
    for family in families:
        mine = [o for o in outcomes if o.family == family.name]
        result[family.name] = {
            "distribution": family.describe(),
            "true_p50_s": round(family.quantile(0.5)),
            "true_p90_s": round(family.quantile(0.9)),
            "offerings": sorted({o.offering for o in mine}),
            **summary(mine),
        }
    return result


# --- the run ------------------------------------------------------------------------------------------


VARIANTS = {
    # name: (families, completions, declared, stream)
    "history": (FAMILIES, 1, False, "main"),
    "declared": (FAMILIES, 1, True, "main"),
    "sharded_history": ((SHARDED,), 4, False, "sharded"),
    "sharded_declared": ((SHARDED,), 4, True, "sharded"),
}


def calibrate(seed: int = SEED, jobs: int = 420, sharded_jobs: int = 80, seeds: int = 20) -> Object:
    """Every variant at ``seed`` in detail; over ``seeds`` consecutive seeds (``seed`` first) the pooled
    figures and the range of the per-seed shares, so that one seed's sampling noise can be told apart."""
    book = load_pricebook(None)
    offerings = [Offering.from_object(o.body()) for o in book.offerings]
    started = time.monotonic()
    results: Object = {
        "seed": seed,
        "seeds": seeds,
        "jobs": jobs,
        "sharded_jobs": sharded_jobs,
        "pricebook": book.version,
    }
    for name, (families, completions, declared, stream) in VARIANTS.items():
        count = jobs if completions == 1 else sharded_jobs
        runs = [
            simulate(Project(offerings, book.version), families, count, completions, declared, seed + i, stream)
            for i in range(seeds)
        ]
        results[name] = variant(runs[0], families, declared)
        counted = [[o for o in outcomes if declared or not o.cold] for outcomes in runs]
        per_seed = [summary(outcomes) for outcomes in counted]
        pooled = [o for outcomes in counted for o in outcomes]
        results[name]["seeds"] = {
            "pooled": summary(pooled),
            "within_p90_range": [min(s["within_p90"] for s in per_seed), max(s["within_p90"] for s in per_seed)],
            "within_p50_range": [min(s["within_p50"] for s in per_seed), max(s["within_p50"] for s in per_seed)],
            "seeds_meeting_p90": sum(s["met_p90"] for s in per_seed),
            "seeds_meeting_p50": sum(s["met_p50"] for s in per_seed),
            "by_history": [] if declared else by_history(pooled),
            "families": {f.name: summary([o for o in pooled if o.family == f.name]) for f in families},
        }
    main = results["history"]["overall"]
    results.update(
        seconds=time.monotonic() - started,
        within_p90=main["within_p90"],
        within_p50=main["within_p50"],
        met=bool(main["met_p90"] and main["met_p50"]),
    )
    return results


async def run(workdir: Path, seed: int, jobs: int, sharded_jobs: int, seeds: int) -> Object:
    """For ``bench.run``: ``workdir`` is unused (nothing is kept on disk and no database is needed)."""
    return calibrate(seed, jobs, sharded_jobs, seeds)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _go(seconds: float) -> str:
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{secs}s" if secs or not whole else "")
    )


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def _verdicts(entry: Object) -> str:
    if not entry.get("jobs"):
        return ""
    p90 = "met" if entry["met_p90"] else "NOT met"
    p50 = "met" if entry["met_p50"] else "NOT met"
    return f"P90 {p90}, P50 {p50}"


def _variant_table(block: Object, declared: bool) -> str:
    header = ["family", "true running time", "offering(s)", "jobs", "preempted", "<= P90", "<= P50", "actual/P50"]
    header += ["P90 miss", "<= P90, all seeds", "<= P50, all seeds"]
    if not declared:
        header.insert(4, "cold")
    rows = [header]

    spread = block["seeds"]
    several = spread["pooled"]["jobs"] > block["overall"]["jobs"]

    def row(
        name: str, distribution: str, offerings: str, entry: Object, cold: int | None, pooled: Object | None
    ) -> list[str]:
        cells = [
            name,
            distribution,
            offerings,
            str(entry.get("jobs", 0)),
            str(entry.get("preempted_jobs", 0)),
            _pct(entry.get("within_p90")),
            _pct(entry.get("within_p50")),
            _ratio(entry.get("median_actual_over_p50")),
            _ratio(entry.get("median_p90_miss")),
            _pct(pooled.get("within_p90")) if pooled and several else "",
            _pct(pooled.get("within_p50")) if pooled and several else "",
        ]
        if not declared:
            cells.insert(4, "" if cold is None else str(cold))
        return cells

    for name, entry in block["families"].items():
        cold = None if declared else entry["cold"]["jobs"]
        offerings = ", ".join(entry["offerings"])
        rows.append(row(name, entry["distribution"], offerings, entry, cold, spread["families"][name]))
    overall, pooled = block["overall"], spread["pooled"]
    label = "all Jobs" if declared else f"all (>= {estimating.MIN_QUANTILE_SAMPLES} earlier runs)"
    rows.append(row(label, "", _verdicts(overall), overall, None if declared else block["cold"]["jobs"], pooled))
    if not declared:
        rows.append(row("cold: no history (1h default)", "", "", block["cold_no_history"], None, None))
        thin = f"cold: 1-{estimating.MIN_QUANTILE_SAMPLES - 1} runs"
        rows.append(row(thin, "", "", block["cold_thin_history"], None, None))
    lines = [_table(rows)]
    if several:
        p90, p50 = spread["within_p90_range"], spread["within_p50_range"]
        lines.append(
            f"   over the seeds: pooled {pooled['jobs']} Jobs <= P90 {_pct(pooled['within_p90'])} "
            f"(per seed {_pct(p90[0])}-{_pct(p90[1])}; target met in {spread['seeds_meeting_p90']}), "
            f"<= P50 {_pct(pooled['within_p50'])} (per seed {_pct(p50[0])}-{_pct(p50[1])}; "
            f"met in {spread['seeds_meeting_p50']}), median actual/P50 {_ratio(pooled['median_actual_over_p50'])}"
        )
    return "\n".join(lines)


def _history_table(entries: list[Object]) -> str:
    rows = [["earlier runs", "jobs", "<= P90", "<= P50", "running <= history P90", "ceil(0.9k)/(k+1)"]]
    for entry in entries:
        rows.append(
            [
                entry["runs"],
                str(entry["jobs"]),
                _pct(entry["within_p90"]),
                _pct(entry["within_p50"]),
                _pct(entry["running_within_duration_p90"]),
                _pct(entry["nearest_rank_coverage"]),
            ]
        )
    return _table(rows)


def report(results: Object) -> str:
    seeds = results["seeds"]
    lines = [
        f"Estimate calibration: seed {results['seed']}, price book {results['pricebook']}, "
        f"{results['jobs']} Jobs of {len(FAMILIES)} programs (+ {results['sharded_jobs']} Jobs of completions: 4); "
        f"spread over {seeds} seeds ({results['seed']}-{results['seed'] + seeds - 1}); {results['seconds']:.1f} s",
        "actual = the billing controller's charge (all attempts); P50/P90 = status.estimate.costUSD at create.",
        "'P90 miss' = median actual/P90 among the Jobs above their P90. Targets: <= P90 at least 90 %, "
        "<= P50 between 40 and 60 %.",
        "",
        "1. No expectedDuration: the estimate comes from the program's earlier runs",
        _variant_table(results["history"], declared=False),
        "",
        f"   By history size k, pooled over the {seeds} seed(s): the P90 share, the share of running times within the",
        "   history's nearest-rank P90, and what the nearest-rank P90 of k samples covers of a new draw",
        _history_table(results["history"]["seeds"]["by_history"]),
        "",
        "2. expectedDuration declared = the family's true median (P90 = 1.25 x declared)",
        _variant_table(results["declared"], declared=True),
        "",
        "3. completions: 4 (the sum over four indexes), no expectedDuration",
        _variant_table(results["sharded_history"], declared=False),
        "",
        "4. completions: 4, expectedDuration declared = the true median",
        _variant_table(results["sharded_declared"], declared=True),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--jobs", type=int, default=420, help="Jobs of the six programs (default 420)")
    parser.add_argument("--sharded-jobs", type=int, default=80, help="Jobs with completions: 4 (default 80)")
    parser.add_argument("--seeds", type=int, default=20, help="seeds for the spread, from --seed on (default 20)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    results = calibrate(args.seed, args.jobs, args.sharded_jobs, args.seeds)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
