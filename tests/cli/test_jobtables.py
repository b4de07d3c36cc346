"""What ``nodus jobs`` and ``nodus describe`` print, from Jobs and Attempts shaped as the server serves them: ages as
kubectl shows them, money to the cent, newest first, the sections of a description, plain text with no escape
codes (a program's escape sequences in a Job's message included) and phases coloured on a terminal."""

from __future__ import annotations

import io
import itertools
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console

from nodus.cli import describing, jobtables

NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)
# Every object built is a new version, as every object a server serves is (typed views are cached by version).
VERSIONS = itertools.count(1)


def job(name: str, created: str, phase: str | None = None, project: str = "team", **status: Any) -> dict[str, Any]:
    """A Job as the API serves it (defaults filled in by the server, camelCase keys)."""
    body: dict[str, Any] = {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": project,
            "uid": f"uid-{project}-{name}",
            "resourceVersion": str(next(VERSIONS)),
            "generation": 1,
            "creationTimestamp": created,
            "labels": {"team": "vision"},
        },
        "spec": {
            "image": "localhost:5000/nodus/python:3.11",
            "command": ["python", "-c", "print('hello world')"],
            "resources": {"gpu": {"type": ["H100"], "count": 8}, "memory": "64Gi"},
            "completions": 2,
            "parallelism": 2,
            "backoffLimit": 3,
            "placement": {"interruptible": "Allow", "profile": "Cost", "queueTimeout": "24h", "regions": ["us"]},
            "recovery": {
                "continuity": "Checkpointed",
                "maxAttempts": 5,
                "onInterruption": "Resume",
                "minProgressDuration": "10m",
                "checkpoint": {
                    "interval": "auto",
                    "integration": "Auto",
                    "maxSize": "100Gi",
                    "paths": ["/nodus/state"],
                },
            },
            "state": "Running",
        },
        "status": {"phase": phase, **status} if phase else status,
    }
    return body


def attempt(job_name: str, index: int, number: int, phase: str, **status: Any) -> dict[str, Any]:
    name = f"{job_name}-{index}-{number}"
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Attempt",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": str(next(VERSIONS)),
            "labels": {"nodus.dev/job": job_name, "nodus.dev/index": str(index)},
        },
        "spec": {
            "job": job_name,
            "jobUID": f"uid-team-{job_name}",
            "index": index,
            "number": number,
            "node": f"node-{index}-{number}",
            "offering": "h100-sxm-80g-x8-us",
        },
        "status": {"phase": phase, **status},
    }


FINISHED = job(
    "train",
    "2026-12-03T11:00:00Z",
    "Succeeded",
    reason="Completed",
    succeeded=2,
    completedIndexes="0-1",
    startTime="2026-12-03T11:00:30Z",
    completionTime="2026-12-03T11:40:00Z",
    conditions=[
        {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": "2026-12-03T11:00:01Z"},
        {"type": "Complete", "status": "True", "reason": "Completed", "lastTransitionTime": "2026-12-03T11:40:00Z"},
    ],
    checkpoint={"seq": 7, "time": "2026-12-03T11:30:00Z", "size": 3 * 1024**3, "restoredFromSeq": 4},
    cost={
        "totalUSD": "24.506",
        "final": True,
        "bySegment": {"bootUSD": "1.2", "runningUSD": "20.004", "restoreUSD": "3.3", "teardownUSD": "0.002"},
    },
    estimate={"costUSD": {"p50": "20.00", "p90": "30.00"}},
    outputs=[
        {
            "name": "model",
            "index": 0,
            "size": 2048,
            "path": "/nodus/outputs/model",
            "committedTime": "2026-12-03T11:39:00Z",
        }
    ],
)
ATTEMPTS = [
    attempt("train", 1, 1, "Succeeded", startTime="2026-12-03T11:01:00Z", finishTime="2026-12-03T11:39:30Z"),
    attempt(
        "train",
        0,
        2,
        "Succeeded",
        reason="Completed",
        startTime="2026-12-03T11:20:00Z",
        finishTime="2026-12-03T11:40:00Z",
    ),
    attempt(
        "train", 0, 1, "Lost", reason="Preempted", startTime="2026-12-03T11:01:00Z", finishTime="2026-12-03T11:15:05Z"
    ),
]


@pytest.mark.parametrize(
    ("created", "shown"),
    [
        pytest.param("2026-12-03T11:59:55Z", "5s", id="seconds"),
        pytest.param("2026-12-03T11:56:59Z", "3m", id="minutes-rounded-down"),
        pytest.param("2026-12-03T09:30:00Z", "2h", id="hours"),
        pytest.param("2026-11-29T11:00:00Z", "4d", id="days"),
        pytest.param("2024-11-03T12:00:00Z", "2y", id="years"),
        pytest.param("2026-12-03T12:00:00.5Z", "0s", id="clock-skew-within-a-second"),
        pytest.param("2026-12-03T12:05:00Z", "<invalid>", id="in-the-future"),
        pytest.param(None, "<unknown>", id="absent"),
        pytest.param("yesterday", "<unknown>", id="not-a-time"),
    ],
)
def test_ages_read_as_kubectl_shows_them(created: str | None, shown: str) -> None:
    assert jobtables.age(created, NOW) == shown


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        pytest.param("24.506", "$24.51", id="half-up-to-the-cent"),
        pytest.param("1234.5", "$1,234.50", id="thousands"),
        pytest.param("0", "$0.00", id="zero"),
        pytest.param("0.000004", "<$0.01", id="a-few-micro-dollars-exist"),
        pytest.param(None, "-", id="absent"),
    ],
)
def test_money_is_shown_to_the_cent(amount: str | None, shown: str) -> None:
    assert jobtables.money(amount) == shown


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (45, "45s"), (192, "3m12s"), (3600, "1h"), (7500, "2h5m"), (100800, "1d4h"), (-3, "0s")],
)
def test_durations_show_their_two_largest_units(seconds: float, shown: str) -> None:
    assert jobtables.duration(seconds) == shown


def listing() -> list[dict[str, Any]]:
    return [
        job("old", "2026-12-01T12:00:00Z", "Succeeded", succeeded=2, cost={"totalUSD": "3.999"}),
        job("new", "2026-12-03T11:59:50Z", "Pending"),
        job("mid", "2026-12-03T09:00:00Z", "Running", project="other", succeeded=1, cost={"totalUSD": "0.5"}),
    ]


def test_the_listing_is_newest_first_with_completions_cost_and_age() -> None:
    text = jobtables.plain([jobtables.jobs_grid(listing(), NOW, all_projects=False)])
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "COMPLETIONS", "COST", "AGE"]
    assert [line.split() for line in lines[1:]] == [
        ["new", "Pending", "0/2", "-", "10s"],
        ["mid", "Running", "1/2", "$0.50", "3h"],
        ["old", "Succeeded", "2/2", "$4.00", "2d"],
    ]
    # Aligned as kubectl aligns: every column starts at the same offset on every line.
    starts = {line.index(word) for line, word in zip(lines, ("PHASE", "Pending", "Running", "Succeeded"), strict=True)}
    assert len(starts) == 1


def test_every_project_adds_the_project_column_first() -> None:
    text = jobtables.plain([jobtables.jobs_grid(listing(), NOW, all_projects=True)])
    rows = [line.split() for line in text.splitlines()]
    assert rows[0][:2] == ["PROJECT", "NAME"]
    assert [row[:2] for row in rows[1:]] == [["team", "new"], ["other", "mid"], ["team", "old"]]


HOSTILE = "loss=nan\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b31m [bold]not markup[/bold]"


def test_plain_text_has_no_escape_codes_even_from_a_programs_message() -> None:
    failed = job("bad", "2026-12-03T11:00:00Z", "Failed", reason="BackoffLimitExceeded", message=HOSTILE)
    text = jobtables.plain(describing.describe(failed, [], NOW))
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "loss=nan^[]52;c;cm0gLXJmIH4=^G^[[2J" in text
    assert "[bold]not markup[/bold]" in text
    assert all(ch == "\n" or ch.isprintable() for ch in text)


def render(blocks: list[jobtables.Block]) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=200, highlight=False)
    for renderable in jobtables.rich(blocks):
        console.print(renderable)
    return out.getvalue()


def test_a_terminal_gets_phases_in_their_colours_and_no_escape_from_a_message() -> None:
    shown = render([jobtables.jobs_grid(listing(), NOW, all_projects=False)])
    assert "\x1b[32mSucceeded" in shown  # green
    assert "\x1b[33mPending" in shown  # yellow
    assert "\x1b[36mRunning" in shown  # cyan
    failed = job("bad", "2026-12-03T11:00:00Z", "Failed", message=HOSTILE)
    described = render(describing.describe(failed, [], NOW))
    assert "\x1b[31mFailed" in described  # red
    assert "\x1b]52" not in described and "\x07" not in described and "\x1b[2J" not in described
    assert "[bold]not markup[/bold]" in described


def section(text: str, title: str) -> list[str]:
    """The lines under ``title:`` up to the next title."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")), len(lines))
    return lines[start:end]


def test_a_description_has_every_section_a_person_asks_about() -> None:
    text = jobtables.plain(describing.describe(FINISHED, ATTEMPTS, NOW))
    head = text.splitlines()[:4]
    assert head[0].split() == ["Name:", "train"] and head[1].split() == ["Project:", "team"]
    assert "(1h ago)" in head[2] and head[3].split() == ["Labels:", "team=vision"]
    spec = "\n".join(section(text, "Spec"))
    for shown in (
        "localhost:5000/nodus/python:3.11",
        "python -c 'print('\"'\"'hello world'\"'\"')'",
        "gpu 8x H100, memory 64Gi",
        "profile Cost, interruptible Allow, regions us",
        "Checkpointed, maxAttempts 5, onInterruption Resume, checkpoint every auto",
        "2 (parallelism 2, backoffLimit 3)",
    ):
        assert shown in spec, spec
    status = "\n".join(section(text, "Status"))
    assert "Succeeded" in status and "Completed" in status and "2/2 succeeded (indexes 0-1)" in status
    conditions = section(text, "Conditions")
    assert conditions[0].split() == ["TYPE", "STATUS", "REASON", "MESSAGE", "LAST", "TRANSITION"]
    assert [line.split()[0] for line in conditions[1:]] == ["Admitted", "Complete"]


def test_attempts_are_by_index_and_number_with_node_offering_reason_and_duration() -> None:
    text = jobtables.plain(describing.describe(FINISHED, ATTEMPTS, NOW))
    rows = [line.split() for line in section(text, "Attempts")]
    assert rows[0] == ["NAME", "INDEX", "PHASE", "NODE", "OFFERING", "REASON", "START", "DURATION"]
    assert rows[1] == [
        "train-0-1", "0", "Lost", "node-0-1", "h100-sxm-80g-x8-us", "Preempted", "2026-12-03T11:01:00Z", "14m5s"
    ]  # fmt: skip
    assert rows[2][:3] == ["train-0-2", "0", "Succeeded"] and rows[2][-1] == "20m"
    assert rows[3][0] == "train-1-1" and rows[3][-1] == "38m30s"


def test_a_running_attempt_is_timed_up_to_now() -> None:
    running = attempt("train", 0, 1, "Running", startTime="2026-12-03T11:58:00Z")
    text = jobtables.plain(describing.describe(job("train", "2026-12-03T11:57:00Z", "Running"), [running], NOW))
    assert section(text, "Attempts")[1].split()[-2:] == ["2m", "(running)"]


def test_checkpoint_cost_by_segment_estimate_outputs_and_events() -> None:
    text = jobtables.plain(describing.describe(FINISHED, ATTEMPTS, NOW))
    checkpoint = [line.split(":", 1)[1].strip() for line in section(text, "Checkpoint")]
    assert checkpoint == ["7", "2026-12-03T11:30:00Z", "3.0 GiB", "4"]
    cost = [line.split() for line in section(text, "Cost")]
    assert cost == [
        ["SEGMENT", "USD"],
        ["Boot", "$1.20"],
        ["Running", "$20.00"],
        ["Restore", "$3.30"],
        ["Teardown", "<$0.01"],
        ["Total", "$24.51", "(final)"],
    ]
    estimate = "\n".join(section(text, "Estimate vs actual"))
    assert "$20.00 (P50)  $30.00 (P90)" in estimate and "$24.51" in estimate
    assert "1.23x (within the P90)" in estimate  # 24.506 / 20
    assert section(text, "Outputs")[1].split() == [
        "model",
        "0",
        "2.0",
        "KiB",
        "/nodus/outputs/model",
        "2026-12-03T11:39:00Z",
    ]
    events = [line.split(None, 1) for line in section(text, "Events")[1:]]
    assert [when for when, _ in events] == sorted(when for when, _ in events)
    said = [what.strip() for _, what in events]
    assert said[0] == "Job created"
    assert "attempt train-0-1 ended Lost (Preempted)" in said
    assert "attempt train-0-2 started on node-0-2" in said
    assert "checkpoint 7 committed (3.0 GiB)" in said and said[-1] == "Job Succeeded"


def test_the_rate_is_shown_while_running_and_not_once_the_final_charge_zeroed_it() -> None:
    running = job("train", "2026-12-03T11:57:00Z", "Running", cost={"totalUSD": "1.5", "rateUSDPerHour": "98.32"})
    rows = [line.split() for line in section(jobtables.plain(describing.describe(running, [], NOW)), "Cost")]
    assert ["Rate", "$98.32/h"] in rows
    final = {"totalUSD": "24.506", "rateUSDPerHour": "0.000000", "final": True}
    done = job("train", "2026-12-03T11:00:00Z", "Succeeded", cost=final)
    assert not any(
        row[0] == "Rate"
        for row in (line.split() for line in section(jobtables.plain(describing.describe(done, [], NOW)), "Cost"))
    )


def test_a_job_above_its_p90_says_so_and_a_job_without_status_describes() -> None:
    over = job(
        "over",
        "2026-12-03T11:00:00Z",
        "Running",
        cost={"totalUSD": "45"},
        estimate={"costUSD": {"p50": "20", "p90": "30"}},
    )
    estimate = "\n".join(section(jobtables.plain(describing.describe(over, [], NOW)), "Estimate vs actual"))
    assert "$45.00 so far" in estimate and "2.25x (above the P90)" in estimate
    fresh = jobtables.plain(describing.describe(job("fresh", "2026-12-03T11:59:59Z"), [], NOW))
    assert section(fresh, "Status")[0].split() == ["Phase:", "-"]
    assert section(fresh, "Attempts") == ["  <none>"] and section(fresh, "Cost") == ["  <none>"]
