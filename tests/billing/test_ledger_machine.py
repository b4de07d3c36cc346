"""A property-based state machine over the ledger: grants, holds, extensions, captures, refunds, covered
time, releases and replays in any order, against the real PostgreSQL, checked after every step against a
model in plain Decimals and, at the end of each run, against every invariant ``nodus billing verify``
checks. The default run makes 60 runs; ``NODUS_LEDGER_EXAMPLES`` (the slow suite: 2,000) makes more.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from nodus.billing import ledger, money
from nodus.storage import ledger as tables
from nodus.storage.ledger import Charge, HoldSettled, KeyReused, Overdrawn
from nodus.storage.objects import Storage

EXAMPLES = int(os.environ.get("NODUS_LEDGER_EXAMPLES", "60"))
amounts = st.decimals(min_value=Decimal("0.000001"), max_value=Decimal("500"), places=6)


class LedgerMachine(RuleBasedStateMachine):
    """One project's money, modelled; the database must agree after every step."""

    url: str = ""
    holds = Bundle("holds")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.storage = Storage(self.url, pool_size=2, compaction_interval=3600)
        self.run(self.storage.start())
        self.project = f"m-{uuid.uuid4().hex[:12]}"
        self.available = Decimal(0)
        self.held: dict[str, Decimal] = {}
        self.settled: set[str] = set()
        self.done: dict[str, tuple[str, Any]] = {}  # key -> (operation, argument), for replays
        self.refunded: set[str] = set()
        self.steps = 0

    def run(self, work: Any) -> Any:
        return self.loop.run_until_complete(work)

    def key(self) -> str:
        self.steps += 1
        return f"{self.project}:{self.steps}"

    @rule(amount=amounts)
    def grant(self, amount: Decimal) -> None:
        key = self.key()
        self.run(ledger.grant(self.storage, self.project, amount, key))
        self.available += amount
        self.done[key] = ("grant", amount)

    @rule(target=holds, amount=amounts)
    def hold(self, amount: Decimal) -> str:
        hold_id, key = f"{self.project}-h{self.steps}", self.key()
        if amount > self.available:
            with pytest.raises(Overdrawn):
                self.run(ledger.hold(self.storage, self.project, hold_id, amount, key))
            return hold_id  # never created: later operations on it must be refused
        self.run(ledger.hold(self.storage, self.project, hold_id, amount, key))
        self.available -= amount
        self.held[hold_id] = amount
        return hold_id

    @rule(hold_id=holds, amount=amounts)
    def extend(self, hold_id: str, amount: Decimal) -> None:
        key = self.key()
        if hold_id not in self.held or hold_id in self.settled or amount > self.available:
            with pytest.raises((Overdrawn, HoldSettled)):
                self.run(ledger.hold(self.storage, self.project, hold_id, amount, key, extend=True))
            return
        self.run(ledger.hold(self.storage, self.project, hold_id, amount, key, extend=True))
        self.available -= amount
        self.held[hold_id] += amount

    @rule(hold_id=holds, seconds=st.integers(min_value=0, max_value=100_000), rate=amounts)
    def capture(self, hold_id: str, seconds: int, rate: Decimal) -> None:
        amount = money.charge(rate, Decimal(seconds))
        charge, key = Charge("Running", Decimal(seconds), rate, amount), self.key()
        if hold_id not in self.held or hold_id in self.settled or amount > self.held[hold_id]:
            with pytest.raises((Overdrawn, HoldSettled)):
                self.run(ledger.capture(self.storage, self.project, hold_id, charge, key))
            return
        self.run(ledger.capture(self.storage, self.project, hold_id, charge, key))
        self.held[hold_id] -= amount
        self.done[key] = ("capture", (hold_id, charge))

    @precondition(lambda self: any(op == "capture" for op, _ in self.done.values()))
    @rule(data=st.data())
    def refund(self, data: st.DataObject) -> None:
        captures = sorted(k for k, (op, _) in self.done.items() if op == "capture" and k not in self.refunded)
        if not captures:
            return
        key = data.draw(st.sampled_from(captures))
        hold_id, charge = self.done[key][1]
        if charge.amount <= 0:
            self.refunded.add(key)
            return
        self.run(ledger.refund(self.storage, self.project, hold_id, charge, f"refund:{key}"))
        self.available += charge.amount
        self.refunded.add(key)

    @rule(seconds=st.integers(min_value=1, max_value=10_000), rate=amounts)
    def cover(self, seconds: int, rate: Decimal) -> None:
        charge = Charge("Boot", Decimal(seconds), rate, money.charge(rate, Decimal(seconds)), covered=True)
        self.run(ledger.cover(self.storage, self.project, "subject", charge, self.key()))

    @rule(hold_id=holds)
    def release(self, hold_id: str) -> None:
        key = self.key()
        if hold_id not in self.held or hold_id in self.settled:
            with pytest.raises(HoldSettled):
                self.run(ledger.release(self.storage, self.project, hold_id, key))
            return
        self.run(ledger.release(self.storage, self.project, hold_id, key))
        self.available += self.held[hold_id]
        self.held[hold_id] = Decimal(0)
        self.settled.add(hold_id)
        self.done[key] = ("release", hold_id)

    @precondition(lambda self: bool(self.done))
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.done)))
        operation, argument = self.done[key]
        if operation == "grant":
            assert self.run(ledger.grant(self.storage, self.project, argument, key)).replayed
            with pytest.raises(KeyReused):
                self.run(ledger.grant(self.storage, self.project, argument + Decimal("0.000001"), key))
        elif operation == "capture":
            hold_id, charge = argument
            assert self.run(ledger.capture(self.storage, self.project, hold_id, charge, key)).replayed
        else:
            assert self.run(ledger.release(self.storage, self.project, argument, key)).replayed

    @invariant()
    def balances_match_the_model(self) -> None:
        credits = self.run(ledger.credits(self.storage, self.project))
        assert credits["available"] == self.available
        assert credits["held"] == sum(self.held.values(), Decimal(0))

    def teardown(self) -> None:
        try:
            assert self.run(tables.breaches(self.storage)) == []
        finally:
            self.run(self.storage.stop())
            self.loop.close()


def test_no_sequence_of_movements_breaks_the_ledger(database_url: str) -> None:
    LedgerMachine.url = database_url
    machine = settings(
        max_examples=EXAMPLES,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )(LedgerMachine)
    machine.TestCase().runTest()
