"""A Job's progress history and a project's spend per day, end to end (ADR 0054): a real program writes
progress lines, a real agent reports them, the Job controller and the billing controller write status, and the
API serves what was recorded; members read, strangers do not; a bad ``days`` names the parameter."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.e2e.running.conftest import Running
from tests.support.images import registry_python_image
from tests.support.objects import API

pytestmark = pytest.mark.e2e

UNITS = 12
# One unit a second, so the agent (one report per 5 s at most) reports several times while it runs.
PROGRAM = (
    "import json, os, time\n"
    f"for i in range(1, {UNITS + 1}):\n"
    f"    line = {{'stage': 'train', 'completed': i, 'total': {UNITS}, 'metrics': {{'loss': 1 / i}}}}\n"
    "    with open(os.environ['NODUS_PROGRESS_FILE'], 'a') as f:\n"
    "        f.write(json.dumps(line) + '\\n')\n"
    "    time.sleep(1)\n"
)


def make_project(running: Running) -> str:
    """A project where alice is Owner and carol Viewer (dave is no member), with credit."""
    name = f"progress-{datetime.now(UTC).strftime('%H%M%S%f')}"
    members = [{"name": "alice", "role": "Owner"}, {"name": "carol", "role": "Viewer"}]
    body = {"apiVersion": "nodus.dev/v1", "kind": "Project", "metadata": {"name": name}, "spec": {"members": members}}
    with running.client() as admin:
        created = admin.post(f"{API}/projects", json=body)
        assert created.status_code == 201, created.text
        granted = admin.post(f"{API}/projects/{name}/credits", json={"amountUSD": "100", "key": "start"})
        assert granted.status_code == 201, granted.text
    return name


def run_to_final_cost(running: Running, project: str, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "image": registry_python_image(),
            "command": ["python3", "-c", PROGRAM],
            "resources": {"cpu": "1"},
            "placement": {"offerings": ["cpu-8c-us"]},
        },
    }
    with running.client("alice") as alice:
        created = alice.post(f"{API}/namespaces/{project}/jobs", json=body)
        assert created.status_code == 201, created.text
    job = running.wait_phase(project, name, "Succeeded", "Failed", timeout=180)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    return dict(
        running.wait_for(
            "the final charge",
            lambda: (j := running.job(project, name))["status"].get("cost", {}).get("final") and j,
        )
    )


def get(running: Running, user: str, path: str, **params: Any) -> httpx.Response:
    with running.client(user) as client:
        return client.get(f"{API}/namespaces/{path}", params=params)


def test_progress_history_and_spend(running: Running) -> None:
    project = make_project(running)
    job = run_to_final_cost(running, project, "train")
    status = job["status"]

    answer = get(running, "carol", f"{project}/jobs/train/progress")
    assert answer.status_code == 200, answer.text
    history = answer.json()
    assert (history["kind"], history["apiVersion"], history["job"]) == ("JobProgressHistory", "nodus.dev/v1", "train")
    samples = history["samples"]
    reported = [s["completed"] for s in samples if s["completed"] is not None]
    # Several reports while it ran, each recorded once, rising to the last unit.
    assert len(set(reported)) >= 2, samples
    assert reported == sorted(reported) and reported[-1] == UNITS, samples
    assert all(s["total"] == UNITS for s in samples if s["completed"] is not None)
    times = [datetime.fromisoformat(s["time"].replace("Z", "+00:00")) for s in samples]
    assert times == sorted(times)
    for sample in samples:
        if sample["completed"] is not None:
            assert abs(float(sample["metrics"]["loss"]) - 1 / sample["completed"]) < 1e-9, sample
    # The cost as it rose, ending at what the Job finally cost.
    costs = [Decimal(s["costUSD"]) for s in samples if s["costUSD"] is not None]
    assert costs and costs == sorted(costs), samples
    assert samples[-1]["costUSD"] == status["cost"]["totalUSD"]
    assert samples[-1]["completed"] == UNITS and samples[-1]["metrics"] == status["progress"]["metrics"]
    # A change of anything else records nothing: consecutive samples differ.
    shown = [(s["completed"], s["total"], s["metrics"], s["costUSD"]) for s in samples]
    assert all(a != b for a, b in itertools.pairwise(shown)), samples

    attempts = running.attempts(project, "train")
    charged = sum((Decimal(a["status"]["cost"]["totalUSD"]) for a in attempts), Decimal(0))
    assert charged > 0 and charged == Decimal(status["cost"]["totalUSD"])
    spend = get(running, "carol", f"{project}/ledger/spend", days=3)
    assert spend.status_code == 200, spend.text
    figures = spend.json()
    assert (figures["kind"], figures["apiVersion"], figures["project"]) == ("ProjectSpend", "nodus.dev/v1", project)
    days = figures["days"]
    today = datetime.now(UTC).date()
    assert [d["date"] for d in days][-1] == today.isoformat() and len(days) == 3
    assert [date.fromisoformat(d["date"]) for d in days] == sorted(date.fromisoformat(d["date"]) for d in days)
    # Everything was charged today (or, across midnight, within the three days): the Job's attempts' costs.
    assert sum((Decimal(d["chargedUSD"]) for d in days), Decimal(0)) == charged
    this_month = [Decimal(d["chargedUSD"]) for d in days if date.fromisoformat(d["date"]) >= today.replace(day=1)]
    assert Decimal(figures["monthToDateUSD"]) == sum(this_month, Decimal(0))
    default = get(running, "alice", f"{project}/ledger/spend").json()
    assert len(default["days"]) == 30 and default["monthToDateUSD"] == figures["monthToDateUSD"]


def test_strangers_and_missing_things(running: Running) -> None:
    project = make_project(running)
    for path in (f"{project}/jobs/train/progress", f"{project}/ledger/spend"):
        refused = get(running, "dave", path)
        assert refused.status_code == 403, refused.text
        assert refused.json()["kind"] == "Status" and "dave" in refused.json()["message"]
    missing = get(running, "carol", f"{project}/jobs/never-created/progress")
    assert missing.status_code == 404 and "never-created" in missing.json()["message"]
    with running.client("admin") as admin:
        for missing_project in ("no-such-project-x", "a%00b"):
            absent = admin.get(f"{API}/namespaces/{missing_project}/ledger/spend")
            assert absent.status_code == 404 and absent.json()["kind"] == "Status", absent.text
        # Reads only: a write to either is refused, and records nothing.
        posted = admin.post(f"{API}/namespaces/{project}/jobs/train/progress", json={"samples": []})
        assert posted.status_code == 405, posted.text
        deleted = admin.delete(f"{API}/namespaces/{project}/ledger/spend")
        assert deleted.status_code == 405, deleted.text


@pytest.mark.parametrize(
    "days",
    [
        pytest.param("0", id="zero"),
        pytest.param("367", id="past-a-year"),
        pytest.param("ten", id="text"),
        pytest.param("-1", id="negative"),
        pytest.param("1e2", id="exponent"),
        pytest.param("", id="empty"),
        pytest.param("٣", id="arabic-digit"),
        pytest.param("9" * 5000, id="huge"),
    ],
)
def test_a_bad_days_is_a_422_naming_it(running: Running, days: str) -> None:
    project = make_project(running)
    answer = get(running, "carol", f"{project}/ledger/spend", days=days)
    assert answer.status_code == 422, answer.text
    status = answer.json()
    assert status["reason"] == "Invalid"
    assert status["details"]["causes"][0]["field"] == "days"
    assert "days" in status["message"] and "1 to 366" in status["message"]
    assert "days=N" in status["fix"]


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("..", id="dot-dot"),
        pytest.param("%2e%2e", id="encoded-dot-dot"),
        pytest.param("train%2Fprogress", id="encoded-slash"),
        pytest.param("x" * 300, id="long"),
        pytest.param("%C3%A9t%C3%A9", id="unicode"),
        pytest.param("%00", id="nul"),
    ],
)
def test_hostile_job_names_find_nothing(running: Running, name: str) -> None:
    project = make_project(running)
    with running.client("carol") as carol:
        answer = carol.get(f"{API}/namespaces/{project}/jobs/{name}/progress")
    assert answer.status_code in (400, 404), answer.text
    assert answer.json()["kind"] == "Status"
    assert "samples" not in answer.text
