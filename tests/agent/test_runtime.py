"""The agent's local runtimes, with real processes and real sandboxes (no mocks).

Every behaviour an attempt's owner would notice: output, environment, directories, how the program
ended, and what stop() and kill() do to the whole process tree. Bubblewrap-only tests skip, with
bwrap's own reason, only where bwrap cannot create namespaces (the ``sandbox`` fixture, conftest.py).
Egress and sidecars have files of their own (test_egress.py, test_sidecars.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nodus.agent import bubblewrap, runtime
from nodus.agent.layout import AttemptLayout

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Generous: a program that ignores SIGTERM is killed after it; one that honours it never waits it out.
LONG_GRACE = 120.0
# Only guards against a hang turning into a silent 5-minute timeout; never reached when things work.
HANG_GUARD = 120.0


# The interpreter by its real path: a virtualenv under /tmp is not visible in the sandbox's private /tmp.
REAL_PYTHON = os.path.realpath(sys.executable)


@pytest.fixture(params=["bubblewrap", "unsandboxed"])
def any_runtime(request: pytest.FixtureRequest) -> runtime.Runtime:
    if request.param == "bubblewrap":
        chosen: runtime.Runtime = request.getfixturevalue("sandbox")  # skips where bwrap cannot run
        return chosen
    return runtime.select_runtime("unsandboxed")


def make_spec(
    layout: AttemptLayout, *argv: str, env: dict[str, str] | None = None, working_dir: str = "/workspace"
) -> runtime.RunSpec:
    return runtime.RunSpec(argv=list(argv), env={"PATH": PATH, **(env or {})}, working_dir=working_dir, layout=layout)


def shell(
    layout: AttemptLayout, script: str, *, env: dict[str, str] | None = None, working_dir: str = "/workspace"
) -> runtime.RunSpec:
    return make_spec(layout, "/bin/sh", "-c", script, env=env, working_dir=working_dir)


@dataclass
class Finished:
    exit: runtime.Exit
    stdout: list[str]
    stderr: list[str]


async def drain(process: runtime.Process, lines: AsyncIterator[tuple[str, str]] | None = None) -> Finished:
    stdout: list[str] = []
    stderr: list[str] = []

    async def collect() -> None:
        async for stream, line in lines if lines is not None else process.lines():
            (stdout if stream == "stdout" else stderr).append(line)

    await asyncio.wait_for(collect(), HANG_GUARD)
    return Finished(await asyncio.wait_for(process.wait(), HANG_GUARD), stdout, stderr)


async def run(chosen: runtime.Runtime, spec: runtime.RunSpec) -> Finished:
    return await drain(await chosen.start(spec))


async def started_and_ready(
    chosen: runtime.Runtime, spec: runtime.RunSpec
) -> tuple[runtime.Process, AsyncIterator[tuple[str, str]]]:
    """Start a program that prints ``ready`` once its signal handling is in place, and wait for that line."""
    process = await chosen.start(spec)
    lines = process.lines()
    assert await asyncio.wait_for(anext(lines), HANG_GUARD) == ("stdout", "ready")
    return process, lines


def exited(code: int) -> runtime.Exit:
    return runtime.Exit(code=code, signal=None, oom_killed=False, stopped=False)


def killed(number: int, *, oom: bool = False, stopped: bool = False) -> runtime.Exit:
    return runtime.Exit(code=None, signal=number, oom_killed=oom, stopped=stopped)


# --- output, environment, directories -------------------------------------------------------------


async def test_output_lines_keep_order_and_stream(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    finished = await run(
        any_runtime, shell(layout, "echo hello; echo oops >&2; echo world; echo again >&2; printf tail")
    )

    assert finished.stdout == ["hello", "world", "tail"]
    assert finished.stderr == ["oops", "again"]
    assert finished.exit == exited(0)
    assert finished.exit.succeeded


async def test_a_line_longer_than_the_limit_arrives_in_pieces(
    any_runtime: runtime.Runtime, layout: AttemptLayout
) -> None:
    length = runtime.MAX_LINE_BYTES + 10
    finished = await run(any_runtime, shell(layout, f"head -c {length} /dev/zero | tr '\\0' a; echo; echo next"))

    assert finished.stdout == ["a" * runtime.MAX_LINE_BYTES, "a" * 10, "next"]


async def test_environment_is_exactly_the_given_one(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    contract = {
        "NODUS_INDEX": "3",
        "JOB_COMPLETION_INDEX": "3",
        "NODUS_JOB": "train",
        "NODUS_PROJECT": "vision",
        "NODUS_ATTEMPT": "train-3-1",
        "NODUS_ATTEMPT_NUMBER": "1",
        "NODUS_NODE": "node-a",
        "NODUS_OFFERING": "cpu-x1-us",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_VISIBLE_DEVICES": "",
        "LEARNING_RATE": "3e-4 with spaces",
    }
    finished = await run(any_runtime, make_spec(layout, "env", env=contract))

    assert sorted(finished.stdout) == sorted(f"{name}={value}" for name, value in {"PATH": PATH, **contract}.items())


async def test_sandbox_cwd_is_the_working_dir_backed_by_the_layout(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    finished = await run(sandbox, shell(layout, "pwd; echo kept > made-here", working_dir="/src/app"))

    assert finished.stdout == ["/src/app"]
    assert (layout.workdir / "made-here").read_text() == "kept\n"


async def test_unsandboxed_cwd_is_the_host_workdir(layout: AttemptLayout) -> None:
    finished = await run(runtime.select_runtime("unsandboxed"), shell(layout, "pwd -P"))

    assert finished.stdout == [str(layout.workdir.resolve())]


async def test_nodus_directories_inputs_read_only_the_rest_writable(
    sandbox: runtime.Runtime, layout: AttemptLayout
) -> None:
    (layout.inputs / "data.txt").write_text("payload\n")
    script = """
        cat /nodus/inputs/data.txt
        echo x > /nodus/inputs/new || echo inputs-refused
        mount -o remount,rw /nodus/inputs 2>/dev/null && echo remounted
        for dir in outputs state secrets scratch; do echo "$dir" > "/nodus/$dir/proof"; done
        echo x > /nodus/not-a-contract-dir || echo nodus-refused
    """
    finished = await run(sandbox, shell(layout, script))

    assert finished.stdout == ["payload", "inputs-refused", "nodus-refused"]
    assert not (layout.inputs / "new").exists()
    for directory in (layout.outputs, layout.state, layout.secrets, layout.scratch):
        assert (directory / "proof").read_text() == f"{directory.name}\n"
    assert finished.exit == exited(0)


async def test_sandbox_hides_other_attempts(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    other = AttemptLayout.create(layout.root, "other-0-1")
    (other.secrets / "token").write_text("not yours")
    finished = await run(sandbox, shell(layout, f"cat {other.secrets / 'token'} || echo hidden"))

    assert finished.stdout == ["hidden"]


async def test_sandbox_hides_the_agents_credentials(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    # Outside /tmp on purpose: the sandbox's /tmp is private anyway.
    secret_dir = Path(tempfile.mkdtemp(prefix="nodus-agent-creds-", dir=Path.home()))
    try:
        (secret_dir / "kubeconfig").write_text("token: admin")
        spec = dataclasses.replace(
            shell(layout, f"cat {secret_dir / 'kubeconfig'} || echo hidden"), hidden=(str(secret_dir),)
        )
        finished = await run(sandbox, spec)
    finally:
        shutil.rmtree(secret_dir)

    assert finished.stdout == ["hidden"]


async def test_sandbox_has_its_own_pid_namespace(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    finished = await run(sandbox, shell(layout, "echo $$; ls /proc"))

    own_pid, *listing = finished.stdout
    visible = {int(name) for name in listing if name.isdigit()}
    assert int(own_pid) < 10
    assert visible and max(visible) < 10
    assert os.getpid() not in visible


async def test_read_only_mount_is_readable_not_writable(
    sandbox: runtime.Runtime, layout: AttemptLayout, tmp_path: Path
) -> None:
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "train.csv").write_text("a,b\n")
    spec = dataclasses.replace(
        shell(layout, "cat /data/train.csv; echo x > /data/new || echo refused"),
        mounts=(runtime.Mount(source=dataset, target="/data", read_only=True),),
    )
    finished = await run(sandbox, spec)

    assert finished.stdout == ["a,b", "refused"]
    assert not (dataset / "new").exists()


async def test_read_write_mount_is_shared_with_the_host(
    sandbox: runtime.Runtime, layout: AttemptLayout, tmp_path: Path
) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    spec = dataclasses.replace(
        shell(layout, "echo written > /volumes/cache/result"),
        mounts=(runtime.Mount(source=volume, target="/volumes/cache", read_only=False),),
    )
    finished = await run(sandbox, spec)

    assert finished.exit == exited(0)
    assert (volume / "result").read_text() == "written\n"


async def test_a_host_file_can_be_mounted_and_mounts_nest_in_the_working_dir(
    sandbox: runtime.Runtime, layout: AttemptLayout, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("lr: 0.1\n")
    spec = dataclasses.replace(
        shell(layout, "cat /workspace/conf/config.yaml; pwd"),
        mounts=(runtime.Mount(source=config, target="/workspace/conf/config.yaml", read_only=True),),
    )
    finished = await run(sandbox, spec)

    assert finished.stdout == ["lr: 0.1", "/workspace"]


@pytest.mark.parametrize(
    ("target", "why"),
    [
        pytest.param("data", "absolute path", id="relative"),
        pytest.param("/", "absolute path below /", id="root"),
        pytest.param("/data/../etc", "absolute path", id="dot-dot"),
        pytest.param("/proc/self", "outside", id="under-proc"),
        pytest.param("/dev", "outside", id="dev"),
        pytest.param("/nodus/inputs", "outside", id="under-nodus"),
        pytest.param("/workspace", "already the working directory", id="the-working-dir"),
    ],
)
async def test_mount_targets_the_sandbox_owns_are_refused(
    sandbox: runtime.Runtime, layout: AttemptLayout, tmp_path: Path, target: str, why: str
) -> None:
    spec = dataclasses.replace(
        shell(layout, "true"), mounts=(runtime.Mount(source=tmp_path, target=target, read_only=True),)
    )

    with pytest.raises(runtime.StartFailed, match=why):
        await sandbox.start(spec)


async def test_a_missing_mount_source_is_refused(
    sandbox: runtime.Runtime, layout: AttemptLayout, tmp_path: Path
) -> None:
    spec = dataclasses.replace(
        shell(layout, "true"), mounts=(runtime.Mount(source=tmp_path / "absent", target="/data", read_only=True),)
    )

    with pytest.raises(runtime.StartFailed, match="not an existing host path"):
        await sandbox.start(spec)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param(
            {"mounts": (runtime.Mount(source=Path("/"), target="/data", read_only=True),)},
            "mounts need the bubblewrap runtime",
            id="mounts",
        ),
        pytest.param({"egress": runtime.Egress(policy="Deny")}, "Deny needs the bubblewrap runtime", id="deny"),
        pytest.param(
            {"egress": runtime.Egress(policy="AllowList", allow=("pypi.org",))},
            "AllowList needs the bubblewrap runtime.*cannot enforce it",
            id="allow-list",
        ),
        pytest.param(
            {"sidecars": (runtime.Sidecar(name="proxy", argv=["true"], env={}),)},
            "sidecars need the bubblewrap runtime",
            id="sidecars",
        ),
    ],
)
async def test_unsandboxed_refuses_what_needs_a_sandbox(
    layout: AttemptLayout, change: dict[str, Any], why: str
) -> None:
    spec = dataclasses.replace(shell(layout, "true"), **change)

    with pytest.raises(runtime.StartFailed, match=why):
        await runtime.select_runtime("unsandboxed").start(spec)


# --- how it ended ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param("exit 3", exited(3), id="exit-3"),
        pytest.param("exit 137", exited(137), id="exit-137-is-not-a-signal"),
        pytest.param("kill -TERM $$", killed(signal.SIGTERM), id="own-sigterm"),
        # The OOM rule: a SIGKILL the agent did not send is the kernel's OOM killer.
        pytest.param("kill -KILL $$", killed(signal.SIGKILL, oom=True), id="foreign-sigkill-is-oom"),
    ],
)
async def test_exit_is_reported_exactly(
    any_runtime: runtime.Runtime, layout: AttemptLayout, script: str, expected: runtime.Exit
) -> None:
    finished = await run(any_runtime, shell(layout, script))

    assert finished.exit == expected
    assert not finished.exit.succeeded


async def test_command_that_cannot_run_fails_to_start(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    with pytest.raises(runtime.StartFailed, match="nodus-no-such-command"):
        await any_runtime.start(make_spec(layout, "nodus-no-such-command"))


async def test_sandbox_that_cannot_be_set_up_fails_to_start(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    # /usr is the host's, read-only: a working directory cannot be created below it.
    with pytest.raises(runtime.StartFailed, match="sandbox could not be set up: bwrap"):
        await sandbox.start(shell(layout, "true", working_dir="/usr/nodus-no-such-dir"))


@pytest.mark.parametrize(
    ("argv", "working_dir"),
    [
        pytest.param([], "/workspace", id="empty-command"),
        pytest.param(["true"], "workspace", id="relative-working-dir"),
        pytest.param(["true"], "/", id="root-working-dir"),
        pytest.param(["true"], "/nodus/outputs", id="working-dir-in-nodus"),
    ],
)
async def test_spec_no_runtime_can_honour_is_refused(
    any_runtime: runtime.Runtime, layout: AttemptLayout, argv: list[str], working_dir: str
) -> None:
    with pytest.raises(runtime.StartFailed):
        await any_runtime.start(runtime.RunSpec(argv=argv, env={"PATH": PATH}, working_dir=working_dir, layout=layout))


async def test_leftover_processes_end_with_the_program(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    # The background sleep holds stdout open: lines() ends only because it is killed.
    finished = await run(any_runtime, shell(layout, "sleep 1000 & echo left-behind"))

    assert finished.stdout == ["left-behind"]
    assert finished.exit == exited(0)


# --- stop and kill --------------------------------------------------------------------------------


async def test_stop_lets_a_program_that_traps_term_exit_cleanly(
    any_runtime: runtime.Runtime, layout: AttemptLayout
) -> None:
    script = "trap 'echo saving; exit 0' TERM; echo ready; while :; do sleep 0.1; done"
    process, lines = await started_and_ready(any_runtime, shell(layout, script))

    stopped = await process.stop(grace_seconds=LONG_GRACE)
    finished = await drain(process, lines)

    assert stopped == runtime.Exit(code=0, signal=None, oom_killed=False, stopped=True)
    assert not stopped.succeeded
    assert finished.stdout == ["saving"]


async def test_stop_kills_a_program_that_ignores_term_after_the_grace(
    any_runtime: runtime.Runtime, layout: AttemptLayout
) -> None:
    process, lines = await started_and_ready(
        any_runtime, shell(layout, "trap '' TERM; echo ready; while :; do sleep 0.1; done")
    )

    stopped = await process.stop(grace_seconds=0.2)
    await drain(process, lines)

    assert stopped == killed(signal.SIGKILL, stopped=True)


async def test_stop_reaches_processes_that_left_the_session(sandbox: runtime.Runtime, layout: AttemptLayout) -> None:
    child = (
        "import pathlib, signal, sys, time\n"
        "def on_term(*_):\n"
        "    pathlib.Path('/nodus/outputs/child-got-term').write_text('yes')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(1)\n"
    )
    # The program ignores SIGTERM and waits for a child in a session of its own.
    script = f"trap '' TERM; setsid -w {REAL_PYTHON} -c \"$CHILD\" & wait"
    process, lines = await started_and_ready(sandbox, shell(layout, script, env={"CHILD": child}))

    stopped = await process.stop(grace_seconds=LONG_GRACE)
    await drain(process, lines)

    assert stopped == runtime.Exit(code=0, signal=None, oom_killed=False, stopped=True)
    assert (layout.outputs / "child-got-term").read_text() == "yes"


async def test_kill_is_immediate_and_not_oom(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    process, lines = await started_and_ready(any_runtime, shell(layout, "trap 'exit 0' TERM; echo ready; sleep 1000"))

    ended = await process.kill()
    await drain(process, lines)

    assert ended == killed(signal.SIGKILL, stopped=True)


async def test_stop_is_idempotent_and_concurrent_calls_agree(
    any_runtime: runtime.Runtime, layout: AttemptLayout
) -> None:
    process, lines = await started_and_ready(
        any_runtime, shell(layout, "trap 'exit 5' TERM; echo ready; while :; do sleep 0.1; done")
    )

    first, second = await asyncio.gather(process.stop(LONG_GRACE), process.stop(LONG_GRACE))
    again = await process.stop(LONG_GRACE)
    after_kill = await process.kill()
    await drain(process, lines)

    assert first == second == again == after_kill == runtime.Exit(code=5, signal=None, oom_killed=False, stopped=True)


async def test_stop_after_the_end_changes_nothing(any_runtime: runtime.Runtime, layout: AttemptLayout) -> None:
    process = await any_runtime.start(shell(layout, "exit 0"))
    finished = await drain(process)

    assert await process.stop(LONG_GRACE) == finished.exit == exited(0)
    assert await process.kill() == exited(0)


LIMIT = runtime.MAX_LINE_BYTES


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        pytest.param(b"one\n\nthree", ["one", "", "three"], id="empty-line-and-partial-last"),
        pytest.param(b"a" * LIMIT + b"\n", ["a" * LIMIT], id="exactly-the-limit"),
        pytest.param(b"a" * (LIMIT + 10) + b"\nnext\n", ["a" * LIMIT, "a" * 10, "next"], id="newline-after-a-read"),
        pytest.param(b"a" * (2 * LIMIT) + b"\n", ["a" * LIMIT, "a" * LIMIT], id="twice-the-limit"),
        pytest.param(b"caf\xc3\xa9 \xff\n", ["caf\u00e9 \ufffd"], id="not-utf-8"),
    ],
)
async def test_lines_are_cut_at_newlines_and_at_the_limit(output: bytes, expected: list[str]) -> None:
    reader = asyncio.StreamReader()
    reader.feed_data(output)
    reader.feed_eof()

    assert [line async for _, line in runtime.merged_lines({"stdout": reader})] == expected


# --- selection, exit model, layout ----------------------------------------------------------------


def test_select_runtime_by_name() -> None:
    assert runtime.select_runtime("unsandboxed").name == "unsandboxed"
    with pytest.raises(ValueError, match="auto, podman, bubblewrap or unsandboxed"):
        runtime.select_runtime("docker")


def test_auto_selects_podman_where_it_works(tmp_path: Path) -> None:
    """Jobs run in their images by default; the host's filesystem only when an operator names bubblewrap."""
    assert runtime.select_runtime("auto", tmp_path).name == "podman"
    assert runtime.select_runtime("bubblewrap").name == "bubblewrap"


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    bubblewrap._probe.cache_clear()
    yield
    bubblewrap._probe.cache_clear()


@pytest.mark.usefixtures("fresh_probe")
def test_auto_without_podman_says_how_to_get_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))

    with pytest.raises(
        runtime.RuntimeUnavailable, match=r"podman not found.*install-system-packages.*--runtime bubblewrap"
    ):
        runtime.select_runtime("auto", tmp_path)


@pytest.mark.parametrize(
    ("returncode", "agent_killed", "expected"),
    [
        pytest.param(0, False, exited(0), id="exit-0"),
        pytest.param(2, False, exited(2), id="exit-2"),
        pytest.param(-signal.SIGTERM, False, killed(signal.SIGTERM), id="sigterm"),
        pytest.param(-signal.SIGKILL, False, killed(signal.SIGKILL, oom=True), id="foreign-sigkill"),
        pytest.param(-signal.SIGKILL, True, killed(signal.SIGKILL), id="agent-sigkill"),
    ],
)
def test_exit_from_returncode(returncode: int, agent_killed: bool, expected: runtime.Exit) -> None:
    assert runtime.Exit.from_returncode(returncode, stop_requested=False, agent_killed=agent_killed) == expected


def test_exit_reads_well() -> None:
    assert str(exited(3)) == "exited with code 3"
    assert str(killed(signal.SIGKILL, oom=True)) == "killed by signal 9 (SIGKILL), by the out-of-memory killer"
    assert str(killed(signal.SIGKILL, stopped=True)) == "killed by signal 9 (SIGKILL) after the agent stopped it"


def test_layout_creates_the_contract_directories_idempotently(tmp_path: Path) -> None:
    layout = AttemptLayout.create(tmp_path, "train-0-1")
    (layout.state / "checkpoint").write_text("step 10")
    again = AttemptLayout.create(tmp_path, "train-0-1")

    assert again == layout
    assert [path.name for path in (layout.inputs, layout.outputs, layout.state, layout.secrets, layout.scratch)] == [
        "inputs",
        "outputs",
        "state",
        "secrets",
        "scratch",
    ]
    assert all(path.is_dir() for path in (layout.nodus_dir, layout.workdir))
    assert (again.state / "checkpoint").read_text() == "step 10"
    assert layout.secrets.stat().st_mode & 0o777 == 0o700

    layout.remove()
    layout.remove()
    assert not layout.directory.exists()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x\0y"])
def test_layout_refuses_names_that_are_not_one_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="not a valid attempt directory name"):
        AttemptLayout.create(tmp_path, name)
