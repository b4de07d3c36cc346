"""Money survives crashes: controllers SIGKILLed at random moments and a node killed while Jobs bill.

A batch of Jobs runs while the leading controller manager is killed several times (a standby takes
over, or a new process is started after a gap) and one node's agent is killed under a running attempt
(a fault of Nodus). Afterwards the ledger, read the way an operator would (the statement, the holds
through the API, ``nodus billing verify`` as a real process), must show for every attempt exactly
what ADR 0017 says it owes, recomputed here from the Attempt's own times: double charges 0, lost
charges 0, holds left open 0, and a balance of what was granted minus what was charged.
"""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict
from datetime import datetime
from decimal import ROUND_CEILING, Decimal
from typing import Any

import pytest

from nodus.apimachinery import money
from tests.e2e.running.conftest import Running
from tests.e2e.running.test_billing import statement, verify
from tests.e2e.running.test_faults import nodus
from tests.e2e.running.test_jobs import create, shell
from tests.support import controllers
from tests.support.objects import API

# Controllers and a host killed at random moments: in the slow tier, which CI runs after `make test` (.ci/run).
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

GRANTED = Decimal(50)
INCREMENT = Decimal(60)
COVERED_REASONS = ("BootFailed", "NodeLost")
# Index 0's first attempt runs until its node is killed under it; every other attempt runs a few seconds.
SCRIPT = '[ "$NODUS_INDEX" = 0 ] && [ "$NODUS_ATTEMPT_NUMBER" = 1 ] && sleep 600; sleep 3; echo index $NODUS_INDEX'


def when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def owed(attempt: dict[str, Any], restore: bool) -> dict[str, tuple[Decimal, Decimal]]:
    """ADR 0017 for one allocation, from the Attempt's own times: (seconds, amount) per segment."""
    status = attempt["status"]
    rate = Decimal(status["placement"]["rateUSDPerHour"])
    ordered = when(status.get("provisioningTime") or status["scheduledTime"])
    end = when(status["finishTime"])
    started = when(status["startTime"]) if status.get("startTime") else None
    boot_end = min(started, end) if started is not None else end
    boot = max(Decimal(str((boot_end - ordered).total_seconds())), Decimal(0))
    ran = max(Decimal(str((end - started).total_seconds())), Decimal(0)) if started is not None else Decimal(0)
    billed = max((((boot + ran) / INCREMENT).to_integral_value(rounding=ROUND_CEILING)) * INCREMENT, INCREMENT)
    seconds = {"Restore" if restore else "Boot": boot, "Running": ran, "Teardown": billed - boot - ran}
    return {segment: (s, money.charge(rate, s)) for segment, s in seconds.items()}


def get(running: Running, path: str) -> dict[str, Any]:
    with running.client() as client:
        response = client.get(path)
        assert response.status_code == 200, response.text
        return dict(response.json())


class Crashes:
    """The controller managers of this test: who leads, who stands by, and killing the leader."""

    def __init__(self, running: Running) -> None:
        self.running = running
        self.standby: controllers.ControllerProcess | None = None

    def start(self) -> controllers.ControllerProcess:
        trust = ("--sim-agent-trust-ca", str(self.running.https.ca_file)) if self.running.https else ()
        process = controllers.start(
            self.running.cluster, self.running.directory, f"crash-{uuid.uuid4().hex[:6]}", trust
        )
        self.running.others.append(process)
        return process

    def kill_leader(self, restart_after: float | None = None) -> None:
        """SIGKILL the leader at once; its standby takes over, or (none) a new process starts after
        ``restart_after`` seconds. Returns once the new leader leads."""
        self.running.controllers.kill()
        if self.standby is None:
            time.sleep(restart_after or 0)
            self.standby = self.start()
        successor, self.standby = self.standby, None
        controllers.wait_for_leader(self.running.cluster, successor.identity, timeout=120)
        self.running.controllers = successor

    def stop_standby(self) -> None:
        if self.standby is not None:
            self.standby.stop()
            self.standby = None


def test_killed_controllers_and_a_killed_node_neither_double_charge_nor_lose_a_charge(running: Running) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    why = f"(random seed {seed})"
    project = running.project(credit=str(GRANTED))
    crashes = Crashes(running)
    crashes.standby = crashes.start()
    try:
        create(running, project, "batch", **shell(SCRIPT, completions=12, parallelism=4))

        def victim() -> dict[str, Any] | None:
            first = [
                a for a in running.attempts(project, "batch") if (a["spec"]["index"], a["spec"]["number"]) == (0, 1)
            ]
            return next((a for a in first if a["status"].get("phase") == "Running"), None)

        running.wait_for("index 0 to run", victim, timeout=120)
        # First crash: at a random moment while the first attempts bill, the standby takes over.
        time.sleep(rng.uniform(0.5, 3))
        crashes.kill_leader()
        # A Nodus fault: the node under index 0's first attempt loses its agent.
        node = running.wait_for("index 0 to run", victim)["spec"]["node"]
        assert "kill requested" in nodus(running, "sim", "kill", node)
        # Second crash: no standby; a new controller manager starts after a gap.
        time.sleep(rng.uniform(0.5, 3))
        crashes.kill_leader(restart_after=rng.uniform(0.5, 3))
        # Third crash: with a standby again.
        crashes.standby = crashes.start()
        time.sleep(rng.uniform(0.5, 4))
        crashes.kill_leader()
        done = running.wait_phase(project, "batch", "Succeeded", "Failed", timeout=300)
    finally:
        crashes.stop_standby()
    assert done["status"]["phase"] == "Succeeded", (done["status"], why)

    def all_final() -> list[dict[str, Any]] | None:
        attempts = running.attempts(project, "batch")
        return attempts if all((a["status"].get("cost") or {}).get("final") for a in attempts) else None

    attempts = running.wait_for("every attempt's final cost", all_final, timeout=120)
    by_number = {(a["spec"]["index"], a["spec"]["number"]): a for a in attempts}
    lost = [a for a in attempts if a["status"]["phase"] == "Lost"]
    assert any(a["status"].get("reason") == "NodeLost" for a in lost), ([a["status"] for a in lost], why)

    rows: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    charged = Decimal(0)
    for row in statement(running, project):
        if row["segment"]:
            rows[(row["subject"], row["segment"])].append(row)
            if row["covered"] != "true":
                charged += Decimal(row["amountUSD"])
    uids = {a["metadata"]["uid"] for a in attempts}
    assert {subject for subject, _ in rows} <= uids, ("a charge on no attempt of the Job", why)

    for attempt in attempts:
        name, uid, status = attempt["metadata"]["name"], attempt["metadata"]["uid"], attempt["status"]
        hold = get(running, f"{API}/namespaces/{project}/ledger/holds/{uid}")
        got = {segment: found for (subject, segment), found in rows.items() if subject == uid}
        if not attempt["spec"].get("node"):
            assert got == {}, (name, "charged without capacity", got, why)
            assert not hold["exists"] or (hold["settled"] and Decimal(hold["amountUSD"]) == 0), (name, hold, why)
            continue
        assert hold["exists"] and hold["settled"] and Decimal(hold["amountUSD"]) == 0, (name, "hold open", hold, why)
        previous = by_number.get((attempt["spec"]["index"], attempt["spec"]["number"] - 1))
        expected = owed(attempt, restore=previous is not None and previous["status"]["phase"] == "Lost")
        covered = status["phase"] == "Lost" and status.get("reason") in COVERED_REASONS
        captured = Decimal(0)
        for segment, (seconds, amount) in expected.items():
            found = got.pop(segment, [])
            paid = [r for r in found if r["covered"] != "true"]
            nodus_paid = [r for r in found if r["covered"] == "true"]
            captured += sum((Decimal(r["amountUSD"]) for r in paid if r["kind"] == "Charge"), Decimal(0))
            mine = nodus_paid if covered else paid
            if amount == 0:
                assert found == [], (name, segment, "charged for no time", found, why)
                continue
            # Exactly one charge (or, for Nodus's fault, one covered line) of exactly what is owed.
            assert [(Decimal(r["seconds"]), Decimal(r["amountUSD"])) for r in mine] == [(seconds, amount)], (
                name,
                segment,
                found,
                why,
            )
            if covered:
                # A segment charged before the fault showed is refunded: the project pays nothing for it.
                assert sum((Decimal(r["amountUSD"]) for r in paid), Decimal(0)) == 0, (name, segment, found, why)
                assert len(paid) in (0, 2), (name, segment, found, why)
            else:
                assert nodus_paid == [], (name, segment, found, why)
        assert got == {}, (name, "charged for segments it did not bill", got, why)
        assert Decimal(hold["capturedUSD"]) == captured, (name, hold, why)

    figures = get(running, f"{API}/projects/{project}/credits")
    assert Decimal(figures["heldUSD"]) == 0, (figures, why)
    assert Decimal(figures["balanceUSD"]) == GRANTED - charged, (figures, charged, why)
    checked = verify(running)
    assert checked.returncode == 0, checked.stdout + checked.stderr
