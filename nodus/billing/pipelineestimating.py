"""The estimate of a whole Pipeline (``status.estimate`` of a Pipeline): a pure function of its stages' estimates.

The API server estimates each stage's Job as it would be created (``nodus/api/pipelineestimates.py``, with the
Job estimate of :mod:`nodus.billing.estimating`) and :func:`graph_estimate` combines them:

* ``costUSD``: P50/P90 of the sum over the stages (:func:`estimating.sum_of_bands`: independent stages, each
  log-normal). A stage without a cost figure (no capacity fits it: ``CapacityUnavailable``) leaves the sum
  out, with a warning naming it.
* ``largestConcurrentHoldUSD``: the most the Pipeline may hold at once. Stages that neither wait for each
  other nor are waited for may run together; for each stage, its ``concurrentHoldUSD`` plus that of every
  stage it may run beside, and the largest of these. It bounds from above what any set of stages that can
  run together holds (it may count two stages that wait for each other through a third, never too little).
* ``blockingReasons``: each stage's own, prefixed with the stage (a stage Job would be refused at its
  creation: its first hold above what its ``maxCostUSD`` (under the Pipeline's) allows, the project's credit
  or a Budget). A real create answers the first as an error, as for a Job.
* ``warnings``: ``ConcurrentHoldAboveCredits`` (the stages that may run together hold more than the project
  has: some wait for others' holds to be released), ``MaxCostBelowEstimate`` (``maxCostUSD`` below the P50:
  the Pipeline will probably stop with ``MaxCostReached``), and each stage's own warnings, prefixed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from nodus.apimachinery.money import text
from nodus.apis.v1 import stagegraph
from nodus.billing import estimating

Object = dict[str, Any]
_STAGE_FIGURES = ("costUSD", "holdUSD", "concurrentHoldUSD", "rateUSDPerHour", "placementPreview")


def graph_estimate(
    estimates: Sequence[tuple[str, Object]],
    edges: stagegraph.Graph,
    available: Decimal,
    max_cost: Decimal | None,
) -> Object:
    """The Pipeline's estimate from each stage's Job estimate (``(stage, estimate)`` in spec order)."""
    by_stage = dict(estimates)
    result: Object = {}
    warnings: list[Object] = []
    blocking: list[Object] = []
    stages: list[Object] = []
    for name, estimate in estimates:
        stages.append({"name": name, **{k: estimate[k] for k in _STAGE_FIGURES if k in estimate}})
        for reason in estimate.get("blockingReasons") or ():
            blocking.append({**reason, "message": f"stage {name}: {reason.get('message', '')}"})
        for warning in estimate.get("warnings") or ():
            warnings.append({**warning, "message": f"stage {name}: {warning.get('message', '')}"})
    versions = {e["pricebookVersion"] for _, e in estimates if e.get("pricebookVersion")}
    if versions:
        result["pricebookVersion"] = sorted(versions)[0]
    bands = [_band(e) for _, e in estimates]
    if all(band is not None for band in bands):
        p50, p90 = estimating.sum_of_bands([band for band in bands if band is not None])
        result["costUSD"] = {"p50": text(p50), "p90": text(p90)}
        if max_cost is not None and max_cost < p50:
            warnings.append(
                {
                    "code": "MaxCostBelowEstimate",
                    "message": f"spec.maxCostUSD is {text(max_cost)} USD but the stages' median cost is {text(p50)} "
                    "USD: the Pipeline will probably stop with MaxCostReached before its last stage",
                }
            )
    holds = {name: _amount(e.get("concurrentHoldUSD") or e.get("holdUSD")) for name, e in estimates}
    largest = max(
        (holds[name] + sum((holds[other] for other in stagegraph.concurrent_with(edges, name)), Decimal(0)))
        for name in by_stage
    )
    result["largestConcurrentHoldUSD"] = text(largest)
    if largest > available:
        warnings.append(
            {
                "code": "ConcurrentHoldAboveCredits",
                "message": f"the stages that may run together hold up to {text(largest)} USD but the project has "
                f"{text(available)} USD available: some stages will wait for others' holds to be released",
            }
        )
    result["stages"] = stages
    if blocking:
        result["blockingReasons"] = blocking
    if warnings:
        result["warnings"] = warnings
    valid = sorted(e["validUntil"] for _, e in estimates if e.get("validUntil"))
    if valid:
        result["validUntil"] = valid[0]
    return result


def _band(estimate: Mapping[str, Any]) -> tuple[Decimal, Decimal] | None:
    cost = estimate.get("costUSD")
    if not isinstance(cost, Mapping) or cost.get("p50") is None or cost.get("p90") is None:
        return None
    return Decimal(str(cost["p50"])), Decimal(str(cost["p90"]))


def _amount(value: object) -> Decimal:
    return Decimal(str(value)) if value is not None else Decimal(0)
