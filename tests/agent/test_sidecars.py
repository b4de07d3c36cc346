"""Sidecars in a real sandbox: started and ready before the program, ended after it, never holding it.

Whether a process is still there is checked on the host, by a marker in its command line, so the
assertion does not depend on anything inside the (gone) sandbox.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from nodus.agent import runtime
from nodus.agent.layout import AttemptLayout

pytestmark = pytest.mark.integration  # real programs and engines: left out of `make test-fast`

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REAL_PYTHON = os.path.realpath(sys.executable)
# Only guards against a hang; never reached when things work.
HANG_GUARD = 120.0
LONG_GRACE = 120.0


def sidecar(name: str, script: str, *, startup_timeout: float = 300.0) -> runtime.Sidecar:
    return runtime.Sidecar(
        name=name, argv=["/bin/sh", "-c", script], env={"PATH": PATH}, startup_timeout=startup_timeout
    )


def with_sidecars(layout: AttemptLayout, script: str, *sidecars: runtime.Sidecar) -> runtime.RunSpec:
    return runtime.RunSpec(
        argv=["/bin/sh", "-c", script],
        env={"PATH": PATH},
        working_dir="/workspace",
        layout=layout,
        sidecars=sidecars,
    )


async def everything(process: runtime.Process) -> tuple[list[tuple[str, str]], runtime.Exit]:
    lines = await asyncio.wait_for(drained(process.lines()), HANG_GUARD)
    return lines, await asyncio.wait_for(process.wait(), HANG_GUARD)


async def drained(lines: AsyncIterator[tuple[str, str]]) -> list[tuple[str, str]]:
    return [item async for item in lines]


def running_with(marker: str) -> list[int]:
    """Host pids whose command line contains ``marker``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile
    return found


def exited(code: int, *, stopped: bool = False) -> runtime.Exit:
    return runtime.Exit(code=code, signal=None, oom_killed=False, stopped=stopped)


@pytest.mark.parametrize(
    "ignores_term", [pytest.param(False, id="honours-term"), pytest.param(True, id="ignores-term")]
)
async def test_a_sidecar_that_runs_forever_does_not_hold_the_attempt(
    sandbox: runtime.Runtime, layout: AttemptLayout, ignores_term: bool
) -> None:
    marker = f"nodus-sidecar-{uuid.uuid4()}"
    forever = "import signal, time\n" + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignores_term else "")
    forever += "open('/nodus/run/ready/forever', 'w').close()\nwhile True: time.sleep(1)\n"
    spec = with_sidecars(
        layout,
        "echo done",
        runtime.Sidecar(name="forever", argv=[REAL_PYTHON, "-c", forever, marker], env={}),
    )

    lines, ended = await everything(await sandbox.start(spec))

    assert ended == exited(0)
    assert ("stdout", "done") in lines
    assert running_with(marker) == []


async def test_sidecar_output_arrives_under_its_own_stream_names(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = with_sidecars(
        layout,
        "echo main-out; echo main-err >&2",
        sidecar("logs", 'echo side-out; echo side-err >&2; touch "$NODUS_READY_FILE"; exec sleep 1000'),
    )

    lines, ended = await everything(await sandbox.start(spec))

    assert sorted(lines) == [
        ("sidecar/logs/stderr", "side-err"),
        ("sidecar/logs/stdout", "side-out"),
        ("stderr", "main-err"),
        ("stdout", "main-out"),
    ]
    assert ended == exited(0)


async def test_a_sidecar_that_exits_before_it_is_ready_fails_the_start(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = with_sidecars(
        layout,
        "echo never > /nodus/outputs/main-ran",
        sidecar("healthy", 'touch "$NODUS_READY_FILE"; exec sleep 1000'),
        sidecar("broken", "echo cannot bind the port >&2; exit 1"),
    )

    why = r"exited with code 1 before it was ready \(it said: cannot bind the port\)"
    with pytest.raises(runtime.StartFailed, match=f"sidecar broken failed to start: {why}"):
        await sandbox.start(spec)
    assert not (layout.outputs / "main-ran").exists()


async def test_a_sidecar_that_cannot_be_executed_fails_the_start(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = with_sidecars(
        layout, "true", runtime.Sidecar(name="missing", argv=["nodus-no-such-sidecar"], env={"PATH": PATH})
    )

    with pytest.raises(
        runtime.StartFailed, match="sidecar missing failed to start: cannot run 'nodus-no-such-sidecar'"
    ):
        await sandbox.start(spec)


async def test_a_sidecar_that_touches_its_ready_file_is_ready_before_the_two_second_rule(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    # The timeout is below the 2-second rule, so only the ready file can make this sidecar ready in time.
    spec = with_sidecars(
        layout,
        "test -e /nodus/run/ready/db && echo db-was-ready",
        sidecar("db", 'touch "$NODUS_READY_FILE"; exec sleep 1000', startup_timeout=1.5),
    )

    lines, ended = await everything(await sandbox.start(spec))

    assert ("stdout", "db-was-ready") in lines
    assert ended == exited(0)


async def test_a_sidecar_not_ready_in_time_fails_the_start(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    spec = with_sidecars(layout, "true", sidecar("slow", "exec sleep 1000", startup_timeout=0.2))

    with pytest.raises(runtime.StartFailed, match=r"sidecar slow failed to start: was not ready within 0.2 s"):
        await sandbox.start(spec)


async def test_a_sidecar_without_a_ready_file_is_ready_once_it_keeps_running(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = with_sidecars(layout, "echo main", sidecar("quiet", "exec sleep 1000"))

    lines, ended = await everything(await sandbox.start(spec))

    assert lines == [("stdout", "main")]
    assert ended == exited(0)


async def test_sidecars_start_in_order_each_ready_before_the_next(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    spec = with_sidecars(
        layout,
        "true",
        sidecar("first", 'touch "$NODUS_READY_FILE"; exec sleep 1000'),
        sidecar("second", "test -e /nodus/run/ready/first && echo first-was-ready; exec sleep 1000"),
    )

    lines, _ = await everything(await sandbox.start(spec))

    assert lines == [("sidecar/second/stdout", "first-was-ready")]


async def test_a_sidecar_that_dies_does_not_stop_the_program(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    # The sidecar leaves once the program has started; the program waits for it to be gone, then finishes.
    spec = with_sidecars(
        layout,
        "touch /nodus/run/go; while kill -0 $(cat /nodus/run/pid) 2>/dev/null; do sleep 0.05; done; echo outlived",
        sidecar(
            "flaky",
            'echo $$ > /nodus/run/pid; touch "$NODUS_READY_FILE"; until test -e /nodus/run/go; do :; done; exit 3',
        ),
    )

    lines, ended = await everything(await sandbox.start(spec))

    assert ("stdout", "outlived") in lines
    assert ended == exited(0)


async def test_stop_ends_the_program_first_and_the_sidecars_after_it(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    # The program checks, in its TERM handler, that its sidecar is still there to help it save.
    script = (
        "trap 'kill -0 $(cat /nodus/run/pid) && echo sidecar-still-up; exit 0' TERM; "
        # On a loaded machine the sidecar may be ready by the 2 s rule before it wrote its pid.
        "while [ ! -s /nodus/run/pid ]; do sleep 0.05; done; echo ready; while :; do sleep 0.1; done"
    )
    helper = (
        "trap 'echo stopped > /nodus/outputs/sidecar-stopped; exit 0' TERM; "
        'echo $$ > /nodus/run/pid; touch "$NODUS_READY_FILE"; while :; do sleep 0.1; done'
    )
    process = await sandbox.start(with_sidecars(layout, script, sidecar("helper", helper)))
    lines = process.lines()
    assert await asyncio.wait_for(anext(lines), HANG_GUARD) == ("stdout", "ready")

    stopped = await process.stop(grace_seconds=LONG_GRACE)
    rest = await asyncio.wait_for(drained(lines), HANG_GUARD)

    assert stopped == exited(0, stopped=True)
    assert ("stdout", "sidecar-still-up") in rest
    assert (layout.outputs / "sidecar-stopped").read_text() == "stopped\n"


async def test_kill_reaches_the_sidecars(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    marker = f"nodus-sidecar-{uuid.uuid4()}"
    process = await sandbox.start(
        with_sidecars(
            layout,
            "echo ready; sleep 1000",
            runtime.Sidecar(
                name="stubborn",
                argv=[REAL_PYTHON, "-c", "import signal, time\nsignal.signal(15, 1)\ntime.sleep(1000)", marker],
                env={},
            ),
        )
    )
    lines = process.lines()
    assert await asyncio.wait_for(anext(lines), HANG_GUARD) == ("stdout", "ready")

    ended = await process.kill()
    await asyncio.wait_for(drained(lines), HANG_GUARD)

    assert ended == runtime.Exit(code=None, signal=signal.SIGKILL, oom_killed=False, stopped=True)
    assert running_with(marker) == []


@pytest.mark.parametrize(
    ("sidecars", "why"),
    [
        pytest.param((sidecar("Bad Name", "true"),), "sidecar name 'Bad Name'", id="name"),
        pytest.param((sidecar("twin", "true"), sidecar("twin", "true")), "used twice", id="duplicate"),
        pytest.param((runtime.Sidecar(name="empty", argv=[], env={}),), "sidecar empty is empty", id="empty-command"),
        pytest.param((sidecar("zero", "true", startup_timeout=0),), "must be positive", id="timeout"),
    ],
)
async def test_sidecars_no_runtime_can_honour_are_refused(
    sandbox: runtime.Runtime, layout: AttemptLayout, sidecars: tuple[runtime.Sidecar, ...], why: str
) -> None:
    with pytest.raises(runtime.StartFailed, match=why):
        await sandbox.start(with_sidecars(layout, "true", *sidecars))
