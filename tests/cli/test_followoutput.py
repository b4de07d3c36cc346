"""What a followed Job looks like: the summary and exit code, progress lines, and terminal safety of log lines."""

from __future__ import annotations

import io
from typing import Any

import pytest
from rich.console import Console

from nodus.cli.following import Rate
from nodus.cli.followoutput import PlainOutput, RichOutput, Snapshot, summary


def job(phase: str, **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "nodus.dev/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "team"},
        "spec": {"image": "python:3.11", "command": ["python", "t.py"], "completions": 2},
        "status": {
            "phase": phase,
            "startTime": "2026-12-01T10:00:00Z",
            "completionTime": "2026-12-01T10:01:05Z",
            **status,
        },
    }


def test_a_success_with_cost_and_outputs() -> None:
    outputs = [
        {"name": "model", "index": 1, "size": 3 * 2**20, "sha256": "ab" * 32},
        {"name": "shards", "index": 0, "rank": 2, "size": 10, "sha256": "cd" * 32},
    ]
    lines, code = summary(
        job("Succeeded", succeeded=2, cost={"totalUSD": "1.234567", "final": True}, outputs=outputs), "team"
    )
    assert code == 0
    assert [text for text, _ in lines] == [
        "job/train Succeeded in 1m05s (2/2 completed)",
        "cost: 1.23 USD (1.234567 exactly)",
        "outputs:",
        f"  model  index 1  3.0 MiB  sha256:{'ab' * 32}",
        "    download: nodus outputs get train model --index 1 -n team",
        f"  shards  index 0 rank 2  10 B  sha256:{'cd' * 32}",
        "    download: nodus outputs get train shards --index 0 --rank 2 -n team",
    ]


@pytest.mark.parametrize(
    ("status", "head"),
    [
        pytest.param(
            {"reason": "BackoffLimitExceeded", "message": "7 attempts failed", "fix": "Read the logs."},
            "job/train Failed in 1m05s: BackoffLimitExceeded: 7 attempts failed",
            id="failed",
        ),
        pytest.param({}, "job/train Failed in 1m05s", id="failed-without-reason"),
    ],
)
def test_a_failure_says_why_and_how_to_fix_it(status: dict[str, Any], head: str) -> None:
    lines, code = summary(job("Failed", **status), "team")
    assert code == 1
    assert lines[0] == (head, "bold red")
    if "fix" in status:
        assert lines[1] == ("  fix: Read the logs.", "red")


def test_a_cancelled_job_exits_1_and_names_its_reason_once() -> None:
    lines, code = summary(job("Cancelled", reason="Cancelled", message="The Job was cancelled."), "team")
    assert code == 1
    assert lines[0][0] == "job/train Cancelled in 1m05s: The Job was cancelled."


def test_a_cost_still_posting_says_so() -> None:
    lines, _ = summary(job("Succeeded", succeeded=2, cost={"totalUSD": "0.50", "final": False}), "team")
    assert lines[1][0].startswith("cost: 0.50 USD (so far: the final charge is still posting")


@pytest.mark.parametrize(
    ("snapshot", "text"),
    [
        pytest.param(
            Snapshot(40, 100, 2.0, {"loss": "0.12", "lr": "3e-4"}), "40/100 (40%)  2/s  ETA 30s  loss=0.12 lr=3e-4"
        ),
        pytest.param(Snapshot(7, None, None, {}), "7 done", id="no-total"),
        pytest.param(Snapshot(None, None, None, {"acc": "0.9"}), "acc=0.9", id="metrics-only"),
        pytest.param(Snapshot(0, 7200, 1.0, {}), "0/7200 (0%)  1/s  ETA 2h00m", id="hours"),
    ],
)
def test_progress_text(snapshot: Snapshot, text: str) -> None:
    assert snapshot.text() == text


def test_plain_progress_prints_changes_at_most_every_few_seconds_and_always_the_end() -> None:
    now = [0.0]
    stream = io.StringIO()
    output = PlainOutput(stream, clock=lambda: now[0])
    output.progress(Snapshot(1, 4, None, {}))
    output.progress(Snapshot(2, 4, None, {}))  # 0 s later: held back
    now[0] = 6.0
    output.progress(Snapshot(3, 4, None, {}))
    output.progress(Snapshot(3, 4, None, {}))  # unchanged
    output.progress(Snapshot(4, 4, None, {}))  # done: printed at once
    assert stream.getvalue().splitlines() == ["progress 1/4 (25%)", "progress 3/4 (75%)", "progress 4/4 (100%)"]


def test_plain_log_lines_pass_as_written() -> None:
    stream = io.StringIO()
    PlainOutput(stream).log("[1] ", "\x1b[31mred\x1b[0m")
    assert stream.getvalue() == "[1] \x1b[31mred\x1b[0m\n"


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param("\x1b]0;owned\x07", id="retitle"),
        pytest.param("\x1b[2J\x1b[H", id="clear-screen"),
        pytest.param("\x9b31m", id="c1-csi"),
        pytest.param("[bold red]markup[/]", id="rich-markup"),
        pytest.param("\rover", id="carriage-return"),
    ],
)
def test_a_terminal_never_gets_the_programs_control_characters(hostile: str) -> None:
    output = RichOutput()
    output.console = Console(file=io.StringIO(), force_terminal=True, highlight=False, width=200)
    output.log("", f"before {hostile} after")
    written = output.console.file.getvalue()
    assert not any((ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in written), repr(written)
    assert written.startswith("before ") and written.rstrip("\n").endswith(" after")
    if "markup" in hostile:
        assert "[bold red]markup[/]" in written, "log text is text, not rich markup"


def test_the_rate_is_measured_over_the_window_and_restarts_when_progress_goes_back() -> None:
    rate = Rate(window=60)
    assert rate.per_second() is None
    rate.observe(0, 0)
    rate.observe(10, 20)
    assert rate.per_second() == 2.0
    rate.observe(100, 30)  # the first sample left the window
    assert rate.per_second() == pytest.approx(10 / 90)
    rate.observe(110, 5)  # restored from an earlier checkpoint
    assert rate.per_second() is None
