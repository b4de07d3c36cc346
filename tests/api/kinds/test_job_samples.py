"""When a Job write records a sample of its progress history, and what the sample holds (ADR 0054)."""

from __future__ import annotations

from typing import Any

import pytest

from nodus.api.kinds.job import samples
from nodus.api.kinds.job.strategy import JobStrategy
from nodus.storage.progresssamples import Sample


def job(progress: dict[str, Any] | None = None, total_usd: str | None = None, **status: Any) -> dict[str, Any]:
    shown: dict[str, Any] = {"phase": "Running", **status}
    if progress is not None:
        shown["progress"] = progress
    if total_usd is not None:
        shown["cost"] = {"totalUSD": total_usd, "heldUSD": "1.00"}
    return {"apiVersion": "nodus.dev/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}, "status": shown}


RUNNING = job({"stage": "train", "units": {"completed": 5, "total": 10}, "metrics": {"loss": "0.5"}}, "0.10")


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(None, job(), None, id="create-pending"),
        pytest.param(job(), job(message="bound"), None, id="nothing-shown"),
        pytest.param(RUNNING, job(**{**RUNNING["status"], "message": "other"}), None, id="other-fields-only"),
        pytest.param(
            RUNNING,
            job({**RUNNING["status"]["progress"], "stage": "eval"}, "0.10"),
            None,
            id="stage-only",
        ),
        pytest.param(
            RUNNING,
            job({"units": {"completed": 6, "total": 10}, "metrics": {"loss": "0.5"}}, "0.10"),
            Sample(6, 10, {"loss": "0.5"}, "0.10"),
            id="units-rose",
        ),
        pytest.param(
            RUNNING,
            job({"units": {"completed": 5, "total": 10}, "metrics": {"loss": "0.4"}}, "0.10"),
            Sample(5, 10, {"loss": "0.4"}, "0.10"),
            id="metric-changed",
        ),
        pytest.param(
            RUNNING,
            job(RUNNING["status"]["progress"], "0.11"),
            Sample(5, 10, {"loss": "0.5"}, "0.11"),
            id="cost-rose",
        ),
        pytest.param(job(), job(total_usd="0.01"), Sample(None, None, {}, "0.01"), id="first-charge"),
        pytest.param(
            job(),
            job({"units": {"completed": 1}}),
            Sample(1, None, {}, None),
            id="first-report-without-total",
        ),
        pytest.param(
            job(),
            job({"units": {"completed": "7", "total": True}, "metrics": {"x": 1, "y": "2"}}),
            Sample(None, None, {"y": "2"}, None),
            id="malformed-values-skipped",
        ),
    ],
)
def test_recorded(old: dict[str, Any] | None, new: dict[str, Any], expected: Sample | None) -> None:
    assert samples.recorded(new, old) == expected
    assert JobStrategy().companions(new, old) == (() if expected is None else (expected,))
