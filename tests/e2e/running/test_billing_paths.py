"""Exact charges on every path a Job can take: failure, preemption, a node Nodus lost, a failed boot, a
customer suspend and a cancel. For each attempt the charge is recomputed from its own times with the
rules of ADR 0017 (Boot or Restore, Running, the rounding up to the 60 s increment; time lost to a
fault of Nodus covered, not charged) and must equal the ledger's to the micro-dollar; the Job's cost
is the sum; ``nodus billing verify`` passes after each."""

from __future__ import annotations

from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from typing import Any

import pytest

from tests.e2e.running.conftest import Running
from tests.e2e.running.test_billing import charge, credits, seconds, verify
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, patch_spec, shell
from tests.support import controllers

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # long end-to-end: make test-slow (CI runs both tiers)

COVERED = {"BootFailed", "NodeLost"}


def expected_charges(attempt: dict[str, Any], replaces_lost: bool) -> tuple[dict[str, Decimal], set[str]]:
    """What the attempt owes per segment by its own times, and the segments Nodus covers instead."""
    status = attempt["status"]
    if not attempt["spec"].get("node"):
        return {}, set()
    rate = Decimal(status["placement"]["rateUSDPerHour"])
    ordered = status.get("provisioningTime") or status["scheduledTime"]
    end = status["finishTime"]
    started = status.get("startTime")
    boot = seconds(ordered, min(started, end) if started else end)
    running = seconds(started, end) if started else Decimal(0)
    billed = max(((boot + running) / 60).to_integral_value(rounding=ROUND_CEILING) * 60, Decimal(60))
    first = "Restore" if replaces_lost else "Boot"
    owed = {
        first: charge(rate, boot),
        "Running": charge(rate, running),
        "Teardown": charge(rate, billed - boot - running),
    }
    if status["phase"] == "Lost" and status.get("reason") in COVERED:
        # Nodus pays every segment with time in it; an empty one is shown at zero.
        return {s: a for s, a in owed.items() if a == 0}, {s for s, a in owed.items() if a > 0}
    return owed, set()


def check_exact(running: Running, project: str, name: str, granted: Decimal) -> None:
    def all_final() -> list[dict[str, Any]] | None:
        attempts = running.attempts(project, name)
        return attempts if attempts and all((a["status"].get("cost") or {}).get("final") for a in attempts) else None

    attempts = running.wait_for("every attempt's final charge", all_final, timeout=120)
    by_name = {a["metadata"]["name"]: a for a in attempts}
    total = Decimal(0)
    for attempt in attempts:
        spec = attempt["spec"]
        previous = by_name.get(f"{name}-{spec['index']}-{spec['number'] - 1}")
        owed, covered = expected_charges(attempt, previous is not None and previous["status"]["phase"] == "Lost")
        cost = attempt["status"]["cost"]
        shown = {
            k.removesuffix("USD").capitalize(): Decimal(v) for k, v in cost["bySegment"].items() if k.endswith("USD")
        }
        assert shown == owed, (attempt["metadata"]["name"], cost, owed)
        assert set(cost["bySegment"].get("coveredByNodus") or []) == covered, cost
        assert Decimal(cost["totalUSD"]) == sum(owed.values(), Decimal(0)) and Decimal(cost["heldUSD"]) == 0
        total += Decimal(cost["totalUSD"])
    # The Job's copy is the sum of its attempts' (final only once the Job is: a suspended one may resume).
    running.wait_for(
        "the Job's cost copy",
        lambda: Decimal((running.job(project, name)["status"].get("cost") or {}).get("totalUSD") or "-1") == total,
    )
    left = credits(running, project)
    assert Decimal(left["availableUSD"]) == granted - total and Decimal(left["heldUSD"]) == 0
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def running_node(running: Running, project: str, name: str) -> str:
    running.wait_phase(project, name, "Running")
    return str(running.attempts(project, name)[0]["spec"]["node"])


def failure(running: Running, project: str) -> str:
    create(running, project, "fails", **shell("echo trying; sleep 1; exit 3", backoffLimit=1))
    running.wait_phase(project, "fails", "Failed", timeout=120)
    return "fails"


def preemption(running: Running, project: str) -> str:
    script = 'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then sleep 300; fi; echo done'
    create(running, project, "preempted", **shell(script))
    nodus(running, "sim", "preempt", running_node(running, project, "preempted"), "--notice", "2s")
    running.wait_phase(project, "preempted", "Succeeded", timeout=120)
    return "preempted"


def node_lost(running: Running, project: str) -> str:
    script = 'if [ "$NODUS_ATTEMPT_NUMBER" = 1 ]; then sleep 300; fi; echo done'
    create(running, project, "orphaned", **shell(script))
    nodus(running, "sim", "kill", running_node(running, project, "orphaned"))
    running.wait_phase(project, "orphaned", "Succeeded", timeout=180)
    return "orphaned"


def boot_failed(running: Running, project: str) -> str:
    create(running, project, "unbooted", **shell("echo ok", placement={"offerings": [controllers.SLOW_BOOT_OFFERING]}))

    def node() -> str | None:
        return next(
            (str(a["spec"]["node"]) for a in running.attempts(project, "unbooted") if a["spec"].get("node")), None
        )

    nodus(running, "sim", "fail-boot", running.wait_for("a node to be assigned", node))
    running.wait_phase(project, "unbooted", "Succeeded", timeout=120)
    return "unbooted"


def suspend(running: Running, project: str) -> str:
    create(running, project, "paused", **shell("sleep 300"))
    running_node(running, project, "paused")
    patch_spec(running, project, "paused", {"state": "Suspended"})
    running.wait_phase(project, "paused", "Suspended", timeout=120)
    return "paused"


def cancel(running: Running, project: str) -> str:
    create(running, project, "cancelled", **shell("sleep 300"))
    running_node(running, project, "cancelled")
    patch_spec(running, project, "cancelled", {"state": "Cancelled"})
    running.wait_phase(project, "cancelled", "Cancelled", timeout=120)
    return "cancelled"


@pytest.mark.parametrize(
    "path", [failure, preemption, node_lost, boot_failed, suspend, cancel], ids=lambda p: p.__name__
)
def test_every_path_is_charged_exactly(running: Running, path: Callable[[Running, str], str]) -> None:
    project = running.project(credit="10")
    name = path(running, project)
    check_exact(running, project, name, Decimal(10))


def test_verify_catches_an_attempt_whose_cost_copy_differs_from_the_ledger(running: Running) -> None:
    project = running.project(credit="10")
    name = failure(running, project)
    check_exact(running, project, name, Decimal(10))
    attempt = running.attempts(project, name)[0]
    meta, cost = attempt["metadata"], attempt["status"]["cost"]
    path = f"/apis/nodus.dev/v1/namespaces/{project}/attempts/{meta['name']}/status"
    merge = {"Content-Type": "application/merge-patch+json"}
    with running.client() as client:
        tampered = client.patch(path, json={"status": {"cost": {"totalUSD": "9.99"}}}, headers=merge)
        assert tampered.status_code == 200, tampered.text
        caught = verify(running)
        assert caught.returncode == 1
        assert f"attempt {project}/{meta['name']}: status.cost.totalUSD shows 9.99" in caught.stdout + caught.stderr
        restored = client.patch(path, json={"status": {"cost": {"totalUSD": cost["totalUSD"]}}}, headers=merge)
        assert restored.status_code == 200, restored.text
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr
