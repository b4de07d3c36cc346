"""The scheduler loop reads the attempts it acts on through an index of the attempts informer, not by reading every
attempt each cycle: ``pending`` ones to place, ``held`` ones (Pending but stopped or being deleted, never placed) and
``in-flight`` ones (placed, waiting for a new host)."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.controllers.scheduling import HELD, IN_FLIGHT, PENDING, scheduling_state


def attempt(phase: str | None = None, **parts: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "a", "namespace": "p", **parts.pop("metadata", {})}}
    obj["spec"] = {"job": "j", **parts.pop("spec", {})}
    obj["status"] = {**({"phase": phase} if phase else {}), **parts.pop("status", {})}
    return obj


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (attempt(), [PENDING]),  # no status yet: Pending
        (attempt("Pending"), [PENDING]),
        (attempt("Pending", status={"reason": "Unschedulable"}), [PENDING]),  # still to place, every cycle
        (attempt("Pending", spec={"stop": {"reason": "Cancelled"}}), [HELD]),
        (attempt("Pending", metadata={"deletionTimestamp": "2026-12-08T00:00:00Z"}), [HELD]),
        (attempt("Pending", spec={"stop": None}), [PENDING]),  # an explicit null is no stop
        (attempt("Provisioning", status={"placement": {"offering": "o"}}), [IN_FLIGHT]),
        (attempt("Provisioning", status={"placement": {"offering": "o", "node": "warm"}}), []),  # a warm host
        (attempt("Provisioning", spec={"node": "n"}, status={"placement": {"offering": "o"}}), []),  # its Node came
        (attempt("Starting", spec={"node": "n"}), []),
        (attempt("Running", spec={"node": "n"}), []),
        (attempt("Succeeded"), []),
        (attempt("Stopped", spec={"stop": {"reason": "Cancelled"}}), []),
    ],
)
def test_each_attempt_is_indexed_by_what_a_cycle_does_with_it(obj: dict[str, Any], expected: list[str]) -> None:
    assert scheduling_state(obj) == expected
