"""The checkpoint protocol's pure parts: the cadence, the environment, the policy, and asking the program."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from nodus.agent import checkpointing, hostfiles
from nodus.agent.layout import AttemptLayout
from nodus.agent.snapshots import Mirror
from nodus.client import Client

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("cost", "mtbi", "complete_by", "expected"),
    [
        pytest.param(30, timedelta(hours=6), None, timedelta(seconds=1138), id="young-daly"),
        pytest.param(30, timedelta(days=7), None, timedelta(seconds=6024), id="on-demand"),
        pytest.param(1, timedelta(minutes=10), None, timedelta(minutes=1), id="at-least-1m"),
        pytest.param(600, timedelta(days=30), None, timedelta(hours=6), id="at-most-6h"),
        pytest.param(30, timedelta(hours=6), NOW + timedelta(minutes=40), timedelta(minutes=10), id="nearing-deadline"),
        pytest.param(30, timedelta(hours=6), NOW + timedelta(minutes=2), timedelta(minutes=1), id="deadline-floor"),
    ],
)
def test_auto_interval(cost: int, mtbi: timedelta, complete_by: datetime | None, expected: timedelta) -> None:
    assert checkpointing.auto_interval(timedelta(seconds=cost), mtbi, NOW, complete_by) == expected


def policy(tmp_path: Path, **checkpoint: Any) -> checkpointing.Policy | None:
    spec = {"recovery": {"continuity": "Checkpointed", "checkpoint": checkpoint}}
    return checkpointing.Policy.of(spec, lambda path: tmp_path / path.strip("/") if path.startswith("/nodus") else None)


def test_policy_resolves_paths_and_sizes(tmp_path: Path) -> None:
    resolved = policy(tmp_path, paths=["/nodus/state", "/nodus/scratch/ckpt"], maxSize="2Gi", format="Dcp")
    assert resolved is not None
    assert {path: location.host for path, location in resolved.roots.items()} == {
        "/nodus/state": tmp_path / "nodus/state",
        "/nodus/scratch/ckpt": tmp_path / "nodus/scratch/ckpt",
    }
    assert resolved.max_size == 2 * 1024**3 and resolved.format == "Dcp" and resolved.interval == "auto"
    with pytest.raises(checkpointing.CheckpointError, match="/tmp/x is not on a directory that outlives"):
        policy(tmp_path, paths=["/tmp/x"])
    assert checkpointing.Policy.of({"recovery": {"continuity": "Ephemeral"}}, lambda p: None) is None


def test_environment_tells_the_program_the_protocol(tmp_path: Path) -> None:
    resolved = policy(tmp_path)
    spec = {"restore": {"seq": 4, "manifest": "sha256:" + "a" * 64}, "resumeCursor": "row-9"}
    env = checkpointing.environment(spec, resolved)
    assert env["NODUS_CHECKPOINT_DIR"] == "/nodus/state"
    assert env["NODUS_CHECKPOINT_REQUEST_FILE"] == "/nodus/checkpoint/request"
    assert env["NODUS_CHECKPOINT_ACK_FILE"] == "/nodus/checkpoint/ack"
    assert env["NODUS_RESTORED_SEQ"] == "4" and env["NODUS_RESUME_CURSOR"] == "row-9"


async def test_a_late_ack_makes_the_agent_wait_for_acks_again(tmp_path: Path) -> None:
    layout = AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    resolved = policy(tmp_path)
    assert resolved is not None
    attempt = {"metadata": {"name": "train-0-1", "namespace": "p"}, "spec": {"job": "train", "index": 0}}
    # 1/1000 of real time: the first ack wait is 30 ms, the later ones 600 ms.
    checkpointer = checkpointing.Checkpointer(
        cast(Client, None), attempt, layout, resolved, mtbi=None, time_scale=0.001
    )
    assert not await checkpointer._ask(1, "Interval", None)
    assert (layout.checkpoint / "request").read_bytes().startswith(b'{"seq":1')
    started = asyncio.get_running_loop().time()
    assert not await checkpointer._ask(2, "Interval", None)  # unanswered before: no wait
    assert asyncio.get_running_loop().time() - started < 0.02
    (layout.checkpoint / "ack").write_text("1")  # the program answers the first request, late

    async def answer() -> None:
        await asyncio.sleep(0.1)
        (layout.checkpoint / "ack").write_text('{"seq": 3}')

    answering = asyncio.create_task(answer())
    assert await checkpointer._ask(3, "Requested", None)
    await answering


def checkpointer_of(tmp_path: Path) -> tuple[checkpointing.Checkpointer, AttemptLayout]:
    layout = AttemptLayout.create(tmp_path / "attempts", "train-0-1")
    resolved = policy(tmp_path)
    assert resolved is not None
    attempt = {"metadata": {"name": "train-0-1", "namespace": "p"}, "spec": {"job": "train", "index": 0}}
    return checkpointing.Checkpointer(
        cast(Client, None), attempt, layout, resolved, mtbi=None, time_scale=0.001
    ), layout


async def test_links_planted_in_the_checkpoint_directory_are_never_followed(tmp_path: Path) -> None:
    checkpointer, layout = checkpointer_of(tmp_path)
    canary, answer = tmp_path / "host-file", tmp_path / "host-number"
    canary.write_text("host file")
    answer.write_text("99")
    # The program plants links where the agent writes and reads its control files (ADR 0031).
    for name in ("request", ".request.tmp"):
        (layout.checkpoint / name).symlink_to(canary)
    (layout.checkpoint / "ack").symlink_to(answer)
    (layout.checkpoint / "signal").symlink_to(tmp_path / "host-signal")
    (tmp_path / "host-signal").write_text("SIGUSR1")
    assert not await checkpointer._ask(1, "Interval", None)  # an ack read through a link is no answer
    assert canary.read_text() == "host file"
    assert not (layout.checkpoint / "request").is_symlink()
    assert (layout.checkpoint / "request").read_bytes().startswith(b'{"seq":1')
    assert checkpointer._signal_number() is None
    checkpointer._clear_request()
    assert not (layout.checkpoint / "request").exists() and canary.exists()


async def test_a_fifo_or_directory_in_the_checkpoint_directory_cannot_hang_or_stop_the_agent(tmp_path: Path) -> None:
    checkpointer, layout = checkpointer_of(tmp_path)
    os.mkfifo(layout.checkpoint / "ack")  # a blocking read of a fifo waits for a writer: forever
    os.mkfifo(layout.checkpoint / "signal")
    (layout.checkpoint / "request").mkdir()
    assert not await asyncio.wait_for(checkpointer._ask(1, "Interval", None), 5)
    assert checkpointer._ack_seq() is None and checkpointer._signal_number() is None
    checkpointer._clear_request()  # a directory there is left alone, not an error


def test_a_checkpoint_path_through_a_link_is_refused_not_copied(tmp_path: Path) -> None:
    workdir = tmp_path / "workdir"
    (tmp_path / "host" / "etc").mkdir(parents=True)
    (tmp_path / "host" / "etc" / "shadow").write_text("host secret")
    workdir.mkdir()
    (workdir / "run").symlink_to(tmp_path / "host")  # the Job checkpoints /workspace/run/etc
    spec = {"recovery": {"continuity": "Checkpointed", "checkpoint": {"paths": ["/workspace/run/etc"]}}}
    resolved = checkpointing.Policy.of(
        spec, lambda path: hostfiles.Location(workdir, tuple(path.split("/")[2:]), "/workspace")
    )
    assert resolved is not None
    mirror = Mirror(tmp_path / "mirror", resolved.roots)
    with pytest.raises(hostfiles.UnsafePath, match=r"^/workspace/run is a symbolic link"):
        mirror.stage(1 << 30)
    assert list(mirror.files.iterdir()) == []
