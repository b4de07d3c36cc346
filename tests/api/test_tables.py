"""Table rendering: ages as kubectl prints them, and the row objects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nodus.api import tables
from nodus.api.kinds.project import PROJECT

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ago", "shown"),
    [
        pytest.param(timedelta(seconds=5), "5s", id="seconds"),
        pytest.param(timedelta(seconds=150), "2m30s", id="minutes-seconds"),
        pytest.param(timedelta(minutes=45), "45m", id="minutes"),
        pytest.param(timedelta(hours=5, minutes=3), "5h3m", id="hours-minutes"),
        pytest.param(timedelta(hours=30), "30h", id="hours"),
        pytest.param(timedelta(days=3, hours=4), "3d4h", id="days-hours"),
        pytest.param(timedelta(days=40), "40d", id="days"),
    ],
)
def test_human_age(ago: timedelta, shown: str) -> None:
    stamp = (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert tables.human_age(stamp, at=NOW) == shown


def test_table_rows_and_headers() -> None:
    project = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Project",
        "metadata": {"name": "p", "creationTimestamp": "2026-11-29T11:00:00Z", "managedFields": [{}]},
        "spec": {"displayName": "Team P", "members": [{"name": "a", "role": "Owner"}]},
    }
    table = tables.table(PROJECT, [project], "Metadata")
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Display Name", "Members", "Phase", "Age"]
    row = table["rows"][0]
    assert row["cells"][:4] == ["p", "Team P", 1, "Active"]
    assert row["object"]["kind"] == "PartialObjectMetadata" and "managedFields" not in row["object"]["metadata"]
    assert tables.table(PROJECT, [project], "None", headers=False)["columnDefinitions"] == []
