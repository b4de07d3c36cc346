"""The progress protocol: what a line does to the reported state, and the throttle on reports."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from nodus.agent import progress


def fed(*lines: str | dict[str, Any], start: float = 0.0, step: float = 1.0) -> progress.ProgressTracker:
    tracker = progress.ProgressTracker()
    for index, line in enumerate(lines):
        tracker.feed(line if isinstance(line, str) else json.dumps(line), start + index * step)
    return tracker


@pytest.mark.parametrize(
    ("lines", "snapshot"),
    [
        pytest.param([], {}, id="nothing"),
        pytest.param(
            [{"stage": "train", "completed": 120, "total": 1000, "metrics": {"loss": 0.25, "lr": "3e-4"}}],
            {
                "progress": {
                    "stage": "train",
                    "units": {"completed": 120, "total": 1000},
                    "metrics": {"loss": "0.25", "lr": "3e-4"},
                },
                "unitMetrics": {"completed": 120},
            },
            id="full-line",
        ),
        pytest.param([{"stage": "download"}], {"progress": {"stage": "download"}}, id="stage-only"),
        pytest.param(
            [{"completed": 10}, {"completed": 5}], {"progress": {"units": {"completed": 10}}}, id="never-backwards"
        ),
        pytest.param([{"completed": 7.0}], {"progress": {"units": {"completed": 7}}}, id="integral-float"),
        pytest.param([{"total": 10}, {"total": None}], {}, id="total-cleared"),
        pytest.param([{"total": 10}, {"total": 20}], {"progress": {"units": {"total": 20}}}, id="total-replanned"),
        pytest.param(
            [{"metrics": {"a": 1, "b": 2}}, {"metrics": {"b": 3, "c": "-1.5"}}],
            {"progress": {"metrics": {"a": "1", "b": "3", "c": "-1.5"}}},
            id="metrics-merge",
        ),
        pytest.param(
            [{"metrics": {"a": 1, "b": 2}}, {"metrics": {"a": None}}],
            {"progress": {"metrics": {"b": "2"}}},
            id="metric-removed",
        ),
        pytest.param(
            [
                {
                    "stage": "",
                    "completed": -1,
                    "total": "10",
                    "metrics": {
                        "1bad": 1,
                        "ok": True,
                        "nan": "NaN",
                        "text": "fast",
                        "x" * 65: 1,
                        "fine/name.x-1": 1e-05,
                    },
                }
            ],
            {"progress": {"metrics": {"fine/name.x-1": "1e-05"}}},
            id="bad-values-ignored-rest-applies",
        ),
        pytest.param(
            ["not json", "[1, 2]", '"train"', "", '{"stage": "ok", "unknown": 1}'],
            {"progress": {"stage": "ok"}},
            id="bad-lines-ignored",
        ),
        pytest.param(['{"stage": "big", "pad": "' + "x" * progress.MAX_LINE + '"}'], {}, id="line-over-64KiB-ignored"),
        pytest.param([{"completed": 2**31}], {}, id="completed-past-int32"),
    ],
)
def test_feed(lines: list[str | dict[str, Any]], snapshot: dict[str, Any]) -> None:
    got = fed(*lines).snapshot()
    got.get("unitMetrics", {}).pop("p50Ms", None)
    got.get("unitMetrics", {}).pop("p95Ms", None)
    if "progress" in snapshot and "units" in snapshot["progress"] and "completed" in snapshot["progress"]["units"]:
        snapshot = {**snapshot, "unitMetrics": {"completed": snapshot["progress"]["units"]["completed"]}}
    assert got == snapshot


def test_bad_lines_and_values_are_counted() -> None:
    tracker = fed("nope", "{}", {"completed": "x", "metrics": {"a": "b", "c": 1}})
    assert (tracker.ignored_lines, tracker.ignored_values) == (1, 2)


def test_at_most_64_metrics() -> None:
    tracker = fed({"metrics": {f"m{i}": i for i in range(100)}}, {"metrics": {"m0": 5}})
    assert len(tracker.metrics) == progress.MAX_METRICS
    assert tracker.metrics["m0"] == "5"
    assert "m64" not in tracker.metrics


def test_unit_times_from_successive_rises() -> None:
    tracker = progress.ProgressTracker()
    tracker.feed('{"completed": 0}', 100.0)  # start-up time before this does not count
    now = 100.0
    for units in range(10, 1001, 10):  # 100 rises of 10 units a second: 100 ms a unit
        now += 1.0
        tracker.feed(json.dumps({"completed": units}), now)
    assert tracker.snapshot()["unitMetrics"] == {"completed": 1000, "p50Ms": 100, "p95Ms": 100}
    for units in range(1001, 1011):  # then 10 rises of one unit a second
        now += 1.0
        tracker.feed(json.dumps({"completed": units}), now)
    assert tracker.snapshot()["unitMetrics"] == {"completed": 1010, "p50Ms": 100, "p95Ms": 1000}


def test_rises_read_together_fold_into_one_sample() -> None:
    tracker = progress.ProgressTracker()
    tracker.feed('{"completed": 0}', 0.0)
    for units in range(1, 51):
        tracker.feed(json.dumps({"completed": units}), 5.0)  # one read of the file at t=5 s
    for units in range(51, 101):
        tracker.feed(json.dumps({"completed": units}), 10.0)
    # t=5: 50 units since t=0 (100 ms each), the next 49 folded in; t=10: 50 units since t=5.
    assert tracker.snapshot()["unitMetrics"] == {"completed": 100, "p50Ms": 100, "p95Ms": 100}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reports:
    def __init__(self) -> None:
        self.snapshots: list[dict[str, Any]] = []

    async def __call__(self, snapshot: dict[str, Any]) -> None:
        self.snapshots.append(snapshot)


async def test_a_chatty_program_causes_few_reports(tmp_path: Path) -> None:
    path, clock, reports = tmp_path / "progress", FakeClock(), Reports()
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=1.0, clock=clock)
    started = clock.now
    with path.open("a") as out:
        for batch in range(100):  # 100,000 lines, 1,000 between polls, 50 ms of fake time per poll
            out.writelines(f'{{"completed": {batch * 1000 + i + 1}, "metrics": {{"i": {i}}}}}\n' for i in range(1000))
            out.flush()
            await watcher.poll()
            clock.now += 0.05
    await watcher.close()
    elapsed = clock.now - started
    assert len(reports.snapshots) <= elapsed / 1.0 + 2
    assert reports.snapshots[-1]["progress"]["units"] == {"completed": 100_000}
    assert reports.snapshots[-1]["unitMetrics"]["p50Ms"] == 0  # 50 ms over 1,000 units


async def test_unchanged_state_is_not_reported_again(tmp_path: Path) -> None:
    path, clock, reports = tmp_path / "progress", FakeClock(), Reports()
    path.write_text('{"stage": "train"}\n')
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=1.0, clock=clock)
    for _ in range(5):
        await watcher.poll()
        clock.now += 10
    await watcher.close()
    assert reports.snapshots == [{"progress": {"stage": "train"}}]


async def test_truncation_rotation_and_partial_lines(tmp_path: Path) -> None:
    path, clock, reports = tmp_path / "progress", FakeClock(), Reports()
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=0, clock=clock)
    await watcher.poll()  # no file yet
    path.write_text('{"stage": "one", "completed": 5}\n{"stage": "hal')
    await watcher.poll()
    assert watcher.tracker.stage == "one"
    path.write_text('{"stage": "two"}\n')  # truncated and rewritten, shorter
    await watcher.poll()
    assert watcher.tracker.stage == "two"
    (tmp_path / "next").write_text('{"stage": "three"}\n{"completed": 9}')
    (tmp_path / "next").rename(path)  # replaced
    await watcher.poll()
    assert watcher.tracker.stage == "three"
    await watcher.close()  # the unterminated last line counts once the program is done
    assert reports.snapshots[-1]["progress"] == {"stage": "three", "units": {"completed": 9}}


async def test_an_overlong_line_is_skipped_to_its_end(tmp_path: Path) -> None:
    path, reports = tmp_path / "progress", Reports()
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=0)
    with path.open("w") as out:
        out.write('{"stage": "' + "x" * (3 * progress.MAX_LINE))
        out.flush()
        await watcher.poll()
        out.write('"}\n{"stage": "after"}\n')
    await watcher.close()
    assert watcher.tracker.stage == "after"
    assert watcher.tracker.ignored_lines == 1


async def test_background_watcher_with_a_real_program(tmp_path: Path) -> None:
    path, reports = tmp_path / "progress", Reports()
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=0.2, poll_interval=0.01)
    program = (
        "import sys\n"
        "with open(sys.argv[1], 'a') as out:\n"
        "    for i in range(1, 100_001):\n"
        '        out.write(\'{"completed": %d, "metrics": {"loss": %f}}\\n\' % (i, 1 / i))\n'
    )
    started = time.monotonic()
    watcher.start()
    process = await asyncio.create_subprocess_exec(sys.executable, "-c", program, str(path))
    assert await process.wait() == 0
    await watcher.close()
    elapsed = time.monotonic() - started
    assert 1 <= len(reports.snapshots) <= elapsed / 0.2 + 2
    assert reports.snapshots[-1]["progress"]["units"] == {"completed": 100_000}
    assert reports.snapshots[-1]["progress"]["metrics"] == {"loss": "1e-05"}


async def test_a_progress_file_replaced_by_a_link_or_a_fifo_is_not_read(tmp_path: Path) -> None:
    # A host file that happens to be valid progress JSON, which a link would turn into the Job's status.
    (tmp_path / "host-file").write_text('{"cursor": "host secret"}\n')
    path, reports = tmp_path / "progress", Reports()
    path.symlink_to(tmp_path / "host-file")
    watcher = progress.ProgressFileWatcher(path, reports, min_interval=0)
    await watcher.poll()
    path.unlink()
    os.mkfifo(path)  # a blocking open would wait for a writer
    await asyncio.wait_for(watcher.poll(), 5)
    await watcher.close()
    assert watcher.tracker.cursor is None
    assert all("resumeCursor" not in snapshot for snapshot in reports.snapshots)
